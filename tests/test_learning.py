"""Learning tests: each family's CartPole-v1 preset solves the task (slow; run by CI).

Criterion (issue: "mean evaluation return >= 450 on at least 2 of 3 fixed seeds within a step
budget stated per algorithm"): a run succeeds when one of its evaluations (10 greedy games every
2,500 transitions) reaches a mean return of 450 within its budget; seeds 0, 1, 2 are tried in
order and the test stops as soon as two have succeeded or two have failed.
"""

from __future__ import annotations

import pytest

import zoo
from zoo.metrics import read_jsonl

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


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("preset", sorted(BUDGETS))
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
        passed = sum(r >= THRESHOLD for r in outcomes.values())
        failed = len(outcomes) - passed
        if passed >= 2 or failed >= 2:
            break
    passed = [s for s, r in outcomes.items() if r >= THRESHOLD]
    assert len(passed) >= 2, f"{preset}: best evaluation per seed {outcomes} (budget {budget})"
