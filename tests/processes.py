"""Helpers of the tests that drive ``zoo`` commands as real processes and signal them mid-run."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def checkpoint_steps(run: Path) -> list[int]:
    """The env steps of the checkpoints in ``run/checkpoints``, ascending (none: ``[]``)."""
    ckpt = run / "checkpoints"
    return sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) if ckpt.is_dir() else []


def wait_while_running(
    process: subprocess.Popen,
    ready: Callable[[], bool],
    what: str,
    timeout: float = 300,
    every: float = 0.1,
) -> None:
    """Poll ``ready()`` until it holds; fail with the process's output if it exits first, or
    naming ``what`` was awaited if ``timeout`` seconds pass."""
    deadline = time.time() + timeout
    while not ready():
        if process.poll() is not None:
            output = "".join(part or "" for part in process.communicate())
            raise AssertionError(f"exited {process.returncode} before {what}:\n{output[-3000:]}")
        assert time.time() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(every)
