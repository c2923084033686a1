"""The vectorised environment interface: :class:`VectorEnv`, :class:`TimeStep`, episode statistics.

A :class:`VectorEnv` wraps one backend (envpool, or the gymnasium adapter) behind a single host API
with envpool's "next step" autoreset semantics, and adds the flags a learner needs:
``reward`` clipped per protocol in training next to the unclipped ``raw_reward``, ``first``,
``game_over`` and ``valid``. The semantics are documented, with what was measured, in
:mod:`zoo.envs`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from types import TracebackType

    from zoo.envs.protocols import Protocol as EnvProtocol

__all__ = [
    "Episode",
    "EpisodeTracker",
    "ProtocolMismatchError",
    "TimeStep",
    "UnknownEnvironmentError",
    "UnsupportedEnvironmentError",
    "VectorEnv",
    "XlaUnavailableError",
    "observation_nbytes",
]


class XlaUnavailableError(RuntimeError):
    """envpool's XLA interface cannot be used here; the message says why."""


class UnknownEnvironmentError(ValueError):
    """An environment id that neither envpool nor gymnasium knows (with the closest ids)."""


class UnsupportedEnvironmentError(ValueError):
    """A known environment that zoo cannot run (continuous actions, an unsupported suite, ...)."""


class ProtocolMismatchError(ValueError):
    """A protocol for another kind of environment (an Atari protocol on CartPole, say)."""


class TimeStep(NamedTuple):
    """One vector step, batch-major over environments (numpy arrays, or jax arrays from XLA).

    Attributes:
      observation: ``[N, *observation_shape]``; on the step where ``terminated`` or ``truncated``
        is set, the true final observation of the episode.
      reward: ``[N]`` float32, clipped to ``±protocol.reward_clip`` when training; 0 on a step
        that is not ``valid``.
      raw_reward: ``[N]`` float32, never clipped (episode returns are computed from it).
      terminated: ``[N]`` bool, the episode ended in a terminal state (bootstrap with
        ``1 - terminated``); in training with episodic life this includes each lost life.
      truncated: ``[N]`` bool, the episode was cut by the time limit (the observation is not
        terminal: bootstrap from it).
      first: ``[N]`` bool, this observation is the first of a *game* (envpool:
        ``elapsed_step == 0``); not set after a lost life.
      game_over: ``[N]`` bool, the game really ended (terminal with all lives lost, or
        truncated); per-game statistics are reported here.
      valid: ``[N]`` bool, False exactly where ``(previous observation, action, reward,
        observation)`` is not a transition: after ``reset()`` and on the auto-reset step that
        follows any ``terminated`` or ``truncated`` (including envpool's life-loss pseudo-step).
        The action of such a step was ignored by the environment.
    """

    observation: Any
    reward: Any
    raw_reward: Any
    terminated: Any
    truncated: Any
    first: Any
    game_over: Any
    valid: Any


class RawStep(NamedTuple):
    """What a backend returns, in env-id order: the :class:`TimeStep` fields it knows itself."""

    observation: Any
    reward: Any
    terminated: Any
    truncated: Any
    first: Any
    game_over: Any


def finish_timestep(xp: Any, raw: RawStep, prev_done: Any, reward_clip: float | None) -> TimeStep:
    """A :class:`TimeStep` from a backend's step and the previous step's ``terminated | truncated``.

    ``xp`` is ``numpy`` on the host path and ``jax.numpy`` inside a compiled loop, so both paths
    share this one definition of ``reward``, ``valid`` and the flag dtypes.
    """
    raw_reward = raw.reward.astype(xp.float32)
    reward = raw_reward if reward_clip is None else xp.clip(raw_reward, -reward_clip, reward_clip)
    return TimeStep(
        observation=raw.observation,
        reward=reward,
        raw_reward=raw_reward,
        terminated=raw.terminated.astype(bool),
        truncated=raw.truncated.astype(bool),
        first=raw.first.astype(bool),
        game_over=raw.game_over.astype(bool),
        valid=xp.logical_not(prev_done),
    )


class Backend(Protocol):
    """What :class:`VectorEnv` needs from an environment implementation (envpool or gymnasium)."""

    name: str
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    num_actions: int
    max_episode_steps: int | None

    def reset(self) -> RawStep: ...

    def step(self, actions: np.ndarray) -> RawStep: ...

    def close(self) -> None: ...

    def xla(self) -> tuple[Any, Callable, Callable, Callable]: ...

    def xla_raw_step(self, output: Any) -> RawStep: ...


class VectorEnv:
    """``num_envs`` environments stepped together, with envpool's "next step" autoreset.

    Built by :func:`zoo.envs.make`. The host API is :meth:`reset` and :meth:`step`; a compiled loop
    uses :meth:`xla` (envpool only) and turns each XLA step into a :class:`TimeStep` with
    :meth:`xla_timestep`.

    Attributes:
      env_id: the canonical environment id (e.g. ``"Pong-v5"`` for ``"PongNoFrameskip-v4"``).
      protocol: the :class:`~zoo.envs.Protocol` it runs under.
      training: training settings (episodic life, reward clipping) or evaluation settings.
      num_envs: number of environments ``N``.
      seed: the seed the environments were created with.
      backend: ``"envpool"`` or ``"gymnasium"``.
      observation_shape: shape of one observation, e.g. ``(4,)`` or ``(4, 84, 84)``.
      observation_dtype: numpy dtype of observations (``uint8`` for Atari frames).
      num_actions: size of the discrete action set.
      frame_skip: frames per agent step.
      stack: frames stacked along observation axis 0 (1 when there is no stacking).
      is_image: observations are rank 3, channels (or stacked frames) first.
      max_episode_steps: the time limit in agent steps (``truncated`` when reached), or ``None``.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        env_id: str,
        protocol: EnvProtocol,
        training: bool,
        num_envs: int,
        seed: int,
    ) -> None:
        self._backend = backend
        self.env_id = env_id
        self.protocol = protocol
        self.training = training
        self.num_envs = num_envs
        self.seed = seed
        self.backend = backend.name
        self.observation_shape = tuple(backend.observation_shape)
        self.observation_dtype = np.dtype(backend.observation_dtype)
        self.num_actions = int(backend.num_actions)
        self.frame_skip = protocol.frame_skip
        self.stack = protocol.stack
        self.is_image = len(self.observation_shape) == 3
        self.max_episode_steps = backend.max_episode_steps
        self._reward_clip = protocol.training_reward_clip(training)
        self._prev_done: np.ndarray | None = None
        self._closed = False

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """Shape of one stored frame: an observation without its stack axis (when ``stack > 1``)."""
        return self.observation_shape[1:] if self.stack > 1 else self.observation_shape

    def reset(self) -> TimeStep:
        """Reset every environment; all observations are ``first`` and none is ``valid``."""
        raw = self._backend.reset()
        timestep = finish_timestep(np, raw, np.ones(self.num_envs, bool), self._reward_clip)
        self._prev_done = np.zeros(self.num_envs, bool)
        return timestep

    def step(self, actions: np.ndarray) -> TimeStep:
        """Step every environment with ``actions`` (integers, shape ``[num_envs]``).

        An environment whose previous step was terminal or truncated ignores its action and
        returns its next episode's first observation (``valid`` False, reward 0).
        """
        if self._prev_done is None:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"actions must have shape ({self.num_envs},), got {actions.shape}")
        if not np.issubdtype(actions.dtype, np.integer):
            raise TypeError(f"actions must be integers, got dtype {actions.dtype}")
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise ValueError(
                f"actions must lie in [0, {self.num_actions}), got {actions.min()}..{actions.max()}"
            )
        raw = self._backend.step(actions.astype(np.int32, copy=False))
        timestep = finish_timestep(np, raw, self._prev_done, self._reward_clip)
        self._prev_done = timestep.terminated | timestep.truncated
        return timestep

    def xla(self) -> tuple[Any, Callable, Callable, Callable]:
        """envpool's XLA interface ``(handle, recv, send, step)`` for a compiled loop.

        Call :meth:`reset` first (``async_reset`` followed by XLA ``step`` puts observations one
        action behind). ``step(handle, actions)`` returns ``(handle, (observation, reward,
        terminated, truncated, info))``; thread ``handle`` through the loop's carry and convert the
        output with :meth:`xla_timestep`. The host :meth:`step` does not see XLA steps.

        Raises:
          XlaUnavailableError: for the gymnasium adapter, or where envpool's XLA interface fails
            with the installed JAX; the message says why.
        """
        return self._backend.xla()

    @property
    def has_xla(self) -> bool:
        """Whether envpool's XLA bridge builds here (False for the gymnasium adapter).

        A compiled 10-step CartPole loop through it is exercised by ``tests/test_envs.py``; it
        worked with jax 0.10.2 on CPU.
        """
        try:
            self.xla()
        except XlaUnavailableError:
            return False
        return True

    def xla_timestep(self, output: Any, prev_done: Any) -> TimeStep:
        """The :class:`TimeStep` (jax arrays) of one XLA ``step`` output.

        Args:
          output: the second element of ``step(handle, actions)``.
          prev_done: ``[N]`` bool, ``terminated | truncated`` of the previous XLA step; all False
            for the first step after :meth:`reset`.
        """
        import jax.numpy as jnp

        return finish_timestep(
            jnp, self._backend.xla_raw_step(output), jnp.asarray(prev_done), self._reward_clip
        )

    def close(self) -> None:
        """Release the environments (idempotent)."""
        if not self._closed:
            self._closed = True
            self._backend.close()

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"VectorEnv({self.env_id!r}, protocol={self.protocol.name!r}, "
            f"num_envs={self.num_envs}, training={self.training}, backend={self.backend!r}, "
            f"observation_shape={self.observation_shape}, num_actions={self.num_actions})"
        )


def observation_nbytes(env: VectorEnv) -> int:
    """Bytes of one stored frame: for stacked image observations only the newest 84×84 frame.

    Replay stores each frame once and rebuilds stacks at sample time, so this is the per-item
    observation cost to budget before allocating a buffer.
    """
    return math.prod(env.frame_shape) * env.observation_dtype.itemsize


class Episode(NamedTuple):
    """One finished game: its unclipped return, its length in agent steps, and its environment."""

    episode_return: float
    length: int
    env_index: int


class EpisodeTracker:
    """Per-environment *game* returns (from ``raw_reward``) and lengths (in agent steps).

    A game's length counts its ``valid`` steps, so envpool's life-loss pseudo-steps are not
    counted (envpool's ``elapsed_step`` does not count them either). With episodic life a game
    spans several training episodes; it finishes on ``game_over``.
    """

    def __init__(self, num_envs: int, window: int = 100) -> None:
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        #: The last ``window`` finished games.
        self.recent: deque[Episode] = deque(maxlen=window)
        #: Games finished since construction.
        self.total_games = 0

    def update(self, timestep: TimeStep) -> list[Episode]:
        """Account one vector step; returns the games that finished on it (in env order)."""
        first = np.asarray(timestep.first)
        valid = np.asarray(timestep.valid)
        self._returns[first] = 0.0
        self._lengths[first] = 0
        self._returns += np.where(valid, np.asarray(timestep.raw_reward, np.float64), 0.0)
        self._lengths += valid
        over = np.flatnonzero(np.asarray(timestep.game_over))
        finished = [Episode(float(self._returns[i]), int(self._lengths[i]), int(i)) for i in over]
        self._returns[over] = 0.0
        self._lengths[over] = 0
        self.recent.extend(finished)
        self.total_games += len(finished)
        return finished

    def mean_recent_return(self) -> float:
        """Mean return of the recent games (``nan`` before the first game finishes)."""
        if not self.recent:
            return math.nan
        return float(np.mean([e.episode_return for e in self.recent]))
