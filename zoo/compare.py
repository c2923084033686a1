"""Compare runs with reference series: what ``zoo compare`` and ``zoo reproduce`` print and write.

Runs are grouped by (preset or algorithm, environment, protocol); each group is summarised at one
budget (the smallest final budget of its seeds, or the budget ``zoo reproduce`` trained to) with the
statistic each reference series reports:

- ``evaluation``: the run's greedy evaluation at that budget (``eval.jsonl``, mean return over the
  evaluation games under the run's protocol);
- ``training``: the mean return of the training games that finished in the last
  ``window`` transitions before the budget (``metrics.jsonl``: each record carries the mean return
  of the games finished since the previous record and the running game count, so the window is the
  log records ending in (budget - window, budget], weighted by their games). The window is the
  series' own (Dopamine: one iteration of 1M frames = 250k agent steps; CleanRL CartPole: the last
  50k steps), or 10% of the budget when no series says.

Per group the table gives our mean over seeds with its [min, max], the reference at the same frame
budget (a lookup only answers at a budget the series has), human-normalised scores for Atari games,
and whether our mean lies inside the reference's seed range. A series of another protocol is
refused (:class:`zoo.reference.ProtocolMismatchError`). The plot shows each seed's curve, their
mean and the reference curve (with its seed range) per group.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from zoo import reference as ref_lib
from zoo.reference import Series
from zoo.runs.rundir import RunDir, RunSettingsError

__all__ = [
    "Comparison",
    "Group",
    "Row",
    "RunInfo",
    "compare",
    "find_runs",
    "format_table",
    "load_run",
    "record_series",
    "run_curve",
    "training_statistic",
    "write_outputs",
]

#: Default training-statistic window when no series gives one: this fraction of the budget.
DEFAULT_WINDOW_FRACTION = 0.1


class CompareError(ValueError):
    """Runs that cannot be compared (not run directories, nothing logged); the message says why."""


@dataclass(frozen=True)
class RunInfo:
    """What a comparison needs of one run directory."""

    path: Path
    name: str  # preset, else algorithm
    preset: str | None
    env: str
    protocol: str
    seed: int
    frame_skip: int
    final_env_steps: int
    metrics: list[dict[str, Any]] = field(repr=False)
    evals: list[dict[str, Any]] = field(repr=False)
    budget: int | None = None  # run.yaml's total_env_steps

    @property
    def finished(self) -> bool:
        """Whether the run reached its budget (or stopped early at ``--stop-at-return``: its
        history's ``stopped`` record says ``finished``)."""
        return self.budget is None or self.final_env_steps >= self.budget or self._stopped_done

    @property
    def _stopped_done(self) -> bool:
        events = RunDir(self.path).history()
        last = next((e for e in reversed(events) if e.get("event") == "stopped"), None)
        return last is not None and last.get("status") == "finished"


def load_run(path: str | os.PathLike[str]) -> RunInfo:
    """Read a run directory's settings and records (no JAX needed).

    Raises:
      CompareError: ``path`` is not a run, its ``run.yaml`` is damaged, or it has no training
        records yet (a run stopped before its first log).
    """
    from zoo.envs import UnknownProtocolError, get_protocol

    run = RunDir(path)
    try:
        settings = run.settings()
        frame_skip = get_protocol(settings.protocol).frame_skip
    except (RunSettingsError, UnknownProtocolError) as e:
        raise CompareError(str(e)) from None
    path = run.path
    preset = settings.preset
    name = preset or Path(settings.algorithm).stem
    env, protocol, seed = settings.env, settings.protocol, settings.seed
    metrics = run.metrics()
    evals = run.evals()
    if not metrics:
        raise CompareError(f"{path} has no training records yet (metrics.jsonl is empty)")
    return RunInfo(
        path=path,
        name=name,
        preset=preset,
        env=env,
        protocol=protocol,
        seed=seed,
        frame_skip=frame_skip,
        final_env_steps=int(metrics[-1]["env_steps"]),
        metrics=metrics,
        evals=evals,
        budget=settings.total_env_steps,
    )


def _number(value: Any) -> float | None:
    """A finite float, or ``None`` (a null, a legacy "nan" string, anything else)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def find_runs(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Run directories among ``paths``: each path itself, or the runs found below it."""
    found: list[Path] = []
    for p in map(Path, paths):
        if RunDir(p).is_run():
            found.append(p)
        elif p.is_dir():
            below = sorted(q.parent for q in p.rglob(RunDir.SETTINGS))
            if not below:
                raise CompareError(f"{p} holds no zoo run directory (no run.yaml below it)")
            found.extend(below)
        else:
            raise CompareError(f"{p} does not exist")
    return list(dict.fromkeys(found))


def training_statistic(
    metrics: Sequence[dict[str, Any]], end_steps: int, window_steps: int
) -> tuple[float | None, int]:
    """Mean return of the training games finished in the log records ending in
    ``(end_steps - window_steps, end_steps]``, and how many games that is."""
    total, games, previous = 0.0, 0, 0
    for record in metrics:
        count = int(record.get("games", previous)) - previous
        previous = int(record.get("games", previous))
        steps = int(record["env_steps"])
        value = _number(record.get("return"))
        if end_steps - window_steps < steps <= end_steps and count > 0 and value is not None:
            total += value * count
            games += count
    return (total / games if games else None), games


def evaluation_statistic(
    evals: Sequence[dict[str, Any]], end_steps: int
) -> tuple[float | None, int | None]:
    """The greedy evaluation at ``end_steps`` (or the last one before it) and its env steps;
    the value is ``None`` where that evaluation finished no game."""
    before = [e for e in evals if int(e["env_steps"]) <= end_steps]
    if not before:
        return None, None
    last = before[-1]
    return _number(last.get("mean_return")), int(last["env_steps"])


@dataclass
class Row:
    """One line of the table: a group of runs against one reference series (or none)."""

    name: str
    env: str
    protocol: str
    statistic: str
    frames: int
    env_steps: int
    seeds: list[int]
    values: list[float | None]
    mean: float | None
    min: float | None
    max: float | None
    window_frames: int | None = None
    series: str | None = None
    series_label: str | None = None
    series_kind: str | None = None
    reference: dict[str, Any] | None = None
    hns: float | None = None
    reference_hns: float | None = None
    inside: bool | None = None
    range_kind: str | None = None
    note: str = ""
    unfinished: list[int] = field(default_factory=list)  # seeds stopped before their budget


@dataclass
class Group:
    """Runs of one (preset or algorithm, environment, protocol) and their rows."""

    name: str
    env: str
    protocol: str
    runs: list[RunInfo]
    env_steps: int
    rows: list[Row] = field(default_factory=list)
    series: list[Series] = field(default_factory=list, repr=False)


@dataclass
class Comparison:
    """The result of :func:`compare`."""

    groups: list[Group]
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return [row for group in self.groups for row in group.rows]

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": [asdict(row) for row in self.rows],
            "runs": [
                {"path": str(r.path), "name": r.name, "env": r.env, "seed": r.seed}
                for g in self.groups
                for r in g.runs
            ],
            "notes": self.notes,
        }


def _series_for(run: RunInfo, explicit: Series | None) -> tuple[list[Series], list[str]]:
    """The series a group is compared with: the explicit one (checked), else its preset's."""
    if explicit is not None:
        ref_lib.check_protocol(explicit, run.protocol)
        return [explicit], []
    if run.preset is None:
        return [], []
    from zoo import spec as spec_lib

    try:
        preset = spec_lib.load_preset(run.preset)
    except spec_lib.SpecError:
        return [], [f"preset {run.preset} of {run.path} is not shipped; no reference series"]
    chosen, notes = [], []
    for series_id in preset.reference.series:
        try:
            series = ref_lib.load_series(series_id)
        except ref_lib.UnknownSeriesError as e:
            notes.append(f"preset {run.preset}: {e}")
            continue
        if series.protocol != run.protocol:
            notes.append(
                f"{series_id} skipped: protocol {series.protocol} differs from the runs' "
                f"{run.protocol}"
            )
            continue
        chosen.append(series)
    return chosen, notes


def _summary(values: list[float | None]) -> tuple[float | None, float | None, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return None, None, None
    return sum(known) / len(known), min(known), max(known)


def _row(group: Group, statistic: str, series: Series | None) -> Row:
    runs, steps = group.runs, group.env_steps
    frame_skip = runs[0].frame_skip
    frames = steps * frame_skip
    window_frames = None
    values: list[float | None] = []
    notes = []
    if statistic == "training":
        window_frames = (series.window_frames if series and series.window_frames else None) or max(
            int(frames * DEFAULT_WINDOW_FRACTION), frame_skip
        )
        window_steps = max(window_frames // frame_skip, 1)
        for run in runs:
            value, _games = training_statistic(run.metrics, steps, window_steps)
            values.append(value)
            if value is None:
                notes.append(f"seed {run.seed}: no training game finished in the window")
    else:
        for run in runs:
            value, at = evaluation_statistic(run.evals, steps)
            values.append(value)
            if at is None:
                notes.append(f"seed {run.seed}: no evaluation by {steps:,} env steps")
            elif value is None:
                notes.append(
                    f"seed {run.seed}: the evaluation at {at:,} env steps finished no game"
                )
            elif at != steps:
                notes.append(f"seed {run.seed}: evaluation at {at:,} env steps")
    mean, lo, hi = _summary(values)
    row = Row(
        name=group.name,
        env=group.env,
        protocol=group.protocol,
        statistic=statistic,
        frames=frames,
        env_steps=steps,
        seeds=[r.seed for r in runs],
        values=values,
        mean=mean,
        min=lo,
        max=hi,
        window_frames=window_frames,
        unfinished=[r.seed for r in runs if not r.finished],
    )
    if mean is not None:
        row.hns = ref_lib.human_normalized(group.env, mean)
    if series is not None:
        row.series, row.series_label, row.series_kind = series.id, series.label, series.kind_label
        try:
            point = series.value_at(group.env, frames)
        except ref_lib.ReferenceLookupError as e:
            notes.append(str(e))
        else:
            row.reference = asdict(point)
            row.reference_hns = ref_lib.human_normalized(group.env, point.mean)
            row.range_kind = point.range_kind
            if point.range is not None and mean is not None:
                row.inside = point.range[0] <= mean <= point.range[1]
            if point.tag == "R":
                notes.append(f"{series.id} value for {group.env} is recalled [R], not checked")
    row.note = "; ".join(notes)
    return row


def compare(
    run_dirs: Iterable[str | os.PathLike[str]],
    *,
    reference: str | os.PathLike[str] | None = None,
    env_steps: int | None = None,
) -> Comparison:
    """Compare runs with reference series.

    Args:
      run_dirs: run directories, or folders holding them (searched recursively).
      reference: a series id or series file to compare with; default: each preset's
        ``reference.series`` of the runs' protocol.
      env_steps: the budget to compare at (transitions); default: each group's smallest final
        budget over its seeds.

    Raises:
      CompareError: a path is not a run, or a run has no records.
      zoo.reference.ProtocolMismatchError: ``reference`` has another protocol than some runs.
      zoo.reference.UnknownSeriesError: ``reference`` is not a known series.
    """
    runs, skipped = [], []
    for path in find_runs(run_dirs):
        try:
            runs.append(load_run(path))
        except CompareError as e:  # a stub (no records yet) or a damaged run: skip, say so
            skipped.append(f"skipped {e}")
    if not runs:
        raise CompareError("no run to compare: " + "; ".join(skipped))
    explicit = ref_lib.load_series(reference) if reference is not None else None
    groups: dict[tuple[str, str, str], Group] = {}
    for run in runs:
        key = (run.name, ref_lib.game_key(run.env), run.protocol)
        if key not in groups:
            groups[key] = Group(run.name, run.env, run.protocol, [], 0)
        groups[key].runs.append(run)
    for group in groups.values():
        _refuse_duplicate_seeds(group)
    comparison = Comparison(groups=list(groups.values()), notes=skipped)
    for group in comparison.groups:
        group.runs.sort(key=lambda r: r.seed)
        finals = [r.final_env_steps for r in group.runs]
        group.env_steps = min(finals) if env_steps is None else min(env_steps, *finals)
        if env_steps is not None and min(finals) < env_steps:
            comparison.notes.append(
                f"{group.name} {group.env}: some seeds stop at {min(finals):,} env steps, before "
                f"{env_steps:,}; compared there"
            )
        elif env_steps is None and len(set(finals)) > 1:
            comparison.notes.append(
                f"{group.name} {group.env}: seeds end at {sorted(set(finals))} env steps; "
                f"compared at the smallest, {group.env_steps:,}"
            )
        for run in group.runs:
            if not run.finished:
                assert run.budget is not None
                comparison.notes.append(
                    f"{group.name} {group.env} seed {run.seed} is unfinished: it stopped at "
                    f"{run.final_env_steps:,} of its {run.budget:,} env steps "
                    f"({run.final_env_steps / run.budget:.0%}); its row is not the result of the "
                    f"full run (finish it with: zoo train --resume {run.path})"
                )
        group.series, notes = _series_for(group.runs[0], explicit)
        comparison.notes.extend(notes)
        group.rows = [_row(group, s.statistic, s) for s in group.series]
        covered = {s.statistic for s in group.series}
        # the other statistic is shown too, without a reference (both are recorded by every run)
        group.rows += [
            _row(group, st, None) for st in ("evaluation", "training") if st not in covered
        ]
    return comparison


def _refuse_duplicate_seeds(group: Group) -> None:
    """A group counts each seed once: two runs of one seed would be counted as two seeds."""
    by_seed: dict[int, list[Path]] = {}
    for run in group.runs:
        by_seed.setdefault(run.seed, []).append(run.path)
    repeated = {seed: paths for seed, paths in by_seed.items() if len(paths) > 1}
    if repeated:
        seed, paths = next(iter(sorted(repeated.items())))
        shown = ", ".join(map(str, paths[:3])) + (", ..." if len(paths) > 3 else "")
        more = f" (and {len(repeated) - 1} more seeds repeated)" if len(repeated) > 1 else ""
        raise CompareError(
            f"{group.name} {group.env}: {len(paths)} runs of seed {seed} ({shown}){more}; a "
            "comparison counts each seed once: pass one run per seed"
        )


# --------------------------------------------------------------------------------------------
# Output


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.{digits}f}"


def _ours(row: Row) -> str:
    if row.mean is None:
        return "—"
    return f"{_fmt(row.mean)} [{_fmt(row.min)}, {_fmt(row.max)}]"


def _reference(row: Row) -> str:
    point = row.reference
    if point is None:
        return "—"
    text = _fmt(point["mean"])
    if point.get("min") is not None and point.get("max") is not None:
        text += f" [{_fmt(point['min'])}, {_fmt(point['max'])}]"
    elif point.get("std") is not None:
        text += f" ± {_fmt(point['std'])}"
    if point.get("tag") == "R":
        text += " [R]"
    return text


def _inside(row: Row) -> str:
    if row.inside is None:
        return "—" if row.reference is None else "n/a (no spread)"
    verdict = "yes" if row.inside else "no"
    return verdict if row.range_kind == "seed min-max" else f"{verdict} (±1 std)"


_HEADER = (
    "preset/algorithm",
    "env",
    "protocol",
    "statistic",
    "frames",
    "seeds",
    "ours mean [min, max]",
    "reference",
    "reference value",
    "HNS ours / ref",
    "inside ref range",
)


def _cells(row: Row) -> tuple[str, ...]:
    hns = "—"
    if row.hns is not None or row.reference_hns is not None:
        hns = f"{_fmt(row.hns, 3)} / {_fmt(row.reference_hns, 3)}"
    series = "—" if row.series is None else f"{row.series} ({row.series_kind})"
    return (
        row.name,
        row.env,
        row.protocol,
        row.statistic,
        f"{row.frames:,}",
        str(len(row.seeds)) + (f" ({len(row.unfinished)} unfinished)" if row.unfinished else ""),
        _ours(row),
        series,
        _reference(row),
        hns,
        _inside(row),
    )


def _footnotes(comparison: Comparison) -> list[str]:
    lines = []
    for row in comparison.rows:
        what = f"{row.name} {row.env} ({row.statistic}"
        if row.statistic == "training":
            what += f"; window {row.window_frames:,} frames"
        what += ")"
        per_seed = ", ".join(
            f"seed {s}: {_fmt(v)}" for s, v in zip(row.seeds, row.values, strict=True)
        )
        lines.append(f"{what}: {per_seed}" + (f". {row.note}" if row.note else ""))
    return [*lines, *_protocol_notes(comparison), *comparison.notes]


def _protocol_notes(comparison: Comparison) -> list[str]:
    """The named differences of each protocol in the table from its source (docs/protocols.md)."""
    from zoo.envs import get_protocol

    notes = []
    for name in sorted({row.protocol for row in comparison.rows}):
        differences = get_protocol(name).differences
        if differences:
            notes.append(
                f"protocol {name} differs from its source in: {', '.join(differences)} "
                "(docs/protocols.md)"
            )
    return notes


def format_table(comparison: Comparison) -> str:
    """The comparison as a plain-text table with notes below."""
    rows = [_HEADER, *(_cells(r) for r in comparison.rows)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", *(f"- {n}" for n in _footnotes(comparison))]) + "\n"


def format_markdown(comparison: Comparison, title: str = "Comparison") -> str:
    """The comparison as Markdown (``comparison.md``)."""
    out = [f"# {title}", "", "| " + " | ".join(_HEADER) + " |"]
    out.append("|" + "---|" * len(_HEADER))
    out.extend("| " + " | ".join(_cells(r)) + " |" for r in comparison.rows)
    out += ["", *(f"- {n}" for n in _footnotes(comparison))]
    sources = {s.id: s for g in comparison.groups for s in g.series}
    if sources:
        out += ["", "Reference series:"]
        for series_id, s in sorted(sources.items()):
            out.append(f"- `{series_id}` ({s.label}; {s.kind_label}): {s.source or 'no source'}")
    out += [
        "",
        "Statistics: `evaluation` = the greedy evaluation at the budget (eval.jsonl); "
        "`training` = mean return of the training games finished in the window before the "
        "budget (metrics.jsonl). HNS = (score − random) / (human − random) (dqn_zoo's scores). "
        "'inside ref range' checks our mean against the reference's seed [min, max] "
        "(or mean ± std where the source gives only that).",
    ]
    return "\n".join(out) + "\n"


def run_curve(run: RunInfo, statistic: str) -> list[tuple[int, float]]:
    """A run's curve as ``(frames, value)`` points: its evaluations' mean returns
    (``statistic="evaluation"``, eval.jsonl) or its training log's mean returns (``"training"``,
    metrics.jsonl); records without a finite value are left out."""
    records, key = (
        (run.evals, "mean_return") if statistic == "evaluation" else (run.metrics, "return")
    )
    points = [(int(r["env_steps"]) * run.frame_skip, _number(r.get(key))) for r in records]
    return [(frames, value) for frames, value in points if value is not None]


def _mean_curve(curves: list[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The mean over seeds at the frames every seed logged."""
    common = set.intersection(*(set(f for f, _ in c) for c in curves)) if curves else set()
    by_seed = [dict(c) for c in curves]
    return [(f, sum(d[f] for d in by_seed) / len(by_seed)) for f in sorted(common)]


def write_plot(comparison: Comparison, path: str | os.PathLike[str]) -> Path:
    """``comparison.png``: per group, each seed's curve, their mean, and the reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = comparison.groups
    cols = min(3, len(groups)) or 1
    nrows = max(1, math.ceil(len(groups) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4 * nrows), squeeze=False)
    for ax in axes.flat[len(groups) :]:
        ax.axis("off")
    for ax, group in zip(axes.flat, groups, strict=False):
        statistics = list(dict.fromkeys(r.statistic for r in group.rows))
        last = max(r.final_env_steps * r.frame_skip for r in group.runs)
        for statistic in statistics:
            style, i = ("-", 1) if statistic == "training" else ("--", 0)
            curves = [run_curve(run, statistic) for run in group.runs]
            for curve in curves:
                if curve:
                    xs, ys = zip(*curve, strict=True)
                    ax.plot(xs, ys, style, color=f"C{i}", alpha=0.3, lw=0.8)
            mean = _mean_curve([c for c in curves if c])
            if mean:
                xs, ys = zip(*mean, strict=True)
                ax.plot(xs, ys, style, color=f"C{i}", lw=2, label=f"ours, {statistic} (mean)")
        for j, series in enumerate(group.series):
            color = f"C{j + 2}"
            try:
                points = series.points(group.env)
            except ref_lib.ReferenceLookupError:
                continue
            shown = [p for p in points if p.frames <= max(last, points[0].frames) * 1.05]
            if len(points) > 1:
                shown = shown or list(points[:1])
                xs = [p.frames for p in shown]
                ax.plot(xs, [p.mean for p in shown], color=color, lw=1.5, label=series.id)
                if all(p.min is not None and p.max is not None for p in shown):
                    ax.fill_between(
                        xs, [p.min for p in shown], [p.max for p in shown], color=color, alpha=0.2
                    )
            else:
                p = points[0]
                low, high = p.range or (p.mean, p.mean)
                ax.errorbar(
                    [p.frames],
                    [p.mean],
                    yerr=[[p.mean - low], [high - p.mean]],
                    fmt="o",
                    color=color,
                    capsize=4,
                    label=f"{series.id} ({series.kind_label})",
                )
        ax.set_title(f"{group.name} · {group.env} ({group.protocol})", fontsize=9)
        ax.set_xlabel("frames")
        ax.set_ylabel("return")
        if ax.get_legend_handles_labels()[0]:  # no curve yet (no game finished): no legend
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    from zoo.fileio import save_figure

    path = save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(
    comparison: Comparison, out_dir: str | os.PathLike[str], title: str = "Comparison"
) -> dict[str, Path]:
    """Write ``comparison.md``, ``comparison.json`` and ``comparison.png`` into ``out_dir``."""
    from zoo.fileio import make_output_dir, write_atomic

    out = make_output_dir(out_dir)
    paths = {
        "md": out / "comparison.md",
        "json": out / "comparison.json",
        "png": out / "comparison.png",
    }
    write_atomic(paths["md"], format_markdown(comparison, title))
    write_atomic(paths["json"], json.dumps(comparison.to_json(), indent=2))
    write_plot(comparison, paths["png"])
    return paths


def default_out_dir(run_dirs: Sequence[Path], cwd: Path | None = None) -> Path:
    """Where a comparison goes without ``--out``: the deepest folder holding every run (never a
    run directory itself: one run's comparison goes beside it) when that lies under the working
    directory, else ``./comparison``.

    Output never lands outside the working directory unless the user names the folder: the
    common folder of runs under ``/tmp`` and ``/home`` is ``/``.
    """
    here = (cwd or Path.cwd()).resolve()
    fallback = here / "comparison"
    try:
        resolved = [Path(p).resolve() for p in run_dirs]
        common = Path(os.path.commonpath([str(p) for p in resolved]))
    except ValueError:
        return fallback
    if common in resolved or RunDir(common).is_run():
        common = common.parent
    return common if common.is_relative_to(here) else fallback


def record_series(comparison: Comparison, series_id: str, source: str) -> dict[str, Any]:
    """An ``ours/`` series from compared runs (one statistic per group, as compared).

    The entry carries each group's mean over seeds with the seeds' [min, max] at the compared
    budget, for the training statistic (window as compared) — what a later run of the same
    preset is checked against. Its label says it is ours and not published.
    """
    games: dict[str, dict[str, Any]] = {}
    protocols = {g.protocol for g in comparison.groups}
    if len(protocols) != 1:
        raise CompareError(
            f"a series holds one protocol; these runs use {sorted(protocols)}: record each "
            "protocol's runs separately"
        )
    window = None
    for row in comparison.rows:
        if row.statistic != "training" or row.mean is None:
            continue
        games[row.env] = {
            "frames": row.frames,
            "mean": round(row.mean, 4),
            "min": round(row.min, 4),
            "max": round(row.max, 4),
            "seeds": len(row.seeds),
        }
        window = row.window_frames
    if not games:
        raise CompareError("no group has a training statistic to record")
    names = sorted({g.name for g in comparison.groups})
    return ref_lib.series_entry(
        series_id,
        label=f"ours (documented run, not published): {', '.join(names)}",
        source=source,
        protocol=protocols.pop(),
        statistic="training",
        games=games,
        window_frames=window,
    )
