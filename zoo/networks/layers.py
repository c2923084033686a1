"""Dense layers shared by torsos, cores and output streams: plain and noisy linear maps, MLPs.

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

__all__ = ["MLP", "NORM_EPS", "ChannelLayerNorm", "NoisyLinear", "linear", "scale_noise"]

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
