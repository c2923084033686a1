"""Frame storage: rebuild frame stacks from one stored frame per slot.

Atari agents see the last ``stack`` frames (Mnih et al. 2015, "Human-level control through deep
reinforcement learning", Nature 518). Storing the full stack per slot (and again as the next
observation) costs ``2·stack`` times the memory, so the replay stores only the newest frame of
each observation and rebuilds the stack at sample time from the frames of the preceding slots of
the same env.

The stack the actor sees is built by :class:`zoo.envs.VectorEnv` (``zoo/envs/core.py``,
``finish_timestep``) from envpool's: frames older than the agent's episode are zeros, as in
deepmind/dqn_zoo (``processors.py``) and google/dopamine (``dqn_agent.py`` zero-fills its state at
``begin_episode``), where envpool would repeat the game's first frame. The episode starts where a
slot's ``first`` is set: a game's first observation and, under a protocol with
``life_loss_resets_stack`` (``atari_100k``), the observation after a lost life. Every other step,
the auto-reset step that returns a game's final observation included, shifts the stack by one
frame (``o_{t+1}[:-1] == o_t[1:]``).

So the rebuild never crosses the start of an episode (``first``): frames of slots before the
episode's first slot are zeros.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

__all__ = ["stacked_frames"]


def stacked_frames(
    frames: Array, first: Array, env: Array, slot: Array, stack: int, *, repeat: bool = False
) -> Array:
    """The observation of ``(env, slot)`` as the actor saw it.

    Args:
      frames: ``[N, C, *frame_shape]`` stored frames (the full observation when ``stack == 1``).
      first: ``[N, C]`` episode-start flags (``TimeStep.first``).
      env: int array of env indices, any shape ``S``.
      slot: int array of physical slots, shape ``S``.
      stack: frames per observation.
      repeat: the slots before the episode's first frame repeat that frame (the protocol's
        ``game_start_stack: repeat``) instead of holding zeros.

    Returns:
      ``[*S, stack, *frame_shape]`` (``[*S, *frame_shape]`` when ``stack == 1``), oldest frame
      first, zeros (or, with ``repeat``, the episode's first frame) before the episode's first
      frame. The caller guarantees that slots
      ``slot − stack + 1 … slot`` hold the right steps (the eligibility rule of the replay).
    """
    if stack == 1:
        return frames[env, slot]
    capacity = frames.shape[1]
    env = env[..., None]
    # offsets back in time, oldest first: stack-1, ..., 1, 0
    offsets = jnp.arange(stack - 1, -1, -1, dtype=slot.dtype)
    # episode starts among the newest stack-1 slots (a start at the oldest slot changes nothing)
    back = jnp.arange(stack - 1, dtype=slot.dtype)
    starts = first[env, jnp.remainder(slot[..., None] - back, capacity)]
    # offset of the newest episode start; frames older than it are zeros
    limit = jnp.where(jnp.any(starts, axis=-1), jnp.argmax(starts, axis=-1), stack - 1)
    inside = offsets <= limit[..., None].astype(slot.dtype)
    offsets = jnp.minimum(offsets, limit[..., None].astype(slot.dtype))
    gathered = frames[env, jnp.remainder(slot[..., None] - offsets, capacity)]
    if repeat:  # the clipped offsets already point at the episode's first frame
        return gathered
    inside = inside.reshape(*inside.shape, *([1] * (gathered.ndim - inside.ndim)))
    return jnp.where(inside, gathered, jnp.zeros((), gathered.dtype))
