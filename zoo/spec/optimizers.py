"""The optimizer axis: optax optimizers and their parameters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import Field

from zoo.spec.base import Component
from zoo.spec.schedules import Schedule, learning_rate_problems

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["Adam", "Optimizer", "Optimizers", "RAdam", "RmsProp"]


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


class RAdam(Optimizer):
    """RAdam, rectified Adam (Liu et al. 2020); PQN's optimizer (Gallici et al. 2024).

    Liu et al. 2020, "On the Variance of the Adaptive Learning Rate and Beyond",
    https://arxiv.org/abs/1908.03265: Adam whose adaptive step is switched on only once the
    variance of its second-moment estimate is tractable (momentum SGD steps before that).
    """

    kind: Literal["radam"] = "radam"
    learning_rate: Schedule = Field(2.5e-4, description="step size; schedules in learner updates")
    b1: float = Field(0.9, ge=0, lt=1, description="first-moment decay")
    b2: float = Field(0.999, ge=0, lt=1, description="second-moment decay")
    eps: float = Field(1e-8, ge=0, description="denominator epsilon (optax's default)")
    threshold: float = Field(
        5.0,
        gt=0,
        description="adaptive steps start once the SMA length ρ_t exceeds this (optax's default; "
        "the paper rectifies once ρ_t > 4)",
    )
    max_grad_norm: float | None = Field(
        None, gt=0, description="clip gradients to this global norm; null = no clipping"
    )

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """The learning rate's checks; the rectification must be reachable."""
        yield from super().spec_problems(spec)
        # ρ_t rises towards ρ_∞ = 2/(1 − b2) − 1; a threshold at or above it never rectifies
        rho_inf = 2.0 / (1.0 - self.b2) - 1.0
        if self.threshold >= rho_inf:
            yield (
                "optimizer.threshold",
                f"threshold={self.threshold} is not below ρ_∞ = 2/(1 − b2) − 1 = {rho_inf:.3g} "
                f"for b2={self.b2}, so RAdam would never take an adaptive step; lower "
                "`optimizer.threshold` or raise `optimizer.b2`",
            )


Optimizers = Union[Adam, RmsProp, RAdam]
