"""The target network as an exponential moving average (issue 38): BBF's and SR-SPR's τ = 0.005
after every update, and SPR's τ = 1 (its paper's "τ = 0"), against BBF's ``spr_agent.py``
``interpolate_weights`` transcribed in float64."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.learner import Learner


def leaves(network) -> list[np.ndarray]:
    return [
        np.asarray(x, np.float64)
        for x in jax.tree.leaves(eqx.filter(network, eqx.is_inexact_array))
    ]


@pytest.mark.parametrize("tau", [0.005, 1.0])
@pytest.mark.compiled
def test_the_target_follows_bbfs_interpolate_weights(tau):
    """``target ← (1 − τ)·target + τ·online`` with the online parameters just after each
    update's optimizer step (BBF's ``interpolate_weights(target, online, old_weight=1 − τ,
    new_weight=τ)`` at ``step % 1 == 0``), over six updates."""
    spec = zoo.load_algorithm(
        "dqn",
        overrides={
            "network.hidden": [8],
            "replay.batch_size": 4,
            "schedule.target_update_period": 1,
            "schedule.target_update_rate": tau,
        },
    )
    net = zoo.build_network(spec, observation_shape=(4,), num_actions=2, key=jax.random.key(0))
    learner = Learner(spec)
    state = learner.init(net, jax.random.key(1))
    update = eqx.filter_jit(learner.update)
    rng = np.random.default_rng(0)
    target = leaves(state.target)
    for _ in range(6):
        batch = zoo.Transition(
            observation=jnp.asarray(rng.normal(size=(4, 4)), jnp.float32),
            action=jnp.asarray(rng.integers(0, 2, 4), jnp.int32),
            reward=jnp.asarray(rng.normal(size=4), jnp.float32),
            discount=jnp.ones(4),
            next_observation=jnp.asarray(rng.normal(size=(4, 4)), jnp.float32),
            probability=jnp.ones(4),
        )
        state, _ = update(state, batch)
        online = leaves(state.online)
        target = [(1.0 - tau) * t + tau * o for t, o in zip(target, online, strict=True)]
        for got, want in zip(leaves(state.target), target, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    if tau == 1.0:  # SPR: the target is the online network after every update, exactly
        for a, b in zip(leaves(state.target), leaves(state.online), strict=True):
            np.testing.assert_array_equal(a, b)
    else:  # the target lags the online network
        moved = [
            np.abs(t - o).max()
            for t, o in zip(leaves(state.target), leaves(state.online), strict=True)
        ]
        assert max(moved) > 0
