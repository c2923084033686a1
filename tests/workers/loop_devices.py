"""Run the training loop body for a few hundred steps; print parameter checksums as JSON.

Started twice by tests/test_parallel.py: once with one host device and once with
``XLA_FLAGS=--xla_force_host_platform_device_count=2``, where the learner a run picks
(:func:`zoo.learner.learner_for_devices`) is data-parallel (shard_map inside the jitted body).
Both must agree to float tolerance.
"""

from __future__ import annotations

import json
import sys

import equinox as eqx
import jax
import jax.numpy as jnp

import zoo
from tests.test_loop import small
from zoo.data import build_data as build_replay
from zoo.envs import make
from zoo.learner import learner_for_devices
from zoo.loop import Loop


def build(spec, num_envs: int):
    """tests.test_loop.build with the learner a run on this host uses."""
    env = make("CartPole-v1", num_envs=num_envs, seed=3)
    net = zoo.build_network(
        spec,
        observation_shape=env.observation_shape,
        num_actions=env.num_actions,
        key=jax.random.PRNGKey(0),
    )
    core = net.initial_state() if spec.recurrent else None
    replay = build_replay(
        spec,
        num_envs=num_envs,
        observation_shape=env.observation_shape,
        observation_dtype=env.observation_dtype,
        core_state=core,
    )
    learner = learner_for_devices(spec)
    loop = Loop(spec, env, learner, replay, core)
    carry = loop.init(learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
    return env, loop, carry


def small_rollout(minibatches: int = 4) -> zoo.AlgorithmSpec:
    """pqn_cartpole with rollouts of 8 steps × 2 environments: 2 epochs of ``minibatches``."""
    base = zoo.spec.algorithm_for(zoo.load_preset("pqn_cartpole"))
    overrides = {
        "network.hidden": [32],
        "rollout.length": 8,
        "rollout.epochs": 2,
        "rollout.minibatches": minibatches,
        "schedule.target_update_period": 2 * minibatches,
    }
    return zoo.load_algorithm(base, overrides=overrides)


def main() -> None:
    name, path = sys.argv[1], sys.argv[2]
    spec = small_rollout() if name == "pqn" else small(name)
    refused = None
    if spec.rollout is not None and learner_for_devices(spec).num_shards > 1:
        try:  # 16 minibatches of 8 × 2 items: one item each, which 2 devices cannot split
            build(small_rollout(minibatches=16), num_envs=2)
        except ValueError as error:
            refused = str(error)
    env, loop, carry = build(spec, num_envs=2)
    carry, actions = loop.first_act(carry, env.reset())
    if path == "compiled":
        handle = env.xla()[0]
        carry, handle, _, _ = loop.chunk(carry, handle, jnp.zeros((2,), bool), 120)
    else:
        import numpy as np

        for _ in range(120):
            carry, actions, _ = loop.step(carry, env.step(np.asarray(actions)))
    leaves = jax.tree.leaves(eqx.filter(carry.learner.online, eqx.is_inexact_array))
    print(
        json.dumps(
            {
                "devices": loop.devices,
                "updates": int(carry.learner.updates),
                "params": [jnp.ravel(x)[:64].tolist() for x in leaves],
                "priorities": None
                if getattr(carry.replay, "weight", None) is None
                else jnp.ravel(carry.replay.weight).tolist(),
                "refused": refused,
            }
        )
    )


if __name__ == "__main__":
    main()
