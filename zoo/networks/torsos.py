"""Torsos: feature extractors from one observation to a feature vector.

The YAML ``network.torso`` block names one of the registered torsos (``zoo list 'torso/*'``).

Writing your own torso
----------------------
A torso factory is registered on the ``"torso"`` axis and has the signature::

    @zoo.registry.register("torso", "my_torso", config=MyTorsoConfig)
    def my_torso(config, observation_shape: tuple[int, ...], *, key: PRNGKeyArray) -> eqx.Module:
        ...

``config`` is the validated YAML block (its ``kind`` plus the fields of your config model);
``observation_shape`` is the shape of **one** observation as the environment gives it (images are
channels-first ``[C, H, W]``, as envpool returns them). The returned module is called as
``torso(x, *, key=None)`` on one observation ``x`` that is already ``float32`` (``uint8`` inputs
are divided by 255 before the torso sees them) and must return a rank-1 feature vector; ``key``
is the network's noise key (``None`` when acting deterministically) and may be ignored. The
feature count is found with ``jax.eval_shape``, so the module need not declare it.

Built-in torsos use Equinox's default initialisation (``U(±1/sqrt(fan_in))`` for weights and
biases, PyTorch's default). Convolutions run channels-first, which is the layout envpool delivers,
so no transpose is needed.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from zoo.networks.layers import (
    MLP,
    POWER_ITERATIONS,
    ChannelLayerNorm,
    SpectralNorm,
    adaptive_max_pool,
)
from zoo.registry import register

__all__ = [
    "INITIALISERS",
    "MAX_POOL_PADDINGS",
    "ImpalaCNN",
    "ImpalaResidualBlock",
    "ImpalaStack",
    "MLPTorso",
    "MinAtarCNN",
    "MinMaxNormalized",
    "NatureCNN",
    "auto_torso",
    "glorot_uniform",
    "impala_cnn_torso",
    "initialise",
    "max_pool_3x3_stride_2",
    "min_max",
    "minatar_cnn_torso",
    "mlp_torso",
    "nature_cnn_torso",
]


@typing.final
class MLPTorso(eqx.Module):
    """Flatten, then dense ReLU layers (every layer, the last included, is followed by a ReLU).

    With no layers it only flattens. Used for vector observations (classic control).
    """

    mlp: MLP

    def __call__(
        self, x: Float[Array, "*dims"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " features"]:
        del key  # the torso is never noisy
        return self.mlp(jnp.ravel(x))


@typing.final
class NatureCNN(eqx.Module):
    """The convolutional torso of DQN (Mnih et al. 2015, "Human-level control through deep
    reinforcement learning", https://doi.org/10.1038/nature14236).

    ``conv 32×8×8 stride 4 → ReLU → conv 64×4×4 stride 2 → ReLU → conv 64×3×3 stride 1 → ReLU →
    flatten``. With VALID padding (the paper's, dqn_zoo's) ``[4, 84, 84] → [64, 7, 7] → 3136``
    features; with SAME padding, which Dopamine's Flax networks and Acme's Haiku ``AtariTorso``
    inherit from their frameworks, ``[4, 84, 84] → [32, 21, 21] → [64, 11, 11] → [64, 11, 11] →
    7744``. The paper's fully connected 512-unit layer is not part of the torso; it is
    ``network.hidden: [512]``.

    With ``norm: layer_norm`` each convolution is followed by a layer normalisation over its
    channels (:class:`~zoo.networks.layers.ChannelLayerNorm`) before the ReLU, as purejaxql's
    PQN Atari network.
    """

    convs: tuple[eqx.nn.Conv2d, eqx.nn.Conv2d, eqx.nn.Conv2d]
    norms: tuple[ChannelLayerNorm, ...] = ()

    def feature_map(
        self, x: Float[Array, "channels height width"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, "c h w"]:
        """The last convolution's ReLU'd map ``[C, H, W]``, before it is flattened."""
        del key
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if self.norms:
                x = self.norms[i](x)
            x = jax.nn.relu(x)
        return x

    def __call__(
        self, x: Float[Array, "channels height width"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " features"]:
        return jnp.ravel(self.feature_map(x, key=key))


@typing.final
class ImpalaResidualBlock(eqx.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3×3 SAME convolutions (Espeholt et al. 2018).

    With ``spectral_norm`` both convolutions are :class:`~zoo.networks.layers.SpectralNorm`
    wrappers of them (Beyond The Rainbow normalises exactly these two per block).
    """

    conv0: eqx.nn.Conv2d | SpectralNorm
    conv1: eqx.nn.Conv2d | SpectralNorm

    def __call__(self, x: Float[Array, "c h w"]) -> Float[Array, "c h w"]:
        y = self.conv0(jax.nn.relu(x))
        y = self.conv1(jax.nn.relu(y))
        return x + y


#: The paddings of the IMPALA stacks' 3×3 stride-2 max pooling, as ``lax.reduce_window`` takes
#: them: ``same`` is TensorFlow's SAME (the IMPALA reference's and Flax's ``nn.max_pool``; on an
#: even size the one extra cell goes at the end, so output ``i`` covers inputs ``[2i, 2i+2]``);
#: ``symmetric`` is one cell of −∞ on each side, PyTorch's ``MaxPool2d(3, 2, padding=1)`` (Beyond
#: The Rainbow's; output ``i`` covers ``[2i−1, 2i+1]``). Both give ``ceil(size / 2)`` outputs.
MAX_POOL_PADDINGS: dict[str, str | tuple[tuple[int, int], ...]] = {
    "same": "SAME",
    "symmetric": ((0, 0), (1, 1), (1, 1)),
}


def max_pool_3x3_stride_2(
    x: Float[Array, "c h w"], padding: str = "same"
) -> Float[Array, "c h2 w2"]:
    """3×3 max pooling with stride 2 under one of :data:`MAX_POOL_PADDINGS`."""
    return jax.lax.reduce_window(
        x, -jnp.inf, jax.lax.max, (1, 3, 3), (1, 2, 2), MAX_POOL_PADDINGS[padding]
    )


@typing.final
class ImpalaStack(eqx.Module):
    """``conv 3×3 (SAME) → max pool 3×3 stride 2 → two residual blocks``; the pooling's padding is
    one of :data:`MAX_POOL_PADDINGS`."""

    conv: eqx.nn.Conv2d
    blocks: tuple[ImpalaResidualBlock, ImpalaResidualBlock]
    pool_padding: str = eqx.field(static=True, default="same")

    def __call__(self, x: Float[Array, "c h w"]) -> Float[Array, "c2 h2 w2"]:
        x = max_pool_3x3_stride_2(self.conv(x), self.pool_padding)
        for block in self.blocks:
            x = block(x)
        return x


@typing.final
class ImpalaCNN(eqx.Module):
    """The residual torso of IMPALA ("deep" network of Espeholt et al. 2018, "IMPALA: Scalable
    Distributed Deep-RL with Importance Weighted Actor-Learner Architectures",
    https://arxiv.org/abs/1802.01561, figure 3).

    One :class:`ImpalaStack` per entry of ``channels`` (default ``[16, 32, 32]``), then ReLU and
    flatten. The paper's fully connected 256-unit layer is ``network.hidden``, not the torso.

    Beyond The Rainbow's widened variant (Clark et al. 2024, "Beyond The Rainbow: High
    Performance Deep Reinforcement Learning on a Desktop PC", https://arxiv.org/abs/2411.03820;
    VIPTankz/BTR ``networks.py``, ``ImpalaCNNLargeIQN``) is the same torso with every channel
    count doubled (``width: 2``), spectral normalisation on the residual blocks' convolutions
    and, after the final ReLU, an adaptive max pooling to 6×6 (``pool``), which fixes the
    feature count (``6·6·64 = 2304``) whatever the frame size.

    Attributes:
      stacks: the stacks, in order.
      pool: ``(h, w)`` of the adaptive max pooling after the final ReLU
        (:func:`~zoo.networks.layers.adaptive_max_pool`), or ``None`` for none.
    """

    stacks: tuple[ImpalaStack, ...]
    pool: tuple[int, int] | None = eqx.field(static=True, default=None)

    def feature_map(
        self, x: Float[Array, "channels height width"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, "c h w"]:
        """The final ReLU'd (and pooled) map ``[C, H, W]``, before it is flattened."""
        del key
        for stack in self.stacks:
            x = stack(x)
        x = jax.nn.relu(x)
        if self.pool is not None:
            x = adaptive_max_pool(x, self.pool)
        return x

    def __call__(
        self, x: Float[Array, "channels height width"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " features"]:
        return jnp.ravel(self.feature_map(x, key=key))


def min_max(features: Array, eps: float = 1e-5) -> Array:
    """``(x − min) / (max − min + eps)`` over every element of one example's features: SPR and
    BBF's ``renormalize`` (Schwarzer et al. 2021; BBF's ``spr_networks.py``: the min and max of
    the whole latent of a sample, ε = 1e-5)."""
    low, high = jnp.min(features), jnp.max(features)
    return (features - low) / (high - low + eps)


@typing.final
class MinMaxNormalized(eqx.Module):
    """A torso whose features are min–max normalised per example (:func:`min_max`);
    ``network.torso_norm: min_max``."""

    inner: eqx.Module

    def feature_map(self, x: Array, *, key: PRNGKeyArray | None = None) -> Array:
        """The inner torso's map, min–max normalised (the same values as the features)."""
        return min_max(self.inner.feature_map(x, key=key))

    def __call__(self, x: Array, *, key: PRNGKeyArray | None = None) -> Array:
        return min_max(self.inner(x, key=key))


@typing.final
class MinAtarCNN(eqx.Module):
    """The MinAtar torso of Revisiting Rainbow (Obando-Ceron & Castro 2021, "Revisiting Rainbow:
    Promoting more Insightful and Inclusive Deep Reinforcement Learning Research",
    https://arxiv.org/abs/2011.14826; JohanSamir/revisiting_rainbow ``networks_new.py``,
    ``net_conf='minatar'``).

    ``conv 16×3×3 stride 1 (SAME) → ReLU → flatten``: ``[C, 10, 10] → [16, 10, 10] → 1600``
    features; the configs set ``hidden_layer = 0``, so the heads follow directly
    (``network.hidden: []``).
    """

    conv: eqx.nn.Conv2d
    norms: tuple[ChannelLayerNorm, ...] = ()

    def feature_map(
        self, x: Float[Array, "channels height width"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, "c h w"]:
        """The ReLU'd map ``[16, H, W]``, before it is flattened."""
        del key
        x = self.conv(x)
        for norm in self.norms:  # none, or one layer normalisation (purejaxql's PQN)
            x = norm(x)
        return jax.nn.relu(x)

    def __call__(
        self, x: Float[Array, "channels height width"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " features"]:
        return jnp.ravel(self.feature_map(x, key=key))


#: The layers :func:`initialise` sets.
PlainLayer = typing.TypeVar("PlainLayer", eqx.nn.Linear, eqx.nn.Conv)

#: The named weight initialisations, as Flax names and computes them
#: (``flax.linen.initializers``; ``jax.nn.initializers`` is the same code). Equinox stores a kernel
#: as ``[out, in, *window]``: fan_in = in·∏window, fan_out = out·∏window, Flax's own fans of its
#: ``[*window, in, out]`` kernels.
INITIALISERS: dict[str, jax.nn.initializers.Initializer] = {
    # Glorot & Bengio 2010; Flax's xavier_uniform (Dopamine's JAX networks)
    "glorot_uniform": jax.nn.initializers.variance_scaling(
        1.0, "fan_avg", "uniform", in_axis=1, out_axis=0
    ),
    # He et al. 2015; Flax's he_normal (purejaxql's PQN networks): truncated normal, var 2/fan_in
    "he_normal": jax.nn.initializers.variance_scaling(
        2.0, "fan_in", "truncated_normal", in_axis=1, out_axis=0
    ),
    # Dopamine's Rainbow, implicit quantile and quantile networks (TF and JAX):
    # variance_scaling(1/√3, fan_in, uniform) = U(±sqrt(√3 / fan_in))
    "dopamine_uniform": jax.nn.initializers.variance_scaling(
        3.0**-0.5, "fan_in", "uniform", in_axis=1, out_axis=0
    ),
    # Haiku's and Sonnet's default w_init of linear and convolution layers (Acme's networks):
    # TruncatedNormal(stddev=1/√fan_in), the normal cut at ±2σ and not rescaled, so the variance
    # is 0.7737/fan_in; variance_scaling rescales σ by 1/0.8796, hence the scale 0.8796²
    "truncated_normal": jax.nn.initializers.variance_scaling(
        0.87962566103423978**2, "fan_in", "truncated_normal", in_axis=1, out_axis=0
    ),
    # LeCun et al. 1998; Flax's default kernel_init of nn.Dense and nn.Conv: var 1/fan_in
    "lecun_normal": jax.nn.initializers.variance_scaling(
        1.0, "fan_in", "truncated_normal", in_axis=1, out_axis=0
    ),
}


def initialise(layer: PlainLayer, key: PRNGKeyArray, scheme: str) -> PlainLayer:
    """``layer`` (an ``eqx.nn.Linear`` or ``eqx.nn.Conv``) with weights drawn by
    ``INITIALISERS[scheme]`` and a zero bias (Flax's default ``bias_init``); ``scheme="default"``
    returns the layer as built (Equinox's ``U(±1/sqrt(fan_in))`` weights and biases)."""
    if scheme == "default":
        return layer
    if scheme not in INITIALISERS:
        raise ValueError(
            f"unknown initialisation {scheme!r}; known: default, {', '.join(INITIALISERS)}"
        )
    weight = INITIALISERS[scheme](key, layer.weight.shape, layer.weight.dtype)
    layer = eqx.tree_at(lambda c: c.weight, layer, weight)
    if layer.bias is not None:
        layer = eqx.tree_at(lambda c: c.bias, layer, jnp.zeros_like(layer.bias))
    return layer


def glorot_uniform(layer: PlainLayer, key: PRNGKeyArray) -> PlainLayer:
    """``layer`` with weights ``variance_scaling(1, fan_avg, uniform)`` (Glorot & Bengio 2010) and
    zero bias: Flax's ``xavier_uniform`` kernel init with its zero bias init, as Dopamine's JAX
    networks and the Revisiting Rainbow configs use them: ``U(±sqrt(6 / (fan_in + fan_out)))``."""
    return initialise(layer, key, "glorot_uniform")


def _check_image(observation_shape: tuple[int, ...], name: str) -> None:
    if len(observation_shape) != 3:
        raise ValueError(
            f"torso {name!r} needs channels-first image observations [C, H, W]; "
            f"got observation shape {tuple(observation_shape)}"
        )


@register("torso", "mlp")
def mlp_torso(config, observation_shape: tuple[int, ...], *, key: PRNGKeyArray) -> MLPTorso:
    """Flatten, then dense ReLU layers of ``config.sizes`` units (empty: flatten only)."""
    in_features = 1
    for d in observation_shape:
        in_features *= int(d)
    sizes: Sequence[int] = list(config.sizes or ())
    norm = getattr(config, "norm", "none") == "layer_norm"
    return MLPTorso(MLP(in_features, sizes, activate_final=True, norm=norm, key=key))


@register("torso", "nature_cnn")
def nature_cnn_torso(config, observation_shape: tuple[int, ...], *, key: PRNGKeyArray) -> NatureCNN:
    """DQN's three-layer convolutional torso (Mnih et al. 2015) with ``config.padding``
    (``VALID`` when absent): 3136 features at 84×84, 7744 with ``SAME``."""
    _check_image(observation_shape, "nature_cnn")
    k0, k1, k2 = jax.random.split(key, 3)
    channels = int(observation_shape[0])
    padding = getattr(config, "padding", "VALID")
    convs = (
        eqx.nn.Conv2d(channels, 32, kernel_size=8, stride=4, padding=padding, key=k0),
        eqx.nn.Conv2d(32, 64, kernel_size=4, stride=2, padding=padding, key=k1),
        eqx.nn.Conv2d(64, 64, kernel_size=3, stride=1, padding=padding, key=k2),
    )
    norm = getattr(config, "norm", "none") == "layer_norm"
    norms = tuple(ChannelLayerNorm(c.out_channels) for c in convs) if norm else ()
    return NatureCNN(convs, norms)


def _conv3x3(c_in: int, c_out: int, key: PRNGKeyArray) -> eqx.nn.Conv2d:
    """A 3×3 SAME convolution of stride 1 (every convolution of the IMPALA torso)."""
    return eqx.nn.Conv2d(c_in, c_out, kernel_size=3, padding="SAME", key=key)


@register("torso", "impala_cnn")
def impala_cnn_torso(config, observation_shape: tuple[int, ...], *, key: PRNGKeyArray) -> ImpalaCNN:
    """IMPALA's residual torso (Espeholt et al. 2018) with ``config.channels`` per stack.

    Optional (absent attributes take these defaults, which build the original network):
    ``config.width`` (1) multiplies every channel count; ``config.max_pool_padding`` (``same``)
    is one of :data:`MAX_POOL_PADDINGS`; ``config.pool`` (``None``) is the
    ``[h, w]`` of an adaptive max pooling of the final map; ``config.spectral_norm`` (False)
    wraps both convolutions of every residual block in
    :class:`~zoo.networks.layers.SpectralNorm` with ``config.power_iterations`` iterations.
    """
    _check_image(observation_shape, "impala_cnn")
    width = int(getattr(config, "width", 1))
    channels = [int(c) * width for c in config.channels]
    pool = getattr(config, "pool", None)
    pool = None if pool is None else (int(pool[0]), int(pool[1]))
    spectral = bool(getattr(config, "spectral_norm", False))
    iterations = int(getattr(config, "power_iterations", POWER_ITERATIONS))
    pool_padding = str(getattr(config, "max_pool_padding", "same"))
    if pool_padding not in MAX_POOL_PADDINGS:
        raise ValueError(
            f"unknown max_pool_padding {pool_padding!r}; known: {', '.join(MAX_POOL_PADDINGS)}"
        )

    def residual_conv(c: int, k: PRNGKeyArray) -> eqx.nn.Conv2d | SpectralNorm:
        layer = _conv3x3(c, c, k)
        return SpectralNorm(layer, iterations) if spectral else layer

    in_channels = int(observation_shape[0])
    stacks = []
    for out_channels, stack_key in zip(channels, jax.random.split(key, len(channels)), strict=True):
        k_conv, *k_blocks = jax.random.split(stack_key, 5)
        blocks = tuple(
            ImpalaResidualBlock(
                residual_conv(out_channels, k_blocks[2 * i]),
                residual_conv(out_channels, k_blocks[2 * i + 1]),
            )
            for i in range(2)
        )
        stacks.append(
            ImpalaStack(_conv3x3(in_channels, out_channels, k_conv), blocks, pool_padding)
        )
        in_channels = out_channels
    return ImpalaCNN(tuple(stacks), pool)


@register("torso", "minatar_cnn")
def minatar_cnn_torso(
    config, observation_shape: tuple[int, ...], *, key: PRNGKeyArray
) -> MinAtarCNN:
    """Revisiting Rainbow's MinAtar torso: one ``config.channels``×k×k SAME convolution + ReLU."""
    _check_image(observation_shape, "minatar_cnn")
    conv_key, init_key = jax.random.split(key)
    conv = eqx.nn.Conv2d(
        int(observation_shape[0]),
        int(config.channels),
        kernel_size=int(config.kernel_size),
        stride=1,
        padding=getattr(config, "padding", "SAME"),
        key=conv_key,
    )
    if config.init == "glorot_uniform":
        conv = glorot_uniform(conv, init_key)
    norm = getattr(config, "norm", "none") == "layer_norm"
    return MinAtarCNN(conv, (ChannelLayerNorm(int(config.channels)),) if norm else ())


@register("torso", "auto")
def auto_torso(
    config, observation_shape: tuple[int, ...], *, key: PRNGKeyArray
) -> NatureCNN | MLPTorso:
    """``nature_cnn`` for rank-3 (image) observations, else ``mlp`` with ``config.sizes``."""
    if len(observation_shape) == 3:
        return nature_cnn_torso(config, observation_shape, key=key)
    return mlp_torso(config, observation_shape, key=key)
