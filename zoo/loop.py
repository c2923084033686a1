"""The training loop: act → env step → insert → learn, composed of parts with one job each.

Per vector step of ``N`` environments, the *loop body*:

1. **insert** the pending step (the observation acted on, its action and recurrent state) with
   the environment's answer (reward, terminated, truncated) into the replay (:mod:`zoo.replay`),
   which builds n-step windows, frame stacks and sequences at sample time and never lets a
   pseudo-step start a transition; credit the transitions (:class:`zoo.learn.UpdateCredit`);
2. **learn**: every due update, each a learn step (:class:`zoo.learn.LearnStep`: sample →
   update → priorities, the priorities written just before the next sample);
3. **act** ε-greedily on the new observation (:class:`zoo.actor.Actor`) and keep it pending.

**The actors lag the learner by one update**, so that acting and environment steps overlap the
update instead of waiting for it: each update hands the actors the online network *as it was
before that update* and the actors act with it until the next update. Steps added between an
update and the next sample enter with the running maximum priority, as always; an item
overwritten in between keeps its new priority. Acme's actors lag more (they fetch parameters
every ``variable_update_period`` steps); the learning tests hold the zoo to its budgets with it.

The parts:

- :class:`~zoo.actor.Actor`: acting, ε, recurrent state resets;
- the replay (:class:`~zoo.replay.Replay`): ``init / add / sample / write_priorities / seal``;
- :class:`~zoo.learn.LearnStep`: sample → update → priorities, and
  :class:`~zoo.learn.UpdateCredit`, the one statement of when updates are due.

:class:`Loop` composes the parts for one run and exposes the body's pieces as pure functions
(:meth:`Loop.insert`, :meth:`Loop.learn`, :meth:`Loop.learn_due`, :meth:`Loop.act`,
:meth:`Loop.body`), which :mod:`zoo.seeds` and the benchmarks build on.

This module is the body. Above it:

- the *drivers* (:mod:`zoo.drivers`; :func:`zoo.drivers.make_driver` chooses and builds one for a
  loop; :meth:`Loop.driver`, :meth:`Loop.first_act`, :meth:`Loop.step` and :meth:`Loop.chunk` are
  conveniences that ask it; the drivers know the loop only through :mod:`zoo.drivers.protocol`, so
  the import goes one way), which run the body: the host driver
  (:meth:`zoo.drivers.HostDriver.step`: separate jitted calls, environments stepped through
  envpool's Python API in between) and the compiled driver
  (:meth:`zoo.drivers.CompiledDriver.chunk`: up to ``L`` vector steps in one compiled loop with
  envpool's XLA ``step``). Both read and write the same :class:`LoopCarry`, so they produce the same
  transitions and parameters from the same seed;
- the trainer (:class:`zoo.runs.trainer.Trainer`, not imported here), which runs one run on the host
  around a driver: episode statistics, logging, evaluation, checkpoints, signals; and what a run
  saves of a carry (:mod:`zoo.runs.state`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo.actor import Actor, Pending, make_act, starts_transition
from zoo.data import learning_parts
from zoo.drivers import make_driver
from zoo.envs import TimeStep, VectorEnv
from zoo.learn import LearnCarry
from zoo.learner import DataParallelLearner, Learner, LearnerState
from zoo.replay import PendingPriorities, StepBatch
from zoo.spec import AlgorithmSpec

__all__ = [
    "EnvShape",
    "Loop",
    "LoopCarry",
    "Pending",
    "make_act",
    "starts_transition",
]


class LoopCarry(eqx.Module):
    """Everything the loop body reads and writes (device arrays; the learner's static parts).

    Attributes:
      learner: the learner state (networks, optimizer state, update count, noise key).
      replay: the replay state.
      key: the actors' and sampler's PRNG key.
      env_steps: transitions inserted so far (int32).
      credit: transitions credited towards the next update (float32).
      core: the actors' recurrent state ``[N, ...]`` (``None`` for feed-forward agents).
      pending: the step acted on, waiting for the environment's answer.
      metric_sums: sums of the updates' metrics since the last log, ``[len(metric_names)]``.
      metric_count: updates summed in ``metric_sums`` (int32).
      last_loss: the latest update's loss (NaN before the first update).
      actor: the online network the actors act with: the learner's before its latest update.
      actor_report: ``[updates, loss]`` of the learner state ``actor`` came from (what the host
        watches without waiting for the update in flight).
      deferred: the latest update's priorities, not yet written (``None`` for uniform replay;
        :meth:`zoo.replay.Replay.write_priorities` writes them).
      metric_names: the names of ``metric_sums``' entries (the loss's ``metric_names``).
    """

    learner: LearnerState
    replay: Any
    key: jax.Array
    env_steps: jax.Array
    credit: jax.Array
    core: Any
    pending: Pending
    metric_sums: jax.Array
    metric_count: jax.Array
    last_loss: jax.Array
    actor: Any
    actor_report: jax.Array
    deferred: PendingPriorities | None
    metric_names: tuple[str, ...] = eqx.field(static=True)

    def learning(self) -> LearnCarry:
        """The fields a learn step reads and writes, besides the replay state (a
        :class:`~zoo.learn.LearnCarry`: the carry holds each of its fields under its name)."""
        return LearnCarry(**{name: getattr(self, name) for name in _LEARN_FIELDS})

    def with_learning(self, learning: LearnCarry, **changes: Any) -> LoopCarry:
        """The carry with a learn step's fields (and any other ``changes``) replaced."""
        fields = {name: getattr(learning, name) for name in _LEARN_FIELDS}
        return dataclasses.replace(self, **fields, **changes)

    def metric_means(self) -> dict[str, float]:
        """Means of the metrics since they were last reset (empty before any update)."""
        count = int(self.metric_count)
        if count == 0:
            return {}
        sums = np.asarray(self.metric_sums)
        names = self.metric_names
        return {name: float(value) / count for name, value in zip(names, sums, strict=True)}

    def reset_metrics(self) -> LoopCarry:
        """The carry with the metric sums cleared."""
        return eqx.tree_at(
            lambda c: (c.metric_sums, c.metric_count),
            self,
            (jnp.zeros_like(self.metric_sums), jnp.zeros_like(self.metric_count)),
        )


#: The fields of :class:`LoopCarry` a learn step owns: those of :class:`~zoo.learn.LearnCarry`.
_LEARN_FIELDS = LearnCarry._fields


@dataclass(frozen=True)
class EnvShape:
    """What the loop body needs to know of its environments (a :class:`~zoo.envs.VectorEnv`
    has these too): for a body that does not step them itself (:mod:`zoo.seeds`)."""

    num_envs: int
    num_actions: int
    observation_shape: tuple[int, ...]
    observation_dtype: Any

    @classmethod
    def of(cls, env: VectorEnv, num_envs: int | None = None) -> EnvShape:
        """``env``'s shapes, for ``num_envs`` environments (default: ``env.num_envs``)."""
        return cls(
            num_envs=env.num_envs if num_envs is None else num_envs,
            num_actions=env.num_actions,
            observation_shape=tuple(env.observation_shape),
            observation_dtype=env.observation_dtype,
        )


class Loop:
    """The loop body of one run, composed of its parts.

    Args:
      spec: the algorithm.
      env: the training environments (a :class:`~zoo.envs.VectorEnv`; the compiled driver uses
        its XLA interface), or only their :class:`EnvShape` for a body driven elsewhere.
      learner: the learner whose update the loop runs (a :class:`~zoo.learner.Learner`, or a
        :class:`~zoo.learner.DataParallelLearner` for an update over several devices).
      replay: the data learned from, built for ``env.num_envs`` environments by
        :func:`zoo.data.build_data` (a replay, or a rollout store).
      initial_core_state: one env's initial recurrent state (recurrent specs).
      placement: where the asynchronous driver acts and learns (a
        :class:`zoo.drivers.Placement`; ``None``: its defaults); :meth:`init` allocates the
        carry on its learner's first device. The synchronous drivers run on the default device.
      max_lag: the asynchronous driver's bound on the actor's parameter lag, in updates.
      queue_steps: vector steps the asynchronous driver's actor may run ahead (``None``: its
        default).

    Attributes:
      actor: the :class:`~zoo.actor.Actor`.
      learn_step: the :class:`~zoo.learn.LearnStep`.
      credit: the :class:`~zoo.learn.UpdateCredit` rule.
      drivers: the drivers built for this loop, by name (:func:`zoo.drivers.make_driver`
        builds each once and keeps it here; the host driver's ``insert``, ``act``, ``sample``
        and ``update`` are the body's pieces, each one asynchronously jitted call).
      devices: the local devices one update runs on.
      step_transitions: transitions of the run per vector step (``N``; ``P × N`` when the
        learner spans ``P`` processes, :mod:`zoo.runs.distributed`).
    """

    def __init__(
        self,
        spec: AlgorithmSpec,
        env: VectorEnv | EnvShape,
        learner: Learner | DataParallelLearner,
        replay: Any,
        initial_core_state: Any = None,
        *,
        placement: Any = None,
        max_lag: int = 1,
        queue_steps: int | None = None,
    ):
        self.spec = spec
        self.placement = placement
        self.max_lag = max_lag
        self.queue_steps = queue_steps
        self.env = env
        self.learner = learner
        self.replay = replay
        self.num_envs = env.num_envs
        self.recurrent = spec.recurrent
        self.actor = Actor(spec, self.num_envs, env.num_actions, initial_core_state)
        # the data kind states how the loop learns from it (a replay: sample → update per
        # update_period transitions; a rollout store: a learning phase per rollout)
        self.learn_step, self.credit = learning_parts(replay, learner, spec, self.num_envs)
        # transitions of the run per vector step: N, or P × N over P processes stepping in
        # lockstep (zoo.runs.distributed); the budget, ε and the credit rule count these
        self.step_transitions = self.credit.num_envs
        self.metric_names = self.learn_step.metric_names
        self.devices = learner.num_devices
        self.drivers: dict[str, Any] = {}

    def epsilon(self, env_steps: Any) -> jax.Array:
        """ε of the actors after ``env_steps`` transitions (``schedule.epsilon``)."""
        return self.actor.epsilon(env_steps)

    # ------------------------------------------- the drivers (chosen by zoo.drivers.make_driver)

    def driver(self, name: str) -> Any:
        """The driver ``name`` for this loop (:func:`zoo.drivers.make_driver`, built once)."""
        return make_driver(name, self)

    @property
    def host(self) -> Any:
        """The host driver (:class:`zoo.drivers.HostDriver`): its ``insert``, ``act``,
        ``sample`` and ``update`` are the body's pieces, each one asynchronously jitted call."""
        return make_driver("host", self)

    def first_act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        """Act on the first observation after a reset (nothing to insert yet); every driver
        starts with it (:meth:`zoo.drivers.HostDriver.first_act`)."""
        return self.host.first_act(carry, ts)

    def step(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """Host driver: one vector step (:meth:`zoo.drivers.HostDriver.step`)."""
        return self.host.step(carry, ts)

    def chunk(
        self,
        carry: LoopCarry,
        handle: Any,
        prev_done: jax.Array,
        steps: int,
        length: int | None = None,
    ) -> tuple[LoopCarry, Any, jax.Array, TimeStep]:
        """Compiled driver: ``steps`` vector steps in a program of ``length`` (default
        ``steps``; :meth:`zoo.drivers.CompiledDriver.chunk`)."""
        return make_driver("compiled", self).chunk(carry, handle, prev_done, steps, length)

    # -------------------------------------------------------------------------- the state

    def init(self, learner_state: LearnerState, key: jax.Array) -> LoopCarry:
        """The carry at step 0 (nothing pending yet: a driver acts first after a reset,
        :meth:`zoo.drivers.HostDriver.first_act`).

        With a :attr:`placement`, the carry (the replay above all) is allocated on the learner's
        first device, where the asynchronous driver keeps it, and committed there (without a
        copy). A replay allocated elsewhere and moved there would be held twice at once
        (measured: 14.1 GiB against 7.6 GiB for a 1M Atari replay); an uncommitted one would be
        moved to the default device by the checkpoint restore that fills it, and held twice
        there (measured: 14.8 GiB on resuming that run).
        """
        if self.placement is not None:
            device = self.placement.learner[0]
            with jax.default_device(device):
                carry = self._init(learner_state, key)
            # a learner state replicated over processes (zoo.runs.distributed) stays where it is
            local = jax.device_put(dataclasses.replace(carry, learner=None), device)
            return dataclasses.replace(local, learner=carry.learner)
        return self._init(learner_state, key)

    def _init(self, learner_state: LearnerState, key: jax.Array) -> LoopCarry:
        learning = self.learn_step.init(learner_state, key)
        pending = self.actor.nothing_pending(self.env.observation_shape, self.env.observation_dtype)
        return LoopCarry(
            learner=learning.learner,
            replay=self.replay.init(),
            key=learning.key,
            env_steps=jnp.zeros((), jnp.int32),
            credit=jnp.zeros((), jnp.float32),
            core=self.actor.initial_state,
            pending=pending,
            metric_sums=learning.metric_sums,
            metric_count=learning.metric_count,
            last_loss=learning.last_loss,
            actor=learning.actor,
            actor_report=learning.actor_report,
            deferred=learning.deferred,
            metric_names=self.metric_names,
        )

    def with_learner(self, carry: LoopCarry, learner_state: LearnerState) -> LoopCarry:
        """``carry`` with a new learner state, the actors acting with its online network
        (:meth:`zoo.learn.LearnStep.with_learner`)."""
        return carry.with_learning(self.learn_step.with_learner(carry.learning(), learner_state))

    # ------------------------------------------------------------- the body, pure functions

    def insert(self, ts: TimeStep, replay_state: Any, pending: Pending, env_steps, credit):
        """Insert the pending step with the environment's answer ``ts``; credit the
        transitions. Returns ``(replay_state, env_steps, credit)``."""
        p = pending
        step = StepBatch(
            observation=p.observation,
            action=p.action,
            reward=ts.reward,
            terminated=ts.terminated,
            truncated=ts.truncated,
            first=p.first,
            valid=p.valid,
            core_state=p.core_state,
            next_observation=ts.observation,
        )
        env_steps = env_steps + self.step_transitions
        credit = self.credit.earn(env_steps, credit)
        return self.replay.add(replay_state, step), env_steps, credit

    def act(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array]:
        """Act on ``ts`` with the actors' network; the step acted on becomes pending."""
        key, core, pending, actions = self.actor.act(
            carry.actor, carry.key, carry.core, carry.env_steps, ts
        )
        return dataclasses.replace(carry, key=key, core=core, pending=pending), actions

    def learn(self, carry: LoopCarry) -> LoopCarry:
        """One learn step inside a compiled program, spending one update's credit."""
        learning, replay = self.learn_step.learn(carry.learning(), carry.replay, barrier=True)
        return carry.with_learning(learning, replay=replay, credit=self.credit.spend(carry.credit))

    def learn_due(self, carry: LoopCarry, *, seeds: bool = False) -> LoopCarry:
        """Every due update, each under ``lax.cond`` (inside a compiled program).

        At most ``credit.max_updates`` are due per vector step. Only what learning changes goes
        through the ``cond`` (:class:`_Due`: the learn carry, the replay's priority state and
        the credit); the frames are read from outside, so XLA never copies them.

        With ``seeds``, ``carry`` holds several seeds' carries stacked on a leading axis
        (:meth:`seeds_body`): the learn step is vmapped inside the ``cond`` and "is an update
        due" is seed 0's answer, a scalar. Seeds step in lockstep, so every seed's credit is the
        same; a batched predicate would turn the ``cond`` into a ``select`` that runs every
        update at every step.
        """
        replay = self.replay

        def learn_once(carry: LoopCarry, due: _Due) -> _Due:
            state = replay.with_priority_state(carry.replay, due.priorities)
            inner = self.learn(carry.with_learning(due.learning, replay=state, credit=due.credit))
            return _Due(inner.learning(), replay.priority_state(inner.replay), inner.credit)

        step = eqx.filter_vmap(learn_once) if seeds else learn_once
        # (the priority state is fields of the replay state: read and written as they are,
        # stacked or not)
        due = _Due(carry.learning(), replay.priority_state(carry.replay), carry.credit)
        for _ in range(self.credit.max_updates):
            credit = due.credit[0] if seeds else due.credit
            due = jax.lax.cond(self.credit.due(credit), lambda d: step(carry, d), lambda d: d, due)
        state = replay.with_priority_state(carry.replay, due.priorities)
        return carry.with_learning(due.learning, replay=state, credit=due.credit)

    def body(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """One vector step inside a compiled program: insert, every due update, act.

        Returns the carry, the actions and ``[updates, loss]`` of the learner state the actors
        act with.
        """
        replay, env_steps, credit = self.insert(
            ts, carry.replay, carry.pending, carry.env_steps, carry.credit
        )
        carry = dataclasses.replace(carry, replay=replay, env_steps=env_steps, credit=credit)
        carry, actions = self.act(self.learn_due(carry), ts)
        return carry, actions, carry.actor_report

    def seeds_body(self, carry: LoopCarry, ts: TimeStep) -> tuple[LoopCarry, jax.Array, jax.Array]:
        """:meth:`body` for ``S`` seeds in lockstep: ``carry`` and ``ts`` hold each seed's on a
        leading axis of ``S`` (the actions and reports come back ``[S, ...]``). Each seed runs
        exactly the single-seed body; insert and act are vmapped, the updates go through
        :meth:`learn_due` with ``seeds``."""
        replay, env_steps, credit = jax.vmap(self.insert)(
            ts, carry.replay, carry.pending, carry.env_steps, carry.credit
        )
        carry = dataclasses.replace(carry, replay=replay, env_steps=env_steps, credit=credit)
        carry, actions = eqx.filter_vmap(self.act)(self.learn_due(carry, seeds=True), ts)
        return carry, actions, carry.actor_report


class _Due(eqx.Module):
    """What passes through ``lax.cond`` around a learn step (:meth:`Loop.learn_due`)."""

    learning: LearnCarry
    priorities: Any
    credit: jax.Array
