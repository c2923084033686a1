"""The resets axis (issue 38): when a reset is due, what it makes of each part of the network,
the target and the optimizer — against a float64 transcription of BBF's ``jit_reset``."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.horizon import Horizon
from zoo.learner import Learner
from zoo.optimizers import parameter_path
from zoo.resets import check_parts

OBS, ACTIONS = (4,), 2
NETWORK = {"network.torso": {"kind": "mlp", "sizes": [6]}, "network.hidden": [8]}


def spec_with(resets: dict | None, **more) -> zoo.AlgorithmSpec:
    overrides = {**NETWORK, "replay.batch_size": 4, "resets": resets, **more}
    return zoo.load_algorithm("dqn", overrides=overrides)


def network_fn(spec):
    return lambda key: zoo.build_network(spec, observation_shape=OBS, num_actions=ACTIONS, key=key)


def leaves(network) -> dict[str, np.ndarray]:
    """The network's parameters by dotted path, in float64."""
    params = eqx.filter(network, eqx.is_inexact_array)
    return {
        parameter_path(p): np.asarray(x, np.float64)
        for p, x in jax.tree_util.tree_leaves_with_path(params)
    }


def bbf_jit_reset(online, target, fresh, fresh_target, shrink_keys, keys_to_copy, old, new):
    """BBF's ``spr_agent.py`` ``jit_reset`` on parameters by path, in float64: ``online =
    interpolate_weights(online, random, shrink_perturb_keys, old_weight, new_weight)`` (only
    those keys move), then ``copy_params(online, random, keys_to_copy)`` (leaves under the
    copied keys keep ``online``'s values, every other leaf takes ``random``'s); the target
    likewise toward its own random draw."""

    def under(path, keys):
        return any(path == k or path.startswith(k + ".") for k in keys)

    def one(params, random):
        moved = {
            p: old * v + new * random[p] if under(p, shrink_keys) else v for p, v in params.items()
        }
        return {p: moved[p] if under(p, keys_to_copy) else random[p] for p in params}

    return one(online, fresh), one(target, fresh_target)


@pytest.mark.unit
def test_a_reset_is_due_every_period_from_the_first_until_the_count():
    every3 = zoo.spec.ResetSpec(every=3, count=2)
    assert [u for u in range(1, 21) if every3.due(u)] == [3, 6]
    later = zoo.spec.ResetSpec(every=4, first=5)
    assert [u for u in range(1, 21) if later.due(u)] == [5, 9, 13, 17]
    # the same rule on device arrays, as the learner asks inside its update
    due = jax.vmap(later.due)(jnp.arange(1, 21))
    assert [int(u) for u in jnp.arange(1, 21)[due]] == [5, 9, 13, 17]
    # BBF's resets fall at env steps 20002, 40003, 60004 (after 2,000 steps of warm-up, 2 updates
    # a step: updates 36004, 76006, 116008, approximately); the preset states them in updates


@pytest.mark.unit
def test_reset_parts_are_checked_where_they_can_be():
    with pytest.raises(zoo.spec.SpecError, match=r"resets\.keep: 'torso' overlaps the shrunk"):
        spec_with({"every": 5, "shrink": ["torso.mlp"], "keep": ["torso"]})
    with pytest.raises(zoo.spec.SpecError, match=r"list them under `resets\.keep` instead"):
        spec_with({"every": 5, "shrink": ["torso"], "shrink_factor": 1, "perturb_factor": 0})
    with pytest.raises(zoo.spec.SpecError, match=r"resets\.every: Input should be greater"):
        spec_with({"every": 0})
    spec = spec_with({"every": 5, "shrink": ["encoder"]})
    shapes = eqx.filter_eval_shape(network_fn(spec), jax.random.key(0))
    with pytest.raises(
        ValueError,
        match=r"resets\.shrink\[0\] 'encoder' names no parameter of the network; its parts with "
        r"parameters are: streams\.mlp\.layers\.0, streams\.mlp\.layers\.1, torso\.mlp\.layers\.0",
    ):
        check_parts(spec.resets, shapes)
    check_parts(spec_with({"every": 5, "shrink": ["torso"]}).resets, shapes)
    assert spec_with(None).resets is None


@pytest.mark.parametrize(
    ("resets", "shrink_keys", "keys_to_copy", "old", "new"),
    [
        # BBF: encoder shrunk and perturbed 0.5/0.5, everything else fresh
        ({"shrink": ["torso"]}, ["torso"], ["torso"], 0.5, 0.5),
        # SR-SPR's factors, on a part of the torso and the first hidden layer
        (
            {
                "shrink": ["torso", "streams.mlp.layers.0"],
                "shrink_factor": 0.8,
                "perturb_factor": 0.2,
            },
            ["torso", "streams.mlp.layers.0"],
            ["torso", "streams.mlp.layers.0"],
            0.8,
            0.2,
        ),
        # Nikishin et al.: keep the torso, re-initialise the rest (BBF with reset_encoder False
        # and no shrink-and-perturb)
        ({"keep": ["torso"]}, [], ["torso"], 0.5, 0.5),
    ],
)
@pytest.mark.compiled
def test_a_reset_equals_bbfs_jit_reset(resets, shrink_keys, keys_to_copy, old, new):
    spec = spec_with({"every": 10, **resets})
    make = network_fn(spec)
    learner = Learner(spec, network_fn=make)
    state = learner.init(make(jax.random.key(0)), jax.random.key(1))
    # a target apart from the online network, an optimizer that has stepped
    state = eqx.tree_at(lambda s: s.target, state, make(jax.random.key(2)))
    grads = jax.tree.map(jnp.ones_like, eqx.filter(state.online, eqx.is_inexact_array))
    _, stepped = learner.optimizer.update(grads, state.opt_state)
    state = eqx.tree_at(lambda s: s.opt_state, state, stepped)
    fresh, fresh_target = make(jax.random.key(3)), make(jax.random.key(4))

    after = learner.reset(state, fresh, fresh_target)
    want_online, want_target = bbf_jit_reset(
        leaves(state.online),
        leaves(state.target),
        leaves(fresh),
        leaves(fresh_target),
        shrink_keys,
        keys_to_copy,
        old,
        new,
    )
    for got, want in ((leaves(after.online), want_online), (leaves(after.target), want_target)):
        assert got.keys() == want.keys()
        for path in want:
            np.testing.assert_allclose(got[path], want[path], rtol=1e-6, atol=1e-7, err_msg=path)
    # the optimizer starts over, as BBF's (its copy of the Adam state keeps nothing)
    for x, y in zip(
        jax.tree.leaves(after.opt_state),
        jax.tree.leaves(learner.optimizer.init(eqx.filter(after.online, eqx.is_inexact_array))),
        strict=True,
    ):
        np.testing.assert_array_equal(x, y)
    assert int(after.updates) == int(state.updates)
    # target: keep and optimizer: keep leave them as they were
    keeping = Learner(spec_with({"every": 10, **resets, "target": "keep", "optimizer": "keep"}))
    kept = keeping.reset(state, fresh, fresh_target)
    assert kept.target is state.target and kept.opt_state is state.opt_state


@pytest.mark.compiled
def test_the_update_resets_when_due_toward_fresh_draws():
    """Inside the compiled update: resets after updates 3 and 6 only (``every`` 3, ``count``
    2); a reset update is the plain update followed by :meth:`Learner.reset` toward the draws of
    ``network_fn`` its docstring names; an update that is not due is the plain update."""
    spec = spec_with({"every": 3, "count": 2, "shrink": ["torso"]})
    plain = Learner(spec_with(None))
    make = network_fn(spec)
    learner = Learner(spec, network_fn=make)
    rng = np.random.default_rng(0)
    batch = zoo.Transition(
        observation=jnp.asarray(rng.normal(size=(4, 4)), jnp.float32),
        action=jnp.asarray(rng.integers(0, 2, 4), jnp.int32),
        reward=jnp.asarray(rng.normal(size=4), jnp.float32),
        discount=jnp.ones(4),
        next_observation=jnp.asarray(rng.normal(size=(4, 4)), jnp.float32),
        probability=jnp.ones(4),
    )
    state = learner.init(make(jax.random.key(0)), jax.random.key(1))
    update, plain_update = eqx.filter_jit(learner.update), eqx.filter_jit(plain.update)
    resets = []
    for u in range(1, 10):
        expected, _ = plain_update(state, batch)
        state, _ = update(state, batch)
        if u in (3, 6):
            key = jax.random.fold_in(jax.random.fold_in(expected.key, 0x5E5E7), expected.updates)
            online_key, target_key = jax.random.split(key)
            expected = learner.reset(expected, make(online_key), make(target_key))
        got, want = leaves(state.online), leaves(expected.online)
        for path in want:
            np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=1e-6, err_msg=path)
        if int(jax.tree.leaves(state.opt_state)[0]) == 0:
            resets.append(u)
    assert resets == [3, 6]
    with pytest.raises(ValueError, match=r"needs the learner to draw fresh networks"):
        eqx.filter_jit(Learner(spec).update)(state, batch)


@pytest.mark.run
def test_a_run_resets_and_anneals_on_its_cycle_and_resumes(tmp_path):
    """A real CartPole run (compiled driver) with resets every 100 updates and n, γ annealed
    over each cycle, acting with its target network: the metrics show the resets done and n, γ
    starting over after each; the run resumes from its checkpoint and goes on counting, and its
    policy loads."""
    from tiny import tiny_overrides

    from zoo.runs.metrics import read_jsonl

    overrides = {
        **tiny_overrides("dqn_cartpole"),
        "loss.n_step": 3,
        "loss.reward_clip": None,
        "resets": {"every": 100, "keep": ["streams.mlp.layers.0"]},
        "schedule.cycle": "resets",
        "schedule.act_with": "target",  # as BBF: evaluations and the saved policy too
        "schedule.n_step": {"kind": "geometric", "start": 3, "end": 1, "steps": 100},
        "schedule.discount": {
            "kind": "geometric",
            "start": 0.9,
            "end": 0.99,
            "steps": 100,
            "complement": True,
        },
    }
    run = tmp_path / "r"
    options = dict(progress=False, eval_every=800, checkpoint_every=400, log_every=100)
    zoo.train(
        "dqn_cartpole",
        total_env_steps=800,
        loop="compiled",
        overrides=overrides,
        run_dir=run,
        **options,
    )
    zoo.train(resume=run, total_env_steps=1200, progress=False)
    actions = zoo.load_policy(run)(np.zeros((3, 4), np.float32))
    assert np.asarray(actions).shape == (3,)
    logged = [m for m in read_jsonl(run / "metrics.jsonl") if m.get("updates")]
    # one update per 2 transitions from 200 on: 50 updates a log, a reset after every second
    assert [m["updates"] for m in logged] == list(range(50, 501, 50))
    # resets done, averaged over each log's 50 updates: 0 before the first, then one update in
    # fifty already counts the next
    assert [round(m["resets"], 2) for m in logged] == [
        0.0,
        0.02,
        1.0,
        1.02,
        2.0,
        2.02,
        3.0,
        3.02,
        4.0,
        4.02,
    ]
    # n and γ over each cycle's first and second halves, the same in every cycle
    preset = zoo.spec.algorithm_for(zoo.load_preset("dqn_cartpole"))
    horizon = Horizon(zoo.load_algorithm(preset, overrides=overrides))
    halves = [
        (
            np.mean([int(horizon.n_step(u)) for u in range(a, a + 50)]),
            np.mean([float(horizon.discount(u)) for u in range(a, a + 50)]),
        )
        for a in (0, 50)
    ]
    for i, m in enumerate(logged):
        n, gamma = halves[i % 2]
        assert m["n_step"] == pytest.approx(n) and m["discount"] == pytest.approx(gamma, rel=1e-5)
