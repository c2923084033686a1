"""Runs end to end on real CartPole: the run directory, resume, signals and faults.

Budgets are tiny (a few thousand transitions): these tests check bookkeeping, not learning.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp
import pytest
import yaml
from processes import checkpoint_steps, wait_while_running
from tiny import tiny_overrides

import zoo
from zoo.runs import RunError
from zoo.runs.metrics import JsonlWriter, read_jsonl

ROOT = Path(__file__).resolve().parent.parent
QUICK = tiny_overrides("dqn_cartpole")
QUICK_SET = [f"--set={k}={json.dumps(v)}" for k, v in QUICK.items()]


def quick_train(run_dir: Path, steps: int = 1200, **kwargs):
    options = dict(
        total_env_steps=steps,
        overrides=QUICK,
        run_dir=run_dir,
        eval_every=steps,
        eval_episodes=2,
        checkpoint_every=400,
        log_every=100,
        progress=False,
    )
    options.update(kwargs)
    return zoo.train("dqn_cartpole", **options)


def zoo_cli(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "zoo.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def env_steps_of(run_dir: Path) -> list[int]:
    return [r["env_steps"] for r in read_jsonl(run_dir / "metrics.jsonl")]


@pytest.mark.run
def test_run_directory_holds_everything(finished_run):
    run = finished_run
    spec = zoo.load_algorithm(run / "spec.yaml")
    expected = zoo.load_algorithm(
        zoo.spec.algorithm_for(zoo.load_preset("dqn_cartpole")), overrides=QUICK
    )
    assert spec.model_dump() == {**expected.model_dump(), "name": spec.name}
    settings = yaml.safe_load((run / "run.yaml").read_text())
    assert settings["env"] == "CartPole-v1" and settings["protocol"] == "classic"
    assert settings["total_env_steps"] == 1200 and settings["preset"] == "dqn_cartpole"
    provenance = json.loads((run / "provenance.json").read_text())
    assert provenance["versions"]["jax"] and provenance["seed"] == 0
    assert provenance["protocol"] == "classic" and provenance["devices"]
    assert env_steps_of(run) == list(range(100, 1300, 100))
    evaluation = read_jsonl(run / "eval.jsonl")
    assert [e["env_steps"] for e in evaluation] == [1200]
    assert evaluation[0]["episodes"] == 2 and evaluation[0]["protocol"] == "classic"
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tb").iterdir())
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps[-1] == 1200
    record = read_jsonl(run / "metrics.jsonl")[-1]
    assert record["updates"] == (1200 - 200 + 1) // 2  # credit from step 200, 1 update per 2
    assert np.isfinite(record["loss"])


@pytest.mark.run
def test_load_policy_and_zoo_eval(finished_run, cli):
    policy = zoo.load_policy(finished_run)
    actions = policy(np.zeros((3, 4), np.float32))
    assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}
    result = zoo.evaluate_run(finished_run, episodes=3)
    assert result["episodes"] == 3 and result["mean_return"] > 0
    code, out, err = cli("eval", finished_run, "--episodes", "2")
    assert code == 0, err
    assert "over 2 games (checkpoint at 1,200 env steps, protocol classic, ε 0" in out


@pytest.mark.run
def test_resume_continues_counters_and_metrics(tmp_path):
    run = tmp_path / "run"
    quick_train(run, steps=800)
    first = read_jsonl(run / "metrics.jsonl")
    result = zoo.train(resume=run, total_env_steps=1600, progress=False)
    assert result.env_steps == 1600
    records = read_jsonl(run / "metrics.jsonl")
    assert [r["env_steps"] for r in records] == list(range(100, 1700, 100))
    assert records[: len(first)] == first
    updates = [r["updates"] for r in records]
    assert updates == sorted(updates) and updates[-1] == (1600 - 200 + 1) // 2
    assert [e["env_steps"] for e in read_jsonl(run / "eval.jsonl")] == [800, 1600]


def wait_for_checkpoint(run: Path, process: subprocess.Popen, timeout: float = 240) -> int:
    """The env steps of ``run``'s first checkpoint, once written by the running ``process``."""
    wait_while_running(process, lambda: bool(checkpoint_steps(run)), "a checkpoint", timeout, 0.2)
    return checkpoint_steps(run)[-1]


@pytest.mark.process
def test_sigkill_then_resume_has_no_gaps_or_duplicates(tmp_path):
    run = tmp_path / "killed"
    args = [
        "train",
        "dqn_cartpole",
        "--steps",
        "6000",
        "--checkpoint-every",
        "1000",
        "--eval-every",
        "6000",
        "--eval-episodes",
        "2",
        "--run-dir",
        str(run),
        *QUICK_SET,
    ]
    process = zoo_cli(*args, cwd=tmp_path)
    wait_for_checkpoint(run, process)
    time.sleep(1.0)  # let it log past the checkpoint
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    resumed = zoo_cli("train", "--resume", str(run), cwd=tmp_path)
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    steps = env_steps_of(run)
    log_every = yaml.safe_load((run / "run.yaml").read_text())["log_every"]
    assert steps == list(range(log_every, 6000 + 1, log_every))
    assert f"results: {run}" in out


@pytest.mark.process
def test_sigint_saves_and_exits_cleanly(tmp_path):
    run = tmp_path / "interrupted"
    args = [
        "train",
        "dqn_cartpole",
        "--steps",
        "50000",
        "--checkpoint-every",
        "500",
        "--eval-every",
        "50000",
        "--run-dir",
        str(run),
        *QUICK_SET,
    ]
    process = zoo_cli(*args, cwd=tmp_path)
    first = wait_for_checkpoint(run, process)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-3000:]
    assert "interrupted at env step" in err and f"--resume {run}" in err
    assert "Traceback" not in err
    saved = max(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert saved > first
    assert env_steps_of(run)[-1] <= saved
    # the step reported is the checkpoint's, where a resume continues (it used to be the last
    # metrics record's: "interrupted at env step 1,800" with the checkpoint at 1,840)
    reported = re.search(r"interrupted at env step ([\d,]+) \(checkpoint saved there\)", err)
    assert reported is not None, err[-2000:]
    assert int(reported[1].replace(",", "")) == saved
    stopped = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()][-1]
    assert stopped["event"] == "stopped" and stopped["status"] == "interrupted"
    assert stopped["env_steps"] == saved


@pytest.mark.process
def test_resuming_a_finished_run_says_so_at_once_and_builds_nothing(finished_run, tmp_path):
    # it used to build and restore everything (30 s on Atari) to re-print the summary; a process
    # of its own shows that JAX is never imported
    run = finished_run
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    program = (
        "import json, sys, zoo.cli; rc = zoo.cli.main(sys.argv[1:]); "
        "print(json.dumps({'rc': rc, 'jax': 'jax' in sys.modules}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", program, "train", "--resume", str(run)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(result.stdout.splitlines()[-1]) == {"rc": 0, "jax": False}, result.stderr
    assert result.stderr.startswith(
        f"zoo: {run} is already finished: its checkpoint at env step 1,200 has reached the "
        "budget of 1,200; nothing to train. Train it further with: "
        f"zoo train --resume {run} --steps N"
    )
    assert "finished 1,200 env steps, 500 updates; evaluation return" in result.stdout
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before  # nothing recorded: nothing happened


@pytest.mark.run
def test_non_finite_loss_stops_with_the_step_and_keeps_the_last_checkpoint(tmp_path):
    run = tmp_path / "nan"
    overrides = {**QUICK, "optimizer.learning_rate": 1e30}
    with pytest.raises(RunError, match=r"the loss became (nan|inf) at learner update \d+"):
        zoo.train(
            "dqn_cartpole",
            total_env_steps=3000,
            overrides=overrides,
            run_dir=run,
            checkpoint_every=100,
            eval_every=3000,
            progress=False,
        )
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps and steps[-1] < 3000
    policy = zoo.load_policy(run)  # the last good checkpoint is usable
    assert policy(np.zeros((1, 4), np.float32)).shape == (1,)


@pytest.mark.run
def test_full_disk_while_checkpointing_is_reported(tmp_path, monkeypatch):
    def no_space(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ocp.CheckpointManager, "save", no_space)
    with pytest.raises(RunError, match="no space left on the device while writing checkpoint 400"):
        quick_train(tmp_path / "full")


@pytest.mark.run
def test_full_disk_while_logging_is_reported(tmp_path, monkeypatch):
    def no_space(self, record):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(JsonlWriter, "write", no_space)
    with pytest.raises(RunError, match="no space left on the device"):
        quick_train(tmp_path / "full")


@pytest.mark.compiled
def test_unwritable_or_occupied_run_directory(tmp_path, finished_run):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(RunError, match="cannot write the run directory"):
        quick_train(blocker / "run")
    with pytest.raises(RunError, match=r"already holds a run .* with checkpoints up to env step"):
        quick_train(finished_run)


@pytest.mark.compiled
def test_replay_that_cannot_fit_is_refused_before_allocating(tmp_path):
    with pytest.raises(RunError) as info:
        quick_train(tmp_path / "huge", overrides={**QUICK, "replay.capacity": 10**12})
    message = str(info.value)
    assert re.search(r"needs about [\d.]+ GiB of memory .* GiB is available", message), message
    fit = int(re.search(r"--set replay.capacity=(\d+)", message).group(1))
    assert 10**6 < fit < 10**12  # CartPole transitions are small: millions fit, not 10^12


@pytest.mark.unit
def test_unknown_environment_is_a_clear_error(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    code, _out, err = cli("train", "dqn", "--env", "CartPol-v1", "--steps", "100")
    assert code == 2  # refused before anything was written
    assert "CartPole-v1" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


class _StartedError(Exception):
    """Raised by ``on_start``: the run was set up; stop before training."""


def _stop(path: Path) -> None:
    raise _StartedError(path)


@pytest.mark.run
def test_resuming_a_run_stopped_at_its_return_target_says_it_continues(tmp_path, capsys):
    # `zoo train --resume` of the Quick start's run (stopped at --stop-at-return 475) trained on
    # without a word about why a "finished" run started again
    run = tmp_path / "early"
    result = quick_train(run, steps=1200, eval_every=400, stop_at_return=0.0)
    assert result.env_steps == 400 and not result.interrupted
    capsys.readouterr()
    with pytest.raises(_StartedError):
        zoo.train(resume=run, progress=False, on_start=_stop)
    err = capsys.readouterr().err
    assert (
        f"zoo: {run} stopped at env step 400 when an evaluation reached its --stop-at-return 0; "
        "resuming toward its budget of 1,200 env steps" in err
    )
