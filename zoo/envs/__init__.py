"""Environments: envpool (Atari, classic control), a gymnasium adapter, and evaluation protocols.

::

    import zoo.envs as ze

    env = ze.make("Breakout-v5", protocol="nature_2015", num_envs=8, seed=0, training=True)
    timestep = env.reset()                      # a TimeStep of numpy arrays, batch-major
    timestep = env.step(actions)                # int actions [8]
    tracker = ze.EpisodeTracker(env.num_envs)   # game returns (unclipped) for logging
    result = ze.evaluate(policy, "Breakout-v5", "nature_2015", episodes=10, seed=1)

- :class:`Protocol` / :func:`get_protocol`: ``nature_2015``, ``machado_2018``, ``atari_100k``,
  ``classic``, ``minatar`` (see :mod:`zoo.envs.protocols` for each value's source).
- :func:`make` → :class:`VectorEnv` (:mod:`zoo.envs.factory` says which backend runs which id).
- :class:`TimeStep`: ``observation``, ``reward`` (clipped in training), ``raw_reward``,
  ``terminated``, ``truncated``, ``first``, ``game_over``, ``valid``.
- :func:`evaluate`: exactly ``episodes`` whole games, ε-greedy around a policy.
- :func:`observation_nbytes`: bytes of one stored frame, to size a replay buffer.

What envpool 1.2.5 does (measured here, and asserted in ``tests/test_envs.py``)
------------------------------------------------------------------------------
(a) **Autoreset is "next step"** (CartPole-v1): the step where ``terminated`` (or ``truncated``)
    is set returns the true final observation (the pole angle past ±0.2095); the following step
    ignores its action and returns the new episode's first observation with reward 0, both flags
    false and ``info["elapsed_step"] == 0``. :class:`VectorEnv` reports that step as
    ``first=True, valid=False``. The gymnasium adapter uses ``AutoresetMode.NEXT_STEP``, which
    behaves the same.

(b) **Life loss with** ``episodic_life=True`` (Breakout-v5, training under ``nature_2015``): the
    life-loss step has ``terminated=True``, ``info["lives"]`` already decremented,
    ``info["terminated"] == 0`` (the game goes on) and its own reward. The next step is a
    *pseudo-step*: its action is ignored (the same observations follow whatever it is), reward 0,
    ``terminated``/``truncated`` false, ``info["elapsed_step"]`` *unchanged* (so the
    ``elapsed_step == 0`` rule does not catch it), lives unchanged, and the ALE ran 1..``noop_max``
    no-op frames in it (envpool repeats its no-op start after every lost life; dqn_zoo does
    not). :class:`VectorEnv` reports it as ``valid=False, first=False``. When the last life is
    lost, ``terminated`` and ``info["terminated"]`` are both set (``game_over``), and the next step
    starts a new game (``elapsed_step == 0``, ``first=True``).

(c) **The frame stack at a game start** holds the game's first frame repeated ``stack`` times (not
    zeros): after ``reset()`` and on every auto-reset step that starts a game (game over or
    truncation), ``observation[i, k]`` is the same nonzero frame for every ``k``. The stack is
    **not** reset at a lost life: the pseudo-step's observation is the previous one shifted by one
    frame, ``obs_t[:-1] == obs_{t-1}[1:]``, exactly as on any ordinary step. A replay that rebuilds
    stacks from single stored frames must therefore pad a game's first frames by repeating the
    game's first frame, and must not cut stacks at life losses (``first`` marks where to pad;
    ``terminated`` without ``game_over`` does not).

(d) **Truncation at the frame cap** (Atari ``max_episode_steps = max_episode_frames /
    frame_skip``, e.g. 27,000 steps = 108,000 frames; CartPole's 500): the step where
    ``info["elapsed_step"]`` reaches ``max_episode_steps`` has ``truncated=True``,
    ``terminated=False``, ``info["terminated"] == 0``, and the true last observation; the next step
    starts a new game as in (a) and (c). Under episodic life the cap counts agent steps
    *excluding* life-loss pseudo-steps (``elapsed_step`` does not advance on them).

Other facts found on the way: ``noop_max=N`` draws 1..N no-op frames (checked against the ALE frame
counter in RAM: 30 distinct counts for N=30, and ``noop_max=1`` gives exactly one), and
``noop_max=0`` crashes the process (segfault), so a protocol without no-op starts gets one fixed
no-op frame; envpool's ``use_fire_reset`` defaults to True and every protocol here sets it False
(neither dqn_zoo nor Dopamine presses FIRE); with ``batch_size == num_envs``, ``info["env_id"]``
came back in order (:class:`VectorEnv` reorders by it anyway, on the host and in XLA).

**XLA**: envpool's XLA interface works with jax 0.10.2 on CPU: a jitted ``lax.scan`` of 10
``step`` calls on CartPole-v1 (handle in the carry, after ``env.reset()``) returns the same
autoreset semantics, and so does a 300-step scan on Breakout-v5.
:meth:`VectorEnv.xla_timestep` turns each XLA step into the same :class:`TimeStep` as the host
path; :attr:`VectorEnv.has_xla` says whether the interface works (always False for gymnasium).
"""

from __future__ import annotations

from zoo.envs.core import (
    Episode,
    EpisodeTracker,
    ProtocolMismatchError,
    TimeStep,
    UnknownEnvironmentError,
    UnsupportedEnvironmentError,
    VectorEnv,
    XlaUnavailableError,
    observation_nbytes,
)
from zoo.envs.evaluation import evaluate
from zoo.envs.factory import EnvironmentInfo, default_protocol, make, resolve_env
from zoo.envs.protocols import (
    PROTOCOLS,
    Protocol,
    UnknownProtocolError,
    get_protocol,
    protocol_names,
)

__all__ = [
    "PROTOCOLS",
    "EnvironmentInfo",
    "Episode",
    "EpisodeTracker",
    "Protocol",
    "ProtocolMismatchError",
    "TimeStep",
    "UnknownEnvironmentError",
    "UnknownProtocolError",
    "UnsupportedEnvironmentError",
    "VectorEnv",
    "XlaUnavailableError",
    "default_protocol",
    "evaluate",
    "get_protocol",
    "make",
    "observation_nbytes",
    "protocol_names",
    "resolve_env",
]
