"""Scheduled n-step length and γ (issue 38): BBF's annealing, exact against a float64
transcription of its ``exponential_decay_scheduler``; the count since the last reset; windows
cut to the scheduled n; the loss bootstrapping with the scheduled γ."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.horizon import Horizon
from zoo.replay.transitions import n_step_window
from zoo.resets import updates_since_reset

BBF_SCHEDULES = {
    "schedule.n_step": {"kind": "geometric", "start": 10, "end": 3, "steps": 10000},
    "schedule.discount": {
        "kind": "geometric",
        "start": 0.97,
        "end": 0.997,
        "steps": 10000,
        "complement": True,
    },
}


def bbf_exponential_decay_scheduler(
    decay_period, warmup_steps, initial_value, final_value, reverse=False
):
    """BBF's ``spr_agent.py`` ``exponential_decay_scheduler``, transcribed (float64 numpy)."""
    if reverse:
        initial_value, final_value = 1 - initial_value, 1 - final_value
    start, end = np.log(initial_value), np.log(final_value)

    def scheduler(step):
        steps_left = decay_period + warmup_steps - step
        bonus = np.clip(steps_left / decay_period, 0.0, 1.0)
        value = np.exp(bonus * (start - end) + end)
        return 1 - value if reverse else value

    return scheduler


@pytest.mark.compiled
def test_bbf_n_and_gamma_at_every_update_of_a_cycle():
    """BBF: n = round(10·n_schedule(t)) with n_schedule from 1 to 3/10, γ from 0.97 to 0.997
    (reverse), over cycle_steps 10,000 — at every t from 0 to 12,000."""
    spec = zoo.load_algorithm(
        "dqn", overrides={"loss.n_step": 10, "loss.reward_clip": None, **BBF_SCHEDULES}
    )
    horizon = Horizon(spec)
    t = np.arange(12001)
    n_schedule = bbf_exponential_decay_scheduler(10000, 0, 1, 3 / 10)
    want_n = np.round(n_schedule(t) * 10).astype(int)
    want_gamma = bbf_exponential_decay_scheduler(10000, 0, 0.97, 0.997, reverse=True)(t)
    got_n = np.asarray(jax.jit(jax.vmap(horizon.n_step))(jnp.asarray(t)))
    got_gamma = np.asarray(jax.jit(jax.vmap(horizon.discount))(jnp.asarray(t)))
    np.testing.assert_array_equal(got_n, want_n)
    np.testing.assert_allclose(got_gamma, want_gamma, rtol=0, atol=1e-7)
    # where n steps down: 9 from t = 427 (10·0.3^(t/10⁴) < 9.5 once t > 426.03), ..., 3 from 8720
    firsts = {int(n): int(t[np.argmax(got_n == n)]) for n in range(3, 11)}
    assert firsts == {10: 0, 9: 427, 8: 1350, 7: 2390, 6: 3579, 5: 4966, 4: 6633, 3: 8720}
    assert got_gamma[0] == pytest.approx(0.97) and got_gamma[-1] == pytest.approx(0.997)
    # nothing scheduled: the constants, and no horizon handed to the replay
    plain = Horizon(
        zoo.load_algorithm("dqn", overrides={"loss.n_step": 3, "loss.reward_clip": None})
    )
    assert plain.at(123) is None and plain.n_step(5) == 3 and plain.discount(5) == 0.99


@pytest.mark.unit
def test_updates_since_the_last_reset():
    for resets in (
        zoo.spec.ResetSpec(every=5),
        zoo.spec.ResetSpec(every=4, first=7, count=2),
    ):
        since, last = [], 0
        for u in range(0, 30):
            since.append(u - last)
            if u >= 1 and resets.due(u):
                last = u
        got = [int(updates_since_reset(resets, u)) for u in range(30)]
        # at u done, a reset that followed update u has happened: the count starts over
        want = [u - max([0] + [r for r in range(1, u + 1) if resets.due(r)]) for u in range(30)]
        assert got == want
    spec = zoo.load_algorithm(
        "dqn",
        overrides={
            "loss.n_step": 10,
            "loss.reward_clip": None,
            **BBF_SCHEDULES,
            "schedule.cycle": "resets",
            "resets": {"every": 100, "shrink": ["streams"]},
        },
    )
    horizon = Horizon(spec)
    assert int(horizon.n_step(99)) == int(horizon.n_step(199)) == 10  # 99 since the reset at 100
    assert int(horizon.n_step(150)) == int(
        Horizon(
            zoo.load_algorithm(
                "dqn", overrides={"loss.n_step": 10, "loss.reward_clip": None, **BBF_SCHEDULES}
            )
        ).n_step(50)
    )


@pytest.mark.unit
def test_schedules_are_checked_against_what_they_schedule():
    with pytest.raises(
        zoo.spec.SpecError,
        match=r"schedule\.n_step\.start: the n-step length "
        r"must be from 1 to loss\.n_step = 3",
    ):
        zoo.load_algorithm("dqn", overrides={"loss.n_step": 3, **BBF_SCHEDULES})
    with pytest.raises(zoo.spec.SpecError, match=r"schedule\.discount\.end: γ must be in"):
        zoo.load_algorithm(
            "dqn",
            overrides={
                "schedule.discount": {"kind": "linear", "start": 0.9, "end": 1.5, "steps": 10}
            },
        )
    with pytest.raises(zoo.spec.SpecError, match=r"geometric schedule interpolates logarithms"):
        zoo.load_algorithm(
            "dqn",
            overrides={
                "schedule.discount": {
                    "kind": "geometric",
                    "start": 0.9,
                    "end": 1.0,
                    "steps": 10,
                    "complement": True,
                }
            },
        )
    with pytest.raises(zoo.spec.SpecError, match=r"schedule\.cycle: cycle: resets counts"):
        zoo.load_algorithm(
            "dqn", overrides={"loss.n_step": 10, **BBF_SCHEDULES, "schedule.cycle": "resets"}
        )
    with pytest.raises(
        zoo.spec.SpecError,
        match=r"schedule\.n_step: n-step length and γ "
        r"schedules apply to sampled transitions",
    ):
        zoo.load_algorithm("r2d2", overrides={"schedule.n_step": 3})


@pytest.mark.compiled
def test_a_window_cut_to_the_scheduled_n_is_the_window_of_that_n():
    """A window kept for n_max = 10 and cut to n = 3 with γ = 0.9 equals the window of 3 steps
    (a termination inside it, after it, and none), and by hand for one."""
    rng = np.random.default_rng(0)
    reward = jnp.asarray(rng.normal(size=(3, 10)), jnp.float32)
    terminated = jnp.zeros((3, 10), bool).at[1, 1].set(True).at[2, 5].set(True)
    truncated = jnp.zeros((3, 10), bool)
    cut = n_step_window(reward, terminated, truncated, 10, jnp.float32(0.9), jnp.int32(3))
    short = n_step_window(reward[:, :3], terminated[:, :3], truncated[:, :3], 3, 0.9)
    for a, b in zip(cut, short, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    r = np.asarray(reward, np.float64)
    np.testing.assert_allclose(cut[0][0], r[0, 0] + 0.9 * r[0, 1] + 0.81 * r[0, 2], rtol=1e-6)
    assert [int(k) for k in cut[2]] == [3, 2, 3]
    np.testing.assert_allclose(np.asarray(cut[1]), [0.81, 0.0, 0.81], rtol=1e-6)


@pytest.mark.compiled
def test_the_loss_bootstraps_with_the_gamma_of_its_update():
    """With γ scheduled, the loss at update t equals the loss of a spec whose constant γ is the
    schedule's value at t."""
    small = {
        "network.hidden": [8],
        "replay.batch_size": 4,
        "loss.n_step": 10,
        "loss.reward_clip": None,
    }
    scheduled = zoo.load_algorithm("dqn", overrides={**small, **BBF_SCHEDULES})
    net = zoo.build_network(scheduled, observation_shape=(4,), num_actions=2, key=jax.random.key(0))
    rng = np.random.default_rng(1)
    batch = zoo.Transition(
        observation=jnp.asarray(rng.normal(size=(4, 4)), jnp.float32),
        action=jnp.asarray(rng.integers(0, 2, 4), jnp.int32),
        reward=jnp.asarray(rng.normal(size=4), jnp.float32),
        discount=jnp.asarray([1.0, 0.0, 0.9, 1.0], jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(4, 4)), jnp.float32),
        probability=jnp.ones(4),
    )
    loss = zoo.build_loss(scheduled)
    for t in (0, 2500, 20000):
        gamma = float(Horizon(scheduled).discount(t))
        constant = zoo.build_loss(
            zoo.load_algorithm("dqn", overrides={**small, "loss.discount": gamma})
        )
        got, _ = loss(online=net, target=net, batch=batch, key=jax.random.key(2), step=t)
        want, _ = constant(online=net, target=net, batch=batch, key=jax.random.key(2), step=t)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert float(Horizon(scheduled).discount(0)) != float(Horizon(scheduled).discount(20000))
