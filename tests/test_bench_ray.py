"""``zoo bench --launcher ray`` on a real local Ray head: a worker killed mid-run, then a rerun
that completes only what was missing.

The head is started with ``ray start --head`` in a temporary directory of its own and stopped by
ending the processes it started (found by that directory, and their children), never with
``ray stop``, which would end every Ray process of the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from processes import checkpoint_steps as _steps

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'zoo-rl[ray]'")

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
KEYS = [f"{a}/CartPole-v1/seed{s}" for a in ("dqn_cartpole", "double_dqn_cartpole") for s in (0, 1)]
BENCH = [
    "bench",
    "classic",
    "dqn_cartpole",
    "double_dqn_cartpole",
    "--games",
    "CartPole-v1",
    "--seeds",
    "2",
    "--frames",
    "3000",
    "--checkpoint-every",
    "500",
    "--eval-episodes",
    "2",
    "--progress",
    "off",
    "--reps",
    "1000",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_of(marker: str) -> list[int]:
    """The processes whose command line names ``marker``, and all their descendants."""
    parents: dict[int, int] = {}
    roots = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents[int(entry.name)] = ppid
        if marker in cmdline and int(entry.name) != os.getpid():
            roots.append(int(entry.name))
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return sorted(found)


@pytest.fixture
def ray_head():
    """A Ray head of 2 CPUs on a free port, in a temporary directory of its own."""
    temp = tempfile.mkdtemp(prefix="zooray", dir="/tmp")  # short: Ray's socket paths are limited
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run(
        [
            str(RAY),
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--num-gpus",
            "0",
            "--port",
            str(port),
            "--object-store-memory",
            str(200 * 2**20),
            "--temp-dir",
            temp,
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=180,
    )
    try:
        yield f"127.0.0.1:{port}", env
    finally:
        for pid in _processes_of(temp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _snapshot(run: Path) -> dict[str, object]:
    files = sorted(p for p in (run / "checkpoints").rglob("*") if p.is_file())
    return {
        "metrics": (run / "metrics.jsonl").read_text(),
        "checkpoints": [(str(p.relative_to(run)), p.stat().st_mtime_ns) for p in files],
    }


def _worker_pid(log: Path) -> int:
    """The pid of the Ray worker running a task, from the first line it wrote to its log."""
    line = next(ln for ln in log.read_text().splitlines() if "started on" in ln)
    return int(line.split(", pid ")[1].split(",")[0])


@pytest.mark.process
@pytest.mark.xdist_group("timing")
def test_ray_launcher_rerun_after_a_killed_worker_completes_only_what_was_missing(
    ray_head, tmp_path
):
    address, env = ray_head
    root = tmp_path / "bench"
    command = [
        sys.executable,
        "-c",
        "import sys; from zoo.cli import main; sys.exit(main())",
        *BENCH,
        "--run-dir",
        str(root),
        "--launcher",
        "ray",
        "--ray-address",
        address,
    ]
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        deadline = time.time() + 400
        victim = None
        while victim is None:
            assert process.poll() is None, process.stdout.read()
            assert time.time() < deadline, "no run reached a checkpoint in time"
            for key in KEYS:
                steps = _steps(root / key)
                if steps and steps[-1] < 3000:
                    victim = key
                    break
            time.sleep(0.1)
        os.kill(_worker_pid(root / "logs" / f"{victim}.log"), signal.SIGKILL)
        out, _ = process.communicate(timeout=400)
    assert process.returncode == 1, out
    assert f"FAILED {victim}:" in out and f"(log: {root / 'logs' / victim}.log)" in out
    assert "3 run to the budget, 1 failed" in out
    killed_at = _steps(root / victim)[-1]
    assert killed_at < 3000
    others = [k for k in KEYS if k != victim]
    for key in others:
        assert _steps(root / key)[-1] == 3000
    before = {k: _snapshot(root / k) for k in others}
    assert not (root / "bench.md").exists()

    rerun = subprocess.run(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400
    )
    out = rerun.stdout
    assert rerun.returncode == 0, out
    assert "3 finished (reused), 1 to resume, 0 to train" in out
    for key in others:
        assert f"{root / key}: reused (finished at 3,000 env steps)" in out
    assert f"finished {victim}: resumed from {killed_at:,} env steps" in out
    assert "4 runs: 3 reused, 1 run to the budget, 0 failed, 0 not finished" in out
    assert {k: _snapshot(root / k) for k in others} == before  # not submitted again
    assert _steps(root / victim)[-1] == 3000
    assert json.loads((root / "bench.json").read_text())


@pytest.mark.compiled
def test_ray_launcher_without_a_cluster_says_how_to_start_one(tmp_path, capsys):
    from zoo import cli

    code = cli.main(
        [
            *BENCH,
            "--run-dir",
            str(tmp_path / "b"),
            "--launcher",
            "ray",
            "--ray-address",
            f"127.0.0.1:{_free_port()}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "no Ray cluster reachable" in err and "ray start --head" in err
    assert "Traceback" not in err
