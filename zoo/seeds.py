"""Several seeds of one algorithm trained in one compiled program (``vmap`` over seeds), as a
library: the program of ``zoo train --seeds N`` (:mod:`zoo.runs.seeds`) without the run job.

For benchmarking and seed sweeps on one machine: seed ``i`` is the run of seed ``seed + i`` (its
environments, networks, replay and actors made and seeded as that single run's), and the seeds
step in lockstep in the program of :class:`zoo.drivers.seeds.SeedsDriver` (each seed's pool
stepped inside it, the single-seed loop body :meth:`zoo.loop.Loop.seeds_body` vmapped over the
seeds).

    vs = VmappedSeeds("dqn", "CartPole-v1", seeds=8, num_envs=8)
    carry, handle, done = vs.init()
    carry, handle, done, rows = vs.run(carry, handle, done, vector_steps=1000)

On a GPU the seeds fill the device; on a CPU the updates' FLOPs grow with the seeds, so the gain
comes from amortised dispatch and env steps and from the second core (see docs/performance.md).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from zoo import spec as spec_lib
from zoo.data import build_data
from zoo.drivers.seeds import SeedsDriver, stack
from zoo.envs import TimeStep, make
from zoo.learner import Learner
from zoo.loop import Loop, LoopCarry

__all__ = ["VmappedSeeds", "time_vmapped_seeds"]


class VmappedSeeds:
    """``seeds`` runs of one algorithm on ``num_envs`` environments each, in one program.

    Args:
      algorithm: catalogue name, preset name or spec.
      env_id: an environment with an XLA interface and vector observations.
      seeds: how many seeds ``S``.
      num_envs: environments per seed ``N`` (one pool per seed).
      overrides: dotted overrides of the algorithm.
      seed: the first seed; seed ``i`` is the run of seed ``seed + i``.
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
        self.seeds, self.num_envs, self.seed = seeds, num_envs, seed
        self.envs = [make(env_id, num_envs=num_envs, seed=seed + i) for i in range(seeds)]
        env = self.envs[0]
        if env.is_image:
            self.close()
            raise ValueError(
                f"{env_id}: vmapped seeds run the compiled loop, which is for vector "
                "observations here (XLA:CPU runs convolutions inside loops slowly)"
            )
        self.replay = build_data(
            self.spec,
            num_envs=num_envs,
            observation_shape=env.observation_shape,
            observation_dtype=env.observation_dtype,
        )
        self.learner = Learner(self.spec, network_fn=self._network)
        self.loops = [Loop(self.spec, e, self.learner, self.replay) for e in self.envs]
        self.driver = SeedsDriver(self.loops)

    def _network(self, key: jax.Array) -> Any:
        """A fresh draw of one seed's network (its first, and each reset's)."""
        import zoo

        env = self.envs[0]
        return zoo.build_network(
            self.spec,
            observation_shape=env.observation_shape,
            num_actions=env.num_actions,
            key=key,
        )

    def init_seed(self, i: int) -> LoopCarry:
        """Seed ``i``'s carry at step 0, as a single run of seed ``seed + i`` builds it
        (:func:`zoo.runs.assemble.build`'s keys)."""
        k_net, k_learner, k_run = jax.random.split(jax.random.PRNGKey(self.seed + i), 3)
        return self.loops[i].init(self.learner.init(self._network(k_net), k_learner), k_run)

    def init(self) -> tuple[LoopCarry, Any, jax.Array]:
        """Reset every pool and act once: ``(carry [S, ...], handles, prev_done [S, N])``."""
        carries = []
        for i, (loop, env) in enumerate(zip(self.loops, self.envs, strict=True)):
            carry, _ = loop.first_act(self.init_seed(i), env.reset())
            carries.append(carry)
        handles = tuple(env.xla()[0] for env in self.envs)
        return stack(carries), handles, jnp.zeros((self.seeds, self.num_envs), bool)

    def run(
        self, carry: LoopCarry, handle: Any, prev_done: jax.Array, vector_steps: int
    ) -> tuple[LoopCarry, Any, jax.Array, TimeStep]:
        """``vector_steps`` steps of every seed (``carry`` and ``handle`` are donated).

        Returns ``(carry, handle, prev_done, rows)``: ``rows`` the TimeSteps without
        observations, fields ``[T, S, N]``.
        """
        return self.driver.chunk(carry, handle, prev_done, vector_steps)

    def close(self) -> None:
        """Close every seed's environments."""
        for env in self.envs:
            env.close()


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
    vs.close()
    return {
        "env_steps_per_s": chunks * steps_per_chunk * seeds / dt,
        "updates_per_s": updates / dt,
    }
