"""Environments: envpool (Atari, classic control), ALE's vector env (Atari), a gymnasium adapter,
and evaluation protocols.

::

    import zoo.envs as ze

    env = ze.make("Breakout-v5", protocol="nature_2015", num_envs=8, seed=0, training=True)
    timestep = env.reset()                      # a TimeStep of numpy arrays, batch-major
    timestep = env.step(actions)                # int actions [8]
    tracker = ze.EpisodeTracker(env.num_envs)   # game returns (unclipped) for logging
    result = ze.evaluate(policy, "Breakout-v5", "nature_2015", episodes=10, seed=1)

- :class:`Protocol` / :func:`get_protocol`: ``nature_2015``, ``purejaxql_atari``,
  ``dopamine_2018``, ``machado_2018``, ``atari_100k``, ``r2d2_2019``, ``classic``, ``minatar``,
  ``gymnax_minatar`` (see :mod:`zoo.envs.protocols` for each
  value's source, and ``docs/protocols.md`` for every Atari setting beside its source's).
- :func:`make` → :class:`VectorEnv` (:mod:`zoo.envs.factory` says which backend runs which id;
  ``backend="ale"`` runs Atari on ALE's own vector environment, ``docs/backends.md``).
- :class:`TimeStep`: ``observation``, ``reward`` (clipped in training), ``raw_reward``,
  ``terminated``, ``truncated``, ``first``, ``game_over``, ``valid``.
- :func:`evaluate`: exactly ``episodes`` whole games, ε-greedy around a policy.
- :func:`observation_nbytes`: bytes of one stored frame, to size a replay buffer.

What envpool 1.2.5 does, and what zoo makes of it (asserted in ``tests/test_envs.py``)
--------------------------------------------------------------------------------------
(a) **Autoreset is "next step"** (CartPole-v1): the step where ``terminated`` (or ``truncated``)
    is set returns the true final observation (the pole angle past ±0.2095); the following step
    ignores its action and returns the new episode's first observation with reward 0, both flags
    false and ``info["elapsed_step"] == 0``. :class:`VectorEnv` reports that step as
    ``first=True, valid=False``. The gymnasium adapter uses ``AutoresetMode.NEXT_STEP``, which
    behaves the same.

(b) **Life loss.** envpool's own ``episodic_life=True`` ends the step that loses a life and then
    runs a *pseudo-step*: its action is ignored, 1..``noop_max`` no-op frames run, reward 0,
    ``elapsed_step`` unchanged. Neither dqn_zoo nor Dopamine has such a step, so zoo never sets
    it: envpool plays whole games, and :class:`VectorEnv` compares ``info["lives"]`` with the
    previous step's (as dqn_zoo's ``ZeroDiscountOnLifeLoss`` and Dopamine's
    ``terminal_on_life_loss`` do). Where the protocol's ``life_loss_terminal`` holds (training),
    the step that loses a life has ``terminated=True`` and ``game_over=False``; the next step is
    an ordinary one (its action is played, ``valid=True``), so a lost life costs no agent step.
    Under ``life_loss_resets_stack`` (``atari_100k``, training and evaluation) the observation of
    that step is also ``first`` and its stack restarts. When the last life is lost,
    ``terminated`` and ``game_over`` are both set, and the next step starts a new game
    (``elapsed_step == 0``, ``first=True``, ``valid=False``).

(c) **The frame stack at a game start.** envpool fills the stack with the game's first frame
    (after ``reset()`` and on every auto-reset step); dqn_zoo and Dopamine pad with zeros, and so
    does :class:`VectorEnv`: frames older than the agent's episode (a game, or a life under
    ``life_loss_resets_stack``) are zeros, ``[0, 0, 0, f₀]``, ``[0, 0, f₀, f₁]``, …. Every other
    step shifts the stack by one frame, ``obs_t[:-1] == obs_{t-1}[1:]``, a lost life included
    where the stack is not restarted. The replay rebuilds stacks from single stored frames the
    same way: zeros before the newest ``first`` slot (``zoo/replay/frames.py``).

(d) **Truncation at the frame cap** (Atari ``max_episode_steps = max_episode_frames /
    frame_skip``, e.g. 27,000 steps = 108,000 frames; CartPole's 500): the step where
    ``info["elapsed_step"]`` reaches ``max_episode_steps`` has ``truncated=True``,
    ``terminated=False``, ``info["terminated"] == 0``, and the true last observation; the next step
    starts a new game as in (a) and (c). The cap counts agent steps.

Other facts found on the way: ``noop_max=N`` draws 1..N no-op frames (checked against the ALE frame
counter in RAM: 30 distinct counts for N=30, and ``noop_max=1`` gives exactly one), and
``noop_max=0`` crashes the process (segfault), so a protocol without no-op starts gets one fixed
no-op frame; envpool's ``use_fire_reset`` defaults to True and every protocol here sets it False
(neither dqn_zoo nor Dopamine presses FIRE); with ``batch_size == num_envs``, ``info["env_id"]``
came back in order (:class:`VectorEnv` reorders by it anyway, on the host and in XLA).

**Retiring environments** (:meth:`VectorEnv.retire`, what :func:`evaluate` does once an
environment has played its quota): made with ``retiring=True``, the pool of envpool's Atari
games is asynchronous with ``batch_size=1``, and a step sends the active environments' actions
and receives as many single results (reordered by ``env_id``): each environment plays the same
game as in the synchronous pool, step for step (asserted on Breakout), and a retired one no
longer steps. Classic control keeps the synchronous pool (its steps cost microseconds, less than
an asynchronous step's overhead) and steps retired environments unseen.

**XLA**: envpool's XLA interface works with jax 0.10.2 on CPU: a jitted ``lax.scan`` of 10
``step`` calls on CartPole-v1 (handle in the carry, after ``env.reset()``) returns the same
autoreset semantics, and a scan on Breakout-v5 the same :class:`TimeStep` as the host path, step
for step. :meth:`VectorEnv.xla`'s step returns that :class:`TimeStep` itself; its handle
(:class:`~zoo.envs.core.XlaHandle`) carries what the rules above remember between steps (the
previous ``game_over``, the lives, the age of the stack). :attr:`VectorEnv.has_xla` says whether
the interface works (always False for gymnasium).
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
    ASPECTS,
    PROTOCOLS,
    Protocol,
    SourceSetting,
    UnknownProtocolError,
    get_protocol,
    protocol_names,
)

__all__ = [
    "ASPECTS",
    "PROTOCOLS",
    "EnvironmentInfo",
    "Episode",
    "EpisodeTracker",
    "Protocol",
    "ProtocolMismatchError",
    "SourceSetting",
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
