"""Exactness of ``fqf`` against a float64 oracle of microsoft/FQF's training step.

FQF (Yang et al. 2019, https://arxiv.org/abs/1911.02140) as microsoft/FQF@0980bde's
``fqf_network`` (dopamine/discrete_domains/atari_lib.py) and ``FQFAgent._build_train_op``
(dopamine/agents/fqf/fqf_agent.py, the ``ws`` + ``directbp`` runtype). The source trains two sets
of parameters with two optimizers:

- the quantile network (every parameter but the fraction proposal layer) on the quantile Huber
  loss at the proposed midpoints τ̂ (weights |τ̂ − 1{δ < 0}| under a stop-gradient), averaged
  over the target network's N′ quantiles at *its own* proposed midpoints, the next action
  maximising the target network's Q = Σ (τᵢ₊₁ − τᵢ)·Z(τ̂ᵢ). The gradient reaches the torso also
  through τ̂, which the proposal layer computes from the torso's features;
- the proposal layer on ``tf.gradients(τ_interior, fqf_params, grad_ys=∂W₁/∂τ)`` with
  ∂W₁/∂τᵢ = 2·Z(τᵢ) − Z(τ̂ᵢ) − Z(τ̂ᵢ₋₁) at the action taken, plus an entropy bonus.

The oracle computes each set's gradient as the source does, separately: ``jax.grad`` of the
quantile loss with the proposal layer held constant, and a vector-Jacobian product of the
interior fractions with the cotangent ∂W₁/∂τ (averaged over the batch, where the source sums:
the preset scales RMSProp's ε accordingly). It reads the zoo network's weight arrays and writes
the network out in plain ``jnp``, independent of ``zoo.networks``; the project computes one loss
whose stop-gradients route each part. Mutation tests change one detail of the oracle at a time
and check that the comparison then fails.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.networks.network import apply_batch, build_network

OBS_DIM = 5
NUM_ACTIONS = 3
HIDDEN = 12
BATCH = 16
COSINES = 8
N = 6
DISCOUNT = 0.99
KAPPA = 1.0
ENTROPY = 0.05

MUTATIONS = (
    "uniform_q",
    "gradient_sign",
    "torso_without_fraction_path",
    "fraction_loss_reaches_torso",
    "quantile_loss_reaches_fractions",
    "no_entropy",
)


def spec_of() -> Any:
    """The catalogue's ``fqf`` on a small MLP (the rest as the catalogue has it)."""
    return zoo.load_algorithm(
        "fqf",
        overrides={
            "network.torso": {"kind": "mlp", "sizes": [HIDDEN]},
            "network.hidden": [HIDDEN],
            "network.head": {
                "kind": "fqf",
                "num_cosines": COSINES,
                "num_fractions": N,
                "entropy_coef": ENTROPY,
            },
        },
    )


class Weights(NamedTuple):
    """The network's arrays: torso, fraction layer, cosine embedding, two stream layers."""

    torso: tuple[jax.Array, jax.Array]
    fraction: tuple[jax.Array, jax.Array]
    embedding: tuple[jax.Array, jax.Array]
    hidden: tuple[jax.Array, jax.Array]
    out: tuple[jax.Array, jax.Array]


def weights_of(net: Any) -> Weights:
    def wb(layer: Any) -> tuple[jax.Array, jax.Array]:
        return layer.weight, layer.bias

    return Weights(
        torso=wb(net.torso.mlp.layers[0]),
        fraction=wb(net.head.fraction),
        embedding=wb(net.head.embedding),
        hidden=wb(net.streams.mlp.layers[0]),
        out=wb(net.streams.mlp.layers[1]),
    )


def dense(wb: tuple[jax.Array, jax.Array], x: jax.Array) -> jax.Array:
    return wb[0] @ x + wb[1]


def features(w: Weights, obs: jax.Array) -> jax.Array:
    return jax.nn.relu(dense(w.torso, obs))


def fractions(fraction: tuple[jax.Array, jax.Array], f: jax.Array) -> jax.Array:
    """``[τ_0 = 0, …, τ_N]`` as the source: cumsum of the softmax, a zero in front."""
    return jnp.concatenate([jnp.zeros(1, f.dtype), jnp.cumsum(jax.nn.softmax(dense(fraction, f)))])


def quantile_values(w: Weights, f: jax.Array, taus: jax.Array) -> jax.Array:
    """``[A, len(taus)]``: out(relu(hidden(f ⊙ relu(embedding(cos(π·i·τ))))))."""
    i = jnp.arange(1, COSINES + 1, dtype=f.dtype)
    phi = jax.nn.relu(
        jnp.cos(jnp.pi * i[None, :] * taus[:, None]) @ w.embedding[0].T + w.embedding[1]
    )
    h = jax.nn.relu((f[None, :] * phi) @ w.hidden[0].T + w.hidden[1])
    return (h @ w.out[0].T + w.out[1]).T


def huber(u: jax.Array) -> jax.Array:
    return jnp.where(jnp.abs(u) <= KAPPA, 0.5 * u**2, KAPPA * (jnp.abs(u) - 0.5 * KAPPA))


def oracle_loss_parts(online: Weights, target: Weights, batch: zoo.Transition, mutation=None):
    """Per example: (quantile loss, ∂W₁/∂τ at the action, interior τ) of the source's step;
    the quantile loss as a function of the online weights (all of them)."""

    def one(obs, action, reward, discount, nxt):
        f = features(online, obs)
        taus = fractions(online.fraction, f)
        hats = (taus[1:] + taus[:-1]) / 2
        z = quantile_values(online, f, hats)  # [A, N]
        f_next = features(target, nxt)
        taus_next = fractions(target.fraction, f_next)
        z_next = quantile_values(target, f_next, (taus_next[1:] + taus_next[:-1]) / 2)
        widths = taus_next[1:] - taus_next[:-1]
        q_next = z_next.mean(-1) if mutation == "uniform_q" else z_next @ widths
        y = reward + DISCOUNT * discount * z_next[jnp.argmax(q_next)]  # [N′]
        y = jax.lax.stop_gradient(y)
        theta = z[action]
        u = y[None, :] - theta[:, None]  # [N, N′]
        weight = jnp.abs(jax.lax.stop_gradient(hats)[:, None] - (u < 0))
        quantile = jnp.sum(jnp.mean(weight * huber(u), axis=1))
        interior = taus[1:-1]
        at_tau = quantile_values(online, f, interior)[action]
        grad_tau = 2 * at_tau - theta[1:] - theta[:-1]
        if mutation == "gradient_sign":
            grad_tau = -grad_tau
        return quantile, jax.lax.stop_gradient(grad_tau), interior

    return jax.vmap(one)(
        batch.observation, batch.action, batch.reward, batch.discount, batch.next_observation
    )


def oracle(online: Weights, target: Weights, batch: zoo.Transition, mutation=None):
    """``(loss, gradient per weight)`` of the source's step, each part's gradient on its own."""
    coef = 0.0 if mutation == "no_entropy" else ENTROPY

    def quantile_loss(w: Weights, fraction: tuple[jax.Array, jax.Array]) -> jax.Array:
        return jnp.mean(
            oracle_loss_parts(w._replace(fraction=fraction), target, batch, mutation)[0]
        )

    frozen = jax.lax.stop_gradient(online.fraction)
    if mutation == "torso_without_fraction_path":  # τ̂ constant for the quantile loss (a detach)

        def quantile_loss(w, fraction):
            def one(obs, action, reward, discount, nxt):
                f = features(w, obs)
                hats_from = fractions(frozen, jax.lax.stop_gradient(features(online, obs)))
                hats = (hats_from[1:] + hats_from[:-1]) / 2
                theta = quantile_values(w, f, hats)[action]
                f_next = features(target, nxt)
                tn = fractions(target.fraction, f_next)
                z_next = quantile_values(target, f_next, (tn[1:] + tn[:-1]) / 2)
                y = reward + DISCOUNT * discount * z_next[jnp.argmax(z_next @ (tn[1:] - tn[:-1]))]
                u = jax.lax.stop_gradient(y)[None, :] - theta[:, None]
                weight = jnp.abs(hats[:, None] - (u < 0))
                return jnp.sum(jnp.mean(weight * huber(u), axis=1))

            return jnp.mean(
                jax.vmap(one)(
                    batch.observation,
                    batch.action,
                    batch.reward,
                    batch.discount,
                    batch.next_observation,
                )
            )

    value_q, grad_q = jax.value_and_grad(quantile_loss)(online, frozen)
    _, grad_tau, interior = oracle_loss_parts(online, target, batch, mutation)

    # the proposal layer: vjp of the interior fractions with ∂W₁/∂τ (batch mean), minus the
    # entropy bonus's gradient; the features held constant (the source's var_list)
    def proposal(fraction, w_torso):
        f = jax.vmap(lambda o: features(online._replace(torso=w_torso), o))(batch.observation)
        return jax.vmap(lambda x: fractions(fraction, x)[1:-1])(f)

    taus, vjp = jax.vjp(proposal, online.fraction, online.torso)
    entropy = -jnp.sum(taus * jnp.log(taus), axis=-1)
    _, vjp_entropy = jax.vjp(lambda t: -coef * jnp.mean(-jnp.sum(t * jnp.log(t), axis=-1)), taus)
    (cot_entropy,) = vjp_entropy(jnp.ones(()))
    fraction_grad, torso_from_fractions = vjp(grad_tau / BATCH + cot_entropy)
    value_f = jnp.mean(jnp.sum(grad_tau * interior, -1)) - coef * jnp.mean(entropy)

    grads = grad_q._replace(fraction=fraction_grad)
    if mutation == "fraction_loss_reaches_torso":
        grads = grads._replace(torso=jax.tree.map(jnp.add, grad_q.torso, torso_from_fractions))
    if mutation == "quantile_loss_reaches_fractions":
        grad_q_fraction = jax.grad(lambda fr: quantile_loss(online, fr))(online.fraction)
        grads = grads._replace(fraction=jax.tree.map(jnp.add, fraction_grad, grad_q_fraction))
    return value_q + value_f, grads


class Answer(NamedTuple):
    loss: float
    grads: list[np.ndarray]


def as_answer(value: Any, grads: Weights) -> Answer:
    return Answer(float(value), [np.asarray(g) for g in jax.tree.leaves(grads)])


def to_float64(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: (
            jnp.asarray(x, jnp.float64)
            if eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.floating)
            else x
        ),
        tree,
    )


def oracle_answer(online, target, batch, mutation=None) -> Answer:
    with jax.enable_x64(True):
        w_on, w_tg, batch64 = to_float64((weights_of(online), weights_of(target), batch))
        value, grads = jax.jit(oracle, static_argnums=3)(w_on, w_tg, batch64, mutation)
        return as_answer(value, grads)


@functools.cache
def loss_of() -> Callable[..., Any]:
    return zoo.build_loss(spec_of())


@eqx.filter_jit
def _project(loss_fn, online, target, batch, key):
    def loss(net):
        return loss_fn(online=net, target=target, batch=batch, key=key)

    (value, _), grads = eqx.filter_value_and_grad(loss, has_aux=True)(online)
    return value, grads


def project_answer(online, target, batch, float64: bool = False) -> Answer:
    with jax.enable_x64(float64):
        args = to_float64((online, target, batch)) if float64 else (online, target, batch)
        value, grads = _project(loss_of(), *args, jax.random.key(0))
        return as_answer(value, weights_of(grads))


def close(a: Answer, b: Answer, tol: float) -> bool:
    if abs(a.loss - b.loss) > tol * max(1.0, abs(b.loss)):
        return False
    return all(
        np.allclose(x, y, rtol=tol, atol=tol * max(float(np.max(np.abs(y))), 1e-12))
        for x, y in zip(a.grads, b.grads, strict=True)
    )


def explain(a: Answer, b: Answer) -> str:
    diffs = [float(np.max(np.abs(x - y))) for x, y in zip(a.grads, b.grads, strict=True)]
    return f"loss {a.loss!r} vs {b.loss!r}; largest gradient difference per leaf {diffs}"


def make_transitions(seed: int) -> zoo.Transition:
    rng = np.random.default_rng(seed)
    pattern = np.array([0.0, 1.0, 1.0, 0.9])
    return zoo.Transition(
        observation=jnp.asarray(rng.normal(size=(BATCH, OBS_DIM)), jnp.float32),
        action=jnp.asarray(rng.integers(0, NUM_ACTIONS, size=BATCH), jnp.int32),
        reward=jnp.asarray(rng.uniform(-3.0, 3.0, size=BATCH), jnp.float32),
        discount=jnp.asarray(rng.permutation(np.resize(pattern, BATCH)), jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(BATCH, OBS_DIM)), jnp.float32),
        probability=jnp.full((BATCH,), 1.0 / BATCH, jnp.float32),
    )


@pytest.fixture(scope="module")
def nets() -> tuple[Any, Any]:
    """Online and target networks of the catalogue's ``fqf`` (different keys), with the
    fraction layers' weights scaled up so that the proposed fractions are far from uniform, and
    the cosine embeddings' so that the quantile values vary with τ (then a mean over quantiles
    and a width-weighted one pick different actions)."""
    spec = spec_of()

    def build(seed: int) -> Any:
        net = build_network(spec, (OBS_DIM,), NUM_ACTIONS, key=jax.random.key(seed))
        net = eqx.tree_at(lambda n: n.head.fraction.weight, net, net.head.fraction.weight * 8)
        return eqx.tree_at(lambda n: n.head.embedding.weight, net, net.head.embedding.weight * 16)

    return build(1), build(2)


TOLERANCE = 1e-5
FLOAT64_TOLERANCE = 1e-9


@pytest.mark.unit
def test_catalogue_and_preset_values() -> None:
    """``fqf`` carries microsoft/FQF's values: N = 32, 64 cosines, κ = 1, Adam 5e-5 (ε 3.125e-4)
    and the proposal layer's centred RMSProp (5e-5 × 1e-6, decay 0.95, ε 1e-5 / 32²)."""
    spec = zoo.load_algorithm("fqf")
    head = spec.network.head
    assert (head.kind, head.num_fractions, head.num_cosines) == ("fqf", 32, 64)
    assert head.entropy_coef == pytest.approx(0.001 * 0.001)
    assert (spec.loss.td.kind, spec.loss.td.delta) == ("huber", 1.0)
    assert (spec.optimizer.kind, spec.optimizer.learning_rate.value) == ("adam", 5e-5)
    (group,) = spec.optimizer.groups
    assert group.params == "head.fraction"
    rms = group.optimizer
    assert (rms.kind, rms.decay, rms.centered) == ("rmsprop", 0.95, True)
    assert rms.learning_rate.value == pytest.approx(5e-5 * 1e-6)
    assert rms.eps == pytest.approx(1e-5 / 32**2)


@pytest.mark.compiled
def test_oracle_quantile_loss_matches_a_numpy_loop(nets) -> None:
    """The oracle's quantile loss equals the source's formula written out item by item."""
    online, target = nets
    batch = make_transitions(0)
    with jax.enable_x64(True):
        w_on, w_tg, b = to_float64((weights_of(online), weights_of(target), batch))
        quantile, _, _ = oracle_loss_parts(w_on, w_tg, b)
        for i in range(BATCH):
            f = np.asarray(features(w_on, b.observation[i]))
            logits = np.asarray(w_on.fraction[0]) @ f + np.asarray(w_on.fraction[1])
            p = np.exp(logits - logits.max())
            taus = np.concatenate([[0.0], np.cumsum(p / p.sum())])
            hats = (taus[1:] + taus[:-1]) / 2
            theta = np.asarray(quantile_values(w_on, jnp.asarray(f), jnp.asarray(hats)))
            f2 = features(w_tg, b.next_observation[i])
            t2 = np.asarray(fractions(w_tg.fraction, f2))
            z2 = np.asarray(quantile_values(w_tg, f2, jnp.asarray((t2[1:] + t2[:-1]) / 2)))
            best = int(np.argmax(z2 @ (t2[1:] - t2[:-1])))
            y = float(b.reward[i]) + DISCOUNT * float(b.discount[i]) * z2[best]
            total = 0.0
            for k in range(N):
                for j in range(N):
                    u = y[j] - theta[int(b.action[i]), k]
                    h = 0.5 * u * u if abs(u) <= KAPPA else KAPPA * (abs(u) - 0.5 * KAPPA)
                    total += abs(hats[k] - (u < 0)) * h / N
            np.testing.assert_allclose(float(quantile[i]), total, rtol=1e-10)


@pytest.mark.compiled
def test_fqf_matches_the_sources_two_optimizer_step(nets) -> None:
    """Loss and every gradient of the project equal the oracle's, in float32 and float64; the
    proposed fractions are far from uniform and the proposal layer's gradient is not zero."""
    online, target = nets
    batch = make_transitions(1)
    reference = oracle_answer(online, target, batch)
    got = project_answer(online, target, batch)
    assert close(got, reference, TOLERANCE), explain(got, reference)
    got64 = project_answer(online, target, batch, float64=True)
    assert close(got64, reference, FLOAT64_TOLERANCE), explain(got64, reference)
    out = apply_batch(online, batch.observation, None, role="learn")
    widths = np.diff(np.concatenate([np.zeros((BATCH, 1)), np.asarray(out.fractions)], 1), axis=1)
    assert widths.min() < 0.5 / N and widths.max() > 2.0 / N
    fraction_grad = weights_of(_project(loss_of(), online, target, batch, jax.random.key(0))[1])
    assert float(np.max(np.abs(np.asarray(fraction_grad.fraction[0])))) > 1e-3


@pytest.mark.parametrize("mutation", MUTATIONS)
@pytest.mark.compiled
def test_check_fails_on_a_single_detail_change(mutation: str, nets) -> None:
    """Each single-detail change of the oracle moves it away from the project by far more than
    the tolerance: the check can fail."""
    online, target = nets
    batch = make_transitions(1)
    mutated = oracle_answer(online, target, batch, mutation)
    got = project_answer(online, target, batch)
    assert not close(got, mutated, 100 * TOLERANCE), f"{mutation}: {explain(got, mutated)}"


@pytest.mark.compiled
def test_head_outputs_by_role(nets) -> None:
    """Every role gives the same proposed midpoints, quantiles and width-weighted Q; only the
    learner's role adds the interior fractions and their quantiles."""
    online, _ = nets
    obs = make_transitions(2).observation
    learn = apply_batch(online, obs, None, role="learn")
    for role in ("act", "bootstrap"):
        other = apply_batch(online, obs, None, role=role)
        np.testing.assert_array_equal(other.quantiles, learn.quantiles)
        np.testing.assert_array_equal(other.q_values, learn.q_values)
        assert other.fractions is None and other.fraction_quantiles is None
    assert learn.fractions.shape == (BATCH, N - 1)
    assert learn.fraction_quantiles.shape == (BATCH, NUM_ACTIONS, N - 1)
    taus = np.concatenate([np.zeros((BATCH, 1)), np.asarray(learn.fractions)], axis=1)
    np.testing.assert_allclose(learn.taus[:, :-1], (taus[:, 1:] + taus[:, :-1]) / 2, rtol=1e-6)
    widths = np.diff(np.concatenate([taus, np.ones((BATCH, 1))], axis=1), axis=1)
    q = np.einsum("ban,bn->ba", np.asarray(learn.quantiles), widths)
    np.testing.assert_allclose(learn.q_values, q, rtol=1e-5, atol=1e-6)
