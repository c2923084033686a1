"""Frame storage: rebuild frame stacks from one stored frame per slot.

Atari agents see the last ``stack`` frames (Mnih et al. 2015, "Human-level control through deep
reinforcement learning", Nature 518). Storing the full stack per slot (and again as the next
observation) costs ``2·stack`` times the memory, so the replay stores only the newest frame of
each observation and rebuilds the stack at sample time from the frames of the preceding slots of
the same env.

What envpool (1.2.5, ``Pong-v5``/``Breakout-v5``, ``env_type="gym"``) puts in the stack, found
empirically:

* at ``reset()`` and at every auto-reset (after a termination *or* a truncation) the stack is the
  game's first frame repeated, ``[f0, f0, f0, f0]`` (not zeros);
* every other step, the auto-reset pseudo-step that returns the final observation included,
  shifts the stack by one frame (``o_{t+1}[:-1] == o_t[1:]``);
* a life loss with ``episodic_life=True`` does **not** reset the stack: the pseudo-step after it
  shifts in a new frame and the game goes on.

So the rebuild never crosses the start of a *game* (``first``): frames of slots before the
game's first slot are replaced by the first slot's frame.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

__all__ = ["stacked_frames"]


def stacked_frames(frames: Array, first: Array, env: Array, slot: Array, stack: int) -> Array:
    """The observation of ``(env, slot)`` as the actor saw it.

    Args:
      frames: ``[N, C, *frame_shape]`` stored frames (the full observation when ``stack == 1``).
      first: ``[N, C]`` game-start flags.
      env: int array of env indices, any shape ``S``.
      slot: int array of physical slots, shape ``S``.
      stack: frames per observation.

    Returns:
      ``[*S, stack, *frame_shape]`` (``[*S, *frame_shape]`` when ``stack == 1``), oldest frame
      first. The caller guarantees that slots ``slot − stack + 1 … slot`` hold the right steps
      (the eligibility rule of the replay).
    """
    if stack == 1:
        return frames[env, slot]
    capacity = frames.shape[1]
    env = env[..., None]
    # offsets back in time, oldest first: stack-1, ..., 1, 0
    offsets = jnp.arange(stack - 1, -1, -1, dtype=slot.dtype)
    # game starts among the newest stack-1 slots (a start at the oldest slot changes nothing)
    back = jnp.arange(stack - 1, dtype=slot.dtype)
    starts = first[env, jnp.remainder(slot[..., None] - back, capacity)]
    # offset of the newest game start; frames older than it repeat its frame
    limit = jnp.where(jnp.any(starts, axis=-1), jnp.argmax(starts, axis=-1), stack - 1)
    offsets = jnp.minimum(offsets, limit[..., None].astype(slot.dtype))
    return frames[env, jnp.remainder(slot[..., None] - offsets, capacity)]
