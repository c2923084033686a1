"""Metric sinks of a run: JSON lines and TensorBoard event files (progress on stderr is
:mod:`zoo.runs.progress`).

Every record carries ``env_steps`` (transitions) so that a resumed run can truncate what was logged
after its last checkpoint: nothing is duplicated and nothing checkpointed is lost.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from zoo.fileio import open_append, write_atomic
from zoo.runs.rundir import RunDir, read_jsonl

__all__ = [
    "JsonlWriter",
    "MetricsLogger",
    "read_jsonl",
    "truncate_jsonl",
    "windowed_rate",
]


def _plain(value: Any) -> Any:
    """JSON-friendly scalars (numpy and JAX scalars become Python numbers; NaN and infinities,
    which JSON lacks, become null rather than strings a reader would have to parse)."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def truncate_jsonl(path: str | os.PathLike[str], env_steps: int) -> int:
    """Keep only records with ``env_steps <= env_steps`` (atomic rewrite); returns how many."""
    path = Path(path)
    if not path.exists():
        return 0
    kept = [r for r in read_jsonl(path) if int(r.get("env_steps", 0)) <= env_steps]
    write_atomic(path, "".join(json.dumps(record) + "\n" for record in kept))
    return len(kept)


def windowed_rate(records: list[dict[str, Any]], start: int = 0) -> tuple[float, float]:
    """Env steps/s and updates/s between the first training record after ``start`` and the last.

    A training record's rates are since its session started (compile included); its elapsed time
    is ``env_steps / env_steps_per_s``, so a window's rate needs no timestamps. A record *at*
    ``start`` is written before that step's checkpoint (a trainer logs, then evaluates, then
    checkpoints), so a window starting there would time the checkpoint too (a 1M Atari replay:
    6.6 GB written): the window starts at the next record. Records of one session only (a
    resume restarts the rates).

    Raises:
      ValueError: fewer than two training records after ``start``.
    """
    rows = [r for r in records if r["env_steps"] > start and r.get("env_steps_per_s")]
    if len(rows) < 2:
        raise ValueError(f"need two training records after env step {start}; got {len(rows)}")
    a, b = rows[0], rows[-1]
    seconds = b["env_steps"] / b["env_steps_per_s"] - a["env_steps"] / a["env_steps_per_s"]
    return (b["env_steps"] - a["env_steps"]) / seconds, (b["updates"] - a["updates"]) / seconds


class JsonlWriter:
    """Appends one JSON object per line and flushes it (readable while the run goes on)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._file: TextIO = open_append(self.path)

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
        run = RunDir(self.run_dir)
        if resume_from is not None:
            truncate_jsonl(run.metrics_file, resume_from)
            truncate_jsonl(run.evals_file, resume_from)
        self.metrics = JsonlWriter(run.metrics_file)
        self.evals = JsonlWriter(run.evals_file)
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
