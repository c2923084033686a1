"""The optimizer axis: optax optimizers and their parameters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import Field

from zoo.spec.base import Component, Model, axis, path_within
from zoo.spec.schedules import Schedule, learning_rate_problems

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["Adam", "AdamW", "Optimizer", "Optimizers", "ParamGroup", "RAdam", "RmsProp"]


class Optimizer(Component):
    """Base of the optimizers: a ``learning_rate`` field (a number or a schedule over learner
    updates) that must be able to train, and optional parameter ``groups`` with optimizers of
    their own. A user's optimizer that subclasses this gets the checks."""

    groups: list[ParamGroup] = Field(
        default_factory=list,
        description="parts of the network trained by another optimizer: [{params: head.fraction, "
        "optimizer: {kind: rmsprop, ...}}]; empty: one optimizer for every parameter",
    )

    def problems(self, path: str) -> Iterable[tuple[str, str]]:
        """This optimizer's own problems, its fields dotted under ``path``: a learning rate that
        is negative anywhere or 0 throughout cannot train."""
        lr: Any = getattr(self, "learning_rate", None)
        if lr is not None:
            yield from learning_rate_problems(f"{path}.learning_rate", lr)

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """:meth:`problems` of this optimizer and of each group's; groups do not nest or
        overlap."""
        yield from self.problems("optimizer")
        seen: list[str] = []
        for i, group in enumerate(self.groups):
            where = f"optimizer.groups[{i}]"
            yield from group.optimizer.problems(f"{where}.optimizer")
            if group.optimizer.groups:
                yield (
                    f"{where}.optimizer.groups",
                    "a group's optimizer cannot have groups of its own; list every group under "
                    "`optimizer.groups`",
                )
            for other in seen:
                if path_within(group.params, other) or path_within(other, group.params):
                    yield (
                        f"{where}.params",
                        f"{group.params!r} overlaps the earlier group {other!r}: a parameter "
                        "is trained by one optimizer; give each group its own part",
                    )
            seen.append(group.params)


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


class AdamW(Optimizer):
    """AdamW, Adam with decoupled weight decay (Loshchilov & Hutter 2019, "Decoupled Weight Decay
    Regularization", https://arxiv.org/abs/1711.05101), as ``optax.adamw``: each step is
    ``−lr·(adam_step + weight_decay·θ)``, ε outside the square root. BBF (Schwarzer et al. 2023)
    trains with weight decay 0.1 on every parameter but the biases (its ``spr_agent.py``
    ``create_scaling_optimizer``: ``mask = x.ndim != 1``)."""

    kind: Literal["adamw"] = "adamw"
    learning_rate: Schedule = Field(1e-4, description="step size; schedules in learner updates")
    b1: float = Field(0.9, ge=0, lt=1, description="first-moment decay")
    b2: float = Field(0.999, ge=0, lt=1, description="second-moment decay")
    eps: float = Field(1.5e-4, ge=0, description="denominator epsilon")
    weight_decay: float = Field(
        0.1, ge=0, description="decoupled weight decay, scaled by the learning rate (BBF: 0.1)"
    )
    decay: Literal["matrices", "all"] = Field(
        "matrices",
        description="which parameters decay: matrices = every parameter that is not a vector "
        "(kernels, not biases or other 1-D parameters: BBF's mask) | all (optax's default)",
    )
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

    def problems(self, path: str) -> Iterable[tuple[str, str]]:
        """The learning rate's checks; the rectification must be reachable."""
        yield from super().problems(path)
        # ρ_t rises towards ρ_∞ = 2/(1 − b2) − 1; a threshold at or above it never rectifies
        rho_inf = 2.0 / (1.0 - self.b2) - 1.0
        if self.threshold >= rho_inf:
            yield (
                f"{path}.threshold",
                f"threshold={self.threshold} is not below ρ_∞ = 2/(1 − b2) − 1 = {rho_inf:.3g} "
                f"for b2={self.b2}, so RAdam would never take an adaptive step; lower "
                f"`{path}.threshold` or raise `{path}.b2`",
            )


Optimizers = Union[Adam, AdamW, RmsProp, RAdam]

#: A group's optimizer: any optimizer kind, registered ones included.
_GroupOptimizer = axis("optimizer", Optimizers, None)


class ParamGroup(Model):
    """Parameters trained by an optimizer of their own (optax.multi_transform): every parameter
    of the network under the dotted path ``params`` (``head.fraction``: FQF's fraction proposal
    layer, as Yang et al. 2019 train it with RMSProp at its own learning rate). The other
    parameters stay with the main optimizer; a parameter is in one group at most."""

    params: str = Field(
        min_length=1,
        description="dotted path of a part of the network (its attribute names, list positions "
        "as numbers): head.fraction, streams.mlp.layers.0",
    )
    optimizer: _GroupOptimizer = Field(description="the optimizer of these parameters")


for _model in (Optimizer, Adam, AdamW, RmsProp, RAdam):
    _model.model_rebuild()
