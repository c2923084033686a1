"""Summarise MinAtar run directories into the markdown tables of docs/minatar_runs.md.

    python benchmarks/minatar_summary.py RUNS    # prints markdown (RUNS: the folder of run dirs)

Reads each ``<preset>-<game>-s<seed>/`` run directory (``run.yaml``, ``eval.jsonl``,
``metrics.jsonl``) and prints, per algorithm × game, the final greedy evaluation return and the
training return of the last 10% of the budget, as mean over seeds with min/max, plus the
evaluation curve (mean over seeds at each evaluation point). No per-game MinAtar numbers are
published (Revisiting Rainbow shows curves only), so the tables compare our algorithms with each
other. A stop-gap until ``zoo compare`` exists; it reads files only and imports nothing of zoo.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

RUN = re.compile(r"^(?P<preset>\w+)-(?P<game>\w+)-s(?P<seed>\d+)$")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _stats(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def summarise(root: Path) -> str:
    """The markdown tables for every finished run under ``root``."""
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run in sorted(p for p in root.iterdir() if p.is_dir() and RUN.match(p.name)):
        if not (run / "eval.jsonl").exists() or not (run / "DONE").exists():
            continue
        match = RUN.match(run.name)
        assert match is not None
        evals = _jsonl(run / "eval.jsonl")
        metrics = [m for m in _jsonl(run / "metrics.jsonl") if "return" in m]
        budget = max(m["env_steps"] for m in metrics)
        tail = [m["return"] for m in metrics if m["env_steps"] > 0.9 * budget]
        runs[(match["preset"], match["game"])].append(
            {
                "seed": int(match["seed"]),
                "final_eval": evals[-1]["mean_return"],
                "train_tail": statistics.fmean(tail),
                "curve": [(e["env_steps"], e["mean_return"]) for e in evals],
                "budget": budget,
                "steps_per_s": statistics.fmean(m["env_steps_per_s"] for m in metrics[-20:]),
            }
        )
    lines = [
        "| algorithm | game | seeds | final greedy eval return, mean [min, max] "
        "| training return, last 10% of the budget, mean [min, max] | env steps/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (preset, game), items in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        lines.append(
            f"| {preset} | {game} | {len(items)} | {_stats([i['final_eval'] for i in items])} "
            f"| {_stats([i['train_tail'] for i in items])} "
            f"| {statistics.fmean(i['steps_per_s'] for i in items):.0f} |"
        )
    lines += ["", "Evaluation curves (mean greedy return over seeds, 10 games each point):", ""]
    for (preset, game), items in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        points = sorted({s for i in items for s, _ in i["curve"]})
        by_step = {s: [r for i in items for t, r in i["curve"] if t == s] for s in points}
        curve = ", ".join(f"{s // 1000}k: {statistics.fmean(v):.1f}" for s, v in by_step.items())
        lines.append(f"- {preset} / {game}: {curve}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder holding <preset>-<game>-s<seed>/ runs")
    print(summarise(parser.parse_args().root), end="")


if __name__ == "__main__":
    main()
