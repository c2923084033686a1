"""Layers shared by torsos, cores and output streams: plain and noisy linear maps, MLPs, layer
normalisation over channels, spectral normalisation and adaptive max pooling.

Every layer here is called on **one** example as ``layer(x, *, key=None)`` (the Equinox
convention; batch with ``jax.vmap``). ``key`` is the noise key of noisy layers and is ignored by
plain ones, so a stack of layers can be driven without asking which kind each layer is.

Initialisation: plain layers are :class:`equinox.nn.Linear` with Equinox's default, weights and
biases ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (PyTorch's default, which the Dopamine/CleanRL-style
DQN baselines also use). :class:`NoisyLinear` follows Fortunato et al. (2018) for factorised noise.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from zoo.spec.network import POWER_ITERATIONS

__all__ = [
    "MLP",
    "NORM_EPS",
    "POWER_ITERATIONS",
    "ChannelLayerNorm",
    "NoisyLinear",
    "SpectralNorm",
    "adaptive_max_pool",
    "adaptive_pool_bins",
    "linear",
    "scale_noise",
    "spectral_norm_sigma",
]

#: ε of every layer normalisation: Flax's ``nn.LayerNorm`` default, which purejaxql's PQN uses.
NORM_EPS = 1e-6


def scale_noise(x: Array) -> Array:
    """``f(x) = sgn(x)·sqrt(|x|)``, the noise transform of factorised NoisyNets (Fortunato 2018)."""
    return jnp.sign(x) * jnp.sqrt(jnp.abs(x))


@typing.final
class NoisyLinear(eqx.Module):
    """Linear layer with factorised Gaussian parameter noise (NoisyNet).

    Fortunato et al. 2018, "Noisy Networks for Exploration", https://arxiv.org/abs/1706.10295,
    section 3 (factorised Gaussian noise, as used by Rainbow):

    ``y = (μ_w + σ_w ⊙ ε_w) x + μ_b + σ_b ⊙ ε_b`` with ``ε_w = f(ε_out) ⊗ f(ε_in)``,
    ``ε_b = f(ε_out)``, ``ε_in ~ N(0, I_p)``, ``ε_out ~ N(0, I_q)``, ``f(x) = sgn(x)·sqrt(|x|)``.

    Initialisation (p = ``in_features``): ``μ ~ U(-1/sqrt(p), 1/sqrt(p))`` and ``σ = σ₀/sqrt(p)``
    for both weights and biases.

    Called with ``key=None`` the layer uses its mean parameters ``μ`` only (deterministic, e.g. for
    evaluation). With a key it draws one noise sample; inside ``jax.vmap`` with an unbatched key
    that sample is shared by the whole batch, as in the paper. The product with ``ε_w`` is done in
    factorised form, ``f(ε_out) ⊙ (σ_w (f(ε_in) ⊙ x))``, so the ``[q, p]`` noise matrix is never
    materialised.

    Attributes:
      weight_mu: ``[out, in]`` mean weights.
      weight_sigma: ``[out, in]`` noise scales of the weights.
      bias_mu: ``[out]`` mean bias.
      bias_sigma: ``[out]`` noise scales of the bias.
    """

    weight_mu: Float[Array, "out in"]
    weight_sigma: Float[Array, "out in"]
    bias_mu: Float[Array, " out"]
    bias_sigma: Float[Array, " out"]
    in_features: int = eqx.field(static=True)
    out_features: int = eqx.field(static=True)

    def __init__(
        self, in_features: int, out_features: int, *, sigma0: float = 0.5, key: PRNGKeyArray
    ):
        """Args:
        in_features: input size ``p``.
        out_features: output size ``q``.
        sigma0: ``σ₀`` of the factorised initialisation ``σ = σ₀/sqrt(p)`` (paper: 0.5).
        key: initialisation key (keyword only).
        """
        wkey, bkey = jax.random.split(key)
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = jax.random.uniform(
            wkey, (out_features, in_features), minval=-bound, maxval=bound
        )
        self.bias_mu = jax.random.uniform(bkey, (out_features,), minval=-bound, maxval=bound)
        self.weight_sigma = jnp.full((out_features, in_features), sigma0 * bound, jnp.float32)
        self.bias_sigma = jnp.full((out_features,), sigma0 * bound, jnp.float32)
        self.in_features = in_features
        self.out_features = out_features

    def _factors(self, key: PRNGKeyArray) -> tuple[Float[Array, " in"], Float[Array, " out"]]:
        in_key, out_key = jax.random.split(key)
        eps_in = scale_noise(jax.random.normal(in_key, (self.in_features,)))
        eps_out = scale_noise(jax.random.normal(out_key, (self.out_features,)))
        return eps_in, eps_out

    def noise(self, key: PRNGKeyArray) -> tuple[Float[Array, "out in"], Float[Array, " out"]]:
        """The noise ``(ε_w, ε_b)`` that ``self(x, key=key)`` uses (for inspection and tests)."""
        eps_in, eps_out = self._factors(key)
        return jnp.outer(eps_out, eps_in), eps_out

    def __call__(
        self, x: Float[Array, " in"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, " out"]:
        y = self.weight_mu @ x + self.bias_mu
        if key is None:
            return y
        eps_in, eps_out = self._factors(key)
        return y + eps_out * (self.weight_sigma @ (eps_in * x) + self.bias_sigma)


def linear(
    in_features: int,
    out_features: int,
    *,
    noisy: bool = False,
    sigma0: float = 0.5,
    key: PRNGKeyArray,
) -> eqx.nn.Linear | NoisyLinear:
    """A plain :class:`equinox.nn.Linear` or a :class:`NoisyLinear`; both take ``(x, *, key)``."""
    if noisy:
        return NoisyLinear(in_features, out_features, sigma0=sigma0, key=key)
    return eqx.nn.Linear(in_features, out_features, key=key)


@typing.final
class ChannelLayerNorm(eqx.Module):
    """Layer normalisation over the channels of a ``[C, H, W]`` feature map, at each position,
    with a learnt scale and bias per channel (Ba et al. 2016, "Layer Normalization",
    https://arxiv.org/abs/1607.06450).

    This is what Flax's ``nn.LayerNorm()`` computes on the channels-last maps of purejaxql's PQN
    torsos (it normalises the last axis), written for Equinox's channels-first convolutions.
    """

    norm: eqx.nn.LayerNorm

    def __init__(self, channels: int):
        self.norm = eqx.nn.LayerNorm(channels, eps=NORM_EPS)

    def __call__(self, x: Float[Array, "c h w"]) -> Float[Array, "c h w"]:
        per_column = jax.vmap(self.norm, in_axes=1, out_axes=1)  # over W, given [C, W]
        return jax.vmap(per_column, in_axes=1, out_axes=1)(x)  # over H


@typing.final
class MLP(eqx.Module):
    """A stack of dense layers with ReLU between them (and after the last if ``activate_final``).

    With no layers it is the identity. Each layer gets its own noise key (split from ``key``), so
    noisy layers draw independent noise; ``key=None`` runs every layer deterministically. With
    ``norm``, a layer normalisation (Ba et al. 2016) follows every layer that a ReLU follows,
    before the ReLU (``dense → LayerNorm → ReLU``, as purejaxql's PQN networks).

    Attributes:
      layers: the dense layers, in order.
      norms: one ``eqx.nn.LayerNorm`` per activated layer with ``norm``; empty without.
      activate_final: whether a ReLU follows the last layer.
    """

    layers: tuple[eqx.Module, ...]
    norms: tuple[eqx.nn.LayerNorm, ...]
    activate_final: bool = eqx.field(static=True)

    def __init__(
        self,
        in_features: int,
        sizes: Sequence[int],
        *,
        activate_final: bool,
        noisy: bool = False,
        sigma0: float = 0.5,
        norm: bool = False,
        key: PRNGKeyArray,
    ):
        """Args:
        in_features: input size.
        sizes: output size of each layer, in order (may be empty).
        activate_final: whether a ReLU follows the last layer.
        noisy: whether every layer is a :class:`NoisyLinear`.
        sigma0: ``σ₀`` of noisy layers.
        norm: a layer normalisation before each ReLU.
        key: initialisation key (keyword only).
        """
        keys = jax.random.split(key, len(sizes))
        widths = [in_features, *sizes]
        self.layers = tuple(
            linear(n_in, n_out, noisy=noisy, sigma0=sigma0, key=k)
            for n_in, n_out, k in zip(widths[:-1], widths[1:], keys, strict=True)
        )
        activated = list(sizes) if activate_final else list(sizes[:-1])
        self.norms = tuple(eqx.nn.LayerNorm(n, eps=NORM_EPS) for n in activated) if norm else ()
        self.activate_final = activate_final

    @property
    def out_features(self) -> int | None:
        """Output size, or ``None`` for an empty stack (the identity)."""
        return self.layers[-1].out_features if self.layers else None

    def __call__(self, x: Float[Array, " in"], *, key: PRNGKeyArray | None = None) -> Array:
        keys = [None] * len(self.layers) if key is None else jax.random.split(key, len(self.layers))
        for i, (layer, layer_key) in enumerate(zip(self.layers, keys, strict=True)):
            x = layer(x, key=layer_key)
            if i < len(self.layers) - 1 or self.activate_final:
                if self.norms:
                    x = self.norms[i](x)
                x = jax.nn.relu(x)
        return x


#: ε of the power iteration's normalisations (``torch.nn.utils.spectral_norm``'s default).
SPECTRAL_EPS = 1e-12


def _normalize(x: Array) -> Array:
    return x / jnp.maximum(jnp.linalg.norm(x), SPECTRAL_EPS)


def spectral_norm_sigma(weight: Float[Array, "out ..."], iterations: int) -> Float[Array, ""]:
    """The largest singular value ``σ(W)`` of ``weight`` by ``iterations`` power iterations.

    ``W`` is ``weight`` reshaped to ``[out, in·∏window]`` (Equinox's kernels are
    ``[out, in, *window]``; PyTorch's ``spectral_norm`` reshapes the same way, ``dim=0``). From
    ``u₀``, a fixed pseudo-random unit vector (``jax.random.key(0)``, so the result is a function
    of ``W`` alone), each iteration is ``v ← W^T u / ‖W^T u‖``, ``u ← W v / ‖W v‖``, and
    ``σ = u^T W v`` (Miyato et al. 2018, "Spectral Normalization for Generative Adversarial
    Networks", https://arxiv.org/abs/1802.05957, algorithm 1). As in PyTorch, ``u`` and ``v`` are
    constants to the gradient (``stop_gradient``): only ``u^T W v`` is differentiated.

    The estimate never exceeds the true ``σ`` (``u^T W v = ‖W v‖``) and approaches it as
    ``(σ₂/σ₁)^{2k}``; ``tests/test_networks.py`` measures the error against
    ``jnp.linalg.norm(W, 2)``.
    """
    matrix = weight.reshape(weight.shape[0], -1)
    frozen = jax.lax.stop_gradient(matrix)
    u = _normalize(jax.random.normal(jax.random.key(0), (matrix.shape[0],), matrix.dtype))
    if iterations < 1:
        raise ValueError(
            f"spectral normalisation needs at least one power iteration, got {iterations}"
        )
    for _ in range(iterations):
        v = _normalize(frozen.T @ u)
        u = _normalize(frozen @ v)
    u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
    return u @ (matrix @ v)


@typing.final
class SpectralNorm(eqx.Module):
    """A layer whose weight is divided by its largest singular value: ``W / σ(W)`` (Miyato et
    al. 2018, "Spectral Normalization for Generative Adversarial Networks",
    https://arxiv.org/abs/1802.05957), wrapping an ``eqx.nn.Conv`` or ``eqx.nn.Linear`` (any
    module with a ``weight`` whose first axis is the output). The bias is left as it is.

    **State.** PyTorch's ``torch.nn.utils.spectral_norm`` (which Beyond The Rainbow uses through
    ``torch.nn.utils.parametrizations.spectral_norm``) keeps the power iteration's vector ``u`` as
    a buffer: 15 iterations when the layer is made, then one per forward pass in training mode,
    each continuing from the last, so ``σ`` is accurate once the weights have moved slowly for a
    while; in evaluation mode ``u`` is frozen. Here the learner changes parameters only through
    gradients, and an array in the module would be trained, averaged into the target network and
    checkpointed. So this layer holds no state: every call runs ``iterations`` power iterations
    from the same fixed start (:func:`spectral_norm_sigma`), and the normalised weight is a pure
    function of ``W``, the same when acting and learning, in the online and the target network.
    The price is ``iterations`` matrix–vector pairs per call instead of one, on the weight alone
    (inside ``jax.vmap`` over a batch they are computed once, not per example), and an estimate
    that does not improve over training: with ``k`` iterations it is low by a factor about
    ``(σ₂/σ₁)^{2k}``. With Equinox's initialisation of a 3×3 convolution of 32 or 64 channels
    (singular values close together, the slowest case) 16 iterations are within 1%.

    Attributes:
      layer: the wrapped layer, holding the unnormalised weight (the parameter trained).
      iterations: power iterations per call.
    """

    layer: eqx.Module
    iterations: int = eqx.field(static=True, default=POWER_ITERATIONS)

    def normalized(self) -> eqx.Module:
        """The wrapped layer with its weight divided by :func:`spectral_norm_sigma`."""
        weight = self.layer.weight
        sigma = spectral_norm_sigma(weight, self.iterations)
        return eqx.tree_at(lambda layer: layer.weight, self.layer, weight / sigma)

    def __call__(self, x: Array, *, key: PRNGKeyArray | None = None) -> Array:
        del key  # the wrapped layers here are not noisy
        return self.normalized()(x)


def adaptive_pool_bins(size: int, bins: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each of ``bins`` bins over ``size`` positions, as PyTorch's
    ``AdaptiveMaxPool2d``: ``start = ⌊i·size/bins⌋``, ``end = ⌈(i+1)·size/bins⌉``. Bins may
    overlap, and with ``bins > size`` positions repeat."""
    return [((i * size) // bins, -((-(i + 1) * size) // bins)) for i in range(bins)]


def adaptive_max_pool(
    x: Float[Array, "c h w"], size: tuple[int, int] | Sequence[int]
) -> Float[Array, "c out_h out_w"]:
    """Max pooling of a ``[C, H, W]`` map to ``[C, size[0], size[1]]`` with PyTorch's
    ``AdaptiveMaxPool2d`` bins (:func:`adaptive_pool_bins`), as Beyond The Rainbow pools its
    IMPALA features to 6×6 (Clark et al. 2024, https://arxiv.org/abs/2411.03820).

    The maximum over a rectangle is the maximum over its rows of the maximum over its columns,
    so the map is pooled along ``H`` and then along ``W`` (``h + w`` reductions, not ``h·w``).
    """
    out_h, out_w = (int(n) for n in size)
    rows = jnp.stack(
        [x[:, a:b, :].max(axis=1) for a, b in adaptive_pool_bins(x.shape[1], out_h)], 1
    )
    return jnp.stack(
        [rows[:, :, a:b].max(axis=2) for a, b in adaptive_pool_bins(x.shape[2], out_w)], 2
    )
