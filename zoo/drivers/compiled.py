"""The compiled driver: up to ``L`` vector steps of the loop body in one compiled program.

envpool's XLA interface steps the environments inside the program, so one dispatch covers a
whole chunk: insert, every due update (each under ``lax.cond``), act, for each vector step
(:meth:`zoo.loop.Loop.body`). The host accounts one chunk's episode statistics while the next
chunk runs.

One program per run: its length ``L`` (static: the rows of the chunk's output) is the longest
chunk the run can need (:func:`chunk_length`), and the number of vector steps to run is an
argument, a traced ``int32``. The steps run in a ``lax.while_loop`` of that trip count, which
writes each step's TimeStep into row ``t`` of the ``[L, N]`` output, as ``lax.scan`` would; the
rows past the count stay zero and the host reads only the first ``steps``. (A ``lax.scan`` of
``L`` with the body under ``lax.cond`` passes the replay through the ``cond`` and runs every
iteration: measured 5-10% slower on CartPole than the fixed-length scan, where this loop costs
the same; envpool's handle is stepped exactly ``steps`` times.)

Each chunk ends at the next log, evaluation or checkpoint (the trainer's ``next_event``,
:attr:`zoo.runs.trainer.Trainer.next_event`) or at the end of the budget, whichever comes first,
so events fall at the same vector steps as with the host driver, whatever their periods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from zoo.jit import async_jit
from zoo.learn import learner_report

if TYPE_CHECKING:  # pragma: no cover
    from zoo.drivers.protocol import CarryLike, LoopLike, TrainerLike
    from zoo.envs import TimeStep

__all__ = ["CompiledDriver", "account_chunk", "chunk_length"]


def chunk_length(periods: Sequence[int], num_envs: int, budget: int, longest: int = 1000) -> int:
    """Vector steps of a run's chunk program: the longest chunk the run can need.

    A chunk ends at the next event (at most the shortest of the event ``periods`` away, in
    transitions) or at the end of the ``budget`` (transitions left to run), and is at most
    ``longest`` vector steps of ``num_envs`` transitions. At least 1.
    """
    return max(1, min(longest, -(-min(periods) // num_envs), -(-budget // num_envs)))


class CompiledDriver:
    """Runs the loop body in compiled chunks with envpool's XLA step (see the module docstring).

    Attributes:
      traces: how many times the chunk program was traced, each time compiling it: once per
        distinct program length ``L`` (and argument structure), so once per :meth:`run`.
    """

    name = "compiled"

    def __init__(self, loop: LoopLike) -> None:
        if not loop.learner.traceable:
            raise ValueError(
                "the compiled driver runs the update inside a compiled loop, which a learner "
                "over several processes cannot (zoo.runs.distributed); use the host driver"
            )
        self.loop = loop
        self.traces = 0
        self._chunk = async_jit(
            lambda length, carry, handle, done, steps: self._loop(
                carry, handle, done, steps, length
            ),
            donate_argnums=(1, 2),
        )

    def chunk(
        self,
        carry: CarryLike,
        handle: Any,
        prev_done: jax.Array,
        steps: int,
        length: int | None = None,
    ) -> tuple[CarryLike, Any, jax.Array, TimeStep]:
        """``steps`` vector steps in a program of ``length`` (``carry`` and ``handle`` are
        donated).

        Args:
          carry: the loop carry, with the step acted on pending (after
            :meth:`zoo.drivers.host.HostDriver.first_act`).
          handle: envpool's XLA handle (after a host ``reset()``).
          prev_done: ``[N]`` terminated | truncated of the last step (False after a reset).
          steps: vector steps to run, ``0 <= steps <= length`` (passed traced: any count
            reuses the program).
          length: the program's length (static: one compilation per value); ``steps`` by
            default.

        Returns:
          ``(carry, handle, prev_done, rows)``: ``rows`` is the chunk's TimeSteps without
          observations, fields ``[length, N]``, for episode statistics on the host; rows from
          ``steps`` on are zeros.
        """
        length = steps if length is None else length
        if not 0 <= steps <= length:
            raise ValueError(f"a chunk of length {length} cannot run {steps} steps")
        return self._chunk(length, carry, handle, prev_done, np.asarray(steps, np.int32))

    def timestep(self, handle: Any, actions: jax.Array, prev_done: jax.Array) -> tuple[Any, Any]:
        """Step the environments inside the program: ``(handle, TimeStep)``."""
        env = self.loop.env
        handle, output = env.xla()[3](handle, actions)
        return handle, env.xla_timestep(output, prev_done)

    def body(self, carry: CarryLike, ts: TimeStep) -> tuple[CarryLike, Any, Any]:
        """The loop body of one vector step (:meth:`zoo.loop.Loop.body`)."""
        return self.loop.body(carry, ts)

    def _loop(self, carry: CarryLike, handle: Any, prev_done: jax.Array, steps, length: int):
        self.traces += 1
        shapes = jax.eval_shape(
            lambda *a: self.timestep(*a)[1]._replace(observation=None),
            handle,
            carry.pending.action,
            prev_done,
        )
        rows = jax.tree.map(lambda s: jnp.zeros((length, *s.shape), s.dtype), shapes)

        def body(state):
            t, carry, handle, prev_done, rows = state
            handle, ts = self.timestep(handle, carry.pending.action, prev_done)
            carry, _, _ = self.body(carry, ts)
            done = jnp.logical_or(ts.terminated, ts.truncated)
            rows = jax.tree.map(
                lambda r, x: jax.lax.dynamic_update_index_in_dim(r, x, t, 0),
                rows,
                ts._replace(observation=None),
            )
            return t + 1, carry, handle, done, rows

        count = jnp.minimum(steps, length)
        _, carry, handle, prev_done, rows = jax.lax.while_loop(
            lambda state: state[0] < count,
            body,
            (jnp.zeros((), jnp.int32), carry, handle, prev_done, rows),
        )
        return carry, handle, prev_done, rows

    def run(
        self, carry: CarryLike, actions: Any, trainer: TrainerLike, interrupted: list[bool]
    ) -> CarryLike:
        """Compiled chunks, the host's accounting of one chunk overlapping the next.

        Each chunk runs to the next event or the end of the budget (at most the program's
        length). A chunk is dispatched before the previous one's episode statistics are
        computed on the host, so that work runs on another core while the device computes.
        Where a log, evaluation or checkpoint is due at a chunk's end, the driver drains: it
        accounts every chunk, then runs the events on that carry.
        """
        env, cfg = self.loop.env, trainer.settings
        n = env.num_envs
        handle = env.xla()[0]
        prev_done = jnp.zeros((n,), bool)
        dispatched = trainer.env_steps
        length = chunk_length(
            (cfg.log_every, cfg.eval_every, cfg.checkpoint_every),
            n,
            cfg.total_env_steps - dispatched,
        )
        unaccounted: tuple[Any, Any, int] | None = None
        while dispatched < cfg.total_env_steps:
            # events run only after a drain, so next_event is past every dispatched step
            until = min(trainer.next_event, cfg.total_env_steps)
            steps = min(length, max(-(-(until - dispatched) // n), 1))
            carry, handle, prev_done, chunk = self.chunk(carry, handle, prev_done, steps, length)
            report = learner_report(carry.learner.updates, carry.last_loss)
            dispatched += steps * n
            if unaccounted is not None:
                account_chunk(trainer, *unaccounted)
            unaccounted = (chunk, report, steps)
            if dispatched >= trainer.next_event or dispatched >= cfg.total_env_steps or interrupted:
                account_chunk(trainer, *unaccounted)
                unaccounted = None
                carry, stop = trainer.events(carry, interrupted)
                if stop:
                    break
        return carry


def account_chunk(trainer: TrainerLike, chunk: Any, report: Any, steps: int) -> None:
    """Account a chunk's first ``steps`` vector steps, one TimeStep at a time (host arrays)."""
    rows = jax.tree.map(np.asarray, chunk)
    timesteps = [jax.tree.map(lambda x, t=t: x[t], rows) for t in range(steps)]
    trainer.account(timesteps, np.asarray(report))
