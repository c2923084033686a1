"""zoo.envs against real envpool and gymnasium environments (no mocks).

The envpool facts these tests pin down are written up in ``zoo/envs/__init__.py``: next-step
autoreset, the life-loss pseudo-step, the frame stack at a game start (the first frame repeated)
and across a life loss (not reset), and truncation at the frame cap.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import zoo.envs as ze
from zoo.envs import TimeStep

# CartPole-v1 ends when |angle| > 12 degrees or |x| > 2.4.
ANGLE_LIMIT = 12 * 2 * np.pi / 360
X_LIMIT = 2.4


def run_until(env: ze.VectorEnv, predicate, actions, max_steps: int = 2000):
    """Step until ``predicate(timestep)``; returns (previous timestep, that timestep)."""
    prev = env.reset()
    for _ in range(max_steps):
        timestep = env.step(actions(prev))
        if predicate(timestep):
            return prev, timestep
        prev = timestep
    raise AssertionError("the condition was never met")


def constant(action: int, n: int = 1):
    return lambda _: np.full(n, action, np.int32)


def random_actions(env: ze.VectorEnv, seed: int = 0):
    rng = np.random.default_rng(seed)
    return lambda _: rng.integers(0, env.num_actions, env.num_envs).astype(np.int32)


# --------------------------------------------------------------------------------------------
# Protocols


def test_protocol_fields_have_no_defaults_and_every_protocol_is_registered():
    for field in dataclasses.fields(ze.Protocol):
        assert field.default is dataclasses.MISSING, field.name
        assert field.default_factory is dataclasses.MISSING, field.name
    assert set(ze.protocol_names()) == {
        "nature_2015",
        "machado_2018",
        "atari_100k",
        "r2d2_2019",
        "classic",
        "minatar",
    }
    for name, protocol in ze.PROTOCOLS.items():
        assert protocol.name == name
        assert ze.get_protocol(name) is protocol
        assert ze.get_protocol(protocol) is protocol
        assert protocol.to_dict()["name"] == name
        assert protocol.sources and protocol.description


def test_protocol_values():
    nature = ze.get_protocol("nature_2015")
    assert (nature.noop_max, nature.sticky_action_prob, nature.full_action_set) == (30, 0.0, False)
    assert (nature.frame_skip, nature.stack, nature.frame_shape) == (4, 4, (84, 84))
    assert nature.max_episode_frames == 108_000 and nature.max_episode_steps == 27_000
    assert (nature.reward_clip, nature.eval_epsilon) == (1.0, 0.05)
    machado = ze.get_protocol("machado_2018")
    assert machado.sticky_action_prob == 0.25 and machado.full_action_set is True
    assert machado.noop_max == 0
    assert not machado.episodic_life_train and machado.eval_epsilon == 0.001
    r2d2 = ze.get_protocol("r2d2_2019")  # no stack, no life loss, no sticky actions, no clip
    assert (r2d2.stack, r2d2.episodic_life_train, r2d2.sticky_action_prob) == (1, False, 0.0)
    assert (r2d2.reward_clip, r2d2.eval_epsilon, r2d2.max_episode_steps) == (None, 0.0, 27_000)
    assert r2d2.envpool_kwargs(training=True)["stack_num"] == 1
    classic = ze.get_protocol("classic")
    assert classic.reward_clip is None and classic.eval_epsilon == 0.0
    assert classic.frame_shape is None and classic.max_episode_frames is None


def test_envpool_kwargs_per_protocol():
    nature = ze.get_protocol("nature_2015")
    train, evaluation = nature.envpool_kwargs(training=True), nature.envpool_kwargs(training=False)
    assert train["noop_max"] == 30 and train["episodic_life"] is True
    assert evaluation["episodic_life"] is False and evaluation["noop_max"] == 30
    assert train["repeat_action_probability"] == 0.0 and train["full_action_space"] is False
    assert train["max_episode_steps"] == 27_000 and train["frame_skip"] == 4
    assert train["stack_num"] == 4 and (train["img_height"], train["img_width"]) == (84, 84)
    assert train["reward_clip"] is False and train["use_fire_reset"] is False
    assert {k: v for k, v in train.items() if k != "episodic_life"} == {
        k: v for k, v in evaluation.items() if k != "episodic_life"
    }
    machado = ze.get_protocol("machado_2018").envpool_kwargs(training=True)
    assert machado["repeat_action_probability"] == 0.25 and machado["full_action_space"] is True
    assert machado["episodic_life"] is False
    assert machado["noop_max"] == 1  # envpool cannot do 0 no-ops: one fixed no-op frame
    atari_100k = ze.get_protocol("atari_100k").envpool_kwargs(training=True)
    assert atari_100k["episodic_life"] is True and atari_100k["repeat_action_probability"] == 0.0
    assert ze.get_protocol("classic").envpool_kwargs(training=True) == {}
    assert ze.get_protocol("minatar").gymnasium_kwargs(training=True) == {
        "sticky_action_prob": 0.1,
        "use_minimal_action_set": False,
    }
    with pytest.raises(ValueError, match="envpool"):
        ze.get_protocol("minatar").envpool_kwargs(training=True)


def test_unknown_protocol_suggests_and_invalid_protocol_is_refused():
    with pytest.raises(ze.UnknownProtocolError, match="nature_2015") as info:
        ze.get_protocol("nature2015")
    assert isinstance(info.value, ValueError)
    nature = ze.get_protocol("nature_2015")
    with pytest.raises(ValueError, match="max-pools"):
        dataclasses.replace(nature, max_pool=False)
    with pytest.raises(ValueError, match="sticky"):
        dataclasses.replace(nature, sticky_action_prob=1.5)
    with pytest.raises(ValueError, match="frame settings"):
        dataclasses.replace(ze.get_protocol("classic"), frame_skip=4)


# --------------------------------------------------------------------------------------------
# Ids, backends and protocol checks


def test_unknown_id_lists_close_matches():
    with pytest.raises(ze.UnknownEnvironmentError, match="CartPole-v1") as info:
        ze.make("CartPol-v1")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ze.UnknownEnvironmentError, match="'Pong-v5'"):
        ze.make("Pongg-v5")
    with pytest.raises(ze.UnknownEnvironmentError, match="gymnasium"):
        ze.make("NoSuchEnv-v0", backend="gymnasium")


def test_atari_spellings_map_to_envpool_ids():
    for spelling in ("Pong-v5", "Pong", "PongNoFrameskip-v4", "ALE/Pong-v5"):
        info = ze.resolve_env(spelling)
        assert (info.env_id, info.suite, info.backend) == ("Pong-v5", "atari", "envpool")
    with pytest.raises(ze.UnknownEnvironmentError, match="Pong"):
        ze.resolve_env("Pong-ramNoFrameskip-v4")  # RAM observations: not the same environment
    assert ze.resolve_env("CartPole-v1") == ze.EnvironmentInfo("CartPole-v1", "classic", "envpool")
    assert ze.resolve_env("CartPole-v1", backend="gymnasium").backend == "gymnasium"
    assert ze.resolve_env("FrozenLake-v1").backend == "gymnasium"


def test_wrong_protocol_kind_and_unsupported_envs_are_refused():
    with pytest.raises(ze.ProtocolMismatchError, match="classic"):
        ze.make("CartPole-v1", protocol="nature_2015")
    with pytest.raises(ze.ProtocolMismatchError, match="nature_2015"):
        ze.make("Pong-v5", protocol="classic")
    with pytest.raises(ze.UnsupportedEnvironmentError, match="discrete"):
        ze.make("Pendulum-v1")  # continuous actions
    with pytest.raises(ze.UnsupportedEnvironmentError, match="envpool"):
        ze.make("CoinrunEasy-v0")  # an envpool suite zoo does not run
    with pytest.raises(ValueError, match="num_envs"):
        ze.make("CartPole-v1", num_envs=0)


# --------------------------------------------------------------------------------------------
# CartPole (envpool): interface and autoreset semantics


def test_cartpole_shapes_and_dtypes():
    with ze.make("CartPole-v1", num_envs=3, seed=1) as env:
        assert env.protocol.name == "classic" and env.backend == "envpool"
        assert (env.observation_shape, env.num_actions, env.frame_skip) == ((4,), 2, 1)
        assert env.observation_dtype == np.float32 and not env.is_image
        assert ze.observation_nbytes(env) == 16
        first = env.reset()
        assert isinstance(first, TimeStep)
        assert first.observation.shape == (3, 4) and first.observation.dtype == np.float32
        assert first.first.all() and not first.valid.any() and not first.game_over.any()
        step = env.step(np.array([0, 1, 0]))
        assert step.observation.shape == (3, 4)
        for name in ("reward", "raw_reward"):
            assert getattr(step, name).shape == (3,) and getattr(step, name).dtype == np.float32
        for name in ("terminated", "truncated", "first", "game_over", "valid"):
            assert getattr(step, name).dtype == bool and getattr(step, name).shape == (3,)
        assert step.valid.all() and not step.first.any()
        np.testing.assert_array_equal(step.reward, 1.0)
        with pytest.raises(ValueError, match="shape"):
            env.step(np.zeros(2, np.int32))
        with pytest.raises(ValueError, match="lie in"):
            env.step(np.array([0, 2, 0]))


def check_next_step_autoreset(env: ze.VectorEnv) -> None:
    _, terminal = run_until(env, lambda ts: ts.terminated[0], constant(0))
    angle, x = terminal.observation[0, 2], terminal.observation[0, 0]
    assert abs(angle) > ANGLE_LIMIT or abs(x) > X_LIMIT  # the true final observation
    assert terminal.valid[0] and terminal.game_over[0] and not terminal.truncated[0]
    assert terminal.raw_reward[0] == 1.0
    reset = env.step(np.ones(1, np.int32))  # this action is ignored
    assert reset.first[0] and not reset.valid[0]
    assert reset.reward[0] == 0.0 and reset.raw_reward[0] == 0.0
    assert not reset.terminated[0] and not reset.truncated[0] and not reset.game_over[0]
    assert np.all(np.abs(reset.observation[0]) <= 0.05)  # CartPole's reset distribution
    after = env.step(np.zeros(1, np.int32))
    assert after.valid[0] and not after.first[0]


def test_cartpole_next_step_autoreset():
    with ze.make("CartPole-v1", seed=0) as env:
        check_next_step_autoreset(env)


def test_cartpole_truncation():
    alternate = iter(np.arange(10_000) % 2)
    with ze.make("CartPole-v1", seed=0, env_kwargs={"max_episode_steps": 20}) as env:
        _, last = run_until(
            env, lambda ts: ts.truncated[0] or ts.terminated[0], lambda _: [next(alternate)]
        )
        assert last.truncated[0] and not last.terminated[0] and last.game_over[0]
        assert last.valid[0]
        nxt = env.step(np.zeros(1, np.int32))
        assert nxt.first[0] and not nxt.valid[0] and nxt.reward[0] == 0.0
        assert env.max_episode_steps == 20
    # The default cap of CartPole-v1 is 500 steps.
    with ze.make("CartPole-v1") as env, ze.make("CartPole-v1", backend="gymnasium") as gym_env:
        assert env.max_episode_steps == gym_env.max_episode_steps == 500


# --------------------------------------------------------------------------------------------
# The gymnasium adapter


def test_gymnasium_adapter_matches_envpool_interface():
    envpool_env = ze.make("CartPole-v1", num_envs=2, seed=0)
    gym_env = ze.make("CartPole-v1", num_envs=2, seed=0, backend="gymnasium")
    with envpool_env, gym_env:
        assert gym_env.backend == "gymnasium" and envpool_env.backend == "envpool"
        for name in ("observation_shape", "observation_dtype", "num_actions", "frame_skip"):
            assert getattr(gym_env, name) == getattr(envpool_env, name), name
        a, b = envpool_env.reset(), gym_env.reset()
        for name in TimeStep._fields:
            x, y = getattr(a, name), getattr(b, name)
            assert (x.shape, x.dtype) == (y.shape, y.dtype), name
            if name != "observation":
                np.testing.assert_array_equal(x, y, err_msg=name)
        assert not gym_env.has_xla
        with pytest.raises(ze.XlaUnavailableError, match="gymnasium"):
            gym_env.xla()
    with ze.make("CartPole-v1", seed=3, backend="gymnasium") as env:
        check_next_step_autoreset(env)
    with ze.make("CartPole-v1", backend="gymnasium", env_kwargs={"max_episode_steps": 5}) as env:
        env.reset()
        steps = [env.step(np.array([t % 2])) for t in range(7)]
        assert [s.truncated[0] for s in steps] == [False] * 4 + [True, False, False]
        assert steps[5].first[0] and not steps[5].valid[0] and steps[6].valid[0]


def test_gymnasium_discrete_observations_are_one_hot():
    with ze.make("FrozenLake-v1", num_envs=2, seed=0) as env:
        assert env.backend == "gymnasium" and env.observation_shape == (16,)
        timestep = env.reset()
        np.testing.assert_array_equal(timestep.observation.sum(axis=1), 1.0)
        assert timestep.observation[0, 0] == 1.0  # FrozenLake starts in state 0


def test_minatar_through_gymnasium():
    pytest.importorskip("minatar")
    with ze.make("MinAtar/Breakout-v1", num_envs=2, seed=0) as env:
        assert env.protocol.name == "minatar" and env.backend == "gymnasium"
        assert env.is_image and env.observation_shape[1:] == (10, 10)
        assert env.observation_dtype == np.float32 and env.num_actions == 6  # full action set
        _, over = run_until(env, lambda ts: ts.game_over.any(), random_actions(env))
        assert set(np.unique(over.observation)) <= {0.0, 1.0}
    with pytest.raises(ze.ProtocolMismatchError):
        ze.make("MinAtar/Breakout-v1", protocol="classic")


# --------------------------------------------------------------------------------------------
# Atari


def assert_game_start_stack(observation: np.ndarray) -> None:
    """A game's first observation: its first frame repeated in every stack slot (not zeros)."""
    assert observation.any()
    for k in range(1, observation.shape[0]):
        np.testing.assert_array_equal(observation[k], observation[0])


def assert_shifted(prev: np.ndarray, observation: np.ndarray) -> None:
    np.testing.assert_array_equal(observation[:-1], prev[1:])


def test_pong_observations_and_game_start_stack():
    with ze.make("Pong-v5", num_envs=2, seed=0) as env:
        assert env.protocol.name == "nature_2015"
        assert env.observation_shape == (4, 84, 84) and env.observation_dtype == np.uint8
        assert env.is_image and env.num_actions == 6 and env.frame_skip == 4  # minimal actions
        assert ze.observation_nbytes(env) == 84 * 84
        assert env.max_episode_steps == 27_000  # 108k frames
        prev = env.reset()
        assert prev.observation.shape == (2, 4, 84, 84) and prev.observation.dtype == np.uint8
        for i in range(2):
            assert_game_start_stack(prev.observation[i])
        for _ in range(5):
            timestep = env.step(np.zeros(2, np.int32))
            for i in range(2):
                assert_shifted(prev.observation[i], timestep.observation[i])
            prev = timestep
    with ze.make("Pong-v5", protocol="machado_2018") as env:
        assert env.num_actions == 18


def test_atari_truncation_at_the_frame_cap():
    with ze.make("Pong-v5", seed=0, env_kwargs={"max_episode_steps": 30}) as env:
        env.reset()
        steps = [env.step(np.zeros(1, np.int32)) for _ in range(31)]
        assert not any(s.truncated[0] for s in steps[:29])
        cap = steps[29]
        assert cap.truncated[0] and not cap.terminated[0] and cap.game_over[0] and cap.valid[0]
        assert_shifted(steps[28].observation[0], cap.observation[0])  # the true last observation
        restart = steps[30]
        assert restart.first[0] and not restart.valid[0] and restart.reward[0] == 0.0
        assert_game_start_stack(restart.observation[0])


def test_breakout_life_loss_in_training():
    with ze.make("Breakout-v5", seed=0, training=True) as env:
        prev, loss = run_until(env, lambda ts: ts.terminated[0], random_actions(env))
        assert loss.valid[0] and not loss.game_over[0] and not loss.truncated[0]
        assert_shifted(prev.observation[0], loss.observation[0])
        pseudo = env.step(np.ones(1, np.int32))
        assert not pseudo.valid[0] and not pseudo.first[0]  # envpool's life-loss pseudo-step
        assert pseudo.reward[0] == 0.0 and not pseudo.terminated[0] and not pseudo.game_over[0]
        assert_shifted(loss.observation[0], pseudo.observation[0])  # the stack is not reset
        tracker = ze.EpisodeTracker(1)
        act = random_actions(env, seed=1)
        timestep, lives_lost = pseudo, 1
        while not timestep.game_over[0]:
            prev, timestep = timestep, env.step(act(timestep))
            tracker.update(timestep)
            lives_lost += int(timestep.terminated[0])
            assert timestep.valid[0] != prev.terminated[0]
        assert timestep.terminated[0] and lives_lost == 5  # game_over only at the real end
        restart = env.step(np.zeros(1, np.int32))
        assert restart.first[0] and not restart.valid[0]
        assert_game_start_stack(restart.observation[0])


def test_breakout_evaluation_plays_whole_games():
    with ze.make("Breakout-v5", seed=0, training=False) as env:
        _, over = run_until(env, lambda ts: ts.terminated[0], random_actions(env))
        assert over.game_over[0]  # no life-loss terminal in evaluation


def test_reward_clipping_in_training_only():
    for training in (True, False):
        with ze.make("SpaceInvaders-v5", seed=0, training=training) as env:
            _, big = run_until(env, lambda ts: ts.raw_reward[0] > 1, random_actions(env))
            assert big.reward[0] == (1.0 if training else big.raw_reward[0])


# --------------------------------------------------------------------------------------------
# Episode statistics, XLA, evaluation


def make_timestep(reward, terminated=False, first=False, game_over=False, valid=True):
    b = lambda x: np.array([x])  # noqa: E731
    return TimeStep(
        observation=np.zeros((1, 1)),
        reward=b(np.float32(min(reward, 1))),
        raw_reward=b(np.float32(reward)),
        terminated=b(terminated),
        truncated=b(False),
        first=b(first),
        game_over=b(game_over),
        valid=b(valid),
    )


def test_episode_tracker_counts_games_not_lives():
    tracker = ze.EpisodeTracker(1, window=2)
    steps = [
        make_timestep(0, first=True, valid=False),
        make_timestep(5),
        make_timestep(2, terminated=True),  # a lost life
        make_timestep(0, valid=False),  # the pseudo-step
        make_timestep(3, terminated=True, game_over=True),
        make_timestep(0, first=True, valid=False),
        make_timestep(7, terminated=True, game_over=True),
    ]
    finished = [e for ts in steps for e in tracker.update(ts)]
    assert finished == [ze.Episode(10.0, 3, 0), ze.Episode(7.0, 1, 0)]
    assert tracker.total_games == 2 and tracker.mean_recent_return() == 8.5


def test_xla_compiled_cartpole_loop():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    with ze.make("CartPole-v1", num_envs=2, seed=0) as env:
        env.reset()
        if not env.has_xla:  # then the reason must be stated
            with pytest.raises(ze.XlaUnavailableError, match="jax"):
                env.xla()
            pytest.fail("envpool's XLA interface is unavailable with this JAX")
        handle, _, _, step = env.xla()

        def body(carry, _):
            handle, prev_done = carry
            handle, output = step(handle, jnp.zeros(2, jnp.int32))
            timestep = env.xla_timestep(output, prev_done)
            return (handle, timestep.terminated | timestep.truncated), timestep

        @jax.jit
        def run(handle):
            return jax.lax.scan(body, (handle, jnp.zeros(2, bool)), None, length=10)

        (handle, _), timesteps = run(handle)
        timesteps = jax.tree.map(np.asarray, timesteps)
        assert timesteps.observation.shape == (10, 2, 4)
        ends = np.argwhere(timesteps.terminated[:-1])
        assert len(ends)  # constant action 0 ends CartPole within 8-10 steps
        for t, i in ends:
            assert timesteps.first[t + 1, i] and not timesteps.valid[t + 1, i]
            assert timesteps.reward[t + 1, i] == 0.0
        assert timesteps.valid[0].all() and timesteps.reward.dtype == np.float32


def test_evaluate_counts_exact_episodes():
    result = ze.evaluate(
        lambda obs: np.zeros(len(obs), np.int32), "CartPole-v1", episodes=3, seed=0, num_envs=2
    )
    assert result["episodes"] == 3 and len(result["returns"]) == 3 and not result["truncated"]
    assert all(8 <= r <= 12 for r in result["returns"])
    assert result["lengths"] == [int(r) for r in result["returns"]]
    assert result["protocol"] == "classic" and result["epsilon"] == 0.0
    assert result["min_return"] <= result["mean_return"] <= result["max_return"]
    capped = ze.evaluate(
        lambda obs: np.zeros(len(obs), np.int32), "CartPole-v1", episodes=5, seed=0, max_steps=12
    )
    assert capped["truncated"] and capped["episodes"] == 1 and capped["agent_steps"] <= 12
    with pytest.raises(ValueError, match="policy must return"):
        ze.evaluate(lambda obs: np.zeros(3), "CartPole-v1", episodes=1, seed=0)
