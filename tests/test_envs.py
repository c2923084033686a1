"""zoo.envs against real envpool and gymnasium environments (no mocks).

The envpool facts and zoo's rules these tests pin down are written up in ``zoo/envs/__init__.py``:
next-step autoreset, a lost life read from ``info["lives"]`` (terminal in training where the
protocol says so, the game and its stack going on, no pseudo-step), the frame stack zero-padded at
a game start (and at a lost life under ``atari_100k``), and truncation at the frame cap.
"""

from __future__ import annotations

import dataclasses
import itertools

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


#: The Atari backends the semantic tests run on: envpool, and ALE's vector env (ale-py, the test
#: extra) under the same protocols; tests/test_envs_ale.py compares the two step for step.
ATARI_BACKENDS = ["envpool", "ale"]


def cap_kwargs(backend: str, steps: int) -> dict:
    """An episode cap of ``steps`` agent steps (frame skip 4) in the backend's own keyword."""
    return (
        {"max_episode_steps": steps}
        if backend == "envpool"
        else {"max_num_frames_per_episode": 4 * steps}
    )


# --------------------------------------------------------------------------------------------
# Protocols


@pytest.mark.unit
def test_protocol_fields_have_no_defaults_and_every_protocol_is_registered():
    for field in dataclasses.fields(ze.Protocol):
        assert field.default is dataclasses.MISSING, field.name
        assert field.default_factory is dataclasses.MISSING, field.name
    assert set(ze.protocol_names()) == {
        "nature_2015",
        "purejaxql_atari",
        "dopamine_2018",
        "machado_2018",
        "atari_100k",
        "r2d2_2019",
        "classic",
        "minatar",
        "gymnax_minatar",
    }
    for name, protocol in ze.PROTOCOLS.items():
        assert protocol.name == name
        assert ze.get_protocol(name) is protocol
        assert ze.get_protocol(protocol) is protocol
        assert protocol.to_dict()["name"] == name
        assert protocol.sources and protocol.description


@pytest.mark.unit
def test_protocol_values():
    nature = ze.get_protocol("nature_2015")
    assert (nature.noop_max, nature.sticky_action_prob, nature.full_action_set) == (30, 0.0, False)
    assert (nature.frame_skip, nature.stack, nature.frame_shape) == (4, 4, (84, 84))
    assert nature.max_episode_frames == 108_000 and nature.max_episode_steps == 27_000
    assert (nature.reward_clip, nature.eval_epsilon) == (1.0, 0.05)
    assert nature.life_loss_terminal and not nature.life_loss_resets_stack  # dqn_zoo
    dopamine = ze.get_protocol("dopamine_2018")  # sticky actions with the minimal action set
    assert (dopamine.sticky_action_prob, dopamine.full_action_set) == (0.25, False)
    assert (dopamine.noop_max, dopamine.life_loss_terminal) == (0, False)
    assert dopamine.eval_epsilon == 0.001 and dopamine.max_episode_steps == 27_000
    machado = ze.get_protocol("machado_2018")  # dopamine_2018 with the full action set
    assert machado.sticky_action_prob == 0.25 and machado.full_action_set is True
    assert machado.noop_max == 0
    assert not machado.life_loss_terminal and machado.eval_epsilon == 0.001
    atari_100k = ze.get_protocol("atari_100k")  # Dopamine's data-efficient runner
    assert atari_100k.life_loss_terminal and atari_100k.life_loss_resets_stack
    assert (atari_100k.sticky_action_prob, atari_100k.noop_max) == (0.0, 116)
    r2d2 = ze.get_protocol("r2d2_2019")  # no stack, no life loss, no sticky actions, no clip
    assert (r2d2.stack, r2d2.life_loss_terminal, r2d2.sticky_action_prob) == (1, False, 0.0)
    assert (r2d2.reward_clip, r2d2.eval_epsilon, r2d2.max_episode_steps) == (None, 0.0, 27_000)
    assert r2d2.envpool_kwargs(training=True)["stack_num"] == 1
    classic = ze.get_protocol("classic")
    assert classic.reward_clip is None and classic.eval_epsilon == 0.0
    assert classic.frame_shape is None and classic.max_episode_frames is None
    # purejaxql's envpool 0.8.4 call: nature_2015's settings with FIRE and repeated first frames
    pqn = ze.get_protocol("purejaxql_atari")
    assert (pqn.fire_reset, pqn.game_start_stack, pqn.noop_max) == (True, "repeat", 30)
    assert (pqn.life_loss_terminal, pqn.life_loss_resets_stack) == (True, False)
    assert pqn.envpool_kwargs(training=True)["use_fire_reset"] is True
    assert {p.game_start_stack for p in ze.PROTOCOLS.values() if p is not pqn} == {"zeros"}
    # gymnax's MinAtar settings: no sticky actions, minimal actions, 1,000 steps (Freeway 2,500)
    gymnax = ze.get_protocol("gymnax_minatar")
    assert (gymnax.sticky_action_prob, gymnax.full_action_set) == (0.0, False)
    assert gymnax.episode_steps_for("MinAtar/Asterix-v1") == 1_000
    assert gymnax.episode_steps_for("MinAtar/Freeway-v1") == 2_500
    assert gymnax.gymnasium_kwargs(True, "MinAtar/Freeway-v1")["max_episode_steps"] == 2_500
    assert ze.get_protocol("minatar").episode_steps_for("MinAtar/Freeway-v1") is None


@pytest.mark.unit
def test_every_atari_setting_is_compared_with_its_source():
    """Each Atari protocol states every field and aspect beside its source; differences named."""
    fields = {f.name for f in dataclasses.fields(ze.Protocol)}
    for protocol in ze.PROTOCOLS.values():
        if protocol.suite != "atari":
            assert protocol.source_settings == () and protocol.differences == ()
            continue
        settings = [s.setting for s in protocol.source_settings]
        assert len(settings) == len(set(settings)), protocol.name
        assert set(settings) <= fields | set(ze.ASPECTS)
        assert set(ze.ASPECTS) <= set(settings)
        for entry in protocol.source_settings:
            assert entry.source_value and entry.source, (protocol.name, entry.setting)
        record = protocol.to_dict()
        assert record["differences"] == list(protocol.differences)
        assert record["source_settings"][0]["setting"] == protocol.source_settings[0].setting
    assert ze.get_protocol("dopamine_2018").differences == ("noop_max", "truncation")
    assert set(ze.get_protocol("atari_100k").differences) == {
        "noop_max",
        "frame_skip_at_life_loss",
        "evaluation",
    }
    assert "game_start_stack" in ze.get_protocol("nature_2015").differences  # dqn_zoo: [f, 0, 0, 0]
    text = ze.get_protocol("atari_100k").summary()
    assert "life_loss_resets_stack=True" in text and "frame_skip_at_life_loss" in text
    nature = ze.get_protocol("nature_2015")
    incomplete = nature.source_settings[1:]  # without sticky_action_prob
    with pytest.raises(ValueError, match="no source setting for sticky_action_prob"):
        dataclasses.replace(nature, source_settings=incomplete)
    with pytest.raises(ValueError, match="neither a field nor an aspect"):
        dataclasses.replace(
            nature, source_settings=(*nature.source_settings, ze.SourceSetting("x", "y", "z"))
        )


@pytest.mark.unit
def test_envpool_kwargs_per_protocol():
    nature = ze.get_protocol("nature_2015")
    train, evaluation = nature.envpool_kwargs(training=True), nature.envpool_kwargs(training=False)
    assert train["noop_max"] == 30 and train == evaluation  # zoo applies the life-loss rules
    assert train["episodic_life"] is False and train["zero_discount_on_life_loss"] is False
    assert train["repeat_action_probability"] == 0.0 and train["full_action_space"] is False
    assert train["max_episode_steps"] == 27_000 and train["frame_skip"] == 4
    assert train["stack_num"] == 4 and (train["img_height"], train["img_width"]) == (84, 84)
    assert train["reward_clip"] is False and train["use_fire_reset"] is False
    machado = ze.get_protocol("machado_2018").envpool_kwargs(training=True)
    assert machado["repeat_action_probability"] == 0.25 and machado["full_action_space"] is True
    assert machado["noop_max"] == 1  # envpool cannot do 0 no-ops: one fixed no-op frame
    dopamine = ze.get_protocol("dopamine_2018").envpool_kwargs(training=True)
    assert dopamine == {**machado, "full_action_space": False}
    atari_100k = ze.get_protocol("atari_100k").envpool_kwargs(training=True)
    assert atari_100k["episodic_life"] is False and atari_100k["repeat_action_probability"] == 0.0
    assert atari_100k["noop_max"] == 116
    assert ze.get_protocol("classic").envpool_kwargs(training=True) == {}
    assert ze.get_protocol("minatar").gymnasium_kwargs(training=True) == {
        "sticky_action_prob": 0.1,
        "use_minimal_action_set": False,
    }
    with pytest.raises(ValueError, match="envpool"):
        ze.get_protocol("minatar").envpool_kwargs(training=True)
    with pytest.raises(ValueError, match="life_loss_terminal"):
        ze.make("Breakout-v5", env_kwargs={"episodic_life": True})


@pytest.mark.unit
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


@pytest.mark.unit
def test_unknown_id_lists_close_matches():
    with pytest.raises(ze.UnknownEnvironmentError, match="CartPole-v1") as info:
        ze.make("CartPol-v1")
    assert isinstance(info.value, ValueError)
    with pytest.raises(ze.UnknownEnvironmentError, match="'Pong-v5'"):
        ze.make("Pongg-v5")
    with pytest.raises(ze.UnknownEnvironmentError, match="gymnasium"):
        ze.make("NoSuchEnv-v0", backend="gymnasium")


@pytest.mark.unit
def test_atari_spellings_map_to_envpool_ids():
    for spelling in ("Pong-v5", "Pong", "PongNoFrameskip-v4", "ALE/Pong-v5"):
        info = ze.resolve_env(spelling)
        assert (info.env_id, info.suite, info.backend) == ("Pong-v5", "atari", "envpool")
    with pytest.raises(ze.UnknownEnvironmentError, match="Pong"):
        ze.resolve_env("Pong-ramNoFrameskip-v4")  # RAM observations: not the same environment
    assert ze.resolve_env("CartPole-v1") == ze.EnvironmentInfo("CartPole-v1", "classic", "envpool")
    assert ze.resolve_env("CartPole-v1", backend="gymnasium").backend == "gymnasium"
    assert ze.resolve_env("FrozenLake-v1").backend == "gymnasium"


@pytest.mark.compiled
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


@pytest.mark.compiled
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


@pytest.mark.parametrize("backend", ["envpool", "gymnasium", "gymnax"])
@pytest.mark.compiled
def test_cartpole_next_step_autoreset(backend):
    with ze.make("CartPole-v1", seed=0, backend=backend) as env:
        check_next_step_autoreset(env)


@pytest.mark.parametrize(
    ("backend", "cap"), [("envpool", "max_episode_steps"), ("gymnax", "max_steps_in_episode")]
)
@pytest.mark.compiled
def test_cartpole_truncation(backend, cap):
    alternate = iter(np.arange(10_000) % 2)
    with ze.make("CartPole-v1", seed=0, backend=backend, env_kwargs={cap: 20}) as env:
        _, last = run_until(
            env, lambda ts: ts.truncated[0] or ts.terminated[0], lambda _: [next(alternate)]
        )
        assert last.truncated[0] and not last.terminated[0] and last.game_over[0]
        assert last.valid[0]
        nxt = env.step(np.zeros(1, np.int32))
        assert nxt.first[0] and not nxt.valid[0] and nxt.reward[0] == 0.0
        assert env.max_episode_steps == 20
    # The default cap of CartPole-v1 is 500 steps.
    with (
        ze.make("CartPole-v1", backend=backend) as env,
        ze.make("CartPole-v1", backend="gymnasium") as gym_env,
    ):
        assert env.max_episode_steps == gym_env.max_episode_steps == 500


# --------------------------------------------------------------------------------------------
# The gymnasium adapter


@pytest.mark.compiled
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


@pytest.mark.compiled
def test_gymnasium_discrete_observations_are_one_hot():
    with ze.make("FrozenLake-v1", num_envs=2, seed=0) as env:
        assert env.backend == "gymnasium" and env.observation_shape == (16,)
        timestep = env.reset()
        np.testing.assert_array_equal(timestep.observation.sum(axis=1), 1.0)
        assert timestep.observation[0, 0] == 1.0  # FrozenLake starts in state 0


@pytest.mark.compiled
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


@pytest.mark.unit
@pytest.mark.parametrize("repeat", [False, True])
def test_finish_timestep_fills_the_stack_with_zeros_or_the_first_frame(repeat):
    """Hand-worked: envpool's stack ``[9, 9, 1, 2]`` two steps into an episode (age 1 after
    this step) becomes ``[0, 0, 1, 2]``, or ``[1, 1, 1, 2]`` under ``game_start_stack:
    repeat``; a fresh episode's ``[5, 5, 5, 5]`` keeps only its newest frame (or all four)."""
    from zoo.envs.core import EnvState, RawStep, TimeStepRules, finish_timestep

    observation = np.array([[9, 9, 1, 2], [5, 5, 5, 5]], np.uint8).reshape(2, 4, 1, 1)
    flags = np.zeros(2, bool)
    raw = RawStep(observation, np.zeros(2), flags, flags, np.array([False, True]), flags,
                  np.zeros(2, np.int32))  # fmt: skip
    state = EnvState(game_over=flags, lives=np.zeros(2, np.int32), age=np.array([0, 3]))
    rules = TimeStepRules(None, False, False, 4, repeat_first_frame=repeat)
    timestep, after = finish_timestep(np, raw, state, rules)
    assert after.age.tolist() == [1, 0]
    expected = [[1, 1, 1, 2], [5, 5, 5, 5]] if repeat else [[0, 0, 1, 2], [0, 0, 0, 5]]
    assert timestep.observation.reshape(2, 4).tolist() == expected


#: gymnax/environments/minatar/<game>.py's minimal_action_set (gymnax 0.0.6, purejaxql's).
GYMNAX_MINIMAL_ACTIONS = {"Asterix": [0, 1, 2, 3, 4], "Freeway": [0, 2, 4]}


@pytest.mark.parametrize(("game", "cap"), [("Asterix", 1_000), ("Freeway", 2_500)])
@pytest.mark.compiled
def test_gymnax_minatar_protocol_has_gymnax_caps_and_minimal_actions(game, cap):
    """gymnax 0.0.6's MinAtar (purejaxql's): gymnax's minimal action set, no sticky actions,
    and episodes cut at max_steps_in_episode (1,000; Freeway 2,500)."""
    pytest.importorskip("minatar")
    import gymnasium

    env_id = f"MinAtar/{game}-v1"
    with ze.make(env_id, protocol="gymnax_minatar", num_envs=1, seed=0) as env:
        assert env.num_actions == len(GYMNAX_MINIMAL_ACTIONS[game])
        assert env.max_episode_steps == cap
        if game == "Freeway":  # a chicken that never moves: no game end but the cap
            env.reset()
            steps = [env.step(np.zeros(1, np.int32)) for _ in range(cap)]
            assert not any(t.game_over[0] for t in steps[:-1])
            assert steps[-1].truncated[0] and not steps[-1].terminated[0]
    # the settings reach MinAtar itself (zoo.envs.make registered its gymnasium ids)
    protocol = ze.get_protocol("gymnax_minatar")
    made = gymnasium.make(env_id, **protocol.gymnasium_kwargs(True, env_id))
    assert made.unwrapped.game.sticky_action_prob == 0.0
    assert list(made.unwrapped.action_set) == GYMNAX_MINIMAL_ACTIONS[game]
    made.close()


# --------------------------------------------------------------------------------------------
# Atari


def assert_episode_start_stack(observation: np.ndarray) -> None:
    """An episode's first observation: zeros, then its first frame (dqn_zoo and Dopamine pad)."""
    assert observation[-1].any()
    assert not observation[:-1].any()


def assert_shifted(prev: np.ndarray, observation: np.ndarray) -> None:
    np.testing.assert_array_equal(observation[:-1], prev[1:])


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
@pytest.mark.compiled
def test_pong_observations_and_zero_padded_game_start_stack(backend):
    with ze.make("Pong-v5", num_envs=2, seed=0, backend=backend) as env:
        assert env.backend == backend
        assert env.protocol.name == "nature_2015"
        assert env.observation_shape == (4, 84, 84) and env.observation_dtype == np.uint8
        assert env.is_image and env.num_actions == 6 and env.frame_skip == 4  # minimal actions
        assert ze.observation_nbytes(env) == 84 * 84
        assert env.max_episode_steps == 27_000  # 108k frames
        prev = env.reset()
        assert prev.observation.shape == (2, 4, 84, 84) and prev.observation.dtype == np.uint8
        for i in range(2):
            assert_episode_start_stack(prev.observation[i])
        for t in range(5):
            timestep = env.step(np.zeros(2, np.int32))
            for i in range(2):
                assert_shifted(prev.observation[i], timestep.observation[i])
                # [0, 0, f0, f1], [0, f0, f1, f2], then four frames
                assert not timestep.observation[i, : max(2 - t, 0)].any()
                assert timestep.observation[i, max(2 - t, 0) :].any(axis=(1, 2)).all()
            prev = timestep
    with ze.make("Pong-v5", protocol="machado_2018", backend=backend) as env:
        assert env.num_actions == 18
    with ze.make("Pong-v5", protocol="dopamine_2018", backend=backend) as env:
        assert env.num_actions == 6  # Dopamine's baselines: the minimal action set


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
@pytest.mark.compiled
def test_atari_truncation_at_the_frame_cap(backend):
    with ze.make("Pong-v5", seed=0, backend=backend, env_kwargs=cap_kwargs(backend, 30)) as env:
        assert env.max_episode_steps == 30
        env.reset()
        steps = [env.step(np.zeros(1, np.int32)) for _ in range(31)]
        assert not any(s.truncated[0] for s in steps[:29])
        cap = steps[29]
        assert cap.truncated[0] and not cap.terminated[0] and cap.game_over[0] and cap.valid[0]
        assert_shifted(steps[28].observation[0], cap.observation[0])  # the true last observation
        restart = steps[30]
        assert restart.first[0] and not restart.valid[0] and restart.reward[0] == 0.0
        assert_episode_start_stack(restart.observation[0])


def until_life_lost(env: ze.VectorEnv, seed: int = 0) -> tuple[TimeStep, TimeStep, int]:
    """Random play until the first lost life: (previous timestep, that timestep, steps)."""
    prev, steps = env.reset(), 0
    act = random_actions(env, seed)
    while True:
        timestep = env.step(act(prev))
        steps += 1
        if timestep.terminated[0] or steps > 2000:
            return prev, timestep, steps
        prev = timestep


RIGHT, LEFT = 2, 3  # Breakout's minimal action set: NOOP, FIRE, RIGHT, LEFT


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
@pytest.mark.compiled
def test_breakout_lost_life_is_terminal_in_training_and_the_game_goes_on(backend):
    """nature_2015 (dqn_zoo): discount 0 where lives drop; no pseudo-step, the stack goes on."""
    twins = [ze.make("Breakout-v5", seed=0, training=True, backend=backend) for _ in range(2)]
    (prev, loss, steps), (_, twin_loss, _) = (until_life_lost(env) for env in twins)
    assert steps < 2000 and loss.terminated[0] and loss.valid[0]
    assert not loss.game_over[0] and not loss.truncated[0] and not loss.first[0]
    assert_shifted(prev.observation[0], loss.observation[0])
    np.testing.assert_array_equal(loss.observation, twin_loss.observation)
    # the next step plays its action: the twins part as soon as one goes right, the other left
    right, left = twins[0].step(np.array([RIGHT])), twins[1].step(np.array([LEFT]))
    for after in (right, left):
        assert after.valid[0] and not after.first[0] and not after.terminated[0]
        assert_shifted(loss.observation[0], after.observation[0])  # the stack is not reset
    assert (right.observation != left.observation).any()
    twins[1].close()
    env = twins[0]
    tracker = ze.EpisodeTracker(1)
    for timestep in (loss, right):
        tracker.update(timestep)
    act = random_actions(env, seed=1)
    timestep, lives_lost, length = right, 1, steps + 1
    while not timestep.game_over[0]:
        prev, timestep = timestep, env.step(act(timestep))
        tracker.update(timestep)
        lives_lost += int(timestep.terminated[0])
        length += 1
        assert timestep.valid[0] and not timestep.first[0]  # every step of the game is played
    assert timestep.terminated[0] and lives_lost == 5  # game_over only at the real end
    assert tracker.recent[-1].length == length - steps + 1  # counted from the tracker's start
    restart = env.step(np.zeros(1, np.int32))
    assert restart.first[0] and not restart.valid[0]
    assert_episode_start_stack(restart.observation[0])
    env.close()


#: purejaxql/config/alg/pqn_atari.yaml's ENV_KWARGS, passed to envpool.make by pqn_atari.py; the
#: rest are envpool's defaults (use_fire_reset True among them).
PUREJAXQL_ENV_KWARGS = {
    "episodic_life": True,
    "reward_clip": True,
    "repeat_action_probability": 0.0,
    "frame_skip": 4,
    "noop_max": 30,
}


@pytest.mark.compiled
def test_purejaxql_protocol_plays_purejaxqls_envpool_until_the_first_lost_life():
    """Breakout (a FIRE game) under ``purejaxql_atari`` against envpool made exactly as
    purejaxql's pqn_atari.py makes it: the reset (no-ops, then FIRE, the first frame in all four
    slots) and every step up to the first lost life give the same stacks and clipped rewards,
    and the life-losing step is terminal in both. Then they part, as the protocol states
    (``life_loss_terminal`` differs): envpool's episodic_life spends the next step on a reset
    (the action dropped, no-ops and FIRE), zoo plays that step's action in the running game."""
    import envpool

    seed = 3
    pool = envpool.make("Breakout-v5", env_type="gymnasium", num_envs=1, seed=seed,
                        **PUREJAXQL_ENV_KWARGS)  # fmt: skip
    obs, _ = pool.reset()
    with ze.make("Breakout-v5", protocol="purejaxql_atari", seed=seed, training=True) as env:
        first = env.reset()
        np.testing.assert_array_equal(first.observation, obs)
        # envpool's own stack at a reset: the first frame in every slot (after FIRE)
        assert all(np.array_equal(obs[0, i], obs[0, -1]) for i in range(3))
        act = random_actions(env, seed=5)
        actions, steps = act(first), 0
        while True:
            obs, reward, term, _, _ = pool.step(actions)
            timestep = env.step(actions)
            steps += 1
            np.testing.assert_array_equal(timestep.observation, obs)
            np.testing.assert_array_equal(timestep.reward, reward)
            assert timestep.terminated[0] == term[0]
            if term[0]:
                break
            assert steps < 2000
            actions = act(timestep)
        assert not timestep.game_over[0]  # a lost life, the game goes on in zoo
        after_pool, *_ = pool.step(np.array([RIGHT]))
        after_zoo = env.step(np.array([RIGHT]))
        assert after_zoo.valid[0] and not after_zoo.first[0]
        assert_shifted(timestep.observation[0], after_zoo.observation[0])
        # envpool's reset step after the lost life pushed one frame played by no-ops and FIRE
        assert_shifted(obs[0], after_pool[0])
    pool.close()


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.compiled
def test_atari_100k_restarts_the_stack_at_a_lost_life(training, backend):
    """Dopamine's atari_100k agent zero-fills its stack at each lost life (reset_one)."""
    with ze.make(
        "Breakout-v5", protocol="atari_100k", seed=0, training=training, backend=backend
    ) as env:
        prev, timestep, steps = env.reset(), None, 0
        act = random_actions(env)
        while steps < 2000:
            timestep = env.step(act(prev))
            steps += 1
            if timestep.first[0] and timestep.valid[0]:
                break
            prev = timestep
        assert steps < 2000 and not timestep.game_over[0]
        assert timestep.terminated[0] == training  # terminal in training only
        assert_episode_start_stack(timestep.observation[0])  # [0, 0, 0, frame after the loss]
        after = env.step(np.array([RIGHT]))
        assert after.valid[0] and not after.first[0]
        assert_shifted(timestep.observation[0], after.observation[0])  # [0, 0, f, f']


@pytest.mark.compiled
def test_breakout_evaluation_plays_whole_games():
    with ze.make("Breakout-v5", seed=0, training=False) as env:
        _, over = run_until(env, lambda ts: ts.terminated[0], random_actions(env))
        assert over.game_over[0]  # no life-loss terminal in evaluation


@pytest.mark.parametrize("backend", ATARI_BACKENDS)
@pytest.mark.compiled
def test_reward_clipping_in_training_only(backend):
    for training in (True, False):
        with ze.make("SpaceInvaders-v5", seed=0, training=training, backend=backend) as env:
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


@pytest.mark.unit
def test_episode_tracker_counts_games_not_lives():
    tracker = ze.EpisodeTracker(1, window=2)
    steps = [
        make_timestep(0, first=True, valid=False),
        make_timestep(5),
        make_timestep(2, terminated=True),  # a lost life (nature_2015): the game goes on
        make_timestep(1, terminated=True, first=True),  # a lost life restarting the stack
        make_timestep(3, terminated=True, game_over=True),
        make_timestep(0, first=True, valid=False),
        make_timestep(7, terminated=True, game_over=True),
    ]
    finished = [e for ts in steps for e in tracker.update(ts)]
    assert finished == [ze.Episode(11.0, 4, 0), ze.Episode(7.0, 1, 0)]
    assert tracker.total_games == 2 and tracker.mean_recent_return() == 9.0


@pytest.mark.parametrize(
    ("env_id", "backend", "subsets"),
    [("Breakout-v5", "envpool", True), ("CartPole-v1", "gymnasium", False)],
)
@pytest.mark.compiled
def test_retired_environments_leave_the_others_stepping_as_before(env_id, backend, subsets):
    """After ``retire``, ``step`` takes and returns the active environments' rows only, and they
    are the rows of the same environments stepped all together (frame stacks, lives, game ends
    and autoresets included). envpool steps the active environments only (its asynchronous
    pool); gymnasium steps them all and drops the retired rows."""
    n, steps = 3, 400
    rng = np.random.default_rng(0)
    num_actions = 4 if env_id == "Breakout-v5" else 2
    actions = rng.integers(0, num_actions, (steps, n)).astype(np.int32)
    retire_at = {150: [1], 300: [0]}
    made = dict(num_envs=n, seed=5, training=False, backend=backend)
    with ze.make(env_id, **made) as whole, ze.make(env_id, **made, retiring=True) as some:
        assert some.skips_retired == subsets and not whole.skips_retired
        for name in TimeStep._fields:
            a, b = getattr(whole.reset(), name), getattr(some.reset(), name)
            np.testing.assert_array_equal(a, b, err_msg=name)
        game_overs = 0
        for t in range(steps):
            if t in retire_at:
                some.retire(retire_at[t])
            active = some.active
            expected, got = whole.step(actions[t]), some.step(actions[t][active])
            for name in TimeStep._fields:
                np.testing.assert_array_equal(
                    getattr(got, name), getattr(expected, name)[active], err_msg=f"{name}, {t}"
                )
            game_overs += int(np.asarray(expected.game_over)[active].sum())
        assert list(some.active) == [2] and game_overs >= 2
        with pytest.raises(ValueError, match=r"shape \(1,\) \(one per active environment\)"):
            some.step(actions[0])
        with pytest.raises(ValueError, match="env_ids must lie in"):
            some.retire([3])
        some.retire([2])
        with pytest.raises(RuntimeError, match="every environment is retired"):
            some.step(actions[0][:0])


@pytest.mark.unit
def test_episode_tracker_follows_the_rows_of_the_environments_it_is_given():
    """With ``env_ids``, the rows are those environments: a game is credited to its own
    environment's running return and length, whichever row it arrives in."""
    tracker = ze.EpisodeTracker(3)
    tracker.update(make_timestep3([0, 0, 0], valid=[False] * 3))
    tracker.update(make_timestep3([1, 2, 4]))
    tracker.update(make_timestep3([10, 20], over=[False, True]), env_ids=[0, 2])
    finished = tracker.update(make_timestep3([100, 200], over=[True, False]), env_ids=[0, 1])
    assert finished == [ze.Episode(111.0, 3, 0)]
    assert tracker.recent[0] == ze.Episode(24.0, 2, 2)
    finished = tracker.update(make_timestep3([5], over=[True]), env_ids=[1])
    assert finished == [ze.Episode(207.0, 3, 1)]


def make_timestep3(reward, valid=None, over=None):
    k = len(reward)
    flags = np.zeros(k, bool)
    return TimeStep(
        observation=np.zeros((k, 1), np.float32),
        reward=np.asarray(reward, np.float32),
        raw_reward=np.asarray(reward, np.float32),
        terminated=np.asarray(over if over is not None else flags, bool),
        truncated=flags,
        first=~np.asarray(valid if valid is not None else np.ones(k, bool), bool),
        game_over=np.asarray(over if over is not None else flags, bool),
        valid=np.asarray(valid if valid is not None else np.ones(k, bool), bool),
    )


@pytest.mark.compiled
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

        def body(handle, _):
            handle, timestep = step(handle, jnp.zeros(2, jnp.int32))
            return handle, env.xla_timestep(timestep)

        @jax.jit
        def run(handle):
            return jax.lax.scan(body, handle, None, length=10)

        _, timesteps = run(handle)
        timesteps = jax.tree.map(np.asarray, timesteps)
        assert timesteps.observation.shape == (10, 2, 4)
        ends = np.argwhere(timesteps.terminated[:-1])
        assert len(ends)  # constant action 0 ends CartPole within 8-10 steps
        for t, i in ends:
            assert timesteps.first[t + 1, i] and not timesteps.valid[t + 1, i]
            assert timesteps.reward[t + 1, i] == 0.0
        assert timesteps.valid[0].all() and timesteps.reward.dtype == np.float32


@pytest.mark.parametrize(
    ("protocol", "backend"),
    [("nature_2015", "envpool"), ("atari_100k", "envpool"), ("atari_100k", "ale")],
)
@pytest.mark.compiled
def test_xla_steps_give_the_host_steps_timesteps_on_breakout(protocol, backend):
    """The compiled path applies the same life-loss and stack rules as the host path (envpool's
    XLA step, and ALE's own FFI step)."""
    jax = pytest.importorskip("jax")
    steps, n = 400, 2
    actions = np.random.default_rng(0).integers(0, 4, (steps, n)).astype(np.int32)
    with ze.make("Breakout-v5", protocol=protocol, num_envs=n, seed=5, backend=backend) as env:
        env.reset()
        host = [env.step(a) for a in actions]
    with ze.make("Breakout-v5", protocol=protocol, num_envs=n, seed=5, backend=backend) as env:
        env.reset()
        handle, _, _, step = env.xla()
        _, compiled = jax.jit(lambda h, a: jax.lax.scan(step, h, a))(handle, actions)
        compiled = jax.tree.map(np.asarray, compiled)
    for name in TimeStep._fields:
        expected = np.stack([getattr(ts, name) for ts in host])
        np.testing.assert_array_equal(getattr(compiled, name), expected, err_msg=name)
    assert np.stack([ts.terminated & ~ts.game_over for ts in host]).sum() >= 2  # lives lost
    assert np.stack([ts.game_over for ts in host]).any()


@pytest.mark.compiled
def test_parallel_evaluation_plays_each_environments_own_games():
    """With ``N`` environments, environment ``i`` (seeded ``seed + i``) plays its quota of games
    fixed in advance: the games counted are exactly those of ``N`` one-environment evaluations
    seeded ``seed + i``, each playing that quota, whichever finish first."""

    def balance(obs):  # deterministic, games of different lengths
        return (obs[:, 2] > 0).astype(np.int32)

    for episodes, num_envs in [(4, 4), (8, 4), (7, 3)]:
        together = ze.evaluate(balance, "CartPole-v1", episodes=episodes, seed=7, num_envs=num_envs)
        alone = []
        for i in range(num_envs):
            quota = episodes // num_envs + (i < episodes % num_envs)
            alone += ze.evaluate(balance, "CartPole-v1", episodes=quota, seed=7 + i)["returns"]
        assert together["episodes"] == episodes
        assert sorted(together["returns"]) == sorted(alone), (episodes, num_envs)
        assert len(set(alone)) > 1  # the games differ, so a wrong assignment would show


@pytest.mark.compiled
def test_evaluation_asks_a_policy_that_takes_rows_only_about_environments_owed_games():
    """A policy that takes ``rows`` is called with the environments that still owe games (their
    observations, ``first`` flags and indices), never with none; the games counted are those of
    the same policy called with every row."""

    def balance(obs):
        return (obs[:, 2] > 0).astype(np.int32)

    calls = []

    def balance_rows(obs, first, rows):
        calls.append((rows.copy(), len(obs), len(first)))
        return balance(obs)

    episodes, num_envs = 7, 3  # quotas 3, 2, 2
    whole = ze.evaluate(balance, "CartPole-v1", episodes=episodes, seed=7, num_envs=num_envs)
    some = ze.evaluate(balance_rows, "CartPole-v1", episodes=episodes, seed=7, num_envs=num_envs)
    for key in ("returns", "lengths", "agent_steps", "episodes"):
        assert some[key] == whole[key], key
    assert len(set(whole["lengths"])) > 1
    asked = [tuple(rows.tolist()) for rows, n_obs, n_first in calls]
    assert all(len(rows) == n_obs == n_first for rows, n_obs, n_first in calls)
    assert asked[0] == (0, 1, 2) and 0 < len(asked[-1]) < num_envs  # the tail asks fewer rows
    assert all(set(b) <= set(a) for a, b in itertools.pairwise(asked))  # never back
    with pytest.raises(ValueError, match="policy must return 1 actions"):
        ze.evaluate(lambda obs, rows: np.zeros(3, np.int32), "CartPole-v1", episodes=1, seed=0)


@pytest.mark.compiled
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
