"""Learning from the replay: when to update (the update-credit rule) and one learn step.

**The update-credit rule** (:class:`UpdateCredit`), the one statement of it that every driver
uses: once ``replay.min_size`` transitions have been inserted, each vector step of ``N``
environments credits ``N`` transitions; while the credit is at least ``schedule.update_period``,
one update runs and ``update_period`` is spent (fractional credit carries over). A vector step
is therefore due at most ``⌈(update_period − 1 + N) / update_period⌉`` updates. With
``schedule.updates_per_period`` = ``k`` above one (a replay ratio above one: BBF's 2, SR-SPR's
8 updates per transition), the credit is counted in ``k``-ths of a transition: a vector step
credits ``k·N`` and an update spends ``update_period``, so ``k`` updates run per
``update_period`` transitions, in whole numbers (no rounding of ``1/k``). Its methods are
written once for Python numbers and device arrays alike, so a host driver can mirror on the host
exactly what the device computes.

**One learn step** (:class:`LearnStep`): sample → update → priorities.

1. write the previous update's priorities into the replay and draw a batch
   (:meth:`LearnStep.sample`);
2. run the learner's update on it (:meth:`LearnStep.update`); its priorities are *deferred*
   (:meth:`zoo.replay.Replay.defer_priorities`) until just before the next sample, so that
   acting can overlap the update;
3. hand the actors the online network as it was *before* the update (the actors lag the
   learner by one update), and add the update's metrics to the running sums.

A learn step reads and writes a :class:`LearnCarry` and the replay state; it never touches the
environments or the actor's state. The pieces are pure functions: the compiled driver calls them
inside ``lax.scan``, the host driver jits ``sample`` and ``update`` separately (so the update is
dispatched without waiting for it) and passes them in.

:func:`replay_learning_parts` pairs the two for a replay (what :func:`zoo.data.learning_parts`
returns for one); it lives here, not in :mod:`zoo.replay`, which stores and samples only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from zoo.horizon import Horizon
from zoo.learner import DataParallelLearner, Learner, LearnerState
from zoo.replay import PendingPriorities, Replay, SampleInfo
from zoo.spec import AlgorithmSpec

__all__ = ["LearnCarry", "LearnStep", "UpdateCredit", "learner_report", "replay_learning_parts"]


def learner_report(updates: jax.Array, last_loss: jax.Array) -> jax.Array:
    """``[updates, loss]`` of a learner state: what the host watches (float32)."""
    return jnp.stack([updates.astype(jnp.float32), last_loss])


class UpdateCredit:
    """The update-credit rule of ``spec`` for ``num_envs`` environments (see the module doc).

    Every method takes and returns Python numbers or JAX arrays alike.

    Attributes:
      period: ``schedule.update_period`` (credited transitions per ``per_period`` updates).
      per_period: ``schedule.updates_per_period`` (updates per ``period`` transitions).
      min_size: ``replay.min_size`` (transitions inserted before any credit).
      num_envs: transitions per vector step.
      max_updates: the most updates one vector step can be due.
    """

    def __init__(self, spec: AlgorithmSpec, num_envs: int):
        schedule = spec.schedule
        self._set(
            schedule.update_period, spec.replay.min_size, num_envs, schedule.updates_per_period
        )

    @classmethod
    def of(cls, period: int, min_size: int, num_envs: int, per_period: int = 1) -> UpdateCredit:
        """The rule for explicit numbers: ``per_period`` updates per ``period`` credited
        transitions once ``min_size`` transitions are in (a data kind that is not a replay
        states its own, e.g. :mod:`zoo.rollout`: one learning phase per rollout)."""
        credit = cls.__new__(cls)
        credit._set(period, min_size, num_envs, per_period)
        return credit

    def _set(self, period: int, min_size: int, num_envs: int, per_period: int) -> None:
        if period < 1 or num_envs < 1 or per_period < 1:
            raise ValueError(
                "period, num_envs and per_period must be at least 1, got "
                f"{period}, {num_envs}, {per_period}"
            )
        self.period = float(period)
        self.per_period = int(per_period)
        self.min_size = int(min_size)
        self.num_envs = num_envs
        # credit < period after learning, so a vector step is due at most this many
        self.max_updates = (int(period) - 1 + num_envs * self.per_period) // int(period)

    @property
    def transitions_per_update(self) -> float:
        """Transitions credited per update: ``period / per_period``."""
        return self.period / self.per_period

    def earn(self, env_steps: Any, credit: Any) -> Any:
        """The credit after a vector step that brought the transitions inserted to
        ``env_steps``: ``per_period · num_envs`` more once ``min_size`` are in."""
        earned = self.num_envs * self.per_period
        if isinstance(env_steps, int):
            return credit + earned if env_steps >= self.min_size else credit
        return jnp.where(env_steps >= self.min_size, credit + earned, credit)

    def due(self, credit: Any) -> Any:
        """Whether an update is due at this credit."""
        return credit >= self.period

    def spend(self, credit: Any) -> Any:
        """The credit after one update."""
        return credit - self.period


class LearnCarry(NamedTuple):
    """What a learn step reads and writes besides the replay state.

    A ``NamedTuple`` (a pytree with named fields) rather than an ``eqx.Module``: the host
    driver builds two per update on the host, and constructing an ``eqx.Module`` costs ~0.1–0.4
    ms there (measured), ~10% of a CartPole vector step of the host driver.

    Attributes:
      learner: the learner state (networks, optimizer state, update count, noise key).
      key: the PRNG key the sampler splits.
      deferred: the latest update's priorities, not yet written (``None`` for a replay without
        priorities).
      metric_sums: sums of the updates' metrics since they were last reset, in the loss's
        ``metric_names`` order.
      metric_count: updates summed in ``metric_sums`` (int32).
      last_loss: the latest update's loss (NaN before the first update).
      actor: the online network the actors act with: the learner's before its latest update.
      actor_report: :func:`learner_report` of the learner state ``actor`` came from.
    """

    learner: LearnerState
    key: jax.Array
    deferred: PendingPriorities | None
    metric_sums: jax.Array
    metric_count: jax.Array
    last_loss: jax.Array
    actor: Any
    actor_report: jax.Array


class LearnStep:
    """Sample → update → priorities, for one learner and one replay.

    Args:
      learner: the learner whose update runs (:class:`~zoo.learner.Learner` or
        :class:`~zoo.learner.DataParallelLearner`).
      replay: the replay sampled from.
      batch_size: items per update (``replay.batch_size``); over several processes
        (:mod:`zoo.runs.distributed`) each samples its share from its own replay shard.
      batch_field: the spec field(s) that set ``batch_size``, named when it does not divide
        evenly over the learner's devices.

    Attributes:
      metric_names: the learner's metric names (the loss's and its own), the order of
        ``LearnCarry.metric_sums``.

    Raises:
      ValueError: ``batch_size`` is not a multiple of the learner's devices (``num_shards``).
    """

    def __init__(
        self,
        learner: Learner | DataParallelLearner,
        replay: Replay,
        batch_size: int,
        batch_field: str = "replay.batch_size",
    ):
        self.learner = learner
        self.replay = replay
        batch_size = int(batch_size)
        shards = learner.num_shards
        if batch_size % shards != 0:
            raise ValueError(
                f"{batch_field} gives {batch_size} items per update, which cannot be split "
                f"evenly over the learner's {shards} devices: choose values that make it a "
                f"multiple of {shards}"
            )
        # a learner over several processes takes each one's share of the global batch
        self.batch_size = batch_size // learner.num_processes
        self.metric_names = tuple(learner.metric_names)
        self.horizon = Horizon(learner.spec)

    def init(self, learner_state: LearnerState, key: jax.Array) -> LearnCarry:
        """The carry before the first update (the actors act with ``learner_state``'s network;
        set it with :meth:`with_learner`)."""
        carry = LearnCarry(
            learner=learner_state,
            key=key,
            deferred=self.replay.no_pending_priorities(self.batch_size),
            metric_sums=jnp.zeros((len(self.metric_names),), jnp.float32),
            metric_count=jnp.zeros((), jnp.int32),
            last_loss=jnp.full((), jnp.nan, jnp.float32),
            actor=None,
            actor_report=None,
        )
        return self.with_learner(carry, learner_state)

    def with_learner(self, carry: LearnCarry, learner_state: LearnerState) -> LearnCarry:
        """``carry`` with a new learner state, the actors acting with its acting network
        (:meth:`zoo.learner.Learner.acting`: the online one unless the spec acts with the
        target).

        The actors get a copy (this process's, of a state replicated over processes): a
        compiled driver donates the carry, and a buffer cannot be donated twice.
        """
        local = self.learner.unreplicate(learner_state)
        actor = jax.tree.map(
            lambda x: jnp.array(x, copy=True) if eqx.is_array(x) else x,
            self.learner.acting(local),
        )
        report = learner_report(local.updates, carry.last_loss)
        return carry._replace(learner=learner_state, actor=actor, actor_report=report)

    def sample(
        self,
        replay_state: Any,
        deferred: PendingPriorities | None,
        key: jax.Array,
        updates: Any = None,
    ) -> tuple[Any, jax.Array, Any, SampleInfo]:
        """Write the previous update's priorities, then draw a batch; its n-step windows with
        the n and γ of the learner's ``updates`` done where they are scheduled
        (:class:`zoo.horizon.Horizon`).

        Returns ``(replay_state, key, batch, info)``.
        """
        replay_state = self.replay.write_priorities(replay_state, deferred)
        key, sub = jax.random.split(key)
        horizon = None if updates is None else self.horizon.at(updates)
        batch, info = self.replay.sample(replay_state, sub, self.batch_size, horizon)
        return replay_state, key, batch, info

    def update(
        self,
        learner_state: LearnerState,
        batch: Any,
        info: SampleInfo,
        sums: jax.Array,
        count: jax.Array,
    ) -> tuple[LearnerState, PendingPriorities | None, jax.Array, jax.Array, jax.Array]:
        """One update on a sampled batch; its priorities are deferred to the next sample.

        Returns ``(learner_state, deferred, metric_sums, metric_count, loss)``.
        """
        learner_state, aux = self.learner.update(learner_state, batch)
        metrics = jnp.stack([jnp.asarray(aux.metrics[m], jnp.float32) for m in self.metric_names])
        deferred = self.replay.defer_priorities(info, aux.priorities)
        return learner_state, deferred, sums + metrics, count + 1, metrics[0]

    def learn(
        self,
        carry: LearnCarry,
        replay_state: Any,
        *,
        sample: Callable[..., Any] | None = None,
        update: Callable[..., Any] | None = None,
        report: Callable[..., Any] = learner_report,
        barrier: bool = False,
    ) -> tuple[LearnCarry, Any]:
        """One learn step: the actors get the network as it is before the update, then sample
        (writing the previous update's priorities first) and update.

        Args:
          carry: the learn carry.
          replay_state: the replay state (returned with the priorities written).
          sample, update, report: :meth:`sample`, :meth:`update` and :func:`learner_report`, or
            jitted versions of them (a host driver dispatches each on its own).
          barrier: materialise the batch before the update (inside one compiled program: fused
            into its consumer, the frame gather turns XLA:CPU's convolutions into slow generic
            loops, measured).

        Returns:
          ``(carry, replay_state)``.
        """
        sample = self.sample if sample is None else sample
        update = self.update if update is None else update
        # the actors act on this process's copy (a learner over processes holds global arrays)
        local = self.learner.unreplicate(carry.learner)
        actor = self.learner.acting(local)
        actor_report = report(local.updates, carry.last_loss)
        replay_state, key, batch, info = sample(
            replay_state, carry.deferred, carry.key, local.updates
        )
        if barrier:
            batch = jax.lax.optimization_barrier(batch)
        learner, deferred, sums, count, loss = update(
            carry.learner, batch, info, carry.metric_sums, carry.metric_count
        )
        carry = LearnCarry(
            learner=learner,
            key=key,
            deferred=deferred,
            metric_sums=sums,
            metric_count=count,
            last_loss=loss,
            actor=actor,
            actor_report=actor_report,
        )
        return carry, replay_state


def replay_learning_parts(
    replay: Replay,
    learner: Learner | DataParallelLearner,
    spec: AlgorithmSpec,
    num_envs: int,
) -> tuple[LearnStep, UpdateCredit]:
    """How the loop learns from a replay: ``(learn_step, credit)``.

    A replay is sampled: one :class:`LearnStep` (sample → update → priorities) per
    ``schedule.update_period`` credited transitions once ``replay.min_size`` are in
    (:class:`UpdateCredit`). :func:`zoo.data.learning_parts` picks it for a replay; another data
    kind states its own pair (:meth:`zoo.rollout.RolloutStore.learning_parts`).
    """
    # over P processes (zoo.runs.distributed) every vector step brings the run P × N
    # transitions; each process samples its share of the batch from its own shard
    transitions = num_envs * learner.num_processes
    return LearnStep(learner, replay, spec.replay.batch_size), UpdateCredit(spec, transitions)
