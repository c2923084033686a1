"""What a driver needs of the loop it runs, of the loop's carry and of the trainer it runs for.

The drivers are written against these protocols, not against the classes that satisfy them:
the loop body (:class:`zoo.loop.Loop`, :class:`zoo.loop.LoopCarry`) sits below the drivers and
the trainer (:class:`zoo.runs.trainer.Trainer`) above them, and this package imports neither.
Each protocol names only what the three drivers use; a new driver that needs more of the loop
adds it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Self

if TYPE_CHECKING:  # pragma: no cover
    import jax

    from zoo.actor import Actor, Pending
    from zoo.envs import TimeStep, VectorEnv
    from zoo.learn import LearnCarry, LearnStep, UpdateCredit
    from zoo.learner import DataParallelLearner, Learner, LearnerState

__all__ = ["CarryLike", "LoopLike", "SettingsLike", "TrainerLike"]


class CarryLike(Protocol):
    """What the drivers read of the loop carry (:class:`zoo.loop.LoopCarry`): its fields, and
    the learn step's view of it. The carry is a dataclass: the drivers copy it with
    ``dataclasses.replace``."""

    @property
    def learner(self) -> LearnerState: ...
    @property
    def replay(self) -> Any: ...
    @property
    def key(self) -> jax.Array: ...
    @property
    def env_steps(self) -> jax.Array: ...
    @property
    def credit(self) -> jax.Array: ...
    @property
    def core(self) -> Any: ...
    @property
    def pending(self) -> Pending: ...
    @property
    def metric_sums(self) -> jax.Array: ...
    @property
    def metric_count(self) -> jax.Array: ...
    @property
    def last_loss(self) -> jax.Array: ...
    @property
    def actor(self) -> Any: ...
    @property
    def actor_report(self) -> jax.Array: ...
    @property
    def deferred(self) -> Any: ...

    def learning(self) -> LearnCarry:
        """The fields a learn step reads and writes, besides the replay state."""
        ...

    def with_learning(self, learning: LearnCarry, **changes: Any) -> Self:
        """The carry with a learn step's fields (and any other ``changes``) replaced."""
        ...


class LoopLike(Protocol):
    """What the drivers compose of the loop (:class:`zoo.loop.Loop`): its parts, the pure body
    pieces, and the asynchronous driver's settings.

    Attributes:
      env: the training environments (the drivers step them).
      actor: acting (:meth:`zoo.actor.Actor.act`).
      learner: the learner (``traceable``, ``num_processes``, ``unreplicate``; a mesh's).
      learn_step: sample → update → priorities.
      credit: the update-credit rule.
      step_transitions: transitions of the run per vector step.
      placement: where the asynchronous driver acts and learns (``None``: its defaults).
      max_lag: the asynchronous driver's bound on the actor's parameter lag, in updates.
      queue_steps: vector steps the asynchronous driver's actor may run ahead (``None``: its
        default).
      drivers: the drivers built for this loop, by name (:func:`zoo.drivers.make_driver` builds
        each once and keeps it here).
    """

    env: VectorEnv
    actor: Actor
    learner: Learner | DataParallelLearner
    learn_step: LearnStep
    credit: UpdateCredit
    step_transitions: int
    placement: Any  # a zoo.drivers.Placement, or None: its defaults
    max_lag: int
    queue_steps: int | None
    drivers: dict[str, Any]

    def init(self, learner_state: LearnerState, key: jax.Array) -> CarryLike:
        """The carry at step 0."""
        ...

    def insert(
        self, ts: TimeStep, replay_state: Any, pending: Pending, env_steps: Any, credit: Any
    ) -> tuple[Any, Any, Any]:
        """Insert the pending step with the environment's answer; credit the transitions."""
        ...

    def body(self, carry: Any, ts: TimeStep) -> tuple[Any, jax.Array, jax.Array]:
        """One vector step of a carry of this loop's inside a compiled program: insert, every
        due update, act."""
        ...

    def seeds_body(self, carry: Any, ts: TimeStep) -> tuple[Any, jax.Array, jax.Array]:
        """:meth:`body` for several seeds' carries stacked on a leading axis, in lockstep."""
        ...


class SettingsLike(Protocol):
    """The run's settings a driver reads (:class:`zoo.runs.settings.RunSettings`): the budget
    and the event periods, in transitions."""

    @property
    def total_env_steps(self) -> int: ...
    @property
    def log_every(self) -> int: ...
    @property
    def eval_every(self) -> int: ...
    @property
    def checkpoint_every(self) -> int: ...


class TrainerLike(Protocol):
    """What a driver calls back on the trainer it runs for (:class:`zoo.runs.trainer.Trainer`).

    Attributes:
      settings: the run's budget and event periods.
      env_steps: transitions the trainer has accounted so far.
    """

    settings: SettingsLike
    env_steps: int

    @property
    def next_event(self) -> int:
        """The transition count at which the next log, evaluation or checkpoint is due."""
        ...

    def account(self, timesteps: list[Any], report: Any) -> None:
        """Episode statistics, counters and the non-finite check after some vector steps."""
        ...

    def events(self, carry: Any, interrupted: list[bool]) -> tuple[Any, bool]:
        """Log, evaluate and checkpoint when due; the carry and whether to stop."""
        ...
