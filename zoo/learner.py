"""One learner for every algorithm: a gradient step of the composed loss, then the target update.

``Learner(spec)`` builds the loss (:func:`zoo.build_loss`) and the optimizer
(:func:`zoo.build_optimizer`) once; ``learner.update(state, batch)`` is a pure function of
explicit state, ready for ``eqx.filter_jit`` (and, with ``axis_name``, for ``pmap``/``shard_map``:
gradients are averaged with ``pmean`` and the importance-weight normaliser is the global max).

Target updates happen every ``schedule.target_update_period`` learner updates:
``target ← rate·online + (1 − rate)·target`` with ``rate = schedule.target_update_rate`` (1 copies
the online parameters, as DQN; below 1 is Polyak averaging).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from zoo.losses import build_loss
from zoo.optimizers import build_optimizer
from zoo.replay.kinds import replay_kind
from zoo.spec import AlgorithmSpec
from zoo.types import LossAux, SequenceBatch, Transition

__all__ = ["DataParallelLearner", "Learner", "LearnerState", "sharded_update"]


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
    """

    def __init__(self, spec: AlgorithmSpec, *, axis_name: str | None = None):
        self.spec = spec
        self.axis_name = axis_name
        self.loss = build_loss(spec, axis_name=axis_name)
        self.optimizer = build_optimizer(spec.optimizer)
        self.target_update_period = int(spec.schedule.target_update_period)
        self.target_update_rate = float(spec.schedule.target_update_rate)

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

    def update(
        self, state: LearnerState, batch: Transition | SequenceBatch
    ) -> tuple[LearnerState, LossAux]:
        """One gradient step on ``batch`` and, when due, a target update."""
        key, loss_key = jax.random.split(state.key)

        def objective(online: Any) -> tuple[jax.Array, LossAux]:
            return self.loss(
                online=online, target=state.target, batch=batch, key=loss_key, step=state.updates
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
        return new_state, aux


class DataParallelLearner:
    """The learner's update under ``pmap`` over devices: one update step on a global batch.

    Every device holds a replica of the state and a shard of the batch; gradients are averaged
    with ``pmean`` and the importance-weight normaliser is the global maximum, so the update equals
    the single-device update on the whole batch (to float tolerance). Under ``jax.distributed``
    the devices of every process take part; each process feeds the shards of its local devices.

    Args:
      spec: a validated algorithm spec.
      devices: the devices to use (default: every device of every process; each process feeds
        its local ones).
    """

    axis_name = "devices"

    def __init__(self, spec: AlgorithmSpec, devices: list[Any] | None = None):
        self.devices = list(devices) if devices is not None else jax.devices()
        local = [d for d in self.devices if d.process_index == jax.process_index()]
        self.num_devices = len(local)
        batch = spec.replay.batch_size
        total = len(self.devices)
        if batch % total != 0:
            raise ValueError(
                f"replay.batch_size={batch} must divide evenly over {total} devices; set "
                f"--set replay.batch_size=<a multiple of {total}>"
            )
        self.learner = Learner(spec, axis_name=self.axis_name)
        self._devices_arg = None if devices is None else tuple(devices)
        self._compiled: dict[Any, Any] = {}

    def _pmapped(self, static: Any) -> Any:
        """``jax.pmap`` of the update over the state's arrays, its static part closed over."""
        if static not in self._compiled:

            def update(arrays, batch):
                state, aux = self.learner.update(eqx.combine(arrays, static), batch)
                return eqx.filter(state, eqx.is_array), aux

            self._compiled[static] = jax.pmap(
                update, axis_name=self.axis_name, devices=self._devices_arg
            )
        return self._compiled[static]

    def init(self, network: Any, key: jax.Array) -> LearnerState:
        """A replicated initial state (leading device axis on every array)."""
        return self.replicate(self.learner.init(network, key))

    def replicate(self, tree: Any) -> Any:
        """Put a copy of ``tree``'s arrays on every device (leading device axis)."""
        arrays, static = eqx.partition(tree, eqx.is_array)
        n = self.num_devices
        arrays = jax.tree.map(lambda x: jnp.broadcast_to(x[None], (n, *x.shape)), arrays)
        return eqx.combine(arrays, static)

    def unreplicate(self, tree: Any) -> Any:
        """The first replica of a replicated ``tree``."""
        arrays, static = eqx.partition(tree, eqx.is_array)
        return eqx.combine(jax.tree.map(lambda x: x[0], arrays), static)

    def shard(self, batch: Any) -> Any:
        """Split this process's batch (its share of the global batch) over its devices."""
        n = self.num_devices
        return jax.tree.map(lambda x: x.reshape((n, x.shape[0] // n, *x.shape[1:])), batch)

    def update(self, state: LearnerState, batch: Transition | SequenceBatch):
        """One data-parallel update on the local part of the global batch.

        Returns the replicated state and the loss aux with priorities flattened back to the
        local batch order (``None`` when the spec does not prioritise).
        """
        arrays, static = eqx.partition(state, eqx.is_array)
        arrays, aux = self._pmapped(static)(arrays, self.shard(batch))
        state = eqx.combine(arrays, static)
        priorities = None if aux.priorities is None else aux.priorities.reshape(-1)
        metrics = jax.tree.map(lambda x: x[0], aux.metrics)
        return state, LossAux(priorities=priorities, metrics=metrics)


def sharded_update(
    spec: AlgorithmSpec, devices: list[Any] | None = None
) -> Callable[[LearnerState, Transition | SequenceBatch], tuple[LearnerState, LossAux]]:
    """The data-parallel update as a function to call *inside* ``jit`` or ``lax.scan``.

    ``jax.shard_map`` over a mesh of ``devices`` (default: the local ones): the state is
    replicated, the batch is split along its leading axis, gradients and metrics are averaged
    with ``pmean`` and the importance-weight normaliser is the global maximum — the same update as
    :class:`Learner` on the whole batch. The training loop uses it when there are several local
    devices.
    """
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    devices = list(devices) if devices is not None else jax.local_devices()
    if spec.replay.batch_size % len(devices):
        raise ValueError(
            f"replay.batch_size={spec.replay.batch_size} must divide evenly over "
            f"{len(devices)} devices; set --set replay.batch_size=<a multiple of {len(devices)}>"
        )
    mesh = Mesh(np.asarray(devices), (DataParallelLearner.axis_name,))
    learner = Learner(spec, axis_name=DataParallelLearner.axis_name)
    sharded = P(DataParallelLearner.axis_name)
    priorities = sharded if replay_kind(spec).prioritized else None

    def update(state: LearnerState, batch: Transition | SequenceBatch):
        arrays, static = eqx.partition(state, eqx.is_array)

        def local(arrays: Any, batch: Any):
            new, aux = learner.update(eqx.combine(arrays, static), batch)
            return eqx.filter(new, eqx.is_array), aux

        new_arrays, aux = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(), sharded),
            out_specs=(P(), LossAux(priorities=priorities, metrics=P())),
            check_vma=False,
        )(arrays, batch)
        return eqx.combine(new_arrays, static), aux

    return update
