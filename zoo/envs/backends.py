"""The environment backends behind :class:`~zoo.envs.VectorEnv`: envpool, ALE's own vector
environment, gymnasium and gymnax (JAX-native: its step runs inside a compiled loop).

Each returns a :class:`~zoo.envs.core.RawStep` in env-id order with "next step" autoreset (the step
after ``terminated`` or ``truncated`` ignores its action and returns the new episode's first
observation with reward 0 and both flags false). envpool, ale-py, gymnasium and gymnax are imported
when a backend is built, not when :mod:`zoo.envs` is imported.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from zoo.envs.core import RawStep, UnsupportedEnvironmentError, XlaUnavailableError

__all__ = [
    "GYMNAX_IDS",
    "AleBackend",
    "EnvpoolBackend",
    "GymnasiumBackend",
    "GymnaxBackend",
    "ale_rom",
    "gymnax_id",
]


def _in_env_order(xp: Any, raw: RawStep, env_id: Any) -> RawStep:
    """``raw`` reordered so that row ``i`` is environment ``i`` (``env_id``: whose each row is)."""
    if xp is np:
        if np.array_equal(env_id, np.arange(len(env_id))):
            return raw
        order = np.argsort(env_id)
        return RawStep(*(x[order] for x in raw))
    return RawStep(*(xp.zeros_like(x).at[env_id].set(x) for x in raw))


def _envpool_raw_step(
    xp: Any, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any
) -> RawStep:
    """envpool's outputs as a :class:`RawStep`, reordered by ``info["env_id"]``.

    envpool runs without ``episodic_life`` here, so ``terminated`` is the real end of a game;
    lost lives are read from ``info["lives"]`` (zeros for suites without lives).
    """
    terminated = terminated.astype(bool)
    truncated = truncated.astype(bool)
    lives = info["lives"] if "lives" in info else xp.zeros(terminated.shape, xp.int32)
    raw = RawStep(
        obs,
        reward,
        terminated,
        truncated,
        info["elapsed_step"] == 0,
        terminated | truncated,
        lives,
    )
    return _in_env_order(xp, raw, info["env_id"])


class EnvpoolBackend:
    """envpool's gymnasium-style pool: synchronous (``batch_size == num_envs``), or with
    ``subsets`` asynchronous with ``batch_size == 1``, so that :meth:`step_some` steps only the
    environments it names (an evaluation's environments still owed games). Both step each
    environment the same way (env ``i`` seeded ``seed + i``); the asynchronous pool has no XLA
    interface."""

    name = "envpool"

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        seed: int,
        kwargs: Mapping[str, Any],
        subsets: bool = False,
    ) -> None:
        import envpool

        # envpool builds float64 Box bounds, which gymnasium notes as a precision warning.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*precision lowered", category=UserWarning)
            self._pool = envpool.make(
                env_id,
                env_type="gymnasium",
                num_envs=num_envs,
                batch_size=1 if subsets else num_envs,
                seed=seed,
                **kwargs,
            )
            _check_discrete(self._pool.action_space, env_id, self._pool.close)
            space = self._pool.observation_space
        #: Whether :meth:`step_some` steps some environments only (the asynchronous pool).
        self.steps_subsets = subsets
        self._all = np.arange(num_envs, dtype=np.int32)
        self._xla: tuple[Any, Callable, Callable, Callable] | None = None
        self.max_episode_steps: int | None = int(self._pool.spec.config.max_episode_steps)
        self.observation_shape = tuple(space.shape)
        self.observation_dtype = np.dtype(space.dtype)
        self.num_actions = int(self._pool.action_space.n)

    def reset(self) -> RawStep:
        if self.steps_subsets:
            self._pool.async_reset()
            obs, _, _, _, info = self._received(len(self._all))
        else:
            obs, info = self._pool.reset()
        n = len(info["env_id"])
        zeros = np.zeros(n, bool)
        return _envpool_raw_step(np, obs, np.zeros(n, np.float32), zeros, zeros, info)

    def step(self, actions: np.ndarray) -> RawStep:
        if self.steps_subsets:
            return self.step_some(actions, self._all)
        obs, reward, terminated, truncated, info = self._pool.step(actions)
        return _envpool_raw_step(np, obs, reward, terminated, truncated, info)

    def step_some(self, actions: np.ndarray, env_ids: np.ndarray) -> RawStep:
        """Step the environments ``env_ids`` (ascending) only; rows in that order. Only a pool
        built with ``subsets``; the others do not step."""
        if not self.steps_subsets:
            raise RuntimeError("step_some needs an EnvpoolBackend built with subsets=True")
        self._pool.send(actions, np.asarray(env_ids, np.int32))
        return _envpool_raw_step(np, *self._received(len(env_ids)))

    def _received(self, count: int) -> tuple[Any, ...]:
        """``count`` single-environment results of the asynchronous pool, concatenated."""
        parts = [self._pool.recv() for _ in range(count)]
        info = {
            key: np.concatenate([part[4][key] for part in parts])
            for key in ("env_id", "elapsed_step", "lives")
            if key in parts[0][4]
        }
        return (*(np.concatenate([part[i] for part in parts]) for i in range(4)), info)

    def xla(self) -> tuple[Any, Callable, Callable, Callable]:
        if self.steps_subsets:
            raise XlaUnavailableError(
                "an environment made with subsets=True (asynchronous envpool pool) steps on the "
                "host only; make it without subsets for a compiled loop"
            )
        if self._xla is None:
            try:
                self._xla = self._pool.xla()
            except Exception as error:  # any failure of envpool's XLA bridge means "unavailable"
                raise XlaUnavailableError(
                    f"envpool's XLA interface failed ({type(error).__name__}: {error}) with jax "
                    f"{_jax_version()}; use the host loop (VectorEnv.step)"
                ) from error
        return self._xla

    def xla_raw_step(self, output: Any) -> RawStep:
        import jax.numpy as jnp

        obs, reward, terminated, truncated, info = output
        return _envpool_raw_step(jnp, obs, reward, terminated, truncated, info)

    def close(self) -> None:
        self._pool.close()


def _no_recv_send(who: str) -> Callable[..., Any]:
    """The ``recv``/``send`` slots of an XLA interface that has only a step (envpool has all
    three): calling it says so."""

    def no_recv_send(*_: Any) -> Any:
        raise XlaUnavailableError(f"{who} has one step function, no separate recv/send")

    return no_recv_send


def ale_rom(env_id: str) -> str:
    """ALE's ROM id of an envpool-style Atari id: ``"MsPacman-v5"`` -> ``"ms_pacman"``.

    envpool names each game after ALE's ROM id in CamelCase, so the ROM is the one whose parts,
    capitalised and joined, give the game (all 104 envpool games have one, checked in the tests).

    Raises:
      UnsupportedEnvironmentError: the id names no ROM that ale-py ships.
    """
    from ale_py import roms

    game = env_id.removesuffix("-v5")
    ids = roms.get_all_rom_ids()
    by_game = {"".join(part.capitalize() for part in rom.split("_")): rom for rom in ids}
    if game not in by_game:
        raise UnsupportedEnvironmentError(f"ale-py ships no ROM for {env_id!r}")
    return by_game[game]


class AleBackend:
    """ALE's own vector environment (ale-py ≥ 0.11 ``AtariVectorEnv``, Farama's C++ port of
    envpool's Atari preprocessing), synchronous (``batch_size == num_envs``), "next step"
    autoreset.

    ``first`` is left to :func:`~zoo.envs.core.finish_timestep` (every observation after a game
    over): ALE reports the episode's frame number, which counts the no-op start frames, not an
    agent-step counter like envpool's ``elapsed_step``. Its XLA interface (``xla()``) is ALE's own
    FFI step, on CPU and GPU.
    """

    name = "ale"

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        seed: int,
        kwargs: Mapping[str, Any],
    ) -> None:
        from ale_py.vector_env import AtariVectorEnv

        kwargs = dict(kwargs)
        self._envs = AtariVectorEnv(
            ale_rom(env_id),
            num_envs,
            batch_size=num_envs,
            autoreset_mode="NextStep",
            **kwargs,
        )
        space = self._envs.single_observation_space
        self.observation_shape = tuple(space.shape)
        self.observation_dtype = np.dtype(space.dtype)
        self.num_actions = int(self._envs.single_action_space.n)
        frames = kwargs.get("max_num_frames_per_episode")
        self.max_episode_steps: int | None = (
            None if frames is None else int(frames) // int(kwargs.get("frameskip", 4))
        )
        self._seed: int | None = seed  # used by the first reset only
        self._xla: tuple[Any, Callable, Callable, Callable] | None = None

    def _raw(
        self, xp: Any, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any
    ) -> RawStep:
        terminated = terminated.astype(bool)
        truncated = truncated.astype(bool)
        raw = RawStep(
            obs,
            reward.astype(xp.float32),
            terminated,
            truncated,
            xp.zeros(terminated.shape, bool),  # finish_timestep: the step after a game over
            terminated | truncated,
            info["lives"].astype(xp.int32),
        )
        return _in_env_order(xp, raw, info["env_id"])

    def reset(self) -> RawStep:
        obs, info = self._envs.reset(seed=self._seed)
        self._seed = None
        n = len(info["env_id"])
        zeros = np.zeros(n, bool)
        return self._raw(np, obs, np.zeros(n, np.float32), zeros, zeros, info)

    def step(self, actions: np.ndarray) -> RawStep:
        return self._raw(np, *self._envs.step(actions))

    def xla(self) -> tuple[Any, Callable, Callable, Callable]:
        if self._xla is None:
            try:
                handle, _, xla_step = self._envs.xla()
            except Exception as error:  # any failure of ALE's FFI bridge means "unavailable"
                raise XlaUnavailableError(
                    f"ALE's XLA interface failed ({type(error).__name__}: {error}) with jax "
                    f"{_jax_version()}; use the host loop (VectorEnv.step)"
                ) from error
            none = _no_recv_send("ALE's XLA interface")
            self._xla = (handle, none, none, xla_step)
        return self._xla

    def xla_raw_step(self, output: Any) -> RawStep:
        import jax.numpy as jnp

        return self._raw(jnp, *output)

    def close(self) -> None:
        self._envs.close()


def _check_discrete(action_space: Any, env_id: str, close: Callable[[], Any]) -> None:
    from gymnasium import spaces

    if not isinstance(action_space, spaces.Discrete):
        close()
        raise UnsupportedEnvironmentError(
            f"{env_id!r} has the action space {action_space}; zoo's agents need discrete actions"
        )


def _jax_version() -> str:
    try:
        import jax
    except ImportError:
        return "(not installed)"
    return jax.__version__


def _observation_transform(
    space: Any, *, channels_last_to_first: bool
) -> tuple[Callable[[np.ndarray], np.ndarray], tuple[int, ...], np.dtype]:
    """How the adapter turns gymnasium's batched observations into zoo's, and the result's spec."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):  # e.g. FrozenLake, Taxi: one-hot float32
        n, start = int(space.n), int(space.start)
        eye = np.eye(n, dtype=np.float32)
        return (lambda obs: eye[np.asarray(obs) - start]), (n,), np.dtype(np.float32)
    if not isinstance(space, spaces.Box):
        raise UnsupportedEnvironmentError(
            f"observation space {space} is not a Box or Discrete space"
        )
    shape, dtype = tuple(space.shape), np.dtype(space.dtype)
    if channels_last_to_first:  # MinAtar: [10, 10, C] bool -> [C, 10, 10] float32 of 0/1
        # float32, not uint8: the networks read uint8 as pixels and divide it by 255.
        return (
            lambda obs: np.moveaxis(np.asarray(obs), -1, 1).astype(np.float32),
            (shape[-1], *shape[:-1]),
            np.dtype(np.float32),
        )
    return (lambda obs: np.asarray(obs, dtype)), shape, dtype


class GymnasiumBackend:
    """``gymnasium.make_vec`` (synchronous) with ``AutoresetMode.NEXT_STEP``: envpool's semantics.

    ``first`` is left to :func:`~zoo.envs.core.finish_timestep` (gymnasium has no
    ``elapsed_step``): the observation after :meth:`reset` and after any game over.
    ``game_over`` is ``terminated | truncated`` (no gymnasium suite has lives here).
    """

    name = "gymnasium"

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        seed: int,
        kwargs: Mapping[str, Any],
        channels_last_to_first: bool = False,
    ) -> None:
        import gymnasium
        from gymnasium.vector import AutoresetMode

        self._envs = gymnasium.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP},
            **kwargs,
        )
        action_space = self._envs.single_action_space
        _check_discrete(action_space, env_id, self._envs.close)
        self._action_start = int(action_space.start)
        self.num_actions = int(action_space.n)
        try:
            transform = _observation_transform(
                self._envs.single_observation_space, channels_last_to_first=channels_last_to_first
            )
        except UnsupportedEnvironmentError:
            self._envs.close()
            raise
        self._transform, self.observation_shape, self.observation_dtype = transform
        self.max_episode_steps: int | None = kwargs.get(
            "max_episode_steps", gymnasium.spec(env_id).max_episode_steps
        )
        self._num_envs = num_envs
        self._seed: int | None = seed  # used by the first reset only

    def reset(self) -> RawStep:
        obs, _ = self._envs.reset(seed=self._seed)
        self._seed = None
        flags = np.zeros(self._num_envs, bool)
        return RawStep(
            self._transform(obs),
            np.zeros(self._num_envs, np.float32),
            flags,
            flags,
            flags,
            flags,
            np.zeros(self._num_envs, np.int32),
        )

    def step(self, actions: np.ndarray) -> RawStep:
        obs, reward, terminated, truncated, _ = self._envs.step(actions + self._action_start)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool)
        return RawStep(
            self._transform(obs),
            np.asarray(reward, np.float32),
            terminated,
            truncated,
            np.zeros(self._num_envs, bool),
            terminated | truncated,
            np.zeros(self._num_envs, np.int32),
        )

    def xla(self) -> tuple[Any, Callable, Callable, Callable]:
        raise XlaUnavailableError(
            "the gymnasium adapter has no XLA interface (only envpool environments do); "
            "use the host loop (VectorEnv.step)"
        )

    def xla_raw_step(self, output: Any) -> RawStep:
        raise XlaUnavailableError("the gymnasium adapter has no XLA interface")

    def close(self) -> None:
        self._envs.close()


#: zoo's ids of the environments gymnax runs -> gymnax's ids (``zoo.envs.resolve_env``).
GYMNAX_IDS: Mapping[str, str] = {
    "CartPole-v1": "CartPole-v1",
    "Acrobot-v1": "Acrobot-v1",
    "MountainCar-v0": "MountainCar-v0",
    **{
        f"MinAtar/{game}-v1": f"{game}-MinAtar"
        for game in ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
    },
}


def gymnax_id(env_id: str) -> str | None:
    """gymnax's id of a zoo environment id (``"MinAtar/Breakout-v1"`` -> ``"Breakout-MinAtar"``),
    or ``None`` where gymnax has no such environment."""
    return GYMNAX_IDS.get(env_id)


class GymnaxBackend:
    """gymnax's JAX-native environments (Lange 2022, gymnax ≥ 1.0), vmapped over ``num_envs``.

    The whole pool is a pytree, the *inner handle* ``(states, key, done)``: the step is a pure
    JAX function of it, so :meth:`xla` hands it to a compiled loop, where the environment steps
    inside the program (no host round trip). The host path (:meth:`step`) calls the same
    function, jitted. "Next step" autoreset as envpool's: the step after ``terminated`` or
    ``truncated`` resets (gymnax's ``reset_env``), ignores its action and returns reward 0 and
    both flags false (gymnax's own ``step`` resets within the step instead). ``truncated`` is
    gymnax's ``is_truncated`` (``time >= max_steps_in_episode``) where the game did not also
    terminate. Each environment draws its own keys from one key seeded with ``seed``.
    """

    name = "gymnax"

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        seed: int,
        kwargs: Mapping[str, Any],
        channels_last_to_first: bool = False,
    ) -> None:
        import gymnax
        import jax
        import jax.numpy as jnp

        name = gymnax_id(env_id)
        if name is None:
            raise UnsupportedEnvironmentError(f"gymnax has no environment {env_id!r}")
        env, params = gymnax.make(name)
        params = params.replace(**kwargs)
        probe = jax.eval_shape(lambda key: env.reset_env(key, params)[0], jax.random.PRNGKey(0))
        shape = tuple(probe.shape)
        if channels_last_to_first:  # MinAtar: [10, 10, C] bool -> [C, 10, 10] float32 of 0/1
            shape = (shape[-1], *shape[:-1])
        self.observation_shape = shape
        self.observation_dtype = np.dtype(np.float32)
        self.num_actions = int(env.num_actions)
        self.max_episode_steps: int | None = int(params.max_steps_in_episode)
        self._num_envs = num_envs
        self._key = jax.random.PRNGKey(seed)
        self._inner: Any = None

        def observe(obs: Any) -> Any:
            obs = jnp.asarray(obs, jnp.float32)
            return jnp.moveaxis(obs, -1, 1) if channels_last_to_first else obs

        reset_all = jax.vmap(env.reset_env, in_axes=(0, None))
        step_all = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
        truncated_all = jax.vmap(env.is_truncated, in_axes=(0, None))

        def reset(key: Any) -> tuple[Any, Any]:
            key, sub = jax.random.split(key)
            obs, states = reset_all(jax.random.split(sub, num_envs), params)
            return (states, key, jnp.zeros(num_envs, bool)), observe(obs)

        def step(inner: Any, actions: Any) -> tuple[Any, tuple[Any, ...]]:
            states, key, done = inner
            key, step_key, reset_key = jax.random.split(key, 3)
            obs, new, reward, terminated, _ = step_all(
                jax.random.split(step_key, num_envs), states, actions, params
            )
            truncated = truncated_all(new, params) & ~terminated
            fresh_obs, fresh = reset_all(jax.random.split(reset_key, num_envs), params)

            def pick(a: Any, b: Any) -> Any:
                return jnp.where(done.reshape(-1, *([1] * (a.ndim - 1))), a, b)

            states = jax.tree.map(pick, fresh, new)
            obs = pick(fresh_obs, obs)
            reward = jnp.where(done, 0.0, reward).astype(jnp.float32)
            terminated = terminated & ~done
            truncated = truncated & ~done
            return (states, key, terminated | truncated), (observe(obs), reward, terminated,
                                                           truncated)  # fmt: skip

        self._reset = jax.jit(reset)
        self._step = step
        self._host_step = jax.jit(step)

    def _raw(self, xp: Any, output: tuple[Any, ...]) -> RawStep:
        obs, reward, terminated, truncated = output
        n = self._num_envs
        return RawStep(
            obs,
            reward,
            terminated,
            truncated,
            xp.zeros(n, bool),  # finish_timestep: the step after a game over
            terminated | truncated,
            xp.zeros(n, xp.int32),
        )

    def reset(self) -> RawStep:
        self._inner, obs = self._reset(self._key)
        self._key = self._inner[1]
        n = self._num_envs
        zeros = np.zeros(n, bool)
        return self._raw(np, (np.asarray(obs), np.zeros(n, np.float32), zeros, zeros))

    def step(self, actions: np.ndarray) -> RawStep:
        if self._inner is None:
            raise RuntimeError("call reset() before step()")
        self._inner, output = self._host_step(self._inner, actions)
        return self._raw(np, tuple(np.asarray(x) for x in output))

    def xla(self) -> tuple[Any, Callable, Callable, Callable]:
        """``(inner handle, -, -, step)``: the pool as the host left it, and the pure step."""
        none = _no_recv_send("gymnax")
        return self._inner, none, none, self._step

    def xla_raw_step(self, output: Any) -> RawStep:
        import jax.numpy as jnp

        return self._raw(jnp, output)

    def close(self) -> None:
        self._inner = None
