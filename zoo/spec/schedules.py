"""Scalar schedules of a step count (ε, β, learning rates), and the checks of their values."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Union

from pydantic import Field, model_validator

from zoo.spec.base import Component, at, axis

__all__ = [
    "ConstantSchedule",
    "ExponentialSchedule",
    "GeometricSchedule",
    "LinearSchedule",
    "Schedule",
    "learning_rate_problems",
    "probability_problems",
    "schedule_points",
]


class ConstantSchedule(Component):
    """A constant value."""

    kind: Literal["constant"] = "constant"
    value: float = Field(description="the value at every step")


class LinearSchedule(Component):
    """Linear interpolation from ``start`` to ``end`` over ``steps``, held at ``end`` after."""

    kind: Literal["linear"] = "linear"
    start: float = Field(description="value before and at `begin`")
    end: float = Field(description="value from `begin + steps` on")
    steps: int = Field(gt=0, description="length of the ramp, in the schedule's unit of steps")
    begin: int = Field(0, ge=0, description="steps before the ramp starts (held at `start`)")


class ExponentialSchedule(Component):
    """``start·rate^(t/steps)`` clipped at ``end``, or ``end + (start − end)·rate^(t/steps)``."""

    kind: Literal["exponential"] = "exponential"
    start: float = Field(description="value at step 0")
    rate: float = Field(gt=0, description="factor applied every `steps` steps")
    steps: int = Field(gt=0, description="steps per factor `rate`")
    end: float | None = Field(None, description="bound the value never passes (null: none)")
    asymptote: bool = Field(
        False,
        description="false: `start·rate^(step/steps)`, clipped at `end` | true: the distance to "
        "`end` shrinks by `rate` every `steps` steps, `end + (start − end)·rate^(step/steps)`, "
        "approaching `end` without a corner (Beyond The Rainbow's ε, updated per transition as "
        "ε ← ε − (ε − ε_final)/eps_steps: rate (1 − 1/eps_steps)^eps_steps over eps_steps); "
        "needs `end`",
    )

    @model_validator(mode="after")
    def _asymptote_needs_end(self) -> ExponentialSchedule:
        if self.asymptote and self.end is None:
            raise ValueError("`asymptote: true` approaches `end`: give `end`")
        return self


class GeometricSchedule(Component):
    """Geometric (log-linear) interpolation from ``start`` to ``end`` over ``steps``, held at
    ``end`` after: ``start·(end/start)^min(t/steps, 1)``; with ``complement``, of ``1 − x``
    instead: ``1 − (1 − start)·((1 − end)/(1 − start))^min(t/steps, 1)``. BBF's
    ``exponential_decay_scheduler`` (Schwarzer et al. 2023, ``spr_agent.py``): its n-step
    10 → 3 and (``complement``, its ``reverse``) γ 0.97 → 0.997 over 10,000 updates."""

    kind: Literal["geometric"] = "geometric"
    start: float = Field(description="value at step 0")
    end: float = Field(description="value from `steps` on")
    steps: int = Field(gt=0, description="steps from `start` to `end`")
    complement: bool = Field(
        False,
        description="interpolate 1 − value geometrically (BBF's reverse=True, for γ: 1 − γ "
        "goes from 0.03 to 0.003)",
    )

    @model_validator(mode="after")
    def _positive(self) -> GeometricSchedule:
        ends = (1 - self.start, 1 - self.end) if self.complement else (self.start, self.end)
        if min(ends) <= 0:
            what = "below 1" if self.complement else "positive"
            raise ValueError(
                f"a geometric schedule interpolates logarithms: `start` and `end` must be {what}"
                + (" (with `complement: true`)" if self.complement else "")
            )
        return self


_BuiltinSchedule = Union[ConstantSchedule, LinearSchedule, ExponentialSchedule, GeometricSchedule]


#: A schedule field: a number (constant) or ``{kind: linear, start, end, steps, begin}``, ...
Schedule = axis("schedule", _BuiltinSchedule, None, numbers="constant")


def schedule_points(schedule: Any) -> list[tuple[str, float]]:
    """``(field, value)`` of the values a built-in schedule passes through (bounds included)."""
    kind = getattr(schedule, "kind", None)
    if kind == "constant":
        return [("", schedule.value)]
    if kind in ("linear", "geometric"):
        return [("start", schedule.start), ("end", schedule.end)]
    if kind == "exponential":
        points = [("start", schedule.start)]
        return points + ([("end", schedule.end)] if schedule.end is not None else [])
    return []  # a user's schedule: its own model checks its values


def probability_problems(path: str, schedule: Any, what: str) -> Iterable[tuple[str, str]]:
    """A schedule at ``path`` whose values must stay in [0, 1] (``what`` says why)."""
    for field, value in schedule_points(schedule):
        if not 0 <= value <= 1:
            yield at(path, field), f"{what} in [0, 1], got {value}"
    kind = getattr(schedule, "kind", None)
    if kind == "exponential" and schedule.end is None and schedule.rate > 1:
        yield (
            at(path, "end"),
            f"{what} in [0, 1]: a rate above 1 grows without bound; set `end` (≤ 1)",
        )


def learning_rate_problems(path: str, lr: Any) -> Iterable[tuple[str, str]]:
    """Learning rates that cannot train: negative anywhere, or 0 throughout."""
    points = schedule_points(lr)
    for field, value in points:
        if value < 0:
            yield at(path, field), f"a learning rate must not be negative, got {value}"
    # 0 throughout: a constant 0, a linear ramp from 0 to 0, an exponential starting at 0
    ramp = points[:2] if lr.kind == "linear" else points[:1]
    if ramp and all(value == 0 for _, value in ramp):
        yield (
            path,
            "a learning rate of 0 never changes the network; give a positive value (e.g. 1e-4)",
        )
