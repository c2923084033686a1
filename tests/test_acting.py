"""``schedule.act_with`` (issue 38): the actors act with the online network, or with the target
as BBF and SR-SPR do (their ``target_action_selection``), from the first step on."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.learn import LearnStep
from zoo.learner import Learner
from zoo.replay import StepBatch, build_replay


def arrays(network):
    return jax.tree.leaves(eqx.filter(network, eqx.is_inexact_array))


@pytest.mark.parametrize("act_with", ["online", "target"])
@pytest.mark.compiled
def test_the_actors_act_with_the_network_the_spec_names(act_with):
    spec = zoo.load_algorithm(
        "dqn",
        overrides={
            "network.hidden": [8],
            "replay.batch_size": 4,
            "replay.min_size": 4,
            "replay.capacity": 64,
            "schedule.target_update_period": 1,
            "schedule.target_update_rate": 0.005,  # BBF's τ: the target lags the online network
            "schedule.act_with": act_with,
        },
    )
    net = zoo.build_network(spec, observation_shape=(4,), num_actions=2, key=jax.random.key(0))
    learner = Learner(spec)
    replay = build_replay(spec, num_envs=1, observation_shape=(4,), observation_dtype=jnp.float32)
    step = LearnStep(learner, replay, 4)
    state = learner.init(net, jax.random.key(1))
    carry = step.init(state, jax.random.key(2))
    replay_state = replay.init()
    rng = np.random.default_rng(0)
    for t in range(12):
        step_batch = StepBatch(
            observation=jnp.asarray(rng.normal(size=(1, 4)), jnp.float32),
            action=jnp.asarray([t % 2], jnp.int32),
            reward=jnp.ones((1,)),
            terminated=jnp.asarray([t % 5 == 4]),
            truncated=jnp.zeros((1,), bool),
            first=jnp.asarray([t == 0 or t % 5 == 0]),
            valid=jnp.ones((1,), bool),
        )
        replay_state = replay.add(replay_state, step_batch)
    learn = eqx.filter_jit(step.learn)
    for _ in range(3):
        before = carry.learner
        carry, replay_state = learn(carry, replay_state)
    # the actors lag the learner by one update: the acting network as it was before the last
    chosen = before.target if act_with == "target" else before.online
    other = before.online if act_with == "target" else before.target
    actor = arrays(carry.actor)
    assert all(np.array_equal(a, b) for a, b in zip(actor, arrays(chosen), strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(actor, arrays(other), strict=True))
    assert learner.acting(carry.learner) is (
        carry.learner.target if act_with == "target" else carry.learner.online
    )
