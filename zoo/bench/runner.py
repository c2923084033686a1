"""``zoo bench SUITE ALGO...``: plan the matrix, run what is missing, write the report.

1. :func:`zoo.bench.plan.plan_bench` lists the runs and checks everything first;
2. runs that have reached the budget are reused at once (no process is started for them);
3. the others go to an executor: :func:`zoo.bench.local.run_local` (child processes on this
   machine, default) or :func:`zoo.bench.ray_launcher.run_ray` (a Ray cluster);
4. once no run failed or was interrupted, :func:`zoo.bench.report.write_report` writes
   ``bench.md``, ``bench.json`` and the plots into the run directory.

Rerunning the same command after an interruption, a failure or a lost node runs only what is
missing: finished runs are reused (their files untouched), partial ones resumed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.bench.errors import BenchError
from zoo.bench.local import JobResult
from zoo.bench.plan import BenchTask, plan_bench
from zoo.bench.suites import get_suite
from zoo.runs.progress import ProgressMode

__all__ = ["LAUNCHERS", "BenchResult", "bench", "summary", "write_report_for"]

#: The executors ``--launcher`` names.
LAUNCHERS = ("local", "ray")


@dataclass
class BenchResult:
    """What :func:`bench` did.

    Attributes:
      tasks: every run of the matrix.
      reused: keys of the runs already finished (not run again).
      results: how each run that was started ended.
      report: the report's files (empty when it was not written).
    """

    tasks: list[BenchTask]
    reused: list[str] = field(default_factory=list)
    results: list[JobResult] = field(default_factory=list)
    report: dict[str, Path] = field(default_factory=dict)

    @property
    def failed(self) -> list[JobResult]:
        return [r for r in self.results if r.state == "failed"]

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C stopped runs (or kept some from starting)."""
        started = {r.key for r in self.results}
        left = [t for t in self.tasks if t.key not in started and t.key not in self.reused]
        return any(r.state == "interrupted" for r in self.results) or bool(left)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def bench(
    suite: str,
    algorithms: Sequence[str],
    *,
    seeds: int = 1,
    frames: int | None = None,
    games: Sequence[str] | None = None,
    run_dir: str | os.PathLike[str] = "bench",
    jobs: int | None = None,
    launcher: str = "local",
    ray_address: str = "auto",
    overrides: Mapping[str, Any] | None = None,
    cpus_per_run: int = 1,
    gpus_per_run: float = 0.0,
    memory: int | None = None,
    progress: ProgressMode | str | None = None,
    reps: int = 50000,
    log: Callable[[str], None] = print,
    **settings: Any,
) -> BenchResult:
    """Train ``algorithms`` on ``suite``'s games × ``seeds`` and write the report.

    Args:
      suite: a suite name (``zoo bench --list-suites``).
      algorithms: presets or algorithms, named as in ``zoo reproduce``.
      seeds: seeds ``0 .. seeds-1``.
      frames: budget per run in frames (default: the suite's).
      games: a subset of the suite's games (default: all).
      run_dir: the folder of ``<algorithm>/<game>/seed<k>``, logs and report.
      jobs: the most runs at once (local; default from the cores and memory).
      launcher: ``local`` or ``ray``.
      ray_address: the Ray cluster (``auto``, ``HOST:PORT``, ``ray://...``).
      overrides: dotted overrides for new runs.
      cpus_per_run, gpus_per_run: what each run claims.
      memory: the local executor's memory budget in bytes (default: 0.9 × available now).
      progress: the matrix's progress mode (default ``ZOO_PROGRESS``); runs log theirs.
      reps: bootstrap resamples of the report's intervals.
      log: where status lines go.
      settings: settings of new runs by their names in :class:`zoo.runs.settings.RunSettings`
        (``eval_episodes``, ``eval_every``, ``eval_max_steps``, ``checkpoint_every``,
        ``num_envs``, ``loop``, ...), as :func:`zoo.runs.train` takes them.

    Raises:
      BenchError: an unknown suite or launcher, or anything :func:`plan_bench` refuses;
        nothing has run then.
    """
    if launcher not in LAUNCHERS:
        raise BenchError(f"unknown launcher {launcher!r}; use {' or '.join(LAUNCHERS)}")
    if jobs is not None and jobs < 1:
        raise BenchError(f"--jobs must be at least 1, not {jobs}")
    chosen = get_suite(suite)
    root = Path(run_dir)
    tasks = plan_bench(
        chosen,
        algorithms,
        seeds=seeds,
        root=root,
        frames=frames,
        games=games,
        overrides=overrides,
        settings=settings,
        cpus=cpus_per_run,
        gpus=gpus_per_run,
        log=log,
    )
    result = BenchResult(tasks=tasks)
    todo = [t for t in tasks if not t.finished]
    steps = tasks[0].target.env_steps
    log(
        f"bench {chosen.name} ({chosen.protocol}): {len(algorithms)} algorithm(s) × "
        f"{len({t.target.env for t in tasks})} game(s) × {seeds} seed(s) = {len(tasks)} runs at "
        f"{steps:,} agent steps each, in {root}; {len(tasks) - len(todo)} finished (reused), "
        f"{sum(1 for t in todo if t.have is not None)} to resume, "
        f"{sum(1 for t in todo if t.have is None)} to train"
    )
    for task in tasks:
        if task.finished:
            log(f"{task.target.path}: reused (finished at {task.have:,} env steps)")
            result.reused.append(task.key)
    if todo:
        if launcher == "ray":
            from zoo.bench.ray_launcher import run_ray

            log(
                f"launcher ray ({ray_address}): each run claims {cpus_per_run} CPU(s), "
                f"{gpus_per_run:g} GPU(s) and its planned peak memory (largest "
                f"{_gib(max(t.memory for t in todo))}); logs in {root / 'logs'}"
            )
            result.results = run_ray(todo, address=ray_address, progress=progress)
        else:
            from zoo.bench.local import (
                affinity,
                cores,
                default_jobs,
                memory_budget,
                pin_plan,
                run_local,
            )

            budget = memory_budget() if memory is None else memory
            cpus = cores()
            too_big = [t for t in todo if budget is not None and t.memory > budget]
            if too_big:
                raise BenchError(
                    f"{too_big[0].key} needs about {_gib(too_big[0].memory)} of memory but the "
                    f"bench may use {_gib(budget or 0)} (0.9 × available): free memory, lower "
                    "replay.capacity with --set, or use --launcher ray on larger nodes"
                )
            if cpus_per_run > cpus:
                raise BenchError(
                    f"--cpus-per-run {cpus_per_run} is more than the {cpus} core(s) here"
                )
            count = default_jobs(todo, cpus, budget) if jobs is None else jobs
            together = min(count, len(todo))
            if pin_plan(affinity(), cpus_per_run, together) is not None:  # as run_local pins
                cores_used = f"up to {count} runs at once on {cpus} core(s), {cpus_per_run} each"
                cores_used += " (pinned)"
            else:
                runs = "one run" if together < 2 else f"up to {count} runs"
                cores_used = f"{runs} at a time on all {cpus} core(s) (not pinned)"
            log(
                f"launcher local: {cores_used}, within "
                f"{_gib(budget) if budget is not None else 'unknown'} of memory (largest planned "
                f"peak {_gib(max(t.memory for t in todo))}); logs in {root / 'logs'}"
            )
            result.results = run_local(
                todo, jobs=count, memory=budget, cpus=cpus, progress=progress
            )
    if result.failed or result.interrupted:
        return result
    try:
        result.report = write_report_for(root, chosen.name, reps)
    except BenchError as e:
        log(f"note: no report written: {e}")
    return result


def write_report_for(root: Path, suite: str | None, reps: int = 50000) -> dict[str, Path]:
    """:func:`zoo.bench.report.write_report` of ``root`` (kept apart: it imports the
    statistics only when a report is written)."""
    from zoo.bench.report import write_report

    return write_report(root, suite=suite, reps=reps)


def summary(result: BenchResult) -> str:
    """The closing lines of ``zoo bench``: counts, failures with their logs, what to do."""
    done = sum(1 for r in result.results if r.state == "done")
    lines = [
        f"{len(result.tasks)} runs: {len(result.reused)} reused, {done} run to the budget, "
        f"{len(result.failed)} failed, "
        f"{len(result.tasks) - len(result.reused) - done - len(result.failed)} not finished"
    ]
    for r in result.failed:
        lines.append(f"failed {r.key}: {r.message} (log: {r.log_path})")
    if result.interrupted:
        lines.append("interrupted: rerun the same command to resume (finished runs are reused)")
    elif result.failed:
        lines.append(
            "the report is written once every run has finished: fix the cause and rerun the same "
            "command (finished runs are reused, partial ones resumed)"
        )
    return "\n".join(lines)
