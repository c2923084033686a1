"""Metric sinks of a run: JSON lines, TensorBoard event files, and a progress line.

Every record carries ``env_steps`` (transitions) so that a resumed run can truncate what was logged
after its last checkpoint: nothing is duplicated and nothing checkpointed is lost.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = ["JsonlWriter", "MetricsLogger", "Progress", "read_jsonl", "truncate_jsonl"]


def _plain(value: Any) -> Any:
    """JSON-friendly scalars (numpy and JAX scalars become Python numbers; NaN and infinities,
    which JSON lacks, become null rather than strings a reader would have to parse)."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete records of a JSON-lines file (a torn last line from a crash, and anything
    that is not a JSON object, is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def truncate_jsonl(path: str | os.PathLike[str], env_steps: int) -> int:
    """Keep only records with ``env_steps <= env_steps`` (atomic rewrite); returns how many."""
    path = Path(path)
    if not path.exists():
        return 0
    kept = [r for r in read_jsonl(path) if int(r.get("env_steps", 0)) <= env_steps]
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for record in kept:
            f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(kept)


class JsonlWriter:
    """Appends one JSON object per line and flushes it (readable while the run goes on)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._file: TextIO = self.path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json.dumps({k: _plain(v) for k, v in record.items()}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class MetricsLogger:
    """``metrics.jsonl``, ``eval.jsonl`` and TensorBoard events under a run directory.

    Args:
      run_dir: the run directory.
      resume_from: on resume, the checkpoint's ``env_steps``: later records are truncated and
        TensorBoard is told to purge events after it.
      tensorboard: write TensorBoard event files under ``run_dir/tb``.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        resume_from: int | None = None,
        tensorboard: bool = True,
    ):
        self.run_dir = Path(run_dir)
        if resume_from is not None:
            truncate_jsonl(self.run_dir / "metrics.jsonl", resume_from)
            truncate_jsonl(self.run_dir / "eval.jsonl", resume_from)
        self.metrics = JsonlWriter(self.run_dir / "metrics.jsonl")
        self.evals = JsonlWriter(self.run_dir / "eval.jsonl")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(
                str(self.run_dir / "tb"), purge_step=resume_from, flush_secs=10
            )

    def _scalars(self, prefix: str, record: Mapping[str, Any]) -> None:
        if self._tb is None:
            return
        step = int(record["env_steps"])
        for key, value in record.items():
            value = _plain(value)
            if (
                key != "env_steps"
                and isinstance(value, int | float)
                and not isinstance(value, bool)
            ):
                self._tb.add_scalar(f"{prefix}/{key}", value, step)

    def log(self, record: Mapping[str, Any]) -> None:
        """A training record (must contain ``env_steps``)."""
        self.metrics.write(record)
        self._scalars("train", record)

    def log_eval(self, record: Mapping[str, Any]) -> None:
        """An evaluation record (must contain ``env_steps``)."""
        self.evals.write(record)
        self._scalars("eval", record)

    def close(self) -> None:
        self.metrics.close()
        self.evals.close()
        if self._tb is not None:
            self._tb.close()


class Progress:
    """A one-line progress display on stderr: env steps/s, updates/s and recent returns.

    Redraws at most every ``interval`` seconds, only when stderr is a terminal (or ``force``).
    """

    def __init__(self, total: int, *, interval: float = 0.5, force: bool = False, stream=None):
        self.total = total
        self.interval = interval
        self.stream = stream or sys.stderr
        self.enabled = force or self.stream.isatty()
        self.returns: deque[float] = deque(maxlen=20)
        self._last = 0.0
        self._mark = (time.perf_counter(), 0, 0)
        self.env_rate = 0.0
        self.update_rate = 0.0

    def add_returns(self, returns: Iterable[float]) -> None:
        self.returns.extend(float(r) for r in returns)

    def rates(self, env_steps: int, updates: int) -> tuple[float, float]:
        """Env steps/s and updates/s since the previous call (also kept as attributes)."""
        now = time.perf_counter()
        t0, e0, u0 = self._mark
        if now > t0:
            self.env_rate = (env_steps - e0) / (now - t0)
            self.update_rate = (updates - u0) / (now - t0)
        self._mark = (now, env_steps, updates)
        return self.env_rate, self.update_rate

    def update(self, env_steps: int, updates: int, *, final: bool = False) -> None:
        now = time.perf_counter()
        if not self.enabled or (not final and now - self._last < self.interval):
            return
        self._last = now
        env_rate, update_rate = self.rates(env_steps, updates)
        recent = f"{sum(self.returns) / len(self.returns):8.1f}" if self.returns else "       -"
        frac = env_steps / max(self.total, 1)
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        line = (
            f"\r[{bar}] {env_steps:>10,}/{self.total:,} env steps  {env_rate:8.0f} steps/s  "
            f"{update_rate:6.0f} updates/s  return(last {len(self.returns)}) {recent}"
        )
        self.stream.write(line + ("\n" if final else ""))
        self.stream.flush()
