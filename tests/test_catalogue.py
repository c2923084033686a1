"""Every catalogue entry goes through a few jitted learner updates (one parametrised test).

Finite loss, parameters change, priorities exactly when the replay is prioritised, and no
retracing after the first trace. Networks are shrunk through overrides (the loss and learner
code paths are the entries' own).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.learner import Learner
from zoo.types import FutureSteps

pytestmark = pytest.mark.compiled

OBS, ACTIONS, BATCH = (5,), 3, 8
#: the observations of entries whose auxiliary loss predicts the torso's feature map (SPR)
IMAGE = (4, 10, 10)
SMALL = {"network.hidden": [16], "replay.batch_size": BATCH}
RECURRENT_SMALL = {
    "network.core.size": 8,
    "replay.sequence.burn_in": 2,
    "replay.sequence.trace_length": 5,
    "loss.n_step": 3,
}


def observation_shape(spec: zoo.AlgorithmSpec) -> tuple[int, ...]:
    """Vectors, but small images where an auxiliary loss reads a feature map."""
    return IMAGE if spec.auxiliary is not None else OBS


def small_spec(name: str) -> zoo.AlgorithmSpec:
    spec = zoo.load_algorithm(name, overrides=SMALL)
    if spec.auxiliary is not None:
        # SPR predicts the torso's feature map: a small convolution on 10×10 images stands in
        # for the entry's Atari torso (Nature CNN, IMPALA ×4)
        spec = zoo.load_algorithm(
            spec, overrides={"network.torso": {"kind": "minatar_cnn", "channels": 4}}
        )
    if spec.recurrent:
        spec = zoo.load_algorithm(spec, overrides=RECURRENT_SMALL)
    if spec.augmentation is not None:
        # the observations here are vectors, which image augmentations refuse;
        # tests/test_augmentation.py runs the learner with an augmentation
        spec = zoo.load_algorithm(spec, overrides={"augmentation": None})
    if spec.optimizer.groups:
        # a group's learning rate may be far below float32's resolution of its weights (FQF's
        # 5e-11): here each group learns at 1e-3, so that "every parameter changes"
        # checks that each group's gradient reaches it
        groups = [
            {**g.model_dump(), "optimizer": {**g.optimizer.model_dump(), "learning_rate": 1e-3}}
            for g in spec.optimizer.groups
        ]
        spec = zoo.load_algorithm(spec, overrides={"optimizer.groups": groups})
    return spec


def random_batch(spec: zoo.AlgorithmSpec, net, seed: int):
    rng = np.random.default_rng(seed)
    obs = observation_shape(spec)
    probability = jnp.asarray(rng.uniform(1e-4, 1e-2, BATCH), jnp.float32)
    if spec.recurrent:
        length = spec.replay.sequence.length
        shape = (BATCH, length)
        discount = (rng.uniform(size=shape) > 0.1).astype(np.float32)
        state = jax.tree.map(
            lambda x: jnp.asarray(rng.normal(size=(BATCH, *x.shape)), jnp.float32),
            net.initial_state(),
        )
        return zoo.SequenceBatch(
            observation=jnp.asarray(rng.normal(size=(*shape, *OBS)), jnp.float32),
            action=jnp.asarray(rng.integers(0, ACTIONS, shape), jnp.int32),
            reward=jnp.asarray(rng.uniform(-2, 2, shape), jnp.float32),
            discount=jnp.asarray(discount),
            core_state=state,
            probability=probability,
        )
    future = None
    if spec.auxiliary is not None:
        steps = (BATCH, spec.auxiliary.steps)
        future = FutureSteps(
            observation=jnp.asarray(rng.normal(size=(*steps, *obs)), jnp.float32),
            action=jnp.asarray(rng.integers(0, ACTIONS, steps), jnp.int32),
            mask=jnp.asarray(np.cumprod(rng.uniform(size=steps) > 0.1, axis=1), jnp.float32),
        )
    return zoo.Transition(
        observation=jnp.asarray(rng.normal(size=(BATCH, *obs)), jnp.float32),
        action=jnp.asarray(rng.integers(0, ACTIONS, BATCH), jnp.int32),
        reward=jnp.asarray(rng.uniform(-2, 2, BATCH), jnp.float32),
        discount=jnp.asarray((rng.uniform(size=BATCH) > 0.2).astype(np.float32)),
        next_observation=jnp.asarray(rng.normal(size=(BATCH, *obs)), jnp.float32),
        probability=probability,
        future=future,
    )


@pytest.mark.parametrize("name", zoo.algorithm_names())
def test_entry_trains_for_a_few_jitted_updates(name):
    spec = small_spec(name)
    key = jax.random.PRNGKey(0)
    obs = observation_shape(spec)
    net = zoo.build_network(spec, observation_shape=obs, num_actions=ACTIONS, key=key)
    learner = Learner(  # resets draw fresh networks of the same shapes
        spec,
        network_fn=lambda k: zoo.build_network(
            spec, observation_shape=obs, num_actions=ACTIONS, key=k
        ),
    )
    state = learner.init(net, jax.random.PRNGKey(1))
    traces = []

    @eqx.filter_jit
    def update(state, batch):
        traces.append(1)
        return learner.update(state, batch)

    initial = eqx.filter(state.online, eqx.is_inexact_array)
    for step in range(3):
        state, aux = update(state, random_batch(spec, net, seed=step))
        loss = float(aux.metrics["loss"])
        assert np.isfinite(loss), (name, step, loss)
        if step == 1:
            traces_after_second = len(traces)
    assert len(traces) == traces_after_second == 1, f"{name} retraced: {len(traces)} traces"
    assert int(state.updates) == 3

    changed = jax.tree.map(
        lambda a, b: bool(jnp.any(a != b)), initial, eqx.filter(state.online, eqx.is_inexact_array)
    )
    assert all(jax.tree.leaves(changed)), f"{name}: some parameters never changed"
    # the target stays put until its period; with a period of 1 (DrQ(ε)) it is the online network;
    # an EMA (SR-SPR and BBF: τ 0.005 every update) has moved off the initial network, not onto
    # the online one
    period = spec.schedule.target_update_period
    target = eqx.filter(state.target, eqx.is_inexact_array)
    online = eqx.filter(state.online, eqx.is_inexact_array)
    if period == 1 and spec.schedule.target_update_rate < 1:
        moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), initial, target)
        apart = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), online, target)
        assert all(jax.tree.leaves(moved)) and all(jax.tree.leaves(apart))
    else:
        if period > 3:
            expected = initial
        else:
            assert period == 1 and spec.schedule.target_update_rate == 1.0, (name, period)
            expected = online
        same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), expected, target)
        assert all(jax.tree.leaves(same))

    if spec.replay.kind == "prioritized":
        assert aux.priorities is not None and aux.priorities.shape == (BATCH,)
        assert bool(jnp.all(aux.priorities >= 0)) and bool(jnp.all(jnp.isfinite(aux.priorities)))
    else:
        assert aux.priorities is None


def test_target_updates_on_its_period_and_polyak_mixes():
    spec = zoo.load_algorithm("dqn", overrides={**SMALL, "schedule.target_update_period": 2})
    net = zoo.build_network(
        spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.PRNGKey(0)
    )
    learner = Learner(spec)
    update = eqx.filter_jit(learner.update)
    state = learner.init(net, jax.random.PRNGKey(1))
    state, _ = update(state, random_batch(spec, net, 0))
    params = lambda m: eqx.filter(m, eqx.is_inexact_array)  # noqa: E731
    # after 1 update the target still equals the initial network
    same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), params(net), params(state.target))
    assert all(jax.tree.leaves(same))
    state, _ = update(state, random_batch(spec, net, 1))
    same = jax.tree.map(
        lambda a, b: bool(jnp.all(a == b)), params(state.online), params(state.target)
    )
    assert all(jax.tree.leaves(same))  # copied at update 2

    polyak = zoo.load_algorithm(
        spec, overrides={"schedule.target_update_period": 1, "schedule.target_update_rate": 0.25}
    )
    learner = Learner(polyak)
    state = learner.init(net, jax.random.PRNGKey(1))
    new, _ = eqx.filter_jit(learner.update)(state, random_batch(polyak, net, 0))
    expected = jax.tree.map(lambda o, t: 0.25 * o + 0.75 * t, params(new.online), params(net))
    close = jax.tree.map(
        lambda a, b: bool(jnp.allclose(a, b, atol=1e-7)), expected, params(new.target)
    )
    assert all(jax.tree.leaves(close))


@pytest.mark.parametrize("name", ["mdqn", "r2d2"])
def test_munchausen_online_policy_reads_the_online_network(name):
    """``loss.munchausen.policy: online`` on single transitions and on sequences: with the online
    network as the target the two settings give the same loss (deterministic q heads, the same
    stored state), with another target network they differ; only the bonus moved."""
    munchausen = {"loss.bootstrap": "soft", "loss.temperature": 0.03, "loss.munchausen": {}}
    specs = {
        policy: zoo.load_algorithm(
            small_spec(name),
            overrides={**munchausen, "loss.munchausen.policy": policy, "loss.reward_clip": None},
        )
        for policy in ("target", "online")
    }
    online = zoo.build_network(
        specs["target"], observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(0)
    )
    other = zoo.build_network(
        specs["target"], observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(1)
    )
    batch = random_batch(specs["target"], online, seed=3)

    def loss(policy, target):
        value, _ = zoo.build_loss(specs[policy])(online, target, batch, jax.random.key(2))
        return float(value)

    assert loss("online", online) == pytest.approx(loss("target", online), rel=1e-6)
    assert abs(loss("online", other) - loss("target", other)) > 1e-4 * abs(loss("target", other))
