"""Per-head targets and losses: how a value head learns from one transition.

Each head kind registers a *head loss* on the ``head_loss`` axis: a factory
``factory(head_config, *, td) -> fn`` where ``td`` is the element loss of the ``td`` axis and

    fn(out_tm1, a_tm1, r, d, out_t, pi_t, shift_t, tx) -> (loss, td_error)

acts on one example: ``out_tm1`` the online network's output at s (unbatched
:class:`~zoo.types.NetworkOutput`), ``a_tm1`` the action, ``r`` the (n-step, clipped, bonus-
carrying) reward, ``d`` the total bootstrap discount, ``out_t`` the target network's output at the
bootstrap state, ``(pi_t, shift_t)`` the bootstrap's next-action policy and per-action value
shift, and ``tx`` the value-transform pair. Every head bootstraps the same way:

    target = h(r + d · Σₐ π(a) · (h⁻¹(Z(s′, a)) + shift(a)))

applied to the scalar value (Q-learning), to every quantile (QR-DQN; with a soft policy the
π-average per quantile index, as M-IQN), or to every atom, whose probabilities are mixed by π
and projected back on the support (C51; the projection is linear so the mixture is exact). With a
greedy policy (π one-hot, shift 0) each reduces exactly to its paper's target. ``td_error`` is
the target's mean minus Q(s, a), used for priorities and metrics.

A new head registers its network module on the ``head`` axis and its loss here, under one name.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import rlax

from zoo import registry
from zoo.losses.components import TxPair
from zoo.types import NetworkOutput

Array = jax.Array
HeadLoss = Callable[
    [NetworkOutput, Array, Array, Array, NetworkOutput, Array, Array, TxPair], tuple[Array, Array]
]

__all__ = [
    "HeadLoss",
    "categorical_loss",
    "categorical_project",
    "fqf_loss",
    "q_loss",
    "quantile_loss",
]


def _bootstrap(values_t: Array, pi_t: Array, shift_t: Array, tx: TxPair) -> Array:
    """Σₐ π(a)·(h⁻¹(values[a]) + shift(a)) for values of shape [A] or [A, N]."""
    inv = tx.apply_inv(values_t)
    if inv.ndim == 1:
        return jnp.sum(pi_t * (inv + shift_t))
    return jnp.einsum("a,an->n", pi_t, inv + shift_t[:, None])


@registry.register("head_loss", "q")
def q_loss(config, *, td: Callable[[Array], Array]) -> HeadLoss:
    """Q-learning family: td = h(r + d·v(s′)) − Q(s, a), loss = td_loss(td) (rlax.q_learning)."""

    def fn(out_tm1, a_tm1, r, d, out_t, pi_t, shift_t, tx):
        target = tx.apply(r + d * _bootstrap(out_t.q_values, pi_t, shift_t, tx))
        error = jax.lax.stop_gradient(target) - out_tm1.q_values[a_tm1]
        return td(error), error

    return fn


@registry.register("head_loss", "iqn")
@registry.register("head_loss", "quantile")
def quantile_loss(config, *, td: Callable[[Array], Array]) -> HeadLoss:
    """Quantile regression (Dabney et al. 2018): Σᵢ meanⱼ |τᵢ − 1{δᵢⱼ<0}|·ρ_κ(δᵢⱼ).

    δᵢⱼ = targetⱼ − θᵢ(s, a) with ρ_κ the `td` element loss (Huber κ; the spec requires huber,
    κ = 0 being the pure quantile loss), as rlax.quantile_regression_loss. τᵢ are the online
    output's ``taus`` where its head samples them (IQN: N fractions at s, N′ target quantiles at
    s′, Dabney et al. 2018b, eq. 3), else the midpoints (i + ½)/N (QR-DQN).
    """

    def fn(out_tm1, a_tm1, r, d, out_t, pi_t, shift_t, tx):
        theta = out_tm1.quantiles[a_tm1]
        n = theta.shape[-1]
        taus = out_tm1.taus
        if taus is None:  # fixed midpoints (QR-DQN)
            taus = (jnp.arange(n, dtype=theta.dtype) + 0.5) / n
        target = tx.apply(r + d * _bootstrap(out_t.quantiles, pi_t, shift_t, tx))
        target = jax.lax.stop_gradient(target)
        delta = target[None, :] - theta[:, None]
        weight = jnp.abs(taus[:, None] - jax.lax.stop_gradient((delta < 0).astype(theta.dtype)))
        loss = jnp.sum(jnp.mean(weight * td(delta), axis=-1))
        return loss, jnp.mean(target) - jnp.mean(theta)

    return fn


@registry.register("head_loss", "fqf")
def fqf_loss(config, *, td: Callable[[Array], Array]) -> HeadLoss:
    """FQF (Yang et al. 2019): the quantile loss at the proposed midpoints plus the fraction loss.

    The quantile part is :func:`quantile_loss` with the online output's midpoints ``τ̂`` (no
    gradient through them) and the target network's own proposed quantiles at s′, averaged
    uniformly over the target quantiles as microsoft/FQF's ``_build_train_op`` does. The
    fraction loss is the paper's 1-Wasserstein gradient (its Proposition 1) applied to the
    interior fractions of the action taken:

        ∂W₁/∂τᵢ = 2·F⁻¹(τᵢ) − F⁻¹(τ̂ᵢ) − F⁻¹(τ̂ᵢ₋₁),   i = 1 … N − 1,

    as ``Σᵢ stop_gradient(∂W₁/∂τᵢ)·τᵢ``, whose gradient with respect to the proposal layer is the
    source's ``tf.gradients(quantile_tau, fqf_params, grad_ys=gradient_tau)``, minus
    ``entropy_coef · Σᵢ −τᵢ·log τᵢ``. The head routes each part's gradient to its own
    parameters (:class:`zoo.networks.heads.FullyParameterizedQuantileHead`), so one loss trains
    both with the optimizer of each (``optimizer.groups``). The loss reported is the sum.
    """
    quantile = quantile_loss(config, td=td)

    def fn(out_tm1, a_tm1, r, d, out_t, pi_t, shift_t, tx):
        loss, error = quantile(out_tm1, a_tm1, r, d, out_t, pi_t, shift_t, tx)
        at_midpoints = out_tm1.quantiles[a_tm1]
        gradient = 2.0 * out_tm1.fraction_quantiles[a_tm1] - at_midpoints[1:] - at_midpoints[:-1]
        fractions = out_tm1.fractions
        fraction_loss = jnp.sum(jax.lax.stop_gradient(gradient) * fractions)
        entropy = -jnp.sum(fractions * jnp.log(fractions))
        return loss + fraction_loss - config.entropy_coef * entropy, error

    return fn


def categorical_project(atoms_src: Array, probs_src: Array, atoms: Array) -> Array:
    """Project a distribution on arbitrary atoms onto a fixed support (Bellemare et al. 2017).

    The L2 (Cramér) projection of rlax.categorical_l2_project: each source atom's mass is split
    between its two neighbours on ``atoms``, after clipping to [atoms[0], atoms[-1]].
    """
    return rlax.categorical_l2_project(atoms_src, probs_src, atoms)


@registry.register("head_loss", "categorical")
def categorical_loss(config, *, td: Callable[[Array], Array]) -> HeadLoss:
    """C51 (Bellemare et al. 2017): cross-entropy to the projected target distribution.

    The source atoms h(r + d·(h⁻¹(zⱼ) + shift(a))) of every next action carry mass π(a)·pⱼ(a);
    their projection on the online atoms is the target. With a greedy policy this is exactly
    rlax.categorical_(double_)q_learning.
    """

    def fn(out_tm1, a_tm1, r, d, out_t, pi_t, shift_t, tx):
        atoms = out_tm1.atoms
        src = tx.apply(r + d * (tx.apply_inv(out_t.atoms)[None, :] + shift_t[:, None]))
        mass = pi_t[:, None] * jax.nn.softmax(out_t.logits, axis=-1)
        target = jax.lax.stop_gradient(categorical_project(src.ravel(), mass.ravel(), atoms))
        loss = -jnp.sum(target * jax.nn.log_softmax(out_tm1.logits[a_tm1]))
        return loss, jnp.sum(target * atoms) - out_tm1.q_values[a_tm1]

    return fn
