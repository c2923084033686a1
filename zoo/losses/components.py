"""Per-element components of a loss, one registry table per axis.

Every function here acts on one example (as rlax does); the composer in :mod:`zoo.losses.compose`
vmaps them. Each factory receives its validated config and returns a pure function; every axis
has a neutral element (``identity``, ``none``), so the composer never asks whether a feature is on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import rlax

from zoo import registry

Array = jax.Array

__all__ = [
    "Bootstrap",
    "TxPair",
    "abs_loss",
    "abs_td",
    "cross_entropy",
    "double_bootstrap",
    "huber",
    "identity",
    "max_bootstrap",
    "max_mean",
    "munchausen_bonus",
    "no_bonus",
    "no_regularizer",
    "q_value",
    "scale",
    "signed_hyperbolic",
    "soft_bootstrap",
    "squared",
]


# ----------------------------------------------------------------------------------- TD losses


@registry.register("td", "squared")
def squared(config) -> Callable[[Array], Array]:
    """``scale · x²`` of a TD error (scale ½ is rlax.l2_loss; DQN's reference uses scale 1)."""
    scale = float(config.scale)
    return lambda x: scale * jnp.square(x)


@registry.register("td", "huber")
def huber(config) -> Callable[[Array], Array]:
    """Huber loss ½x² for |x| ≤ δ, δ(|x| − ½δ) beyond (rlax.huber_loss); δ = 0 gives |x|."""
    delta = float(config.delta)
    if delta == 0.0:
        return jnp.abs
    return lambda x: rlax.huber_loss(x, delta)


@registry.register("td", "cross_entropy")
def cross_entropy(config) -> Callable[[Array], Array]:
    """Marks the cross-entropy of categorical heads; it compares distributions, not TD errors.

    The categorical head loss computes it itself; the spec rejects `cross_entropy` with any other
    head, so the returned function is never called on a TD error.
    """

    def not_elementwise(x: Array) -> Array:
        raise TypeError("cross_entropy compares distributions; only categorical heads use it")

    return not_elementwise


# --------------------------------------------------------------------------- value transforms


class TxPair(NamedTuple):
    """An invertible value rescaling ``h`` and its inverse (Pohlen et al. 2018)."""

    apply: Callable[[Array], Array]
    apply_inv: Callable[[Array], Array]


@registry.register("value_transform", "identity")
def identity(config) -> TxPair:
    """No rescaling: targets are r + γ·q."""
    return TxPair(lambda x: x, lambda x: x)


@registry.register("value_transform", "signed_hyperbolic")
def signed_hyperbolic(config) -> TxPair:
    """h(x) = sign(x)(√(|x| + 1) − 1) + εx and its closed-form inverse (Pohlen et al. 2018)."""
    eps = float(config.eps)
    return TxPair(lambda x: rlax.signed_hyperbolic(x, eps), lambda x: rlax.signed_parabolic(x, eps))


@registry.register("value_transform", "scale")
def scale(config) -> TxPair:
    """h(x) = factor·x, h⁻¹(x) = x/factor: a reward scale (purejaxql's ``REW_SCALE``)."""
    factor = float(config.factor)
    return TxPair(lambda x: factor * x, lambda x: x / factor)


# -------------------------------------------------------------------------------- regularizers

Regularizer = Callable[[Array, Array], Array]


@registry.register("regularizer", "none")
def no_regularizer(config) -> Regularizer:
    """No extra term."""
    return lambda q_sa, mask: jnp.zeros((), q_sa.dtype)


@registry.register("regularizer", "q_value")
def q_value(config) -> Regularizer:
    """``coeff · mean(Q(s, a))`` over the (masked) batch: DQNReg (Co-Reyes et al. 2021)."""
    coeff = float(config.coeff)
    return lambda q_sa, mask: coeff * jnp.mean(mask * q_sa)


# ----------------------------------------------------------------------------- priority rules

Priority = Callable[[Array, Array, Array], Array]
"""``fn(abs_td [L], item_loss [], mask [L]) -> priority []`` for one item (L = 1 unless a
sequence)."""


def _masked_mean(x: Array, mask: Array) -> Array:
    return jnp.sum(mask * x) / jnp.maximum(jnp.sum(mask), 1.0)


@registry.register("priority", "abs_td")
def abs_td(config) -> Priority:
    """|td|, the absolute TD error (Schaul et al. 2016); the mean over a sequence."""
    return lambda abs_td, item_loss, mask: _masked_mean(abs_td, mask)


@registry.register("priority", "abs_loss")
def abs_loss(config) -> Priority:
    """The item's own loss, e.g. the cross-entropy of a categorical head (Hessel et al. 2018)."""
    return lambda abs_td, item_loss, mask: jnp.abs(item_loss)


@registry.register("priority", "max_mean")
def max_mean(config) -> Priority:
    """η·max_t|td| + (1−η)·mean_t|td| over a sequence (Kapturowski et al. 2019)."""
    eta = float(config.eta)

    def fn(abs_td: Array, item_loss: Array, mask: Array) -> Array:
        return eta * jnp.max(mask * abs_td) + (1.0 - eta) * _masked_mean(abs_td, mask)

    return fn


# --------------------------------------------------------------------------------- bootstraps


class Bootstrap(NamedTuple):
    """The target policy at the next state.

    ``policy(q_online_t [A], q_target_t [A]) -> (pi [A], shift [A])``: the next-action
    probabilities and a per-action shift of the bootstrapped value (−τ·log π for the soft
    bootstrap, zeros otherwise). A head bootstraps from Σₐ π(a)·(Z(s′, a) + shift(a)).
    """

    policy: Callable[[Array, Array], tuple[Array, Array]]


def _greedy(q: Array) -> tuple[Array, Array]:
    pi = jax.nn.one_hot(jnp.argmax(q), q.shape[-1], dtype=q.dtype)
    return pi, jnp.zeros_like(q)


@registry.register("bootstrap", "max")
def max_bootstrap(config, *, temperature: float | None = None) -> Bootstrap:
    """Q-learning: the target network's greedy action (Watkins 1989; Mnih et al. 2015)."""
    return Bootstrap(lambda q_online_t, q_target_t: _greedy(q_target_t))


@registry.register("bootstrap", "double")
def double_bootstrap(config, *, temperature: float | None = None) -> Bootstrap:
    """Double Q-learning: the online network's greedy action (van Hasselt et al. 2016)."""
    return Bootstrap(lambda q_online_t, q_target_t: _greedy(q_online_t))


@registry.register("bootstrap", "soft")
def soft_bootstrap(config, *, temperature: float | None = None) -> Bootstrap:
    """Soft (entropy-regularised) bootstrap: π = softmax(q_target/τ), value Σπ(q − τ·log π).

    For a scalar head this is τ·logsumexp(q/τ) (Vieillard et al. 2020); for distributional heads
    it is the π-mixture of the next-action distributions shifted by −τ·log π.
    """
    if temperature is None:
        raise ValueError("the soft bootstrap needs loss.temperature")
    tau = float(temperature)

    def policy(q_online_t: Array, q_target_t: Array) -> tuple[Array, Array]:
        log_pi = jax.nn.log_softmax(q_target_t / tau)
        return jnp.exp(log_pi), -tau * log_pi

    return Bootstrap(policy)


# ------------------------------------------------------------------------------ reward bonuses

Bonus = Callable[[Array, Array], Array]
"""``fn(q_target_tm1 [A], a_tm1 []) -> bonus []`` added to the reward."""


def no_bonus(q_target_tm1: Array, a_tm1: Array) -> Array:
    """The neutral reward bonus."""
    return jnp.zeros((), q_target_tm1.dtype)


def munchausen_bonus(alpha: float, clip_min: float, temperature: float) -> Bonus:
    """α·clip(τ·log π(a|s), clip_min, 0), π = softmax(q_target(s)/τ) (Vieillard et al. 2020)."""
    alpha, clip_min, tau = float(alpha), float(clip_min), float(temperature)

    def fn(q_target_tm1: Array, a_tm1: Array) -> Array:
        log_pi = jax.nn.log_softmax(q_target_tm1 / tau)
        return alpha * jnp.clip(tau * log_pi[a_tm1], clip_min, 0.0)

    return fn
