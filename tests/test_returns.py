"""Q(λ) targets (zoo.losses.returns) against an independent backwards loop and a hand case."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from zoo.losses.returns import q_lambda_targets


def backwards_loop(r, v, term, trunc, gamma, lam, truncation="bootstrap"):
    """The textbook recursion, one env and one step at a time, in float64."""
    steps, envs = r.shape
    lam = np.broadcast_to(np.asarray(lam, np.float64), r.shape)
    out = np.zeros((steps, envs))
    for n in range(envs):
        following = None  # G_{t+1} of this env
        for t in reversed(range(steps)):
            terminal = term[t, n] or (truncation == "terminal" and trunc[t, n])
            if terminal:
                g = r[t, n]
            elif trunc[t, n] or t == steps - 1:
                g = r[t, n] + gamma * v[t, n]
            else:
                g = r[t, n] + gamma * ((1 - lam[t, n]) * v[t, n] + lam[t, n] * following)
            out[t, n] = g
            following = g
    return out


@pytest.fixture(scope="module")
def rollout():
    rng = np.random.default_rng(0)
    steps, envs = 16, 5
    r = rng.normal(size=(steps, envs)).astype(np.float32)
    v = rng.normal(size=(steps, envs)).astype(np.float32) * 3
    term = rng.random((steps, envs)) < 0.15
    trunc = (rng.random((steps, envs)) < 0.15) & ~term
    term[-1, 0] = True  # a terminal on the rollout's last step
    trunc[-1, 1] = True  # and a truncation there
    assert term.any() and trunc.any()
    return r, v, term, trunc


@pytest.mark.parametrize("truncation", ["bootstrap", "terminal"])
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.compiled
def test_equals_backwards_loop(rollout, truncation, jit):
    r, v, term, trunc = rollout
    fn = jax.jit(q_lambda_targets, static_argnums=(4, 5, 6)) if jit else q_lambda_targets
    got = np.asarray(fn(r, v, term, trunc, 0.99, 0.65, truncation))
    want = backwards_loop(r, v, term, trunc, 0.99, 0.65, truncation)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    if truncation == "bootstrap":  # the two modes differ exactly where a truncation is
        other = backwards_loop(r, v, term, trunc, 0.99, 0.65, "terminal")
        assert not np.allclose(got, other)


@pytest.mark.compiled
def test_per_step_lambda_equals_loop(rollout):
    """Watkins' Q(λ): λ_t zeroed after non-greedy actions, here an arbitrary per-step λ."""
    r, v, term, trunc = rollout
    lam = np.random.default_rng(1).random(r.shape).astype(np.float32)
    got = np.asarray(q_lambda_targets(r, v, term, trunc, 0.9, lam))
    np.testing.assert_allclose(
        got, backwards_loop(r, v, term, trunc, 0.9, lam), rtol=1e-6, atol=1e-5
    )


@pytest.mark.compiled
def test_lambda_limits(rollout):
    """λ = 0 is one-step Q-learning; λ = 1 the discounted return to the first cut."""
    r, v, term, trunc = rollout
    one_step = r + 0.9 * v * ~term
    got = np.asarray(q_lambda_targets(r, v, term, trunc, 0.9, 0.0))
    np.testing.assert_allclose(got, one_step, rtol=1e-6, atol=1e-6)


@pytest.mark.compiled
def test_hand_computed_tiny_case():
    """One env, four steps, γ = 0.5, λ = 0.5: a truncation at t = 1, a termination at t = 3.

    t = 3: terminated            G₃ = r₃ = 4
    t = 2: continues             G₂ = 3 + 0.5·(0.5·v₂ + 0.5·G₃) = 3 + 0.5·(0.5·8 + 2) = 6
    t = 1: truncated             G₁ = 2 + 0.5·v₁ = 2 + 0.5·6 = 5       (final observation's value)
    t = 0: continues             G₀ = 1 + 0.5·(0.5·v₀ + 0.5·G₁) = 1 + 0.5·(2 + 2.5) = 3.25
    """
    r = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
    v = np.array([[4.0], [6.0], [8.0], [100.0]], np.float32)
    term = np.array([[False], [False], [False], [True]])
    trunc = np.array([[False], [True], [False], [False]])
    got = np.asarray(q_lambda_targets(r, v, term, trunc, 0.5, 0.5))
    np.testing.assert_allclose(got[:, 0], [3.25, 5.0, 6.0, 4.0])
    # purejaxql's reading: the truncation is a terminal, G₁ = r₁ = 2, G₀ = 1 + 0.5·(2 + 1) = 2.5
    got = np.asarray(q_lambda_targets(r, v, term, trunc, 0.5, 0.5, "terminal"))
    np.testing.assert_allclose(got[:, 0], [2.5, 2.0, 6.0, 4.0])


@pytest.mark.unit
def test_rejects_bad_input():
    z = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="truncation must be one of"):
        q_lambda_targets(z, z, z > 0, z > 0, 0.9, 0.5, "cut")
    with pytest.raises(ValueError, match=r"\[T, N\]"):
        q_lambda_targets(z[0], z[0], z[0] > 0, z[0] > 0, 0.9, 0.5)
