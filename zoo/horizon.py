"""The n-step length and γ a learner update uses: ``loss.n_step`` and ``loss.discount``, or
their schedules (``schedule.n_step``, ``schedule.discount``) over the learner's updates —
since the start, or since the last reset (``schedule.cycle: resets``, BBF's
``cycle_grad_steps``).

The replay builds each sampled window with the update's ``n`` and ``γ``
(:meth:`zoo.learn.LearnStep.sample` asks :meth:`Horizon.at`), and the loss bootstraps with the
same ``γ`` (:class:`zoo.losses.Loss`), both at the learner's update count before the update, as
BBF samples with ``update_horizon_scheduler(cycle_grad_steps)`` and
``gamma_scheduler(cycle_grad_steps)``. BBF's n-step windows bootstrap one step early and miss a
termination on their n-th step (google-research/google-research#1851); these do not: a window of
``n`` is :mod:`zoo.replay.transitions`' everywhere.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from zoo.resets import updates_since_reset
from zoo.schedules import build_schedule
from zoo.spec import AlgorithmSpec

__all__ = ["Horizon"]


class Horizon:
    """The ``(n, γ)`` of ``spec`` at a learner-update count.

    Attributes:
      n_max: ``loss.n_step``, the window the replay keeps.
      scheduled: whether either is scheduled (else :meth:`at` returns the constants).
    """

    def __init__(self, spec: AlgorithmSpec):
        schedule = spec.schedule
        self.n_max = int(spec.loss.n_step)
        self._discount = float(spec.loss.discount)
        self._n = build_schedule(schedule.n_step) if schedule.n_step is not None else None
        self._gamma = build_schedule(schedule.discount) if schedule.discount is not None else None
        self._resets = spec.resets if schedule.cycle == "resets" else None
        self.scheduled = self._n is not None or self._gamma is not None

    def step(self, updates: Any) -> Any:
        """The count the schedules read: ``updates``, or those since the last reset."""
        return updates if self._resets is None else updates_since_reset(self._resets, updates)

    def discount(self, updates: Any) -> Any:
        """γ after ``updates`` learner updates."""
        if self._gamma is None:
            return self._discount
        return self._gamma(self.step(updates))

    def n_step(self, updates: Any) -> Any:
        """The n-step length after ``updates`` learner updates (an int32 array when scheduled:
        the schedule rounded half to even, as numpy's round, and kept within [1, n_max])."""
        if self._n is None:
            return self.n_max
        n = jnp.round(self._n(self.step(updates))).astype(jnp.int32)
        return jnp.clip(n, 1, self.n_max)

    def at(self, updates: Any) -> tuple[Any, Any] | None:
        """``(n, γ)`` after ``updates`` updates, or ``None`` when nothing is scheduled (the
        replay then uses its own constants)."""
        if not self.scheduled:
            return None
        return self.n_step(updates), self.discount(updates)
