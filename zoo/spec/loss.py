"""The loss axes: bootstrap, Munchausen, td, value transform, regularizer, priority."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, Union

from pydantic import Field

from zoo.spec.base import Component, Model, axis
from zoo.spec.schedules import ConstantSchedule, Schedule, probability_problems

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = [
    "AbsLossPriority",
    "AbsTdPriority",
    "CrossEntropyTd",
    "DoubleBootstrap",
    "HuberTd",
    "IdentityTransform",
    "LossSpec",
    "MaxBootstrap",
    "MaxMeanPriority",
    "Munchausen",
    "NoRegularizer",
    "QValueRegularizer",
    "ScaleTransform",
    "SignedHyperbolicTransform",
    "SoftBootstrap",
    "SquaredTd",
]


class MaxBootstrap(Component):
    """Q-learning: the target network's greedy action at s′ (Watkins 1989; Mnih et al. 2015)."""

    kind: Literal["max"] = "max"


class DoubleBootstrap(Component):
    """Double Q-learning: online net selects at s′, target net evaluates (van Hasselt 2016)."""

    kind: Literal["double"] = "double"


class SoftBootstrap(Component):
    """Soft value τ·logsumexp(q/τ) of the target net at s′ (needs `loss.temperature`)."""

    kind: Literal["soft"] = "soft"

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """The soft value needs ``loss.temperature``."""
        if spec.loss.temperature is None:
            yield "loss.temperature", "the soft bootstrap needs a temperature τ (e.g. 0.03)"


class Munchausen(Model):
    """Munchausen bonus α·clip(τ·log π(a|s), clip_min, 0) added to the reward (Vieillard 2020);
    π = softmax(q/τ) of the ``policy`` network at s."""

    alpha: float = Field(0.9, ge=0, le=1, description="Munchausen scaling α")
    clip_min: float = Field(
        -1.0,
        lt=0,
        description="lower clip of τ·log π (the paper's −1; Acme's dataclass default is −1e3)",
    )
    policy: Literal["target", "online"] = Field(
        "target",
        description="the network whose softmax at s gives log π(a|s): target (the paper's, "
        "munchausen_rl's, Acme's) | online, gradient stopped (Beyond The Rainbow's Agent.py "
        "takes it from the online network's Q-values); for a sampling head, the Q-values of "
        "the online output the loss learns from",
    )


class SquaredTd(Component):
    """``scale · td²`` (rlax.l2_loss is scale ½)."""

    kind: Literal["squared"] = "squared"
    scale: float = Field(1.0, gt=0, description="factor on td²")


class HuberTd(Component):
    """Huber loss with threshold ``delta``; quantile heads read it as κ (0: pure quantile loss)."""

    kind: Literal["huber"] = "huber"
    delta: float = Field(1.0, ge=0, description="Huber threshold δ (κ for quantile heads)")


class CrossEntropyTd(Component):
    """Cross-entropy to the projected target distribution (categorical heads)."""

    kind: Literal["cross_entropy"] = "cross_entropy"

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """Cross-entropy compares distributions: the head must output one."""
        head = spec.network.head
        if getattr(head, "output", "values") != "distribution":
            yield (
                "loss.td",
                f"cross_entropy needs a categorical head, the head is {head.kind!r}; "
                "use squared or huber",
            )


class IdentityTransform(Component):
    """No value rescaling."""

    kind: Literal["identity"] = "identity"


class SignedHyperbolicTransform(Component):
    """h(x) = sign(x)(√(|x|+1) − 1) + εx (Pohlen et al. 2018; R2D2 uses ε = 1e-3)."""

    kind: Literal["signed_hyperbolic"] = "signed_hyperbolic"
    eps: float = Field(1e-3, gt=0, description="the linear term ε")


class ScaleTransform(Component):
    """h(x) = factor·x: the network learns values in units of ``factor``, i.e. rewards scaled
    by it (purejaxql's ``REW_SCALE``); h(r + γ·h⁻¹(q)) = factor·r + γ·q."""

    kind: Literal["scale"] = "scale"
    factor: float = Field(gt=0, description="the factor on values (and so on rewards)")


class NoRegularizer(Component):
    """No extra term."""

    kind: Literal["none"] = "none"


class QValueRegularizer(Component):
    """``coeff · mean(Q(s, a))`` (DQNReg, Co-Reyes et al. 2021)."""

    kind: Literal["q_value"] = "q_value"
    coeff: float = Field(0.1, description="weight of the mean selected Q value")


class AbsTdPriority(Component):
    """|td|: the target's mean minus Q(s, a)."""

    kind: Literal["abs_td"] = "abs_td"


class AbsLossPriority(Component):
    """The per-item loss (Acme's prioritised C51 uses the cross-entropy)."""

    kind: Literal["abs_loss"] = "abs_loss"


class MaxMeanPriority(Component):
    """η·max_t|td| + (1−η)·mean_t|td| over a sequence (R2D2); |td| for single transitions."""

    kind: Literal["max_mean"] = "max_mean"
    eta: float = Field(0.9, ge=0, le=1, description="weight η of the max")


_Bootstrap = axis("bootstrap", Union[MaxBootstrap, DoubleBootstrap, SoftBootstrap], "max")
_Td = axis("td", Union[SquaredTd, HuberTd, CrossEntropyTd], None)
_Transform = axis(
    "value_transform",
    Union[IdentityTransform, SignedHyperbolicTransform, ScaleTransform],
    "identity",
)
_Regularizer = axis("regularizer", Union[NoRegularizer, QValueRegularizer], "none")
_Priority = axis("priority", Union[AbsTdPriority, AbsLossPriority, MaxMeanPriority], "abs_td")


class LossSpec(Model):
    """How a batch becomes a scalar loss and new priorities."""

    bootstrap: _Bootstrap = Field(
        default_factory=lambda: MaxBootstrap(),
        description="target policy at the next state: max | double | soft",
    )
    temperature: float | None = Field(
        None, gt=0, description="entropy temperature τ; required by `soft` and `munchausen`"
    )
    munchausen: Munchausen | None = Field(
        None, description="null | {alpha, clip_min, policy}: Munchausen bonus on the first reward"
    )
    td: _Td = Field(
        default_factory=lambda: SquaredTd(),
        description="element loss: {kind: squared, scale} | {kind: huber, delta} | "
        "cross_entropy (categorical heads); quantile heads read huber delta as κ",
    )
    reward_clip: float | None = Field(
        1.0, gt=0, description="clip the transition's reward to ±value; null = no clipping"
    )
    discount: float = Field(0.99, gt=0, le=1, description="agent discount γ")
    n_step: int = Field(1, ge=1, description="n of n-step returns")
    value_transform: _Transform = Field(
        default_factory=lambda: IdentityTransform(),
        description="identity | {kind: signed_hyperbolic, eps} | {kind: scale, factor}: targets "
        "are h(r + γ·h⁻¹(q))",
    )
    regularizer: _Regularizer = Field(
        default_factory=lambda: NoRegularizer(), description="none | {kind: q_value, coeff}"
    )
    importance_exponent: Schedule = Field(
        default_factory=lambda: ConstantSchedule(value=0.0),
        description="β of importance weights (1/(p+eps))^β / max; 0 = none; a number or a "
        "schedule over learner updates",
    )
    importance_eps: float = Field(
        0.0, ge=0, description="eps in (1/(p + eps))^β; the reference R2D2 uses 1e-6"
    )
    priority: _Priority = Field(
        default_factory=lambda: AbsTdPriority(),
        description="abs_td | abs_loss | {kind: max_mean, eta}; used by prioritized replay",
    )

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """Munchausen needs a temperature; a clip of n-step returns; β is an exponent in [0, 1]."""
        if self.munchausen is not None and self.temperature is None:
            yield "loss.temperature", "the Munchausen bonus needs a temperature τ (e.g. 0.03)"
        if spec.replay.sequence is None and self.n_step > 1 and self.reward_clip is not None:
            yield (
                "loss.reward_clip",
                f"with n_step={self.n_step} the loss would clip the n-step return, not each "
                "reward; leave `loss.reward_clip: null` and let the protocol clip rewards at "
                "insertion",
            )
        yield from probability_problems(
            "loss.importance_exponent", self.importance_exponent, "β is an exponent"
        )
