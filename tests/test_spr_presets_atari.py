"""The self-predictive presets (``spr``, ``sr_spr``, ``bbf``) train on a real Atari game (slow).

Each preset runs as shipped — its torso kind, auxiliary loss, prioritised replay, replay ratio,
EMA target, resets and schedules — made small enough for CI: a small replay that starts early,
batches of 4, BBF's IMPALA stacks narrowed, and the resets and schedules brought into 120
updates. The metrics must show the updates the replay ratio implies, the resets done, n and γ
where their schedules put them, and finite losses with a positive SPR term.
"""

from __future__ import annotations

import numpy as np
import pytest

import zoo
from zoo.horizon import Horizon
from zoo.runs.metrics import read_jsonl

pytestmark = pytest.mark.long

#: learner updates: 120 in every run; two resets (after updates 40 and 60) where a preset resets
MIN_SIZE, UPDATES = 301, 120
SMALL = {"replay.capacity": 1000, "replay.min_size": MIN_SIZE, "replay.batch_size": 4}
RESETS = {"resets.first": 40, "resets.every": 20, "resets.count": 2}
CASES = {
    # preset: (overrides beyond SMALL, env steps logged per record)
    "spr": ({}, 10),
    "sr_spr": (RESETS, 5),
    "bbf": (
        {
            **RESETS,
            "network.torso.channels": [4, 8, 8],
            "network.torso.width": 1,
            "network.hidden": [64],
            "schedule.n_step.steps": 20,
            "schedule.discount.steps": 20,
        },
        10,
    ),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", list(CASES))
def test_a_self_predictive_preset_trains_on_breakout(name, tmp_path):
    extra, log_every = CASES[name]
    overrides = {**SMALL, **extra}
    preset = zoo.load_preset(name)
    spec = zoo.load_algorithm(zoo.spec.algorithm_for(preset), overrides=overrides)
    per_step = spec.schedule.updates_per_period // spec.schedule.update_period
    steps = MIN_SIZE - 1 + UPDATES // per_step
    run = tmp_path / name
    result = zoo.train(
        f"preset:{name}",
        env="Breakout-v5",
        total_env_steps=steps,
        overrides=overrides,
        run_dir=run,
        eval_every=steps,
        eval_episodes=1,
        eval_max_steps=200,
        checkpoint_every=steps,
        log_every=log_every,
        progress=False,
    )
    assert result.env_steps == steps and result.updates == UPDATES
    assert result.final_eval["protocol"] == "atari_100k"

    logged = [m for m in read_jsonl(run / "metrics.jsonl") if m.get("updates")]
    assert logged[-1]["updates"] == UPDATES
    for m in logged:
        assert np.isfinite(m["loss"]) and np.isfinite(m["td_loss"])
        assert m["auxiliary"] > 0 and m["loss"] >= m["auxiliary"]

    horizon = Horizon(spec)
    if spec.resets is None:
        assert "resets" not in logged[-1] or logged[-1]["resets"] == 0
    else:
        # both resets are done (after updates 40 and 60) before the last record's updates
        assert logged[-1]["resets"] == 2.0
        assert max(m["resets"] for m in logged if m["updates"] <= 40) < 1.0
    # n and γ: BBF's restart after each reset and settle 20 updates later at 3 and 0.997; the
    # others' are loss.n_step and loss.discount throughout, and not logged
    last = logged[-1]
    if spec.schedule.n_step is None:
        assert "n_step" not in last and "discount" not in last
        assert int(horizon.n_step(0)) == spec.loss.n_step == 10
    else:
        assert int(horizon.n_step(0)) == 10 and int(horizon.n_step(20)) == 3
        assert last["n_step"] == 3.0 and last["discount"] == pytest.approx(0.997, rel=1e-6)
        # the window after the second reset: a cycle restarted, n above 3 and γ below 0.997
        restarted = next(m for m in logged if m["updates"] > 60)
        assert restarted["n_step"] > 3.0 and restarted["discount"] < 0.997
