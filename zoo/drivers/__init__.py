"""Drivers: what runs the loop body (:class:`zoo.loop.Loop`) and how the host follows it.

A driver composes the loop's parts (actor, replay, learn step, update-credit rule) into a
schedule of work and runs it for a trainer (:class:`zoo.runs.trainer.Trainer`). Three ship.
Two are synchronous and produce the same transitions and parameters from the same seed:

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

:class:`SeedsDriver` (:mod:`zoo.drivers.seeds`) is the compiled driver for several seeds' runs
at once (``zoo train --seeds N``): their carries stacked, each seed's environments stepped in
the program, the body vmapped over the seeds, each seed accounted to its own trainer. It runs
several loops, so it is no ``--loop`` choice (:data:`DRIVERS` holds those).

:func:`make_driver` builds the driver a name chooses for a loop, once per loop: the trainer
acts first with the host driver (:meth:`HostDriver.first_act`; every driver starts from it) and
then runs the driver the run names, and an update compiled ahead of a run
(:meth:`HostDriver.compile_update`) is the one the run calls.

The drivers import neither the loop nor the trainer: they are written against the protocols of
:mod:`zoo.drivers.protocol` (:class:`LoopLike`, :class:`CarryLike`, :class:`TrainerLike`), which
name what the drivers use of each.

Writing a driver (an asynchronous actor–learner split, a replay-free learner): a class with

- ``name: str``, and ``__init__(self, loop)`` taking the loop (a :class:`LoopLike`) whose parts
  it composes (``loop.actor``, ``loop.learn_step``, ``loop.credit``, ``loop.env``, and the pure
  body pieces such as ``loop.insert`` and ``loop.body``; what it uses beyond the protocol is
  added to it);
- ``run(self, carry, actions, trainer, interrupted) -> carry``: run from ``carry`` (the first
  observation acted on, ``actions`` its actions) until ``trainer.env_steps`` reaches
  ``trainer.settings.total_env_steps``, calling ``trainer.account(timesteps, report)`` after
  vector steps and ``carry, stop = trainer.events(carry, interrupted)`` where
  ``trainer.next_event`` is reached (stopping when ``stop``);

and optionally ``stats(self) -> dict[str, float]``, figures the run's log records at each log;
in a module of its own, added to :data:`DRIVERS`. No other driver changes; the run's
``--loop`` choice (``zoo.runs.settings.RunSettings.loop``) names it.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, overload

from zoo.drivers.asynchronous import AsyncDriver, Placement
from zoo.drivers.compiled import CompiledDriver, chunk_length
from zoo.drivers.host import HostDriver
from zoo.drivers.protocol import CarryLike, LoopLike, SettingsLike, TrainerLike
from zoo.drivers.seeds import SeedsDriver

__all__ = [
    "DRIVERS",
    "AsyncDriver",
    "CarryLike",
    "CompiledDriver",
    "Driver",
    "HostDriver",
    "LoopLike",
    "Placement",
    "SeedsDriver",
    "SettingsLike",
    "TrainerLike",
    "chunk_length",
    "make_driver",
]


class Driver(Protocol):
    """What the trainer needs of a driver (see the module docstring)."""

    name: str

    def __init__(self, loop: LoopLike) -> None: ...

    def run(
        self, carry: Any, actions: Any, trainer: TrainerLike, interrupted: list[bool]
    ) -> Any: ...


#: The drivers by name (``--loop NAME``).
DRIVERS: dict[str, type[Driver]] = {
    HostDriver.name: HostDriver,
    CompiledDriver.name: CompiledDriver,
    AsyncDriver.name: AsyncDriver,
}


@overload
def make_driver(name: Literal["host"], loop: LoopLike) -> HostDriver: ...
@overload
def make_driver(name: Literal["compiled"], loop: LoopLike) -> CompiledDriver: ...
@overload
def make_driver(name: Literal["async"], loop: LoopLike) -> AsyncDriver: ...
@overload
def make_driver(name: str, loop: LoopLike) -> Driver: ...
def make_driver(name: str, loop: LoopLike) -> Driver:
    """The driver ``name`` of :data:`DRIVERS` for ``loop``, built on the first call for that
    loop and kept in ``loop.drivers`` (later calls return the same driver).

    Raises:
      ValueError: ``name`` is no driver of :data:`DRIVERS` (the message lists them).
    """
    driver = loop.drivers.get(name)
    if driver is None:
        if name not in DRIVERS:
            raise ValueError(f"unknown loop driver {name!r}; known: {', '.join(DRIVERS)}")
        driver = loop.drivers[name] = DRIVERS[name](loop)
    return driver
