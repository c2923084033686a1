"""What a run needs in memory, known before it starts, and the refusal of one that cannot fit.

A run's resident memory is its replay's bytes (allocated once; the loop updates it in place,
checkpoints stream it to disk in chunks and resumes fill it in place: see
:mod:`zoo.runs.checkpoint`) plus a bounded overhead: the Python process with JAX, envpool and the
compiled programs, the networks and optimizer, evaluation environments and the checkpoint chunks in
flight; plus the update's working memory (the activations its gradient keeps, XLA's temporary
allocation), which grows with the batch and the torso: 9 MiB for the Nature CNN at batch 32, about 3
GiB for ``btr``'s IMPALA torso at batch 256. A run compiles its update before it allocates the
replay and counts that working memory as measured from the compiled program
(:meth:`zoo.drivers.HostDriver.compile_update`). :data:`RUN_OVERHEAD` bounds that overhead; it was
measured on the Atari presets (``docs/performance.md``: a 6.58 GiB Breakout replay peaked at 7.16
GiB through training, two checkpoints and evaluation, and at 7.65 GiB through a resume from a
checkpoint with the replay), so ``replay bytes + RUN_OVERHEAD`` is the peak a user can plan on.
"""

from __future__ import annotations

import math

__all__ = ["RUN_OVERHEAD", "MemoryPlan", "available_memory", "plan"]

RUN_OVERHEAD = int(1.5 * 2**30)
"""Bytes a run holds besides its replay, at most (measured; see the module docstring)."""

SAFETY = 0.9
"""Fraction of the available memory a run may plan to use (the rest is left to the system)."""


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or ``None`` where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemoryPlan:
    """The peak memory of a run with a replay of ``replay_bytes`` at ``capacity`` transitions.

    Args:
      replay_bytes: exact bytes the replay allocates (``Replay.nbytes()``).
      capacity: its capacity in transitions (``replay.capacity``).
      available: bytes available on this machine (default: read from ``/proc/meminfo``).
      network_bytes: bytes of the learner state's parameters (online, target, optimizer
        moments), counted in :attr:`peak` beside the replay (default 0).
      workspace_bytes: bytes of one update's working memory, as its compiled program reports
        them (``memory_analysis().temp_size_in_bytes``; default 0: not measured).
    """

    def __init__(
        self,
        replay_bytes: int,
        capacity: int,
        available: int | None = None,
        network_bytes: int = 0,
        workspace_bytes: int = 0,
    ):
        self.replay_bytes = int(replay_bytes)
        self.capacity = int(capacity)
        self.network_bytes = int(network_bytes)
        self.workspace_bytes = int(workspace_bytes)
        self.available = available_memory() if available is None else int(available)

    @property
    def peak(self) -> int:
        """The run's planned peak resident memory in bytes."""
        return self.replay_bytes + self.rest

    @property
    def rest(self) -> int:
        """Everything but the replay: parameters, the update's working memory and
        :data:`RUN_OVERHEAD`."""
        return self.network_bytes + self.workspace_bytes + RUN_OVERHEAD

    @property
    def fits(self) -> bool:
        """Whether the peak fits in the available memory (always True where it is unknown)."""
        return self.available is None or self.peak <= SAFETY * self.available

    def capacity_that_fits(self) -> int:
        """The largest replay capacity whose run fits, rounded down to two significant
        digits (0 when not even an empty replay fits)."""
        if self.available is None:
            return self.capacity
        per_transition = self.replay_bytes / max(self.capacity, 1)
        room = SAFETY * self.available - self.rest
        if room <= 0 or per_transition <= 0:
            return 0
        fit = int(min(room / per_transition, self.capacity))
        if fit < 100:
            return fit
        scale = 10 ** (int(math.log10(fit)) - 1)
        return fit // scale * scale

    def refusal(self, what: str = "this run") -> str:
        """The message refusing a run that does not fit, with the override that makes it fit."""
        fit = self.capacity_that_fits()
        gib = 2**30
        message = (
            f"{what} needs about {self.peak / gib:.1f} GiB of memory (its replay of "
            f"{self.capacity:,} transitions is {self.replay_bytes / gib:.2f} GiB, plus "
            f"{self.rest / gib:.1f} GiB for the rest of the run"
            + (
                f", {self.workspace_bytes / gib:.1f} GiB of it the update's working memory"
                if self.workspace_bytes >= 2**28
                else ""
            )
            + ") but only "
            f"{(self.available or 0) / gib:.1f} GiB is available"
        )
        if fit <= 0:
            if self.workspace_bytes >= 2**28:
                return message + (
                    "; free memory, use a machine with more, or lower replay.batch_size (the "
                    "update's working memory grows with it)"
                )
            return message + "; free memory or use a machine with more"
        return (
            message
            + f"; a replay of {fit:,} transitions fits: add --set replay.capacity={fit} (and "
            "lower replay.min_size below it if needed), or free memory"
        )


def plan(
    replay_bytes: int, capacity: int, available: int | None = None, workspace_bytes: int = 0
) -> MemoryPlan:
    """A :class:`MemoryPlan` (see there)."""
    return MemoryPlan(replay_bytes, capacity, available, workspace_bytes=workspace_bytes)
