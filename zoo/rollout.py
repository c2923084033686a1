"""The replay-free data kind: a rollout store and its learning phase (PQN).

PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning",
https://arxiv.org/abs/2407.04811; code: mttga/purejaxql) keeps no replay and no target network:
``N`` environments step together for ``T`` vector steps, the rollout's ``T × N`` transitions are
turned into Q(λ) targets once (:meth:`zoo.losses.Loss.rollout_targets`,
:func:`zoo.losses.returns.q_lambda_targets`), and the network trains on them for ``epochs``
passes of ``minibatches`` shuffled minibatches, each one learner update. The actors then act
with the network the phase ends with (no lag: PQN's next rollout acts with the new parameters).

The targets come from the learner's target network as it is when the rollout is complete. With
``schedule.target_update_period = epochs × minibatches`` the learner syncs it at the end of every
phase, so at every rollout it equals the online network: PQN exactly, with no second network
ever read. A longer period (a multiple of it) is a target network that lags whole rollouts.

It is a *data kind*, not a fork of the loop: :func:`zoo.data.build_data` builds it for a spec
with a ``rollout`` section (:func:`build_rollout`), and :class:`RolloutStore` has the replay's
interface (``init / add / seal / nbytes``, the priority hooks as no-ops) and its own
:meth:`RolloutStore.learning_parts`, which :func:`zoo.data.learning_parts` hands the loop, so
:class:`zoo.loop.Loop`, both drivers and the trainer run it unchanged:

- the store writes each vector step at its cursor (time-major ``[T, N]``) and the environment's
  next observation after it, so the last step bootstraps from the observation that followed it;
- the update-credit rule (:class:`zoo.learn.UpdateCredit`) is one learning phase per ``T × N``
  credited transitions, from the first step;
- :class:`RolloutLearnStep` is the learn step: ``sample`` hands over the whole rollout and draws
  the minibatch order of every epoch (and empties the store); ``update`` computes the targets
  and runs every minibatch update in one ``lax.scan`` inside the compiled driver, while the
  host driver dispatches the targets and each minibatch update as a call of its own.

Where this differs from purejaxql: truncations bootstrap from the final observation unless
``rollout.truncation: terminal`` (see :mod:`zoo.losses.returns`); envpool's pseudo-steps (the
auto-reset step after a game's end, whose action is ignored) are masked out of the loss instead
of being trained on; the minibatch loss is the mean over the minibatch with pseudo-steps as
zeros.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from zoo.jit import async_jit
from zoo.learn import LearnCarry, LearnStep, UpdateCredit, learner_report
from zoo.learner import DataParallelLearner, Learner, LearnerState
from zoo.replay.types import SampleInfo, StepBatch
from zoo.spec import AlgorithmSpec, RolloutSpec
from zoo.types import TargetBatch

Array = jax.Array

__all__ = ["RolloutData", "RolloutLearnStep", "RolloutState", "RolloutStore", "build_rollout"]


class RolloutState(NamedTuple):
    """One rollout of ``N`` environments, time-major.

    Attributes:
      observation: ``[T + 1, N, *observation_shape]``: slot ``t`` the observation acted on at
        step ``t``; slot ``t + 1`` is written with the environment's answer too, so the slot
        after the last step written holds its next observation (slot ``T`` after a full one).
      action: ``[T, N]`` int32.
      reward: ``[T, N]`` float32.
      terminated: ``[T, N]`` bool.
      truncated: ``[T, N]`` bool.
      valid: ``[T, N]`` bool: a real step (False for envpool's pseudo-steps and for slots not
        written since the last learning phase).
      cursor: int32 scalar, the steps written since the last learning phase.
    """

    observation: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    valid: Array
    cursor: Array


class RolloutStore:
    """The rollout of ``num_envs`` environments over ``length`` vector steps (see the module doc).

    Args:
      length: ``T``, vector steps per rollout (``rollout.length``).
      num_envs: ``N``.
      observation_shape: one observation's shape (stacked frames stored whole).
      observation_dtype: its dtype.
      rollout: the spec's rollout section (epochs, minibatches).
    """

    prioritized = False

    def __init__(
        self,
        *,
        length: int,
        num_envs: int,
        observation_shape: tuple[int, ...],
        observation_dtype: Any,
        rollout: RolloutSpec,
    ):
        if length < 1 or num_envs < 1:
            raise ValueError(f"length and num_envs must be at least 1, got {length}, {num_envs}")
        size = length * num_envs
        if size % rollout.minibatches != 0:
            raise ValueError(
                f"rollout.minibatches={rollout.minibatches} must divide the rollout's "
                f"rollout.length × num_envs = {length} × {num_envs} = {size} transitions; "
                f"choose a divisor of {size} or another number of environments"
            )
        self.length = int(length)
        self.num_envs = int(num_envs)
        self.observation_shape = tuple(int(d) for d in observation_shape)
        self.observation_dtype = jnp.dtype(observation_dtype)
        self.rollout = rollout

    def __repr__(self) -> str:
        return f"RolloutStore(length={self.length}, num_envs={self.num_envs})"

    def init(self) -> RolloutState:
        """An empty rollout (nothing valid)."""
        t, n = self.length, self.num_envs

        def flags() -> Array:  # one buffer each: the host driver donates the state
            return jnp.zeros((t, n), bool)

        return RolloutState(
            observation=jnp.zeros((t + 1, n, *self.observation_shape), self.observation_dtype),
            action=jnp.zeros((t, n), jnp.int32),
            reward=jnp.zeros((t, n), jnp.float32),
            terminated=flags(),
            truncated=flags(),
            valid=flags(),
            cursor=jnp.zeros((), jnp.int32),
        )

    def nbytes(self) -> int:
        """Exact bytes of :meth:`init`'s arrays."""
        shapes = jax.tree.leaves(jax.eval_shape(self.init))
        return sum(math.prod(x.shape) * x.dtype.itemsize for x in shapes)

    def add(self, state: RolloutState, step: StepBatch) -> RolloutState:
        """Write one vector step at the cursor, and its next observation after it."""
        if step.next_observation is None:
            raise ValueError("a rollout store needs StepBatch.next_observation (zoo.loop sets it)")
        t = state.cursor % self.length
        observation = state.observation.at[t].set(step.observation.astype(self.observation_dtype))
        observation = observation.at[t + 1].set(
            step.next_observation.astype(self.observation_dtype)
        )
        return RolloutState(
            observation=observation,
            action=state.action.at[t].set(step.action.astype(jnp.int32)),
            reward=state.reward.at[t].set(step.reward.astype(jnp.float32)),
            terminated=state.terminated.at[t].set(step.terminated),
            truncated=state.truncated.at[t].set(step.truncated),
            valid=state.valid.at[t].set(step.valid),
            cursor=state.cursor + 1,
        )

    def seal(self, state: RolloutState) -> RolloutState:
        """Close the rollout at a resume boundary: the environments restart, so the steps
        written before it are dropped (the phase trains on those written after it)."""
        return state._replace(valid=jnp.zeros_like(state.valid))

    def learning_parts(
        self, learner: Learner | DataParallelLearner, spec: AlgorithmSpec, num_envs: int
    ) -> tuple[RolloutLearnStep, UpdateCredit]:
        """A :class:`RolloutLearnStep`, due once per ``T × N`` transitions from the first."""
        if num_envs != self.num_envs:
            raise ValueError(f"the store holds {self.num_envs} environments, not {num_envs}")
        if learner.num_processes > 1:
            raise ValueError(
                "a rollout learner (PQN) does not run across processes yet: its learning phase "
                "shuffles the whole rollout into minibatches; train it in one process"
            )
        credit = UpdateCredit.of(self.length * num_envs, num_envs, num_envs)
        return RolloutLearnStep(learner, self), credit

    # the replay's priority hooks: nothing is prioritised; what a learning phase changes in
    # the store (the cursor and the valid flags it clears) passes through them
    def no_pending_priorities(self, batch_size: int) -> None:
        del batch_size

    def defer_priorities(self, info: SampleInfo, priorities: Array | None) -> None:
        del info, priorities

    def write_priorities(self, state: RolloutState, pending: Any) -> RolloutState:
        del pending
        return state

    def priority_state(self, state: RolloutState) -> tuple[Array, Array]:
        """What a learning phase changes: ``(valid, cursor)`` (small beside the observations,
        so a compiled driver passes only this through ``lax.cond``)."""
        return state.valid, state.cursor

    def with_priority_state(self, state: RolloutState, part: tuple[Array, Array]) -> RolloutState:
        """``state`` with :meth:`priority_state`'s part replaced."""
        valid, cursor = part
        return state._replace(valid=valid, cursor=cursor)


class RolloutData(NamedTuple):
    """A rollout flattened to its ``T·N`` items, with their targets (what the phase's updates
    draw their minibatches from).

    Attributes:
      observation: ``[T·N, ...]``.
      action: ``[T·N]``.
      target: ``[T·N]`` the Q(λ) targets.
      valid: ``[T·N]`` bool, the mask of the loss.
    """

    observation: Array
    action: Array
    target: Array
    valid: Array


class RolloutLearnStep(LearnStep):
    """One learning phase on a complete rollout: Q(λ) targets, then ``epochs × minibatches``
    learner updates on shuffled minibatches (one :class:`~zoo.types.TargetBatch` each).

    The interface is :class:`~zoo.learn.LearnStep`'s, so the drivers call it alike:
    :meth:`sample` (the rollout and every epoch's order; the store is emptied),
    :meth:`update` (the whole phase, one compiled call), :meth:`learn`.
    """

    def __init__(self, learner: Learner | DataParallelLearner, store: RolloutStore):
        rollout = store.rollout
        self.size = store.length * store.num_envs
        self.epochs = int(rollout.epochs)
        self.minibatches = int(rollout.minibatches)
        self.minibatch_size = self.size // self.minibatches
        super().__init__(
            learner,
            store,
            self.minibatch_size,
            batch_field=f"rollout.length × num_envs / rollout.minibatches = {store.length} × "
            f"{store.num_envs} / {self.minibatches}",
        )
        # a host driver's calls (jitted once per learn step; see learn)
        self._host_targets = async_jit(self.targets)
        self._host_minibatch = async_jit(self.minibatch_update)

    def sample(
        self, replay_state: RolloutState, deferred: Any, key: Array
    ) -> tuple[RolloutState, Array, RolloutState, SampleInfo]:
        """The whole rollout as the batch and the minibatch order of every epoch
        (``info.indices`` ``[epochs, T·N]``, permutations of the flattened rollout); the store
        comes back empty (cursor 0, nothing valid). Returns ``(store, key, batch, info)``."""
        del deferred
        key, sub = jax.random.split(key)
        order = jax.vmap(lambda k: jax.random.permutation(k, self.size))(
            jax.random.split(sub, self.epochs)
        )
        info = SampleInfo(
            indices=order.astype(jnp.int32),
            probability=jnp.ones((self.minibatch_size,), jnp.float32),
        )
        emptied = replay_state._replace(
            valid=jnp.zeros_like(replay_state.valid), cursor=jnp.zeros_like(replay_state.cursor)
        )
        return emptied, key, replay_state, info

    def targets(self, learner_state: LearnerState, batch: RolloutState) -> RolloutData:
        """The rollout flattened to ``T·N`` items with their Q(λ) targets (from the target
        network as it is now, see the module doc)."""
        noise = jax.random.fold_in(learner_state.key, 0x5051)  # the targets' noise sample
        targets = self.learner.loss.rollout_targets(
            learner_state.online,
            learner_state.target,
            batch.observation,
            batch.action,
            batch.reward,
            batch.terminated,
            batch.truncated,
            batch.valid,
            noise,
        )
        flat = lambda x: x.reshape((self.size, *x.shape[2:]))  # noqa: E731
        return RolloutData(
            observation=flat(batch.observation[:-1]),
            action=flat(batch.action),
            target=flat(targets),
            valid=flat(batch.valid),
        )

    def minibatch_update(
        self,
        learner_state: LearnerState,
        data: RolloutData,
        info: SampleInfo,
        k: Array,
        sums: Array,
        count: Array,
    ) -> tuple[LearnerState, Array, Array, Array]:
        """The phase's ``k``-th learner update (epoch ``k // minibatches``), on the items
        ``info.indices`` orders there. Returns ``(learner_state, sums, count, loss)``."""
        order = info.indices.reshape((self.epochs * self.minibatches, self.minibatch_size))
        idx = jax.lax.dynamic_index_in_dim(order, k, keepdims=False)
        minibatch = TargetBatch(
            observation=data.observation[idx],
            action=data.action[idx],
            target=data.target[idx],
            probability=info.probability,
            mask=data.valid[idx],
        )
        # materialised before the update: a gather fused into XLA:CPU's convolutions turns them
        # into slow generic loops (as zoo.learn's barrier)
        minibatch = jax.lax.optimization_barrier(minibatch)
        learner_state, aux = self.learner.update(learner_state, minibatch)
        metrics = jnp.stack([jnp.asarray(aux.metrics[m], jnp.float32) for m in self.metric_names])
        return learner_state, sums + metrics, count + 1, metrics[0]

    def update(
        self,
        learner_state: LearnerState,
        batch: RolloutState,
        info: SampleInfo,
        sums: Array,
        count: Array,
    ) -> tuple[LearnerState, None, Array, Array, Array]:
        """The whole phase as one function (the compiled driver's): :meth:`targets`, then every
        :meth:`minibatch_update` in one ``lax.scan``.

        Returns ``(learner_state, None, metric_sums, metric_count, loss)`` as
        :meth:`zoo.learn.LearnStep.update` (nothing is deferred; ``loss`` is the last update's).
        """
        data = self.targets(learner_state, batch)

        def one_update(carry, k):
            state, sums, count = carry
            state, sums, count, loss = self.minibatch_update(state, data, info, k, sums, count)
            return (state, sums, count), loss

        updates = jnp.arange(self.epochs * self.minibatches, dtype=jnp.int32)
        (state, sums, count), losses = jax.lax.scan(
            one_update, (learner_state, sums, count), updates
        )
        return state, None, sums, count, losses[-1]

    def learn(
        self,
        carry: LearnCarry,
        replay_state: Any,
        *,
        sample: Any = None,
        update: Any = None,
        report: Any = learner_report,
        barrier: bool = False,
    ) -> tuple[LearnCarry, Any]:
        """One learning phase; the actors then act with its final network (see the module
        doc).

        Inside a compiled program (no ``sample``/``update`` given) the phase is :meth:`update`.
        A host driver passes jitted ``sample`` and ``update`` (the latter is not used): the host
        then dispatches :meth:`targets` and each :meth:`minibatch_update` as calls of their own,
        so that no update runs under device control flow (XLA:CPU's convolutions are an order of
        magnitude slower there, :mod:`zoo.drivers.host`). ``report`` is unused (the actors'
        report is the phase's own, :meth:`~zoo.learn.LearnStep.with_learner`).
        """
        del barrier, report
        host = update is not None
        sample = self.sample if sample is None else sample
        replay_state, key, batch, info = sample(replay_state, carry.deferred, carry.key)
        if host:
            learner, sums, count = carry.learner, carry.metric_sums, carry.metric_count
            data = self._host_targets(learner, batch)
            for k in range(self.epochs * self.minibatches):
                learner, sums, count, loss = self._host_minibatch(
                    learner, data, info, jnp.asarray(k, jnp.int32), sums, count
                )
        else:
            learner, _, sums, count, loss = self.update(
                carry.learner, batch, info, carry.metric_sums, carry.metric_count
            )
        carry = LearnCarry(
            learner=learner,
            key=key,
            deferred=None,
            metric_sums=sums,
            metric_count=count,
            last_loss=loss,
            actor=carry.actor,
            actor_report=carry.actor_report,
        )
        # the actors get (a copy of) the phase's final network and its [updates, loss]
        return self.with_learner(carry, learner), replay_state


def build_rollout(
    spec: AlgorithmSpec,
    *,
    num_envs: int,
    observation_shape: tuple[int, ...],
    observation_dtype: Any,
) -> RolloutStore:
    """The rollout store of a spec with a ``rollout`` section (allocates nothing; what
    :func:`zoo.data.build_data` returns for it)."""
    if spec.rollout is None:
        raise ValueError(f"{spec.name or 'this spec'} has no `rollout` section")
    return RolloutStore(
        length=spec.rollout.length,
        num_envs=num_envs,
        observation_shape=observation_shape,
        observation_dtype=observation_dtype,
        rollout=spec.rollout,
    )
