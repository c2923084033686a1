"""The vectorised environment interface: :class:`VectorEnv`, :class:`TimeStep`, episode statistics.

A :class:`VectorEnv` wraps one backend (envpool, ALE's vector env or the gymnasium adapter) behind
a single host API with envpool's "next step" autoreset semantics, and adds the flags a learner
needs: ``reward`` clipped per protocol in training next to the unclipped ``raw_reward``, ``first``,
``game_over`` and ``valid``. The semantics are documented, with what was measured, in
:mod:`zoo.envs`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from types import TracebackType

    from zoo.envs.protocols import Protocol as EnvProtocol

__all__ = [
    "EnvState",
    "Episode",
    "EpisodeTracker",
    "ProtocolMismatchError",
    "StepsSubsets",
    "TimeStep",
    "UnknownEnvironmentError",
    "UnsupportedEnvironmentError",
    "VectorEnv",
    "XlaHandle",
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
      terminated: ``[N]`` bool, the transition ended in a terminal state (bootstrap with
        ``1 - terminated``): the game ended, or, in training under a protocol with
        ``life_loss_terminal``, a life was lost (the game then goes on: see ``game_over``).
      truncated: ``[N]`` bool, the episode was cut by the time limit (the observation is not
        terminal: bootstrap from it).
      first: ``[N]`` bool, this observation starts the agent's episode: its frame stack starts
        here, zero-padded, and a recurrent core resets here. Set on a game's first observation
        (envpool: ``elapsed_step == 0``) and, under a protocol with ``life_loss_resets_stack``,
        on the observation returned by the step that lost a life.
      game_over: ``[N]`` bool, the game ended (terminal with all lives lost, or truncated):
        the next step ignores its action and starts a new game. Per-game statistics are
        reported here.
      valid: ``[N]`` bool, False exactly where ``(previous observation, action, reward,
        observation)`` is not a transition: after ``reset()`` and on the auto-reset step that
        follows ``game_over``. The action of such a step was ignored by the environment.
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
    """What a backend returns, in env-id order: the :class:`TimeStep` fields it knows itself.

    ``terminated`` is the real end of a game (never a lost life), ``first`` a game's first
    observation where the backend counts steps itself (envpool's ``elapsed_step == 0``; zeros
    elsewhere: :func:`finish_timestep` also marks every observation after a game over as
    ``first``, on every backend) and ``lives`` the lives left (zeros where the environment has
    none).
    """

    observation: Any
    reward: Any
    terminated: Any
    truncated: Any
    first: Any
    game_over: Any
    lives: Any


class EnvState(NamedTuple):
    """What :func:`finish_timestep` remembers between steps, per environment (``[N]`` each).

    Attributes:
      game_over: the previous step ended the game (this step auto-resets and ignores its action).
      lives: the lives after the previous step.
      age: agent steps since the agent's episode started (0 on its first observation), capped at
        ``stack - 1``: the stack's newest ``age + 1`` frames are the episode's, the rest zeros.
    """

    game_over: Any
    lives: Any
    age: Any


class TimeStepRules(NamedTuple):
    """The protocol's rules that turn a :class:`RawStep` into a :class:`TimeStep`.

    Attributes:
      reward_clip: clip of ``TimeStep.reward`` (``None``: none).
      life_loss_terminal: a drop in lives sets ``terminated`` (training under such a protocol).
      life_loss_resets_stack: a drop in lives sets ``first`` and restarts the frame stack.
      stack: frames stacked along observation axis 0 (1: no stack, nothing to pad).
      repeat_first_frame: the stack's slots older than the agent's episode hold the episode's
        first frame (the protocol's ``game_start_stack: repeat``), not zeros.
    """

    reward_clip: float | None
    life_loss_terminal: bool
    life_loss_resets_stack: bool
    stack: int
    repeat_first_frame: bool = False


def state_before_reset(xp: Any, raw: RawStep) -> EnvState:
    """The :class:`EnvState` to finish a reset's ``raw`` with: as if every game had just ended.

    So the reset's observations are not ``valid`` (they end no transition) and no life counts
    as lost.
    """
    n = raw.reward.shape[0]
    return EnvState(
        game_over=xp.ones(n, bool), lives=raw.lives.astype(xp.int32), age=xp.zeros(n, xp.int32)
    )


def finish_timestep(
    xp: Any, raw: RawStep, state: EnvState, rules: TimeStepRules
) -> tuple[TimeStep, EnvState]:
    """A :class:`TimeStep` from a backend's step, and the state for the next one.

    ``xp`` is ``numpy`` on the host path and ``jax.numpy`` inside a compiled loop, so both paths
    share this one definition of ``reward``, ``valid``, the life-loss rules, the zero-padded
    frame stack and the flag dtypes:

    - ``valid`` is False after the previous step's ``game_over`` (the backend auto-resets), and
      that observation is ``first``.
    - A life is lost where a valid step drops ``lives`` (dqn_zoo's ``ZeroDiscountOnLifeLoss``
      and Dopamine's ``terminal_on_life_loss`` compare lives the same way). With
      ``life_loss_terminal`` that step is ``terminated`` (discount 0) while the game goes on;
      with ``life_loss_resets_stack`` its observation is ``first`` (unless the game ended).
    - Frames of the stack older than the agent's episode are zeros (dqn_zoo and Dopamine pad
      with zeros), or with ``repeat_first_frame`` the episode's first frame (envpool's own stack
      at a game start, gymnasium's ``FrameStack``).
    """
    raw_reward = raw.reward.astype(xp.float32)
    clip = rules.reward_clip
    reward = raw_reward if clip is None else xp.clip(raw_reward, -clip, clip)
    valid = xp.logical_not(state.game_over)
    lives = raw.lives.astype(xp.int32)
    game_over = raw.game_over.astype(bool)
    lost = valid & (lives < state.lives)
    terminated = raw.terminated.astype(bool)
    first = raw.first.astype(bool) | state.game_over.astype(bool)  # a game starts after one ends
    if rules.life_loss_terminal:
        terminated = terminated | lost
    if rules.life_loss_resets_stack:
        first = first | (lost & xp.logical_not(game_over))
    age = xp.where(first, 0, xp.minimum(state.age + 1, rules.stack - 1)).astype(xp.int32)
    observation = raw.observation
    if rules.stack > 1:  # fill the slots older than the agent's episode
        oldest = (rules.stack - 1 - age)[:, None]  # the slot of the episode's first frame
        if rules.repeat_first_frame:
            slots = xp.maximum(xp.arange(rules.stack)[None, :], oldest)
            observation = observation[xp.arange(observation.shape[0])[:, None], slots]
        else:
            keep = xp.arange(rules.stack) >= oldest
            keep = keep.reshape(*keep.shape, *([1] * (observation.ndim - 2)))
            observation = xp.where(keep, observation, xp.zeros((), observation.dtype))
    timestep = TimeStep(
        observation=observation,
        reward=reward,
        raw_reward=raw_reward,
        terminated=terminated,
        truncated=raw.truncated.astype(bool),
        first=first,
        game_over=game_over,
        valid=valid,
    )
    return timestep, EnvState(game_over=game_over, lives=lives, age=age)


class XlaHandle(NamedTuple):
    """The handle a compiled loop threads through its carry: envpool's, and the env's state.

    Attributes:
      handle: envpool's XLA handle.
      state: the :class:`EnvState` after the latest step.
    """

    handle: Any
    state: EnvState


class Backend(Protocol):
    """What :class:`VectorEnv` needs from a backend (envpool, ALE's vector env, gymnasium)."""

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


@runtime_checkable
class StepsSubsets(Protocol):
    """A backend that can step some of its environments only (envpool's asynchronous pool):
    :meth:`VectorEnv.step` uses it once environments are retired."""

    steps_subsets: bool

    def step_some(self, actions: np.ndarray, env_ids: np.ndarray) -> RawStep: ...


class VectorEnv:
    """``num_envs`` environments stepped together, with envpool's "next step" autoreset.

    Built by :func:`zoo.envs.make`. The host API is :meth:`reset` and :meth:`step`; a compiled loop
    uses :meth:`xla` (envpool only), whose step returns the same :class:`TimeStep` as the host
    path. Both apply the protocol's rules (:func:`finish_timestep`): reward clipping in training,
    the life-loss rules, and frame stacks zero-padded before the agent's episode.

    Attributes:
      env_id: the canonical environment id (e.g. ``"Pong-v5"`` for ``"PongNoFrameskip-v4"``).
      protocol: the :class:`~zoo.envs.Protocol` it runs under.
      training: training settings (life loss terminal where the protocol says so, clipped
        rewards) or evaluation settings.
      num_envs: number of environments ``N``.
      seed: the seed the environments were created with.
      backend: ``"envpool"``, ``"ale"`` or ``"gymnasium"``.
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
        self.game_start_stack = protocol.game_start_stack
        self.is_image = len(self.observation_shape) == 3
        self.max_episode_steps = backend.max_episode_steps
        self._rules = TimeStepRules(
            reward_clip=protocol.training_reward_clip(training),
            life_loss_terminal=protocol.life_loss_terminates(training),
            life_loss_resets_stack=protocol.life_loss_resets_stack,
            stack=self.stack if self.is_image else 1,
            repeat_first_frame=protocol.game_start_stack == "repeat",
        )
        self._state: EnvState | None = None
        self._active = np.arange(num_envs)
        self._closed = False

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """Shape of one stored frame: an observation without its stack axis (when ``stack > 1``)."""
        return self.observation_shape[1:] if self.stack > 1 else self.observation_shape

    def reset(self) -> TimeStep:
        """Reset every environment; all observations are ``first`` and none is ``valid``.
        Retired environments (:meth:`retire`) stay retired."""
        raw = self._backend.reset()
        timestep, self._state = finish_timestep(np, raw, state_before_reset(np, raw), self._rules)
        if len(self._active) < self.num_envs:
            timestep = TimeStep(*(np.asarray(x)[self._active] for x in timestep))
        return timestep

    @property
    def skips_retired(self) -> bool:
        """Whether retired environments stop stepping (envpool's Atari games made with
        ``retiring=True``); otherwise they step on unseen, with action 0."""
        return isinstance(self._backend, StepsSubsets) and self._backend.steps_subsets

    @property
    def active(self) -> np.ndarray:
        """The environments :meth:`step` steps (ascending): all of them until some are
        retired."""
        return self._active.copy()

    def retire(self, env_ids: Any) -> None:
        """Stop stepping the environments ``env_ids``, for good: from now on :meth:`step` takes
        the actions of the :attr:`active` environments only and returns their rows only.

        An evaluation retires an environment once it has played its quota of games. Made with
        ``retiring=True`` (:func:`zoo.envs.make`), envpool's Atari games step the active ones only;
        the other backends still step the retired ones (with action 0) and drop their rows.
        """
        env_ids = np.unique(np.asarray(env_ids, np.int64).reshape(-1))
        if env_ids.size and (env_ids[0] < 0 or env_ids[-1] >= self.num_envs):
            raise ValueError(
                f"env_ids must lie in [0, {self.num_envs}), got {env_ids.min()}..{env_ids.max()}"
            )
        self._active = np.setdiff1d(self._active, env_ids)

    def step(self, actions: np.ndarray) -> TimeStep:
        """Step every :attr:`active` environment with ``actions`` (integers, one per active
        environment: shape ``[num_envs]`` until some are retired).

        An environment whose previous step ended its game (``game_over``) ignores its action and
        returns its next game's first observation (``valid`` False, reward 0).
        """
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        active = self._active
        if not len(active):
            raise RuntimeError("every environment is retired; there is nothing to step")
        actions = np.asarray(actions)
        if actions.shape != (len(active),):
            which = "" if len(active) == self.num_envs else " (one per active environment)"
            raise ValueError(
                f"actions must have shape ({len(active)},){which}, got {actions.shape}"
            )
        if not np.issubdtype(actions.dtype, np.integer):
            raise TypeError(f"actions must be integers, got dtype {actions.dtype}")
        if actions.size and (actions.min() < 0 or actions.max() >= self.num_actions):
            raise ValueError(
                f"actions must lie in [0, {self.num_actions}), got {actions.min()}..{actions.max()}"
            )
        actions = actions.astype(np.int32, copy=False)
        if len(active) == self.num_envs:
            raw = self._backend.step(actions)
            timestep, self._state = finish_timestep(np, raw, self._state, self._rules)
            return timestep
        if self.skips_retired:
            raw = self._backend.step_some(actions, active)
        else:  # the retired environments step too, with action 0; their rows are dropped
            every = np.zeros(self.num_envs, np.int32)
            every[active] = actions
            raw = RawStep(*(np.asarray(x)[active] for x in self._backend.step(every)))
        state = EnvState(*(x[active] for x in self._state))
        timestep, state = finish_timestep(np, raw, state, self._rules)
        for whole, rows in zip(self._state, state, strict=True):
            whole[active] = rows
        return timestep

    def xla(self) -> tuple[XlaHandle, Callable, Callable, Callable]:
        """envpool's XLA interface ``(handle, recv, send, step)`` for a compiled loop.

        Call :meth:`reset` first (``async_reset`` followed by XLA ``step`` puts observations one
        action behind): the returned ``handle`` is an :class:`XlaHandle`, envpool's handle with
        the environments' state as the host left it. ``step(handle, actions)`` returns
        ``(handle, timestep)``: the :class:`TimeStep` (jax arrays) of that step, with the same
        rules as :meth:`step`. Thread ``handle`` through the loop's carry. ``recv`` and ``send``
        are envpool's own (raw outputs). The host :meth:`step` does not see XLA steps.

        Raises:
          XlaUnavailableError: for the gymnasium adapter, or where envpool's XLA interface fails
            with the installed JAX; the message says why.
        """
        import jax.numpy as jnp

        handle, recv, send, xla_step = self._backend.xla()
        backend, rules = self._backend, self._rules
        if self._state is None:  # before any reset: nothing to remember yet
            n = self.num_envs
            state = EnvState(np.zeros(n, bool), np.zeros(n, np.int32), np.zeros(n, np.int32))
        else:
            state = self._state

        def step(xla_handle: XlaHandle, actions: Any) -> tuple[XlaHandle, TimeStep]:
            inner, output = xla_step(xla_handle.handle, actions)
            raw = backend.xla_raw_step(output)
            timestep, new_state = finish_timestep(jnp, raw, xla_handle.state, rules)
            return XlaHandle(inner, new_state), timestep

        start = XlaHandle(handle, EnvState(*(jnp.asarray(x) for x in state)))
        return start, recv, send, step

    @property
    def has_xla(self) -> bool:
        """Whether envpool's XLA bridge builds here (False for the gymnasium adapter).

        A compiled 10-step CartPole loop through it is exercised by ``tests/test_envs.py``; it
        worked with jax 0.10.2 on CPU.
        """
        try:
            self._backend.xla()
        except XlaUnavailableError:
            return False
        return True

    def xla_timestep(self, output: TimeStep, prev_done: Any = None) -> TimeStep:
        """The :class:`TimeStep` of one XLA ``step``: its output already is one.

        Kept for loops written against envpool's raw outputs: the state that ``valid``, the
        life-loss rules and the zero-padded stack need travels in the :class:`XlaHandle`, so
        ``prev_done`` is not used.
        """
        del prev_done
        if not isinstance(output, TimeStep):
            raise TypeError(
                "xla_timestep takes the output of the step returned by VectorEnv.xla(), "
                f"got {type(output).__name__}"
            )
        return output

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

    A game starts on a step that is not ``valid`` (a reset or an auto-reset) and finishes on
    ``game_over``; its length counts its ``valid`` steps (as envpool's ``elapsed_step``). A lost
    life does not split it, even where it is terminal or restarts the agent (``first``).
    """

    def __init__(self, num_envs: int, window: int = 100) -> None:
        self._returns = np.zeros(num_envs, np.float64)
        self._lengths = np.zeros(num_envs, np.int64)
        #: The last ``window`` finished games.
        self.recent: deque[Episode] = deque(maxlen=window)
        #: Games finished since construction.
        self.total_games = 0

    def update(self, timestep: TimeStep, env_ids: Any = None) -> list[Episode]:
        """Account one vector step; returns the games that finished on it (in env order).

        ``env_ids``: which environments the timestep's rows are (a :class:`VectorEnv` with
        retired environments: its ``active``); all of them by default.
        """
        rows = np.arange(len(self._returns)) if env_ids is None else np.asarray(env_ids)
        valid = np.asarray(timestep.valid)
        returns = np.where(valid, self._returns[rows], 0.0)
        lengths = np.where(valid, self._lengths[rows], 0)
        returns += np.where(valid, np.asarray(timestep.raw_reward, np.float64), 0.0)
        lengths += valid
        over = np.asarray(timestep.game_over, bool)
        finished = [
            Episode(float(returns[k]), int(lengths[k]), int(rows[k])) for k in np.flatnonzero(over)
        ]
        self._returns[rows] = np.where(over, 0.0, returns)
        self._lengths[rows] = np.where(over, 0, lengths)
        self.recent.extend(finished)
        self.total_games += len(finished)
        return finished

    def mean_recent_return(self) -> float:
        """Mean return of the recent games (``nan`` before the first game finishes)."""
        if not self.recent:
            return math.nan
        return float(np.mean([e.episode_return for e in self.recent]))
