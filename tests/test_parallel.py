"""Data-parallel learning: two forced host devices, and two jax.distributed processes.

XLA flags and jax.distributed must be set before JAX starts, so both run in subprocesses.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent


def run_worker(module: str, *args: str, env: dict[str, str] | None = None, timeout: int = 300):
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def results(process: subprocess.Popen, timeout: int = 300) -> list[dict]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_two_devices_give_the_single_device_update():
    worker = run_worker(
        "tests.workers.data_parallel",
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
    )
    rows = results(worker)
    names = ["prioritized_ddqn", "rainbow", "qr_dqn", "r2d2", "iqn", "r2d2_iqn"]
    assert [r["name"] for r in rows] == names  # IQN: each example's fractions as on one device
    for row in rows:
        # float tolerance: the two halves' gradients are summed in another order
        assert row["params"] <= 1e-6 * max(1.0, row["scale"]), row
        assert row["target"] <= 1e-6 * max(1.0, row["scale"]), row
        np.testing.assert_allclose(row["loss"][0], row["loss"][1], rtol=1e-5)
        assert row["updates"] == 3
        if row["priorities"] is not None:
            assert row["priorities"] <= 1e-5, row


@pytest.mark.parametrize(
    ("name", "path"), [("prioritized_ddqn", "host"), ("r2d2", "host"), ("pqn", "host")]
)
def test_training_loop_is_data_parallel_over_local_devices(name, path):
    """The loop body on 2 forced devices (shard_map) equals the loop on one device; for the
    rollout learner (PQN) each minibatch update is the one split, and a minibatch the devices
    cannot split is refused naming the rollout fields that set it.

    Only the host path: envpool's XLA step is a side-effecting custom call that XLA's SPMD
    partitioner cannot place, so with several devices runs use the host path (zoo.run picks it).
    """
    one = run_worker("tests.workers.loop_devices", name, path)
    two = run_worker(
        "tests.workers.loop_devices",
        name,
        path,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
    )
    single, double = results(one)[0], results(two)[0]
    assert (single["devices"], double["devices"]) == (1, 2)
    assert single["updates"] == double["updates"] > 10
    for a, b in zip(single["params"], double["params"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    if single["priorities"] is not None:
        np.testing.assert_allclose(single["priorities"], double["priorities"], rtol=1e-4, atol=1e-5)
    assert single["refused"] is None
    if name == "pqn":
        assert double["refused"] == (
            "rollout.length × num_envs / rollout.minibatches = 8 × 2 / 16 gives 1 items per "
            "update, which cannot be split evenly over the learner's 2 devices: choose values "
            "that make it a multiple of 2"
        )
    else:
        assert double["refused"] is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_with_jax_distributed():
    port = str(free_port())
    single = run_worker("tests.workers.distributed", port, "single")
    workers = [run_worker("tests.workers.distributed", port, str(i)) for i in range(2)]
    try:
        rows = [results(w)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    reference = results(single)[0]["checksum"]
    for row in rows:
        assert row["updates"] == 3 and row["priorities"] == 4  # half of the batch of 8
        np.testing.assert_allclose(row["checksum"], reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(rows[0]["checksum"], rows[1]["checksum"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
