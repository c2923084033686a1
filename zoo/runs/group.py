"""The processes that train one run, without JAX: the group of one, and what a request asks
to join.

A one-process run is the group of one (:class:`ProcessGroup`): its collectives are the values
themselves, so the run job has one path for one process and for several. A group of several is
joined by :func:`zoo.runs.distributed.join` (``jax.distributed``), whose group runs the
collectives across its processes. Nothing here imports JAX, so a run can be opened (and a
finished one answered) before JAX starts.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_COORDINATOR",
    "ENV_NUM_PROCESSES",
    "ENV_PROCESS_ID",
    "JoinRequest",
    "ProcessGroup",
    "requested",
]

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
        self._alone("any")
        return bool(flag)

    def broadcast(self, value: float | int) -> float:
        """Process 0's ``value`` on every process (a collective)."""
        self._alone("broadcast")
        return float(value)

    def barrier(self, name: str) -> None:
        """Wait until every process reaches the barrier ``name``."""
        self._alone("barrier")

    def _alone(self, collective: str) -> None:
        if self.several:
            raise TypeError(
                f"{collective} of a group of {self.num_processes} processes needs the group "
                "joined by zoo.runs.distributed.join, not a ProcessGroup made by hand"
            )

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
