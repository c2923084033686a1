"""The seeds driver: ``S`` runs of one algorithm in one compiled program, in lockstep.

Each seed is a whole run (:mod:`zoo.runs.seeds`): its own environments, made and seeded as a
single run's; its own network, learner state, replay and key; its own trainer, records,
evaluations and checkpoints. The driver stacks the seeds' carries on a leading axis and runs the
compiled driver's chunks (:class:`~zoo.drivers.compiled.CompiledDriver`) over them: each vector
step steps every seed's environments inside the program (one XLA step per seed's pool: envpool's
XLA step cannot be vmapped), then runs the single-seed loop body vmapped over the seeds
(:meth:`zoo.loop.Loop.seeds_body`: one scalar "is an update due", since every seed's credit is
the same). The host accounts each seed's chunk to its own trainer and hands each trainer its
seed's carry at events; a seed whose trainer stops (its ``stop_at_return`` reached) leaves the
program, which the rest go on in (compiled again for the fewer seeds).

What a seed computes is its single run's, step for step; only the order of floating-point sums in
a batched update may differ from the unbatched one (see ``tests/test_seeds.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo.drivers.compiled import CompiledDriver, account_chunk, chunk_length
from zoo.learn import learner_report

if TYPE_CHECKING:  # pragma: no cover
    from zoo.drivers.protocol import CarryLike, LoopLike, TrainerLike
    from zoo.envs import TimeStep

__all__ = ["SeedsDriver", "restack", "stack", "unstack"]


def stack(carries: Sequence[Any]) -> Any:
    """Carries of the same structure as one, each array leaf stacked on a new leading axis (one
    compiled call)."""
    parts = [eqx.partition(c, eqx.is_array) for c in carries]
    return eqx.combine(_stack(tuple(d for d, _ in parts)), parts[0][1])


def unstack(carry: Any, count: int) -> list[Any]:
    """:func:`stack`'s inverse: the ``count`` carries along the leading axis (one compiled
    call)."""
    dynamic, static = eqx.partition(carry, eqx.is_array)
    return [eqx.combine(d, static) for d in _unstack(dynamic, count)]


def restack(carry: Any, given: Sequence[Any], returned: Sequence[Any]) -> Any:
    """``carry`` (stacked) after each seed's part ``given[i]`` came back as ``returned[i]``:
    only the leaves some seed replaced are stacked again (the trainers' events reset the
    metric sums and read the rest, so the replay is not copied back)."""
    leaves, tree = jax.tree.flatten(carry)
    before = [jax.tree.leaves(g) for g in given]
    after = [jax.tree.leaves(r) for r in returned]
    out = [
        leaf
        if all(a[j] is b[j] for a, b in zip(after, before, strict=True))
        else jnp.stack([a[j] for a in after])
        for j, leaf in enumerate(leaves)
    ]
    return jax.tree.unflatten(tree, out)


@jax.jit
def _stack(trees: tuple[Any, ...]) -> Any:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


@functools.partial(jax.jit, static_argnums=1)
def _unstack(tree: Any, count: int) -> tuple[Any, ...]:
    return tuple(jax.tree.map(lambda x, i=i: x[i], tree) for i in range(count))


class SeedsDriver(CompiledDriver):
    """The loops of ``S`` seeds' runs in one compiled program (see the module docstring).

    Args:
      loops: each seed's loop (the same spec and settings; each has its own environments,
        stepped through their XLA interface).
    """

    name = "seeds"

    def __init__(self, loops: Sequence[LoopLike]) -> None:
        if not loops:
            raise ValueError("the seeds driver needs at least one seed's loop")
        super().__init__(loops[0])
        self.loops = list(loops)

    def timestep(self, handle: Any, actions: jax.Array, prev_done: jax.Array) -> tuple[Any, Any]:
        """Every seed's environments stepped (one XLA step per seed): handles and the TimeSteps
        stacked ``[S, N, ...]``."""
        handles, steps = [], []
        for i, loop in enumerate(self.loops):
            env = loop.env
            h, output = env.xla()[3](handle[i], actions[i])
            handles.append(h)
            steps.append(env.xla_timestep(output, prev_done[i]))
        return tuple(handles), jax.tree.map(lambda *xs: jnp.stack(xs), *steps)

    def body(self, carry: CarryLike, ts: TimeStep) -> tuple[CarryLike, Any, Any]:
        """The single-seed body over the stacked seeds (:meth:`zoo.loop.Loop.seeds_body`)."""
        return self.loop.seeds_body(carry, ts)

    def run_seeds(
        self, carries: list[Any], trainers: list[TrainerLike], interrupted: list[bool]
    ) -> list[Any]:
        """Run every seed from its carry (acted on after its reset) to its budget, or until its
        trainer stops; returns each seed's final carry, in order.

        The trainers run in lockstep: the same budget and event periods, at the same env step.
        As the compiled driver does, a chunk is dispatched before the previous one is accounted,
        and where an event is due the driver drains, then hands each trainer its seed's carry.
        """
        loops, trainers = list(self.loops), list(trainers)
        if len(carries) != len(loops) or len(trainers) != len(loops):
            raise ValueError(
                f"{len(loops)} seeds' loops, {len(carries)} carries and {len(trainers)} trainers"
            )
        steps_now = {t.env_steps for t in trainers}
        if len(steps_now) != 1:
            raise ValueError(f"the seeds must start at the same env step, not {sorted(steps_now)}")
        final: list[Any] = list(carries)
        alive = list(range(len(loops)))  # the seeds still in the program, by index
        cfg = trainers[0].settings
        n = loops[0].env.num_envs
        carry = stack(carries)
        handle = tuple(loop.env.xla()[0] for loop in loops)
        prev_done = jnp.zeros((len(loops), n), bool)
        dispatched = trainers[0].env_steps
        length = chunk_length(
            (cfg.log_every, cfg.eval_every, cfg.checkpoint_every),
            n,
            cfg.total_env_steps - dispatched,
        )
        unaccounted: tuple[Any, Any, int] | None = None

        def account(chunk: Any, report: Any, steps: int) -> None:
            rows, report = jax.tree.map(np.asarray, chunk), np.asarray(report)
            for k, i in enumerate(alive):
                seed_rows = jax.tree.map(lambda x, k=k: x[:, k], rows)
                account_chunk(trainers[i], seed_rows, report[:, k], steps)

        while dispatched < cfg.total_env_steps and alive:
            lead = trainers[alive[0]]
            until = min(lead.next_event, cfg.total_env_steps)
            steps = min(length, max(-(-(until - dispatched) // n), 1))
            carry, handle, prev_done, chunk = self.chunk(carry, handle, prev_done, steps, length)
            report = learner_report(carry.learner.updates, carry.last_loss)  # [2, S]
            dispatched += steps * n
            if unaccounted is not None:
                account(*unaccounted)
            unaccounted = (chunk, report, steps)
            if dispatched >= lead.next_event or dispatched >= cfg.total_env_steps or interrupted:
                account(*unaccounted)
                unaccounted = None
                given = unstack(carry, len(alive))
                seeds, stopped = [], []
                for k, i in enumerate(alive):
                    after, stop = trainers[i].events(given[k], interrupted)
                    seeds.append(after)
                    final[i] = after
                    if stop:
                        stopped.append(k)
                if interrupted or len(stopped) == len(alive):
                    break
                keep = [k for k in range(len(alive)) if k not in stopped]
                if not stopped:
                    carry = restack(carry, given, seeds)
                else:  # the rest go on in a program for fewer seeds
                    carry = stack([seeds[k] for k in keep])
                    handle = tuple(handle[k] for k in keep)
                    prev_done = prev_done[jnp.asarray(keep)]
                    alive = [alive[k] for k in keep]
                    self.loops = [loops[i] for i in alive]
        self.loops = loops
        return final
