"""The report of ``zoo bench``: per-game scores, aggregates with CIs, and plots.

:func:`collect` reads every run under ``ROOT/<algo>/<game-folder>/seed<k>`` (the layout of
``zoo reproduce`` and ``zoo bench``) through :func:`zoo.compare.load_run`; :func:`write_report`
writes ``bench.md``, ``bench.json`` and PNG plots.

**Which score of a run.** A run is *finished* when its training log reached its budget
(``total_env_steps`` of its ``run.yaml``); the algorithm's budget is the largest of its runs'.
The score of a finished run is the suite's statistic (:attr:`zoo.bench.suites.Suite.statistic`;
``evaluation`` without a suite). ``evaluation``: its greedy evaluation at the budget
(``eval.jsonl``: the mean return over the evaluation games,
:func:`zoo.compare.evaluation_statistic`). ``training``: the mean return of the training games
that ended in the window before the budget (:func:`zoo.compare.training_statistic`, with the
window of the preset's reference series, e.g. Dopamine's 1M-frame iteration, else 10% of the
budget), what MinAtar's papers report. A run without the suite's statistic (no evaluation at its
final step or one that finished no game; no training game in the window) falls back to the other.
Each run's statistic is in ``bench.json`` and the report counts the fallbacks. Unfinished,
unstarted and unreadable runs are listed, never silently dropped, and are left out of every number.

**Runs recorded by an earlier report** (``include``: its ``bench.json``) join the runs of the
folder, so that a benchmark made in several sessions or on several machines, whose run folders do
not all survive, is reported as one: each *finished* run recorded there (its score, statistic,
curve, rates and wall time as recorded) fills the place of an (algorithm, game, seed) the folder
has not finished; a run the folder has finished is kept and the recorded one named in the notes.
A recorded run is marked as such (``recorded``: the file) in ``bench.json`` and ``bench.md``.

**Aggregates** (:mod:`zoo.bench.stats`, Agarwal et al. 2021) are over the games on which every
algorithm has at least one finished run; an algorithm with fewer runs on some games keeps its
first k seeds on each (k = its fewest), and the report names the runs this leaves out. Published
per-run scores (Atari 100k: DrQ(ε), SPR; :mod:`zoo.bench.published`) join the aggregates only
where every run shares their protocol, statistic (evaluation) and budget; Dopamine's curves
(``dopamine_2018`` runs of presets that name them) appear per game at equal frames
(:func:`zoo.compare.compare`), as per-game means of 5 seeds (no per-run data, no interval).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from zoo import compare as compare_lib
from zoo.bench import stats
from zoo.bench.errors import BenchError
from zoo.bench.published import PublishedRuns, published
from zoo.bench.suites import STATISTICS, Suite, get_suite
from zoo.fileio import make_output_dir, save_figure, write_atomic
from zoo.runs.rundir import RunDir, RunSettingsError

__all__ = ["BenchData", "BenchRun", "collect", "write_report"]

_SEED = re.compile(r"^seed(\d+)$")

#: The normalisation of a protocol's environment family, for runs reported without a suite.
_NORMALISATION_OF_FAMILY = {"atari": "human", "minatar": "random_sigma", "classic": "return_range"}

#: Display names of :data:`zoo.bench.stats.METRICS`.
_METRIC_NAMES = {
    "iqm": "IQM",
    "median": "Median",
    "mean": "Mean",
    "optimality_gap": "Optimality gap",
}


@dataclass
class BenchRun:
    """One run of a benchmark (or the place where one should be).

    Attributes:
      algo: the algorithm folder (``ROOT/<algo>``).
      game: the environment id (from ``run.yaml``; the folder name where that is unreadable).
      seed: the seed (from the ``seed<k>`` folder).
      path: the run directory.
      status: ``finished``, ``unfinished`` (short of its budget, or no records yet),
        ``not started`` (no ``run.yaml``) or ``damaged`` (an unreadable ``run.yaml``).
      protocol, frame_skip: the run's protocol and its frames per agent step.
      env_steps: the last logged env step (transitions); ``budget_env_steps`` its budget.
      score: the run's final score (see the module docstring), ``None`` unless finished.
      statistic: ``evaluation`` or ``training``: what ``score`` is.
      curve: ``(frames, evaluation mean return)`` points.
      env_steps_per_s: the loop's rate in the run's last log record (env steps over the session's
        time since its loop started); ``updates_per_s`` the learner's, likewise.
      wall_s: the wall time of the run's sessions (from ``history.jsonl``: each start or resume
        to its stop).
      note: why a run is not finished, or how its score was read.
      recorded: the earlier report (``bench.json``) the run was read from; ``None`` for a run
        read from its own folder.
    """

    algo: str
    game: str
    seed: int
    path: Path
    status: str
    protocol: str | None = None
    frame_skip: int = 1
    env_steps: int = 0
    budget_env_steps: int | None = None
    score: float | None = None
    statistic: str | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)
    env_steps_per_s: float | None = None
    updates_per_s: float | None = None
    wall_s: float | None = None
    note: str = ""
    recorded: str | None = None


@dataclass
class BenchData:
    """Every run found under a benchmark folder, with per-game references where they exist.

    ``references[(algo, game)]`` holds the reference series value at the budget
    (:func:`zoo.compare.compare`'s row: ``series``, ``label``, ``statistic``, ``frames``,
    ``mean``, ``min``, ``max``).
    """

    root: Path
    runs: list[BenchRun]
    references: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def algorithms(self) -> list[str]:
        return list(dict.fromkeys(r.algo for r in self.runs))

    @property
    def games(self) -> list[str]:
        return list(dict.fromkeys(r.game for r in self.runs))

    def finished(self, algo: str, game: str) -> list[BenchRun]:
        """The finished runs of ``algo`` on ``game`` that have a score, in seed order."""
        return sorted(
            (
                r
                for r in self.runs
                if r.algo == algo
                and r.game == game
                and r.status == "finished"
                and r.score is not None
            ),
            key=lambda r: r.seed,
        )

    def missing(self) -> list[BenchRun]:
        """Runs that are not finished (unfinished, not started, damaged)."""
        return [r for r in self.runs if r.status != "finished" or r.score is None]


# ------------------------------------------------------------------------------ collect


def _wall_seconds(path: Path) -> float | None:
    from zoo.runs.rundir import read_history

    total, start = 0.0, None
    for event in read_history(path):
        try:
            when = datetime.fromisoformat(str(event["time"]))
        except (KeyError, ValueError):
            continue
        if event.get("event") in ("created", "resumed", "adopted"):
            start = when
        elif event.get("event") == "stopped" and start is not None:
            total += (when - start).total_seconds()
            start = None
    return total if total > 0 else None


def _settings(path: Path) -> dict[str, Any]:
    try:
        return RunDir(path).settings().model_dump()
    except RunSettingsError:
        return {}


def _read_run(algo: str, folder: str, seed: int, path: Path) -> BenchRun:
    run = BenchRun(algo=algo, game=folder, seed=seed, path=path, status="not started")
    if not RunDir(path).is_run():
        run.note = "no run.yaml: not started"
        return run
    settings = _settings(path)
    run.game = str(settings.get("env", folder))
    try:
        info = compare_lib.load_run(path)
    except compare_lib.CompareError as e:
        run.status = "damaged" if "damaged" in str(e) else "unfinished"
        run.note = str(e)
        return run
    run.protocol, run.frame_skip = info.protocol, info.frame_skip
    run.env_steps = info.final_env_steps
    budget = settings.get("total_env_steps")
    run.budget_env_steps = int(budget) if budget is not None else None
    run.curve = compare_lib.run_curve(info, "evaluation")
    rate = info.metrics[-1].get("env_steps_per_s")
    run.env_steps_per_s = float(rate) if rate is not None else None
    updates = info.metrics[-1].get("updates_per_s")
    run.updates_per_s = float(updates) if updates is not None else None
    run.wall_s = _wall_seconds(path)
    if run.budget_env_steps is not None and run.env_steps < run.budget_env_steps:
        run.status = "unfinished"
        run.note = f"at {run.env_steps:,} of {run.budget_env_steps:,} env steps"
    else:
        run.status = "finished"
    return run


def collect(
    root: str | Path,
    statistic: str = "evaluation",
    include: Sequence[str | Path] = (),
    suite: str | None = None,
) -> BenchData:
    """Every run under ``root/<algo>/<game-folder>/seed<k>``, with its final score, and the
    finished runs recorded in the reports ``include`` names (see the module docstring).

    The score of each finished run is ``statistic`` (``evaluation`` at the budget or the
    ``training`` statistic), else the other, as the module docstring says; runs of an algorithm
    are finished when they reached the largest budget among its runs. Reference series values at
    that budget (Dopamine's curves for the presets that name them) are read through
    :func:`zoo.compare.compare`.

    Raises:
      BenchError: ``root`` does not exist or holds no ``<algo>/<game>/seed<k>`` folder; a
        report of ``include`` is unreadable, of another suite than ``suite``, or scored by
        another statistic.
    """
    if statistic not in STATISTICS:
        raise BenchError(f"unknown statistic {statistic!r} (known: {', '.join(STATISTICS)})")
    root = Path(root)
    if not root.is_dir():
        raise BenchError(f"{root} is not a folder")
    runs: list[BenchRun] = []
    for algo_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for game_dir in sorted(p for p in algo_dir.iterdir() if p.is_dir()):
            for seed_dir in sorted(p for p in game_dir.iterdir() if p.is_dir()):
                match = _SEED.match(seed_dir.name)
                if match:
                    runs.append(_read_run(algo_dir.name, game_dir.name, int(match[1]), seed_dir))
    if not runs:
        raise BenchError(f"{root} holds no run (expected {root}/<algo>/<game>/seed<k>)")
    data = BenchData(root=root, runs=runs)
    for path in include:
        _include(data, Path(path), statistic, suite)
    _expect_every_seed(data)
    for algo in data.algorithms:
        _score_algorithm(data, algo, statistic)
    return data


#: what a run recorded in an earlier report must state to be carried into a new one
_RECORDED = {
    "algo": str,
    "game": str,
    "seed": int,
    "status": str,
    "protocol": str,
    "frame_skip": int,
    "env_steps": int,
    "budget_env_steps": int,
    "score": (int, float),
    "statistic": str,
    "curve": list,
    "path": str,
}


def _recorded_runs(path: Path, statistic: str, suite: str | None) -> list[BenchRun]:
    """The finished runs ``path`` (an earlier report's ``bench.json``) records, checked."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchError(f"--include {path}: not a readable report ({e})") from None
    if not isinstance(report, dict) or not isinstance(report.get("runs"), list):
        raise BenchError(f"--include {path}: not a zoo bench report (bench.json with its runs)")
    if suite is not None and report.get("suite") != suite:
        raise BenchError(
            f"--include {path}: a report of suite {report.get('suite')!r}, and this report is "
            f"of {suite!r}; include reports of the same suite"
        )
    runs = []
    for i, entry in enumerate(report["runs"]):
        if not isinstance(entry, dict) or entry.get("status") != "finished":
            continue  # unfinished runs are not carried: their folder is where they go on
        wrong = [
            key
            for key, kind in _RECORDED.items()
            if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool)
        ]
        if wrong:
            raise BenchError(
                f"--include {path}: run {i} lacks or mistypes {', '.join(wrong)}; include the "
                "bench.json a zoo bench report wrote, unedited"
            )
        if entry["statistic"] != statistic:
            raise BenchError(
                f"--include {path}: run {i} ({entry['algo']}, {entry['game']}, seed "
                f"{entry['seed']}) is scored by its {entry['statistic']} statistic and this "
                f"report by the {statistic} one"
            )
        curve = [(int(f), float(v)) for f, v in entry["curve"]]
        runs.append(
            BenchRun(
                algo=entry["algo"],
                game=entry["game"],
                seed=entry["seed"],
                path=Path(entry["path"]),
                status="finished",
                protocol=entry["protocol"],
                frame_skip=entry["frame_skip"],
                env_steps=entry["env_steps"],
                budget_env_steps=entry["budget_env_steps"],
                score=float(entry["score"]),
                statistic=entry["statistic"],
                curve=curve,
                env_steps_per_s=entry.get("env_steps_per_s"),
                updates_per_s=entry.get("updates_per_s"),
                wall_s=entry.get("wall_s"),
                note=f"recorded in {path}",
                recorded=str(path),
            )
        )
    return runs


def _include(data: BenchData, path: Path, statistic: str, suite: str | None) -> None:
    """Carry the finished runs recorded in ``path`` into ``data`` where the folder has not
    finished them (the folder's own unfinished or unstarted run of that place gives way)."""
    for run in _recorded_runs(path, statistic, suite):
        key = (run.algo, run.game, run.seed)
        same = [r for r in data.runs if (r.algo, r.game, r.seed) == key]
        if any(r.status == "finished" for r in same):
            data.notes.append(
                f"{run.algo} · {run.game} · seed {run.seed}: the folder's finished run is "
                f"reported, not the one recorded in {path}"
            )
            continue
        data.runs = [r for r in data.runs if r not in same] + [run]


def _expect_every_seed(data: BenchData) -> None:
    """A seed some (algo, game) has is expected of every (algo, game): absent ones are listed."""
    seeds = sorted({r.seed for r in data.runs})
    present = {(r.algo, r.path.parent.name, r.seed) for r in data.runs}
    folders = {(r.algo, r.path.parent.name): r for r in data.runs}
    for (algo, folder), example in sorted(folders.items()):
        for seed in seeds:
            if (algo, folder, seed) not in present:
                path = data.root / algo / folder / f"seed{seed}"
                data.runs.append(
                    BenchRun(
                        algo=algo,
                        game=example.game,
                        seed=seed,
                        path=path,
                        status="not started",
                        note="no folder: not started",
                    )
                )


def _score_algorithm(data: BenchData, algo: str, statistic: str) -> None:
    runs = [r for r in data.runs if r.algo == algo and r.status in ("finished", "unfinished")]
    budgets = [r.budget_env_steps for r in runs if r.budget_env_steps is not None]
    if not budgets:
        return
    budget = max(budgets)
    for run in runs:
        if run.status == "finished" and run.env_steps < budget:
            run.status = "unfinished"
            run.note = f"at {run.env_steps:,} env steps, short of its algorithm's {budget:,}"
    finished = [r for r in runs if r.status == "finished" and r.recorded is None]
    if not finished:  # recorded runs keep the score their report gave them
        return
    comparison = compare_lib.compare([r.path for r in finished], env_steps=budget)
    data.notes.extend(f"{algo}: {n}" for n in comparison.notes)
    by_path = {r.path: r for r in finished}
    for group in comparison.groups:
        rows = {row.statistic: row for row in group.rows if row.series is None}
        for row in group.rows:
            if row.series is not None and row.reference is not None:
                data.references[(algo, group.runs[0].env)] = {
                    "series": row.series,
                    "label": row.series_label,
                    "statistic": row.statistic,
                    "frames": row.frames,
                    "mean": row.reference["mean"],
                    "min": row.reference.get("min"),
                    "max": row.reference.get("max"),
                }
            rows.setdefault(row.statistic, row)
        order = sorted(STATISTICS, key=lambda name: name != statistic)  # the suite's first
        for i, info in enumerate(group.runs):
            run = by_path[info.path]
            for name in order:
                row = rows.get(name)
                value = row.values[i] if row is not None else None
                if value is not None:
                    run.score, run.statistic = value, name
                    break
            if run.statistic is None:
                run.note = "no evaluation at the budget and no training game in the window: none"
                continue
            how = "evaluation at the budget"
            if run.statistic == "training":
                how = f"training statistic (window {rows['training'].window_frames:,} frames)"
            if run.statistic != statistic:
                run.note = f"no {statistic} statistic at the budget: {how}"


# ------------------------------------------------------------------------------ report


@dataclass
class _Matrices:
    """What the aggregates are computed over."""

    games: list[str]
    normalisation: str
    raw: dict[str, np.ndarray]  # algo -> [runs, games] raw scores
    scores: dict[str, np.ndarray]  # normalised
    seeds: dict[str, list[int]]  # algo -> the seeds of the matrix rows, where ours
    notes: list[str]


def _normalisation(data: BenchData, suite: Suite | None) -> str:
    if suite is not None:
        return suite.normalisation
    from zoo.envs import get_protocol

    families = {get_protocol(r.protocol).suite for r in data.runs if r.protocol is not None}
    if len(families) != 1:
        raise BenchError(
            f"runs of several environment families ({', '.join(sorted(families)) or 'none'}): "
            "name a suite, or report each family's runs separately"
        )
    return _NORMALISATION_OF_FAMILY[families.pop()]


def _matrices(data: BenchData, suite: Suite | None) -> _Matrices:
    from zoo import reference as ref_lib

    normalisation = _normalisation(data, suite)
    notes: list[str] = []
    found = data.games
    if suite is not None:
        keys = {ref_lib.game_key(g): g for g in suite.games}
        outside = [g for g in found if ref_lib.game_key(g) not in keys]
        if outside:
            notes.append(f"runs of games outside suite {suite.name} are not aggregated: {outside}")
        by_key = {ref_lib.game_key(g): g for g in found}
        candidates = [by_key[k] for k in keys if k in by_key]
        absent = [g for k, g in keys.items() if k not in by_key]
        if absent:
            notes.append(
                f"suite {suite.name}: no run of {len(absent)} game(s): {', '.join(absent)}"
            )
    else:
        candidates = found
    games = []
    for game in candidates:
        lacking = [a for a in data.algorithms if not data.finished(a, game)]
        try:
            stats.anchors(normalisation, game)
        except BenchError as e:
            notes.append(f"{game} left out of the aggregates: {e}")
            continue
        if lacking:
            notes.append(
                f"{game} left out of the aggregates: no finished run of {', '.join(lacking)}"
            )
            continue
        games.append(game)
    raw, scores, seeds = {}, {}, {}
    if games:
        for algo in data.algorithms:
            per_game = {g: data.finished(algo, g) for g in games}
            k = min(len(v) for v in per_game.values())
            dropped = [f"{g} seed {r.seed}" for g, v in per_game.items() for r in v[k:]]
            if dropped:
                notes.append(
                    f"{algo}: {k} run(s) on every game in the aggregates (the lowest seeds); "
                    f"left out of them: {', '.join(dropped)}"
                )
            raw[algo] = np.array([[r.score for r in per_game[g][:k]] for g in games]).T
            scores[algo] = stats.normalise(
                {g: [r.score for r in per_game[g][:k]] for g in games},
                {g: stats.anchors(normalisation, g) for g in games},
                games=games,
            )
            seeds[algo] = [r.seed for r in per_game[games[0]][:k]]
    return _Matrices(games, normalisation, raw, scores, seeds, notes)


def _published(data: BenchData, suite: Suite | None, m: _Matrices) -> dict[str, np.ndarray]:
    """Published per-run matrices over the aggregated games, where they match our runs."""
    if suite is None or not m.games:
        return {}
    out = {}
    for item in published(suite.name):
        ours = [r for r in data.runs if r.score is not None and r.game in m.games]
        why = []
        if any(r.protocol != item.protocol for r in ours):
            why.append(f"protocol {item.protocol}")
        if any((r.budget_env_steps or 0) * r.frame_skip != item.frames for r in ours):
            why.append(f"budget {item.frames:,} frames")
        if any(r.statistic != item.statistic for r in ours):
            why.append(f"statistic {item.statistic}")
        if why:
            data.notes.append(
                f"{item.label} (published) not shown: our runs do not all share its "
                + ", ".join(why)
            )
            continue
        matrix = item.matrix(m.games)
        counts = item.runs(m.games)
        if min(counts) != max(counts):
            data.notes.append(
                f"{item.label} (published) has {min(counts)} to {max(counts)} runs per game; its "
                f"aggregates use the first {min(counts)} of each (each run is still placed among "
                "all of its game's)"
            )
        out[item.label] = matrix
        m.raw[item.label] = matrix
        m.scores[item.label] = stats.normalise(
            {g: matrix[:, j] for j, g in enumerate(m.games)},
            {g: stats.anchors(m.normalisation, g) for g in m.games},
            games=m.games,
        )
        if len(m.games) < len(suite.games):
            data.notes.append(
                f"{item.label} (published) is aggregated over the same {len(m.games)} games as "
                f"ours, not its {len(suite.games)}"
            )
    return out


def placements(
    data: BenchData, items: Sequence[PublishedRuns]
) -> list[tuple[BenchRun, str, stats.Placement]]:
    """Each finished run of ``data`` placed among each published algorithm's runs of its game
    (``(run, label, placement)``, in run order), for the items that have the game; the caller
    passes only items measured as the runs were (protocol, budget, statistic)."""
    out = []
    for run in sorted(data.runs, key=lambda r: (r.algo, r.game, r.seed)):
        if run.status != "finished" or run.score is None:
            continue
        for item in items:
            try:
                matrix = item.matrix([run.game])
            except BenchError:  # the published algorithm has no runs of this game
                continue
            out.append((run, item.label, stats.placement(run.score, matrix[:, 0])))
    return out


def _curves(data: BenchData, m: _Matrices) -> tuple[list[int], dict[str, np.ndarray]]:
    """Normalised evaluation curves ``[points, runs, games]`` at the frames every run has."""
    ours = [a for a in data.algorithms if a in m.seeds]
    runs = {
        (a, g, s): r
        for a in ours
        for g in m.games
        for r in data.finished(a, g)
        for s in [r.seed]
        if s in m.seeds[a]
    }
    if not runs:
        return [], {}
    common = set.intersection(*({f for f, _ in r.curve} for r in runs.values()))
    frames = sorted(common)
    if not frames:
        return [], {}
    curves = {}
    for a in ours:
        array = np.empty((len(frames), len(m.seeds[a]), len(m.games)))
        for j, g in enumerate(m.games):
            zero, one = stats.anchors(m.normalisation, g)
            for i, seed in enumerate(m.seeds[a]):
                points = dict(runs[(a, g, seed)].curve)
                array[:, i, j] = [(points[f] - zero) / (one - zero) for f in frames]
        curves[a] = array
    return frames, curves


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _per_game_cell(runs: Sequence[BenchRun]) -> str:
    if not runs:
        return "—"
    scores = [r.score for r in runs if r.score is not None]
    rates = [r.env_steps_per_s for r in runs if r.env_steps_per_s is not None]
    walls = [r.wall_s for r in runs if r.wall_s is not None]
    mean = _fmt(float(np.mean(scores)))
    text = f"{mean} [{_fmt(min(scores))}, {_fmt(max(scores))}] (n={len(scores)})"
    rate = f"{float(np.mean(rates)):,.0f}/s" if rates else "—"
    wall = _duration(float(np.mean(walls))) if walls else "—"
    return f"{text} · {rate} · {wall}"


def _verdicts(
    aggregates: Mapping[str, Mapping[str, stats.Interval]],
    poi: Mapping[tuple[str, str], stats.Interval],
    runs: Mapping[str, int],
) -> list[str]:
    """What the intervals support, pair by pair.

    The bootstrap is stratified by game (Agarwal et al. 2021): it resamples runs within each
    game, so an algorithm with one run per game gets zero-width intervals that would read as
    certainty. Such pairs are named as untested instead of compared.
    """
    lines = []
    names = list(aggregates)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            single = [x for x in (a, b) if runs[x] < 2]
            if single:
                lines.append(
                    f"{a} against {b}: {' and '.join(single)} "
                    f"{'has' if len(single) == 1 else 'have'} one run per game, so the "
                    "stratified bootstrap has nothing to resample and the intervals have zero "
                    "width: these runs support no comparison (run 2 or more seeds, e.g. --seeds 3)."
                )
                continue
            ia, ib = aggregates[a]["iqm"], aggregates[b]["iqm"]
            if ia.overlaps(ib):
                lines.append(
                    f"IQM: {a} {ia.point:.3f} [{ia.lo:.3f}, {ia.hi:.3f}] and {b} {ib.point:.3f} "
                    f"[{ib.lo:.3f}, {ib.hi:.3f}] overlap: these runs do not show which is better."
                )
            else:
                hi, lo = (a, b) if ia.point > ib.point else (b, a)
                lines.append(
                    f"IQM: the intervals of {a} and {b} do not overlap: {hi}'s IQM is above "
                    f"{lo}'s at 95% confidence."
                )
            p = poi.get((a, b))
            if p is None:
                continue
            if p.lo > 0.5 or p.hi < 0.5:
                better, worse, q = (a, b, p) if p.point > 0.5 else (b, a, poi[(b, a)])
                lines.append(
                    f"P({better} > {worse}) = {q.point:.3f} [{q.lo:.3f}, {q.hi:.3f}]: the interval "
                    f"excludes 0.5, so {better} improves on {worse} (Agarwal et al. 2021)."
                )
            else:
                lines.append(
                    f"P({a} > {b}) = {p.point:.3f} [{p.lo:.3f}, {p.hi:.3f}] contains 0.5: no "
                    "improvement either way is shown."
                )
    return lines


def _plots(
    out: Path,
    aggregates: Mapping[str, Mapping[str, stats.Interval]],
    profiles: Mapping[str, stats.Profile],
    poi: Mapping[tuple[str, str], stats.Interval],
    frames: list[int],
    efficiency: Mapping[str, list[stats.Interval]],
    xlabel: str,
) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    paths: dict[str, Path] = {}
    algos = list(aggregates)
    if algos:
        points = {a: np.array([aggregates[a][m].point for m in stats.METRICS]) for a in algos}
        cis = {
            a: np.array(
                [
                    [aggregates[a][m].lo for m in stats.METRICS],
                    [aggregates[a][m].hi for m in stats.METRICS],
                ]
            )
            for a in algos
        }
        fig, _ = plot_utils.plot_interval_estimates(
            points,
            cis,
            [_METRIC_NAMES[m] for m in stats.METRICS],
            algorithms=algos,
            xlabel=xlabel,
            max_ticks=3,
            row_height=0.6,
            xlabel_y_coordinate=-0.4,
        )
        paths["intervals"] = out / "intervals.png"
        save_figure(fig, paths["intervals"], dpi=100, bbox_inches="tight")
        plt.close(fig)
    if profiles:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        taus = next(iter(profiles.values())).taus
        plot_utils.plot_performance_profiles(
            {a: p.fraction for a, p in profiles.items()},
            taus,
            performance_profile_cis={a: (p.lo, p.hi) for a, p in profiles.items()},
            ax=ax,
            xlabel=rf"{xlabel} ($\tau$)",
        )
        _legend(ax, list(profiles), loc="upper right")
        paths["profiles"] = out / "profiles.png"
        save_figure(fig, paths["profiles"], dpi=100, bbox_inches="tight")
        plt.close(fig)
    pairs = [(a, b) for i, a in enumerate(algos) for b in algos[i + 1 :] if (a, b) in poi]
    if pairs:
        fig, ax = plt.subplots(figsize=(5, 0.6 + 0.5 * len(pairs)))
        plot_utils.plot_probability_of_improvement(
            {f"{a},{b}": np.array([poi[(a, b)].point]) for a, b in pairs},
            {f"{a},{b}": np.array([[poi[(a, b)].lo], [poi[(a, b)].hi]]) for a, b in pairs},
            ax=ax,
        )
        paths["improvement"] = out / "improvement.png"
        save_figure(fig, paths["improvement"], dpi=100, bbox_inches="tight")
        plt.close(fig)
    if frames and efficiency:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        scale = 1e6 if frames[-1] >= 1e6 else 1e3
        plot_utils.plot_sample_efficiency_curve(
            np.array(frames) / scale,
            {a: np.array([iv.point for iv in v]) for a, v in efficiency.items()},
            {
                a: np.array([[iv.lo for iv in v], [iv.hi for iv in v]])
                for a, v in efficiency.items()
            },
            algorithms=list(efficiency),
            ax=ax,
            xlabel=f"frames ({'millions' if scale == 1e6 else 'thousands'})",
            ylabel=f"IQM {xlabel.lower()}",
            labelsize="large",
            ticklabelsize="large",
        )
        _legend(ax, list(efficiency))
        paths["sample_efficiency"] = out / "sample_efficiency.png"
        save_figure(fig, paths["sample_efficiency"], dpi=100, bbox_inches="tight")
        plt.close(fig)
    return paths


def _game_curves_plot(
    out: Path, data: BenchData, placed: Sequence[tuple[BenchRun, str, stats.Placement]]
) -> Path | None:
    """One panel per game: each run's evaluation return against frames, and at the budget the
    published runs' 25th–75th percentile (bar), 5th–95th (whiskers) and median (dot) where
    they compare; ``game_curves.png``, or ``None`` where no run has a curve."""
    curves = [r for r in data.runs if r.curve]
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = list(dict.fromkeys(r.game for r in curves))
    columns = min(len(games), 4)
    rows = -(-len(games) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3 * rows), squeeze=False)
    colours = {a: f"C{i}" for i, a in enumerate(data.algorithms)}
    labels = list(dict.fromkeys(label for _, label, _ in placed))
    shades = {label: f"C{len(colours) + i}" for i, label in enumerate(labels)}
    for ax, game in zip(axes.flat, games, strict=False):
        for run in (r for r in curves if r.game == game):
            x, y = zip(*run.curve, strict=True)
            ax.plot(
                x, y, color=colours[run.algo], marker="o", ms=3, label=f"{run.algo} s{run.seed}"
            )
        shown = set()
        for run, label, where in placed:
            if run.game != game or label in shown:
                continue
            shown.add(label)
            at = (run.budget_env_steps or run.env_steps) * run.frame_skip
            q = where.quantiles
            ax.errorbar(
                [at],
                [q[50]],
                yerr=[[q[50] - q[5]], [q[95] - q[50]]],
                color=shades[label],
                capsize=4,
                fmt="o",
                label=f"{label} (published, p5–p50–p95)",
            )
            ax.vlines(at, q[25], q[75], color=shades[label], linewidth=6, alpha=0.5)
        ax.set_title(game, fontsize=10)
        ax.set_xlabel("frames")
        ax.set_ylabel("evaluation return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(games) :]:
        ax.set_visible(False)
    fig.tight_layout()
    path = out / "game_curves.png"
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


def _legend(ax: Any, algorithms: list[str], **kwargs: Any) -> None:
    """One legend entry per algorithm, from its line (the confidence bands are not entries)."""
    lines = ax.get_lines()
    by_label = {line.get_label(): line for line in lines}
    handles = [by_label.get(a, lines[i]) for i, a in enumerate(algorithms) if i < len(lines)]
    ax.legend(handles, algorithms[: len(handles)], fontsize=9, **kwargs)


_NORMALISED_LABEL = {
    "human": "Human-normalised score",
    "random_sigma": "Random-normalised score (σ of random play)",
    "return_range": "Return-range-normalised score",
}


def write_report(
    root: str | Path,
    out: str | Path | None = None,
    suite: str | None = None,
    reps: int = 50000,
    seed: int = 0,
    include: Sequence[str | Path] = (),
) -> dict[str, Path]:
    """Write the benchmark report of the runs under ``root`` (and those recorded in the earlier
    reports ``include`` names: see the module docstring).

    Args:
      root: the benchmark folder (``root/<algo>/<game-folder>/seed<k>``).
      out: where the files go (default ``root``).
      suite: the suite the runs belong to (its games, normalisation, published rows and, for
        ``atari5``, the predicted 57-game median); default: the games found, normalised by their
        protocol's family (human on Atari, random play on MinAtar, return range otherwise).
      reps: bootstrap resamples of the aggregate intervals (Agarwal et al. use 50,000); the
        probability of improvement, performance profiles and sample-efficiency curves use
        ``min(reps, 2000)``, rliable's default for them.
      seed: seeds the bootstrap.
      include: earlier reports (``bench.json``) whose finished runs join the folder's.

    Returns:
      ``{"md": bench.md, "json": bench.json, "intervals"|"profiles"|"improvement"|
      "sample_efficiency": PNG}`` (a plot is absent where there is nothing to draw).

    Raises:
      BenchError: ``root`` holds no run, or runs of several environment families without a suite.
    """
    root = Path(root)
    chosen = get_suite(suite) if suite is not None else None
    statistic = chosen.statistic if chosen is not None else "evaluation"
    # a folder that holds no run, or a report that cannot be included, is refused before any write
    data = collect(root, statistic, include, chosen.name if chosen is not None else None)
    out_dir = make_output_dir(out if out is not None else root)
    m = _matrices(data, chosen)
    _published(data, chosen, m)
    comparable = [p for p in (published(chosen.name) if chosen else ()) if p.label in m.scores]
    placed = placements(data, comparable)
    reproduced = {p.label: p.presets for p in comparable}
    small = min(reps, 2000)
    aggregates = stats.aggregate(m.scores, reps=reps, seed=seed) if m.games else {}
    poi = stats.probability_of_improvement(m.scores, reps=small, seed=seed) if m.games else {}
    profiles: dict[str, stats.Profile] = {}
    if m.games:
        top = max(float(np.max(s)) for s in m.scores.values())
        taus = np.linspace(
            min(0.0, min(float(np.min(s)) for s in m.scores.values())), max(top, 1.0), 41
        )
        profiles = stats.performance_profile(m.scores, taus, reps=small, seed=seed)
    frames, curves = _curves(data, m) if m.games else ([], {})
    efficiency = stats.sample_efficiency(curves, frames, reps=small, seed=seed) if frames else {}
    predicted: dict[str, float] = {}
    if chosen is not None and chosen.predictor_weights and m.normalisation == "human":
        for algo, matrix in m.scores.items():
            means = dict(zip(m.games, matrix.mean(axis=0), strict=True))
            try:
                predicted[algo] = stats.predicted_atari57_median(means, chosen.predictor_weights)
            except BenchError as e:
                data.notes.append(f"{algo}: no Atari-5 prediction ({e})")
    verdicts = _verdicts(aggregates, poi, {a: s.shape[0] for a, s in m.scores.items()})
    label = _NORMALISED_LABEL[m.normalisation]
    paths = _plots(out_dir, aggregates, profiles, poi, frames, efficiency, label)
    game_curves = _game_curves_plot(out_dir, data, placed)
    if game_curves is not None:
        paths["game_curves"] = game_curves
    fallbacks = [r for r in data.runs if r.statistic is not None and r.statistic != statistic]
    report = {
        "root": str(root),
        "suite": chosen.name if chosen else None,
        "normalisation": m.normalisation,
        "games": m.games,
        "reps": reps,
        "seed": seed,
        "runs": [
            {
                **{k: v for k, v in asdict(r).items() if k not in ("curve", "path")},
                "path": str(r.path),
            }
            | {"curve": [list(p) for p in r.curve]}
            for r in sorted(data.runs, key=lambda r: (r.algo, r.game, r.seed))
        ],
        "missing": [
            {"algo": r.algo, "game": r.game, "seed": r.seed, "status": r.status, "note": r.note}
            for r in data.missing()
        ],
        "matrix_seeds": m.seeds,
        "raw_scores": stats.to_jsonable(m.raw),
        "normalised_scores": stats.to_jsonable(m.scores),
        "aggregates": stats.to_jsonable(aggregates),
        "probability_of_improvement": stats.to_jsonable(poi),
        "performance_profiles": stats.to_jsonable(profiles),
        "sample_efficiency": {"frames": frames, "iqm": stats.to_jsonable(efficiency)},
        "predicted_atari57_median": predicted,
        "references": [
            {"algo": a, "game": g, **ref} for (a, g), ref in sorted(data.references.items())
        ],
        "published": {
            p.label: {"source": p.source, "protocol": p.protocol, "frames": p.frames}
            for p in (published(chosen.name) if chosen else ())
            if p.label in m.scores
        },
        "placements": [
            {
                "algo": run.algo,
                "game": run.game,
                "seed": run.seed,
                "published": label,
                "reproduces": run.algo in reproduced.get(label, ()),
                **where.to_dict(),
                "wall_s": run.wall_s,
                "env_steps_per_s": run.env_steps_per_s,
                "updates_per_s": run.updates_per_s,
            }
            for run, label, where in placed
        ],
        "verdicts": verdicts,
        "notes": [*m.notes, *data.notes],
    }
    paths["json"] = out_dir / "bench.json"
    write_atomic(paths["json"], json.dumps(report, indent=2, ensure_ascii=False))
    paths["md"] = out_dir / "bench.md"
    write_atomic(
        paths["md"],
        _markdown(
            data,
            chosen,
            m,
            aggregates,
            poi,
            predicted,
            verdicts,
            fallbacks,
            paths,
            reps,
            statistic,
            placed,
            reproduced,
        ),
    )
    return paths


def _markdown(
    data: BenchData,
    suite: Suite | None,
    m: _Matrices,
    aggregates: Mapping[str, Mapping[str, stats.Interval]],
    poi: Mapping[tuple[str, str], stats.Interval],
    predicted: Mapping[str, float],
    verdicts: list[str],
    fallbacks: list[BenchRun],
    paths: Mapping[str, Path],
    reps: int,
    statistic: str = "evaluation",
    placed: Sequence[tuple[BenchRun, str, stats.Placement]] = (),
    reproduces: Mapping[str, Sequence[str]] | None = None,
) -> str:
    reproduces = reproduces or {}
    title = f"zoo bench: {suite.name}" if suite else "zoo bench"
    lines = [f"# {title}", ""]
    if suite is not None:
        lines += [f"{suite.description}", "", f"Source: {suite.source}", ""]
    scored = {
        "evaluation": "its greedy evaluation at the budget (mean return of the evaluation games), "
        "else its training statistic (marked below)",
        "training": "its training statistic (mean return of the training games that ended in the "
        "window before the budget, as the suite's papers report), else its evaluation (marked "
        "below)",
    }[statistic]
    recorded: dict[str, list[BenchRun]] = {}
    for r in data.runs:
        if r.recorded is not None:
            recorded.setdefault(r.recorded, []).append(r)
    carried = "".join(
        f" Runs recorded in `{source}` by an earlier report (their folders are not here): "
        + ", ".join(f"{r.algo} · {r.game} · seed {r.seed}" for r in runs)
        + "."
        for source, runs in recorded.items()
    )
    lines += [
        f"Runs in `{data.root}`.{carried} Score of a run: {scored}. Normalisation: "
        f"`{m.normalisation}` ({_NORMALISED_LABEL[m.normalisation].lower()}; docs/bench.md).",
        "",
        "## Per game",
        "",
        "Raw score: mean [min, max] over seeds (n = finished runs) · env steps/s · wall time "
        "per run (means over the seeds).",
        "",
    ]
    algos = data.algorithms
    refs = sorted({(ref["series"], ref["label"]) for ref in data.references.values()})
    header = ["game", *algos, *(f"{s} (reference)" for s, _ in refs)]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for game in data.games:
        cells = [game, *(_per_game_cell(data.finished(a, game)) for a in algos)]
        for series, _ in refs:
            ref = next(
                (r for (a, g), r in data.references.items() if g == game and r["series"] == series),
                None,
            )
            if ref is None:
                cells.append("—")
            else:
                spread = (
                    f" [{_fmt(ref['min'])}, {_fmt(ref['max'])}]" if ref["min"] is not None else ""
                )
                cells.append(f"{_fmt(ref['mean'])}{spread} at {ref['frames']:,} frames")
        lines.append("| " + " | ".join(cells) + " |")
    if refs:
        lines += ["", "References: " + "; ".join(f"`{s}`: {label}" for s, label in refs) + "."]
    if fallbacks:
        lines += [
            "",
            f"{len(fallbacks)} run(s) scored by their other statistic (no {statistic} statistic "
            "at the budget): "
            + ", ".join(f"{r.algo} {r.game} seed {r.seed}" for r in fallbacks)
            + ".",
        ]
    if placed:
        lines += [
            "",
            "## Each run among the published runs of its game",
            "",
            "The run's raw score, the published runs' percentiles on the same game (their "
            "protocol and budget), the run's percentile rank among them (ties counted half), "
            "and the run's wall time and rates (env steps/s and updates/s of its last session).",
            "",
            "| algorithm | game | seed | score | published | "
            + " | ".join(f"p{q}" for q in stats.PLACEMENT_QUANTILES)
            + " | rank | wall | env steps/s | updates/s |",
            "|" + "---|" * (9 + len(stats.PLACEMENT_QUANTILES)),
        ]
        for run, label, where in placed:
            rate = lambda v: "—" if v is None else f"{v:.1f}"  # noqa: E731
            lines.append(
                f"| {run.algo} | {run.game} | {run.seed} | {_fmt(where.score)} | "
                f"{label} (n={where.runs}) | "
                + " | ".join(_fmt(where.quantiles[q]) for q in stats.PLACEMENT_QUANTILES)
                + f" | {where.rank:.0f} | {_duration(run.wall_s)} | "
                f"{rate(run.env_steps_per_s)} | {rate(run.updates_per_s)} |"
            )
        low = [
            (r, label, w)
            for r, label, w in placed
            if w.below_5th and r.algo in reproduces.get(label, ())
        ]
        pairs = ", ".join(
            f"{preset} of {label}" for label, presets in reproduces.items() for preset in presets
        )
        lines += [
            "",
            "Below the 5th percentile of the published runs of the algorithm a run reproduces "
            f"({pairs or 'no preset reproduces a published algorithm'}): "
            + (
                "; ".join(
                    f"{r.algo} {r.game} seed {r.seed} ({_fmt(w.score)} < {_fmt(w.quantiles[5])} "
                    f"of {label})"
                    for r, label, w in low
                )
                if low
                else "none."
            ),
        ]
    missing = data.missing()
    lines += ["", "## Runs not in the numbers", ""]
    if missing:
        lines += [
            f"- {r.algo} · {r.game} · seed {r.seed}: {r.status} ({r.note})"
            for r in sorted(missing, key=lambda r: (r.algo, r.game, r.seed))
        ]
    else:
        lines.append("None: every run is finished.")
    lines += ["", "## Aggregates", ""]
    if aggregates:
        lines += [
            f"Over {len(m.games)} game(s): {', '.join(m.games)}. Point estimate [95% stratified "
            f"bootstrap CI, {reps:,} resamples] (Agarwal et al. 2021, rliable). IQM: mean of the "
            "middle 50% of all runs × games; median and mean: over games of the per-game mean; "
            "optimality gap: 1 minus the mean score clipped at 1 (lower is better).",
            "",
            "| algorithm | runs × games | "
            + " | ".join(_METRIC_NAMES[x] for x in stats.METRICS)
            + " |",
            "|" + "---|" * (2 + len(stats.METRICS)),
        ]
        table = stats.interval_table(aggregates)
        for algo in aggregates:
            shape = m.scores[algo].shape
            name = algo if algo in algos else f"{algo} (published)"
            lines.append(
                f"| {name} | {shape[0]} × {shape[1]} | "
                + " | ".join(table[algo][x] for x in stats.METRICS)
                + " |"
            )
    else:
        lines.append("No game has a finished run of every algorithm: nothing to aggregate.")
    if predicted:
        lines += [
            "",
            "Atari-5 predicted 57-game median human-normalised score (Aitchison, Sweetser & "
            "Hutter 2023; from the per-game mean scores): "
            + ", ".join(f"{a} {v:.3f}" for a, v in predicted.items())
            + ".",
        ]
    if poi:
        names = list(aggregates)
        lines += [
            "",
            "## Probability of improvement",
            "",
            "P(row > column): the probability that a run of the row's algorithm beats a run of the "
            "column's on a random game, with its 95% CI.",
            "",
            "| | " + " | ".join(names) + " |",
            "|" + "---|" * (len(names) + 1),
        ]
        for a in names:
            cells = [
                "—"
                if a == b
                else f"{poi[(a, b)].point:.3f} [{poi[(a, b)].lo:.3f}, {poi[(a, b)].hi:.3f}]"
                for b in names
            ]
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    if verdicts:
        lines += ["", "## What the intervals support", "", *(f"- {v}" for v in verdicts)]
    notes = [*m.notes, *data.notes]
    if notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in notes)]
    plots = [
        k
        for k in ("intervals", "profiles", "improvement", "sample_efficiency", "game_curves")
        if k in paths
    ]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{k}]({paths[k].name})" for k in plots]
    return "\n".join(lines) + "\n"
