"""The two errors of the run job (no JAX, no other import of the package)."""

from __future__ import annotations

__all__ = ["RunError", "RunRefusedError"]


class RunError(RuntimeError):
    """A run could not start or continue; the message says why and how to fix it."""


class RunRefusedError(RunError):
    """The run was refused before anything was written: the command must change (exit status 2).

    Invalid values, a run directory that is not ours or is in use, a resume that would change the
    run, a budget that never reaches ``replay.min_size``, a network or replay that cannot fit.
    """
