"""Atari smoke test on the CPU: train → checkpoint → resume → eval on Pong (slow).

A few thousand transitions with a small replay: this checks the Atari pipeline end to end (frame
storage and stacking in the replay, the Nature CNN, the protocol, checkpoints with the replay),
not learning.
"""

from __future__ import annotations

import numpy as np
import pytest

import zoo
from zoo.runs.metrics import read_jsonl

pytestmark = pytest.mark.long

SMALL_REPLAY = {"replay.capacity": 4000, "replay.min_size": 500}


@pytest.mark.timeout(1800)
def test_pong_train_checkpoint_resume_eval(tmp_path):
    run = tmp_path / "pong"
    first = zoo.train(
        "dqn",
        env="Pong-v5",
        total_env_steps=1500,
        overrides=SMALL_REPLAY,
        run_dir=run,
        eval_every=1500,
        eval_episodes=1,
        eval_max_steps=300,
        checkpoint_every=750,
        log_every=250,
        progress=False,
    )
    assert first.env_steps == 1500 and first.updates == (1500 - 500 + 1) // 4
    evaluation = first.final_eval
    assert evaluation["protocol"] == "nature_2015" and evaluation["truncated"]
    assert evaluation["agent_steps"] <= 300

    resumed = zoo.train(resume=run, total_env_steps=2500, progress=False)
    assert resumed.env_steps == 2500
    records = read_jsonl(run / "metrics.jsonl")
    assert [r["env_steps"] for r in records] == list(range(250, 2750, 250))
    assert all(np.isfinite(r["loss"]) for r in records if "loss" in r)

    policy = zoo.load_policy(run)
    actions = policy(np.zeros((2, 4, 84, 84), np.uint8))
    assert actions.shape == (2,)
    result = zoo.evaluate_run(run, episodes=1, max_steps=200)
    assert result["protocol"] == "nature_2015" and result["agent_steps"] <= 200
