"""Learning tests: each family's CartPole-v1 preset solves the task (the ``learning`` tier).

``pytest -m learning`` runs the whole set (``-m "learning and not heavy"`` without the hours-long
asynchronous and two-process runs); CI runs the ``representative`` ones: one per head family and
data kind (see :data:`REPRESENTATIVE`), beside MinAtar's image learning test
(``tests/test_minatar.py``). docs/testing.md records the last full result.

Criterion (issue: "mean evaluation return >= 450 on at least 2 of 3 fixed seeds within a step
budget stated per algorithm"): a run succeeds when one of its evaluations (10 greedy games every
2,500 transitions) reaches a mean return of 450 within its budget; seeds 0, 1, 2 are tried in
order and the test stops as soon as two have succeeded or two have failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import zoo
from zoo.runs.metrics import read_jsonl

pytestmark = pytest.mark.learning

THRESHOLD = 450.0
SEEDS = (0, 1, 2)

#: Budget in transitions per preset (the step budget the issue asks the test to state).
BUDGETS = {
    "dqn_cartpole": 100_000,
    "double_dqn_cartpole": 100_000,
    "prioritized_ddqn_cartpole": 100_000,
    "prioritized_c51_cartpole": 100_000,
    "qr_dqn_cartpole": 100_000,
    "mdqn_cartpole": 100_000,
    "dqn_reg_cartpole": 100_000,
    "rainbow_cartpole": 100_000,
    "r2d2_cartpole": 100_000,
    "pqn_cartpole": 100_000,
    "iqn_cartpole": 100_000,
    "m_iqn_cartpole": 100_000,
    "r2d2_iqn_cartpole": 100_000,
    "drq_eps_cartpole": 100_000,
    "fqf_cartpole": 100_000,
}


#: The presets CI holds to the criterion, one per head family and data kind: the Q head with
#: uniform replay (dqn), a categorical head with prioritized replay (prioritized_c51), quantiles
#: (iqn), a recurrent learner on stored sequences (r2d2) and the replay-free rollout learner (pqn).
#: The others compose these parts (their losses are pinned against references in the fast tiers)
#: and run in the full set.
REPRESENTATIVE = (
    "dqn_cartpole",
    "prioritized_c51_cartpole",
    "iqn_cartpole",
    "r2d2_cartpole",
    "pqn_cartpole",
)


def presets() -> list:
    """Every preset of :data:`BUDGETS`, the representative ones marked so."""
    return [
        pytest.param(p, marks=pytest.mark.representative) if p in REPRESENTATIVE else p
        for p in sorted(BUDGETS)
    ]


def decided(outcomes: dict[int, float]) -> bool:
    """Whether the seeds tried so far settle the criterion (two passed, or two failed)."""
    passed = sum(r >= THRESHOLD for r in outcomes.values())
    return passed >= 2 or len(outcomes) - passed >= 2


def assert_criterion(preset: str, outcomes: dict[int, float], budget: int) -> None:
    """At least 2 of the seeds tried reached the threshold."""
    passed = [s for s, r in outcomes.items() if r >= THRESHOLD]
    assert len(passed) >= 2, f"{preset}: best evaluation per seed {outcomes} (budget {budget})"


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("preset", presets())
def test_preset_solves_cartpole(preset, tmp_path):
    budget = BUDGETS[preset]
    outcomes: dict[int, float] = {}
    for seed in SEEDS:
        run = tmp_path / f"seed{seed}"
        zoo.train(
            preset,
            seed=seed,
            total_env_steps=budget,
            run_dir=run,
            eval_every=2_500,
            eval_episodes=10,
            checkpoint_every=budget,
            stop_at_return=THRESHOLD,
            progress=False,
        )
        returns = [e["mean_return"] for e in read_jsonl(run / "eval.jsonl")]
        outcomes[seed] = max(returns)
        if decided(outcomes):
            break
    print(f"{preset}: best evaluation per seed {outcomes} (budget {budget})")  # shown by -rP
    assert_criterion(preset, outcomes, budget)


# ---------------------------------------------------------------- the asynchronous driver
#
# The same criterion for dqn, prioritized_ddqn, rainbow and r2d2 with ``zoo train --driver
# async`` on three forced host devices: one actor device and a data-parallel learner over two.
# Each run is a ``zoo train`` subprocess (``XLA_FLAGS`` must be set before JAX starts). On a
# 2-core machine the driver runs CartPole at 40-150 env steps/s (a tiny update: the two
# threads' Python work dominates), up to 13 minutes per seed, more than CI's limit allows
# beside the other suites: these are marked ``heavy`` and run with ``pytest -m heavy
# tests/test_learning.py``. Their results are recorded in docs/performance.md.

ROOT = Path(__file__).resolve().parent.parent

#: The presets the asynchronous driver is held to the criterion with (slow and heavy: not in CI).
ASYNC_PRESETS = (
    "dqn_cartpole",
    "prioritized_ddqn_cartpole",
    "rainbow_cartpole",
    "r2d2_cartpole",
)


def train_async(run: Path, preset: str, seed: int, budget: int) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XLA_FLAGS": "--xla_force_host_platform_device_count=3",
    }
    args = [
        preset, "--seed", str(seed), "--steps", str(budget), "--run-dir", str(run),
        "--eval-every", "2500", "--eval-episodes", "10", "--checkpoint-every", str(budget),
        "--stop-at-return", str(THRESHOLD), "--driver", "async", "--progress", "off",
    ]  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "zoo.cli", "train", *args],
        cwd=run.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )


@pytest.mark.heavy
@pytest.mark.timeout(3 * 3600)
@pytest.mark.parametrize("preset", ASYNC_PRESETS)
def test_preset_solves_cartpole_with_the_async_driver(preset, tmp_path):
    budget = BUDGETS[preset]
    outcomes: dict[int, float] = {}
    for seed in SEEDS:
        run = tmp_path / f"seed{seed}"
        out = train_async(run, preset, seed, budget)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "learner on cpu:1, cpu:2" in out.stderr
        records = read_jsonl(run / "metrics.jsonl")
        assert {r["loop"] for r in records} == {"async"}
        assert all(r["async_max_lag"] <= 1 for r in records)
        assert all(r["async_ratio_gap"] <= r["async_ratio_tolerance"] for r in records)
        outcomes[seed] = max(e["mean_return"] for e in read_jsonl(run / "eval.jsonl"))
        if decided(outcomes):
            break
    assert_criterion(preset, outcomes, budget)


# ------------------------------------------------------------------- across two processes
#
# The same criterion for dqn trained by two ``zoo train`` processes joined by jax.distributed
# (zoo.runs.distributed; gloo on CPU): each steps one environment into its half of the replay, the
# update is data-parallel over both, and the run counts both processes' transitions against the
# same budget. On a 2-core machine the pair runs CartPole at 40-60 env steps/s (a collective
# per update on a tiny network), up to 30 minutes per seed: ``heavy``, recorded in
# docs/performance.md.


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.heavy
@pytest.mark.timeout(4 * 3600)
def test_dqn_solves_cartpole_over_two_processes(tmp_path):
    preset = "dqn_cartpole"
    budget = BUDGETS[preset]
    outcomes: dict[int, float] = {}
    for seed in SEEDS:
        run = tmp_path / f"seed{seed}"
        port = free_port()
        args = [
            preset, "--seed", str(seed), "--steps", str(budget), "--run-dir", str(run),
            "--eval-every", "2500", "--eval-episodes", "10", "--checkpoint-every", str(budget),
            "--stop-at-return", str(THRESHOLD), "--progress", "off", "--num-processes", "2",
            "--coordinator", f"127.0.0.1:{port}",
        ]  # fmt: skip
        pair = [
            subprocess.Popen(
                [sys.executable, "-m", "zoo.cli", "train", *args, "--process-id", str(k)],
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for k in (0, 1)
        ]
        try:
            for p in pair:
                _, err = p.communicate(timeout=3600)
                assert p.returncode == 0, err[-3000:]
        finally:
            for p in pair:
                if p.poll() is None:
                    p.kill()
        # both processes end with the same learner, to the byte
        last = sorted(int(d.name) for d in (run / "checkpoints").iterdir() if d.name.isdigit())[-1]
        mine, theirs = (
            sorted((f / "checkpoints" / str(last) / "learner").glob("*.npy"))
            for f in (run, run / "processes" / "1")
        )
        assert [a.read_bytes() for a in mine] == [b.read_bytes() for b in theirs]
        outcomes[seed] = max(e["mean_return"] for e in read_jsonl(run / "eval.jsonl"))
        if decided(outcomes):
            break
    assert_criterion(preset, outcomes, budget)
