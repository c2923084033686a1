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
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

__all__ = ["ProcessGroup", "join", "requested"]

#: The environment variables :func:`requested` reads.
ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID = (
    "ZOO_COORDINATOR",
    "ZOO_NUM_PROCESSES",
    "ZOO_PROCESS_ID",
)


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
    """The processes of one run (one process by default).

    Attributes:
      process_id: this process's index (``jax.process_index()``).
      num_processes: processes in the run (``jax.process_count()``).
    """

    process_id: int = 0
    num_processes: int = 1

    @classmethod
    def current(cls) -> ProcessGroup:
        """The group JAX is running in (one process unless :func:`join` joined one)."""
        return cls(process_id=jax.process_index(), num_processes=jax.process_count())

    @property
    def main(self) -> bool:
        """Whether this is process 0, which owns the run directory and evaluates."""
        return self.process_id == 0

    @property
    def several(self) -> bool:
        """Whether the run spans more than one process."""
        return self.num_processes > 1

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any process (a collective: every process must call it)."""
        if not self.several:
            return bool(flag)
        flags = multihost_utils.process_allgather(np.asarray([int(bool(flag))], np.int32))
        return bool(np.asarray(flags).any())

    def broadcast(self, value: float | int) -> float:
        """Process 0's ``value`` on every process (a collective)."""
        if not self.several:
            return float(value)
        out = multihost_utils.broadcast_one_to_all(np.asarray(value, np.float64))
        return float(np.asarray(out))

    def barrier(self, name: str) -> None:
        """Wait until every process reaches the barrier ``name``."""
        if self.several:
            multihost_utils.sync_global_devices(name)

    def own_dir(self, run_path: Path) -> Path:
        """Where this process keeps its own records and checkpoints: the run directory for
        process 0, ``processes/<k>`` in it for process ``k``."""
        return Path(run_path) if self.main else Path(run_path) / "processes" / str(self.process_id)

    def process_dirs(self, run_path: Path) -> list[Path]:
        """Every process's own directory (see :meth:`own_dir`), process 0's first."""
        return [
            ProcessGroup(k, self.num_processes).own_dir(run_path) for k in range(self.num_processes)
        ]

    def seed(self, seed: int) -> int:
        """The environments' seed of this process: the run's seed on process 0 (a one-process
        run is unchanged), seeded apart on the others."""
        return (seed + 1_000_003 * self.process_id) % 2**31


@dataclasses.dataclass(frozen=True)
class JoinRequest:
    """How to join a process group.

    Attributes:
      coordinator, num_processes, process_id: what is known (``None``: JAX detects it from
        the cluster's environment).
      detect: join even when none of them is given, from what JAX detects (``zoo train
        --distributed`` under SLURM, Open MPI, Kubernetes or on Cloud TPU).
    """

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    detect: bool = False

    @property
    def given(self) -> bool:
        """Whether to join a group at all."""
        known = (self.coordinator, self.num_processes, self.process_id)
        return self.detect or any(v is not None for v in known)


def requested(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    environ: Any = None,
    detect: bool = False,
) -> JoinRequest:
    """What to join: the values given, else the ``ZOO_*`` variables of ``environ`` (default:
    ``os.environ``; ``zoo train`` reads them, :func:`zoo.train` reads only its arguments).

    Raises:
      ValueError: a variable that is not a whole number.
    """
    environ = os.environ if environ is None else environ

    def number(value: Any, name: str) -> int | None:
        if value is None or value == "":
            return None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a whole number, got {value!r}") from None

    return JoinRequest(
        coordinator=coordinator or environ.get(ENV_COORDINATOR) or None,
        num_processes=number(
            num_processes if num_processes is not None else environ.get(ENV_NUM_PROCESSES),
            "--num-processes / " + ENV_NUM_PROCESSES,
        ),
        process_id=number(
            process_id if process_id is not None else environ.get(ENV_PROCESS_ID),
            "--process-id / " + ENV_PROCESS_ID,
        ),
        detect=detect,
    )


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
    return ProcessGroup.current()
