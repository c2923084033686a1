"""Compare DataParallelLearner on 2 forced host devices with the single-device Learner.

Run as ``python -m tests.workers.data_parallel`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=2``; prints one JSON line per entry.
"""

from __future__ import annotations

import json

import equinox as eqx
import jax
import jax.numpy as jnp

import zoo
from tests.test_catalogue import ACTIONS, OBS, random_batch, small_spec
from zoo.learner import DataParallelLearner, Learner


def max_abs_diff(a, b) -> float:
    a = eqx.filter(a, eqx.is_inexact_array)
    b = eqx.filter(b, eqx.is_inexact_array)
    return max(jax.tree.leaves(jax.tree.map(lambda x, y: float(jnp.max(jnp.abs(x - y))), a, b)))


def main() -> None:
    assert jax.device_count() == 2, jax.devices()
    for name in ("prioritized_ddqn", "rainbow", "qr_dqn", "r2d2", "iqn", "r2d2_iqn"):
        spec = small_spec(name)
        net = zoo.build_network(
            spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.PRNGKey(0)
        )
        single = Learner(spec)
        parallel = DataParallelLearner(spec)
        s1 = single.init(net, jax.random.PRNGKey(1))
        s2 = parallel.init(net, jax.random.PRNGKey(1))
        update = eqx.filter_jit(single.update)
        for step in range(3):
            batch = random_batch(spec, net, step)
            s1, aux1 = update(s1, batch)
            s2, aux2 = parallel.update(s2, batch)
        s2 = parallel.unreplicate(s2)
        priorities = None
        if aux1.priorities is not None:
            priorities = float(jnp.max(jnp.abs(aux1.priorities - aux2.priorities)))
        print(
            json.dumps(
                {
                    "name": name,
                    "params": max_abs_diff(s1.online, s2.online),
                    "target": max_abs_diff(s1.target, s2.target),
                    "scale": max(
                        float(jnp.max(jnp.abs(x)))
                        for x in jax.tree.leaves(eqx.filter(s1.online, eqx.is_inexact_array))
                    ),
                    "loss": [float(aux1.metrics["loss"]), float(aux2.metrics["loss"])],
                    "priorities": priorities,
                    "updates": int(s2.updates),
                }
            )
        )


if __name__ == "__main__":
    main()
