"""n-step transitions built at sample time from the ring of steps.

A window starts at every valid slot ``t``. With ``k = min(n, t' − t + 1)`` where ``t' ≥ t`` is the
first slot that terminated or truncated (``k = n`` if none does within ``n`` slots) and
``d = 1 − terminated``::

    reward   = r_t + γ·d_t·r_{t+1} + … + γ^{k−1}·(d_t⋯d_{t+k−2})·r_{t+k−1}
    discount = γ^{k−1}·d_t⋯d_{t+k−1}
    next_observation = o_{t+k}

so a termination gives discount 0 and a truncation bootstraps from the final observation (the
pseudo-step's, at ``t + k``) with the γ powers; the loss multiplies by γ once more
(``docs/design.md``, "n-step transitions"). Pseudo-steps (``valid`` False) never start a window;
they only supply the bootstrap observation of windows ending just before them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from zoo.replay.base import Replay
from zoo.replay.types import ReplayState
from zoo.types import FutureSteps, Transition

Array = jax.Array

__all__ = ["TransitionReplay", "n_step_window"]


def n_step_window(
    reward: Array,
    terminated: Array,
    truncated: Array,
    n: int,
    discount: Any,
    length: Any = None,
) -> tuple[Array, Array, Array]:
    """The n-step reward, discount and length ``k`` of windows given their next ``n`` steps.

    Args:
      reward: ``[..., n]`` rewards ``r_t … r_{t+n−1}``.
      terminated: ``[..., n]`` bool.
      truncated: ``[..., n]`` bool.
      n: the steps given (static).
      discount: the agent discount γ (a number or a traced scalar).
      length: the window's length when shorter than ``n`` (a traced int ≤ ``n``: a scheduled
        n-step length); ``None``: ``n``.

    Returns:
      ``(reward [...], discount [...], k [...] int32)`` as in the module docstring.
    """
    end = (terminated | truncated).astype(jnp.int32)
    ended_before = (jnp.cumsum(end, axis=-1) - end) > 0
    alive = ~ended_before  # step j belongs to the window
    if length is not None:
        alive = alive & (jnp.arange(n) < length)
    d = jnp.where(alive, 1.0 - terminated.astype(jnp.float32), 1.0)
    d_before = jnp.cumprod(jnp.concatenate([jnp.ones_like(d[..., :1]), d[..., :-1]], -1), -1)
    powers = jnp.asarray(discount, jnp.float32) ** jnp.arange(n, dtype=jnp.float32)
    n_reward = jnp.sum(jnp.where(alive, powers * d_before * reward, 0.0), axis=-1)
    k = jnp.sum(alive, axis=-1, dtype=jnp.int32)
    n_discount = jnp.asarray(discount, jnp.float32) ** (k - 1).astype(jnp.float32) * jnp.prod(
        d, axis=-1
    )
    return n_reward, n_discount, k


class TransitionReplay(Replay):
    """Feed-forward replay: samples :class:`zoo.Transition` n-step windows.

    ``sample`` returns ``Transition(observation [B, *obs], action [B], reward [B], discount [B],
    next_observation [B, *obs], probability [B], mask [B] of ones)``.

    With ``future = K`` each item also carries the ``K`` steps after it
    (:class:`zoo.types.FutureSteps`: ``o_{t+1} … o_{t+K}``, ``a_t … a_{t+K−1}`` and whether each
    ``o_{t+k}`` is still in the episode of ``o_t``), for a loss that predicts them (SPR); an
    item then needs ``max(n, K)`` slots after it.

    Attributes (besides :class:`~zoo.replay.base.Replay`'s):
      n_step: ``n``.
      discount: ``γ``.
      future: ``K`` (0: none).
    """

    def __init__(self, *, n_step: int, discount: float, future: int = 0, **kwargs: Any):
        if future < 0:
            raise ValueError(f"future must be at least 0, got {future}")
        super().__init__(period=1, after=max(n_step, future), **kwargs)
        self.n_step = n_step
        self.discount = float(discount)
        self.future = int(future)

    def _batch(
        self, state: ReplayState, env: Array, item: Array, probability: Array, horizon: Any = None
    ) -> Transition:
        cap, n = self.capacity_per_env, self.n_step
        length, gamma = (None, self.discount) if horizon is None else horizon
        slot = item
        window = jnp.remainder(slot[:, None] + jnp.arange(n, dtype=slot.dtype), cap)
        rows = env[:, None]
        reward, discount, k = n_step_window(
            state.reward[rows, window],
            state.terminated[rows, window],
            state.truncated[rows, window],
            n,
            gamma,
            length,
        )
        next_slot = jnp.remainder(slot + k, cap)
        return Transition(
            observation=self.stacked(state, env, slot),
            action=state.action[env, slot],
            reward=reward,
            discount=discount,
            next_observation=self.stacked(state, env, next_slot),
            probability=probability,
            mask=jnp.ones_like(probability),
            future=self._future(state, env, slot) if self.future else None,
        )

    def _future(self, state: ReplayState, env: Array, slot: Array) -> FutureSteps:
        """The ``K`` steps after each item starting at ``slot``: observations at ``t+1 … t+K``,
        actions at ``t … t+K−1``, and 1 while no step from ``t`` on has ended the episode."""
        cap, steps = self.capacity_per_env, self.future
        offsets = jnp.arange(steps, dtype=slot.dtype)
        taken = jnp.remainder(slot[:, None] + offsets, cap)  # t … t+K−1
        rows = jnp.broadcast_to(env[:, None], taken.shape)
        ended = state.terminated[rows, taken] | state.truncated[rows, taken]
        inside = jnp.cumsum(ended.astype(jnp.int32), axis=-1) == 0
        return FutureSteps(
            observation=self.stacked(state, rows, jnp.remainder(taken + 1, cap)),
            action=state.action[rows, taken],
            mask=inside.astype(jnp.float32),
        )
