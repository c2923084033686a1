"""The loop's parts on their own: the update-credit rule, deferred priorities, the actor.

The loop tests (tests/test_loop.py) hold the composed drivers to each other; these hold each part
to its stated contract, with no environment and no learner.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.actor import Actor
from zoo.envs import TimeStep
from zoo.learn import UpdateCredit
from zoo.replay import StepBatch, build_replay
from zoo.runs.evaluate import make_policy_fn


@pytest.mark.parametrize(
    ("num_envs", "period", "min_size", "per_period"),
    [
        *itertools.product([1, 3, 8], [1, 2, 4, 5], [1, 7, 16], [1]),
        # a replay ratio above one: BBF's 2 and SR-SPR's 8 updates per transition, and 2 per 5
        *itertools.product([1, 3, 8], [1, 5], [7], [2, 8]),
    ],
)
@pytest.mark.compiled
def test_update_credit_is_one_rule_on_host_and_device(num_envs, period, min_size, per_period):
    """Python numbers (the host driver's mirror) and device arrays (the compiled driver) give the
    same updates; a vector step is never due more than ``max_updates``; every credited
    transition is spent, ``per_period`` updates per ``period``."""
    spec = zoo.load_algorithm(
        "dqn",
        overrides={
            "schedule.update_period": period,
            "schedule.updates_per_period": per_period,
            "replay.min_size": min_size,
            "replay.batch_size": 1,
        },
    )
    rule = UpdateCredit(spec, num_envs)
    host_steps, host_credit = 0, 0.0
    device_steps, device_credit = jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32)
    total = 0
    for _ in range(40):
        host_steps += num_envs
        device_steps = device_steps + num_envs
        host_credit = rule.earn(host_steps, host_credit)
        device_credit = rule.earn(device_steps, device_credit)
        due = 0
        while rule.due(host_credit):
            host_credit = rule.spend(host_credit)
            due += 1
        for _ in range(rule.max_updates):
            device_credit = jnp.where(
                rule.due(device_credit), rule.spend(device_credit), device_credit
            )
        assert due <= rule.max_updates
        assert float(device_credit) == host_credit < period
        total += due
    credited = sum(num_envs for k in range(1, 41) if k * num_envs >= min_size)
    assert total == credited * per_period // period
    assert host_credit == credited * per_period - total * period
    assert rule.transitions_per_update == period / per_period


@pytest.mark.compiled
def test_deferred_priorities_are_written_only_once_valid():
    spec = zoo.load_algorithm(
        "prioritized_ddqn",
        overrides={"replay.capacity": 64, "replay.batch_size": 4, "replay.min_size": 8},
    )
    replay = build_replay(spec, num_envs=1, observation_shape=(2,), observation_dtype=jnp.float32)
    state = replay.init()
    for t in range(20):
        step = StepBatch(
            observation=jnp.full((1, 2), t, jnp.float32),
            action=jnp.zeros((1,), jnp.int32),
            reward=jnp.ones((1,)),
            terminated=jnp.zeros((1,), bool),
            truncated=jnp.zeros((1,), bool),
            first=jnp.asarray([t == 0]),
            valid=jnp.ones((1,), bool),
        )
        state = replay.add(state, step)
    _, info = replay.sample(state, jax.random.PRNGKey(0), 4)
    assert int(info.sampled_at) == int(state.cursor)
    # before the first update there is nothing to write
    unchanged = replay.write_priorities(state, replay.no_pending_priorities(4))
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(unchanged), strict=True):
        np.testing.assert_array_equal(a, b)
    priorities = jnp.asarray([3.0, 0.5, 2.0, 7.0])
    pending = replay.defer_priorities(info, priorities)
    written = replay.write_priorities(state, pending)
    direct = replay.update_priorities(state, info.indices, priorities, info.sampled_at)
    np.testing.assert_array_equal(written.weight, direct.weight)
    assert float(written.max_priority) == float(direct.max_priority) == 7.0
    # what a learn step may change is the priority state, and only that
    part = replay.priority_state(written)
    restored = replay.with_priority_state(state, part)
    np.testing.assert_array_equal(restored.weight, written.weight)
    np.testing.assert_array_equal(restored.frames, state.frames)


@pytest.mark.unit
def test_uniform_replay_has_no_deferred_priorities():
    spec = zoo.load_algorithm("dqn", overrides={"replay.capacity": 64, "replay.min_size": 32})
    replay = build_replay(spec, num_envs=1, observation_shape=(2,), observation_dtype=jnp.float32)
    state = replay.init()
    assert replay.no_pending_priorities(4) is None
    assert replay.defer_priorities(None, jnp.ones(4)) is None
    assert replay.write_priorities(state, None) is state


@pytest.mark.unit
def test_actor_epsilon_is_the_schedule_over_transitions():
    spec = zoo.load_algorithm("dqn")  # linear 1.0 -> 0.01 over 250k transitions
    actor = Actor(spec, num_envs=4, num_actions=2)
    assert float(actor.epsilon(0)) == 1.0
    assert float(actor.epsilon(125_000)) == pytest.approx(0.505)
    assert float(actor.epsilon(10**7)) == pytest.approx(0.01)
    assert actor.initial_state is None


@pytest.mark.compiled
def test_actor_epsilon_is_zero_from_epsilon_off_after():
    """``schedule.epsilon_off_after``: the schedule's ε before it, 0 from it on (and the
    schedule alone where it is null)."""
    overrides = {"schedule.epsilon": {"kind": "linear", "start": 1.0, "end": 0.5, "steps": 100}}
    spec = zoo.load_algorithm("dqn", overrides={**overrides, "schedule.epsilon_off_after": 80})
    actor = Actor(spec, num_envs=4, num_actions=2)
    assert [float(actor.epsilon(t)) for t in (0, 50, 79)] == pytest.approx([1.0, 0.75, 0.605])
    assert [float(actor.epsilon(t)) for t in (80, 81, 10**6)] == [0.0, 0.0, 0.0]
    assert float(jax.jit(actor.epsilon)(jnp.int32(79))) == pytest.approx(0.605)
    assert float(jax.jit(actor.epsilon)(jnp.int32(80))) == 0.0
    plain = Actor(zoo.load_algorithm("dqn", overrides=overrides), num_envs=4, num_actions=2)
    assert float(plain.epsilon(80)) == pytest.approx(0.6)


@pytest.mark.compiled
def test_actor_resets_recurrent_state_at_a_game_start():
    spec = zoo.load_algorithm("r2d2", overrides={"network.core.size": 4})
    net = zoo.build_network(spec, observation_shape=(3,), num_actions=2, key=jax.random.PRNGKey(0))
    actor = Actor(spec, num_envs=2, num_actions=2, initial_core_state=net.initial_state())
    moved = jax.tree.map(lambda x: x + 1.0, actor.initial_state)
    ts = TimeStep(
        observation=jnp.ones((2, 3)),
        reward=jnp.zeros(2),
        raw_reward=jnp.zeros(2),
        terminated=jnp.zeros(2, bool),
        truncated=jnp.zeros(2, bool),
        first=jnp.asarray([True, False]),
        game_over=jnp.asarray([False, True]),
        valid=jnp.ones(2, bool),
    )
    _, after, pending, actions = actor.act(net, jax.random.PRNGKey(1), moved, 0, ts)
    assert actions.shape == (2,) and actions.dtype == jnp.int32
    for before, initial, carried in zip(
        jax.tree.leaves(pending.core_state),
        jax.tree.leaves(actor.initial_state),
        jax.tree.leaves(moved),
        strict=True,
    ):
        np.testing.assert_array_equal(before[0], initial[0])  # a game starts: reset
        np.testing.assert_array_equal(before[1], carried[1])  # the game goes on: kept
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(after), jax.tree.leaves(pending.core_state), strict=True)
    )
    # the replay's slot flag: a game's final observation starts no transition
    np.testing.assert_array_equal(pending.valid, [True, False])


@pytest.mark.parametrize("name", ["dqn", "r2d2"])
@pytest.mark.compiled
def test_evaluation_policy_asked_about_some_rows_acts_as_with_the_whole_batch(name):
    """``policy(obs[rows], first=first[rows], rows=rows)``, as the evaluator calls it once some
    environments have met their quotas, gives those rows' actions of whole-batch calls: a
    recurrent state is read and written at those rows, and the padding of a shrinking batch
    (5 rows, then 4, 3 padded to 4, 2, 1) changes nothing."""
    overrides = {"network.core.size": 32} if name == "r2d2" else {"network.hidden": [16]}
    spec = zoo.load_algorithm(name, overrides=overrides)
    num_actions, n = 6, 5
    net = zoo.build_network(
        spec, observation_shape=(3,), num_actions=num_actions, key=jax.random.PRNGKey(0)
    )
    make = make_policy_fn(spec, num_actions)
    whole, some, fresh = (make(net, jax.random.PRNGKey(3)) for _ in range(3))
    rng = np.random.default_rng(0)
    schedule = [range(5), range(5), [0, 1, 3, 4], [0, 3, 4], [3, 4], [3, 4], [3], [3]]
    seen, state_mattered = set(), False
    for t, rows in enumerate(schedule):
        obs = rng.normal(scale=3.0, size=(n, 3)).astype(np.float32)
        first = np.full(n, t == 0) | (rng.random(n) < 0.1)
        expected = whole(obs, first=first)
        rows = np.asarray(rows)
        got = some(obs[rows], first=first[rows], rows=rows)
        np.testing.assert_array_equal(got, expected[rows], err_msg=f"step {t}, rows {rows}")
        seen.update(expected.tolist())
        restarted = fresh(obs, first=np.ones(n, bool))
        state_mattered |= not np.array_equal(restarted, expected)
    assert len(seen) >= 3  # the actions vary, so a wrong row would show
    assert state_mattered == spec.recurrent  # so a state read at the wrong row would show
