"""What :func:`zoo.train` was asked, as one value: :class:`TrainRequest` (no JAX)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.runs import settings as run_settings
from zoo.runs.errors import RunRefusedError
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec

__all__ = ["TrainRequest"]


@dataclass(frozen=True)
class TrainRequest:
    """What :func:`train` was asked, as one value: the algorithm, where the run goes, how the
    process joins others, and the run settings given (by their names in :class:`RunSettings`;
    a setting left out or ``None`` is "not given": filled in from the preset or the table's rules
    for a new run, kept by a resumed run, which refuses another)."""

    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    overrides: Mapping[str, Any] | None = None
    run_dir: str | os.PathLike[str] | None = None
    resume: str | os.PathLike[str] | None = None
    restart: bool = False
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    distributed: bool = False
    progress: bool = True
    on_start: Callable[[Path], None] | None = None
    #: the table of settings (:class:`RunSettings` or a subclass with more of them)
    table: type[RunSettings] = RunSettings

    @property
    def total_env_steps(self) -> int | None:
        """The budget asked for (``None``: not given)."""
        return self.settings.get("total_env_steps")

    @property
    def loop(self) -> str | None:
        """The driver asked for (``None``: not given)."""
        return self.settings.get("loop")

    def given(self) -> dict[str, Any]:
        """Every run setting of the table as asked (``None`` where not given)."""
        return {row.name: self.settings.get(row.name) for row in run_settings.settings(self.table)}

    def check(self) -> None:
        """Refuse values no run can take, before anything is built or written.

        Raises:
          RunRefusedError: naming the flag and the allowed range.
          TypeError: a setting the table does not have.
        """
        run_settings.check_given(self.settings, table=self.table)
        async_only = ("actor_devices", "learner_devices", "max_lag")
        if self.loop not in (None, "async") and any(
            self.settings.get(name) is not None for name in async_only
        ):
            raise RunRefusedError(
                "--actor-devices, --learner-devices and --max-lag place the asynchronous "
                "driver: use them with --loop async"
            )
        if self.restart and self.resume is None:
            raise RunRefusedError(
                "--restart starts a run over in its own directory: use it with --resume RUN_DIR"
            )
        if (
            self.resume is not None
            and self.run_dir is not None
            and Path(self.run_dir).absolute() != Path(self.resume).absolute()
        ):
            raise RunRefusedError(
                "--run-dir and --resume name different directories; a resumed run stays in "
                "its own directory (omit --run-dir)"
            )
