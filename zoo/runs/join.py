"""Joining: the processes that train a run (one, or a group joined by ``jax.distributed``) and
the devices this process asks JAX for, both before JAX starts.

A one-process run is the group of one (:class:`zoo.runs.group.ProcessGroup`), so the rest of
the run job has one path; :func:`join_run` joins a group only when the request asks for one
(the Python API joins only when asked in its arguments; ``zoo train`` reads ``ZOO_*``). The
group of one of a run that asks for no devices of its own starts nothing: JAX is first
imported by :mod:`zoo.runs.distributed` where a group or an asynchronous run's devices need it,
else once the run is opened (a finished run is answered without it).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from zoo.runs import group as groups
from zoo.runs.errors import RunRefusedError
from zoo.runs.open import read_settings
from zoo.runs.request import TrainRequest
from zoo.runs.rundir import RunSettingsError

__all__ = ["ASYNC_CPU_DEVICES", "join_run"]

#: Virtual CPU devices an asynchronous run asks for on a CPU host: one to act, one to learn.
ASYNC_CPU_DEVICES = 2


def join_run(request: TrainRequest) -> groups.ProcessGroup:
    """The run's process group: joined when the request asks for several processes, else the
    group of one; this process's devices requested first (an asynchronous run on a CPU host gets
    an actor device and a learner device; a resume's driver is its own).

    Raises:
      RunRefusedError: a group asked for without a run directory, with ``--restart`` or with
        ``--loop compiled``; a request ``jax.distributed`` cannot join.
    """
    try:
        asked = groups.requested(
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
    devices = ASYNC_CPU_DEVICES if loop == "async" else None
    one = not asked.given or asked.num_processes == 1
    if one and devices is None:
        return groups.ProcessGroup()
    if not one:
        _check_several(request)
    from zoo.runs import distributed  # JAX starts here: the devices, then the group

    try:
        return distributed.start(asked, devices)
    except ValueError as e:
        raise RunRefusedError(str(e)) from None


def _check_several(request: TrainRequest) -> None:
    """What a run over several processes cannot be asked for."""
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
