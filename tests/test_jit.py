"""async_jit: the loop's jit over Equinox modules, with asynchronous dispatch."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.jit import async_jit

pytestmark = pytest.mark.compiled


class Scale(eqx.Module):
    weight: jax.Array
    activation: object = eqx.field(static=True)

    def __call__(self, x):
        return self.activation(self.weight * x)


def test_matches_eager_and_keeps_static_parts():
    traces = []

    def f(module, x, n):
        traces.append(1)
        return eqx.tree_at(lambda m: m.weight, module, module.weight + 1), module(x) * n

    g = async_jit(f)
    module = Scale(jnp.asarray([1.0, -2.0]), jax.nn.relu)
    x = np.asarray([3.0, 4.0], np.float32)
    new, y = g(module, x, 2)
    assert new.activation is jax.nn.relu  # the static field survives the round trip
    np.testing.assert_allclose(new.weight, [2.0, -1.0])
    np.testing.assert_allclose(y, [6.0, 0.0])
    g(new, x, 2)
    assert len(traces) == 1  # same structure and statics: one trace
    _, y3 = g(module, x, 3)  # a Python number is static: a new value retraces
    assert len(traces) == 2
    np.testing.assert_allclose(y3, [9.0, 0.0])
    _, y_tanh = g(Scale(module.weight, jnp.tanh), x, 2)
    np.testing.assert_allclose(y_tanh, 2 * np.tanh([3.0, -8.0]), rtol=1e-6)


def test_donated_arguments_are_consumed_and_others_kept():
    g = async_jit(lambda a, b: (a + b, b * 2), donate_argnums=(0,))
    a, b = jnp.ones(4), jnp.full(4, 2.0)
    out, twice = g(a, b)
    np.testing.assert_allclose(out, 3.0)
    np.testing.assert_allclose(twice, 4.0)
    assert not b.is_deleted()
    with pytest.raises(RuntimeError):
        np.asarray(a)  # donated: its buffer now holds the output


def test_dispatch_returns_before_the_work_is_done():
    @async_jit
    def heavy(x):
        for _ in range(30):
            x = jnp.tanh(x @ x)
        return x

    x = jnp.eye(800) * 0.5
    jax.block_until_ready(heavy(x))
    out = heavy(x)
    # the call returned a future: ~30 large matmuls are still running (eqx.filter_jit waits)
    assert not out.is_ready()
    jax.block_until_ready(out)
    assert out.is_ready()
    filtered = eqx.filter_jit(heavy.__wrapped__)
    jax.block_until_ready(filtered(x))
    assert filtered(x).is_ready()  # the behaviour async_jit exists to avoid
