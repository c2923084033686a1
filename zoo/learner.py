"""One learner for every algorithm: a gradient step of the composed loss, then the target update.

``Learner(spec)`` builds the loss (:func:`zoo.build_loss`) and the optimizer
(:func:`zoo.build_optimizer`) once; ``learner.update(state, batch)`` is a pure function of
explicit state, ready for ``jit`` and ``lax.scan``. :class:`DataParallelLearner` is the one
data-parallel form of the same update (``shard_map`` over devices: gradients averaged with
``pmean``, the importance-weight normaliser the global max), with the same interface; the
training loop runs whichever learner it is given, and a run picks it with
:func:`learner_for_devices`.

Target updates happen every ``schedule.target_update_period`` learner updates:
``target ← rate·online + (1 − rate)·target`` with ``rate = schedule.target_update_rate`` (1 copies
the online parameters, as DQN; below 1 is Polyak averaging). With a period of 1 and a rate of 1
the target equals the online network at every update (``1·online + 0·target``, exactly), so the
loss is given the online network as its target (``target=None``, :class:`zoo.losses.Loss`) and
reads one pass at s′ where it would read two (:attr:`Learner.target_is_online`).

With ``resets`` in the spec (:mod:`zoo.resets`), an update after which a reset is due
(:meth:`zoo.spec.ResetSpec.due` of its count) ends with :meth:`Learner.reset`: fresh draws of the
network from ``network_fn`` (one for the online network, one for the target) with keys folded
from the update's, the optimizer's state started over. It is a ``lax.cond`` inside the update,
so every driver resets at the same update.

With an ``augmentation`` in the spec, each update first augments the batch's observations
(:mod:`zoo.augmentation`) with a key split from the update's loss key (and, data-parallel, folded
with the device's index, so that each shard draws its own shifts); without one nothing is split
and the update is exactly what it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from zoo.augmentation import augment_batch, build_augmentation
from zoo.horizon import Horizon
from zoo.losses import build_loss
from zoo.optimizers import build_optimizer
from zoo.resets import reset_network, resets_done
from zoo.spec import AlgorithmSpec
from zoo.types import LossAux, SequenceBatch, Transition

__all__ = ["DataParallelLearner", "Learner", "LearnerState", "learner_for_devices"]


class LearnerState(eqx.Module):
    """Everything a learner update reads and writes.

    Attributes:
      online: the online network (an Equinox module).
      target: the target network.
      opt_state: the optimizer's state.
      updates: learner updates done so far (int32 scalar).
      key: PRNG key for noisy layers.
    """

    online: Any
    target: Any
    opt_state: optax.OptState
    updates: jax.Array
    key: jax.Array


class Learner:
    """Builds the update step of ``spec``.

    Args:
      spec: a validated algorithm spec.
      axis_name: the device axis when run under ``pmap``/``shard_map``; ``None`` on one device.
      network_fn: ``key -> network``, a fresh initialisation of the network the learner trains
        (``zoo.build_network`` of the spec and the environment's shapes); needed by an update
        of a spec with ``resets``.

    Attributes:
      loss: the composed loss (its ``metric_names`` and ``prioritized`` describe ``LossAux``).
      augment: the spec's augmentation of sampled batches, or ``None``.
      num_devices: the local devices one update runs on (1).
      num_shards: the parts each update's batch is split into (1: taken whole).
      num_processes: the processes one update spans (1).
      traceable: whether :meth:`update` may be called inside ``jit`` or ``lax.scan`` (true).
      target_is_online: whether the target equals the online network at every update
        (``target_update_period`` 1, ``target_update_rate`` 1): the loss then reads the online
        network as its target, under stop-gradient; the target is still kept (and saved) as it
        is otherwise.
    """

    num_devices = 1
    num_shards = 1
    num_processes = 1
    traceable = True

    def __init__(
        self,
        spec: AlgorithmSpec,
        *,
        axis_name: str | None = None,
        network_fn: Callable[[jax.Array], Any] | None = None,
    ):
        self.spec = spec
        self.axis_name = axis_name
        self.resets = spec.resets
        self.network_fn = network_fn
        self.horizon = Horizon(spec)
        self.act_with_target = spec.schedule.act_with == "target"
        self.loss = build_loss(spec, axis_name=axis_name)
        self.augment = build_augmentation(spec.augmentation)
        self.optimizer = build_optimizer(spec.optimizer)
        self.target_update_period = int(spec.schedule.target_update_period)
        self.target_update_rate = float(spec.schedule.target_update_rate)
        self.target_is_online = self.target_update_period == 1 and self.target_update_rate == 1.0

    def acting(self, state: LearnerState) -> Any:
        """The network that acts and is evaluated: ``state``'s online network, or its target
        (``schedule.act_with: target``, BBF's ``target_action_selection``)."""
        return state.target if self.act_with_target else state.online

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The names of an update's metrics: the loss's, then ``resets`` (resets done) with
        resets, and ``n_step`` and ``discount`` (this update's) where they are scheduled."""
        extra = ("resets",) if self.resets is not None else ()
        extra += ("n_step", "discount") if self.horizon.scheduled else ()
        return (*self.loss.metric_names, *extra)

    def init(self, network: Any, key: jax.Array) -> LearnerState:
        """Initial state: the target starts as an exact copy of ``network``."""
        params = eqx.filter(network, eqx.is_inexact_array)
        target = jax.tree.map(lambda x: jnp.array(x, copy=True) if eqx.is_array(x) else x, network)
        return LearnerState(
            online=network,
            target=target,
            opt_state=self.optimizer.init(params),
            updates=jnp.zeros((), jnp.int32),
            key=key,
        )

    def replicate(self, tree: Any) -> Any:
        """``tree`` as :meth:`update` takes it (unchanged on one device)."""
        return tree

    def unreplicate(self, tree: Any) -> Any:
        """This process's copy of a state :meth:`update` returned (unchanged on one device)."""
        return tree

    def update(
        self, state: LearnerState, batch: Transition | SequenceBatch
    ) -> tuple[LearnerState, LossAux]:
        """One gradient step on ``batch`` and, when due, a target update."""
        key, loss_key = jax.random.split(state.key)
        if self.augment is not None:
            loss_key, augment_key = jax.random.split(loss_key)
            if self.axis_name is not None:
                augment_key = jax.random.fold_in(augment_key, jax.lax.axis_index(self.axis_name))
            batch = augment_batch(self.augment, augment_key, batch)

        def objective(online: Any) -> tuple[jax.Array, LossAux]:
            target = None if self.target_is_online else state.target
            return self.loss(
                online=online, target=target, batch=batch, key=loss_key, step=state.updates
            )

        (_, aux), grads = eqx.filter_value_and_grad(objective, has_aux=True)(state.online)
        if self.axis_name is not None:
            grads = jax.lax.pmean(grads, self.axis_name)
            aux = aux._replace(metrics=jax.lax.pmean(aux.metrics, self.axis_name))
        params = eqx.filter(state.online, eqx.is_inexact_array)
        updates, opt_state = self.optimizer.update(grads, state.opt_state, params)
        online = eqx.apply_updates(state.online, updates)
        count = state.updates + 1
        due = (count % self.target_update_period) == 0
        rate = jnp.where(due, self.target_update_rate, 0.0)
        online_params, static = eqx.partition(online, eqx.is_inexact_array)
        target_params = eqx.filter(state.target, eqx.is_inexact_array)
        mixed = jax.tree.map(
            lambda o, t: (rate * o + (1.0 - rate) * t).astype(t.dtype), online_params, target_params
        )
        target = eqx.combine(mixed, static)
        new_state = LearnerState(
            online=online, target=target, opt_state=opt_state, updates=count, key=key
        )
        metrics = dict(aux.metrics)
        if self.resets is not None:
            new_state = jax.lax.cond(
                self.resets.due(count), self._reset_drawn, lambda s: s, new_state
            )
            metrics["resets"] = resets_done(self.resets, count).astype(jnp.float32)
        if self.horizon.scheduled:
            metrics["n_step"] = jnp.asarray(self.horizon.n_step(state.updates), jnp.float32)
            metrics["discount"] = jnp.asarray(self.horizon.discount(state.updates), jnp.float32)
        return new_state, aux._replace(metrics=metrics)

    def reset(self, state: LearnerState, fresh_online: Any, fresh_target: Any) -> LearnerState:
        """``state`` after a reset (:mod:`zoo.resets`): the online network toward
        ``fresh_online``, the target toward ``fresh_target`` (``resets.target: reset``), the
        optimizer's state started over (``resets.optimizer: reset``)."""
        resets = self.resets
        if resets is None:
            raise ValueError("this learner's spec has no `resets`")
        online = reset_network(resets, state.online, fresh_online)
        target = (
            reset_network(resets, state.target, fresh_target)
            if resets.target == "reset"
            else state.target
        )
        opt_state = (
            self.optimizer.init(eqx.filter(online, eqx.is_inexact_array))
            if resets.optimizer == "reset"
            else state.opt_state
        )
        return LearnerState(
            online=online, target=target, opt_state=opt_state, updates=state.updates, key=state.key
        )

    def _reset_drawn(self, state: LearnerState) -> LearnerState:
        """:meth:`reset` toward two fresh draws of ``network_fn``, keyed by the update count."""
        if self.network_fn is None:
            raise ValueError(
                "a spec with `resets` needs the learner to draw fresh networks: "
                "Learner(spec, network_fn=lambda key: zoo.build_network(spec, "
                "observation_shape, num_actions, key=key))"
            )
        key = jax.random.fold_in(jax.random.fold_in(state.key, 0x5E5E7), state.updates)
        online_key, target_key = jax.random.split(key)
        return self.reset(state, self.network_fn(online_key), self.network_fn(target_key))


class DataParallelLearner:
    """The learner's update data-parallel over devices: one update step on a global batch.

    ``jax.shard_map`` over a mesh of ``devices``: the state is replicated, the batch is split
    along its leading axis, gradients and metrics are averaged with ``pmean`` and the
    importance-weight normaliser is the global maximum, so the update equals :class:`Learner`'s
    on the whole batch (to float tolerance: the halves' gradients are summed in another order).

    :meth:`update` is a function of explicit state like :meth:`Learner.update`: called inside
    ``jit`` or ``lax.scan`` (the training loop does), or on its own. Under ``jax.distributed``
    with ``devices`` spanning processes, each process calls it with its share of the global
    batch (its local devices' shards) and gets the priorities of that share back; the state is
    then a global replicated array (:meth:`unreplicate` gives this process's copy).

    Args:
      spec: a validated algorithm spec.
      devices: the devices to use (default: every device of every process).
      network_fn: as :class:`Learner`'s (a spec with ``resets``).

    Attributes:
      learner: the per-device :class:`Learner` (its loss reduces over :attr:`axis_name`).
      devices: the mesh's devices; ``num_devices`` the local ones among them.
      num_processes: the processes the mesh spans (each feeds ``1 / num_processes`` of the
        global batch).
      traceable: false when the mesh spans processes: :meth:`update` then assembles global
        arrays from this process's batch and must be called from Python, not inside ``jit``.
    """

    axis_name = "devices"

    def __init__(
        self,
        spec: AlgorithmSpec,
        devices: list[Any] | None = None,
        *,
        network_fn: Callable[[jax.Array], Any] | None = None,
    ):
        from jax.sharding import Mesh

        self.spec = spec
        self.devices = list(devices) if devices is not None else jax.devices()
        local = [d for d in self.devices if d.process_index == jax.process_index()]
        self.num_devices = len(local)
        self._multiprocess = len(local) < len(self.devices)
        self.num_processes = len({d.process_index for d in self.devices})
        self.traceable = not self._multiprocess
        self.learner = Learner(spec, axis_name=self.axis_name, network_fn=network_fn)
        self.loss = self.learner.loss
        self.metric_names = self.learner.metric_names
        self.acting = self.learner.acting
        self.mesh = Mesh(np.asarray(self.devices), (self.axis_name,))
        self._compiled: dict[Any, Any] = {}

    @property
    def num_shards(self) -> int:
        """The parts each update's global batch is split into: one per device of the mesh."""
        return len(self.devices)

    def __repr__(self) -> str:
        return f"DataParallelLearner({self.spec.name or 'custom'}, devices={len(self.devices)})"

    def _sharded(self, static: Any) -> Any:
        """The update of the state's arrays under ``shard_map`` (jitted), its static part closed
        over; one compiled function per static part."""
        if static not in self._compiled:
            from jax.sharding import PartitionSpec as P

            split = P(self.axis_name)
            priorities = split if self.loss.prioritized else None

            def local(arrays: Any, batch: Any):
                new, aux = self.learner.update(eqx.combine(arrays, static), batch)
                return eqx.filter(new, eqx.is_array), aux

            self._compiled[static] = jax.jit(
                jax.shard_map(
                    local,
                    mesh=self.mesh,
                    in_specs=(P(), split),
                    out_specs=(P(), LossAux(priorities=priorities, metrics=P())),
                    check_vma=False,
                )
            )
        return self._compiled[static]

    def init(self, network: Any, key: jax.Array) -> LearnerState:
        """The initial state (the same as :meth:`Learner.init`; replicated across processes)."""
        return self.replicate(self.learner.init(network, key))

    def update(
        self, state: LearnerState, batch: Transition | SequenceBatch
    ) -> tuple[LearnerState, LossAux]:
        """One data-parallel update on ``batch`` (this process's share of the global batch).

        Returns the new state and the loss aux: metrics averaged over the global batch,
        priorities of ``batch``'s items in its order (``None`` when the spec does not
        prioritise).
        """
        size = jax.tree.leaves(batch)[0].shape[0]
        if size % self.num_devices != 0:
            raise ValueError(
                f"a batch of {size} items cannot be split evenly over this process's "
                f"{self.num_devices} devices; give a multiple of {self.num_devices}"
            )
        arrays, static = eqx.partition(state, eqx.is_array)
        if not self._multiprocess:
            new_arrays, aux = self._sharded(static)(arrays, batch)
            return eqx.combine(new_arrays, static), aux
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        split = NamedSharding(self.mesh, P(self.axis_name))
        batch = jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(split, np.asarray(x)), batch
        )
        new_arrays, aux = self._sharded(static)(self._global(arrays), batch)
        priorities = None if aux.priorities is None else _local_part(aux.priorities)
        metrics = jax.tree.map(lambda x: x.addressable_data(0), aux.metrics)
        return eqx.combine(new_arrays, static), LossAux(priorities=priorities, metrics=metrics)

    def _global(self, arrays: Any) -> Any:
        """Arrays as global arrays replicated over the mesh (each process holds a full copy)."""
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        replicated = NamedSharding(self.mesh, P())

        def put(x: Any) -> Any:
            if isinstance(x, jax.Array) and x.sharding == replicated:
                return x
            return jax.make_array_from_process_local_data(replicated, np.asarray(x))

        return jax.tree.map(put, arrays)

    def replicate(self, tree: Any) -> Any:
        """``tree`` ready for :meth:`update`: its arrays replicated over the mesh's processes
        (unchanged on one process, where ``shard_map`` replicates them itself)."""
        if not self._multiprocess:
            return tree
        arrays, static = eqx.partition(tree, eqx.is_array)
        return eqx.combine(self._global(arrays), static)

    def unreplicate(self, tree: Any) -> Any:
        """This process's copy of a state :meth:`update` returned (plain local arrays)."""
        if not self._multiprocess:
            return tree
        arrays, static = eqx.partition(tree, eqx.is_array)
        return eqx.combine(jax.tree.map(lambda x: x.addressable_data(0), arrays), static)


def _local_part(x: jax.Array) -> jax.Array:
    """The part of a global array split along axis 0 that this process holds, in order."""
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    return jnp.concatenate([s.data for s in shards]) if len(shards) > 1 else shards[0].data


def learner_for_devices(
    spec: AlgorithmSpec, network_fn: Callable[[jax.Array], Any] | None = None
) -> Learner | DataParallelLearner:
    """The learner a run on this host uses: :class:`Learner` on one local device,
    :class:`DataParallelLearner` over the local devices when there are several (``network_fn``:
    as :class:`Learner`'s)."""
    local = jax.local_devices()
    if len(local) > 1:
        return DataParallelLearner(spec, devices=local, network_fn=network_fn)
    return Learner(spec, network_fn=network_fn)
