"""The local executor of ``zoo bench``: several runs at once in child processes, within the
machine's cores and memory.

**Admission** (:func:`admit`): a queued task starts only when, beside the tasks already
running, its CPU cores fit in the cores given to the bench, its planned peak memory fits in the
memory budget (by default :data:`zoo.runs.memory.SAFETY` × the memory available when the bench
starts), and fewer than ``--jobs`` tasks run. Tasks are taken in matrix order; one that does not
fit yet waits while later, smaller ones may start.

**Cores** (:func:`pin_plan`): where several tasks run at once, each child is pinned to the cores
it claims (``--cpus-per-run``, disjoint from the others', ``os.sched_setaffinity``) before it
starts JAX, so XLA:CPU sizes its thread pool to them and the runs do not fight over every core:
on the project's 2-core machine two DrQ(ε) runs pinned one core each do 1.43× the updates of one
run, where unpinned they do 1.06× (docs/performance.md). A lone task keeps every core.

Each task runs in a child process started with ``spawn`` (a fresh interpreter: JAX does not
survive ``fork``), its output appended to the task's log file. A task that fails is reported
with its error and log, and the others go on. Ctrl-C (SIGINT) or SIGTERM stops admitting
tasks and is passed to the running children, which save a checkpoint and stop as ``zoo train``
does; a second one ends them at once (they resume from their last checkpoint). A child whose bench
is gone (killed with SIGKILL, crashed) interrupts itself the same way, so no trainer outlives its
bench. Rerunning resumes.

The matrix's progress (done, running, queued, failed, ETA) follows ``--progress`` /
``ZOO_PROGRESS`` (:class:`zoo.runs.progress.ProgressMode`): a line redrawn in place on a terminal, a
line every 30 s in a log; every start, finish and failure is a line of its own.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar

from zoo.runs.progress import ProgressMode, format_duration
from zoo.runs.rundir import RunDir

__all__ = [
    "Job",
    "JobResult",
    "MatrixProgress",
    "admit",
    "default_jobs",
    "execute",
    "memory_budget",
    "pin_plan",
    "run_local",
]


class Job(Protocol):
    """What an executor runs: a task of :mod:`zoo.bench.plan` or any object of this form."""

    key: str
    memory: int
    cpus: int
    log_path: Path

    def run(self) -> Any:
        """Do the work (in a child process or a Ray worker); the value is sent back."""
        ...


J = TypeVar("J", bound=Job)


@dataclass
class JobResult:
    """How a job ended.

    Attributes:
      key: the job's key.
      state: ``done``, ``failed`` or ``interrupted`` (Ctrl-C; a run saves its checkpoint).
      value: what the job's ``run()`` returned (``done``, ``interrupted``), else ``None``.
      message: the error of a failed job (one line; the traceback is in the log).
      log_path: the job's log file.
      seconds: its wall time.
    """

    key: str
    state: str
    value: Any = None
    message: str = ""
    log_path: Path | None = None
    seconds: float = 0.0


def admit(
    pending: Sequence[J],
    running: Sequence[J],
    *,
    memory: int | None,
    cpus: int,
    jobs: int,
) -> list[J]:
    """The jobs of ``pending`` to start now, in order, beside ``running``.

    A job is admitted when, with the running jobs and those admitted before it, the number of
    jobs stays within ``jobs``, their cores within ``cpus`` and their planned peaks
    (``job.memory``) within ``memory`` (``None``: memory is not limited). A job that does not fit
    is passed over for later ones that do.
    """
    chosen: list[J] = []
    used_memory = sum(j.memory for j in running)
    used_cpus = sum(j.cpus for j in running)
    count = len(running)
    for job in pending:
        if count >= jobs:
            break
        if used_cpus + job.cpus > cpus:
            continue
        if memory is not None and used_memory + job.memory > memory:
            continue
        chosen.append(job)
        used_memory += job.memory
        used_cpus += job.cpus
        count += 1
    return chosen


def cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def affinity() -> list[int] | None:
    """The cores this process may run on, in order (``None`` where the platform cannot say or
    cannot pin: not Linux)."""
    if not hasattr(os, "sched_getaffinity") or not hasattr(os, "sched_setaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


def pin_plan(free: list[int] | None, claim: int, together: int) -> list[int] | None:
    """The cores to pin a task that claims ``claim`` of them to, taken from ``free`` (which
    loses them), when ``together`` tasks may run at once; ``None`` (not pinned) for a lone task,
    where the platform cannot pin, or where fewer than ``claim`` cores are free (the bench was
    given more cores than this process has: tasks then share them as unpinned ones do)."""
    if free is None or together < 2 or claim > len(free):
        return None
    chosen, free[:] = free[:claim], free[claim:]
    return chosen


def memory_budget() -> int | None:
    """The memory the bench may plan on: :data:`zoo.runs.memory.SAFETY` × the memory available now
    (``None`` where it cannot be read)."""
    from zoo.runs.memory import SAFETY, available_memory

    available = available_memory()
    return None if available is None else int(SAFETY * available)


def default_jobs(tasks: Sequence[Job], cpus: int | None = None, memory: int | None = None) -> int:
    """The default ``--jobs``: as many tasks as fit in the cores and (by the largest planned
    peak) in the memory budget; at least 1."""
    cpus = cores() if cpus is None else cpus
    widest = max((t.cpus for t in tasks), default=1)
    by_cpus = max(cpus // max(widest, 1), 1)
    largest = max((t.memory for t in tasks), default=0)
    by_memory = max(memory // largest, 1) if memory is not None and largest > 0 else by_cpus
    return max(min(by_cpus, by_memory), 1)


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2, so native libraries'
    output too) to ``path`` (appended), restoring them afterwards."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    # never through a link planted in a shared bench folder (docs/reliability.md)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in (fd, *saved):
            os.close(descriptor)


def _error_line(error: BaseException) -> str:
    """One line naming ``error``: zoo's own errors by their message, others with their type."""
    from zoo.matrix import TargetError
    from zoo.runs.rundir import RunError
    from zoo.spec import SpecError

    if isinstance(error, SpecError):
        return "; ".join(error.problems)
    if isinstance(error, RunError | TargetError):
        return str(error)
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def execute(job: Job) -> JobResult:
    """Run ``job`` here with its output appended to its log; never raises (but Ctrl-C before a
    run can checkpoint is reported as ``interrupted``). Used by both executors' workers."""
    import socket

    start = time.perf_counter()
    with _output_to(job.log_path):
        print(
            f"[zoo bench] {job.key}: started on {socket.gethostname()}, pid {os.getpid()}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
            flush=True,
        )
        try:
            value = job.run()
            state = "interrupted" if getattr(value, "interrupted", False) else "done"
            result = JobResult(job.key, state, value=value, log_path=job.log_path)
        except KeyboardInterrupt:
            result = JobResult(
                job.key,
                "interrupted",
                message="stopped by Ctrl-C (before a checkpoint, or between runs)",
                log_path=job.log_path,
            )
        except Exception as e:  # reported with the log's path; the others go on
            traceback.print_exc()
            result = JobResult(job.key, "failed", message=_error_line(e), log_path=job.log_path)
        result.seconds = time.perf_counter() - start
        print(f"[zoo bench] {job.key}: {result.state} {result.message}".rstrip(), flush=True)
    return result


def _watch_parent(parent: int, every: float = 1.0) -> None:
    """Interrupt this process (as Ctrl-C: ``zoo train`` saves a checkpoint and stops) once its
    parent ``parent`` is gone, so that a bench killed in any way leaves no trainer behind."""
    while os.getppid() == parent:
        time.sleep(every)
    os.kill(os.getpid(), signal.SIGINT)


#: The signals that stop a bench as Ctrl-C does (no new runs; the running ones checkpoint).
_STOPS = (signal.SIGINT, signal.SIGTERM)


def _child(job: Job, conn: Any, pinned: list[int] | None = None) -> None:
    """A child process: pin itself to ``pinned`` (before anything starts JAX), run the job,
    send the result, exit 0 (done), 130 or 1.

    A thread watches the bench: if it dies (SIGKILL, a crash) the run is interrupted as by
    Ctrl-C, saves a checkpoint and stops; a rerun resumes it.
    """
    import threading

    if pinned is not None:
        os.sched_setaffinity(0, pinned)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    result = execute(job)
    with contextlib.suppress(OSError, ValueError):
        conn.send(result)
        conn.close()
    sys.exit({"done": 0, "interrupted": 130}.get(result.state, 1))


def _last_env_steps(run_dir: Path) -> int | None:
    """The env steps of the last record in ``run_dir/metrics.jsonl`` (its tail only)."""
    import json

    path = RunDir(run_dir).metrics_file
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - 4096, 0))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("env_steps"), int):
                return record["env_steps"]
    return None


@dataclass
class MatrixProgress:
    """The matrix's progress on a stream: done, running, queued and failed tasks, and an ETA.

    Every start, finish and failure is a line; the status line follows ``mode``
    (:class:`zoo.runs.progress.ProgressMode`): redrawn in place (``bar``), every so many seconds, at
    every N% of the env steps to train, or never (``off``). The ETA is the time the env steps
    trained so far took, scaled to those left (read from each running run's
    ``metrics.jsonl``; runs without one count as not started).

    Args:
      tasks: every task of the matrix to run (finished ones excluded).
      stream: where to write (default stderr).
      mode: a :class:`ProgressMode`, its text, or ``None`` (``ZOO_PROGRESS``).
      running_word: what the status line calls started tasks (``running``).
    """

    tasks: Sequence[Any]
    stream: TextIO | None = None
    mode: ProgressMode | str | None = None
    running_word: str = "running"
    done: int = 0
    failed: int = 0
    running: set[str] = field(default_factory=set)
    _start: float = field(default_factory=time.perf_counter)
    _last: float = 0.0
    _next_percent: float = 0.0
    _drawn: bool = False

    def __post_init__(self) -> None:
        self.stream = self.stream or sys.stderr
        self.mode = ProgressMode.resolve(self.mode, self.stream)
        self._by_key = {t.key: t for t in self.tasks}
        self._final: dict[str, int] = {}
        self._total = sum(getattr(t, "steps_left", 0) for t in self.tasks)

    def event(self, text: str) -> None:
        """A line of its own (a start, finish or failure), above the redrawn status line."""
        self._clear()
        self._write(text + "\n")
        self.tick(force=self.mode.kind == "bar")

    def started(self, key: str, note: str = "") -> None:
        """Task ``key`` started (``note``: how, e.g. its cores)."""
        self.running.add(key)
        self.event(f"started {key}{note}")

    def ended(self, result: JobResult) -> None:
        self.running.discard(result.key)
        task = self._by_key.get(result.key)
        if task is not None:
            self._final[result.key] = getattr(task, "steps_left", 0)
        if result.state == "failed":
            self.failed += 1
            self.event(f"FAILED {result.key}: {result.message} (log: {result.log_path})")
        elif result.state == "interrupted":
            status = getattr(result.value, "status", None) or result.message
            self.event(f"interrupted {result.key}: {status}")
        else:
            self.done += 1
            status = getattr(result.value, "status", "done")
            self.event(f"finished {result.key}: {status} in {format_duration(result.seconds)}")

    def _trained(self) -> int:
        """Env steps trained so far by this invocation (finished tasks count whole)."""
        total = sum(self._final.values())
        for key in self.running:
            task = self._by_key.get(key)
            if task is None or not hasattr(task, "target"):
                continue
            now = _last_env_steps(task.target.path)
            if now is not None:
                total += min(max(now - (task.have or 0), 0), task.steps_left)
        return total

    def line(self) -> str:
        """``[ 40%] 2/5 done, 2 running, 1 queued, 0 failed  1m02s elapsed, ETA 1m30s``."""
        elapsed = time.perf_counter() - self._start
        trained = self._trained()
        share = trained / self._total if self._total else 0.0
        eta = elapsed * (self._total - trained) / trained if trained > 0 else math.nan
        queued = len(self.tasks) - len(self._final) - len(self.running)
        return (
            f"[{100 * share:3.0f}%] {self.done}/{len(self.tasks)} done, {len(self.running)} "
            f"{self.running_word}, {max(queued, 0)} queued, {self.failed} failed  "
            f"{format_duration(elapsed)} elapsed, ETA {format_duration(eta)}"
        )

    def tick(self, force: bool = False) -> None:
        """Show the status line if it is due."""
        mode = self.mode
        assert isinstance(mode, ProgressMode)
        now = time.perf_counter()
        if mode.kind == "off":
            return
        if mode.kind == "bar":
            if force or now - self._last >= 0.5:
                self._last = now
                self._write("\r" + self.line())
                self._drawn = True
            return
        if mode.kind == "seconds":
            due = now - self._last >= mode.value
        else:
            share = 100 * self._trained() / self._total if self._total else 100.0
            due = share >= self._next_percent
            if due:
                self._next_percent = (math.floor(share / mode.value) + 1) * mode.value
        if due or force:
            self._last = now
            self._write(self.line() + "\n")

    def close(self) -> None:
        """End the display with the final status line."""
        self._clear()
        if isinstance(self.mode, ProgressMode) and self.mode.kind != "off":
            self._write(self.line() + "\n")

    def _clear(self) -> None:
        if self._drawn:
            self._write("\r\033[K")
            self._drawn = False

    def _write(self, text: str) -> None:
        assert self.stream is not None
        self.stream.write(text)
        self.stream.flush()


@dataclass
class _Child:
    job: Any
    process: Any
    conn: Any
    started: float
    pinned: list[int] | None = None


def run_local(
    tasks: Sequence[J],
    *,
    jobs: int | None = None,
    memory: int | None = None,
    cpus: int | None = None,
    progress: ProgressMode | str | None = None,
    stream: TextIO | None = None,
    on_start: Callable[[J], None] | None = None,
) -> list[JobResult]:
    """Run ``tasks`` in child processes under the admission rule (:func:`admit`).

    Args:
      tasks: the jobs, in the order they are to start.
      jobs: the most tasks at once (default :func:`default_jobs`).
      memory: the memory budget in bytes (default :func:`memory_budget`).
      cpus: the cores the tasks may use together (default: this process's cores).
      progress: the status line's mode (default ``ZOO_PROGRESS``).
      stream: where progress goes (default stderr).
      on_start: called with each task as its child starts (tests use it).

    Returns:
      One :class:`JobResult` per task, in the order they ended; tasks never started because of
      Ctrl-C are not in it.
    """
    cpus = cores() if cpus is None else cpus
    memory = memory_budget() if memory is None else memory
    jobs = default_jobs(tasks, cpus, memory) if jobs is None else jobs
    context = multiprocessing.get_context("spawn")
    display = MatrixProgress(tasks, stream=stream, mode=progress)
    free = affinity()
    together = min(jobs, len(tasks))
    pending = list(tasks)
    running: dict[str, _Child] = {}
    results: list[JobResult] = []
    interrupts: list[int] = []

    def on_interrupt(signum: int, frame: Any) -> None:
        interrupts.append(signum)
        if len(interrupts) == 1:
            display.event(
                "interrupt: no new runs start; the running ones save a checkpoint and stop "
                "(Ctrl-C again to end them now; rerun the same command to resume)"
            )
            for child in running.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.process.pid, signal.SIGINT)
        else:
            for child in running.values():
                with contextlib.suppress(ProcessLookupError):
                    child.process.terminate()

    import threading

    main = threading.current_thread() is threading.main_thread()
    # SIGTERM (kill, a scheduler's stop) is a Ctrl-C: the runs save a checkpoint and stop
    previous = {s: signal.signal(s, on_interrupt) for s in _STOPS} if main else {}
    try:
        while pending or running:
            if not interrupts:
                for job in admit(
                    pending, [c.job for c in running.values()], memory=memory, cpus=cpus, jobs=jobs
                ):
                    pending.remove(job)
                    pinned = pin_plan(free, job.cpus, together)
                    receive, send = context.Pipe(duplex=False)
                    process = context.Process(
                        target=_child, args=(job, send, pinned), name=f"zoo-bench {job.key}"
                    )
                    process.start()
                    send.close()
                    running[job.key] = _Child(job, process, receive, time.perf_counter(), pinned)
                    display.started(
                        job.key, "" if pinned is None else f" on core(s) {_cores_text(pinned)}"
                    )
                    if on_start is not None:
                        on_start(job)
            elif not running:
                break
            if not running:  # nothing fits beside nothing: a job larger than the budget
                for job in pending:
                    results.append(
                        JobResult(
                            job.key,
                            "failed",
                            message="it needs more memory or cores than the bench has",
                            log_path=job.log_path,
                        )
                    )
                    display.ended(results[-1])
                pending.clear()
                break
            sentinels = {c.process.sentinel: key for key, c in running.items()}
            for ready in wait_for(list(sentinels), timeout=1.0):
                key = sentinels[ready]  # type: ignore[index]
                child = running.pop(key)
                if child.pinned is not None and free is not None:
                    free[:] = sorted([*free, *child.pinned])
                results.append(_collect(child))
                display.ended(results[-1])
            display.tick()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for child in running.values():  # only on an error of the executor itself
            child.process.terminate()
        display.close()
    return results


def _cores_text(cores: list[int]) -> str:
    return ",".join(map(str, cores))


def _collect(child: _Child) -> JobResult:
    """The result a finished child sent, or why it sent none (killed, out of memory)."""
    child.process.join()
    result = None
    with contextlib.suppress(EOFError, OSError):
        if child.conn.poll():
            result = child.conn.recv()
    child.conn.close()
    if isinstance(result, JobResult):
        return result
    code = child.process.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = f"its process was killed by {name}"
        if -code == signal.SIGKILL:
            why += " (out of memory, or killed by hand)"
    else:
        why = f"its process exited with status {code} without a result"
    return JobResult(
        child.job.key,
        "failed",
        message=why,
        log_path=child.job.log_path,
        seconds=time.perf_counter() - child.started,
    )
