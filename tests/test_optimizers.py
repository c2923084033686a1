"""The optimizer axis: each kind equals the optax chain it names; RAdam's own rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from zoo.optimizers import build_optimizer
from zoo.spec import RAdam


def run(opt: optax.GradientTransformation, steps: int = 8) -> np.ndarray:
    """``steps`` updates of a fixed quadratic's parameters: the trajectory's end."""
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    state = opt.init(params)
    for i in range(steps):
        grads = {"w": params["w"] * (i + 1) * 4.0}
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return np.asarray(params["w"])


def test_radam_is_optax_radam_after_global_norm_clipping():
    config = RAdam(learning_rate=0.1, max_grad_norm=10.0)
    want = run(optax.chain(optax.clip_by_global_norm(10.0), optax.radam(0.1)))
    np.testing.assert_allclose(run(build_optimizer(config)), want, rtol=1e-6)
    # the clip binds (gradients reach a norm of ~120): without it the trajectory differs
    assert not np.allclose(run(optax.radam(0.1)), want)
    np.testing.assert_allclose(
        run(build_optimizer(RAdam(learning_rate=0.1))), run(optax.radam(0.1))
    )


def test_radam_takes_sgd_steps_before_rectifying():
    """RAdam's first updates (ρ_t ≤ threshold) are momentum SGD steps, not Adam's ±lr."""
    params = {"w": jnp.array([0.5])}
    opt = build_optimizer(RAdam(learning_rate=0.1))
    updates, _ = opt.update({"w": jnp.array([0.5])}, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["w"]), [-0.1 * 0.5], rtol=1e-6)


def test_radam_in_a_spec_and_its_rules():
    spec = zoo.load_algorithm(
        "dqn", overrides={"optimizer": {"kind": "radam", "learning_rate": 2.5e-4}}
    )
    assert isinstance(spec.optimizer, RAdam) and spec.optimizer.threshold == 5.0
    assert jax.tree.leaves(build_optimizer(spec.optimizer).init({"w": jnp.zeros(2)}))
    with pytest.raises(zoo.spec.SpecError, match=r"optimizer\.threshold"):
        zoo.load_algorithm("dqn", overrides={"optimizer": {"kind": "radam", "b2": 0.5}})
    with pytest.raises(zoo.spec.SpecError, match="learning rate of 0"):
        zoo.load_algorithm("dqn", overrides={"optimizer": {"kind": "radam", "learning_rate": 0}})
