"""``zoo train --seeds N``: several runs of one algorithm in one compiled program, each a whole run
in its own directory that resumes, evaluates and compares like a single run.

Budgets are tiny (1,200 transitions of a small DQN on real CartPole): these tests check what the
group writes and how it resumes and stops, not learning.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from processes import checkpoint_steps
from tiny import tiny_overrides

import zoo
from zoo.runs.metrics import read_jsonl
from zoo.runs.rundir import read_history

pytestmark = pytest.mark.run

SETTINGS = dict(
    total_env_steps=1200,
    overrides=tiny_overrides("dqn_cartpole"),
    eval_every=400,
    eval_episodes=2,
    checkpoint_every=400,
    log_every=100,
    progress=False,
)
SEEDS = (3, 4)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seeds 3 and 4 of ``dqn_cartpole`` (tiny) trained together to 1,200 transitions; tests
    that change it work on a copy."""
    where = tmp_path_factory.mktemp("seeds") / "group"
    zoo.train_seeds("dqn_cartpole", seeds=len(SEEDS), seed=SEEDS[0], run_dir=where, **SETTINGS)
    return where


def copy_of(group: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(group, tmp_path / "group"))


def test_each_seed_is_a_whole_run_that_equals_its_single_run(group, tmp_path):
    members = sorted(p.name for p in group.iterdir())
    assert members == [f"seed{s}" for s in SEEDS]
    for s in SEEDS:
        run = group / f"seed{s}"
        settings = yaml.safe_load((run / "run.yaml").read_text())
        assert settings["seed"] == s and settings["loop"] == "compiled"
        assert [e["env_steps"] for e in read_jsonl(run / "eval.jsonl")] == [400, 800, 1200]
        assert checkpoint_steps(run)[-1] == 1200  # (the newest checkpoints are kept)
        stopped = read_history(run)[-1]
        assert stopped["event"] == "stopped" and stopped["status"] == "finished"
        assert stopped["env_steps"] == 1200 and stopped["seeds_group"] == members
    # seed 4 of the group against seed 4 trained alone with the compiled driver: the same
    # environments, networks, exploration and samples; the batched update sums in another
    # order, so parameters agree to float32 rounding (then drift, as chaotic training does)
    single = zoo.train("dqn_cartpole", seed=4, loop="compiled", run_dir=tmp_path / "s4", **SETTINGS)
    together = read_jsonl(group / "seed4" / "metrics.jsonl")
    alone = read_jsonl(single.run_dir / "metrics.jsonl")
    assert [r["env_steps"] for r in together] == [r["env_steps"] for r in alone]
    before = [r for r in alone if r["updates"] == 0]
    assert before and all(
        a.get(k) == b.get(k)
        for a, b in zip(together, before)  # noqa: B905 - the records before the first update
        for k in ("games", "return", "length")
    )
    learning = [(a, b) for a, b in zip(together, alone, strict=True) if b["updates"] > 0][:3]
    assert len(learning) == 3
    for a, b in learning:
        assert a["updates"] == b["updates"] and a["games"] == b["games"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)
    # and the seeds are different runs
    first = [read_jsonl(group / f"seed{s}" / "metrics.jsonl")[0]["return"] for s in SEEDS]
    assert len(set(first)) > 1


def test_a_group_resumes_together_and_each_seed_alone(group, tmp_path, cli):
    g = copy_of(group, tmp_path)
    code, out, err = cli("train", "--resume", g, "--steps", "1600")
    assert code == 0, err
    for s in SEEDS:
        assert f"seed{s}: 1,600 env steps" in out
        resumed = [e for e in read_history(g / f"seed{s}") if e["event"] == "resumed"]
        assert resumed[-1]["from_env_steps"] == 1200
        assert checkpoint_steps(g / f"seed{s}")[-1] == 1600
    # one seed goes further alone, as any run resumes
    alone = zoo.train(resume=g / "seed4", total_env_steps=2000, progress=False)
    assert alone.env_steps == 2000
    # now the seeds are at different steps: the group is refused, each named with its step
    code, out, err = cli("train", "--resume", g, "--steps", "2400")
    assert code == 2
    assert "seed3 at 1,600, seed4 at 2,000" in err and "resume each alone" in err
    # a seed that has reached the budget is answered as finished; the others train to it
    results = zoo.train_seeds(resume=g, total_env_steps=2000, progress=False)
    assert [r.env_steps for r in results] == [2000, 2000]
    assert read_history(g / "seed4")[-1]["event"] == "stopped"  # untouched since its own run
    assert len([e for e in read_history(g / "seed3") if e["event"] == "resumed"]) == 2


def test_a_seed_that_reaches_its_return_target_stops_and_the_others_go_on(group, tmp_path):
    first = {s: read_jsonl(group / f"seed{s}" / "eval.jsonl")[0]["mean_return"] for s in SEEDS}
    target = max(first.values())
    assert sorted(first.values())[0] < target, f"the seeds' first evaluations tie: {first}"
    results = zoo.train_seeds(
        "dqn_cartpole",
        seeds=len(SEEDS),
        seed=SEEDS[0],
        run_dir=tmp_path / "g",
        stop_at_return=target,
        **SETTINGS,
    )
    for s, result in zip(SEEDS, results, strict=True):
        evals = result.evaluations
        # the same first evaluation as without a target: the same program up to it
        assert evals[0]["mean_return"] == first[s]
        reached = [e["env_steps"] for e in evals if e["mean_return"] >= target]
        # each seed stops at its first evaluation that reaches the target, else at the budget
        assert result.env_steps == (reached[0] if reached else 1200)
        assert checkpoint_steps(result.run_dir)[-1] == result.env_steps
    assert min(r.env_steps for r in results) == 400 < max(r.env_steps for r in results)


def test_what_a_group_cannot_be_is_refused_before_anything_is_written(group, tmp_path, cli):
    tiny = ["--set=replay.min_size=200", "--steps", "1200"]
    code, _, err = cli("train", "dqn_cartpole", "--seeds", "2", "--loop", "host", *tiny)
    assert code == 2 and "--loop host cannot run them" in err
    g = tmp_path / "g"
    code, _, err = cli(
        "train", "dqn_cartpole", "--seeds", "2", "--env-backend", "gymnasium", "--run-dir", g,
        *tiny,
    )  # fmt: skip
    assert code == 2 and "has no XLA interface" in err
    assert not g.exists()  # the seeds' runs and the group's directory are gone again
    code, _, err = cli("train", "dqn_cartpole", "--seeds", "2", "--run-dir", group, *tiny)
    assert code == 2 and "is not empty" in err
    code, _, err = cli("train", "--resume", group / "seed3", "--seeds", "2")
    assert code == 2 and "holds no seed<S>/run.yaml" in err
    code, _, err = cli("train", "--resume", group, "--seeds", "3")
    assert code == 2 and "the group has 2 seeds" in err
    code, _, err = cli("train", "--resume", group, "--seed", "7")
    assert code == 2 and "its seeds are those it was created with" in err
    code, _, err = cli("train", "--resume", group, "--restart")
    assert code == 2 and "--restart applies to one run" in err
    code, _, err = cli("train", "dqn_cartpole", "--seeds", "0")
    assert code == 2 and "--seeds" in err
