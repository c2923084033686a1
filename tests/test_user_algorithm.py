"""A new algorithm written as YAML outside the repository needs no Python.

Double bootstrap + Munchausen + quantile head + 3-step returns + the signed hyperbolic transform:
it validates (with the real `zoo validate` command), builds, and gives a finite loss and finite,
non-zero gradients.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo

pytestmark = pytest.mark.process

NEW_ALGORITHM = """
double_munchausen_qr:
  extends: qr_dqn
  summary: Double-Q selection, Munchausen bonus, 3-step quantile targets in h-space.
  network:
    hidden: [32]
    head: {kind: quantile, num_quantiles: 16}
  loss:
    bootstrap: double
    temperature: 0.03
    munchausen: {alpha: 0.9, clip_min: -1.0}
    n_step: 3
    value_transform: {kind: signed_hyperbolic, eps: 1.0e-3}
"""


def test_yaml_only_algorithm_validates_builds_and_learns(tmp_path):
    path = tmp_path / "elsewhere" / "mine.yaml"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(NEW_ALGORITHM))

    result = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "ok (1 entry: " in result.stdout

    spec = zoo.load_algorithm(path)
    assert spec.name == "double_munchausen_qr"
    assert (spec.loss.bootstrap.kind, spec.network.head.kind) == ("double", "quantile")
    assert spec.loss.n_step == 3 and spec.loss.reward_clip is None  # inherited from qr_dqn
    assert spec.loss.value_transform.kind == "signed_hyperbolic"

    key = jax.random.PRNGKey(0)
    net = zoo.build_network(spec, observation_shape=(6,), num_actions=4, key=key)
    target = zoo.build_network(spec, observation_shape=(6,), num_actions=4, key=key + 1)
    rng = np.random.default_rng(0)
    batch = zoo.Transition(
        observation=jnp.asarray(rng.normal(size=(16, 6)), jnp.float32),
        action=jnp.asarray(rng.integers(0, 4, 16), jnp.int32),
        reward=jnp.asarray(rng.normal(size=16) * 5, jnp.float32),
        discount=jnp.asarray(rng.choice([0.0, 0.99**2], size=16), jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(16, 6)), jnp.float32),
        probability=jnp.full((16,), 1 / 16, jnp.float32),
    )
    loss_fn = zoo.build_loss(spec)

    @eqx.filter_jit
    def value_and_grad(online):
        return eqx.filter_value_and_grad(
            lambda o: loss_fn(online=o, target=target, batch=batch, key=key), has_aux=True
        )(online)

    (loss, aux), grads = value_and_grad(net)
    assert np.isfinite(float(loss)) and float(loss) > 0
    assert aux.priorities is None
    leaves = jax.tree.leaves(eqx.filter(grads, eqx.is_inexact_array))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    assert sum(float(jnp.sum(jnp.abs(g))) for g in leaves) > 0
