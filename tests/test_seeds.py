"""Vmapped seeds: each seed runs exactly the single-seed loop body on its own environments
(:class:`zoo.seeds.VmappedSeeds` over :class:`zoo.drivers.seeds.SeedsDriver`)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zoo.envs import make
from zoo.learner import Learner
from zoo.loop import Loop
from zoo.seeds import VmappedSeeds

pytestmark = pytest.mark.compiled

SMALL = {
    "network.torso": {"kind": "mlp", "sizes": []},
    "network.hidden": [32],
    "replay.capacity": 2000,
    "replay.min_size": 100,
    "replay.batch_size": 16,
    "schedule.update_period": 2,
    "schedule.target_update_period": 20,
}
STEPS = 200


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array))]


def test_one_vmapped_seed_equals_the_single_seed_loop():
    vs = VmappedSeeds("dqn", "CartPole-v1", seeds=1, num_envs=2, overrides=SMALL)
    carry, handle, done = vs.init()
    carry, handle, done, _ = vs.run(carry, handle, done, STEPS)
    start = vs.init_seed(0)  # seed 0's carry at step 0, as a single run builds it
    vs.close()

    env = make("CartPole-v1", num_envs=2, seed=0)
    loop = Loop(vs.spec, env, Learner(vs.spec), vs.replay)
    single, _ = loop.first_act(start, env.reset())
    single, *_ = loop.chunk(single, env.xla()[0], jnp.zeros((2,), bool), STEPS)
    env.close()

    seed0 = jax.tree.map(lambda x: x[0] if eqx.is_array(x) else x, carry)
    assert int(seed0.learner.updates) == int(single.learner.updates) > 100
    np.testing.assert_array_equal(np.asarray(seed0.replay.action), np.asarray(single.replay.action))
    np.testing.assert_allclose(
        np.asarray(seed0.replay.frames), np.asarray(single.replay.frames), rtol=1e-6
    )
    for a, b in zip(leaves(seed0.learner.online), leaves(single.learner.online), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_seeds_are_independent_and_in_lockstep():
    vs = VmappedSeeds("dqn", "CartPole-v1", seeds=3, num_envs=2, overrides=SMALL)
    carry, handle, done = vs.init()
    carry, handle, done, rows = vs.run(carry, handle, done, STEPS)
    vs.close()
    assert rows.raw_reward.shape == (STEPS, 3, 2)
    updates = np.asarray(carry.learner.updates)
    assert updates.tolist() == [updates[0]] * 3 and updates[0] == (STEPS * 2 - 100) // 2 + 1
    first = [leaves(jax.tree.map(lambda x, i=i: x[i], carry.learner.online)) for i in range(3)]
    assert not np.allclose(first[0][0], first[1][0]) and not np.allclose(first[1][0], first[2][0])
    actions = np.asarray(carry.replay.action)
    assert not np.array_equal(actions[0], actions[1])


def test_image_envs_are_refused():
    with pytest.raises(ValueError, match="vector observations"):
        VmappedSeeds("dqn", "Pong-v5", seeds=2, num_envs=1)
