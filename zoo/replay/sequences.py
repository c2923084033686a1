"""Stored sequences for recurrent agents (R2D2, Kapturowski et al. 2019, "Recurrent Experience
Replay in Distributed Reinforcement Learning", ICLR).

Items are sequence starts at every ``period``-th slot of each env's ring (consecutive items
overlap by ``L − period`` slots, ``L = burn_in + trace_length + 1``). The actor's core state is
stored once per item, taken from ``StepBatch.core_state`` at the item's first slot (the state
*before* acting there), not once per slot. Priorities are per sequence item.

A sample is a :class:`zoo.SequenceBatch`, batch-major ``[B, L, ...]``, with
``discount = 1 − terminated`` per step (the loss multiplies by γ) and episode ends handled like
the reference's zero padding (Acme's sequence adder pads past an episode's end with zeros):

* the pseudo-step after a game's end (``valid`` False) gets mask 0, discount 0 and reward 0 but
  keeps its observation, the final observation;
* after an episode ends inside the window (a later slot with ``first``), every step of the new
  one gets mask 0, reward 0, discount 0, action 0 and a zero observation;
* a terminal lost life without ``first`` (``nature_2015``) has discount 0 at its step; the game's
  following steps keep mask 1 and the core state unrolls through.

Limitation: because the pseudo-step carries discount 0, a truncation inside a sequence acts as a
terminal for every n-step target that spans the pseudo-step (only the 1-step target at the
truncated step itself bootstraps from the final observation), as in the reference.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from zoo.replay.base import Replay
from zoo.replay.types import ReplayState
from zoo.types import SequenceBatch

Array = jax.Array

__all__ = ["SequenceReplay"]


class SequenceReplay(Replay):
    """Sequence replay: samples :class:`zoo.SequenceBatch` of stored length ``L``.

    Attributes (besides :class:`~zoo.replay.base.Replay`'s):
      length: ``L = burn_in + trace_length + 1``.
      stores_state: whether core states are stored (``replay.sequence.stored_state``).
    """

    def __init__(self, *, length: int, **kwargs: Any):
        super().__init__(after=length - 1, **kwargs)
        self.length = length
        self.stores_state = self._core_template is not None

    def _batch(
        self, state: ReplayState, env: Array, item: Array, probability: Array, horizon: Any = None
    ) -> SequenceBatch:
        del horizon  # n-step returns of sequences are the loss's (the spec refuses schedules)
        cap = self.capacity_per_env
        start = item * self.period
        slots = jnp.remainder(start[:, None] + jnp.arange(self.length, dtype=start.dtype), cap)
        rows = jnp.broadcast_to(env[:, None], slots.shape)
        first = state.first[rows, slots]
        # a game started inside the window (after its first step): zero padding from there on
        new_game = jnp.cumsum(first.at[:, 0].set(False).astype(jnp.int32), axis=1) > 0
        mask = state.valid[rows, slots] & ~new_game
        observation = self.stacked(state, rows, slots)
        pad = new_game.reshape(*new_game.shape, *([1] * (observation.ndim - 2)))
        observation = jnp.where(pad, jnp.zeros((), observation.dtype), observation)
        terminated = state.terminated[rows, slots]
        core = None
        if state.core_state is not None:
            core = jax.tree.map(lambda x: x[env, item], state.core_state)
        return SequenceBatch(
            observation=observation,
            action=jnp.where(mask, state.action[rows, slots], 0),
            reward=jnp.where(mask, state.reward[rows, slots], 0.0),
            discount=jnp.where(mask, 1.0 - terminated.astype(jnp.float32), 0.0),
            core_state=core,
            probability=probability,
            mask=mask.astype(jnp.float32),
        )
