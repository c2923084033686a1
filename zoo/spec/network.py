"""The network axes: torso → (core) → hidden → head, and what a head needs of the loss."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Union

from pydantic import Field, model_validator

from zoo.spec.base import Component, Model, a_or_an, axis

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = [
    "INIT_HELP",
    "PARAMETER_COPIES",
    "POWER_ITERATIONS",
    "AutoTorso",
    "CategoricalHead",
    "Head",
    "ImpalaCnnTorso",
    "ImplicitQuantileHead",
    "Init",
    "LstmCore",
    "MinatarCnnTorso",
    "MlpTorso",
    "NatureCnnTorso",
    "NetworkSpec",
    "Norm",
    "Padding",
    "QHead",
    "QuantileHead",
    "format_bytes",
    "network_parameter_lower_bound",
    "physical_memory",
]


#: A layer width (units or channels): a layer of 0 units computes nothing.
Width = Annotated[int, Field(gt=0)]

#: A layer normalisation option (Ba et al. 2016): ``none`` or ``layer_norm``.
Norm = Literal["none", "layer_norm"]

#: Convolution padding: ``VALID`` (none) or ``SAME`` (XLA's, which Flax's ``nn.Conv`` and
#: Haiku's ``hk.Conv2D`` default to: ``ceil(size / stride)`` outputs, the odd cell at the end).
Padding = Literal["VALID", "SAME"]

#: A weight initialisation of plain dense and convolution layers
#: (:data:`zoo.networks.layers.INITIALISERS`).
Init = Literal[
    "default", "glorot_uniform", "dopamine_uniform", "truncated_normal", "he_normal", "lecun_normal"
]

#: What each :data:`Init` is, for the help of every field that takes one.
INIT_HELP = (
    "default = Equinox's U(±1/√fan_in) weights and biases (PyTorch's, dqn_zoo's) | "
    "glorot_uniform = U(±√(6/(fan_in + fan_out))) (Flax's xavier_uniform and Keras's default: "
    "Dopamine's DQN networks) | dopamine_uniform = U(±√(√3/fan_in)), variance_scaling(1/√3, "
    "fan_in, uniform) (Dopamine's Rainbow, implicit quantile and quantile networks) | "
    "truncated_normal = normal of σ 1/√fan_in cut at ±2σ (Haiku's and Sonnet's default: Acme's "
    "networks) | he_normal = truncated normal of variance 2/fan_in (Flax's he_normal: purejaxql's "
    "hidden layers) | lecun_normal = truncated normal of variance 1/fan_in (Flax's default); all "
    "but default set biases to zero"
)


def _norm_field(where: str) -> Norm:
    return Field(
        "none",
        description=f"none | layer_norm: a layer normalisation {where}, before the ReLU "
        "(Ba et al. 2016; where purejaxql's PQN networks put it)",
    )


class AutoTorso(Component):
    """Nature CNN for rank-3 (image) observations, else an MLP of ``sizes``."""

    kind: Literal["auto"] = "auto"
    sizes: list[Width] = Field(
        default_factory=list, description="MLP layer sizes used for non-image observations"
    )
    norm: Norm = _norm_field("after each layer (the MLP's, or the Nature CNN's convolutions)")
    padding: Padding = Field("VALID", description="the Nature CNN's padding (see nature_cnn)")


class MlpTorso(Component):
    """Flatten, then dense ReLU layers of ``sizes`` (empty: flatten only)."""

    kind: Literal["mlp"] = "mlp"
    sizes: list[Width] = Field(default_factory=list, description="dense layer sizes")
    norm: Norm = _norm_field("after each dense layer")


class NatureCnnTorso(Component):
    """Mnih et al. 2015: conv 32×8×8/4, 64×4×4/2, 64×3×3/1, ReLU; the fc512 comes from `hidden`."""

    kind: Literal["nature_cnn"] = "nature_cnn"
    padding: Padding = Field(
        "VALID",
        description="VALID (the 2015 paper's and dqn_zoo's: 84×84 → 20 → 9 → 7, 3,136 features) "
        "| SAME (Dopamine's and Acme's, which inherit Flax's and Haiku's default: 84 → 21 → 11 "
        "→ 11, 7,744 features)",
    )
    norm: Norm = _norm_field("over the channels after each convolution")


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
    padding: Literal["SAME", "VALID"] = Field(
        "SAME",
        description="SAME (Revisiting Rainbow's, [C, 10, 10] → 1600 features) | VALID "
        "(purejaxql's PQN, → 1024 features)",
    )
    norm: Norm = _norm_field("over the channels after the convolution")


#: Power iterations per call of a spectrally normalised layer unless the spec says otherwise
#: (:class:`zoo.networks.layers.SpectralNorm` explains the number).
POWER_ITERATIONS = 16


class ImpalaCnnTorso(Component):
    """Espeholt et al. 2018: per stack conv3×3, max-pool 3×3/2, two residual blocks.

    Beyond The Rainbow's torso (Clark et al. 2024, https://arxiv.org/abs/2411.03820) is
    ``{kind: impala_cnn, width: 2, pool: [6, 6], spectral_norm: true}``.
    """

    kind: Literal["impala_cnn"] = "impala_cnn"
    channels: list[Width] = Field(
        default_factory=lambda: [16, 32, 32],
        min_length=1,
        description="output channels of each stack",
    )
    width: Width = Field(
        1,
        description="multiplies every entry of `channels` (Beyond The Rainbow's model_size: 2)",
    )
    pool: list[Width] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="null | [h, w]: adaptive max pooling of the final feature map (after the "
        "ReLU) to h×w, with PyTorch's AdaptiveMaxPool2d bins (Beyond The Rainbow: [6, 6])",
    )
    max_pool_padding: Literal["same", "symmetric"] = Field(
        "same",
        description="padding of each stack's 3×3 stride-2 max pooling: same = TensorFlow's SAME "
        "(the IMPALA reference's, Flax's nn.max_pool 'SAME': on an even size the extra cell is at "
        "the end, windows [2i, 2i+2]) | symmetric = one cell on each side (PyTorch's "
        "MaxPool2d(3, 2, padding=1), Beyond The Rainbow's: windows [2i−1, 2i+1])",
    )
    spectral_norm: bool = Field(
        False,
        description="divide the weight of both convolutions of every residual block by its "
        "largest singular value (Miyato et al. 2018; where Beyond The Rainbow puts it), "
        "estimated afresh at every call by `power_iterations` power iterations",
    )
    power_iterations: int = Field(
        POWER_ITERATIONS,
        ge=1,
        description="power iterations per call of each spectrally normalised layer (no state is "
        "kept between calls, unlike PyTorch's one iteration per call from a stored vector)",
    )


class LstmCore(Component):
    """An LSTM between torso and head (Hochreiter & Schmidhuber 1997; R2D2 uses 512)."""

    kind: Literal["lstm"] = "lstm"
    size: int = Field(512, gt=0, description="hidden and cell state size")


class Head(Component):
    """Base of the value heads: what a head outputs and which td losses can train it.

    A head that can only be trained by some td losses sets ``td_losses`` (their kinds),
    ``trained_with`` (the loss in words) and ``td_fix`` (the setting that fixes it); the rule is
    checked by :meth:`spec_problems` for every head, a user's head that subclasses this too.
    """

    #: What the head outputs per action: ``values``, ``distribution`` (probabilities over fixed
    #: atoms) or ``quantiles``; a td loss that compares distributions asks for ``distribution``.
    output: ClassVar[str] = "values"
    #: The td kinds that train this head (``None``: any that compares values).
    td_losses: ClassVar[tuple[str, ...] | None] = None
    trained_with: ClassVar[str] = ""
    td_fix: ClassVar[str] = ""

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """The td loss must be one that trains this head."""
        td = spec.loss.td.kind
        if self.td_losses is not None and td not in self.td_losses:
            yield (
                "loss.td",
                f"{a_or_an(self.kind)} {self.kind} head is trained with {self.trained_with}; "
                f"got {td!r}, set {self.td_fix}",
            )


class QHead(Head):
    """One scalar value per action."""

    kind: Literal["q"] = "q"


class CategoricalHead(Head):
    """C51 (Bellemare et al. 2017): a softmax over ``num_atoms`` fixed atoms per action."""

    output: ClassVar[str] = "distribution"
    td_losses: ClassVar[tuple[str, ...] | None] = ("cross_entropy",)
    trained_with: ClassVar[str] = "cross-entropy"
    td_fix: ClassVar[str] = "`loss.td: cross_entropy`"

    kind: Literal["categorical"] = "categorical"
    num_atoms: int = Field(51, ge=2, description="number of atoms of the support")
    v_min: float = Field(-10.0, description="lowest atom")
    v_max: float = Field(10.0, description="highest atom")

    @model_validator(mode="after")
    def _support(self) -> CategoricalHead:
        if not self.v_min < self.v_max:
            raise ValueError(f"needs v_min < v_max, got v_min={self.v_min} and v_max={self.v_max}")
        return self


class QuantileHead(Head):
    """QR-DQN (Dabney et al. 2018): ``num_quantiles`` quantiles at midpoints (i + ½)/N."""

    output: ClassVar[str] = "quantiles"
    td_losses: ClassVar[tuple[str, ...] | None] = ("huber",)
    trained_with: ClassVar[str] = "the quantile Huber loss"
    td_fix: ClassVar[str] = (
        "`loss.td: {kind: huber, delta: 1.0}` (delta is κ; 0 gives the pure quantile loss)"
    )

    kind: Literal["quantile"] = "quantile"
    num_quantiles: int = Field(200, ge=1, description="number of quantiles N")


class ImplicitQuantileHead(Head):
    """IQN (Dabney et al. 2018b): quantiles at fractions τ ~ U(0, 1) drawn per example, each
    embedded with cosines; dqn_zoo's and Dopamine's defaults."""

    output: ClassVar[str] = "quantiles"
    td_losses: ClassVar[tuple[str, ...] | None] = QuantileHead.td_losses
    trained_with: ClassVar[str] = QuantileHead.trained_with
    td_fix: ClassVar[str] = QuantileHead.td_fix

    kind: Literal["iqn"] = "iqn"
    num_cosines: int = Field(64, ge=1, description="cosines cos(π·i·τ), i = 1..M, embedding τ")
    num_samples: int = Field(64, ge=1, description="N: fractions τ at the state learned")
    num_target_samples: int = Field(
        64, ge=1, description="N′: fractions τ′ of the target quantiles at the next state"
    )
    num_policy_samples: int = Field(
        32,
        ge=1,
        description="K: fractions whose mean quantile picks the greedy action "
        "(acting, and the bootstrap's policy at the next state)",
    )


class FqfHead(Head):
    """FQF (Yang et al. 2019): ``num_fractions`` quantile fractions proposed per state by a
    fraction proposal layer, IQN's cosine-embedded quantile values at their midpoints, and the
    fraction loss (the 1-Wasserstein gradient) with an optional entropy bonus; microsoft/FQF's
    defaults. Its proposal layer is ``head.fraction`` (train it with its own optimizer through
    ``optimizer.groups``, as the paper does)."""

    output: ClassVar[str] = "quantiles"
    td_losses: ClassVar[tuple[str, ...] | None] = QuantileHead.td_losses
    trained_with: ClassVar[str] = QuantileHead.trained_with
    td_fix: ClassVar[str] = QuantileHead.td_fix

    kind: Literal["fqf"] = "fqf"
    num_cosines: int = Field(64, ge=1, description="cosines cos(π·i·τ), i = 1..M, embedding τ")
    num_fractions: int = Field(
        32, ge=2, description="N: fractions proposed per state (quantiles at their midpoints)"
    )
    entropy_coef: float = Field(
        0.0,
        ge=0,
        description="weight of the bonus −Σ τ_i·log τ_i over the interior fractions, subtracted "
        "from the fraction loss (microsoft/FQF: fqf_ent × 0.001)",
    )


_Torso = axis(
    "torso", Union[AutoTorso, MlpTorso, NatureCnnTorso, ImpalaCnnTorso, MinatarCnnTorso], "auto"
)
_Core = axis("core", Union[LstmCore], None)
_Head = axis(
    "head", Union[QHead, CategoricalHead, QuantileHead, ImplicitQuantileHead, FqfHead], "q"
)


class NetworkSpec(Model):
    """torso → (core) → hidden → head. Networks act on one observation (Equinox convention)."""

    torso: _Torso = Field(
        default_factory=lambda: AutoTorso(),
        description="feature extractor: auto | mlp | nature_cnn | impala_cnn | minatar_cnn; "
        "`auto` picks nature_cnn for image (rank-3) observations and an MLP of `sizes` otherwise",
    )
    torso_norm: Literal["none", "min_max"] = Field(
        "none",
        description="none | min_max: each example's torso features scaled to [0, 1] by their "
        "own min and max, (x − min)/(max − min + 1e-5) (SPR and BBF's renormalize, Schwarzer "
        "et al. 2021, 2023)",
    )
    hidden: list[Width] = Field(
        default_factory=lambda: [512],
        description="dense ReLU layers between torso (or core) and the output layer; with "
        "dueling each stream has its own copy; noisy when `noisy` is true",
    )
    norm: Norm = _norm_field("after each `hidden` layer (each stream's, with dueling)")
    dueling: bool = Field(False, description="dueling streams V + A − mean(A) (Wang et al. 2016)")
    shared_hidden: bool = Field(
        False,
        description="with dueling: one copy of the `hidden` layers that both streams' output "
        "layers read (Dopamine's FullRainbowNetwork, behind DER and DrQ(ε)), not a copy per "
        "stream (the paper's, dqn_zoo's, Acme's)",
    )
    noisy: bool = Field(
        False,
        description="factorised Gaussian noisy layers after the torso (Fortunato et al. 2018): "
        "the noise explores, and ε-greedy acting adds to it only where schedule.epsilon is "
        "above 0 (the catalogue's noisy entries set ε 0)",
    )
    noisy_sigma0: float = Field(0.5, gt=0, description="σ₀ of noisy layers: σ = σ₀/√fan_in")
    init: Init = Field(
        "default",
        description="initialisation of every plain dense and convolution layer (noisy layers and "
        "LSTM cores keep their own): " + INIT_HELP,
    )
    output_init: Init | None = Field(
        None,
        description="initialisation of the output layer (each stream's last layer): null = as "
        "`init` | any value of `init` (purejaxql: he_normal everywhere but the output layer, "
        "which keeps Flax's default lecun_normal)",
    )
    core: _Core | None = Field(
        None, description="null (feed-forward) | {kind: lstm, size}; needs replay.sequence"
    )
    head: _Head = Field(
        default_factory=lambda: QHead(),
        description="q | {kind: categorical, num_atoms, v_min, v_max} | "
        "{kind: quantile, num_quantiles} | {kind: iqn, num_cosines, num_samples, "
        "num_target_samples, num_policy_samples} | {kind: fqf, num_cosines, num_fractions, "
        "entropy_coef}",
    )

    def unused_settings(self, spec: AlgorithmSpec) -> Iterable[str]:
        """σ₀ without noisy layers, the shared trunk without dueling streams."""
        del spec
        if not self.noisy:
            yield "network.noisy_sigma0"
        if not self.dueling:
            yield "network.shared_hidden"

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """A recurrent core needs sequence replay; noisy output layers keep their own
        initialisation; the layers must fit in this machine."""
        if self.core is not None and spec.replay.sequence is None:
            yield "replay.sequence", RECURRENT_NEEDS_SEQUENCES
        if self.shared_hidden and not self.dueling:
            yield (
                "network.shared_hidden",
                "shares the hidden layers between the dueling streams, and this network has one "
                "stream; set `network.dueling: true` or drop `shared_hidden`",
            )
        if self.noisy and self.output_init is not None:
            yield (
                "network.output_init",
                "noisy output layers keep their own initialisation (σ₀/√fan_in); "
                "set `network.output_init: null` or `network.noisy: false`",
            )
        memory = physical_memory()
        if memory is None:
            return
        parameters = network_parameter_lower_bound(self)
        nbytes = parameters * 4 * PARAMETER_COPIES
        if nbytes > memory:
            yield (
                "network",
                f"the layers hold at least {parameters:.3g} parameters ({format_bytes(nbytes)} "
                f"as float32 with the target network and the optimizer's two moments), more "
                f"than this machine's {format_bytes(memory)} of memory; use smaller layers",
            )


#: Said at whichever of ``network.core`` and ``replay.sequence`` is missing.
RECURRENT_NEEDS_SEQUENCES = (
    "a recurrent core needs sequence replay and sequence replay needs a recurrent core; "
    "set both `network.core` and `replay.sequence`, or neither"
)


def physical_memory() -> int | None:
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
    depend on the observation and are left out. :func:`zoo.runs.train` counts exactly (with
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
    shared = len(network.hidden) if network.shared_hidden else 0  # layers in the shared trunk
    total = 0
    if core is not None and getattr(core, "kind", None) == "lstm":
        total += 4 * int(core.size) * int(core.size)  # recurrent weights
    chain = [*widths, *network.hidden, outputs]
    for i, (a, b) in enumerate(itertools.pairwise(chain)):
        in_streams = i >= len(widths) + shared  # hidden (unless shared) and output layers
        total += a * b * (streams if in_streams else 1)
    return total


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units (``6.58 GiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} PiB"  # pragma: no cover
