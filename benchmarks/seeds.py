"""Seeds in one program against single runs: ``zoo train --seeds N`` beside ``--loop compiled``.

    python benchmarks/seeds.py                                    # dqn_cartpole, 1 and 4 seeds
    python benchmarks/seeds.py --workload cartpole-8 --seeds 1 4 8 --steps 40000 --repeats 3

Two workloads: ``dqn_cartpole``, the preset at its own settings (one environment, an update of
a 256×256 MLP on 64 transitions every 2 transitions: the update is nearly all the work), and
``cartpole-8``, the throughput benchmark's CartPole workload (``benchmarks/throughput.py``: DQN,
a 120-84 MLP, 8 environments, one update per 10 transitions: environments, acting and the
program's own steps weigh more). Each repeat runs, one after the other on the same machine, a
single run of the workload with
``--loop compiled`` (seed 0) and a group of ``S`` seeds (:func:`zoo.train_seeds`) for each ``S``
asked, at the same settings and budget; the order rotates between repeats.
A run's rate is the env steps/s of its training records after ``--warmup`` transitions
(:func:`zoo.runs.metrics.windowed_rate`: compilation and the first records excluded, the one
evaluation at the end outside the window); a group's is the sum over its seeds (they step in
lockstep). The medians of the repeats are printed with the ratio to the single run: what ``S``
runs cost one after the other against in one program.

A benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from throughput import CARTPOLE

import zoo
from zoo.runs.metrics import read_jsonl, windowed_rate

#: name -> (algorithm or preset, the run's settings besides the budget)
WORKLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "dqn_cartpole": ("dqn_cartpole", {}),
    "cartpole-8": ("dqn", {"env": "CartPole-v1", "num_envs": 8, "overrides": CARTPOLE}),
}


def _rate(run_dir: Path, warmup: int) -> tuple[float, float]:
    return windowed_rate(read_jsonl(run_dir / "metrics.jsonl"), warmup)


def single(algorithm: str, steps: int, warmup: int, settings: dict[str, Any]) -> dict[str, float]:
    """One run with the compiled driver: env steps/s and updates/s in the window."""
    with tempfile.TemporaryDirectory() as tmp:
        result = zoo.train(
            algorithm, total_env_steps=steps, run_dir=Path(tmp) / "run", loop="compiled",
            progress=False, **settings,
        )  # fmt: skip
        env, upd = _rate(result.run_dir, warmup)
    return {"env_steps_per_s": env, "updates_per_s": upd}


def group(
    algorithm: str, seeds: int, steps: int, warmup: int, settings: dict[str, Any]
) -> dict[str, float]:
    """``seeds`` runs in one program: the group's env steps/s and updates/s (all seeds)."""
    with tempfile.TemporaryDirectory() as tmp:
        results = zoo.train_seeds(
            algorithm, total_env_steps=steps, seeds=seeds, run_dir=Path(tmp) / "group",
            progress=False, **settings,
        )  # fmt: skip
        rates = [_rate(r.run_dir, warmup) for r in results]
    return {
        "env_steps_per_s": sum(r[0] for r in rates),
        "updates_per_s": sum(r[1] for r in rates),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="dqn_cartpole")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 4])
    p.add_argument("--steps", type=int, default=40_000, help="each run's budget")
    p.add_argument("--warmup", type=int, default=10_000, help="transitions before the window")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--log-every", type=int, help="transitions between records (default: 1%%)")
    args = p.parse_args()
    # the evaluation (at the end only, outside the window) kept short
    algorithm, workload = WORKLOADS[args.workload]
    settings = {"eval_every": args.steps, "eval_episodes": 2, "eval_max_steps": 500, **workload}
    if args.log_every is not None:
        settings["log_every"] = args.log_every
    names = ["single", *(f"seeds={s}" for s in args.seeds)]
    rates: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            if name == "single":
                out = single(algorithm, args.steps, args.warmup, settings)
            else:
                seeds = int(name.split("=")[1])
                out = group(algorithm, seeds, args.steps, args.warmup, settings)
            rates[name].append(out)
            print(
                f"repeat {repeat}: {name:>9}: {out['env_steps_per_s']:9,.0f} env steps/s, "
                f"{out['updates_per_s']:9,.0f} updates/s",
                flush=True,
            )
    base = statistics.median(r["env_steps_per_s"] for r in rates["single"])
    print(f"\n{args.workload}, {args.steps:,} steps per run, window after {args.warmup:,}, "
          f"median of {args.repeats}:")  # fmt: skip
    print(f"{'':>9}  {'env steps/s':>12}  {'updates/s':>10}  {'x single':>8}")
    for name in names:
        env = statistics.median(r["env_steps_per_s"] for r in rates[name])
        upd = statistics.median(r["updates_per_s"] for r in rates[name])
        print(f"{name:>9}  {env:12,.0f}  {upd:10,.0f}  {env / base:8.2f}")


if __name__ == "__main__":
    main()
