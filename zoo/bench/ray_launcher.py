"""``zoo bench --launcher ray``: the matrix's runs as tasks of a running Ray cluster.

Ray is an optional extra (``pip install 'zoo-rl[ray]'``). The bench connects to a cluster that
is already running (``ray.init(address=...)``, default ``auto``: the cluster this machine belongs
to; start one with ``ray start --head``, join nodes with ``ray start --address HEAD:PORT``), and
submits each run still to do as one task claiming what the run needs: ``num_cpus``,
``num_gpus`` and ``memory`` = its planned peak (:mod:`zoo.bench.plan`), so Ray places it on a
node with room. Each task runs :func:`zoo.bench.local.execute` (the local executor's worker),
writing its run and its log under the run directory: **that directory must be on a filesystem
every node reaches at the same path** (NFS, a cluster filesystem), and zoo must be installed on
every node.

Tasks are not retried by Ray (``max_retries=0``): a run whose worker or node died is reported
as failed, and rerunning the same command resumes it from its last checkpoint while the runs
that finished are reused, not submitted again (:mod:`zoo.matrix`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any, TextIO

from zoo.bench.errors import BenchError
from zoo.bench.local import JobResult, MatrixProgress, execute
from zoo.runs.progress import ProgressMode

__all__ = ["connect", "run_ray"]

START_HINT = (
    "start one on this machine with: ray start --head (then --ray-address auto), or name a "
    "running cluster's head with --ray-address HOST:PORT"
)


def connect(address: str = "auto") -> Any:
    """Connect to the Ray cluster at ``address``; the ``ray`` module.

    Raises:
      BenchError: Ray is not installed, or no cluster answers at ``address`` (with how to start
        one).
    """
    try:
        import ray
    except ImportError:
        raise BenchError(
            "--launcher ray needs Ray, which is not installed: pip install 'zoo-rl[ray]' (or "
            "pip install 'ray>=2.9,<3')"
        ) from None
    if ray.is_initialized():
        return ray
    _check_reachable(address)
    try:
        ray.init(
            address=address,
            logging_level=logging.WARNING,
            log_to_driver=False,
            configure_logging=True,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BenchError(
            f"no Ray cluster reachable at {address!r} ({first}); {START_HINT}"
        ) from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse at once a ``HOST:PORT`` where nothing listens (Ray itself retries for minutes)."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise BenchError(
            f"no Ray cluster reachable at {address!r} (nothing answers there: {e}); {START_HINT}"
        ) from None


def _ray_error(error: BaseException) -> str:
    """One line for a task that Ray reports failed (its worker or node died, it was
    cancelled)."""
    name = type(error).__name__
    text = [line for line in str(error).strip().splitlines() if line.strip()]
    return f"{name}: {text[0] if text else 'the task failed'}"


def run_ray(
    tasks: Sequence[Any],
    *,
    address: str = "auto",
    progress: ProgressMode | str | None = None,
    stream: TextIO | None = None,
) -> list[JobResult]:
    """Submit ``tasks`` to the Ray cluster at ``address`` and wait for them.

    Each task claims ``task.cpus`` CPUs, ``task.gpus`` GPUs and ``task.memory`` bytes; its output
    goes to ``task.log_path``. Ctrl-C cancels the tasks (Ray interrupts each run, which saves a
    checkpoint and stops as on Ctrl-C; rerunning resumes).

    Returns:
      One :class:`~zoo.bench.local.JobResult` per task, in the order they ended.

    Raises:
      BenchError: Ray is not installed or no cluster is reachable.
    """
    ray = connect(address)
    remote = ray.remote(execute)
    display = MatrixProgress(
        tasks, stream=stream, mode=progress, running_word="submitted (running or waiting)"
    )
    refs: dict[Any, Any] = {}
    for task in tasks:
        ref = remote.options(
            num_cpus=task.cpus,
            num_gpus=task.gpus,
            memory=max(int(task.memory), 1),
            max_retries=0,
            name=f"zoo-bench {task.key}",
        ).remote(task)
        refs[ref] = task
        display.running.add(task.key)
    display.event(f"submitted {len(tasks)} run(s) to the Ray cluster")
    results: list[JobResult] = []
    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=1.0)
            for ref in ready:
                task = refs.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as e:
                    result = JobResult(
                        task.key, "failed", message=_ray_error(e), log_path=task.log_path
                    )
                results.append(result)
                display.ended(result)
            display.tick()
    except KeyboardInterrupt:
        display.event("interrupt: cancelling the runs (each saves a checkpoint and stops)")
        for ref in refs:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        for ref, task in refs.items():
            try:
                result = ray.get(ref)
            except (ray.exceptions.RayError, KeyboardInterrupt) as e:
                result = JobResult(
                    task.key, "interrupted", message=_ray_error(e), log_path=task.log_path
                )
            results.append(result)
            display.ended(result)
    finally:
        display.close()
    return results
