"""Joining: the processes that train a run (one, or a group joined by ``jax.distributed``) and
the devices this process asks JAX for, both before JAX starts.

A one-process run is the group of one (:class:`zoo.runs.distributed.ProcessGroup`), so the rest
of the run job has one path; :func:`join_run` joins a group only when the request asks for one
(the Python API joins only when asked in its arguments; ``zoo train`` reads ``ZOO_*``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from zoo.drivers.asynchronous import request_cpu_devices
from zoo.runs import distributed
from zoo.runs.errors import RunRefusedError
from zoo.runs.open import read_settings
from zoo.runs.request import TrainRequest
from zoo.runs.rundir import RunSettingsError

__all__ = ["ASYNC_CPU_DEVICES", "join_run", "request_devices"]

#: Virtual CPU devices an asynchronous run asks for on a CPU host: one to act, one to learn.
ASYNC_CPU_DEVICES = 2


def request_devices(loop: str | None) -> None:
    """An asynchronous run on a CPU host gets an actor device and a learner device (before
    JAX starts; see :func:`zoo.drivers.asynchronous.request_cpu_devices`)."""
    if loop == "async":
        request_cpu_devices(ASYNC_CPU_DEVICES)


def join_run(request: TrainRequest) -> distributed.ProcessGroup:
    """The run's process group: joined when the request asks for several processes, else the
    group of one; this process's devices requested first (a resume's driver is its own).

    Raises:
      RunRefusedError: a group asked for without a run directory, with ``--restart`` or with
        ``--loop compiled``; a request ``jax.distributed`` cannot join.
    """
    try:
        asked = distributed.requested(
            request.coordinator,
            request.num_processes,
            request.process_id,
            environ={},
            detect=request.distributed,
        )
    except ValueError as e:
        raise RunRefusedError(str(e)) from None
    loop = request.loop
    if request.resume is not None and loop is None:
        with contextlib.suppress(RunSettingsError, RunRefusedError, OSError):
            loop = read_settings(Path(request.resume)).loop
    request_devices(loop)  # before JAX starts, as joining must be
    if not asked.given or asked.num_processes == 1:
        return distributed.ProcessGroup()
    if request.run_dir is None and request.resume is None:
        raise RunRefusedError(
            "a run over several processes needs --run-dir (every process must name the same "
            "directory; process 0 owns it)"
        )
    if request.restart:
        raise RunRefusedError(
            "--restart is for one process; a run over several that stopped before its first "
            "checkpoint is started again in a new --run-dir"
        )
    if request.loop == "compiled":
        raise RunRefusedError(
            "--loop compiled runs the update inside lax.scan, which a learner over several "
            "processes cannot; a run over several processes uses --loop host or async"
        )
    try:
        return distributed.join(asked)
    except ValueError as e:
        raise RunRefusedError(str(e)) from None
