"""What a run reports when it returns: :class:`RunResult` (no JAX)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """What a finished (or interrupted) run reports."""

    run_dir: Path
    env_steps: int
    updates: int
    evaluations: list[dict[str, Any]]
    interrupted: bool = False

    @property
    def final_eval(self) -> dict[str, Any] | None:
        return self.evaluations[-1] if self.evaluations else None

    @property
    def best_return(self) -> float | None:
        """The best mean return over evaluations that finished a game (``None`` if none did)."""
        returns = [e["mean_return"] for e in self.evaluations if e.get("mean_return") is not None]
        return max(returns, default=None)
