"""The training loop: act → env step → insert → learn, with evaluation, logging and checkpoints.

One loop body serves every algorithm and both execution paths. Per vector step of N environments:

1. **insert** the pending step (the observation acted on, its action and recurrent state) with
   the environment's answer (reward, terminated, truncated) into the replay, which builds n-step
   windows, frame stacks and sequences at sample time and never lets a pseudo-step start a
   transition;
2. **learn**: once ``replay.min_size`` transitions are in, credit N transitions and run one
   learner update per ``schedule.update_period`` credited transitions (fractional credit carries
   over), writing priorities back for prioritised replay;
3. **act** ε-greedily on the new observation (ε from ``schedule.epsilon`` over transitions; noisy
   networks carry ε = 0 in their specs and act greedily on a fresh noise sample; recurrent
   networks reset their core state at each game's first observation) and keep it pending.

**The actors lag the learner by one update**, so that acting and environment steps overlap the
update instead of waiting for it: each update hands the actors the online network *as it was
before that update* and the actors act with it until the next update. An update's priorities are
written into the replay just before the next update samples (steps added in between enter with
the running maximum priority, as always; an item overwritten in between keeps its new priority).
Both paths follow this order exactly; only the host path gets the overlap from it (on the
compiled path everything is one program anyway). Acme's actors lag more (they fetch parameters
every ``variable_update_period`` steps); the learning tests hold the zoo to its budgets with it.

:meth:`Loop.step` is that body as one jitted call (the *host path*: environments step through
envpool's Python API between calls). :meth:`Loop.chunk` runs the same body for T vector steps
inside ``lax.scan`` with envpool's XLA ``step`` (the *compiled path*). Both read and write the
same :class:`LoopCarry`, so they produce the same transitions and parameters from the same seed.
"""

from __future__ import annotations

import dataclasses
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo._jit import async_jit
from zoo.checkpoint import Checkpointer
from zoo.envs import EpisodeTracker, TimeStep, VectorEnv
from zoo.learner import DataParallelLearner, Learner, LearnerState
from zoo.metrics import MetricsLogger, Progress
from zoo.replay import PendingPriorities, StepBatch
from zoo.schedules import build_schedule
from zoo.spec import AlgorithmSpec

__all__ = [
    "Loop",
    "LoopCarry",
    "LoopConfig",
    "NonFiniteLossError",
    "Trainer",
    "make_act",
    "starts_transition",
]


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stops and keeps its last good checkpoint."""


def _report(updates: jax.Array, last_loss: jax.Array) -> jax.Array:
    """``[updates, loss]`` of a learner state: what the host watches."""
    return jnp.stack([updates.astype(jnp.float32), last_loss])


_jit_report = jax.jit(_report)


class Pending(eqx.Module):
    """The step acted on but not yet answered by the environment.

    ``valid`` is the replay's slot flag (:class:`~zoo.replay.StepBatch`): whether the
    observation *starts* a transition, i.e. the step that returned it did not end the game
    (:func:`starts_transition`; a lost life does not end it). It is not ``TimeStep.valid``,
    which says whether that step *ended* one: a game's final observation ends a transition but
    starts none (the next step ignores its action), and the next game's first observation ends
    none but starts one.
    """

    observation: jax.Array
    action: jax.Array
    first: jax.Array
    valid: jax.Array
    core_state: Any


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


@dataclass
class LoopConfig:
    """How long to train and how often to evaluate, log and checkpoint (units: transitions)."""

    total_env_steps: int
    eval_every: int
    eval_episodes: int
    eval_max_steps: int | None
    checkpoint_every: int
    log_every: int
    save_replay: bool = True
    progress: bool = True
    stop_at_return: float | None = None
    loop: str = "host"


def starts_transition(ts: TimeStep) -> Any:
    """``[N]`` bool: whether ``ts.observation`` starts a transition (the replay's ``valid``).

    False exactly on a game's final observation (``game_over``: terminal or truncated): the
    environment ignores the action taken there and auto-resets. True after ``reset()`` and on
    the auto-reset step that returns a new game's first observation, although ``ts.valid`` is
    False on both, and after a lost life, although ``ts.terminated`` may be set there: the game
    goes on from that observation (:mod:`zoo.envs.core`).
    """
    return ~ts.game_over


def make_act(num_actions: int, recurrent: bool, initial_state: Any) -> Callable[..., Any]:
    """The acting function: ``act(online, obs, state, first, key, epsilon)``.

    Returns ``(actions [N] int32, state_before [N, ...], state_after [N, ...])``: the recurrent
    core state the actor used at this observation (reset to ``initial_state`` where ``first``),
    and the one it carries on; feed-forward networks pass ``state`` through.
    """

    def act(online, obs, state, first, key, epsilon):
        k_noise, k_explore, k_random = jax.random.split(key, 3)
        if recurrent:
            state = jax.tree.map(
                lambda s, s0: jnp.where(first.reshape((-1,) + (1,) * (s.ndim - 1)), s0, s),
                state,
                initial_state,
            )
            out, new_state = jax.vmap(lambda o, s: online(o, s, key=k_noise))(obs, state)
        else:
            out = jax.vmap(lambda o: online(o, key=k_noise))(obs)
            new_state = state
        n = obs.shape[0]
        greedy = jnp.argmax(out.q_values, axis=-1)
        random = jax.random.randint(k_random, (n,), 0, num_actions)
        explore = jax.random.uniform(k_explore, (n,)) < epsilon
        return jnp.where(explore, random, greedy).astype(jnp.int32), state, new_state

    return act


class Loop:
    """The loop body of one run, compiled for the host path and the compiled path.

    Args:
      spec: the algorithm.
      env: the training environments (only their shapes and, for :meth:`chunk`, XLA interface).
      learner: the learner whose update the loop runs (a :class:`~zoo.learner.Learner`, or a
        :class:`~zoo.learner.DataParallelLearner` for an update over several devices).
      replay: the replay (built for ``env.num_envs`` environments).
      initial_core_state: one env's initial recurrent state (recurrent specs).
    """

    def __init__(
        self,
        spec: AlgorithmSpec,
        env: VectorEnv,
        learner: Learner | DataParallelLearner,
        replay: Any,
        initial_core_state: Any = None,
    ):
        self.spec = spec
        self.env = env
        self.learner = learner
        self.replay = replay
        self.num_envs = env.num_envs
        n = self.num_envs
        self.recurrent = spec.recurrent
        self.batched_initial = None
        if self.recurrent:
            self.batched_initial = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (n, *x.shape)), initial_core_state
            )
        self._act = make_act(env.num_actions, self.recurrent, self.batched_initial)
        self._epsilon = build_schedule(spec.schedule.epsilon)
        self._update_period = float(spec.schedule.update_period)
        # credit < update_period after learning, so a step of N transitions is due at most this
        # many updates
        self._max_updates = (spec.schedule.update_period - 1 + n) // spec.schedule.update_period
        self._min_size = int(spec.replay.min_size)
        self._batch_size = int(spec.replay.batch_size)
        self.metric_names = tuple(learner.loss.metric_names)
        # the update of the learner it was given: data-parallel inside the body when that is a
        # DataParallelLearner (zoo.learner.learner_for_devices picks one per host)
        self.devices = learner.num_devices
        self._update = learner.update
        # Host path: the replay is donated to the insert and the sample (updated in place,
        # never copied); the insert and the act never take the learner's buffers. The learner
        # state is not donated: XLA:CPU runs this parameter update 15-25% slower with donation,
        # and the actors hold its online network. Every call dispatches asynchronously
        # (async_jit; eqx.filter_jit waits for each call to finish), so the host steps the
        # environments and queues work while the device computes.
        self._jit_insert = async_jit(self._insert_fields, donate_argnums=(1,))
        self._jit_act = async_jit(self._act_fields)
        self._jit_sample = async_jit(self._sample_fields, donate_argnums=(0,))
        self._jit_update = async_jit(self._update_fields)
        self._jit_chunk = async_jit(
            lambda length, carry, handle, done: self._chunk(carry, handle, done, length),
            donate_argnums=(1, 2),
        )
        self._host_env_steps = 0
        self._host_credit = 0.0

    def epsilon(self, env_steps: Any) -> jax.Array:
        """ε of the actors after ``env_steps`` transitions (``schedule.epsilon``)."""
        return self._epsilon(env_steps)

    def first_act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        """Act on the first observation after a reset (nothing to insert yet)."""
        self._host_env_steps = int(carry.env_steps)
        self._host_credit = float(carry.credit)
        # only the acting fields go through the call: a jitted function that returns an
        # argument it was given (the replay, here) returns a copy of it unless it is donated
        key, core, pending, actions, _ = self._jit_act(
            ts, carry.key, carry.core, carry.actor, carry.actor_report, carry.env_steps
        )
        return dataclasses.replace(carry, key=key, core=core, pending=pending), actions

    def step(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """Host path: insert the pending step with the env's answer ``ts``, learn, act on ``ts``.

        Separate jitted calls (insert; a sample and an update per due update; act): the host
        mirrors the credit arithmetic, so no update runs under device control flow, in which
        XLA:CPU's convolutions are an order of magnitude slower (measured: 143 ms against 10 ms
        for a Nature-CNN update). The update is dispatched and not waited for: the actions come
        from the previous update's network, so the host steps the environments while the update
        runs. ``carry`` is donated (do not use it afterwards). Returns the new carry, the actions
        ``[N]`` and ``[updates, loss]`` of the learner state the actors act with.
        """
        replay, env_steps, credit = self._jit_insert(
            ts, carry.replay, carry.pending, carry.env_steps, carry.credit
        )
        carry = dataclasses.replace(carry, replay=replay, env_steps=env_steps, credit=credit)
        self._host_env_steps += self.num_envs
        if self._host_env_steps >= self._min_size:
            self._host_credit += self.num_envs
        while self._host_credit >= self._update_period:
            carry = self._learn_host(carry)
            self._host_credit -= self._update_period
        key, core, pending, actions, report = self._jit_act(
            ts, carry.key, carry.core, carry.actor, carry.actor_report, carry.env_steps
        )
        carry = dataclasses.replace(carry, key=key, core=core, pending=pending)
        return carry, actions, report

    def chunk(self, carry: LoopCarry, handle: jax.Array, prev_done: jax.Array, length: int):
        """Compiled path: ``length`` vector steps in one ``lax.scan`` (see :meth:`_chunk`).

        ``carry`` and ``handle`` are donated.
        """
        return self._jit_chunk(length, carry, handle, prev_done)

    # ----------------------------------------------------------------------------- pieces

    def init(self, learner_state: LearnerState, key: jax.Array) -> LoopCarry:
        """The carry at step 0 (nothing pending yet: call :meth:`first_act` after a reset)."""
        n = self.num_envs
        obs = jnp.zeros((n, *self.env.observation_shape), self.env.observation_dtype)
        flags = jnp.zeros((n,), bool)
        carry = LoopCarry(
            learner=learner_state,
            replay=self.replay.init(),
            key=key,
            env_steps=jnp.zeros((), jnp.int32),
            credit=jnp.zeros((), jnp.float32),
            core=self.batched_initial,
            pending=Pending(obs, jnp.zeros((n,), jnp.int32), flags, flags, self.batched_initial),
            metric_sums=jnp.zeros((len(self.metric_names),), jnp.float32),
            metric_count=jnp.zeros((), jnp.int32),
            last_loss=jnp.full((), jnp.nan, jnp.float32),
            actor=None,
            actor_report=None,
            deferred=self.replay.no_pending_priorities(self._batch_size),
            metric_names=self.metric_names,
        )
        return self.with_learner(carry, learner_state)

    @staticmethod
    def with_learner(carry: LoopCarry, learner_state: LearnerState) -> LoopCarry:
        """``carry`` with a new learner state, the actors acting with its online network.

        The actors get a copy: the compiled path donates the carry, and a buffer cannot be
        donated twice.
        """
        actor = jax.tree.map(
            lambda x: jnp.array(x, copy=True) if eqx.is_array(x) else x, learner_state.online
        )
        report = _report(learner_state.updates, carry.last_loss)
        return dataclasses.replace(carry, learner=learner_state, actor=actor, actor_report=report)

    def checkpoint_state(self, carry: LoopCarry, games: int, save_replay: bool) -> dict[str, Any]:
        """What a checkpoint holds: learner, counters, RNG key, and the replay unless opted out.

        The replay is saved with the latest update's priorities written. The pending step,
        the actors' network and their core state are not saved: environments cannot be
        checkpointed, so a resumed run starts new episodes, acting with the learner's network.
        """
        state = {
            "learner": carry.learner,
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

    def _act_on(self, carry: LoopCarry, observation, first, valid) -> tuple[LoopCarry, jax.Array]:
        key, core, pending, actions = self._act_step(
            carry.key, carry.core, carry.actor, carry.env_steps, observation, first, valid
        )
        carry = dataclasses.replace(carry, key=key, core=core, pending=pending)
        return carry, actions

    def _act_step(self, key, core, actor, env_steps, observation, first, valid):
        key, act_key = jax.random.split(key)
        epsilon = self._epsilon(env_steps)
        actions, before, after = self._act(actor, observation, core, first, act_key, epsilon)
        return key, after, Pending(observation, actions, first, valid, before), actions

    def _act_fields(self, ts: TimeStep, key, core, actor, report, env_steps):
        """Host path: act on ``ts`` with the actors' network."""
        key, core, pending, actions = self._act_step(
            key, core, actor, env_steps, ts.observation, ts.first, starts_transition(ts)
        )
        return key, core, pending, actions, report

    def _sample_fields(self, replay_state: Any, deferred: PendingPriorities | None, key):
        """Write the previous update's priorities, then draw a batch (replay → batch)."""
        replay_state = self.replay.write_priorities(replay_state, deferred)
        key, sub = jax.random.split(key)
        batch, info = self.replay.sample(replay_state, sub, self._batch_size)
        return replay_state, key, batch, info

    def _update_fields(self, learner_state, batch, info, sums, count):
        """One update on a sampled batch; its priorities are deferred to the next sample."""
        learner_state, aux = self._update(learner_state, batch)
        metrics = jnp.stack([jnp.asarray(aux.metrics[m], jnp.float32) for m in self.metric_names])
        deferred = self.replay.defer_priorities(info, aux.priorities)
        return learner_state, deferred, sums + metrics, count + 1, metrics[0]

    def _learn(self, carry: LoopCarry, sample, update, report_of, barrier: bool) -> LoopCarry:
        """One update, the same on both paths: hand the actors the learner's network as it is
        before the update, sample (writing the previous update's priorities first), update, and
        spend ``update_period`` of credit. ``sample``/``update``/``report_of`` are the pure
        functions (compiled path) or their asynchronous jits (host path)."""
        actor, report = carry.learner.online, report_of(carry.learner.updates, carry.last_loss)
        replay, key, batch, info = sample(carry.replay, carry.deferred, carry.key)
        if barrier:
            # Materialise the batch: fused into its consumer, the frame gather turns XLA:CPU's
            # convolutions into slow generic loops (measured).
            batch = jax.lax.optimization_barrier(batch)
        learner, deferred, sums, count, loss = update(
            carry.learner, batch, info, carry.metric_sums, carry.metric_count
        )
        return dataclasses.replace(
            carry, learner=learner, replay=replay, key=key, deferred=deferred, metric_sums=sums,
            metric_count=count, last_loss=loss, actor=actor, actor_report=report,
            credit=carry.credit - self._update_period,
        )  # fmt: skip

    def _learn_host(self, carry: LoopCarry) -> LoopCarry:
        """Host path: one update, dispatched without waiting for it."""
        return self._learn(carry, self._jit_sample, self._jit_update, _jit_report, barrier=False)

    def _insert_fields(self, ts: TimeStep, replay_state, pending: Pending, env_steps, credit):
        """Insert the pending step with the environment's answer; credit the transitions."""
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
        )
        env_steps = env_steps + self.num_envs
        learning = env_steps >= self._min_size
        credit = jnp.where(learning, credit + self.num_envs, credit)
        return self.replay.add(replay_state, step), env_steps, credit

    def _learn_once(self, carry: LoopCarry) -> LoopCarry:
        """One update (compiled path, inside the scan)."""
        return self._learn(carry, self._sample_fields, self._update_fields, _report, barrier=True)

    def _learn_due(self, carry: LoopCarry) -> LoopCarry:
        """Every due update, under ``cond`` (compiled path: inside ``lax.scan``).

        At most ``max_updates`` are due per vector step; only the fields learning changes go
        through the ``cond``, the frames are read from outside so XLA never copies them.
        """

        def pack(c: LoopCarry) -> tuple:
            return (
                c.learner, self.replay.priority_state(c.replay), c.key, c.deferred,
                c.metric_sums, c.metric_count, c.last_loss, c.actor, c.actor_report, c.credit,
            )  # fmt: skip

        def unpack(fields: tuple) -> LoopCarry:
            learner, priorities, key, deferred, sums, count, loss, actor, report, credit = fields
            replay = self.replay.with_priority_state(carry.replay, priorities)
            return dataclasses.replace(
                carry, learner=learner, replay=replay, key=key, deferred=deferred,
                metric_sums=sums, metric_count=count, last_loss=loss, actor=actor,
                actor_report=report, credit=credit,
            )  # fmt: skip

        fields = pack(carry)
        for _ in range(self._max_updates):
            fields = jax.lax.cond(
                fields[-1] >= self._update_period,
                lambda f: pack(self._learn_once(unpack(f))),
                lambda f: f,
                fields,
            )
        return unpack(fields)

    def _act_and_report(self, carry: LoopCarry, ts: TimeStep):
        carry, actions = self._act_on(carry, ts.observation, ts.first, starts_transition(ts))
        return carry, actions, carry.actor_report

    # -------------------------------------------------------------------------- host path

    def _first_act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        return self._act_on(carry, ts.observation, ts.first, starts_transition(ts))

    def _step(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """The compiled path's body: insert, every due update, act (the host path's order)."""
        replay, env_steps, credit = self._insert_fields(
            ts, carry.replay, carry.pending, carry.env_steps, carry.credit
        )
        carry = dataclasses.replace(carry, replay=replay, env_steps=env_steps, credit=credit)
        return self._act_and_report(self._learn_due(carry), ts)

    # ---------------------------------------------------------------------- compiled path

    def _chunk(self, carry: LoopCarry, handle: jax.Array, prev_done: jax.Array, length: int):
        """``length`` vector steps inside ``lax.scan`` with envpool's XLA step.

        Args:
          carry: the loop carry, with the step acted on pending (after :meth:`first_act`).
          handle: envpool's XLA handle (after a host ``reset()``).
          prev_done: ``[N]`` terminated | truncated of the last step (False after a reset).
          length: vector steps (static).

        Returns:
          ``(carry, handle, prev_done, steps)``: ``steps`` is the chunk's TimeSteps without
          observations, fields ``[T, N]``, for episode statistics on the host.
        """
        _, _, _, xla_step = self.env.xla()

        def body(state, _):
            carry, handle, prev_done = state
            handle, output = xla_step(handle, carry.pending.action)
            ts = self.env.xla_timestep(output, prev_done)
            carry, _, _ = self._step(carry, ts)
            done = jnp.logical_or(ts.terminated, ts.truncated)
            return (carry, handle, done), ts._replace(observation=None)

        (carry, handle, prev_done), outputs = jax.lax.scan(
            body, (carry, handle, prev_done), None, length=length
        )
        return carry, handle, prev_done, outputs


def _chunk_length(every: int, num_envs: int, longest: int = 1000) -> int:
    """Vector steps per compiled chunk: the longest (up to ``longest``) that divides the
    events' common period, so that logs, evaluations and checkpoints fall exactly on their
    multiples, as on the host path."""
    period = max(every // num_envs, 1)
    return max(d for d in range(1, min(period, longest) + 1) if period % d == 0)


@dataclass
class Trainer:
    """Runs one run's host loop: logging, evaluation, checkpoints, signals."""

    loop: Loop
    config: LoopConfig
    logger: MetricsLogger
    checkpointer: Checkpointer
    evaluate: Callable[[Any, int], dict[str, Any]]
    games: int = 0
    stopped_by_signal: bool = field(default=False, init=False)

    def state_of(self, carry: LoopCarry, games: int) -> dict[str, Any]:
        """The checkpointable run state (see :meth:`Loop.checkpoint_state`)."""
        return self.loop.checkpoint_state(carry, games, self.config.save_replay)

    def checkpoint(self, carry: LoopCarry, games: int) -> None:
        env_steps = int(carry.env_steps)
        self.checkpointer.save(
            env_steps,
            self.state_of(carry, games),
            {
                "env_steps": env_steps,
                "updates": int(carry.learner.updates),
                "games": games,
                "replay_saved": self.config.save_replay,
            },
        )

    def run(self, carry: LoopCarry) -> LoopCarry:
        """Train until ``total_env_steps`` (or a signal, or ``stop_at_return``)."""
        cfg, loop, env = self.config, self.loop, self.loop.env
        self._env_steps = int(carry.env_steps)
        self._updates = int(carry.learner.updates)
        self._tracker = EpisodeTracker(env.num_envs)
        self._progress = Progress(cfg.total_env_steps)
        self._progress.enabled = self._progress.enabled and cfg.progress
        self._next = {
            name: (self._env_steps // every + 1) * every
            for name, every in (
                ("log", cfg.log_every),
                ("eval", cfg.eval_every),
                ("ckpt", cfg.checkpoint_every),
            )
        }
        self._window: dict[str, list[float]] = {}
        self._start = (time.perf_counter(), self._env_steps, self._updates)
        interrupted: list[bool] = []
        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(True))
        carry = carry.reset_metrics()
        ts = env.reset()
        carry, actions = loop.first_act(carry, ts)
        try:
            if cfg.loop == "compiled":
                carry = self._run_compiled(carry, interrupted)
            else:
                carry = self._run_host(carry, actions, interrupted)
        finally:
            signal.signal(signal.SIGINT, previous)
            self._progress.update(self._env_steps, self._updates, final=True)
        return carry

    def _run_host(self, carry: LoopCarry, actions: jax.Array, interrupted: list[bool]):
        env, loop = self.loop.env, self.loop
        while self._env_steps < self.config.total_env_steps:
            ts = env.step(np.asarray(actions))
            carry, actions, report = loop.step(carry, ts)
            self._account([ts], report)
            carry, stop = self._events(carry, interrupted)
            if stop:
                break
        return carry

    def _run_compiled(self, carry: LoopCarry, interrupted: list[bool]):
        """Compiled chunks, the host's accounting of one chunk overlapping the next.

        A chunk is dispatched before the previous one's episode statistics are computed on the
        host, so that work runs on another core while the device computes. Where a log,
        evaluation or checkpoint is due at a chunk's end (chunks divide their periods), the
        loop drains: it accounts every chunk, then runs the events on that carry.
        """
        env, loop, cfg = self.loop.env, self.loop, self.config
        n = env.num_envs
        handle = env.xla()[0]
        prev_done = jnp.zeros((n,), bool)
        length = _chunk_length(math.gcd(cfg.log_every, cfg.eval_every, cfg.checkpoint_every), n)
        dispatched = self._env_steps
        unaccounted: tuple[Any, Any, int] | None = None
        while dispatched < cfg.total_env_steps:
            remaining = (cfg.total_env_steps - dispatched + n - 1) // n
            steps = min(length, remaining)
            carry, handle, prev_done, chunk = loop.chunk(carry, handle, prev_done, steps)
            report = _report(carry.learner.updates, carry.last_loss)
            dispatched += steps * n
            if unaccounted is not None:
                self._account_chunk(*unaccounted)
            unaccounted = (chunk, report, steps)
            due = min(self._next.values())
            if dispatched >= due or dispatched >= cfg.total_env_steps or interrupted:
                self._account_chunk(*unaccounted)
                unaccounted = None
                carry, stop = self._events(carry, interrupted)
                if stop:
                    break
        return carry

    def _account_chunk(self, chunk: Any, report: Any, steps: int) -> None:
        rows = jax.tree.map(np.asarray, chunk)
        timesteps = [jax.tree.map(lambda x, t=t: x[t], rows) for t in range(steps)]
        self._account(timesteps, np.asarray(report))

    def _account(self, timesteps: list[Any], report: Any) -> None:
        """Episode statistics, counters and the non-finite check after some vector steps."""
        n = self.loop.env.num_envs
        for ts in timesteps:
            self._env_steps += n
            finished = self._tracker.update(ts)
            if finished:
                self.games += len(finished)
                returns = [e.episode_return for e in finished]
                self._progress.add_returns(returns)
                self._window.setdefault("return", []).extend(returns)
                self._window.setdefault("length", []).extend(float(e.length) for e in finished)
        updates, loss = int(report[0]), float(report[1])
        if updates != self._updates and not math.isfinite(loss):
            raise NonFiniteLossError(
                f"the loss became {loss} at learner update {updates} (env step "
                f"{self._env_steps}); the run stopped and kept its last good checkpoint"
            )
        self._updates = updates
        self._progress.update(self._env_steps, self._updates)

    def _events(self, carry: LoopCarry, interrupted: list[bool]) -> tuple[LoopCarry, bool]:
        """Log, evaluate and checkpoint when due; whether to stop."""
        cfg, env_steps, nxt = self.config, self._env_steps, self._next
        done = env_steps >= cfg.total_env_steps
        if env_steps >= nxt["log"] or done:
            while nxt["log"] <= env_steps:
                nxt["log"] += cfg.log_every
            # the per-step report is the actors' (one update behind): log the learner's count
            updates = int(carry.learner.updates)
            t0, steps0, updates0 = self._start
            elapsed = max(time.perf_counter() - t0, 1e-9)
            record: dict[str, Any] = {
                "env_steps": env_steps,
                "updates": updates,
                "games": self.games,
                "epsilon": float(self.loop.epsilon(env_steps)),
                "loop": cfg.loop,
                "env_steps_per_s": (env_steps - steps0) / elapsed,
                "updates_per_s": (updates - updates0) / elapsed,
            }
            record.update({k: float(np.mean(v)) for k, v in self._window.items() if v})
            record.update(carry.metric_means())
            self._window.clear()
            carry = carry.reset_metrics()
            self.logger.log(record)
        stop = False
        if env_steps >= nxt["eval"] or done:
            while nxt["eval"] <= env_steps:
                nxt["eval"] += cfg.eval_every
            result = self.evaluate(carry.learner.online, env_steps)
            target = cfg.stop_at_return
            stop = target is not None and result["mean_return"] >= target
        if env_steps >= nxt["ckpt"] or done or stop or interrupted:
            while nxt["ckpt"] <= env_steps:
                nxt["ckpt"] += cfg.checkpoint_every
            self.checkpoint(carry, self.games)
        if interrupted:
            self.stopped_by_signal = True
            stop = True
        return carry, stop
