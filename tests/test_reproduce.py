"""``zoo reproduce`` and ``zoo compare`` end to end on real CartPole runs at a tiny budget.

One module-scoped reproduction trains seed 0 to 1,500 transitions, then asks for 2 seeds at 3,000:
seed 0 must be resumed and seed 1 trained; a third invocation must reuse both without touching
their files. The budgets check bookkeeping, not learning.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from processes import checkpoint_steps, wait_while_running

from zoo import cli
from zoo.runs.metrics import read_jsonl

PRESET = "dqn_cartpole"
FAST = ["--eval-episodes", "2"]


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(run: Path) -> dict[str, object]:
    """Contents of a run's records and the names/mtimes of its checkpoint files."""
    files = sorted(p for p in (run / "checkpoints").rglob("*") if p.is_file())
    return {
        "metrics": (run / "metrics.jsonl").read_text(),
        "eval": (run / "eval.jsonl").read_text(),
        "checkpoints": [(str(p.relative_to(run)), p.stat().st_mtime_ns) for p in files],
    }


SEEDS = ("seed0", "seed1")


# the module's runs are trained by one module-scoped fixture: its tests share one xdist worker,
# so that the runs are trained once, not once per worker
pytestmark = pytest.mark.xdist_group("reproduce")


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    """Three invocations of `zoo reproduce` into one folder, with what each printed (capsys is
    function-scoped, so output is captured by redirection)."""
    root = tmp_path_factory.mktemp("reproduce")
    outputs = {}

    def call(name: str, *args: str) -> None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["reproduce", PRESET, "--run-dir", str(root), *FAST, *args])
        outputs[name] = (code, out.getvalue(), err.getvalue())
        if name == "full":
            outputs["snapshot"] = {s: snapshot(root / PRESET / "CartPole-v1" / s) for s in SEEDS}

    call(
        "partial", "--seeds", "1", "--frames", "1500", "--checkpoint-every", "500", "--loop", "host"
    )
    call("full", "--seeds", "2", "--frames", "3000")
    call("again", "--seeds", "2", "--frames", "3000")
    return root, outputs


@pytest.mark.run
def test_reproduce_resumes_a_partial_run_and_trains_the_missing_seed(reproduced):
    root, outputs = reproduced
    code, out, _ = outputs["partial"]
    assert code == 0 and "seed0: trained" in out
    code, out, _ = outputs["full"]
    assert code == 0, out
    assert "seed0: resumed from 1,500 env steps" in out
    assert "seed1: trained" in out
    for seed in SEEDS:
        run = root / PRESET / "CartPole-v1" / seed
        steps = [r["env_steps"] for r in read_jsonl(run / "metrics.jsonl")]
        assert steps[-1] == 3000
        assert steps == sorted(set(steps))  # resumed records are not duplicated
    # --checkpoint-every is the run's own setting: the resume checkpoints on its multiples
    checkpoints = root / PRESET / "CartPole-v1" / "seed0" / "checkpoints"
    assert sorted(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit()) == [2500, 3000]


@pytest.mark.unit
def test_loop_applies_to_new_runs_and_a_resumed_run_keeps_its_own(reproduced):
    root, _ = reproduced
    loops = {s: _settings(root / PRESET / "CartPole-v1" / s)["loop"] for s in SEEDS}
    # seed 0 was created with --loop host and resumed without it; seed 1 was new without it
    assert loops == {"seed0": "host", "seed1": "auto"}
    last = {
        s: read_jsonl(root / PRESET / "CartPole-v1" / s / "metrics.jsonl")[-1]["loop"]
        for s in SEEDS
    }
    assert last == {"seed0": "host", "seed1": "compiled"}


def _settings(run: Path) -> dict:
    import yaml

    return yaml.safe_load((run / "run.yaml").read_text())


@pytest.mark.unit
def test_reproduce_writes_table_markdown_json_and_plot(reproduced):
    root, outputs = reproduced
    _, out, _ = outputs["full"]
    assert "ours mean [min, max]" in out
    for name in ("comparison.md", "comparison.json", "comparison.png"):
        assert (root / name).stat().st_size > 0
    assert (root / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = json.loads((root / "comparison.json").read_text())["rows"]
    assert {r["statistic"] for r in rows} == {"evaluation", "training"}
    for row in rows:
        assert (row["frames"], row["env_steps"], row["seeds"]) == (3000, 3000, [0, 1])
        known = [v for v in row["values"] if v is not None]
        assert row["mean"] == pytest.approx(sum(known) / len(known))
        assert row["min"] == min(known) and row["max"] == max(known)
        assert row["hns"] is None  # CartPole has no human score
    evaluation = next(r for r in rows if r["statistic"] == "evaluation")
    for seed, value in zip((0, 1), evaluation["values"], strict=True):
        last = read_jsonl(root / PRESET / "CartPole-v1" / f"seed{seed}" / "eval.jsonl")[-1]
        assert (last["env_steps"], last["mean_return"]) == (3000, value)


@pytest.mark.unit
def test_second_invocation_reuses_finished_runs_without_retraining(reproduced):
    root, outputs = reproduced
    code, out, _ = outputs["again"]
    assert code == 0
    assert out.count("reused (finished at 3,000 env steps)") == 2
    assert "env steps" not in out.replace("reused (finished at 3,000 env steps)", "")
    for seed in SEEDS:
        assert snapshot(root / PRESET / "CartPole-v1" / seed) == outputs["snapshot"][seed]


@pytest.mark.unit
def test_compare_on_reproduced_runs_and_a_recorded_series_of_ours(reproduced, capsys, tmp_path):
    root, _ = reproduced
    out_dir = tmp_path / "cmp"
    code, out, _ = run_cli(
        capsys, "compare", str(root / PRESET), "--out", str(out_dir), "--record", "ours/test"
    )
    assert code == 0
    assert (out_dir / "comparison.md").is_file() and (out_dir / "comparison.png").is_file()
    recorded = out_dir / "series-ours_test.yaml"
    assert recorded.is_file()
    # our own runs, compared with the series recorded from them: inside the seeds' range
    code, out, _ = run_cli(
        capsys, "compare", str(root / PRESET), "--out", str(out_dir), "--reference", str(recorded)
    )
    assert code == 0
    rows = json.loads((out_dir / "comparison.json").read_text())["rows"]
    training = next(r for r in rows if r["series"] == "ours/test")
    assert training["series_kind"] == "ours (documented run, not published)"
    assert training["inside"] is True
    assert training["reference"]["mean"] == pytest.approx(training["mean"], abs=1e-3)
    # CleanRL's result is at 500k frames only: the row says so instead of comparing
    code, out, _ = run_cli(
        capsys, "compare", str(root), "--out", str(out_dir), "--reference", "cleanrl/dqn_cartpole"
    )
    assert code == 0
    assert "has no value for 'CartPole-v1' at 3,000 frames (it has: 500,000)" in out


@pytest.mark.unit
def test_compare_and_reproduce_refuse_another_protocol(reproduced, capsys, tmp_path):
    root, _ = reproduced
    code, out, err = run_cli(
        capsys, "compare", str(root), "--out", str(tmp_path), "--reference", "dopamine/dqn"
    )
    assert code == 2 and out == ""
    assert "'dopamine_2018'" in err and "'classic'" in err and "not comparable" in err
    assert "Traceback" not in err
    # reproduce refuses before training anything
    code, _, err = run_cli(
        capsys,
        "reproduce",
        PRESET,
        "--run-dir",
        str(tmp_path / "x"),
        "--reference",
        "published/Rainbow",
    )
    assert code == 2 and "'nature_2015'" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.unit
def test_compare_names_what_is_not_a_run(capsys, tmp_path):
    code, _, err = run_cli(capsys, "compare", str(tmp_path))
    assert code == 2 and "no zoo run directory" in err
    code, out, _ = run_cli(capsys, "compare", "--list-series", "dopamine/*")
    assert code == 0 and "dopamine/dqn_adam_mse" in out and "dopamine_2018" in out


@pytest.mark.unit
def test_games_resolve_from_every_spelling_of_the_reference_tables():
    from zoo.reproduce import game_env_id

    assert game_env_id("space_invaders") == "SpaceInvaders-v5"
    assert game_env_id("ms_pacman") == "MsPacman-v5"
    assert game_env_id("PongNoFrameskip-v4") == "Pong-v5"
    assert game_env_id("CartPole-v1") == "CartPole-v1"


@pytest.mark.process
def test_ctrl_c_stops_the_matrix_starts_no_further_seed_and_writes_no_comparison(tmp_path):
    """SIGINT to `zoo reproduce --seeds 2` once seed 0 has a checkpoint: seed 0 saves one where it
    stopped, seed 1 never starts, and no comparison (of runs at unequal budgets) is written; exit
    130 with the command to resume. Before the fix seed 1 started and a comparison followed."""
    import os
    import signal
    import subprocess
    import sys

    root = tmp_path / "r"
    seed0 = root / PRESET / "CartPole-v1" / "seed0"
    budget = 40_000
    command = [
        sys.executable,
        "-c",
        "import sys; from zoo.cli import main; sys.exit(main())",
        "reproduce",
        PRESET,
        "--seeds",
        "2",
        "--frames",
        str(budget),
        "--checkpoint-every",
        "500",
        "--run-dir",
        str(root),
        "--progress",
        "off",
        *FAST,
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        wait_while_running(process, lambda: bool(checkpoint_steps(seed0)), "seed 0's checkpoint")
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 130, out
    stopped = checkpoint_steps(seed0)[-1]
    assert 0 < stopped < budget, out
    assert f"{seed0}: interrupted at {stopped:,} env steps (checkpoint saved)" in out
    assert "interrupt: 1 run(s) not started and no comparison written" in out
    assert not (root / PRESET / "CartPole-v1" / "seed1").exists()
    assert not any((root / f"comparison.{ext}").exists() for ext in ("md", "json", "png"))
    assert "Traceback" not in out
