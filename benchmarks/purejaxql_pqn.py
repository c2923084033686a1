"""zoo's PQN on gymnax beside purejaxql's own PQN, at purejaxql's settings and equal env steps.

    # purejaxql is not a package: give a checkout (mttga/purejaxql; 47af6d7 measured) and a
    # Python that has its dependencies (jax, flax, gymnax, optax, chex, hydra-core, wandb)
    python benchmarks/purejaxql_pqn.py --checkout PURE --peer-python PY [--game Breakout-MinAtar]
        [--steps 262144] [--repeats 2]
    python benchmarks/purejaxql_pqn.py --worker PURE --game G --steps N   # one peer run (JSON)

Both sides run gymnax's MinAtar port of the game (``--env-backend gymnax``, protocol
``gymnax_minatar``: purejaxql's environment code) with purejaxql's ``pqn_minatar.yaml``
(``presets/pqn_minatar.yaml`` carries it, value by value), for the same number of env steps; the
schedules decay over purejaxql's ``TOTAL_TIMESTEPS_DECAY`` (1e7) on both sides, so they agree at
every step of a shorter run. purejaxql runs its ``make_train(config)`` as its ``single_run``
does (``jax.jit(jax.vmap(train))`` over one seed), without its tests during training
(``TEST_DURING_TRAINING`` off) and without wandb; its time is measured after compilation
(``lower().compile()`` first). zoo runs ``zoo train preset:pqn_minatar`` with each driver
(``--loop host``: the environment and the update as separate jitted calls; ``--loop compiled``:
both inside one program, as purejaxql), and its env steps/s is read from its training records
past the first (compilation excluded). Returns: purejaxql's ``returned_episode_returns`` (the
mean over the environments of each one's last finished game) over the last rollout, and zoo's
training ``return`` (its last 100 games) at the end. The sides alternate within each repeat.

A benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peer_run(checkout: str, game: str, steps: int, seed: int) -> dict:
    """purejaxql's PQN, as its ``single_run`` runs it (one seed), timed after compilation."""
    sys.path.insert(0, checkout)
    import jax

    if not hasattr(jax, "tree_map"):  # gymnax 0.0.6 (purejaxql's pin) calls it; JAX removed it
        jax.tree_map = jax.tree.map
    from omegaconf import OmegaConf  # as purejaxql's hydra reads its config (1e7 is a float)
    from purejaxql.pqn_minatar import make_train

    alg = OmegaConf.to_container(
        OmegaConf.load(Path(checkout, "purejaxql/config/alg/pqn_minatar.yaml"))
    )
    config = {
        **alg,
        "ENV_NAME": game,
        "TOTAL_TIMESTEPS": steps,
        "TEST_DURING_TRAINING": False,
        "WANDB_MODE": "disabled",
        "NUM_SEEDS": 1,
        "SEED": seed,
    }
    rngs = jax.random.split(jax.random.PRNGKey(seed), 1)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(make_train(config))).lower(rngs).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    outs = jax.block_until_ready(compiled(rngs))
    run_s = time.perf_counter() - start
    returns = outs["metrics"]["returned_episode_returns"][0]
    return {
        "side": "purejaxql",
        "env_steps": int(outs["metrics"]["env_step"][0][-1]),
        "compile_s": compile_s,
        "run_s": run_s,
        "env_steps_per_s": steps / run_s,
        "return": float(returns[-1]),
    }


def zoo_run(game: str, steps: int, seed: int, loop: str) -> dict:
    """``zoo train preset:pqn_minatar`` on gymnax with ``loop``; rates from its records."""
    env = "MinAtar/" + game.removesuffix("-MinAtar") + "-v1"
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp, "run")
        command = [
            sys.executable, "-m", "zoo.cli", "train", "preset:pqn_minatar", "--env", env,
            "--env-backend", "gymnax", "--loop", loop, "--steps", str(steps), "--seed",
            str(seed), "--eval-every", str(steps), "--eval-episodes", "1", "--run-dir",
            str(run), "--progress", "off",
        ]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - start
        records = [json.loads(line) for line in Path(run, "metrics.jsonl").read_text().splitlines()]
    rates = [r["env_steps_per_s"] for r in records[1:] if r.get("env_steps_per_s")]
    return {
        "side": f"zoo --loop {loop}",
        "env_steps": records[-1]["env_steps"],
        "wall_s": wall,
        "env_steps_per_s": statistics.median(rates),
        "return": records[-1].get("return"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", help="a purejaxql checkout (its repository root)")
    parser.add_argument("--peer-python", default=sys.executable, help="Python for purejaxql")
    parser.add_argument("--worker", metavar="CHECKOUT", help="run purejaxql once, print JSON")
    parser.add_argument("--game", default="Breakout-MinAtar")
    parser.add_argument("--steps", type=int, default=262_144, help="env steps (× 4,096)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(peer_run(args.worker, args.game, args.steps, args.seed)))
        return
    if not args.checkout:
        parser.error("--checkout is required (a purejaxql checkout)")
    rows: list[dict] = []
    for repeat in range(args.repeats):
        sides = ["purejaxql", "host", "compiled"]
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            if side == "purejaxql":
                out = subprocess.run(
                    [args.peer_python, __file__, "--worker", args.checkout, "--game", args.game,
                     "--steps", str(args.steps), "--seed", str(args.seed)],
                    check=True, capture_output=True, text=True,
                    env={**os.environ, "PYTHONPATH": args.checkout},
                )  # fmt: skip
                row = json.loads(out.stdout.strip().splitlines()[-1])
            else:
                row = zoo_run(args.game, args.steps, args.seed, side)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"## {args.game}, {args.steps:,} env steps, seed {args.seed}, {args.repeats} repeats\n")
    print("| side | env steps/s (median) | ratio to purejaxql | return at the end |")
    print("|---|---:|---:|---|")
    by_side: dict[str, list[dict]] = {}
    for row in rows:
        by_side.setdefault(row["side"], []).append(row)
    base = statistics.median(r["env_steps_per_s"] for r in by_side["purejaxql"])
    for side, runs in by_side.items():
        rate = statistics.median(r["env_steps_per_s"] for r in runs)
        returns = ", ".join(f"{r['return']:.2f}" for r in runs)
        print(f"| {side} | {rate:,.0f} | {rate / base:.2f} | {returns} |")


if __name__ == "__main__":
    main()
