"""Containers of the replay: one vector step in, the state, and what a sample reports.

All are ``NamedTuple``s, so they are JAX pytrees that cross ``jit``/``scan`` boundaries as they
are; a ``None`` field is an empty subtree.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

Array = jax.Array
PyTree = Any

__all__ = ["PendingPriorities", "ReplayState", "SampleInfo", "StepBatch"]


class StepBatch(NamedTuple):
    """One vector step, leading axis ``num_envs``: what slot ``t`` of every env holds.

    ``reward``, ``terminated`` and ``truncated`` are the results of taking ``action`` at
    ``observation``; ``first`` and ``valid`` describe ``observation``.

    Attributes:
      observation: ``[N, *observation_shape]`` the observation the actor saw (the full stack on
        image envs; the replay keeps only its newest frame ``observation[:, -1]``).
      action: ``[N]`` int the action taken.
      reward: ``[N]`` the reward, already clipped by the protocol where it clips.
      terminated: ``[N]`` bool, the step ended the episode (or a life, where the protocol makes
        a lost life terminal).
      truncated: ``[N]`` bool, the step hit a time limit.
      first: ``[N]`` bool, ``observation`` starts the agent's episode (``TimeStep.first``): a
        game's first, or a life's where the protocol restarts the frame stack there.
      valid: ``[N]`` bool, False for envpool's auto-reset pseudo-step after a game's end
        (whose observation is the final one and whose action the env ignores).
      core_state: recurrent actor state *before* acting at ``observation``, leaves with leading
        axis ``N``; ``None`` for feed-forward agents.
      next_observation: ``[N, *observation_shape]`` the observation the environment answered
        with (at a game's end the final one), or ``None``. The ring replay ignores it (slot
        ``t + 1`` holds it); a rollout store (:mod:`zoo.rollout`) bootstraps its last step
        from it.
    """

    observation: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    first: Array
    valid: Array
    core_state: PyTree | None = None
    next_observation: Array | None = None


class SampleInfo(NamedTuple):
    """What :meth:`Replay.sample` reports beside the batch.

    Attributes:
      indices: ``[B]`` int32 flat item indices (``env * items_per_env + item``), the handle
        :meth:`Replay.update_priorities` takes.
      probability: ``[B]`` the probability with which each item was drawn (also in the batch).
      sampled_at: int32 scalar, the replay's ``cursor`` when the batch was drawn (priorities
        written later skip items overwritten since; ``None`` where not recorded).
    """

    indices: Array
    probability: Array
    sampled_at: Array | None = None


class PendingPriorities(NamedTuple):
    """An update's priorities, not yet written (:meth:`Replay.write_priorities` writes them).

    A driver lets acting overlap an update by writing its priorities just before the next
    sample; this is what it carries in between (``None`` for a replay without priorities).

    Attributes:
      indices: ``[B]`` the sampled items (``SampleInfo.indices``).
      priorities: ``[B]`` their new priorities (``LossAux.priorities``).
      sampled_at: the replay cursor when they were sampled (items overwritten since keep the
        priority they entered with).
      valid: bool scalar, whether there is anything to write (False before the first update).
    """

    indices: Array
    priorities: Array
    sampled_at: Array
    valid: Array


class ReplayState(NamedTuple):
    """The whole replay as device arrays: one ring buffer of slots per environment.

    Slot ``s`` of env ``e`` holds the vector step number ``g`` with ``g ≡ s (mod C)`` that is
    the newest one written there (``C`` = ``capacity_per_env``).

    Attributes:
      frames: ``[N, C, *frame_shape]`` the observation (newest frame on image envs) per slot.
      action: ``[N, C]`` int32.
      reward: ``[N, C]`` float32.
      terminated: ``[N, C]`` bool.
      truncated: ``[N, C]`` bool.
      first: ``[N, C]`` bool.
      valid: ``[N, C]`` bool.
      weight: ``[N, items_per_env]`` float32 sampling weights ``p^α`` (prioritised replay only,
        ``None`` for uniform): per slot for transitions, per sequence start for sequences.
      core_state: the stored recurrent state per sequence item, leaves ``[N, items_per_env,
        ...]``; ``None`` unless the spec stores states.
      cursor: int32 scalar, vector steps added so far (the next slot is ``cursor % C``; it
        overflows after 2³¹ vector steps).
      max_priority: float32 scalar, the largest priority seen so far (new items enter with it;
        initially 1).
    """

    frames: Array
    action: Array
    reward: Array
    terminated: Array
    truncated: Array
    first: Array
    valid: Array
    weight: Array | None
    core_state: PyTree | None
    cursor: Array
    max_priority: Array
