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

:meth:`Loop.step` is that body as one jitted call (the *host path*: environments step through
envpool's Python API between calls). :meth:`Loop.chunk` runs the same body for T vector steps
inside ``lax.scan`` with envpool's XLA ``step`` (the *compiled path*). Both read and write the
same :class:`LoopCarry`, so they produce the same transitions and parameters from the same seed.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo.checkpoint import Checkpointer
from zoo.envs import EpisodeTracker, TimeStep, VectorEnv
from zoo.learner import Learner, LearnerState, sharded_update
from zoo.metrics import MetricsLogger, Progress
from zoo.replay import StepBatch
from zoo.replay.kinds import replay_kind
from zoo.schedules import build_schedule
from zoo.spec import AlgorithmSpec

__all__ = [
    "Loop",
    "LoopCarry",
    "LoopConfig",
    "NonFiniteLossError",
    "Trainer",
    "checkpoint_state",
    "make_act",
]

METRICS = ("loss", "td_loss", "regularizer", "abs_td", "q_sa", "importance_exponent")


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stops and keeps its last good checkpoint."""


class Pending(eqx.Module):
    """The step acted on but not yet answered by the environment."""

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
      metric_sums: sums of the updates' metrics since the last log, ``[len(METRICS)]``.
      metric_count: updates summed in ``metric_sums`` (int32).
      last_loss: the latest update's loss (NaN before the first update).
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

    def metric_means(self) -> dict[str, float]:
        """Means of the metrics since they were last reset (empty before any update)."""
        count = int(self.metric_count)
        if count == 0:
            return {}
        sums = np.asarray(self.metric_sums)
        return {name: float(value) / count for name, value in zip(METRICS, sums, strict=True)}

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
      learner: the learner.
      replay: the replay (built for ``env.num_envs`` environments).
      initial_core_state: one env's initial recurrent state (recurrent specs).
    """

    def __init__(
        self,
        spec: AlgorithmSpec,
        env: VectorEnv,
        learner: Learner,
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
        self._prioritized = replay_kind(spec).prioritized
        # several local devices: the same update, data-parallel (shard_map inside the body)
        self.devices = len(jax.local_devices())
        self._update = sharded_update(spec) if self.devices > 1 else learner.update
        # The carry (replay included) is donated: the buffers are updated in place, never copied.
        self._jit_insert = eqx.filter_jit(
            lambda ts, carry: self._insert(carry, ts.reward, ts.terminated, ts.truncated),
            donate="all-except-first",
        )
        self._jit_learn = eqx.filter_jit(self._learn, donate="all")
        self._jit_act = eqx.filter_jit(
            lambda ts, carry: self._act_and_report(carry, ts), donate="all-except-first"
        )
        self._jit_first_act = eqx.filter_jit(self._first_act)
        self._jit_chunk = eqx.filter_jit(
            lambda length, carry, handle, done: self._chunk(carry, handle, done, length),
            donate="all-except-first",
        )
        self._host_env_steps = 0
        self._host_credit = 0.0

    def first_act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        """Act on the first observation after a reset (nothing to insert yet)."""
        self._host_env_steps = int(carry.env_steps)
        self._host_credit = float(carry.credit)
        return self._jit_first_act(carry, ts)

    def step(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """Host path: insert the pending step with the env's answer ``ts``, learn, act on ``ts``.

        Three jitted calls (insert; one per due update; act): the host mirrors the credit
        arithmetic, so no update runs under device control flow, in which XLA:CPU's
        convolutions are an order of magnitude slower (measured: 143 ms against 10 ms for a
        Nature-CNN update). ``carry`` is donated (do not use it afterwards). Returns the new
        carry, the actions ``[N]`` and ``[updates, last_loss]`` for the host to watch.
        """
        carry = self._jit_insert(ts, carry)
        self._host_env_steps += self.num_envs
        if self._host_env_steps >= self._min_size:
            self._host_credit += self.num_envs
        while self._host_credit >= self._update_period:
            carry = self._jit_learn(carry)
            self._host_credit -= self._update_period
        return self._jit_act(ts, carry)

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
        return LoopCarry(
            learner=learner_state,
            replay=self.replay.init(),
            key=key,
            env_steps=jnp.zeros((), jnp.int32),
            credit=jnp.zeros((), jnp.float32),
            core=self.batched_initial,
            pending=Pending(obs, jnp.zeros((n,), jnp.int32), flags, flags, self.batched_initial),
            metric_sums=jnp.zeros((len(METRICS),), jnp.float32),
            metric_count=jnp.zeros((), jnp.int32),
            last_loss=jnp.full((), jnp.nan, jnp.float32),
        )

    def _act_on(self, carry: LoopCarry, observation, first, valid) -> tuple[LoopCarry, jax.Array]:
        key, act_key = jax.random.split(carry.key)
        epsilon = self._epsilon(carry.env_steps)
        actions, before, after = self._act(
            carry.learner.online, observation, carry.core, first, act_key, epsilon
        )
        pending = Pending(observation, actions, first, valid, before)
        return eqx.tree_at(
            lambda c: (c.key, c.core, c.pending),
            carry,
            (key, after, pending),
            is_leaf=lambda x: x is None,
        ), actions

    def _learn_once(self, learner_state: LearnerState, replay_state: Any, key: jax.Array):
        batch, info = self.replay.sample(replay_state, key, self._batch_size)
        # Materialise the batch: fused into its consumer, the frame gather turns XLA:CPU's
        # convolutions into slow generic loops (measured).
        batch = jax.lax.optimization_barrier(batch)
        learner_state, aux = self._update(learner_state, batch)
        if self._prioritized:
            replay_state = self.replay.update_priorities(replay_state, info.indices, aux.priorities)
        metrics = jnp.stack([jnp.asarray(aux.metrics[m], jnp.float32) for m in METRICS])
        return learner_state, replay_state, metrics

    def _insert(self, carry: LoopCarry, reward, terminated, truncated) -> LoopCarry:
        """Insert the pending step with the environment's answer; credit the transitions."""
        p = carry.pending
        step = StepBatch(
            observation=p.observation,
            action=p.action,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            first=p.first,
            valid=p.valid,
            core_state=p.core_state,
        )
        env_steps = carry.env_steps + self.num_envs
        learning = env_steps >= self._min_size
        return eqx.tree_at(
            lambda c: (c.replay, c.env_steps, c.credit),
            carry,
            (
                self.replay.add(carry.replay, step),
                env_steps,
                jnp.where(learning, carry.credit + self.num_envs, carry.credit),
            ),
        )

    def _learn_fields(self, replay_state: Any, fields: tuple) -> tuple:
        """One update on the fields that learning changes (the frames stay outside)."""
        learner_state, weight, top, credit, key, sums, count, _ = fields
        key, sub = jax.random.split(key)
        replay_now = replay_state._replace(weight=weight, max_priority=top)
        learner_state, replay_now, metrics = self._learn_once(learner_state, replay_now, sub)
        return (
            learner_state,
            replay_now.weight,
            replay_now.max_priority,
            credit - self._update_period,
            key,
            sums + metrics,
            count + 1,
            metrics[0],
        )

    @staticmethod
    def _fields(carry: LoopCarry) -> tuple:
        return (
            carry.learner,
            carry.replay.weight,
            carry.replay.max_priority,
            carry.credit,
            carry.key,
            carry.metric_sums,
            carry.metric_count,
            carry.last_loss,
        )

    @staticmethod
    def _with_fields(carry: LoopCarry, fields: tuple) -> LoopCarry:
        learner, weight, top, credit, key, sums, count, last_loss = fields
        return LoopCarry(
            learner=learner,
            replay=carry.replay._replace(weight=weight, max_priority=top),
            key=key,
            env_steps=carry.env_steps,
            credit=credit,
            core=carry.core,
            pending=carry.pending,
            metric_sums=sums,
            metric_count=count,
            last_loss=last_loss,
        )

    def _learn(self, carry: LoopCarry) -> LoopCarry:
        """One learner update (host path: called once per due update)."""
        return self._with_fields(carry, self._learn_fields(carry.replay, self._fields(carry)))

    def _learn_due(self, carry: LoopCarry) -> LoopCarry:
        """Every due update, under ``cond`` (compiled path: inside ``lax.scan``).

        At most ``max_updates`` are due per vector step; only the fields learning changes go
        through the ``cond``, the frames are read from outside so XLA never copies them.
        """
        fields = self._fields(carry)
        learn = partial(self._learn_fields, carry.replay)
        for _ in range(self._max_updates):
            fields = jax.lax.cond(fields[3] >= self._update_period, learn, lambda f: f, fields)
        return self._with_fields(carry, fields)

    def _act_and_report(self, carry: LoopCarry, ts: TimeStep):
        carry, actions = self._act_on(carry, ts.observation, ts.first, ts.valid)
        report = jnp.stack([carry.learner.updates.astype(jnp.float32), carry.last_loss])
        return carry, actions, report

    # -------------------------------------------------------------------------- host path

    def _first_act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        return self._act_on(carry, ts.observation, ts.first, ts.valid)

    def _step(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """The compiled path's body: insert, every due update, act (the host path's order)."""
        carry = self._insert(carry, ts.reward, ts.terminated, ts.truncated)
        carry = self._learn_due(carry)
        return self._act_and_report(carry, ts)

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


def checkpoint_state(carry: LoopCarry, games: int, save_replay: bool) -> dict[str, Any]:
    """What a checkpoint holds: learner, counters, RNG key, and the replay unless opted out.

    The pending step and the actors' core state are not saved: environments cannot be
    checkpointed, so a resumed run starts new episodes.
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
        state["replay"] = carry.replay
    return state


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
        """The checkpointable run state (see :func:`checkpoint_state`)."""
        return checkpoint_state(carry, games, self.config.save_replay)

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
        env, loop, cfg = self.loop.env, self.loop, self.config
        handle = env.xla()[0]
        prev_done = jnp.zeros((env.num_envs,), bool)
        length = _chunk_length(
            math.gcd(cfg.log_every, cfg.eval_every, cfg.checkpoint_every), env.num_envs
        )
        while self._env_steps < cfg.total_env_steps:
            remaining = (cfg.total_env_steps - self._env_steps + env.num_envs - 1) // env.num_envs
            steps = min(length, remaining)
            carry, handle, prev_done, chunk = loop.chunk(carry, handle, prev_done, steps)
            rows = jax.tree.map(np.asarray, chunk)
            timesteps = [jax.tree.map(lambda x, t=t: x[t], rows) for t in range(steps)]
            report = np.asarray(
                jnp.stack([carry.learner.updates.astype(jnp.float32), carry.last_loss])
            )
            self._account(timesteps, report)
            carry, stop = self._events(carry, interrupted)
            if stop:
                break
        return carry

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
            t0, steps0, updates0 = self._start
            elapsed = max(time.perf_counter() - t0, 1e-9)
            record: dict[str, Any] = {
                "env_steps": env_steps,
                "updates": self._updates,
                "games": self.games,
                "epsilon": float(self.loop._epsilon(env_steps)),
                "loop": cfg.loop,
                "env_steps_per_s": (env_steps - steps0) / elapsed,
                "updates_per_s": (self._updates - updates0) / elapsed,
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
