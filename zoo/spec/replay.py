"""Replay memory and stored sequences."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from zoo import registry
from zoo.spec.base import Model
from zoo.spec.network import RECURRENT_NEEDS_SEQUENCES

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["BUILTIN_KINDS", "ReplaySpec", "SequenceSpec", "samples_by_priority"]

BUILTIN_KINDS: dict[str, bool] = {"uniform": False, "prioritized": True}
"""The built-in replay kinds (:mod:`zoo.replay.kinds`) and whether each samples by priority,
known here without importing JAX (a test holds the two in agreement)."""


def samples_by_priority(replay: ReplaySpec) -> bool:
    """Whether ``replay.kind`` samples by stored priorities (a user kind is asked its factory)."""
    if replay.kind in BUILTIN_KINDS:
        return BUILTIN_KINDS[replay.kind]
    return bool(registry.get("replay", replay.kind)(replay).prioritized)


class SequenceSpec(Model):
    """Stored sequences for recurrent cores (Kapturowski et al. 2019)."""

    burn_in: int = Field(40, ge=0, description="steps used only to warm the core state")
    trace_length: int = Field(80, ge=1, description="steps learned on after the burn-in")
    period: int = Field(40, ge=1, description="steps between the starts of stored sequences")
    stored_state: bool = Field(
        True, description="start from the stored core state (else the initial state)"
    )
    burn_in_grad: bool = Field(
        True,
        description="keep the gradient through the online burn-in (the reference does); false "
        "stops it after burn-in (the paper's variant)",
    )

    @property
    def length(self) -> int:
        """Stored steps per sequence: burn_in + trace_length + 1."""
        return self.burn_in + self.trace_length + 1

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """Sequences are for a recurrent core, and hold the n-step window."""
        if spec.network.core is None:
            yield "network.core", RECURRENT_NEEDS_SEQUENCES
        if spec.loss.n_step > self.trace_length:
            yield (
                "loss.n_step",
                f"n_step={spec.loss.n_step} is longer than "
                f"replay.sequence.trace_length={self.trace_length}",
            )


class ReplaySpec(Model):
    """Replay memory."""

    kind: str = Field(
        "uniform",
        description="a registered replay kind: uniform | prioritized (proportional, Schaul et "
        "al. 2016) | one registered with zoo.registry.register('replay', NAME)",
    )
    capacity: int = Field(1_000_000, gt=0, description="items held, in transitions")
    min_size: int = Field(20_000, ge=1, description="transitions inserted before learning starts")
    batch_size: int = Field(32, ge=1, description="items per learner update (global batch)")
    priority_exponent: float = Field(
        0.6, ge=0, description="α: sampling ∝ priority^α (prioritized only)"
    )
    sequence: SequenceSpec | None = Field(
        None,
        description="null | {burn_in, trace_length, period, stored_state, burn_in_grad}; "
        "stored length = burn_in + trace_length + 1",
    )

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str) -> str:
        known = sorted(set(BUILTIN_KINDS) | set(registry.names("replay", load=False)))
        if kind not in known:
            close = registry.suggest(kind, known)
            hint = f"did you mean {close!r}? " if close else ""
            raise ValueError(
                f"unknown replay kind {kind!r}; {hint}known: {', '.join(known)} (a new kind is "
                "registered with zoo.registry.register('replay', NAME) before the spec is loaded)"
            )
        return kind

    def unused_settings(self, spec: AlgorithmSpec) -> Iterable[str]:
        """Priorities mean nothing to a replay that does not sample by them."""
        if spec.rollout is None and not samples_by_priority(self):
            yield from ("replay.priority_exponent", "loss.priority", "loss.importance_eps")

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """Sizes that cannot work together; importance weights without prioritised sampling."""
        beta = spec.loss.importance_exponent
        if not samples_by_priority(self) and not (beta.kind == "constant" and beta.value == 0.0):
            yield (
                "loss.importance_exponent",
                "importance weights correct prioritised sampling and do nothing with uniform "
                "replay; set `replay.kind: prioritized` or `loss.importance_exponent: 0`",
            )
        if self.batch_size > self.min_size:
            yield (
                "replay.min_size",
                f"min_size={self.min_size} is smaller than batch_size={self.batch_size}",
            )
        if self.min_size > self.capacity:
            yield "replay.min_size", f"min_size={self.min_size} exceeds capacity={self.capacity}"
        if self.sequence is not None and self.capacity < self.sequence.length:
            yield (
                "replay.capacity",
                f"capacity is smaller than one stored sequence ({self.sequence.length})",
            )
