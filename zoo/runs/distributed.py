"""Training across processes with ``jax.distributed``: the process group and what it agrees on.

A run over ``P`` processes (on one host or many) is one run: every process steps its own
``N`` environments (seeded apart), keeps its own replay shard (``replay.capacity / P``
transitions) and samples ``replay.batch_size / P`` items per update; the learner's update is
data-parallel over every learner device of every process
(:class:`zoo.learner.DataParallelLearner`: gradients averaged with ``pmean``), so the
processes' parameters stay identical. The processes step in lockstep (each update is a
collective), so a vector step of the run is ``P × N`` transitions: the budget, the
update-credit rule (one update per ``schedule.update_period`` transitions of the *run*),
``replay.min_size``, ε's schedule and the log, evaluation and checkpoint cadences all count
the run's transitions, as a one-process run of ``P × N`` environments would (Hessel et al.
2021, "Podracer architectures for scalable reinforcement learning",
https://arxiv.org/abs/2104.06272: Sebulba's replicas; cleanba's ``local_num_envs``).

Ownership: process 0 owns the run directory (``run.yaml``, the spec, the history, the metrics
and evaluations, and its checkpoints in ``checkpoints/``) and alone evaluates; process ``k >
0`` keeps its replay shard's checkpoints and its own training records in
``processes/<k>/`` of the same directory, which every process must reach (one host, or a
shared filesystem). Everything that decides whether to go on is agreed by all processes
(:meth:`ProcessGroup.any`, :meth:`ProcessGroup.broadcast`): an interrupt on any process stops
all of them at the next log, an early stop is process 0's evaluation, and a resume starts from
the newest checkpoint step that every process completed.

Joining: :func:`join` calls ``jax.distributed.initialize`` before JAX starts. Given nothing,
JAX detects the cluster from the environment as schedulers provide it (SLURM, Open MPI,
Kubernetes, Cloud TPU); ``ZOO_COORDINATOR``, ``ZOO_NUM_PROCESSES`` and ``ZOO_PROCESS_ID`` (or
``zoo train --coordinator/--num-processes/--process-id``) set it explicitly, e.g. for several
processes on one machine. On CPU the collectives use gloo.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.experimental import multihost_utils

from zoo.drivers.asynchronous import request_cpu_devices
from zoo.runs.group import ENV_COORDINATOR, JoinRequest, ProcessGroup

__all__ = ["JoinedGroup", "join", "start"]


@dataclasses.dataclass(frozen=True)
class JoinedGroup(ProcessGroup):
    """A group joined by :func:`join`: its collectives run across its processes."""

    def any(self, flag: bool) -> bool:
        if not self.several:
            return bool(flag)
        flags = multihost_utils.process_allgather(np.asarray([int(bool(flag))], np.int32))
        return bool(np.asarray(flags).any())

    def broadcast(self, value: float | int) -> float:
        if not self.several:
            return float(value)
        out = multihost_utils.broadcast_one_to_all(np.asarray(value, np.float64))
        return float(np.asarray(out))

    def barrier(self, name: str) -> None:
        if self.several:
            multihost_utils.sync_global_devices(name)


def start(request: JoinRequest, cpu_devices: int | None = None) -> ProcessGroup:
    """Start this process's part of a run, before JAX has started: ask for ``cpu_devices``
    virtual CPU devices where given (an asynchronous run's actor and learner;
    :func:`zoo.drivers.asynchronous.request_cpu_devices`), then join the group ``request``
    asks for (the group of one when it asks for none).

    Raises:
      ValueError: as :func:`join`.
    """
    if cpu_devices is not None:
        request_cpu_devices(cpu_devices)
    if not request.given or request.num_processes == 1:
        return ProcessGroup()
    return join(request)


def join(request: JoinRequest | None = None) -> ProcessGroup:
    """Join the process group (``jax.distributed.initialize``), before JAX starts.

    Args:
      request: the coordinator address (``host:port`` of process 0), the number of processes
        and this one's index; fields left ``None`` are detected by JAX from the cluster's
        environment.

    Raises:
      ValueError: an incomplete or inconsistent request, or JAX already running (a process
        that has run a JAX computation cannot join a group).
    """
    request = request or JoinRequest()
    n, k = request.num_processes, request.process_id
    if n is not None and n < 1:
        raise ValueError(f"--num-processes must be at least 1, got {n}")
    if n is not None and k is not None and not 0 <= k < n:
        raise ValueError(f"--process-id must be from 0 to {n - 1}, got {k}")
    if n is not None and n > 1 and request.coordinator is None:
        raise ValueError(
            f"{n} processes need a coordinator: give --coordinator HOST:PORT (process 0's "
            f"address) or set {ENV_COORDINATOR}"
        )
    if n == 1:
        return ProcessGroup()
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=request.coordinator, num_processes=n, process_id=k
        )
    except (RuntimeError, ValueError) as e:
        # e.g. JAX already running, or no cluster detected and nothing given
        raise ValueError(
            f"cannot join the process group: {str(e).splitlines()[0] if str(e) else e!r}; "
            "give --coordinator, --num-processes and --process-id (or the ZOO_* variables)"
        ) from None
    return JoinedGroup(jax.process_index(), jax.process_count())
