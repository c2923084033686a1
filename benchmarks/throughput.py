"""Throughput of the zoo's trainer: env steps/s while learning, and the isolated update rate.

    python benchmarks/throughput.py               # all workloads
    python benchmarks/throughput.py --quick       # shorter timings

Workloads (the settings of the performance issue's table):

- ``update``: one jitted DQN learner update alone (Nature CNN, batch 32, Adam) on a fixed batch.
- ``breakout``: DQN on Breakout-v5, Nature CNN, batch 32, one update per 4 transitions, 1 env.
- ``cartpole-1`` / ``cartpole-8``: DQN on CartPole-v1, MLP 120-84, batch 128, one update per 10
  transitions, ε = 0.05, with 1 and 8 envs.

Each loop workload is timed on both loop paths (host and compiled) after a warm-up that fills the
replay past ``min_size`` and compiles everything; figures are medians over repeats. This is a
benchmark, not a test: it prints figures and asserts nothing about time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import zoo
from zoo.envs import make
from zoo.learner import Learner
from zoo.loop import Loop
from zoo.replay import build_replay

CARTPOLE = {
    "network.torso": {"kind": "mlp", "sizes": []},
    "network.hidden": [120, 84],
    "replay.batch_size": 128,
    "replay.capacity": 10_000,
    "replay.min_size": 1_000,
    "schedule.update_period": 10,
    "schedule.epsilon": 0.05,
    "schedule.target_update_period": 50,
}
BREAKOUT = {"replay.capacity": 20_000, "replay.min_size": 1_000}


def build(spec: Any, env_id: str, num_envs: int):
    env = make(env_id, num_envs=num_envs, seed=0)
    net = zoo.build_network(
        spec,
        observation_shape=env.observation_shape,
        num_actions=env.num_actions,
        key=jax.random.PRNGKey(0),
    )
    stack = env.observation_shape[0] if env.is_image else 1
    replay = build_replay(
        spec,
        num_envs=num_envs,
        observation_shape=env.observation_shape,
        observation_dtype=env.observation_dtype,
        stack=stack,
    )
    learner = Learner(spec)
    loop = Loop(spec, env, learner, replay)
    carry = loop.init(learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
    return env, loop, carry


def time_host(loop: Loop, env: Any, carry: Any, warmup: int, steps: int, repeats: int):
    carry, actions = loop.first_act(carry, env.reset())
    for _ in range(warmup):
        carry, actions, _ = loop.step(carry, env.step(np.asarray(actions)))
    rates, update_rates = [], []
    for _ in range(repeats):
        u0 = int(carry.learner.updates)
        jax.block_until_ready(carry.learner.updates)
        t0 = time.perf_counter()
        for _ in range(steps):
            carry, actions, _ = loop.step(carry, env.step(np.asarray(actions)))
        jax.block_until_ready(carry.learner.updates)
        dt = time.perf_counter() - t0
        rates.append(steps * env.num_envs / dt)
        update_rates.append((int(carry.learner.updates) - u0) / dt)
    return statistics.median(rates), statistics.median(update_rates)


def time_compiled(loop: Loop, env: Any, carry: Any, warmup: int, steps: int, repeats: int):
    carry, _ = loop.first_act(carry, env.reset())
    handle = env.xla()[0]
    done = jnp.zeros((env.num_envs,), bool)
    carry, handle, done, _ = loop.chunk(carry, handle, done, warmup)
    carry, handle, done, _ = loop.chunk(carry, handle, done, steps)  # compile this length
    rates, update_rates = [], []
    for _ in range(repeats):
        u0 = int(carry.learner.updates)
        t0 = time.perf_counter()
        carry, handle, done, _ = loop.chunk(carry, handle, done, steps)
        jax.block_until_ready(carry.learner.updates)
        dt = time.perf_counter() - t0
        rates.append(steps * env.num_envs / dt)
        update_rates.append((int(carry.learner.updates) - u0) / dt)
    return statistics.median(rates), statistics.median(update_rates)


def isolated_update(repeats: int) -> float:
    spec = zoo.load_algorithm("dqn")
    net = zoo.build_network(
        spec, observation_shape=(4, 84, 84), num_actions=4, key=jax.random.PRNGKey(0)
    )
    learner = Learner(spec)
    state = learner.init(net, jax.random.PRNGKey(1))
    rng = np.random.default_rng(0)
    batch = zoo.Transition(
        observation=jnp.asarray(rng.integers(0, 255, (32, 4, 84, 84)), jnp.uint8),
        action=jnp.asarray(rng.integers(0, 4, 32), jnp.int32),
        reward=jnp.asarray(rng.normal(size=32), jnp.float32),
        discount=jnp.ones(32, jnp.float32),
        next_observation=jnp.asarray(rng.integers(0, 255, (32, 4, 84, 84)), jnp.uint8),
        probability=jnp.full((32,), 1e-3, jnp.float32),
    )
    update = eqx.filter_jit(learner.update)
    for _ in range(5):
        state, aux = update(state, batch)
    jax.block_until_ready(aux.metrics["loss"])
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(20):
            state, aux = update(state, batch)
        jax.block_until_ready(aux.metrics["loss"])
        rates.append(20 / (time.perf_counter() - t0))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    rows = []
    update_rate = isolated_update(repeats)
    rows.append(("isolated DQN update (Nature CNN, batch 32)", "-", f"{update_rate:.1f}", "-"))

    for label, env_id, num_envs, overrides, warmup, steps in (
        ("DQN Breakout-v5, 1 env", "Breakout-v5", 1, BREAKOUT, 1_100, 200 if args.quick else 400),
        ("DQN CartPole-v1, 1 env", "CartPole-v1", 1, CARTPOLE, 1_100, 2_000),
        ("DQN CartPole-v1, 8 envs", "CartPole-v1", 8, CARTPOLE, 200, 1_000),
    ):
        spec = zoo.load_algorithm("dqn", overrides=overrides)
        for path in ("host", "compiled"):
            env, loop, carry = build(spec, env_id, num_envs)
            timer = time_host if path == "host" else time_compiled
            rate, updates = timer(loop, env, carry, warmup, steps, repeats)
            env.close()
            ceiling = ""
            if env_id.startswith("Breakout"):
                ceiling = f"{rate / (4 * update_rate):.0%} of 4×isolated"
            rows.append((f"{label} [{path}]", f"{rate:,.0f}", f"{updates:,.1f}", ceiling))

    width = max(len(r[0]) for r in rows)
    print(f"{'workload':<{width}}  {'env steps/s':>12}  {'updates/s':>10}  note")
    for name, rate, updates, note in rows:
        print(f"{name:<{width}}  {rate:>12}  {updates:>10}  {note}")
    print(f"\njax {jax.__version__} on {jax.devices()[0].platform}; medians of {repeats} repeats")


if __name__ == "__main__":
    main()
