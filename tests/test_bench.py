"""``zoo bench``'s running half: the matrix, the local executor's admission rule with real child
processes, and ``zoo bench classic`` end to end with an interruption and a rerun.

The end-to-end budgets (8,000 CartPole transitions) check bookkeeping, not learning.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from inprocess import run_cli
from processes import checkpoint_steps as _steps
from processes import wait_while_running

from zoo.bench.local import admit, run_local
from zoo.matrix import agent_steps

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Fake:
    """A job with made-up memory figures; its child process records when it ran."""

    key: str
    memory: int
    cpus: int
    log_path: Path
    record: Path
    seconds: float = 1.0
    fail: bool = False

    def run(self) -> str:
        start = time.time()
        time.sleep(self.seconds)
        if self.fail:
            raise RuntimeError(f"{self.key} broke on purpose")
        self.record.write_text(json.dumps([start, time.time(), os.getpid()]))
        return "ok"


@dataclass(frozen=True)
class Affinity:
    """A job whose child process records the cores it may run on, while its sibling runs."""

    key: str
    log_path: Path
    record: Path
    memory: int = 1
    cpus: int = 1

    def run(self) -> str:
        self.record.write_text(json.dumps(sorted(os.sched_getaffinity(0))))
        time.sleep(0.5)
        return "ok"


@pytest.mark.unit
@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs Linux and two cores",
)
def test_runs_at_once_are_pinned_to_disjoint_cores_and_a_lone_run_keeps_every_core(tmp_path):
    from zoo.bench.local import pin_plan

    mine = sorted(os.sched_getaffinity(0))
    pair = [Affinity(f"p{i}", tmp_path / f"p{i}.log", tmp_path / f"p{i}.json") for i in range(2)]
    stream = io.StringIO()
    results = run_local(pair, jobs=2, memory=None, cpus=2, progress="off", stream=stream)
    assert {r.state for r in results} == {"done"}
    seen = [json.loads(j.record.read_text()) for j in pair]
    assert [len(c) for c in seen] == [1, 1] and seen[0] != seen[1]
    assert set(seen[0] + seen[1]) <= set(mine)
    assert f"started p0 on core(s) {seen[0][0]}" in stream.getvalue()
    # the bench's own process is not pinned, and a lone run keeps every core
    assert sorted(os.sched_getaffinity(0)) == mine
    lone = Affinity("lone", tmp_path / "lone.log", tmp_path / "lone.json")
    run_local([lone], jobs=2, memory=None, cpus=2, progress="off", stream=io.StringIO())
    assert json.loads(lone.record.read_text()) == mine
    # the plan: cores leave the free list as they are given; too few free cores: not pinned
    free = [0, 1, 2]
    assert pin_plan(free, 2, 2) == [0, 1] and free == [2]
    assert pin_plan(free, 2, 2) is None and free == [2]
    assert pin_plan([0, 1], 1, 1) is None


@pytest.mark.unit
def test_admit_keeps_jobs_within_memory_cores_and_count():
    @dataclass(frozen=True)
    class J:
        key: str
        memory: int
        cpus: int = 1

    a, b, c, d = J("a", 5), J("b", 4), J("c", 3), J("d", 2)
    # 5 + 4 > 8: b waits, c (3) fits beside a; d would make 10
    assert admit([a, b, c, d], [], memory=8, cpus=8, jobs=4) == [a, c]
    assert admit([b, c, d], [a], memory=8, cpus=8, jobs=4) == [c]
    assert admit([a, b, c, d], [], memory=8, cpus=8, jobs=1) == [a]
    assert admit([a, b, c, d], [], memory=None, cpus=2, jobs=4) == [a, b]
    assert admit([J("w", 1, cpus=2)], [J("r", 1)], memory=None, cpus=2, jobs=4) == []
    assert admit([a], [J("big", 8)], memory=8, cpus=8, jobs=4) == []


@pytest.mark.unit
def test_local_executor_never_exceeds_memory_or_jobs_with_real_children(tmp_path):
    memories = [5, 4, 3, 3, 2, 4]
    jobs = [
        Fake(f"j{i}", m, 1, tmp_path / "logs" / f"j{i}.log", tmp_path / f"j{i}.json")
        for i, m in enumerate(memories)
    ]
    broken = Fake("broken", 1, 1, tmp_path / "logs" / "broken.log", tmp_path / "b.json", 0.2, True)
    stream = io.StringIO()
    results = run_local([*jobs, broken], jobs=2, memory=8, cpus=4, progress="off", stream=stream)
    by_key = {r.key: r for r in results}
    assert {k: r.state for k, r in by_key.items()} == {
        **{j.key: "done" for j in jobs},
        "broken": "failed",
    }
    # a failure is reported with its error and log, and the others went on
    assert by_key["broken"].message == "RuntimeError: broken broke on purpose"
    assert by_key["broken"].log_path == broken.log_path
    assert "Traceback" in broken.log_path.read_text()
    assert f"FAILED broken: RuntimeError: broken broke on purpose (log: {broken.log_path})" in (
        stream.getvalue()
    )
    # what the children recorded: separate processes, never more than 2 at once nor 8 units
    spans = {j.key: json.loads(j.record.read_text()) for j in jobs}
    assert len({pid for _, _, pid in spans.values()} | {os.getpid()}) == len(jobs) + 1
    memory = {j.key: j.memory for j in jobs}
    overlapped = False
    for start, _, _ in spans.values():
        alive = [k for k, (s, e, _) in spans.items() if s <= start < e]
        assert len(alive) <= 2, alive
        assert sum(memory[k] for k in alive) <= 8, alive
        overlapped |= len(alive) == 2
    assert overlapped  # it did run jobs side by side


@pytest.mark.unit
def test_bench_refuses_bad_input_before_anything_runs(tmp_path):
    root = tmp_path / "b"
    cases = {
        ("classicc", "dqn"): "unknown suite 'classicc'; did you mean 'classic'?",
        ("classic", "dqn_nature"): "preset 'dqn_nature' runs under protocol 'nature_2015', not "
        "the suite's 'classic'",
        ("classic", "dqn", "--games", "Pong-v5"): "--games: Pong-v5 not in suite 'classic'",
        ("classic", "dqn", "--frames", "3000"): "replay.min_size=20,000 is more than the budget",
        ("classic", "c51", "preset:c51"): "preset 'c51' runs under protocol",
        ("classic", "dqn", "dqn"): "dqn named twice",
        ("atari100k", "dqn", "--frames", "3"): "--frames 3 is less than one agent step (4 frames)",
        ("classic",): "name the algorithms or presets to run on classic",
    }
    for args, message in cases.items():
        code, out, err = run_cli("bench", *args, "--run-dir", str(root))
        assert code == 2, (args, out, err)
        assert message in err and "Traceback" not in err, (args, err)
    assert not root.exists()
    code, out, _ = run_cli("bench", "--list-suites")
    assert code == 0 and "classic" in out and "atari100k" in out


@pytest.mark.unit
def test_frames_become_agent_steps_rounded_down_with_a_note():
    notes: list[str] = []
    assert agent_steps(400_000, 4, notes.append) == 100_000 and notes == []
    assert agent_steps(10, 4, notes.append) == 2
    assert notes == [
        "note: 10 frames is not a multiple of the frame skip 4; training 2 agent steps (8 frames)"
    ]
    with pytest.raises(ValueError, match="--frames 3 is less than one agent step"):
        agent_steps(3, 4)


SUITE_ARGS = ["classic", "dqn_cartpole", "double_dqn_cartpole", "--games", "CartPole-v1"]
# long enough that a fast machine's compiled path (~5k steps/s) leaves the second run a
# window of over a second between its first checkpoint and its end, for the interrupt
BUDGET = 8000
FAST = ["--seeds", "2", "--frames", str(BUDGET), "--checkpoint-every", "500"]
FAST += ["--eval-episodes", "2"]
FAST += ["--eval-max-steps", "1000"]  # never binding here (2 CartPole games ≤ 1000 steps)
# the matrix order: seed-major, then game, then the algorithms as given
KEYS = [f"{a}/CartPole-v1/seed{s}" for s in (0, 1) for a in ("dqn_cartpole", "double_dqn_cartpole")]


def _snapshot(run: Path) -> dict[str, object]:
    files = sorted(p for p in (run / "checkpoints").rglob("*") if p.is_file())
    return {
        "metrics": (run / "metrics.jsonl").read_text(),
        "eval": (run / "eval.jsonl").read_text(),
        "checkpoints": [(str(p.relative_to(run)), p.stat().st_mtime_ns) for p in files],
    }


@pytest.mark.process
def test_bench_classic_interrupted_then_rerun_reuses_resumes_and_reports(tmp_path):
    """One run at a time until the first has finished and the second has a checkpoint, then
    SIGINT to `zoo bench`: the second saves a checkpoint and stops, the last two never start.
    The rerun (two at a time) reuses the first untouched, resumes the second, trains the others
    and writes the report."""
    root = tmp_path / "bench"
    first, second = (root / k for k in KEYS[:2])
    command = [
        sys.executable,
        "-c",
        "import sys; from zoo.cli import main; sys.exit(main())",
        "bench",
        *SUITE_ARGS,
        *FAST,
        "--run-dir",
        str(root),
        "--jobs",
        "1",
        "--progress",
        "off",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        wait_while_running(
            process,
            lambda: _steps(first)[-1:] == [BUDGET] and bool(_steps(second)),
            "the first run finished and the second's checkpoint",
        )
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 130, out
    assert "launcher local: one run at a time on all" in out and "(not pinned)" in out
    assert "interrupt: no new runs start" in out
    assert f"interrupted {KEYS[1]}: interrupted at" in out
    assert "interrupted: rerun the same command to resume" in out
    stopped = _steps(second)[-1]
    assert 0 < stopped < BUDGET
    assert not (root / KEYS[2]).exists() and not (root / KEYS[3]).exists()
    assert not (root / "bench.md").exists()
    before = _snapshot(first)

    code, out, err = run_cli("bench", *SUITE_ARGS, *FAST, "--run-dir", str(root), "--jobs", "2")
    assert code == 0, out + err
    assert "launcher local: up to 2 runs at once on" in out and ", 1 each (pinned)" in out
    assert f"{first}: reused (finished at {BUDGET:,} env steps)" in out
    assert f"finished {KEYS[1]}: resumed from {stopped:,} env steps" in err
    for key in KEYS[2:]:
        assert f"finished {key}: trained" in err
    assert "4 runs: 1 reused, 3 run to the budget, 0 failed, 0 not finished" in out
    assert _snapshot(first) == before  # reused: not a file touched
    for key in KEYS:
        from zoo.runs.metrics import read_jsonl

        steps = [r["env_steps"] for r in read_jsonl(root / key / "metrics.jsonl")]
        assert steps[-1] == BUDGET and steps == sorted(set(steps))
        assert yaml.safe_load((root / key / "run.yaml").read_text())["eval_max_steps"] == 1000
    assert "resuming from" in (root / "logs" / f"{KEYS[1]}.log").read_text()
    report = json.loads((root / "bench.json").read_text())
    assert (root / "bench.md").is_file() and f"report: {root / 'bench.md'}" in out
    assert report  # the statistics are tests/test_bench_report.py's


def _events(run: Path) -> list[dict]:
    path = run / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _stops(run: Path) -> list[str]:
    return [e["status"] for e in _events(run) if e["event"] == "stopped"]


@pytest.mark.process
def test_no_trainer_outlives_its_bench_killed_or_terminated(tmp_path):
    """SIGKILL to `zoo bench`: its running child notices, saves a checkpoint and stops (nothing
    trains on unseen). SIGTERM to the rerun: as Ctrl-C, the run checkpoints and the bench exits
    130. Each time the run's history says `interrupted`, and the next rerun resumes it."""
    root = tmp_path / "bench"
    run = root / "dqn_cartpole" / "CartPole-v1" / "seed0"
    command = [
        sys.executable,
        "-c",
        "import sys; from zoo.cli import main; sys.exit(main())",
        "bench",
        "classic",
        "dqn_cartpole",
        "--games",
        "CartPole-v1",
        "--frames",
        "200000",
        "--checkpoint-every",
        "500",
        "--eval-every",
        "100000",
        "--run-dir",
        str(root),
        "--progress",
        "off",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for sig, stops in ((signal.SIGKILL, 1), (signal.SIGTERM, 2)):
        with subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as process:
            start = (_steps(run)[-1:] or [0])[0]
            wait_while_running(
                process, lambda s=start: (_steps(run)[-1:] or [0])[0] > s, "a new checkpoint"
            )
            process.send_signal(sig)
            out, _ = process.communicate(timeout=120)
        if sig == signal.SIGTERM:
            assert process.returncode == 130, out
            assert "interrupt: no new runs start" in out
        deadline = time.time() + 120
        while len(_stops(run)) < stops:  # the child, orphaned or told, stops by itself
            assert time.time() < deadline, _events(run)
            time.sleep(0.2)
        assert _stops(run) == ["interrupted"] * stops
        assert 0 < _steps(run)[-1] < 200_000
    assert [e["event"] for e in _events(run)].count("resumed") == 1


@pytest.mark.compiled
def test_matrix_is_seed_major_then_game_then_algorithm(tmp_path):
    """A benchmark stopped part-way holds every algorithm on the same (game, seed) cells: the
    planned order is seed 0 of each game (suite order) and algorithm (as given), then seed 1."""
    from zoo.bench.plan import plan_bench
    from zoo.bench.suites import get_suite

    suite = get_suite("classic")
    games = list(suite.games[:2])
    tasks = plan_bench(
        suite,
        ["dqn_cartpole", "double_dqn_cartpole"],
        seeds=2,
        root=tmp_path / "b",
        games=games[::-1],
        frames=30_000,
        log=lambda _: None,
    )
    order = [(t.target.seed, t.target.env, t.key.split("/")[0]) for t in tasks]
    expected = [
        (seed, game, algo)
        for seed in (0, 1)
        for game in games
        for algo in ("dqn_cartpole", "double_dqn_cartpole")
    ]
    assert order == expected
