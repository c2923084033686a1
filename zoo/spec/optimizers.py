"""The optimizer axis: optax optimizers and their parameters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import Field

from zoo.spec.base import Component
from zoo.spec.schedules import Schedule, learning_rate_problems

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["Adam", "Optimizer", "Optimizers", "RmsProp"]


class Optimizer(Component):
    """Base of the optimizers: a ``learning_rate`` field (a number or a schedule over learner
    updates) that must be able to train. A user's optimizer that subclasses this gets the check."""

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """A learning rate that is negative anywhere or 0 throughout cannot train."""
        lr: Any = getattr(self, "learning_rate", None)
        if lr is not None:
            yield from learning_rate_problems("optimizer.learning_rate", lr)


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015)."""

    kind: Literal["adam"] = "adam"
    learning_rate: Schedule = Field(6.25e-5, description="step size; schedules in learner updates")
    b1: float = Field(0.9, ge=0, lt=1, description="first-moment decay")
    b2: float = Field(0.999, ge=0, lt=1, description="second-moment decay")
    eps: float = Field(1.5e-4, ge=0, description="denominator epsilon")
    max_grad_norm: float | None = Field(
        None, gt=0, description="clip gradients to this global norm; null = no clipping"
    )


class RmsProp(Optimizer):
    """RMSProp (Tieleman & Hinton 2012), optionally centred as in the Nature DQN."""

    kind: Literal["rmsprop"] = "rmsprop"
    learning_rate: Schedule = Field(2.5e-4, description="step size; schedules in learner updates")
    decay: float = Field(0.95, ge=0, lt=1, description="squared-gradient decay")
    eps: float = Field(0.01 / 32**2, ge=0, description="denominator epsilon")
    centered: bool = Field(True, description="subtract the mean gradient (centred RMSProp)")
    momentum: float | None = Field(None, ge=0, lt=1, description="momentum; null = none")
    max_grad_norm: float | None = Field(
        None, gt=0, description="clip gradients to this global norm; null = no clipping"
    )


Optimizers = Union[Adam, RmsProp]
