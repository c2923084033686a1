"""The published Atari 100k per-run scores (DrQ(ε), SPR) through zoo's aggregation.

Writes ``docs/bench/atari100k_published.md`` (IQM, median, mean and optimality gap of human-
normalised scores with 95% stratified-bootstrap CIs, and the probability of improvement) and
``docs/bench/atari100k_published.png`` (interval estimates), the way ``zoo bench`` reports a
suite: the same ``zoo.bench.stats`` functions on the data ``zoo bench atari100k`` puts beside
its own rows. The published figures are IQM 0.280 / median 0.313 / mean 0.465 (DrQ(ε)) and
0.337 / 0.396 / 0.616 (SPR) (Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of
the Statistical Precipice", NeurIPS, https://arxiv.org/abs/2108.13264).

    python benchmarks/atari100k_published.py [--reps 50000] [--out docs/bench]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rliable import plot_utils

from zoo.bench import stats
from zoo.bench.published import published
from zoo.bench.suites import get_suite

NAMES = {"iqm": "IQM", "median": "Median", "mean": "Mean", "optimality_gap": "Optimality gap"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50_000, help="bootstrap resamples")
    parser.add_argument("--out", default="docs/bench", help="output folder")
    args = parser.parse_args()
    suite = get_suite("atari100k")
    runs = published("atari100k")
    scores = {
        r.label: stats.normalise(
            dict(zip(suite.games, r.matrix(suite.games).T, strict=True)), suite
        )
        for r in runs
    }
    t0 = time.perf_counter()
    agg = stats.aggregate(scores, reps=args.reps, seed=0)
    poi = stats.probability_of_improvement(scores, reps=min(args.reps, 2000), seed=0)
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = ", ".join(
        f"{r.label} ({scores[r.label].shape[0]} runs × {scores[r.label].shape[1]} games)"
        for r in runs
    )
    lines = [
        "# Atari 100k: the published per-run scores through zoo's aggregation",
        "",
        f"`python benchmarks/atari100k_published.py --reps {args.reps}` "
        f"({seconds:.0f} s on the 2-core CPU machine). Human-normalised scores of "
        f"{sizes}; "
        f"point estimate [95% stratified-bootstrap CI, {args.reps:,} resamples] (rliable).",
        "",
        "| algorithm | IQM | Median | Mean | Optimality gap | published (IQM / median / mean) |",
        "|---|---|---|---|---|---|",
    ]
    quoted = {"DrQ(ε)": "0.280 / 0.313 / 0.465", "SPR": "0.337 / 0.396 / 0.616"}
    for name, metrics in agg.items():
        cells = [f"{m.point:.3f} [{m.lo:.3f}, {m.hi:.3f}]" for m in metrics.values()]
        lines.append(f"| {name} | {' | '.join(cells)} | {quoted.get(name, '—')} |")
    lines += ["", "Probability of improvement P(row > column):", ""]
    for (a, b), iv in poi.items():
        lines.append(f"- P({a} > {b}) = {iv.point:.3f} [{iv.lo:.3f}, {iv.hi:.3f}]")
    lines += [
        "",
        "Sources: the per-run data rliable publishes (`zoo/bench/data/`, with its source lines).",
        "",
        "![intervals](atari100k_published.png)",
        "",
    ]
    (out / "atari100k_published.md").write_text("\n".join(lines), encoding="utf-8")
    algos = list(agg)
    fig, _ = plot_utils.plot_interval_estimates(
        {a: np.array([agg[a][m].point for m in stats.METRICS]) for a in algos},
        {
            a: np.array(
                [[agg[a][m].lo for m in stats.METRICS], [agg[a][m].hi for m in stats.METRICS]]
            )
            for a in algos
        },
        [NAMES[m] for m in stats.METRICS],
        algorithms=algos,
        xlabel="Human-normalised score (Atari 100k)",
        max_ticks=3,
        row_height=0.6,
        xlabel_y_coordinate=-0.4,
    )
    fig.savefig(out / "atari100k_published.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    print((out / "atari100k_published.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
