"""Algorithm specs: frozen Pydantic models of the YAML vocabulary, and how YAML becomes one.

An algorithm is a point in a product of orthogonal axes (``docs/design.md``). Each axis is one model
here; components with parameters are discriminated unions on ``kind``. Every model forbids unknown
keys and every field carries a ``description`` (read by ``zoo show``). Loading supports ``extends:``
(deep merge, lists replace, cycles detected) and dotted overrides (``loss.n_step=3``).

Errors are :class:`SpecError`: one :class:`Problem` per mistake, each naming the YAML file, the
entry, the field path, the bad value, the allowed values and, for a misspelling, the closest valid
name. This module imports neither JAX nor the loss code, so validation is instant.

Units: every count of steps is in *transitions* (agent steps summed over environments), except
``target_update_period`` and the steps of schedules evaluated by the learner (β, learning rate),
which are *learner updates*.
"""

from __future__ import annotations

import copy
import fnmatch
import itertools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, WrapValidator, model_validator

from zoo import registry

__all__ = [
    "PRESET_PREFIX",
    "AlgorithmSpec",
    "Budget",
    "Component",
    "ConstantSchedule",
    "EnvSpec",
    "ExponentialSchedule",
    "LinearSchedule",
    "LossSpec",
    "NetworkSpec",
    "Preset",
    "Problem",
    "Reference",
    "ReplaySpec",
    "Schedule",
    "ScheduleSpec",
    "SequenceSpec",
    "SpecError",
    "algorithm_for",
    "algorithm_names",
    "apply_overrides",
    "catalogue_path",
    "data_dir",
    "describe",
    "is_preset",
    "load_algorithm",
    "load_algorithms_file",
    "load_preset",
    "looks_like_path",
    "parse_overrides",
    "preset_names",
    "presets_dir",
    "read_yaml",
]


# --------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class Problem:
    """One mistake in a spec, located precisely enough to fix it."""

    source: str
    entry: str | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.source
        if self.entry:
            where += f": {self.entry}"
        if self.path:
            where += f": {self.path}"
        return f"{where}: {self.message}"


class SpecError(ValueError):
    """An invalid algorithm or preset spec; ``problems`` lists every mistake found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def _problem(source: str, entry: str | None, path: str, message: str) -> SpecError:
    return SpecError([Problem(source, entry, path, message)])


# --------------------------------------------------------------------------------------------
# Base models


class _Model(BaseModel):
    # allow_inf_nan=False: no spec value may be NaN or infinite (a learning rate of .nan or a
    # discount of .inf validates field by field and then trains nothing)
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False
    )


class Component(_Model):
    """Base of every component config: a ``kind`` naming a registry entry plus its parameters.

    A user's own component subclasses this with ``kind: Literal["name"]`` and passes the class as
    ``config=`` to :func:`zoo.registry.register`.
    """

    kind: str = Field(description="registry name of the component")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        field = cls.model_fields["kind"]
        if not field.description:
            doc = (cls.__doc__ or "").strip().splitlines()
            field.description = f"{field.default}: {doc[0]}" if doc else "component kind"
            cls.model_rebuild(force=True)


def _axis(axis: str, builtin: Any, neutral: str | None, numbers: str | None = None) -> Any:
    """An axis field type: the built-in discriminated union, plus registered user components.

    Accepts the shorthand of a bare name (``bootstrap: double``) for ``{kind: double}``, maps
    ``null`` to the axis' neutral component where it has one, and, where ``numbers`` names a
    kind, a bare number ``x`` to ``{kind: numbers, value: x}``.
    """

    tags = _union_tags(builtin)

    def validate(value: Any, handler: Any) -> Any:
        if value is None and neutral is not None:
            value = neutral
        if numbers and isinstance(value, int | float) and not isinstance(value, bool):
            value = {"kind": numbers, "value": value}
        if isinstance(value, str):
            value = {"kind": value}
        if isinstance(value, Mapping) and value.get("kind") not in tags:
            user = registry.config_model(axis, str(value.get("kind")))
            if user is not None:
                return user.model_validate(dict(value))
        return handler(value)

    inner = Annotated[builtin, Field(discriminator="kind")] if len(tags) > 1 else builtin
    return Annotated[pydantic.SerializeAsAny[inner], WrapValidator(validate)]


def _union_tags(union: Any) -> list[str]:
    members = getattr(union, "__args__", (union,))
    return [m.model_fields["kind"].default for m in members]


# --------------------------------------------------------------------------------------------
# Schedules


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
    """``start · rate^(step/steps)``, clipped at ``end``."""

    kind: Literal["exponential"] = "exponential"
    start: float = Field(description="value at step 0")
    rate: float = Field(gt=0, description="factor applied every `steps` steps")
    steps: int = Field(gt=0, description="steps per factor `rate`")
    end: float | None = Field(None, description="bound the value never passes (null: none)")


_BuiltinSchedule = Union[ConstantSchedule, LinearSchedule, ExponentialSchedule]


#: A schedule field: a number (constant) or ``{kind: linear, start, end, steps, begin}``, ...
Schedule = _axis("schedule", _BuiltinSchedule, None, numbers="constant")


# --------------------------------------------------------------------------------------------
# Network

#: A layer width (units or channels): a layer of 0 units computes nothing.
_Width = Annotated[int, Field(gt=0)]


class AutoTorso(Component):
    """Nature CNN for rank-3 (image) observations, else an MLP of ``sizes``."""

    kind: Literal["auto"] = "auto"
    sizes: list[_Width] = Field(
        default_factory=list, description="MLP layer sizes used for non-image observations"
    )


class MlpTorso(Component):
    """Flatten, then dense ReLU layers of ``sizes`` (empty: flatten only)."""

    kind: Literal["mlp"] = "mlp"
    sizes: list[_Width] = Field(default_factory=list, description="dense layer sizes")


class NatureCnnTorso(Component):
    """Mnih et al. 2015: conv 32×8×8/4, 64×4×4/2, 64×3×3/1, ReLU; the fc512 comes from `hidden`."""

    kind: Literal["nature_cnn"] = "nature_cnn"


class MinatarCnnTorso(Component):
    """Revisiting Rainbow's MinAtar torso: conv ``channels``×3×3 stride 1 (SAME), ReLU, flatten."""

    kind: Literal["minatar_cnn"] = "minatar_cnn"
    channels: int = Field(16, gt=0, description="output channels of the convolution")
    kernel_size: int = Field(3, gt=0, description="square kernel size (stride 1, SAME padding)")
    init: Literal["glorot_uniform", "default"] = Field(
        "glorot_uniform",
        description="convolution weight init: glorot_uniform = variance_scaling(1, fan_avg, "
        "uniform) with zero bias (Revisiting Rainbow's MinAtar configs) | default (Equinox's "
        "U(±1/√fan_in))",
    )


class ImpalaCnnTorso(Component):
    """Espeholt et al. 2018: per stack conv3×3, max-pool 3×3/2, two residual blocks."""

    kind: Literal["impala_cnn"] = "impala_cnn"
    channels: list[_Width] = Field(
        default_factory=lambda: [16, 32, 32],
        min_length=1,
        description="output channels of each stack",
    )


class LstmCore(Component):
    """An LSTM between torso and head (Hochreiter & Schmidhuber 1997; R2D2 uses 512)."""

    kind: Literal["lstm"] = "lstm"
    size: int = Field(512, gt=0, description="hidden and cell state size")


class QHead(Component):
    """One scalar value per action."""

    kind: Literal["q"] = "q"


class CategoricalHead(Component):
    """C51 (Bellemare et al. 2017): a softmax over ``num_atoms`` fixed atoms per action."""

    kind: Literal["categorical"] = "categorical"
    num_atoms: int = Field(51, ge=2, description="number of atoms of the support")
    v_min: float = Field(-10.0, description="lowest atom")
    v_max: float = Field(10.0, description="highest atom")

    @model_validator(mode="after")
    def _support(self) -> CategoricalHead:
        if not self.v_min < self.v_max:
            raise ValueError(f"needs v_min < v_max, got v_min={self.v_min} and v_max={self.v_max}")
        return self


class QuantileHead(Component):
    """QR-DQN (Dabney et al. 2018): ``num_quantiles`` quantiles at midpoints (i + ½)/N."""

    kind: Literal["quantile"] = "quantile"
    num_quantiles: int = Field(200, ge=1, description="number of quantiles N")


_Torso = _axis(
    "torso", Union[AutoTorso, MlpTorso, NatureCnnTorso, ImpalaCnnTorso, MinatarCnnTorso], "auto"
)
_Core = _axis("core", Union[LstmCore], None)
_Head = _axis("head", Union[QHead, CategoricalHead, QuantileHead], "q")


class NetworkSpec(_Model):
    """torso → (core) → hidden → head. Networks act on one observation (Equinox convention)."""

    torso: _Torso = Field(
        default_factory=lambda: AutoTorso(),
        description="feature extractor: auto | mlp | nature_cnn | impala_cnn | minatar_cnn; "
        "`auto` picks nature_cnn for image (rank-3) observations and an MLP of `sizes` otherwise",
    )
    hidden: list[_Width] = Field(
        default_factory=lambda: [512],
        description="dense ReLU layers between torso (or core) and the output layer; with "
        "dueling each stream has its own copy; noisy when `noisy` is true",
    )
    dueling: bool = Field(False, description="dueling streams V + A − mean(A) (Wang et al. 2016)")
    noisy: bool = Field(
        False,
        description="factorised Gaussian noisy layers after the torso (Fortunato et al. 2018); "
        "the agent then acts greedily",
    )
    noisy_sigma0: float = Field(0.5, gt=0, description="σ₀ of noisy layers: σ = σ₀/√fan_in")
    core: _Core | None = Field(
        None, description="null (feed-forward) | {kind: lstm, size}; needs replay.sequence"
    )
    head: _Head = Field(
        default_factory=lambda: QHead(),
        description="q | {kind: categorical, num_atoms, v_min, v_max} | "
        "{kind: quantile, num_quantiles}",
    )


# --------------------------------------------------------------------------------------------
# Loss


class MaxBootstrap(Component):
    """Q-learning: the target network's greedy action at s′ (Watkins 1989; Mnih et al. 2015)."""

    kind: Literal["max"] = "max"


class DoubleBootstrap(Component):
    """Double Q-learning: online net selects at s′, target net evaluates (van Hasselt 2016)."""

    kind: Literal["double"] = "double"


class SoftBootstrap(Component):
    """Soft value τ·logsumexp(q/τ) of the target net at s′ (needs `loss.temperature`)."""

    kind: Literal["soft"] = "soft"


class Munchausen(_Model):
    """Munchausen bonus α·clip(τ·log π(a|s), clip_min, 0) added to the reward (Vieillard 2020)."""

    alpha: float = Field(0.9, ge=0, le=1, description="Munchausen scaling α")
    clip_min: float = Field(
        -1.0,
        lt=0,
        description="lower clip of τ·log π (the paper's −1; Acme's dataclass default is −1e3)",
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


class IdentityTransform(Component):
    """No value rescaling."""

    kind: Literal["identity"] = "identity"


class SignedHyperbolicTransform(Component):
    """h(x) = sign(x)(√(|x|+1) − 1) + εx (Pohlen et al. 2018; R2D2 uses ε = 1e-3)."""

    kind: Literal["signed_hyperbolic"] = "signed_hyperbolic"
    eps: float = Field(1e-3, gt=0, description="the linear term ε")


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


_Bootstrap = _axis("bootstrap", Union[MaxBootstrap, DoubleBootstrap, SoftBootstrap], "max")
_Td = _axis("td", Union[SquaredTd, HuberTd, CrossEntropyTd], None)
_Transform = _axis(
    "value_transform", Union[IdentityTransform, SignedHyperbolicTransform], "identity"
)
_Regularizer = _axis("regularizer", Union[NoRegularizer, QValueRegularizer], "none")
_Priority = _axis("priority", Union[AbsTdPriority, AbsLossPriority, MaxMeanPriority], "abs_td")


class LossSpec(_Model):
    """How a batch becomes a scalar loss and new priorities."""

    bootstrap: _Bootstrap = Field(
        default_factory=lambda: MaxBootstrap(),
        description="target policy at the next state: max | double | soft",
    )
    temperature: float | None = Field(
        None, gt=0, description="entropy temperature τ; required by `soft` and `munchausen`"
    )
    munchausen: Munchausen | None = Field(
        None, description="null | {alpha, clip_min}: Munchausen bonus on the first reward"
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
        description="identity | {kind: signed_hyperbolic, eps}: targets are h(r + γ·h⁻¹(q))",
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


# --------------------------------------------------------------------------------------------
# Replay, optimizer, schedule


class SequenceSpec(_Model):
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


class ReplaySpec(_Model):
    """Replay memory."""

    kind: Literal["uniform", "prioritized"] = Field(
        "uniform", description="uniform | prioritized (proportional, Schaul et al. 2016)"
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


class Adam(Component):
    """Adam (Kingma & Ba 2015)."""

    kind: Literal["adam"] = "adam"
    learning_rate: Schedule = Field(6.25e-5, description="step size; schedules in learner updates")
    b1: float = Field(0.9, ge=0, lt=1, description="first-moment decay")
    b2: float = Field(0.999, ge=0, lt=1, description="second-moment decay")
    eps: float = Field(1.5e-4, ge=0, description="denominator epsilon")
    max_grad_norm: float | None = Field(
        None, gt=0, description="clip gradients to this global norm; null = no clipping"
    )


class RmsProp(Component):
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


_Optimizer = _axis("optimizer", Union[Adam, RmsProp], None)


class ScheduleSpec(_Model):
    """When things happen."""

    update_period: int = Field(4, ge=1, description="transitions inserted per learner update")
    target_update_period: int = Field(
        2000, ge=1, description="learner updates between target updates"
    )
    target_update_rate: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Polyak rate of each target update: 1 copies the online parameters",
    )
    epsilon: Schedule = Field(
        default_factory=lambda: LinearSchedule(start=1.0, end=0.01, steps=250_000),
        description="ε-greedy exploration over transitions (noisy networks act greedily)",
    )
    eval_epsilon: float | None = Field(
        None,
        ge=0,
        le=1,
        description="ε of the ε-greedy evaluation policy (a paper's value, e.g. 0.05 for Nature "
        "DQN, 0.001 for C51); null = the evaluation protocol's",
    )


# --------------------------------------------------------------------------------------------
# The algorithm


class AlgorithmSpec(_Model):
    """One algorithm: a point in the product of the axes."""

    name: str = Field("", description="catalogue or file entry name")
    summary: str = Field("", description="what the algorithm is, docstring style")
    paper: str | None = Field(None, description="link to the paper")
    notes: str | None = Field(None, description="where this entry knowingly differs, and why")
    network: NetworkSpec = Field(default_factory=NetworkSpec, description="the network")
    loss: LossSpec = Field(default_factory=LossSpec, description="the loss")
    replay: ReplaySpec = Field(default_factory=ReplaySpec, description="the replay")
    optimizer: _Optimizer = Field(
        default_factory=lambda: Adam(), description="{kind: adam | rmsprop, ...}"
    )
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec, description="the schedules")

    @model_validator(mode="after")
    def _combinations(self) -> AlgorithmSpec:
        problems = list(_semantic_problems(self))
        if problems:
            raise ValueError("\n".join(f"@{path}@ {msg}" for path, msg in problems))
        return self

    @property
    def recurrent(self) -> bool:
        """Whether the network has a recurrent core (and the replay stores sequences)."""
        return self.network.core is not None


def _semantic_problems(s: AlgorithmSpec) -> Iterable[tuple[str, str]]:
    """Combinations that validate field by field but make no sense together."""
    loss, head, seq = s.loss, s.network.head, s.replay.sequence
    if loss.bootstrap.kind == "soft" and loss.temperature is None:
        yield "loss.temperature", "the soft bootstrap needs a temperature τ (e.g. 0.03)"
    if loss.munchausen is not None and loss.temperature is None:
        yield "loss.temperature", "the Munchausen bonus needs a temperature τ (e.g. 0.03)"
    categorical = head.kind == "categorical"
    if categorical and loss.td.kind != "cross_entropy":
        yield (
            "loss.td",
            f"a categorical head is trained with cross-entropy; got {loss.td.kind!r}, "
            "set `loss.td: cross_entropy`",
        )
    if loss.td.kind == "cross_entropy" and not categorical:
        yield (
            "loss.td",
            f"cross_entropy needs a categorical head, the head is {head.kind!r}; "
            "use squared or huber",
        )
    if head.kind == "quantile" and loss.td.kind != "huber":
        yield (
            "loss.td",
            f"a quantile head is trained with the quantile Huber loss; got {loss.td.kind!r}, "
            "set `loss.td: {kind: huber, delta: 1.0}` (delta is κ; 0 gives the pure quantile loss)",
        )
    if (s.network.core is None) != (seq is None):
        yield (
            "replay.sequence" if seq is None else "network.core",
            "a recurrent core needs sequence replay and sequence replay needs a recurrent core; "
            "set both `network.core` and `replay.sequence`, or neither",
        )
    if seq is not None and loss.n_step > seq.trace_length:
        yield (
            "loss.n_step",
            f"n_step={loss.n_step} is longer than replay.sequence.trace_length={seq.trace_length}",
        )
    if seq is None and loss.n_step > 1 and loss.reward_clip is not None:
        yield (
            "loss.reward_clip",
            f"with n_step={loss.n_step} the loss would clip the n-step return, not each reward; "
            "leave `loss.reward_clip: null` and let the protocol clip rewards at insertion",
        )
    uniform = s.replay.kind == "uniform"
    beta = loss.importance_exponent
    if uniform and not (beta.kind == "constant" and beta.value == 0.0):
        yield (
            "loss.importance_exponent",
            "importance weights correct prioritised sampling and do nothing with uniform replay; "
            "set `replay.kind: prioritized` or `loss.importance_exponent: 0`",
        )
    if s.replay.batch_size > s.replay.min_size:
        yield (
            "replay.min_size",
            f"min_size={s.replay.min_size} is smaller than batch_size={s.replay.batch_size}",
        )
    if s.replay.min_size > s.replay.capacity:
        yield (
            "replay.min_size",
            f"min_size={s.replay.min_size} exceeds capacity={s.replay.capacity}",
        )
    if seq is not None and s.replay.capacity < seq.length:
        yield "replay.capacity", f"capacity is smaller than one stored sequence ({seq.length})"
    yield from _schedule_problems(s)
    yield from _network_size_problems(s)


def _schedule_points(schedule: Any) -> list[tuple[str, float]]:
    """``(field, value)`` of the values a built-in schedule passes through (bounds included)."""
    kind = getattr(schedule, "kind", None)
    if kind == "constant":
        return [("", schedule.value)]
    if kind == "linear":
        return [("start", schedule.start), ("end", schedule.end)]
    if kind == "exponential":
        points = [("start", schedule.start)]
        return points + ([("end", schedule.end)] if schedule.end is not None else [])
    return []  # a user's schedule: its own model checks its values


def _at(path: str, field: str) -> str:
    return f"{path}.{field}" if field else path


def _schedule_problems(s: AlgorithmSpec) -> Iterable[tuple[str, str]]:
    """Learning rates that cannot train, probabilities outside [0, 1]."""
    lr = getattr(s.optimizer, "learning_rate", None)
    if lr is not None:
        points = _schedule_points(lr)
        for field, value in points:
            if value < 0:
                yield (
                    _at("optimizer.learning_rate", field),
                    f"a learning rate must not be negative, got {value}",
                )
        # 0 throughout: a constant 0, a linear ramp from 0 to 0, an exponential starting at 0
        ramp = points[:2] if lr.kind == "linear" else points[:1]
        if ramp and all(value == 0 for _, value in ramp):
            yield (
                "optimizer.learning_rate",
                "a learning rate of 0 never changes the network; give a positive value (e.g. 1e-4)",
            )
    for path, schedule, what in (
        ("schedule.epsilon", s.schedule.epsilon, "ε is a probability"),
        ("loss.importance_exponent", s.loss.importance_exponent, "β is an exponent"),
    ):
        for field, value in _schedule_points(schedule):
            if not 0 <= value <= 1:
                yield _at(path, field), f"{what} in [0, 1], got {value}"
        kind = getattr(schedule, "kind", None)
        if kind == "exponential" and schedule.end is None and schedule.rate > 1:
            yield (
                _at(path, "end"),
                f"{what} in [0, 1]: a rate above 1 grows without bound; set `end` (≤ 1)",
            )


def _physical_memory() -> int | None:
    """Bytes of memory of this machine, or ``None`` where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


#: Copies of the parameters a run holds: online and target networks, two optimizer moments.
PARAMETER_COPIES = 4


def network_parameter_lower_bound(network: NetworkSpec) -> int:
    """A lower bound on the parameters of ``network`` that needs no observation shape.

    Counts the weights between consecutive layers whose widths the spec fixes (MLP torso sizes,
    the core, the hidden layers, one output per action and atom); the input layer and convolutions
    depend on the observation and are left out. :func:`zoo.run.train` counts exactly (with
    ``jax.eval_shape``) before building anything.
    """
    widths: list[int] = []
    torso = network.torso
    if getattr(torso, "kind", None) == "mlp":
        widths += list(torso.sizes)
    core = network.core
    if core is not None and getattr(core, "kind", None) == "lstm":
        widths.append(int(core.size))
    head = network.head
    outputs = int(getattr(head, "num_atoms", None) or getattr(head, "num_quantiles", None) or 1)
    streams = 2 if network.dueling else 1
    total = 0
    if core is not None and getattr(core, "kind", None) == "lstm":
        total += 4 * int(core.size) * int(core.size)  # recurrent weights
    chain = [*widths, *network.hidden, outputs]
    for i, (a, b) in enumerate(itertools.pairwise(chain)):
        in_streams = i >= len(widths)  # hidden and output layers are per stream
        total += a * b * (streams if in_streams else 1)
    return total


def _network_size_problems(s: AlgorithmSpec) -> Iterable[tuple[str, str]]:
    """A network whose parameters alone cannot fit in this machine's memory."""
    memory = _physical_memory()
    if memory is None:
        return
    parameters = network_parameter_lower_bound(s.network)
    nbytes = parameters * 4 * PARAMETER_COPIES
    if nbytes > memory:
        yield (
            "network",
            f"the layers hold at least {parameters:.3g} parameters ({_bytes(nbytes)} as float32 "
            f"with the target network and the optimizer's two moments), more than this "
            f"machine's {_bytes(memory)} of memory; use smaller layers",
        )


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover


# --------------------------------------------------------------------------------------------
# Presets


class EnvSpec(_Model):
    """Where a preset runs."""

    id: str | None = Field(None, description="environment id (e.g. CartPole-v1, Pong-v5)")
    games: list[str] = Field(default_factory=list, description="Atari games of the preset")
    protocol: str = Field("classic", description="evaluation protocol name")
    num_envs: int = Field(1, ge=1, description="parallel environments")


class Budget(_Model):
    """Training length; `frames` = agent steps × frame skip."""

    agent_steps: int = Field(gt=0, description="training budget in transitions")
    frames: int | None = Field(None, gt=0, description="the same budget in frames, when Atari")


class Reference(_Model):
    """What a preset reproduces, and where each of its values comes from."""

    paper: str | None = Field(None, description="the paper (authors, year, title, link)")
    source: str | None = Field(None, description="where the hyperparameters were checked")
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="per hyperparameter (dotted field path, e.g. `optimizer.learning_rate`): "
        "where its value comes from, tagged [V] checked in a source file, [R] recalled from the "
        "paper, or [3P] a third-party transcription",
    )
    series: list[str] = Field(
        default_factory=list,
        description="ids of the reference series (zoo.reference) a run of this preset is compared "
        "with; a comparison uses only those of the run's protocol and statistic",
    )
    scores: dict[str, float] = Field(default_factory=dict, description="published scores")


class Preset(_Model):
    """A pinned configuration: a catalogue algorithm plus a paper's or a setting's values."""

    name: str = Field("", description="preset name (the file's stem)")
    summary: str = Field("", description="what the preset is")
    algorithm: str = Field(description="catalogue entry name")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="nested or dotted overrides of the algorithm's fields"
    )
    env: EnvSpec = Field(default_factory=EnvSpec, description="environment and protocol")
    budget: Budget | None = Field(None, description="training budget")
    reference: Reference = Field(default_factory=Reference, description="published reference")
    notes: str | None = Field(None, description="where the preset knowingly differs")


# --------------------------------------------------------------------------------------------
# Files


def data_dir() -> Path:
    """Where `algorithms.yaml` and `presets/` live: the wheel's package data, else the repo."""
    packaged = Path(__file__).parent / "_data"
    if (packaged / "algorithms.yaml").exists():
        return packaged
    return Path(__file__).resolve().parent.parent


def catalogue_path() -> Path:
    """Path of the shipped `algorithms.yaml`."""
    return data_dir() / "algorithms.yaml"


def presets_dir() -> Path:
    """Path of the shipped `presets/` folder."""
    return data_dir() / "presets"


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe loader that refuses duplicate mapping keys instead of keeping the last silently."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML mapping with a safe loader; errors become :class:`SpecError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _problem(str(path), None, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise _problem(str(path), None, "", f"cannot read the file: {e}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise _problem(str(path), None, "", _TOO_DEEP) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(e, "problem", None) or str(e)
        context = getattr(e, "context", None)
        message = f"malformed YAML: {where}{what}" + (f" ({context})" if context else "")
        raise _problem(str(path), None, "", message) from None
    if data is None:
        return {}
    if too_deep(data):
        raise _problem(str(path), None, "", _TOO_DEEP)
    if not isinstance(data, dict):
        raise _problem(
            str(path),
            None,
            "",
            f"expected a mapping of names to entries, got {type(data).__name__}",
        )
    return data


#: The deepest nesting of mappings and lists a spec file or an override may have (the specs'
#: own is 5); deeper input is refused before any recursive merge or validation sees it.
MAX_NESTING = 32
_TOO_DEEP = (
    f"nested more than {MAX_NESTING} levels deep (or an anchor refers to itself); no spec needs "
    "that"
)


def too_deep(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether mappings and lists nest more than ``limit`` levels in ``value`` (or loop).

    Walks level by level, visiting each shared object (a YAML alias) once per level, so that
    neither a deep document nor an alias bomb makes it recurse or explode.
    """
    level = [value]
    for _ in range(limit + 1):
        deeper: dict[int, Any] = {}
        for node in level:
            children = (
                node.values()
                if isinstance(node, Mapping)
                else node
                if isinstance(node, list | tuple)
                else ()
            )
            for child in children:
                if isinstance(child, Mapping | list | tuple):
                    deeper[id(child)] = child
        if not deeper:
            return False
        level = list(deeper.values())
    return True


def _entries(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The entries of an algorithms file; entry names must be strings."""
    data = read_yaml(path)
    bad = [key for key in data if not isinstance(key, str)]
    if bad:
        raise SpecError(
            [
                Problem(str(path), str(key), "", f"entry names must be strings; quote it: '{key}':")
                for key in bad
            ]
        )
    return data


# --------------------------------------------------------------------------------------------
# Merging, extends and overrides


def _merge(base: Any, child: Any) -> Any:
    """Deep merge: mappings merge key by key, everything else (lists too) replaces.

    A bare component name counts as ``{kind: name}``; a child naming another ``kind`` replaces
    the base component whole, so the old kind's parameters never leak into the new one.
    """
    if isinstance(base, str) and isinstance(child, Mapping):
        base = {"kind": base}
    if not (isinstance(base, Mapping) and isinstance(child, Mapping)):
        return copy.deepcopy(child)
    if "kind" in child and "kind" in base and base["kind"] != child["kind"]:
        return copy.deepcopy(dict(child))
    out = dict(copy.deepcopy(base))
    for key, value in child.items():
        out[key] = _merge(out[key], value) if key in out else copy.deepcopy(value)
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Parse ``["loss.n_step=3", "network.head={kind: quantile}"]``; values are YAML."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise _problem("--set", None, item, "expected KEY=VALUE, e.g. loss.n_step=3")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except RecursionError:
            raise _problem("--set", None, key.strip(), _TOO_DEEP) from None
        except yaml.YAMLError as e:
            raise _problem(
                "--set", None, key.strip(), f"malformed YAML value {text!r}: {e}"
            ) from None
        out[key.strip()] = value
    _check_overrides(out)
    return out


def _check_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse overrides nested (by dots or by value) deeper than :data:`MAX_NESTING`."""
    for key, value in overrides.items():
        if str(key).count(".") >= MAX_NESTING or too_deep(value):
            shown = str(key) if len(str(key)) <= 60 else str(key)[:57] + "..."
            raise _problem(OVERRIDES_SOURCE, None, shown, _TOO_DEEP)


def _nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"loss.n_step": 3}`` → ``{"loss": {"n_step": 3}}`` (later keys merge into earlier)."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        parts = str(key).split(".")
        node: dict[str, Any] = {}
        cursor = node
        for part in parts[:-1]:
            cursor[part] = {}
            cursor = cursor[part]
        cursor[parts[-1]] = value
        out = _merge(out, node)
    return out


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge dotted or nested ``overrides`` into a raw entry."""
    if not overrides:
        return dict(raw)
    return _merge(dict(raw), _nest(overrides))


_ENTRY_META = {"extends"}


#: The longest ``extends:`` chain (entries, the entry itself included) a spec may have.
MAX_EXTENDS_DEPTH = 64


def _resolve(
    entries: Mapping[str, Any],
    name: str,
    source: str,
    cache: dict[tuple[str, str], tuple[dict[str, Any], int]] | None = None,
) -> dict[str, Any]:
    """The raw entry ``name`` of ``entries`` with its ``extends:`` chain merged in.

    The chain is walked iteratively (no recursion limit) and its depth is capped at
    :data:`MAX_EXTENDS_DEPTH`; ``cache`` maps ``(source, entry)`` to the merged entry and its
    depth, so that resolving every entry of a file is linear in the file's size.
    """
    cache = {} if cache is None else cache
    chain: list[tuple[tuple[str, str], dict[str, Any]]] = []
    seen: set[tuple[str, str]] = set()
    here_entries, here_source, here = entries, source, name
    base: dict[str, Any] = {}
    base_depth = 0
    while True:
        key = (here_source, here)
        if key in cache:
            base, base_depth = cache[key]
            break
        if key in seen:
            names = [n for (_, n), _ in chain]
            start = names.index(here) if here in names else 0
            cycle = " -> ".join([*names[start:], here])
            raise _problem(source, name, "extends", f"cyclic extends: {cycle}")
        seen.add(key)
        raw = here_entries[here]
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise _problem(
                here_source,
                here,
                "",
                f"an entry must be a mapping of fields, got {type(raw).__name__}",
            )
        chain.append((key, {k: v for k, v in raw.items() if k not in _ENTRY_META}))
        if len(chain) > MAX_EXTENDS_DEPTH:
            names = [n for (_, n), _ in chain]
            raise _problem(
                source,
                name,
                "extends",
                f"the extends chain is more than {MAX_EXTENDS_DEPTH} entries deep "
                f"({' -> '.join(names[:3])} -> … -> {names[-1]} -> …); flatten it",
            )
        parent = raw.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str):
            raise _problem(here_source, here, "extends", f"must be an entry name, got {parent!r}")
        if parent in here_entries and parent != here:
            here = parent
            continue
        # a catalogue entry (a user entry may extend the catalogue entry of its own name)
        catalogue = _catalogue_raw()
        if parent not in catalogue:
            if parent == here:
                message = (
                    f"an entry cannot extend itself; {parent!r} may extend only a catalogue "
                    "entry of the same name, and the catalogue has none (`zoo list`)"
                )
            else:
                known = sorted((set(map(str, here_entries)) | set(catalogue)) - {here})
                hint = registry.suggest(parent, known)
                message = f"unknown entry {parent!r}" + (
                    f"; did you mean {hint!r}?" if hint else ""
                )
            raise _problem(here_source, here, "extends", message)
        here_entries, here_source, here = catalogue, str(catalogue_path()), parent
    if base_depth + len(chain) > MAX_EXTENDS_DEPTH:
        raise _problem(
            source,
            name,
            "extends",
            f"the extends chain is {base_depth + len(chain)} entries deep, more than "
            f"{MAX_EXTENDS_DEPTH}; flatten it",
        )
    merged = base
    for depth, (key, body) in enumerate(reversed(chain), start=base_depth + 1):
        merged = _merge(merged, body)
        cache[key] = (merged, depth)
    return copy.deepcopy(merged)


_CATALOGUE_CACHE: dict[str, tuple[float, dict[str, Any]]] = {}


def _catalogue_raw() -> dict[str, Any]:
    path = catalogue_path()
    mtime = path.stat().st_mtime
    cached = _CATALOGUE_CACHE.get(str(path))
    if cached is None or cached[0] != mtime:
        _CATALOGUE_CACHE[str(path)] = (mtime, read_yaml(path))
    return _CATALOGUE_CACHE[str(path)][1]


# --------------------------------------------------------------------------------------------
# Validation with readable errors


def _validate(model: type[BaseModel], data: dict[str, Any], source: str, entry: str) -> Any:
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        raise SpecError(_problems_from(e, model, data, source, entry)) from None


def _problems_from(
    error: pydantic.ValidationError,
    model: type[BaseModel],
    data: Any,
    source: str,
    entry: str,
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for err in error.errors(include_url=False):
        path_parts, node = _clean_loc(err["loc"], data)
        path = ".".join(str(p) for p in path_parts)
        kind, ctx, msg = err["type"], err.get("ctx") or {}, err["msg"]
        value = err.get("input")
        if kind == "value_error" and "@" in msg:
            for line in msg.removeprefix("Value error, ").splitlines():
                sem_path, _, sem_msg = line.partition("@ ")
                problems.append(Problem(source, entry, sem_path.strip("@"), sem_msg))
            continue
        if kind == "extra_forbidden":
            field = str(path_parts[-1]) if path_parts else "?"
            allowed = _allowed_keys(model, path_parts[:-1], data)
            hint = registry.suggest(field, allowed)
            text = f"unknown field {field!r}"
            text += f"; did you mean {hint!r}?" if hint else ""
            text += f" Allowed: {', '.join(allowed)}." if allowed else ""
            path = ".".join(str(p) for p in path_parts)
        elif kind in ("union_tag_invalid", "literal_error"):
            expected = _expected(ctx, model, path_parts, kind)
            bad = ctx.get("tag", value)
            hint = registry.suggest(str(bad), expected)
            text = f"unknown value {bad!r}"
            text += f"; did you mean {hint!r}?" if hint else ""
            text += f" Allowed: {', '.join(expected)}." if expected else ""
        elif kind == "union_tag_not_found":
            text = f"needs a `kind` ({', '.join(_expected(ctx, model, path_parts, kind))})"
        elif kind == "missing":
            text = "required field is missing"
        else:
            msg = msg.removeprefix("Value error, ")
            text = f"{msg} (got {value!r})" if not isinstance(value, dict | list) else msg
        key = f"{path}|{text}"
        if key not in seen:
            seen.add(key)
            problems.append(Problem(source, entry, path, text))
        del node
    return problems


def _clean_loc(loc: tuple[Any, ...], data: Any) -> tuple[list[Any], Any]:
    """Drop the union tags and validator names Pydantic puts in error locations."""
    parts: list[Any] = []
    node = data
    for item in loc:
        if isinstance(item, str) and item.startswith("function-"):
            continue
        if isinstance(node, str):  # bare component name: its fields live under {kind: name}
            node = {"kind": node}
        if isinstance(node, Mapping):
            if item in node:
                parts.append(item)
                node = node[item]
                continue
            if node.get("kind") == item:
                continue  # the discriminator tag of a union member
            if isinstance(item, str) and item in ("constant", "linear", "exponential", "kind"):
                if item == "kind":
                    parts.append(item)
                continue
        elif isinstance(node, list) and isinstance(item, int):
            parts.append(item)
            node = node[item] if item < len(node) else None
            continue
        if isinstance(node, int | float) and item in ("constant", "value"):
            continue  # a bare number is a constant schedule: its error is the number's
        parts.append(item)
        node = None
    return parts, node


def _model_at(model: Any, parts: list[Any], data: Any) -> Any:
    """The model class that validates the mapping at ``parts`` of ``data`` (best effort)."""
    node = data
    for part in parts:
        if isinstance(part, int):
            return None
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        annotation = fields[part].annotation
        node = node.get(part) if isinstance(node, Mapping) else None
        model = _pick_member(annotation, node)
    return model


def _pick_member(annotation: Any, node: Any) -> Any:
    members = _flatten_annotation(annotation)
    kind = node.get("kind") if isinstance(node, Mapping) else node
    for m in members:
        if isinstance(m, type) and issubclass(m, BaseModel):
            tag = m.model_fields.get("kind")
            if tag is None or tag.default == kind:
                return m
    return None


def _flatten_annotation(annotation: Any) -> list[Any]:
    origin_args = getattr(annotation, "__args__", None)
    metadata = getattr(annotation, "__origin__", None)
    if metadata is not None and hasattr(annotation, "__metadata__"):
        return _flatten_annotation(metadata)
    if origin_args:
        out: list[Any] = []
        for a in origin_args:
            out.extend(_flatten_annotation(a))
        return out
    return [annotation]


def _allowed_keys(model: Any, parts: list[Any], data: Any) -> list[str]:
    found = _model_at(model, parts, data)
    return sorted(found.model_fields) if found is not None else []


def _expected(ctx: Mapping[str, Any], model: Any, parts: list[Any], kind: str) -> list[str]:
    tags = ctx.get("expected_tags") or ctx.get("expected") or ""
    names = [t.strip().strip("'\"") for t in str(tags).replace(" or ", ",").split(",") if t.strip()]
    axis = _axis_of(parts)
    if axis is not None:
        names = sorted(set(names) | set(registry.names(axis, load=False)))
    return names


_AXIS_PATHS = {
    ("network", "torso"): "torso",
    ("network", "core"): "core",
    ("network", "head"): "head",
    ("loss", "bootstrap"): "bootstrap",
    ("loss", "td"): "td",
    ("loss", "value_transform"): "value_transform",
    ("loss", "regularizer"): "regularizer",
    ("loss", "priority"): "priority",
    ("optimizer",): "optimizer",
}


def _axis_of(parts: list[Any]) -> str | None:
    strs = tuple(p for p in parts if p != "kind")
    for prefix, axis in _AXIS_PATHS.items():
        if strs[: len(prefix)] == prefix and len(strs) <= len(prefix) + 1:
            return axis
    return None


# --------------------------------------------------------------------------------------------
# Public loading functions


def algorithm_names(pattern: str = "*") -> list[str]:
    """Catalogue entry names matching a shell-style wildcard."""
    return sorted(n for n in _catalogue_raw() if fnmatch.fnmatchcase(n, pattern))


def preset_names(pattern: str = "*") -> list[str]:
    """Shipped preset names matching a shell-style wildcard."""
    root = presets_dir()
    if not root.is_dir():
        return []
    return sorted(
        p.stem
        for p in root.glob("*.yaml")
        if not p.stem.startswith("_") and fnmatch.fnmatchcase(p.stem, pattern)
    )


def looks_like_path(ref: str) -> bool:
    """Whether an algorithm or preset reference is a file path (``x.yaml``, ``dir/x``,
    ``x.yaml:entry``) rather than a name."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref or os.sep in ref or ".yaml:" in ref


def _split_ref(ref: str) -> tuple[str, str | None]:
    for suffix in (".yaml:", ".yml:"):
        if suffix in ref:
            path, _, name = ref.rpartition(":")
            return path, name
    return ref, None


def load_algorithms_file(
    path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None
) -> dict[str, AlgorithmSpec]:
    """Validate every entry of a YAML file; all problems of all entries in one SpecError."""
    source = str(path)
    entries = _entries(path)
    specs: dict[str, AlgorithmSpec] = {}
    problems: list[Problem] = []
    cache: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
    for name in entries:
        try:
            specs[name] = _build_algorithm(entries, str(name), source, overrides, cache)
        except SpecError as e:
            problems.extend(e.problems)
    if problems:
        raise SpecError(problems)
    return specs


def _build_algorithm(
    entries: Mapping[str, Any],
    name: str,
    source: str,
    overrides: Mapping[str, Any] | None,
    cache: dict[tuple[str, str], tuple[dict[str, Any], int]] | None = None,
) -> AlgorithmSpec:
    base = _resolve(entries, name, source, cache)
    if overrides:
        _check_overrides(overrides)
    try:
        raw = apply_overrides(base, overrides)
    except (TypeError, AttributeError) as e:
        raise _problem(OVERRIDES_SOURCE, name, "", f"cannot apply overrides: {e}") from None
    raw["name"] = name
    try:
        return _validate(AlgorithmSpec, raw, source, name)
    except SpecError as e:
        if not overrides:
            raise
        # The entry alone may be valid: then every problem is the overrides' (--set), not the
        # file's, and the message must say so rather than blame the file
        try:
            _validate(AlgorithmSpec, {**base, "name": name}, source, name)
        except SpecError:
            raise e from None
        raise SpecError(
            [Problem(OVERRIDES_SOURCE, p.entry, p.path, p.message) for p in e.problems]
        ) from None


#: The source named by problems that dotted overrides (``--set KEY=VALUE``) cause.
OVERRIDES_SOURCE = "--set"


def load_algorithm(
    ref: str | os.PathLike[str] | AlgorithmSpec,
    overrides: Mapping[str, Any] | None = None,
) -> AlgorithmSpec:
    """Load a catalogue entry by name, or an entry of a YAML file.

    Args:
      ref: a catalogue name (``"mdqn"``), a path (``"mine.yaml"``, which must hold one entry),
        ``"mine.yaml:name"`` for one of several, or an already built spec.
      overrides: dotted (``{"loss.n_step": 3}``) or nested overrides, validated with the rest.

    Raises:
      SpecError: naming the file, entry, field path, bad value and allowed values.
    """
    if isinstance(ref, AlgorithmSpec):
        if not overrides:
            return ref
        _check_overrides(overrides)
        data = apply_overrides(ref.model_dump(mode="json", serialize_as_any=True), overrides)
        return _validate(AlgorithmSpec, data, "--set", ref.name)
    ref = str(ref)
    if looks_like_path(ref):
        path, name = _split_ref(ref)
        entries = _entries(path)
        if name is None:
            if len(entries) != 1:
                names = ", ".join(map(str, entries)) or "(none)"
                raise _problem(
                    path,
                    None,
                    "",
                    f"holds {len(entries)} entries ({names}); pick one as {path}:NAME",
                )
            name = str(next(iter(entries)))
        if name not in entries:
            hint = registry.suggest(name, list(map(str, entries)))
            raise _problem(
                path,
                name,
                "",
                "no such entry"
                + (f"; did you mean {hint!r}?" if hint else "")
                + f". Entries: {', '.join(map(str, entries))}.",
            )
        return _build_algorithm(entries, name, path, overrides)
    catalogue = _catalogue_raw()
    if ref not in catalogue:
        hint = registry.suggest(ref, list(catalogue))
        raise _problem(
            "algorithms.yaml",
            None,
            "",
            f"unknown algorithm {ref!r}"
            + (f"; did you mean {hint!r}?" if hint else "")
            + " (`zoo list` shows them all; a path to a YAML file also works)",
        )
    return _build_algorithm(catalogue, ref, str(catalogue_path()), overrides)


PRESET_PREFIX = "preset:"
"""``preset:NAME`` always names the shipped preset ``NAME``, also where a catalogue entry has
the same name (``c51``, ``qr_dqn``, ``rainbow``, ``r2d2``, ...: the bare name is the entry)."""


def is_preset(ref: str | os.PathLike[str]) -> bool:
    """Whether ``ref`` names a preset: ``preset:NAME``, a shipped preset that is not also a
    catalogue name, or a YAML file of preset form (a top-level ``algorithm:`` naming an entry)."""
    ref = str(ref)
    if ref.startswith(PRESET_PREFIX):
        return True
    if not looks_like_path(ref):
        return ref in preset_names() and ref not in algorithm_names()
    path, name = _split_ref(ref)
    if name is not None or not Path(path).is_file():
        return False
    return isinstance(read_yaml(path).get("algorithm"), str)


def load_preset(ref: str | os.PathLike[str]) -> Preset:
    """Load a shipped preset by name (or ``preset:NAME``) or a preset file by path; its
    algorithm is validated too."""
    ref = str(ref)
    named = ref.startswith(PRESET_PREFIX)
    ref = ref.removeprefix(PRESET_PREFIX)
    if looks_like_path(ref) and not named:
        path = Path(ref)
    else:
        path = presets_dir() / f"{ref}.yaml"
        if not path.exists():
            hint = registry.suggest(ref, preset_names())
            raise _problem(
                "presets/",
                None,
                "",
                f"unknown preset {ref!r}"
                + (f"; did you mean {hint!r}?" if hint else "")
                + " (`zoo list presets` shows them all)",
            )
    raw = _preset_raw(path, ())
    raw["name"] = path.stem
    preset = _validate(Preset, raw, str(path), path.stem)
    algorithm_for(preset, source=str(path))
    return preset


def _preset_raw(path: Path, stack: tuple[Path, ...]) -> dict[str, Any]:
    """A preset file's mapping with its ``extends:`` chain (other presets) merged in.

    A preset may extend another preset by name (looked up beside it, then among the shipped
    ones); files whose names start with ``_`` are bases, not listed by ``zoo list presets``.
    """
    if path in stack:
        chain = " -> ".join(p.stem for p in (*stack, path))
        raise _problem(str(stack[0]), stack[0].stem, "extends", f"cyclic extends: {chain}")
    if len(stack) >= MAX_EXTENDS_DEPTH:
        raise _problem(
            str(stack[0]),
            stack[0].stem,
            "extends",
            f"the extends chain is deeper than {MAX_EXTENDS_DEPTH} presets; flatten it",
        )
    raw = read_yaml(path)
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    candidates = [path.parent / f"{parent}.yaml", presets_dir() / f"{parent}.yaml"]
    found = next((c for c in candidates if c.exists()), None)
    if found is None:
        hint = registry.suggest(str(parent), preset_names("*") + preset_bases())
        raise _problem(
            str(path),
            path.stem,
            "extends",
            f"unknown preset {parent!r}" + (f"; did you mean {hint!r}?" if hint else ""),
        )
    return _merge(_preset_raw(found, (*stack, path)), raw)


def preset_bases() -> list[str]:
    """Shipped preset bases (``presets/_*.yaml``), which other presets extend."""
    root = presets_dir()
    return sorted(p.stem for p in root.glob("_*.yaml")) if root.is_dir() else []


def algorithm_for(preset: Preset, source: str | None = None) -> AlgorithmSpec:
    """The preset's algorithm with its overrides applied and validated."""
    try:
        return load_algorithm(preset.algorithm, overrides=preset.overrides)
    except SpecError as e:
        if source is None:
            raise
        raise SpecError(
            [
                Problem(source, p.entry, f"overrides: {p.path}" if p.path else "", p.message)
                for p in e.problems
            ]
        ) from None


# --------------------------------------------------------------------------------------------
# Describing a spec


def describe(spec: BaseModel) -> str:
    """The fully resolved YAML of ``spec``, each field commented with its description."""
    lines: list[str] = []
    _describe_into(spec, lines, 0)
    return "\n".join(lines) + "\n"


def _describe_into(model: BaseModel, lines: list[str], indent: int) -> None:
    pad = "  " * indent
    for field, info in type(model).model_fields.items():
        value = getattr(model, field)
        comment = f"  # {info.description}" if info.description else ""
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{field}:{comment}")
            _describe_into(value, lines, indent + 1)
        else:
            text = yaml.safe_dump(
                value, default_flow_style=True, width=10_000, allow_unicode=True
            ).strip()
            text = text.removesuffix("\n...").removesuffix("...").strip()
            lines.append(f"{pad}{field}: {text}{comment}")
