"""The matrix of ``zoo bench``: one task per (algorithm, game, seed), planned before anything runs.

Each task knows its run directory (``ROOT/<algorithm>/<game>/seed<k>``, the layout of ``zoo
reproduce``), its environment, seed and budget, the state of its folder (new, partial or
finished: :func:`zoo.matrix.check_target`), the **planned peak memory** of its run
(:func:`zoo.runs.assemble.plan_memory`: replay + parameters +
:data:`zoo.runs.memory.RUN_OVERHEAD`) and the CPU cores and GPUs it claims. Executors
(:mod:`zoo.bench.local`, :mod:`zoo.bench.ray_launcher`) admit tasks by those figures.

An algorithm is named as in ``zoo reproduce``: a preset (``dqn_cartpole``, ``preset:c51``, a
preset file) brings its own settings and must use the suite's protocol; anything else (a
catalogue entry such as ``dqn``, ``mine.yaml:NAME``) is trained under the suite's protocol.
Everything is checked before any run starts: a preset of another protocol, an unknown game, a
budget below ``replay.min_size``, a run that cannot fit in memory or a folder holding another
run is refused with a :class:`~zoo.bench.errors.BenchError`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo import spec as spec_lib
from zoo.bench.errors import BenchError
from zoo.bench.suites import Suite
from zoo.matrix import (
    RunOutcome,
    RunTarget,
    TargetError,
    agent_steps,
    check_target,
    ensure_run,
    run_targets,
)
from zoo.runs.rundir import RunDir, safe_component

__all__ = ["BenchTask", "plan_bench"]

#: Where each run's output (its progress lines, errors and tracebacks) goes, under the root.
LOGS = "logs"


@dataclass(frozen=True)
class BenchTask:
    """One run of the matrix and what it needs.

    Attributes:
      key: ``<algorithm>/<game>/seed<k>``, its path under the root.
      target: the run (:class:`zoo.matrix.RunTarget`).
      memory: its planned peak resident memory in bytes.
      cpus: CPU cores it claims.
      gpus: GPUs it claims (a Ray resource; the local executor does not place devices).
      log_path: the file its output is appended to (``ROOT/logs/<key>.log``).
      have: env steps of its newest checkpoint when planned (``None``: none).
    """

    key: str
    target: RunTarget
    memory: int
    cpus: int = 1
    gpus: float = 0.0
    log_path: Path = Path(os.devnull)
    have: int | None = None

    @property
    def finished(self) -> bool:
        """Whether the run had reached its budget when planned (it is reused, not run)."""
        return self.have is not None and self.have >= self.target.env_steps

    @property
    def steps_left(self) -> int:
        """Env steps left to train, as planned."""
        return max(self.target.env_steps - (self.have or 0), 0)

    def run(self) -> RunOutcome:
        """Make the run (:func:`zoo.matrix.ensure_run`); what an executor's worker calls."""
        return ensure_run(self.target, progress=True)


def _identify(ref: str, protocol: str) -> tuple[str, str, str | None]:
    """``(what train() is given, the folder name, the preset's name or None)`` of ``ref``,
    refusing a preset whose protocol is not the suite's."""
    if spec_lib.is_preset(ref):
        preset = spec_lib.load_preset(ref)
        if preset.env.protocol != protocol:
            raise BenchError(
                f"preset {preset.name!r} runs under protocol {preset.env.protocol!r}, not the "
                f"suite's {protocol!r}: its results would not be comparable. Name a preset of "
                f"protocol {protocol!r}, or its catalogue entry ({preset.algorithm!r}), which "
                "trains under the suite's protocol"
            )
        return ref, safe_component(preset.name, fallback="preset"), preset.name
    name = spec_lib.load_algorithm(ref).name
    return ref, safe_component(name, fallback="algorithm"), None


def plan_bench(
    suite: Suite,
    algorithms: Sequence[str],
    *,
    seeds: int,
    root: str | os.PathLike[str],
    frames: int | None = None,
    games: Sequence[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    cpus: int = 1,
    gpus: float = 0.0,
    log: Callable[[str], None] = print,
) -> list[BenchTask]:
    """The tasks of ``algorithms`` × the suite's games × ``seeds`` under ``root``, checked.

    Args:
      suite: the suite (:func:`zoo.bench.suites.get_suite`): its games, protocol and budget.
      algorithms: presets or algorithms, named as in ``zoo reproduce``.
      seeds: seeds ``0 .. seeds-1``.
      root: the folder holding ``<algorithm>/<game>/seed<k>``.
      frames: budget per run in frames (default: the suite's); agent steps = frames / skip.
      games: a subset of the suite's games (default: all of them).
      overrides: dotted overrides for new runs (``--set``); resumed runs keep their own spec.
      settings: settings of new runs by their names in
        :class:`zoo.runs.settings.RunSettings`, as :func:`zoo.runs.train` takes them.
      cpus, gpus: what each run claims.
      log: where notes go.

    Returns:
      One :class:`BenchTask` per run, seed-major, then in the suite's game order, then the
      algorithms in the order given.

    Raises:
      BenchError: anything that would stop a run, found before any starts (see the module).
    """
    from zoo.envs import get_protocol
    from zoo.runs import RunRefusedError
    from zoo.runs.assemble import plan_memory

    if seeds < 1:
        raise BenchError(f"--seeds must be at least 1, not {seeds}")
    if not algorithms:
        raise BenchError("name at least one algorithm or preset (zoo list, zoo list presets)")
    if len(set(algorithms)) != len(algorithms):
        twice = sorted({a for a in algorithms if list(algorithms).count(a) > 1})
        raise BenchError(f"{', '.join(twice)} named twice; name each algorithm once")
    if cpus < 1:
        raise BenchError(f"--cpus-per-run must be at least 1, not {cpus}")
    if gpus < 0:
        raise BenchError(f"--gpus-per-run must not be negative, got {gpus}")
    skip = get_protocol(suite.protocol).frame_skip
    frames = suite.frames if frames is None else frames
    try:
        steps = agent_steps(frames, skip, log)
    except ValueError as e:
        raise BenchError(str(e)) from None
    chosen = list(suite.games)
    if games:
        unknown = [g for g in games if g not in suite.games]
        if unknown:
            raise BenchError(
                f"--games: {', '.join(unknown)} not in suite {suite.name!r} (its games: "
                f"{', '.join(suite.games)})"
            )
        chosen = [g for g in suite.games if g in games]
    root = Path(root)
    identified = {ref: _identify(ref, suite.protocol) for ref in algorithms}
    folders: dict[str, str] = {}
    for ref, (_, folder, _) in identified.items():
        if folder in folders:
            raise BenchError(
                f"{folders[folder]} and {ref} would both write into {root / folder}; bench "
                "them into separate --run-dir folders"
            )
        folders[folder] = ref
    tasks: list[BenchTask] = []
    planned: dict[tuple[str, str], int] = {}
    for train_ref, folder, preset in identified.values():
        targets = run_targets(
            root,
            folder,
            train_ref,
            chosen,
            seeds,
            steps,
            preset=preset,
            protocol=suite.protocol,
            overrides=overrides,
            settings=settings,
        )
        for target in targets:
            game, key = target.env, target.path.relative_to(root).as_posix()
            try:
                have = check_target(target)
                if RunDir(target.path).is_run():
                    memory = plan_memory(resume=target.path).peak
                else:
                    if (train_ref, game) not in planned:
                        planned[train_ref, game] = plan_memory(
                            train_ref,
                            game,
                            overrides=overrides,
                            total_env_steps=steps,
                            protocol=suite.protocol,
                            num_envs=target.settings.get("num_envs"),
                        ).peak
                    memory = planned[train_ref, game]
            except (TargetError, RunRefusedError) as e:
                raise BenchError(f"{key}: {e}") from None
            tasks.append(
                BenchTask(
                    key=key,
                    target=target,
                    memory=memory,
                    cpus=cpus,
                    gpus=gpus,
                    log_path=root / LOGS / f"{key}.log",
                    have=have,
                )
            )
    # seed-major, then the suite's game order, then the algorithms as given: a benchmark stopped
    # part-way holds every algorithm on the same games and seeds, so its partial report compares
    # like with like (sorted() is stable, so the algorithms keep their order within a cell)
    rank = {game: i for i, game in enumerate(chosen)}
    return sorted(tasks, key=lambda task: (task.target.seed, rank[task.target.env]))
