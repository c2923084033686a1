"""The signals that stop a job, and what zoo does with them (no JAX).

A scheduler stops a job with a signal: Ctrl-C sends SIGINT, ``docker stop``, SLURM's
preemption, Kubernetes and Ray send SIGTERM, a closed terminal or an ``ssh`` session that drops
sends SIGHUP. zoo treats the three alike (docs/reliability.md):

- **inside a training loop** (:func:`heard_while`), the first signal is noted and the loop stops
  at its next step boundary, saving a checkpoint and a ``stopped`` record; the command exits
  with 130. A **second** signal raises :class:`KeyboardInterrupt` at once: the run keeps its
  last complete checkpoint (checkpoints are written under a temporary name and renamed).
- **anywhere else** (a command's setup, a restore, ``zoo eval``), :func:`raise_on_stop`
  makes each of them a :class:`KeyboardInterrupt`, which the command line turns into one line
  and exit 130.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["STOP_SIGNALS", "heard_while", "raise_on_stop", "signal_name"]

#: The signals that ask a job to stop (SIGHUP only where the platform has it).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _interrupt(signum: int, frame: Any) -> None:
    del frame
    raise KeyboardInterrupt(signal_name(signum))


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def raise_on_stop() -> Iterator[None]:
    """Within, every stop signal raises :class:`KeyboardInterrupt` (as SIGINT does by default)."""
    if not _main_thread():
        yield
        return
    previous = {s: signal.signal(s, _interrupt) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def heard_while(heard: list[Any], on_first: Callable[[str], None] | None = None) -> Iterator[None]:
    """Within, the first stop signal appends its name to ``heard`` (and calls ``on_first``);
    a second one raises :class:`KeyboardInterrupt`. The previous handlers return afterwards."""
    if not _main_thread():
        yield
        return

    def note(signum: int, frame: Any) -> None:
        name = signal_name(signum)
        if heard:
            _interrupt(signum, frame)
        heard.append(name)
        if on_first is not None:
            on_first(name)

    previous = {s: signal.signal(s, note) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
