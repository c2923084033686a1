"""The host driver: one vector step at a time, environments stepped on the host in between.

Each vector step is separate jitted calls: insert; a sample and an update per due update; act.
The host mirrors the update-credit rule (:class:`zoo.learn.UpdateCredit`, the same methods the
device evaluates) on Python numbers, so no update runs under device control flow, in which
XLA:CPU's convolutions are an order of magnitude slower (measured: 143 ms against 10 ms for a
Nature-CNN update). Every call dispatches asynchronously (``async_jit``; ``eqx.filter_jit``
waits for each call to finish) and the update is not waited for: the actions come from the
previous update's network (the actors lag the learner by one update), so the host steps the
environments while the update runs.

Buffers: the replay is donated to the insert and the sample (updated in place, never copied);
the insert and the act never take the learner's buffers. The learner state is not donated:
XLA:CPU runs this parameter update 15-25% slower with donation, and the actors hold its online
network.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from zoo.jit import async_jit
from zoo.learn import learner_report

if TYPE_CHECKING:  # pragma: no cover
    from zoo.drivers.protocol import CarryLike, LoopLike, TrainerLike
    from zoo.envs import TimeStep

__all__ = ["HostDriver"]

_jit_report = jax.jit(learner_report)


class HostDriver:
    """Runs the loop body one vector step at a time (see the module docstring).

    The body's pieces, each one asynchronously jitted call (the benchmarks time them alone):

    Attributes:
      insert: ``(ts, replay_state, pending, env_steps, credit) -> (replay_state, env_steps,
        credit)`` (:meth:`zoo.loop.Loop.insert`; the replay is donated).
      act: ``(ts, key, core, actor, actor_report, env_steps) -> (key, core, pending, actions,
        actor_report)`` (:meth:`zoo.actor.Actor.act`; the report passes through so that the
        host reads the actors' learner state from the same call).
      sample: :meth:`zoo.learn.LearnStep.sample` (the replay is donated).
      update: :meth:`zoo.learn.LearnStep.update`.
    """

    name = "host"

    def __init__(self, loop: LoopLike):
        self.loop = loop
        self.insert = async_jit(loop.insert, donate_argnums=(1,))
        self.act = async_jit(self._act)
        self.sample = async_jit(loop.learn_step.sample, donate_argnums=(0,))
        # a learner over several processes assembles global arrays itself (not traceable)
        update = loop.learn_step.update
        self.update = async_jit(update) if loop.learner.traceable else update
        # the host's mirror of the carry's counters (synchronised by first_act)
        self._env_steps = 0
        self._credit = 0.0

    def compile_update(self, learner_state: Any, key: jax.Array) -> int:
        """Compile the update this driver will call, before the replay is allocated, and return
        the bytes of its working memory (XLA's temporary allocation for one update: the
        activations kept for the gradient, the optimizer's intermediates).

        Nothing is allocated: the carry and the sampled batch are shapes (``eval_shape``). JAX
        reuses the compilation for the first real update, so this costs no second compile.
        ``learner_state`` and ``key`` are those :meth:`zoo.loop.Loop.init` will be given.
        """
        import equinox as eqx

        carry = eqx.filter_eval_shape(self.loop.init, learner_state, key)
        _, _, batch, info = eqx.filter_eval_shape(
            self.loop.learn_step.sample,
            carry.replay,
            carry.deferred,
            carry.key,
            carry.learner.updates,
        )
        compiled = self.update.lower(
            carry.learner, batch, info, carry.metric_sums, carry.metric_count
        ).compile()
        analysis = compiled.memory_analysis()
        return int(getattr(analysis, "temp_size_in_bytes", 0) or 0)

    def _act(self, ts: TimeStep, key, core, actor, report, env_steps):
        key, core, pending, actions = self.loop.actor.act(actor, key, core, env_steps, ts)
        return key, core, pending, actions, report

    def _act_on(self, carry: CarryLike, ts: TimeStep) -> tuple[CarryLike, jax.Array, jax.Array]:
        # only the acting fields go through the call: a jitted function that returns an
        # argument it was given (the replay, here) returns a copy of it unless it is donated
        key, core, pending, actions, report = self.act(
            ts, carry.key, carry.core, carry.actor, carry.actor_report, carry.env_steps
        )
        return dataclasses.replace(carry, key=key, core=core, pending=pending), actions, report

    def first_act(self, carry: CarryLike, ts: TimeStep) -> tuple[CarryLike, jax.Array]:
        """Act on the first observation after a reset (nothing to insert yet)."""
        self._env_steps = int(carry.env_steps)
        self._credit = float(carry.credit)
        carry, actions, _ = self._act_on(carry, ts)
        return carry, actions

    def learn(self, carry: CarryLike) -> CarryLike:
        """One learn step, dispatched without waiting for it."""
        loop = self.loop
        learning, replay = loop.learn_step.learn(
            carry.learning(), carry.replay, sample=self.sample, update=self.update,
            report=_jit_report,
        )  # fmt: skip
        return carry.with_learning(learning, replay=replay, credit=loop.credit.spend(carry.credit))

    def step(self, carry: CarryLike, ts: TimeStep) -> tuple[CarryLike, jax.Array, jax.Array]:
        """Insert the pending step with the environment's answer ``ts``, learn, act on ``ts``.

        ``carry`` is donated (do not use it afterwards). Returns the new carry, the actions
        ``[N]`` and ``[updates, loss]`` of the learner state the actors act with.
        """
        credit_rule = self.loop.credit
        replay, env_steps, credit = self.insert(
            ts, carry.replay, carry.pending, carry.env_steps, carry.credit
        )
        carry = dataclasses.replace(carry, replay=replay, env_steps=env_steps, credit=credit)
        self._env_steps += self.loop.step_transitions
        self._credit = credit_rule.earn(self._env_steps, self._credit)
        while credit_rule.due(self._credit):
            carry = self.learn(carry)
            self._credit = credit_rule.spend(self._credit)
        return self._act_on(carry, ts)

    def run(
        self, carry: CarryLike, actions: Any, trainer: TrainerLike, interrupted: list[bool]
    ) -> CarryLike:
        """Step the environments and the body until the budget, a stop or a signal."""
        env = self.loop.env
        while trainer.env_steps < trainer.settings.total_env_steps:
            ts = env.step(np.asarray(actions))
            carry, actions, report = self.step(carry, ts)
            trainer.account([ts], report)
            carry, stop = trainer.events(carry, interrupted)
            if stop:
                break
        return carry
