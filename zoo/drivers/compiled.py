"""The compiled driver: ``T`` vector steps of the loop body in one ``lax.scan``.

envpool's XLA interface steps the environments inside the program, so one dispatch covers a
whole chunk: insert, every due update (each under ``lax.cond``), act, for each vector step
(:meth:`zoo.loop.Loop.body`). The host accounts one chunk's episode statistics while the next
chunk runs. Chunks are cut so that logs, evaluations and checkpoints fall exactly on their
multiples, as with the host driver.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from zoo.jit import async_jit
from zoo.learn import learner_report

if TYPE_CHECKING:  # pragma: no cover
    from zoo.loop import Loop, LoopCarry, Trainer

__all__ = ["CompiledDriver", "chunk_length"]


def chunk_length(every: int, num_envs: int, longest: int = 1000) -> int:
    """Vector steps per compiled chunk: the longest (up to ``longest``) that divides the
    events' common period, so that logs, evaluations and checkpoints fall exactly on their
    multiples, as on the host path."""
    period = max(every // num_envs, 1)
    return max(d for d in range(1, min(period, longest) + 1) if period % d == 0)


class CompiledDriver:
    """Runs the loop body in ``lax.scan`` chunks with envpool's XLA step."""

    name = "compiled"

    def __init__(self, loop: Loop):
        if not loop.learner.traceable:
            raise ValueError(
                "the compiled driver runs the update inside lax.scan, which a learner over "
                "several processes cannot (zoo.distributed); use the host driver"
            )
        self.loop = loop
        self._chunk = async_jit(
            lambda length, carry, handle, done: self._scan(carry, handle, done, length),
            donate_argnums=(1, 2),
        )

    def chunk(self, carry: LoopCarry, handle: jax.Array, prev_done: jax.Array, length: int):
        """``length`` vector steps in one ``lax.scan`` (``carry`` and ``handle`` are donated).

        Args:
          carry: the loop carry, with the step acted on pending (after ``Loop.first_act``).
          handle: envpool's XLA handle (after a host ``reset()``).
          prev_done: ``[N]`` terminated | truncated of the last step (False after a reset).
          length: vector steps (static).

        Returns:
          ``(carry, handle, prev_done, steps)``: ``steps`` is the chunk's TimeSteps without
          observations, fields ``[T, N]``, for episode statistics on the host.
        """
        return self._chunk(length, carry, handle, prev_done)

    def _scan(self, carry: LoopCarry, handle: jax.Array, prev_done: jax.Array, length: int):
        env = self.loop.env
        _, _, _, xla_step = env.xla()

        def body(state, _):
            carry, handle, prev_done = state
            handle, output = xla_step(handle, carry.pending.action)
            ts = env.xla_timestep(output, prev_done)
            carry, _, _ = self.loop.body(carry, ts)
            done = jnp.logical_or(ts.terminated, ts.truncated)
            return (carry, handle, done), ts._replace(observation=None)

        (carry, handle, prev_done), outputs = jax.lax.scan(
            body, (carry, handle, prev_done), None, length=length
        )
        return carry, handle, prev_done, outputs

    def run(
        self, carry: LoopCarry, actions: Any, trainer: Trainer, interrupted: list[bool]
    ) -> LoopCarry:
        """Compiled chunks, the host's accounting of one chunk overlapping the next.

        A chunk is dispatched before the previous one's episode statistics are computed on the
        host, so that work runs on another core while the device computes. Where a log,
        evaluation or checkpoint is due at a chunk's end (chunks divide their periods), the
        driver drains: it accounts every chunk, then runs the events on that carry.
        """
        env, cfg = self.loop.env, trainer.settings
        n = env.num_envs
        handle = env.xla()[0]
        prev_done = jnp.zeros((n,), bool)
        length = chunk_length(math.gcd(cfg.log_every, cfg.eval_every, cfg.checkpoint_every), n)
        dispatched = trainer.env_steps
        unaccounted: tuple[Any, Any, int] | None = None
        while dispatched < cfg.total_env_steps:
            remaining = (cfg.total_env_steps - dispatched + n - 1) // n
            steps = min(length, remaining)
            carry, handle, prev_done, chunk = self.chunk(carry, handle, prev_done, steps)
            report = learner_report(carry.learner.updates, carry.last_loss)
            dispatched += steps * n
            if unaccounted is not None:
                _account_chunk(trainer, *unaccounted)
            unaccounted = (chunk, report, steps)
            if dispatched >= trainer.next_event or dispatched >= cfg.total_env_steps or interrupted:
                _account_chunk(trainer, *unaccounted)
                unaccounted = None
                carry, stop = trainer.events(carry, interrupted)
                if stop:
                    break
        return carry


def _account_chunk(trainer: Trainer, chunk: Any, report: Any, steps: int) -> None:
    """Account a chunk's vector steps, one TimeStep at a time (host arrays)."""
    rows = jax.tree.map(np.asarray, chunk)
    timesteps = [jax.tree.map(lambda x, t=t: x[t], rows) for t in range(steps)]
    trainer.account(timesteps, np.asarray(report))
