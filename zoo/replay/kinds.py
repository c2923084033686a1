"""Replay kinds, the ``replay`` axis of the registry.

A kind tells the rest of the zoo what its sampling means: whether items carry priorities (so the
loss returns them and the loop writes them back). The arrays themselves are built by
:func:`zoo.replay.build_replay`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zoo import registry

__all__ = ["ReplayKind", "prioritized", "replay_kind", "uniform"]


class ReplayKind(NamedTuple):
    """What a replay kind means to the loss and the loop.

    Attributes:
      prioritized: sampling follows stored priorities, which the loss must return.
    """

    prioritized: bool


@registry.register("replay", "uniform")
def uniform(config: Any) -> ReplayKind:
    """Uniform sampling over eligible items (Mnih et al. 2015)."""
    return ReplayKind(prioritized=False)


@registry.register("replay", "prioritized")
def prioritized(config: Any) -> ReplayKind:
    """Proportional prioritised sampling ∝ p^α, new items at the maximum (Schaul et al. 2016)."""
    return ReplayKind(prioritized=True)


def replay_kind(spec: Any) -> ReplayKind:
    """The :class:`ReplayKind` of an algorithm spec's ``replay.kind``."""
    return registry.get("replay", spec.replay.kind)(spec.replay)
