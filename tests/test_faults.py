"""Issue 37: what a run survives. Every stop signal a scheduler sends ends with a checkpoint and a
``stopped`` record (a second signal stops at once), and every kind of damage to the newest
checkpoint (each item folder missing, a file missing, truncated, a byte flipped) falls back to
the previous checkpoint; either way the run resumes to its full budget with no metric row lost
or written twice.

The damage matrix runs whole behind ``long``; the fast tiers run one case of each kind of damage.
The signal tests start ``zoo`` as a process, as a scheduler does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from inprocess import run_cli
from tiny import FINISHED_RUN

import zoo
from zoo.runs.metrics import read_jsonl
from zoo.runs.rundir import read_history

PACKAGE_ROOT = str(Path(zoo.__file__).resolve().parent.parent)
LOG_EVERY = FINISHED_RUN["log_every"]
NEWEST = FINISHED_RUN["total_env_steps"]  # 1,200: checkpoints at 400, 800 and 1,200
PREVIOUS = NEWEST - FINISHED_RUN["checkpoint_every"]
RESUMED_BUDGET = NEWEST + 400


def steps(run: Path, name: str = "metrics.jsonl") -> list[int]:
    return [int(r["env_steps"]) for r in read_jsonl(run / name)]


# ------------------------------------------------------------------------- checkpoint damage


def _largest(folder: Path, pattern: str) -> Path:
    return max(folder.glob(pattern), key=lambda p: p.stat().st_size)


def _data_file(item: Path) -> Path:
    """The file that holds an item's data: its largest array, or the metadata's JSON."""
    return _largest(item, "*.npy") if any(item.glob("*.npy")) else item / "metadata"


def missing_item(item: Path) -> None:
    shutil.rmtree(item)


def missing_file(item: Path) -> None:
    _data_file(item).unlink()


def missing_manifest(item: Path) -> None:
    (item / ("manifest.json" if any(item.glob("*.npy")) else "metadata")).unlink()


def truncated(item: Path) -> None:
    target = _data_file(item)
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])


def flipped(item: Path) -> None:
    target = _data_file(item)
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))


DAMAGES: dict[str, Callable[[Path], None]] = {
    f.__name__: f for f in (missing_item, missing_file, missing_manifest, truncated, flipped)
}
ITEMS = ["learner", "replay", "counters", "key", "metadata"]
#: One case of each kind of damage, spread over the items, for the fast tiers.
QUICK = {
    ("learner", "missing_item"),
    ("replay", "truncated"),
    ("metadata", "flipped"),
    ("counters", "missing_file"),
    ("key", "missing_manifest"),
}
CASES = [
    pytest.param(
        item,
        damage,
        marks=pytest.mark.run if (item, damage) in QUICK else pytest.mark.long,
        id=f"{item}-{damage}",
    )
    for item in ITEMS
    for damage in DAMAGES
]


@pytest.mark.unit
def test_the_quick_cases_cover_every_kind_of_damage_and_item():
    assert {d for _, d in QUICK} == set(DAMAGES) and {i for i, _ in QUICK} == set(ITEMS)


@pytest.mark.parametrize(("item", "damage"), CASES)
def test_a_damaged_newest_checkpoint_resumes_from_the_previous_to_the_full_budget(
    finished_run, item, damage
):
    step_dir = finished_run / "checkpoints" / str(NEWEST)
    assert sorted(p.name for p in step_dir.iterdir() if p.is_dir()) == sorted(ITEMS)
    DAMAGES[damage](step_dir / item)
    code, _, err = run_cli("train", "--resume", finished_run, "--steps", RESUMED_BUDGET)
    assert code == 0, err
    assert "Traceback" not in err
    assert f"checkpoint {NEWEST} of {finished_run} is damaged" in err
    assert f"resuming from {PREVIOUS}" in err
    # no row lost, none written twice: the rows after 800 were truncated and trained again
    assert steps(finished_run) == list(range(LOG_EVERY, RESUMED_BUDGET + 1, LOG_EVERY))
    assert steps(finished_run, "eval.jsonl") == [NEWEST, RESUMED_BUDGET]
    resumed = next(e for e in reversed(read_history(finished_run)) if e["event"] == "resumed")
    assert resumed["from_env_steps"] == PREVIOUS
    assert resumed["damaged_checkpoints"][0]["step"] == NEWEST
    assert (finished_run / "damaged-checkpoints" / str(NEWEST)).is_dir()
    last = read_history(finished_run)[-1]
    assert (last["event"], last["status"], last["env_steps"]) == (
        "stopped",
        "finished",
        RESUMED_BUDGET,
    )


# --------------------------------------------------------------------------- stop signals

#: A run long enough to be stopped mid-way: CartPole, the host loop, a record every 60 steps
#: (1% of the budget).
SIGNAL_RUN = [
    "--steps",
    "6000",
    "--loop",
    "host",
    "--set",
    "replay.min_size=200",
    "--set",
    "network.hidden=[32]",
    "--eval-every",
    "6000",
    "--eval-episodes",
    "1",
    "--eval-max-steps",
    "200",
    "--checkpoint-every",
    "3000",
    "--progress",
    "off",
]


def _start(run: Path, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zoo.cli",
            "train",
            "dqn_cartpole",
            "--run-dir",
            str(run),
            *SIGNAL_RUN,
        ],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": PACKAGE_ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_records(run: Path, process: subprocess.Popen[str], count: int = 3) -> None:
    """Until the run has logged ``count`` records (it is inside its training loop)."""
    deadline = time.monotonic() + 240
    while len(read_jsonl(run / "metrics.jsonl")) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run logged nothing in 240 s"
        time.sleep(0.2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.process
def test_every_stop_signal_saves_a_checkpoint_and_the_run_resumes_whole(tmp_path, signum):
    # SIGTERM (docker stop, SLURM, Kubernetes, Ray) lost everything since the last checkpoint
    run = tmp_path / "run"
    process = _start(run, tmp_path)
    _wait_for_records(run, process)
    process.send_signal(signum)
    out, err = process.communicate(timeout=240)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    stopped = read_history(run)[-1]
    assert stopped["event"] == "stopped" and stopped["status"] == "interrupted"
    at = stopped["env_steps"]
    assert 0 < at < 6000
    assert f"interrupted at env step {at:,} (checkpoint saved there)" in out + err
    assert (run / "checkpoints" / str(at)).is_dir()
    assert steps(run)[-1] <= at
    code, _, err = run_cli("train", "--resume", run)
    assert code == 0, err
    assert steps(run) == list(range(60, 6001, 60))  # whole: every row once
    assert read_history(run)[-1]["status"] == "finished"


@pytest.mark.process
def test_a_second_signal_stops_at_once_and_the_run_keeps_its_last_checkpoint(tmp_path):
    # the first signal waits for the evaluation under way (the step it belongs to is then
    # checkpointed); a second one must not wait for it
    run = tmp_path / "run"
    argv = [*SIGNAL_RUN, "--checkpoint-every", "1500", "--eval-every", "3000"]
    argv += ["--eval-episodes", "400", "--eval-max-steps", "100000", "--progress", "1%"]
    process = subprocess.Popen(
        [sys.executable, "-m", "zoo.cli", "train", "dqn_cartpole", "--run-dir", str(run), *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PACKAGE_ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if "evaluation at env step 3,000: playing 400 games" in line:
            break
    process.send_signal(signal.SIGTERM)
    for line in process.stderr:
        seen.append(line)
        if "SIGTERM received: the evaluation under way plays to its end" in line:
            break
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=240)
    err = "".join(seen) + err
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "zoo: interrupted (SIGTERM)"
    assert not (run / "checkpoints" / "3000").exists()  # it did not wait for the evaluation
    code, _, err = run_cli("train", "--resume", run)
    assert code == 0, err
    resumed = next(e for e in reversed(read_history(run)) if e["event"] == "resumed")
    assert resumed["from_env_steps"] == 1500
    assert steps(run) == list(range(60, 6001, 60))


@pytest.mark.process
def test_a_signal_during_zoo_eval_is_one_line_and_exit_130(finished_run, tmp_path):
    # outside a training loop (setup, a restore, zoo eval) SIGTERM killed the process bare
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zoo.cli",
            "eval",
            str(finished_run),
            "--episodes",
            "500",
            "--progress",
            "1%",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": PACKAGE_ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # until the games are being played
        seen.append(line)
        if "games" in line and "/500" in line:
            break
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    err = "".join(seen) + err
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "zoo: interrupted (SIGTERM)"
    assert not (finished_run / "posthoc_eval.jsonl").exists()  # an unfinished evaluation
