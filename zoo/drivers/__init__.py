"""Drivers: what runs the loop body (:class:`zoo.loop.Loop`) and how the host follows it.

A driver composes the loop's parts (actor, replay, learn step, update-credit rule) into a
schedule of work and runs it for a :class:`zoo.loop.Trainer`. Three ship. Two are synchronous
and produce the same transitions and parameters from the same seed:

- ``host`` (:class:`HostDriver`, :mod:`zoo.drivers.host`): one vector step at a time, as
  separate asynchronously dispatched jitted calls (insert; a sample and an update per due
  update; act), the environments stepped through envpool's Python API in between. Any
  environment; image networks (XLA:CPU runs convolutions under device control flow slowly).
- ``compiled`` (:class:`CompiledDriver`, :mod:`zoo.drivers.compiled`): chunks of up to ``L``
  vector steps of the body in one compiled loop with envpool's XLA step (one program per run).
  envpool only; about 10× the host driver's rate for MLP networks on CPU.

The third, ``async`` (:class:`AsyncDriver`, :mod:`zoo.drivers.asynchronous`), runs an actor
thread on its own device beside the learner (Sebulba), with a bounded parameter lag and a rate
limiter on the replay ratio; it is not deterministic.

Writing a driver (an asynchronous actor–learner split, a replay-free learner): a class with

- ``name: str``, and ``__init__(self, loop)`` taking the :class:`~zoo.loop.Loop` whose parts it
  composes (``loop.actor``, ``loop.replay``, ``loop.learn_step``, ``loop.credit``, and the pure
  body pieces ``loop.insert``, ``loop.learn``, ``loop.learn_due``, ``loop.act``, ``loop.body``);
- ``run(self, carry, actions, trainer, interrupted) -> carry``: run from ``carry`` (the first
  observation acted on, ``actions`` its actions) until ``trainer.env_steps`` reaches
  ``trainer.settings.total_env_steps``, calling ``trainer.account(timesteps, report)`` after
  vector steps and ``carry, stop = trainer.events(carry, interrupted)`` where
  ``trainer.next_event`` is reached (stopping when ``stop``);

and optionally ``stats(self) -> dict[str, float]``, figures the run's log records at each log;
in a module of its own, added to :data:`DRIVERS`. No other driver changes; the run's
``--loop`` choice (``zoo.run.RunSettings.loop``) names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from zoo.drivers.asynchronous import AsyncDriver, Placement
from zoo.drivers.compiled import CompiledDriver, chunk_length
from zoo.drivers.host import HostDriver

if TYPE_CHECKING:  # pragma: no cover
    from zoo.loop import Loop, LoopCarry, Trainer

__all__ = [
    "DRIVERS",
    "AsyncDriver",
    "CompiledDriver",
    "Driver",
    "HostDriver",
    "Placement",
    "chunk_length",
]


class Driver(Protocol):
    """What :class:`zoo.loop.Trainer` needs of a driver (see the module docstring)."""

    name: str

    def __init__(self, loop: Loop) -> None: ...

    def run(
        self, carry: LoopCarry, actions: Any, trainer: Trainer, interrupted: list[bool]
    ) -> LoopCarry: ...


#: The drivers by name (``--loop NAME``).
DRIVERS: dict[str, type[Driver]] = {
    HostDriver.name: HostDriver,
    CompiledDriver.name: CompiledDriver,
    AsyncDriver.name: AsyncDriver,
}
