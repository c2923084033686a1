"""The training loop: act → env step → insert → learn, composed of parts with one job each.

Per vector step of ``N`` environments, the *loop body*:

1. **insert** the pending step (the observation acted on, its action and recurrent state) with
   the environment's answer (reward, terminated, truncated) into the replay (:mod:`zoo.replay`),
   which builds n-step windows, frame stacks and sequences at sample time and never lets a
   pseudo-step start a transition; credit the transitions (:class:`zoo.learn.UpdateCredit`);
2. **learn**: every due update, each a learn step (:class:`zoo.learn.LearnStep`: sample →
   update → priorities, the priorities written just before the next sample);
3. **act** ε-greedily on the new observation (:class:`zoo.actor.Actor`) and keep it pending.

**The actors lag the learner by one update**, so that acting and environment steps overlap the
update instead of waiting for it: each update hands the actors the online network *as it was
before that update* and the actors act with it until the next update. Steps added between an
update and the next sample enter with the running maximum priority, as always; an item
overwritten in between keeps its new priority. Acme's actors lag more (they fetch parameters
every ``variable_update_period`` steps); the learning tests hold the zoo to its budgets with it.

The parts:

- :class:`~zoo.actor.Actor`: acting, ε, recurrent state resets;
- the replay (:class:`~zoo.replay.Replay`): ``init / add / sample / write_priorities / seal``;
- :class:`~zoo.learn.LearnStep`: sample → update → priorities, and
  :class:`~zoo.learn.UpdateCredit`, the one statement of when updates are due;
- the *drivers* (:mod:`zoo.drivers`), which run the body: the host driver (:meth:`Loop.step`:
  separate jitted calls, environments stepped through envpool's Python API in between) and the
  compiled driver (:meth:`Loop.chunk`: up to ``L`` vector steps in one compiled loop with
  envpool's XLA ``step``). Both read and write the same :class:`LoopCarry`, so they produce the same
  transitions and parameters from the same seed.

:class:`Loop` composes the parts for one run and exposes the body's pieces as pure functions
(:meth:`Loop.insert`, :meth:`Loop.learn`, :meth:`Loop.learn_due`, :meth:`Loop.act`,
:meth:`Loop.body`), which :mod:`zoo.seeds` and the benchmarks build on. :class:`Trainer` runs one
run on the host around a driver: episode statistics, logging, evaluation, checkpoints, signals.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo import stops
from zoo.actor import Actor, Pending, make_act, starts_transition
from zoo.checkpoint import Checkpointer
from zoo.distributed import ProcessGroup
from zoo.drivers import DRIVERS, Driver, HostDriver, Placement
from zoo.envs import EpisodeTracker, TimeStep, VectorEnv
from zoo.learn import LearnCarry
from zoo.learner import DataParallelLearner, Learner, LearnerState
from zoo.metrics import MetricsLogger, Progress
from zoo.replay import PendingPriorities, StepBatch
from zoo.rundir import RunSettings
from zoo.spec import AlgorithmSpec

__all__ = [
    "EnvShape",
    "Loop",
    "LoopCarry",
    "NonFiniteLossError",
    "Pending",
    "Trainer",
    "make_act",
    "starts_transition",
]


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stops and keeps its last good checkpoint."""


class LoopCarry(eqx.Module):
    """Everything the loop body reads and writes (device arrays; the learner's static parts).

    Attributes:
      learner: the learner state (networks, optimizer state, update count, noise key).
      replay: the replay state.
      key: the actors' and sampler's PRNG key.
      env_steps: transitions inserted so far (int32).
      credit: transitions credited towards the next update (float32).
      core: the actors' recurrent state ``[N, ...]`` (``None`` for feed-forward agents).
      pending: the step acted on, waiting for the environment's answer.
      metric_sums: sums of the updates' metrics since the last log, ``[len(metric_names)]``.
      metric_count: updates summed in ``metric_sums`` (int32).
      last_loss: the latest update's loss (NaN before the first update).
      actor: the online network the actors act with: the learner's before its latest update.
      actor_report: ``[updates, loss]`` of the learner state ``actor`` came from (what the host
        watches without waiting for the update in flight).
      deferred: the latest update's priorities, not yet written (``None`` for uniform replay;
        :meth:`zoo.replay.Replay.write_priorities` writes them).
      metric_names: the names of ``metric_sums``' entries (the loss's ``metric_names``).
    """

    learner: LearnerState
    replay: Any
    key: jax.Array
    env_steps: jax.Array
    credit: jax.Array
    core: Any
    pending: Pending
    metric_sums: jax.Array
    metric_count: jax.Array
    last_loss: jax.Array
    actor: Any
    actor_report: jax.Array
    deferred: PendingPriorities | None
    metric_names: tuple[str, ...] = eqx.field(static=True)

    def learning(self) -> LearnCarry:
        """The fields a learn step reads and writes, besides the replay state (a
        :class:`~zoo.learn.LearnCarry`: the carry holds each of its fields under its name)."""
        return LearnCarry(**{name: getattr(self, name) for name in _LEARN_FIELDS})

    def with_learning(self, learning: LearnCarry, **changes: Any) -> LoopCarry:
        """The carry with a learn step's fields (and any other ``changes``) replaced."""
        fields = {name: getattr(learning, name) for name in _LEARN_FIELDS}
        return dataclasses.replace(self, **fields, **changes)

    def metric_means(self) -> dict[str, float]:
        """Means of the metrics since they were last reset (empty before any update)."""
        count = int(self.metric_count)
        if count == 0:
            return {}
        sums = np.asarray(self.metric_sums)
        names = self.metric_names
        return {name: float(value) / count for name, value in zip(names, sums, strict=True)}

    def reset_metrics(self) -> LoopCarry:
        """The carry with the metric sums cleared."""
        return eqx.tree_at(
            lambda c: (c.metric_sums, c.metric_count),
            self,
            (jnp.zeros_like(self.metric_sums), jnp.zeros_like(self.metric_count)),
        )


#: The fields of :class:`LoopCarry` a learn step owns: those of :class:`~zoo.learn.LearnCarry`.
_LEARN_FIELDS = LearnCarry._fields


@dataclass(frozen=True)
class EnvShape:
    """What the loop body needs to know of its environments (a :class:`~zoo.envs.VectorEnv`
    has these too): for a body that does not step them itself (:mod:`zoo.seeds`)."""

    num_envs: int
    num_actions: int
    observation_shape: tuple[int, ...]
    observation_dtype: Any

    @classmethod
    def of(cls, env: VectorEnv, num_envs: int | None = None) -> EnvShape:
        """``env``'s shapes, for ``num_envs`` environments (default: ``env.num_envs``)."""
        return cls(
            num_envs=env.num_envs if num_envs is None else num_envs,
            num_actions=env.num_actions,
            observation_shape=tuple(env.observation_shape),
            observation_dtype=env.observation_dtype,
        )


class Loop:
    """The loop body of one run, composed of its parts, and its drivers.

    Args:
      spec: the algorithm.
      env: the training environments (a :class:`~zoo.envs.VectorEnv`; the compiled driver uses
        its XLA interface), or only their :class:`EnvShape` for a body driven elsewhere.
      learner: the learner whose update the loop runs (a :class:`~zoo.learner.Learner`, or a
        :class:`~zoo.learner.DataParallelLearner` for an update over several devices).
      replay: the replay (built for ``env.num_envs`` environments).
      initial_core_state: one env's initial recurrent state (recurrent specs).
      placement: where the asynchronous driver acts and learns (:class:`zoo.drivers.Placement`;
        ``None``: its defaults). The synchronous drivers run on the default device.
      max_lag: the asynchronous driver's bound on the actor's parameter lag, in updates.
      queue_steps: vector steps the asynchronous driver's actor may run ahead (``None``: its
        default).

    Attributes:
      actor: the :class:`~zoo.actor.Actor`.
      learn_step: the :class:`~zoo.learn.LearnStep`.
      credit: the :class:`~zoo.learn.UpdateCredit` rule.
      host: the host driver (:class:`zoo.drivers.HostDriver`): its ``insert``, ``act``,
        ``sample`` and ``update`` are the body's pieces, each one asynchronously jitted call.
      devices: the local devices one update runs on.
      step_transitions: transitions of the run per vector step (``N``; ``P × N`` when the
        learner spans ``P`` processes, :mod:`zoo.distributed`).
    """

    def __init__(
        self,
        spec: AlgorithmSpec,
        env: VectorEnv | EnvShape,
        learner: Learner | DataParallelLearner,
        replay: Any,
        initial_core_state: Any = None,
        *,
        placement: Placement | None = None,
        max_lag: int = 1,
        queue_steps: int | None = None,
    ):
        self.spec = spec
        self.placement = placement
        self.max_lag = max_lag
        self.queue_steps = queue_steps
        self.env = env
        self.learner = learner
        self.replay = replay
        self.num_envs = env.num_envs
        self.recurrent = spec.recurrent
        self.actor = Actor(spec, self.num_envs, env.num_actions, initial_core_state)
        # the data kind states how the loop learns from it (a replay: sample → update per
        # update_period transitions; a rollout store: a learning phase per rollout)
        self.learn_step, self.credit = replay.learning_parts(learner, spec, self.num_envs)
        # transitions of the run per vector step: N, or P × N over P processes stepping in
        # lockstep (zoo.distributed); the budget, ε and the credit rule count these
        self.step_transitions = self.credit.num_envs
        self.metric_names = self.learn_step.metric_names
        self.devices = learner.num_devices
        self.host = HostDriver(self)
        self._drivers: dict[str, Driver] = {HostDriver.name: self.host}

    def driver(self, name: str) -> Driver:
        """The driver ``name`` of :data:`zoo.drivers.DRIVERS` for this loop (built once)."""
        if name not in self._drivers:
            if name not in DRIVERS:
                raise ValueError(f"unknown loop driver {name!r}; known: {', '.join(DRIVERS)}")
            self._drivers[name] = DRIVERS[name](self)
        return self._drivers[name]

    def epsilon(self, env_steps: Any) -> jax.Array:
        """ε of the actors after ``env_steps`` transitions (``schedule.epsilon``)."""
        return self.actor.epsilon(env_steps)

    # ------------------------------------------------------------------------- the drivers

    def first_act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        """Act on the first observation after a reset (nothing to insert yet); both drivers
        start with it."""
        return self.host.first_act(carry, ts)

    def step(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """Host driver: one vector step (:meth:`zoo.drivers.HostDriver.step`)."""
        return self.host.step(carry, ts)

    def chunk(
        self,
        carry: LoopCarry,
        handle: Any,
        prev_done: jax.Array,
        steps: int,
        length: int | None = None,
    ) -> tuple[LoopCarry, Any, jax.Array, TimeStep]:
        """Compiled driver: ``steps`` vector steps in a program of ``length`` (default
        ``steps``; :meth:`zoo.drivers.CompiledDriver.chunk`)."""
        return self.driver("compiled").chunk(carry, handle, prev_done, steps, length)

    # -------------------------------------------------------------------------- the state

    def init(self, learner_state: LearnerState, key: jax.Array) -> LoopCarry:
        """The carry at step 0 (nothing pending yet: call :meth:`first_act` after a reset).

        With a :attr:`placement`, the carry (the replay above all) is allocated on the learner's
        first device, where the asynchronous driver keeps it, and committed there (without a
        copy). A replay allocated elsewhere and moved there would be held twice at once
        (measured: 14.1 GiB against 7.6 GiB for a 1M Atari replay); an uncommitted one would be
        moved to the default device by the checkpoint restore that fills it, and held twice
        there (measured: 14.8 GiB on resuming that run).
        """
        if self.placement is not None:
            device = self.placement.learner[0]
            with jax.default_device(device):
                carry = self._init(learner_state, key)
            # a learner state replicated over processes (zoo.distributed) stays where it is
            local = jax.device_put(dataclasses.replace(carry, learner=None), device)
            return dataclasses.replace(local, learner=carry.learner)
        return self._init(learner_state, key)

    def _init(self, learner_state: LearnerState, key: jax.Array) -> LoopCarry:
        learning = self.learn_step.init(learner_state, key)
        pending = self.actor.nothing_pending(self.env.observation_shape, self.env.observation_dtype)
        return LoopCarry(
            learner=learning.learner,
            replay=self.replay.init(),
            key=learning.key,
            env_steps=jnp.zeros((), jnp.int32),
            credit=jnp.zeros((), jnp.float32),
            core=self.actor.initial_state,
            pending=pending,
            metric_sums=learning.metric_sums,
            metric_count=learning.metric_count,
            last_loss=learning.last_loss,
            actor=learning.actor,
            actor_report=learning.actor_report,
            deferred=learning.deferred,
            metric_names=self.metric_names,
        )

    def with_learner(self, carry: LoopCarry, learner_state: LearnerState) -> LoopCarry:
        """``carry`` with a new learner state, the actors acting with its online network
        (:meth:`zoo.learn.LearnStep.with_learner`)."""
        return carry.with_learning(self.learn_step.with_learner(carry.learning(), learner_state))

    def checkpoint_state(self, carry: LoopCarry, games: int, save_replay: bool) -> dict[str, Any]:
        """What a checkpoint holds: learner, counters, RNG key, and the replay unless opted out.

        The replay is saved with the latest update's priorities written. The pending step,
        the actors' network and their core state are not saved: environments cannot be
        checkpointed, so a resumed run starts new episodes, acting with the learner's network.
        """
        state = {
            # this process's copy of a learner replicated over processes (zoo.distributed)
            "learner": self.learner.unreplicate(carry.learner),
            "counters": {
                "env_steps": carry.env_steps,
                "credit": carry.credit,
                "games": jnp.asarray(games, jnp.int32),
            },
            "key": carry.key,
        }
        if save_replay:
            state["replay"] = self.replay.write_priorities(carry.replay, carry.deferred)
        return state

    # ------------------------------------------------------------- the body, pure functions

    def insert(self, ts: TimeStep, replay_state: Any, pending: Pending, env_steps, credit):
        """Insert the pending step with the environment's answer ``ts``; credit the
        transitions. Returns ``(replay_state, env_steps, credit)``."""
        p = pending
        step = StepBatch(
            observation=p.observation,
            action=p.action,
            reward=ts.reward,
            terminated=ts.terminated,
            truncated=ts.truncated,
            first=p.first,
            valid=p.valid,
            core_state=p.core_state,
            next_observation=ts.observation,
        )
        env_steps = env_steps + self.step_transitions
        credit = self.credit.earn(env_steps, credit)
        return self.replay.add(replay_state, step), env_steps, credit

    def act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        """Act on ``ts`` with the actors' network; the step acted on becomes pending."""
        key, core, pending, actions = self.actor.act(
            carry.actor, carry.key, carry.core, carry.env_steps, ts
        )
        return dataclasses.replace(carry, key=key, core=core, pending=pending), actions

    def learn(self, carry: LoopCarry) -> LoopCarry:
        """One learn step inside a compiled program, spending one update's credit."""
        learning, replay = self.learn_step.learn(carry.learning(), carry.replay, barrier=True)
        return carry.with_learning(learning, replay=replay, credit=self.credit.spend(carry.credit))

    def learn_due(self, carry: LoopCarry) -> LoopCarry:
        """Every due update, each under ``lax.cond`` (inside a compiled program).

        At most ``credit.max_updates`` are due per vector step. Only what learning changes goes
        through the ``cond`` (:class:`_Due`: the learn carry, the replay's priority state and
        the credit); the frames are read from outside, so XLA never copies them.
        """
        replay = self.replay

        def learn_once(due: _Due) -> _Due:
            state = replay.with_priority_state(carry.replay, due.priorities)
            inner = self.learn(carry.with_learning(due.learning, replay=state, credit=due.credit))
            return _Due(inner.learning(), replay.priority_state(inner.replay), inner.credit)

        due = _Due(carry.learning(), replay.priority_state(carry.replay), carry.credit)
        for _ in range(self.credit.max_updates):
            due = jax.lax.cond(self.credit.due(due.credit), learn_once, lambda d: d, due)
        state = replay.with_priority_state(carry.replay, due.priorities)
        return carry.with_learning(due.learning, replay=state, credit=due.credit)

    def body(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """One vector step inside a compiled program: insert, every due update, act.

        Returns the carry, the actions and ``[updates, loss]`` of the learner state the actors
        act with.
        """
        replay, env_steps, credit = self.insert(
            ts, carry.replay, carry.pending, carry.env_steps, carry.credit
        )
        carry = dataclasses.replace(carry, replay=replay, env_steps=env_steps, credit=credit)
        carry, actions = self.act(self.learn_due(carry), ts)
        return carry, actions, carry.actor_report


class _Due(eqx.Module):
    """What passes through ``lax.cond`` around a learn step (:meth:`Loop.learn_due`)."""

    learning: LearnCarry
    priorities: Any
    credit: jax.Array


@dataclass
class Trainer:
    """Runs one run on the host around a driver: episode statistics, the non-finite check,
    logging, evaluation, checkpoints, signals.

    The driver (``loop_path``, one of :data:`zoo.drivers.DRIVERS`) runs the loop body and
    calls back :meth:`account` after vector steps and :meth:`events` where a log, evaluation or
    checkpoint may be due (:attr:`next_event`). How long to train and how often to log,
    evaluate and checkpoint are the run's own settings (units: transitions).

    Over several processes (``group``, :mod:`zoo.distributed`) every process runs a trainer
    with its own logger and checkpointer; only process 0 evaluates, its early stop is every
    process's, and an interrupt on any process stops all of them at the next log (the
    processes decide together, never one alone: an update is a collective).
    """

    loop: Loop
    settings: RunSettings
    loop_path: str
    logger: MetricsLogger
    checkpointer: Checkpointer
    evaluate: Callable[[Any, int], dict[str, Any]]
    games: int = 0
    #: whether to draw the progress line (on a terminal, or periodic lines in logs)
    progress: bool = True
    #: the run's processes (one by default)
    group: ProcessGroup = field(default_factory=ProcessGroup)
    stopped_by_signal: bool = field(default=False, init=False)
    #: transitions accounted so far (the host's count, after the driver reported them)
    env_steps: int = field(default=0, init=False)
    #: learner updates reported so far
    updates: int = field(default=0, init=False)
    _tracker: EpisodeTracker | None = field(default=None, init=False, repr=False)
    _progress: Progress | None = field(default=None, init=False, repr=False)
    _next: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _window: dict[str, list[float]] = field(default_factory=dict, init=False, repr=False)
    _start: tuple[float, int, int] = field(default=(0.0, 0, 0), init=False, repr=False)
    _driver: Any = field(default=None, init=False, repr=False)
    _signalled: list[bool] = field(default_factory=list, init=False, repr=False)

    def state_of(self, carry: LoopCarry, games: int) -> dict[str, Any]:
        """The checkpointable run state (see :meth:`Loop.checkpoint_state`)."""
        return self.loop.checkpoint_state(carry, games, self.settings.save_replay)

    def checkpoint(self, carry: LoopCarry, games: int) -> None:
        env_steps = int(carry.env_steps)
        self.checkpointer.save(
            env_steps,
            self.state_of(carry, games),
            {
                "env_steps": env_steps,
                "updates": int(carry.learner.updates),
                "games": games,
                "replay_saved": self.settings.save_replay,
            },
        )

    @property
    def next_event(self) -> int:
        """The transition count at which the next log, evaluation or checkpoint is due."""
        return min(self._next.values())

    def run(self, carry: LoopCarry) -> LoopCarry:
        """Train until ``total_env_steps`` (or a signal, or ``stop_at_return``)."""
        cfg, loop, env = self.settings, self.loop, self.loop.env
        driver = loop.driver(self.loop_path)
        self._driver = driver
        self.env_steps = int(carry.env_steps)
        self.updates = int(carry.learner.updates)
        self._tracker = EpisodeTracker(env.num_envs)
        self._progress = Progress(cfg.total_env_steps)
        self._progress.enabled = self._progress.enabled and self.progress
        self._next = {
            name: (self.env_steps // every + 1) * every
            for name, every in (
                ("log", cfg.log_every),
                ("eval", cfg.eval_every),
                ("ckpt", cfg.checkpoint_every),
            )
        }
        self._window = {}
        self._start = (time.perf_counter(), self.env_steps, self.updates)
        interrupted: list[bool] = []
        # one process alone never stops: its signal is agreed on at the next log (events)
        heard = self._signalled if self.group.several else interrupted
        carry = carry.reset_metrics()
        ts = env.reset()
        carry, actions = loop.first_act(carry, ts)
        try:
            with stops.heard_while(heard):
                carry = driver.run(carry, actions, self, interrupted)
        finally:
            self._progress.update(self.env_steps, self.updates, final=True)
        return carry

    def account(self, timesteps: list[Any], report: Any) -> None:
        """Episode statistics, counters and the non-finite check after some vector steps.

        Args:
          timesteps: the environments' TimeSteps of those vector steps, in order (host arrays).
          report: ``[updates, loss]`` of the learner state the actors acted with last.
        """
        n = self.loop.step_transitions
        for ts in timesteps:
            self.env_steps += n
            finished = self._tracker.update(ts)
            if finished:
                self.games += len(finished)
                returns = [e.episode_return for e in finished]
                self._progress.add_returns(returns)
                self._window.setdefault("return", []).extend(returns)
                self._window.setdefault("length", []).extend(float(e.length) for e in finished)
        updates, loss = int(report[0]), float(report[1])
        if updates != self.updates and not math.isfinite(loss):
            raise NonFiniteLossError(
                f"the loss became {loss} at learner update {updates} (env step "
                f"{self.env_steps}); the run stopped and kept its last good checkpoint"
            )
        self.updates = updates
        self._progress.update(self.env_steps, self.updates)

    def events(self, carry: LoopCarry, interrupted: list[bool]) -> tuple[LoopCarry, bool]:
        """Log, evaluate and checkpoint when due; whether to stop."""
        cfg, env_steps, nxt = self.settings, self.env_steps, self._next
        done = env_steps >= cfg.total_env_steps
        if env_steps >= nxt["log"] or done:
            while nxt["log"] <= env_steps:
                nxt["log"] += cfg.log_every
            if self.group.several and self.group.any(bool(self._signalled)):
                interrupted.append(True)
            # the per-step report is the actors' (one update behind): log the learner's count
            updates = int(carry.learner.updates)
            t0, steps0, updates0 = self._start
            elapsed = max(time.perf_counter() - t0, 1e-9)
            record: dict[str, Any] = {
                "env_steps": env_steps,
                "updates": updates,
                "games": self.games,
                "epsilon": float(self.loop.epsilon(env_steps)),
                "loop": self.loop_path,
                "env_steps_per_s": (env_steps - steps0) / elapsed,
                "updates_per_s": (updates - updates0) / elapsed,
            }
            record.update({k: float(np.mean(v)) for k, v in self._window.items() if v})
            record.update(carry.metric_means())
            driver_stats = getattr(self._driver, "stats", None)
            if driver_stats is not None:
                record.update(driver_stats())
            self._window.clear()
            carry = carry.reset_metrics()
            self.logger.log(record)
        stop = False
        if env_steps >= nxt["eval"] or done:
            while nxt["eval"] <= env_steps:
                nxt["eval"] += cfg.eval_every
            target = cfg.stop_at_return
            if self.group.main:
                online = self.loop.learner.unreplicate(carry.learner).online
                result = self.evaluate(online, env_steps)
                stop = target is not None and result["mean_return"] >= target
            if target is not None:
                stop = bool(self.group.broadcast(float(stop)))
        if env_steps >= nxt["ckpt"] or done or stop or interrupted:
            while nxt["ckpt"] <= env_steps:
                nxt["ckpt"] += cfg.checkpoint_every
            self.checkpoint(carry, self.games)
        if interrupted:
            self.stopped_by_signal = True
            stop = True
        return carry, stop
