"""Several seeds of one algorithm trained in one compiled program (``vmap`` over seeds).

For benchmarking and seed sweeps on one machine: ``S`` learners, replays and actors are stacked
along a leading seed axis and one envpool of ``S × N`` environments feeds them (envpool's XLA step
cannot be vmapped, so the actions of every seed are flattened into one step and its outputs split
back per seed). Each seed runs exactly the single-seed loop body, built from its public pieces
(:meth:`zoo.loop.Loop.insert`, :meth:`~zoo.loop.Loop.learn`, :meth:`~zoo.loop.Loop.act` and the
update-credit rule :class:`zoo.learn.UpdateCredit`), vmapped; all seeds step in lockstep, so their
update schedule is the same and the "is an update due" test stays a scalar ``cond`` outside the
``vmap`` (a batched predicate would turn it into a ``select`` that runs every update every step).

    vs = VmappedSeeds("dqn", "CartPole-v1", seeds=8, num_envs=8)
    carry = vs.init()
    carry = vs.run(carry, vector_steps=1000)

On a GPU the seeds fill the device; on a CPU the updates' FLOPs grow with the seeds, so the gain
comes from amortised dispatch and env steps and from the second core (see docs/performance.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from zoo import spec as spec_lib
from zoo.data import build_data
from zoo.envs import make
from zoo.jit import async_jit
from zoo.learner import Learner
from zoo.loop import EnvShape, Loop, LoopCarry

__all__ = ["VmappedSeeds", "time_vmapped_seeds"]


class VmappedSeeds:
    """``seeds`` runs of one algorithm on ``num_envs`` environments each, in one program.

    Args:
      algorithm: catalogue name, preset name or spec.
      env_id: an environment with envpool's XLA interface (vector observations).
      seeds: how many seeds ``S``.
      num_envs: environments per seed ``N`` (one pool of ``S·N``).
      overrides: dotted overrides of the algorithm.
      seed: base seed; seed ``i`` initialises its networks and actors from ``fold_in(seed, i)``.
    """

    def __init__(
        self,
        algorithm: Any,
        env_id: str,
        *,
        seeds: int,
        num_envs: int,
        overrides: Mapping[str, Any] | None = None,
        seed: int = 0,
    ):
        if seeds < 1 or num_envs < 1:
            raise ValueError(f"seeds={seeds} and num_envs={num_envs} must be at least 1")
        self.spec = spec_lib.load_algorithm(algorithm, overrides=overrides)
        if self.spec.recurrent:
            raise ValueError("vmapped seeds support feed-forward algorithms only")
        self.seeds, self.num_envs, self.seed = seeds, num_envs, seed
        self.env = make(env_id, num_envs=seeds * num_envs, seed=seed)
        if self.env.is_image:
            raise ValueError(
                f"{env_id}: vmapped seeds run the compiled loop, which is for vector "
                "observations (XLA:CPU runs convolutions inside loops slowly)"
            )
        per_seed = EnvShape.of(self.env, num_envs=num_envs)
        self.replay = build_data(
            self.spec,
            num_envs=num_envs,
            observation_shape=self.env.observation_shape,
            observation_dtype=self.env.observation_dtype,
        )
        self.learner = Learner(self.spec, network_fn=self._network)
        self.loop = Loop(self.spec, per_seed, self.learner, self.replay)
        self._run = async_jit(self._chunk, donate_argnums=(1, 2))

    # -------------------------------------------------------------------------------- setup

    def _network(self, key: jax.Array) -> Any:
        """A fresh draw of one seed's network (its first, and each reset's)."""
        import zoo

        return zoo.build_network(
            self.spec,
            observation_shape=self.env.observation_shape,
            num_actions=self.env.num_actions,
            key=key,
        )

    def _init_one(self, key: jax.Array) -> LoopCarry:
        k_net, k_learner, k_loop = jax.random.split(key, 3)
        return self.loop.init(self.learner.init(self._network(k_net), k_learner), k_loop)

    def init(self) -> tuple[LoopCarry, Any, jax.Array]:
        """Reset the pool and act once: ``(carry [S, ...], handle, prev_done [S·N])``."""
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(self.seed), i))(
            jnp.arange(self.seeds)
        )
        carry = eqx.filter_vmap(self._init_one)(keys)
        ts = self._split(jax.tree.map(jnp.asarray, self.env.reset()))
        carry, _ = eqx.filter_vmap(self.loop.act)(carry, ts)
        handle = self.env.xla()[0]
        return carry, handle, jnp.zeros((self.seeds * self.num_envs,), bool)

    # ---------------------------------------------------------------------------- running

    def _split(self, tree: Any) -> Any:
        s, n = self.seeds, self.num_envs
        return jax.tree.map(lambda x: x.reshape(s, n, *x.shape[1:]), tree)

    def _chunk(self, length: int, carry: LoopCarry, handle: Any, prev_done: jax.Array):
        _, _, _, xla_step = self.env.xla()
        loop = self.loop

        def body(state, _):
            carry, handle, prev_done = state
            actions = carry.pending.action.reshape(-1)
            handle, output = xla_step(handle, actions)
            ts_flat = self.env.xla_timestep(output, prev_done)
            ts = self._split(ts_flat)
            replay, env_steps, credit = jax.vmap(loop.insert)(
                ts, carry.replay, carry.pending, carry.env_steps, carry.credit
            )
            carry = dataclasses.replace(carry, replay=replay, env_steps=env_steps, credit=credit)
            dynamic, static = eqx.partition(carry, eqx.is_array)

            def learn(dynamic):
                out = eqx.filter_vmap(loop.learn)(eqx.combine(dynamic, static))
                return eqx.partition(out, eqx.is_array)[0]

            for _ in range(loop.credit.max_updates):
                # every seed has the same credit (lockstep): one scalar predicate
                dynamic = jax.lax.cond(
                    loop.credit.due(dynamic.credit[0]), learn, lambda d: d, dynamic
                )
            carry = eqx.combine(dynamic, static)
            carry, _ = eqx.filter_vmap(loop.act)(carry, ts)
            done = jnp.logical_or(ts_flat.terminated, ts_flat.truncated)
            return (carry, handle, done), ts.raw_reward

        (carry, handle, prev_done), rewards = jax.lax.scan(
            body, (carry, handle, prev_done), None, length=length
        )
        return carry, handle, prev_done, rewards

    def run(self, carry: LoopCarry, handle: Any, prev_done: jax.Array, vector_steps: int):
        """``vector_steps`` steps of every seed (``carry`` and ``handle`` are donated).

        Returns ``(carry, handle, prev_done, raw rewards [T, S, N])``.
        """
        return self._run(vector_steps, carry, handle, prev_done)


def time_vmapped_seeds(
    algorithm: Any,
    env_id: str,
    overrides: Mapping[str, Any] | None,
    seeds: int,
    num_envs: int,
    warmup: int,
    window: int,
    chunk: int = 500,
) -> dict[str, float]:
    """Env steps/s (all seeds together) over ``window`` transitions per seed after ``warmup``."""
    vs = VmappedSeeds(algorithm, env_id, seeds=seeds, num_envs=num_envs, overrides=overrides)
    carry, handle, done = vs.init()
    steps_per_chunk = chunk * num_envs
    for _ in range(max(warmup // steps_per_chunk, 1)):
        carry, handle, done, _ = vs.run(carry, handle, done, chunk)
    jax.block_until_ready(carry.learner.updates)
    u0 = int(carry.learner.updates[0])
    t0 = time.perf_counter()
    chunks = max(window // steps_per_chunk, 1)
    for _ in range(chunks):
        carry, handle, done, _ = vs.run(carry, handle, done, chunk)
    jax.block_until_ready(carry.learner.updates)
    dt = time.perf_counter() - t0
    updates = (int(carry.learner.updates[0]) - u0) * seeds
    vs.env.close()
    return {
        "env_steps_per_s": chunks * steps_per_chunk * seeds / dt,
        "updates_per_s": updates / dt,
    }
