"""The loop: the host path and the compiled path produce the same transitions and parameters.

Both run the same body (insert → learn → act) from the same seed on real envpool CartPole; the
host path steps the environments through envpool's Python API between jitted calls, the compiled
path inside ``lax.scan`` with envpool's XLA step.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.envs import EpisodeTracker, make
from zoo.learner import Learner
from zoo.loop import Loop
from zoo.replay import build_replay
from zoo.runs.rundir import RunSettings
from zoo.runs.trainer import Trainer

pytestmark = pytest.mark.compiled

STEPS = 300


#: n and γ annealed over the run's updates (BBF's axis, zoo.horizon): windows cut at sample time
ANNEALED = {
    "loss.n_step": 3,
    "loss.reward_clip": None,
    "schedule.n_step": {"kind": "geometric", "start": 3, "end": 1, "steps": 300},
    "schedule.discount": {
        "kind": "geometric",
        "start": 0.9,
        "end": 0.99,
        "steps": 300,
        "complement": True,
    },
}


def small(name: str, updates_per_period: int = 1, extra: dict | None = None) -> zoo.AlgorithmSpec:
    base = zoo.spec.algorithm_for(zoo.load_preset(f"{name}_cartpole"))
    overrides = {
        "replay.capacity": 2000,
        "replay.min_size": 100,
        "network.hidden": [32],
        "schedule.update_period": 2,
        "schedule.updates_per_period": updates_per_period,
        "schedule.target_update_period": 20,
    }
    if base.recurrent:
        # priority exponent 0: the two programs' priorities differ by float rounding (~1e-5),
        # and proportional sampling of sequences turns such a difference into a different draw
        # within ~150 updates, after which the runs part (measured: parameters 1e-6 apart at
        # 100 updates, 1e-2 at 200); prioritised write-back is compared by prioritized_c51
        overrides.update(
            {"replay.batch_size": 8, "network.core.size": 16, "replay.priority_exponent": 0.0}
        )
    else:
        overrides["replay.batch_size"] = 16
    return zoo.load_algorithm(base, overrides={**overrides, **(extra or {})})


def build(spec, num_envs: int, backend: str = "auto"):
    env = make("CartPole-v1", num_envs=num_envs, seed=3, backend=backend)
    net = zoo.build_network(
        spec,
        observation_shape=env.observation_shape,
        num_actions=env.num_actions,
        key=jax.random.PRNGKey(0),
    )
    replay = build_replay(
        spec,
        num_envs=num_envs,
        observation_shape=env.observation_shape,
        observation_dtype=env.observation_dtype,
        core_state=net.initial_state() if spec.recurrent else None,
    )
    learner = Learner(spec)
    loop = Loop(spec, env, learner, replay, net.initial_state() if spec.recurrent else None)
    carry = loop.init(learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
    return env, loop, carry


def run_host(spec, num_envs):
    env, loop, carry = build(spec, num_envs)
    tracker = EpisodeTracker(num_envs)
    carry, actions = loop.first_act(carry, env.reset())
    returns = []
    for _ in range(STEPS):
        ts = env.step(np.asarray(actions))
        carry, actions, _ = loop.step(carry, ts)
        returns += [e.episode_return for e in tracker.update(ts)]
    env.close()
    return carry, returns


def run_compiled(spec, num_envs, chunks=(100, 150, 50)):
    env, loop, carry = build(spec, num_envs)
    tracker = EpisodeTracker(num_envs)
    carry, _ = loop.first_act(carry, env.reset())
    handle = env.xla()[0]
    done = jnp.zeros((num_envs,), bool)
    returns = []
    # one program of the longest chunk, run for each chunk's count of steps (traced), as the
    # compiled driver runs a whole run: one compilation, not one per chunk length
    for count in chunks:
        carry, handle, done, steps = loop.chunk(carry, handle, done, count, max(chunks))
        rows = jax.tree.map(np.asarray, steps)
        for t in range(count):
            returns += [
                e.episode_return for e in tracker.update(jax.tree.map(lambda x, t=t: x[t], rows))
            ]
    env.close()
    return carry, returns


@pytest.mark.parametrize(
    ("name", "num_envs", "per_period", "extra"),
    # 3 updates per 2 transitions (a replay ratio above one, BBF's axis): 3 per step, with the
    # n-step length and γ annealed over the updates
    [
        ("dqn", 1, 1, None),
        ("prioritized_c51", 2, 1, None),
        ("r2d2", 2, 1, None),
        ("dqn", 2, 3, ANNEALED),
    ],
)
def test_host_and_compiled_paths_agree(name, num_envs, per_period, extra):
    spec = small(name, per_period, extra)
    host, host_returns = run_host(spec, num_envs)
    compiled, compiled_returns = run_compiled(spec, num_envs)
    assert int(host.env_steps) == int(compiled.env_steps) == STEPS * num_envs
    assert int(host.learner.updates) == int(compiled.learner.updates) > 50
    # once replay.min_size (100) transitions are in, per_period updates per update_period (2)
    credited = sum(num_envs for k in range(1, STEPS + 1) if k * num_envs >= 100)
    assert int(host.learner.updates) == credited * per_period // 2
    assert float(host.credit) == float(compiled.credit) < spec.schedule.update_period
    assert host_returns == compiled_returns and len(host_returns) > 5

    # the replay's slot flag: an observation starts a transition unless the step that returned it
    # ended an episode (that final observation's action is ignored by the auto-reset); the
    # reset's observation and each new episode's first one do start one
    flags = jax.tree.map(np.asarray, host.replay)
    ended = (flags.terminated | flags.truncated)[:, : STEPS - 1]
    assert ended.sum() > 5
    np.testing.assert_array_equal(flags.valid[:, 1:STEPS], ~ended)
    assert flags.valid[:, 0].all()

    # identical transitions: every replay array, slot by slot. Stored recurrent states and
    # priorities are network outputs, which differ by float rounding where XLA fuses the two
    # programs apart (priorities are |TD errors|, differences of close values: looser)
    tolerance = {"core_state": 1e-5, "weight": 1e-3, "max_priority": 1e-3}
    for field, a, b in zip(host.replay._fields, host.replay, compiled.replay, strict=True):
        if a is None:
            continue
        tol = tolerance.get(field, 1e-6)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(
                np.asarray(x), np.asarray(y), rtol=tol, atol=tol, err_msg=field
            )
    # the same parameters (compiled inside a scan, XLA may fuse differently: float tolerance)
    params = lambda c: eqx.filter(c.learner.online, eqx.is_inexact_array)  # noqa: E731
    for x, y in zip(jax.tree.leaves(params(host)), jax.tree.leaves(params(compiled)), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)
    if extra is not None:
        # the options took effect: without them the same run learns other parameters
        plain, _ = run_host(
            small(name, per_period, {"loss.n_step": 3, "loss.reward_clip": None}), num_envs
        )
        leaves = zip(jax.tree.leaves(params(host)), jax.tree.leaves(params(plain)), strict=True)
        assert any(not np.allclose(np.asarray(x), np.asarray(y)) for x, y in leaves)


def test_actors_lag_the_learner_by_one_update():
    """Each update hands the actors the online network as it was before that update."""
    spec = small("dqn")
    env, loop, carry = build(spec, 1)
    carry, actions = loop.first_act(carry, env.reset())
    params = lambda m: [np.asarray(x) for x in jax.tree.leaves(eqx.filter(m, eqx.is_array))]  # noqa: E731
    seen = 0
    while int(carry.learner.updates) < 3:
        before = params(carry.learner.online)
        updates_before = int(carry.learner.updates)
        carry, actions, report = loop.step(carry, env.step(np.asarray(actions)))
        if int(carry.learner.updates) > updates_before:
            seen += 1
            for a, b in zip(params(carry.actor), before, strict=True):
                np.testing.assert_array_equal(a, b)
            assert int(report[0]) == updates_before  # the report is of the actors' state
            assert any(
                not np.array_equal(a, b)
                for a, b in zip(params(carry.actor), params(carry.learner.online), strict=True)
            )
    env.close()
    assert seen == 3


class _Events:
    """A trainer's logger, checkpointer and evaluator that record when each event ran."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def log(self, record: dict) -> None:
        keys = ("env_steps", "updates", "games", "return", "length")
        self.seen.append(("log", *(record.get(k) for k in keys)))

    def save(self, env_steps: int, state: dict, meta: dict) -> None:
        self.seen.append(("checkpoint", env_steps, meta["updates"], meta["games"]))

    def evaluate(self, online, env_steps: int) -> dict:
        self.seen.append(("eval", env_steps))
        return {"mean_return": 0.0}


@pytest.mark.parametrize("backend", ["envpool", "gymnax"])
def test_a_compiled_run_compiles_its_chunk_once_and_matches_the_host_run(backend):
    """Event periods with an awkward common divisor (5 transitions), a budget that no chunk
    divides (601 of 2 environments): the compiled driver cuts its chunks at the events and the
    budget's end, all with one program, and the run is the host driver's, event for event. On
    gymnax the environments themselves step inside that program (their pool is the handle)."""
    if backend == "gymnax":
        pytest.importorskip("gymnax")
    spec = small("dqn")
    settings = RunSettings(
        algorithm="dqn", env="CartPole-v1", protocol="none", num_envs=2, seed=0,
        total_env_steps=601, log_every=75, eval_every=160, checkpoint_every=250,
        eval_episodes=1, save_replay=False,
    )  # fmt: skip
    runs = {}
    for path in ("host", "compiled"):
        env, loop, carry = build(spec, 2, backend)
        events = _Events()
        trainer = Trainer(loop, settings, path, events, events, events.evaluate, progress=False)
        runs[path] = trainer.run(carry), trainer, events, loop.driver(path)
        env.close()
    (host, host_trainer, host_events, _), (compiled, trainer, events, driver) = runs.values()

    assert driver.traces == 1
    # the host driver's events at the same steps (the first step at or past each multiple)
    assert events.seen == host_events.seen
    logs = [e[1] for e in events.seen if e[0] == "log"]
    assert logs == [76, 150, 226, 300, 376, 450, 526, 600, 602]
    assert trainer.env_steps == host_trainer.env_steps == int(compiled.env_steps) == 602
    assert trainer.games == host_trainer.games > 5
    assert int(host.learner.updates) == int(compiled.learner.updates) > 200
    assert float(host.credit) == float(compiled.credit)
    for a, b in zip(jax.tree.leaves(host.replay), jax.tree.leaves(compiled.replay), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    params = lambda c: eqx.filter(c.learner.online, eqx.is_inexact_array)  # noqa: E731
    for x, y in zip(jax.tree.leaves(params(host)), jax.tree.leaves(params(compiled)), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)
