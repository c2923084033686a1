"""The two errors of the run job, and the environment errors that refuse a run (no JAX, nothing
else of the run job)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from zoo import envs

__all__ = ["RunError", "RunRefusedError", "environment_errors"]


class RunError(RuntimeError):
    """A run could not start or continue; the message says why and how to fix it."""


class RunRefusedError(RunError):
    """The run was refused before anything was written: the command must change (exit status 2).

    Invalid values, a run directory that is not ours or is in use, a resume that would change the
    run, a budget that never reaches ``replay.min_size``, a network or replay that cannot fit.
    """


@contextlib.contextmanager
def environment_errors() -> Iterator[None]:
    """Unknown or mismatched environments and protocols refuse the run."""
    try:
        yield
    except (
        envs.UnknownEnvironmentError,
        envs.UnsupportedEnvironmentError,
        envs.ProtocolMismatchError,
        envs.UnknownProtocolError,
    ) as e:
        raise RunRefusedError(str(e)) from None
