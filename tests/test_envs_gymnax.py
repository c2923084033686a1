"""gymnax's JAX-native environments as a backend (no mocks): the pool is a pytree, its step a
pure function that a compiled loop runs inside its program.

CartPole's next-step autoreset and truncation run on gymnax in tests/test_envs.py beside envpool
and gymnasium. Here: the ids and refusals, MinAtar's minimal action sets and caps under
``gymnax_minatar``, and the compiled step equal to the host step.
"""

from __future__ import annotations

import numpy as np
import pytest

import zoo.envs as ze
from zoo.envs import TimeStep

pytest.importorskip("gymnax")


@pytest.mark.unit
def test_gymnax_keywords_gaps_and_differences():
    minatar = ze.get_protocol("gymnax_minatar")
    assert minatar.gymnax_kwargs(True, "MinAtar/Breakout-v1") == {"max_steps_in_episode": 1_000}
    assert minatar.gymnax_kwargs(True, "MinAtar/Freeway-v1") == {"max_steps_in_episode": 2_500}
    assert ze.get_protocol("classic").gymnax_kwargs(True, "CartPole-v1") == {}
    with pytest.raises(ValueError, match="gymnax does not"):
        ze.get_protocol("atari_100k").gymnax_kwargs(True)
    assert minatar.backend_gaps("gymnax") == ()
    assert "JAX ports of MinAtar" in minatar.backend_differences("gymnax")[0]
    (gap,) = ze.get_protocol("minatar").backend_gaps("gymnax")  # sticky 0.1, all 6 actions
    assert "no sticky actions" in gap and "gymnax_minatar" in gap
    assert ze.get_protocol("nature_2015").backend_gaps("gymnax") == ("gymnax runs no Atari games",)
    assert "gymnax (its JAX ports)" in minatar.summary()
    assert "gymnax" not in ze.get_protocol("minatar").backends_text()


@pytest.mark.compiled
def test_gymnax_refuses_what_it_cannot_run():
    with pytest.raises(ze.UnsupportedEnvironmentError, match="not 'Pong-v5'"):
        ze.make("Pong-v5", backend="gymnax")
    with pytest.raises(ze.UnsupportedEnvironmentError, match="no sticky actions"):
        ze.make("MinAtar/Breakout-v1", protocol="minatar", backend="gymnax")


#: gymnax/environments/minatar/<game>.py's minimal_action_set sizes (gymnax 1.0.1).
MINIMAL_ACTIONS = {"Asterix": 5, "Breakout": 3, "Freeway": 3, "Seaquest": 6, "SpaceInvaders": 4}


@pytest.mark.compiled
def test_minatar_on_gymnax_has_the_minimal_action_sets_the_caps_and_images():
    for game, actions in MINIMAL_ACTIONS.items():
        env_id = f"MinAtar/{game}-v1"
        env = ze.make(env_id, protocol="gymnax_minatar", num_envs=2, backend="gymnax")
        package = ze.make(env_id, protocol="gymnax_minatar", backend="gymnasium")
        with env, package:
            assert env.num_actions == actions == package.num_actions, game
            assert env.max_episode_steps == package.max_episode_steps, game
            assert env.is_image and env.observation_dtype == np.float32
            assert env.observation_shape[1:] == (10, 10), game
            if game == "Breakout":  # one game's reset compiled (a few seconds each)
                first = env.reset()
                assert first.observation.shape == (2, 4, 10, 10) and first.first.all()
                assert set(np.unique(first.observation)) <= {0.0, 1.0}
    # Freeway never ends but at the cap: truncated there, and the next step is a new game
    with ze.make("MinAtar/Freeway-v1", protocol="gymnax_minatar", backend="gymnax",
                 env_kwargs={"max_steps_in_episode": 40}) as env:  # fmt: skip
        env.reset()
        steps = [env.step(np.zeros(1, np.int32)) for _ in range(41)]
        assert not any(s.game_over[0] for s in steps[:39])
        assert steps[39].truncated[0] and not steps[39].terminated[0] and steps[39].valid[0]
        assert steps[40].first[0] and not steps[40].valid[0] and steps[40].reward[0] == 0.0


@pytest.mark.parametrize(
    ("env_id", "protocol"),
    [("CartPole-v1", "classic"), ("MinAtar/Breakout-v1", "gymnax_minatar")],
)
@pytest.mark.compiled
def test_the_compiled_step_gives_the_host_steps_timesteps(env_id, protocol):
    """The same seed and actions through the jitted host step and through a ``lax.scan`` of
    :meth:`VectorEnv.xla`'s step: the same TimeSteps, autoresets included."""
    jax = pytest.importorskip("jax")
    steps, n = 300, 3
    with ze.make(env_id, protocol=protocol, num_envs=n, seed=4, backend="gymnax") as env:
        actions = np.random.default_rng(0).integers(0, env.num_actions, (steps, n))
        actions = actions.astype(np.int32)
        env.reset()
        host = [env.step(a) for a in actions]
    with ze.make(env_id, protocol=protocol, num_envs=n, seed=4, backend="gymnax") as env:
        env.reset()
        handle, _, _, step = env.xla()
        _, compiled = jax.jit(lambda h, a: jax.lax.scan(step, h, a))(handle, actions)
        compiled = jax.tree.map(np.asarray, compiled)
    for name in TimeStep._fields:
        expected = np.stack([getattr(ts, name) for ts in host])
        np.testing.assert_allclose(getattr(compiled, name), expected, err_msg=name, rtol=1e-6)
    over = np.stack([ts.game_over for ts in host])
    assert over[:-1].any()  # autoresets inside the window
    t, i = np.argwhere(over[:-1])[0]
    assert host[t + 1].first[i] and not host[t + 1].valid[i] and host[t + 1].reward[i] == 0.0
