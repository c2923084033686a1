"""Replay kinds, the ``replay`` axis of the registry.

A kind tells the rest of the zoo what its sampling means: whether items carry priorities (so the
loss returns them and the loop writes them back) and the rule that draws items from their
weights. The arrays themselves are built by :func:`zoo.replay.build_replay` (which
:func:`zoo.data.build_data` calls for a spec that learns from a replay), which hands the kind's
rule to the replay; a new kind is one registration here (or in user code)::

    @zoo.registry.register("replay", "rank_based")
    def rank_based(config) -> ReplayKind:
        return ReplayKind(prioritized=True, sample=my_rank_rule)   # (key, weights, B) -> (i, P(i))

and ``replay: {kind: rank_based}`` in YAML; ``replay.priority_exponent`` and the importance
weights apply to it as to ``prioritized``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zoo import registry
from zoo.replay.sampling import SampleRule, proportional_sample

__all__ = ["ReplayKind", "prioritized", "replay_kind", "uniform"]


class ReplayKind(NamedTuple):
    """What a replay kind means to the loss and the loop.

    Attributes:
      prioritized: sampling follows stored priorities, which the loss must return.
      sample: the draw, ``(key, weights [M], batch_size) -> (indices [B] int32, probability [B])``
        over the flat item weights (``p^α`` of eligible items when ``prioritized``, else 1 for
        eligible items; 0 for ineligible ones, which must never be drawn). ``probability`` is
        ``P(i)`` of each drawn item, from which the loss's importance weights are computed.
        Default: proportional to the weights (:func:`zoo.replay.proportional_sample`).
    """

    prioritized: bool
    sample: SampleRule = proportional_sample


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
