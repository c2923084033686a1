"""Training across processes (zoo.runs.distributed): two ``zoo train`` processes joined by
jax.distributed (gloo on CPU) train one run, keep identical parameters, survive ``kill -9`` of
the pair and resume from the newest checkpoint both completed.

jax.distributed must be initialised before JAX starts, so every process is a subprocess.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import zoo
from zoo.runs.rundir import RunRefusedError, complete_steps, read_history, read_jsonl

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 1_600
FLAGS = [
    "--steps", str(BUDGET), "--checkpoint-every", "200", "--eval-every", "800",
    "--eval-episodes", "2", "--set", "replay.min_size=100", "--set", "replay.capacity=2000",
    "--progress", "off",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(run: Path, k: int, port: int, *args: str) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "zoo.cli", "train", *args, "--run-dir", str(run),
        "--num-processes", "2", "--process-id", str(k), "--coordinator", f"127.0.0.1:{port}",
    ]  # fmt: skip
    return subprocess.Popen(
        command,
        cwd=run.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(processes: list[subprocess.Popen], code: int = 0, timeout: float = 600) -> list[str]:
    errors = []
    try:
        for p in processes:
            _, err = p.communicate(timeout=timeout)
            errors.append(err)
            assert p.returncode == code, err[-3000:]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
    return errors


def learner_files(folder: Path, step: int) -> dict[str, bytes]:
    item = folder / "checkpoints" / str(step) / "learner"
    return {p.name: p.read_bytes() for p in sorted(item.glob("*.npy"))}


def replay_shapes(folder: Path, step: int) -> list[tuple[int, ...]]:
    item = folder / "checkpoints" / str(step) / "replay"
    return [np.load(p, mmap_mode="r").shape for p in sorted(item.glob("*.npy"))]


def wait_for(folders: list[Path], step: int, processes: list[subprocess.Popen]) -> None:
    """Until every process has completed its checkpoint at ``step``."""
    deadline = time.monotonic() + 600
    while not all(step in complete_steps(f / "checkpoints") for f in folders):
        assert all(p.poll() is None for p in processes), [
            p.communicate()[1][-2000:] for p in processes
        ]
        assert time.monotonic() < deadline, f"the pair never reached its checkpoint at {step}"
        time.sleep(0.2)


@pytest.mark.timeout(1200)
@pytest.mark.process
def test_two_processes_train_one_run_stop_together_survive_kill_9_and_resume(tmp_path):
    run = tmp_path / "run"
    folders = [run, run / "processes" / "1"]
    # Ctrl-C on one process stops both at the next log, each with a checkpoint
    port = free_port()  # process 0's coordinator, which process 1 joins
    pair = [start(run, k, port, "dqn_cartpole", *FLAGS) for k in (0, 1)]
    try:
        wait_for(folders, 200, pair)
        pair[1].send_signal(signal.SIGINT)
        said = finish(pair, code=130)  # interrupted, as one process
        assert all("on every process, with --num-processes" in err for err in said)
    finally:
        for p in pair:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    stopped = read_history(run)[-1]
    assert stopped["event"] == "stopped" and stopped["status"] == "interrupted"
    interrupted_at = stopped["env_steps"]
    assert 200 <= interrupted_at < BUDGET
    assert [complete_steps(f / "checkpoints")[-1] for f in folders] == [interrupted_at] * 2

    # kill -9 of the pair, resumed, once both have completed a later checkpoint
    port = free_port()
    pair = [start(run, k, port, "--resume", str(run), "--progress", "off") for k in (0, 1)]
    later = (interrupted_at // 200 + 2) * 200
    try:
        wait_for(folders, later, pair)
    finally:
        for p in pair:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    killed_at = [complete_steps(f / "checkpoints")[-1] for f in folders]
    assert min(killed_at) < BUDGET

    # one process cannot resume a run of two: its replay is in two shards
    alone = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "train", "--resume", str(run)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert alone.returncode == 2, alone.stderr[-2000:]
    assert "trained by 2" in alone.stderr and "resume it with 2" in alone.stderr

    port = free_port()
    resumed = [start(run, k, port, "--resume", str(run), "--progress", "off") for k in (0, 1)]
    finish(resumed)

    # one run: process 0 owns the records, both keep checkpoints of their own shard
    history = read_history(run)
    resume = [e for e in history if e["event"] == "resumed"]
    assert [e["from_env_steps"] for e in resume] == [interrupted_at, min(killed_at)]
    assert history[-1]["event"] == "stopped" and history[-1]["status"] == "finished"
    assert not (run / "processes" / "1" / "history.jsonl").exists()
    for folder in folders:
        assert complete_steps(folder / "checkpoints")[-1] == BUDGET
    # the learner is identical on both processes, to the byte
    states = [learner_files(f, BUDGET) for f in folders]
    assert states[0] and states[0] == states[1]
    # each process holds half of the replay's 2,000 transitions (one environment each)
    for folder in folders:
        assert max(max(s) for s in replay_shapes(folder, BUDGET) if s) == 1_000
    # the run counts both processes' transitions: 2 per vector step, one update per
    # update_period (2) of them once min_size (100) are in, as one process of 2 envs would
    records = read_jsonl(run / "metrics.jsonl")
    steps = [r["env_steps"] for r in records]
    assert steps == sorted(set(steps)) and steps[-1] == BUDGET
    assert all(s % 2 == 0 for s in steps)
    assert records[-1]["updates"] == (BUDGET - 100) // 2 + 1
    evaluations = read_jsonl(run / "eval.jsonl")
    assert [e["env_steps"] for e in evaluations] == [800, 1600]
    assert not read_jsonl(run / "processes" / "1" / "eval.jsonl")


@pytest.mark.timeout(900)
@pytest.mark.process
def test_two_processes_train_with_the_asynchronous_driver(tmp_path):
    # each process: an actor thread on its virtual CPU device 0, the learner on device 1, the
    # update data-parallel over both processes' learner devices
    run = tmp_path / "run"
    port = free_port()
    flags = ["--steps", "600", "--checkpoint-every", "300", "--eval-every", "600"]
    pair = [start(run, k, port, "dqn_cartpole", *FLAGS, *flags, "--loop", "async") for k in (0, 1)]
    said = finish(pair)
    assert "actor on cpu:0, learner on cpu:1" in said[0]
    assert "data-parallel over 2 devices of 2 processes" in said[1]
    folders = [run, run / "processes" / "1"]
    states = [learner_files(f, 600) for f in folders]
    assert states[0] and states[0] == states[1]
    for folder in folders:
        records = read_jsonl(folder / "metrics.jsonl")
        assert {r["loop"] for r in records} == {"async"}
        assert all(r["async_max_lag"] <= r["async_max_lag_bound"] == 1 for r in records)
        assert all(r["async_ratio_gap"] <= r["async_ratio_tolerance"] for r in records)
        assert records[-1]["env_steps"] == 600
        assert records[-1]["updates"] == (600 - 100) // 2 + 1


GROUP = {"num_processes": 2, "process_id": 0, "coordinator": "h:1", "run_dir": "x"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({**GROUP, "coordinator": None}, "need a coordinator"),
        ({**GROUP, "run_dir": None}, "needs --run-dir"),
        ({**GROUP, "process_id": 3}, "--process-id must be from 0 to 1"),
        ({**GROUP, "loop": "compiled"}, "uses --loop host or async"),
    ],
)
@pytest.mark.unit
def test_bad_process_groups_are_refused_before_anything_starts(kwargs, message, tmp_path):
    with pytest.raises(RunRefusedError, match=message):
        zoo.train("dqn_cartpole", **kwargs)
    assert not (tmp_path / "x").exists()


@pytest.mark.unit
def test_process_group_variables_must_be_numbers(monkeypatch, capsys, tmp_path):
    from zoo.cli import main

    monkeypatch.setenv("ZOO_NUM_PROCESSES", "two")
    assert main(["train", "dqn_cartpole", "--run-dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--num-processes / ZOO_NUM_PROCESSES must be a whole number, got 'two'" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.unit
def test_the_cli_reads_the_group_from_zoo_variables(monkeypatch, capsys, tmp_path):
    # the variables stand in for the flags: two processes and no coordinator is refused as
    # the flags would be, before anything starts
    from zoo.cli import main

    monkeypatch.setenv("ZOO_NUM_PROCESSES", "2")
    monkeypatch.setenv("ZOO_PROCESS_ID", "1")
    assert main(["train", "dqn_cartpole", "--run-dir", str(tmp_path / "x")]) == 2
    assert "2 processes need a coordinator" in capsys.readouterr().err
