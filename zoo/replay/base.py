"""The ring buffer of steps shared by transition and sequence replay.

The replay stores **steps, not transitions**: one ring of ``C`` slots per environment, each slot
one vector step ``(o_t, a_t, r_t, terminated_t, truncated_t, first_t, valid_t)``. Items (n-step
transitions or stored sequences) are views on the ring built at sample time, so an Atari frame is
stored once. Every method is a pure function of an explicit :class:`~zoo.replay.types.ReplayState`
of device arrays, usable from jitted host-loop calls and inside ``lax.scan`` alike.

Slot semantics (env ``e``, slot ``t`` = the ``t``-th vector step that env saw): ``r_t``,
``terminated_t`` and ``truncated_t`` are the results of taking ``a_t`` at ``o_t``; ``first_t`` and
``valid_t`` describe ``o_t``, so a loop takes them from the env step that *returned* ``o_t``
(``first`` = ``elapsed_step == 0``, ``valid`` = not(terminated or truncated) of that step). With
envpool's next-step autoreset, after a terminal or truncation at slot ``t`` slot ``t + 1`` holds
the final observation with ``valid`` False (a pseudo-step: its action is ignored; it never starts
an item but is the bootstrap state of windows ending at ``t``) and slot ``t + 2`` the new game's
first observation (``first``). A lost life has no pseudo-step (``zoo.envs``): where it is
terminal, slot ``t`` has ``terminated`` and slot ``t + 1`` is ``valid`` (the game goes on); its
``first`` is set only where the protocol restarts the frame stack there (``atari_100k``).

Items and eligibility. An item starts at slot ``t`` (every slot for transitions, every
``period``-th slot for sequences) and reads slots ``[t − stack + 1, t + after]`` (the frame stack
before it, the window after it: ``after = n`` for n-step transitions, ``L − 1`` for sequences of
length ``L``). An item is *eligible* (sampled with a positive probability) only when all of those
slots are written and not yet overwritten, and its first slot is ``valid``: conservative near the
cursor (an n-step window that ends early at a terminal still waits for ``n`` slots) and at the
very start of training (the first ``stack − 1`` slots never start an item). In terms of the age
``a`` of the start slot (0 = newest slot): ``after ≤ a ≤ min(T, C) − stack`` with ``T`` the steps
added so far. Ineligible items are never sampled, so batches need no mask.

Priorities (Schaul et al. 2016, proportional): the state keeps the sampling weight ``p^α`` per
item (``α`` = ``replay.priority_exponent``). A new item enters with the largest priority seen so
far (initially 1); :meth:`Replay.update_priorities` writes ``max(p, PRIORITY_FLOOR)^α`` so that
every item stays sampleable, and maps a non-finite priority (a diverged loss) to the current
maximum rather than poisoning the prefix sums. Uniform replay is the same code with every
eligible weight 1 (and no weight array).

Host loops: jit ``add`` with ``donate_argnums=0`` (and ``update_priorities`` likewise), otherwise
XLA copies the whole buffer on every call; inside ``lax.scan`` the carry is updated in place.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from zoo.replay.frames import stacked_frames
from zoo.replay.sampling import SampleRule, proportional_sample
from zoo.replay.types import PendingPriorities, ReplayState, SampleInfo, StepBatch

Array = jax.Array
PyTree = Any

__all__ = ["PRIORITY_FLOOR", "Replay"]

PRIORITY_FLOOR = 1e-6
"""Priorities below this are raised to it, so every eligible item keeps a positive probability."""


class Replay(abc.ABC):
    """A replay of steps in per-env ring buffers; subclasses turn items into batches.

    Attributes:
      num_envs: environments (rings).
      capacity_per_env: slots per ring, ``C``.
      items_per_env: items per ring (``C`` for transitions, ``C / period`` for sequences).
      period: slots between item starts (1 for transitions).
      stack: frames per observation; only the newest is stored.
      repeat_first_frame: a stack's slots before its episode's first frame repeat that frame
        (the protocol's ``game_start_stack: repeat``) instead of holding zeros.
      after: slots an item reads after its first one.
      prioritized: whether sampling follows stored priorities.
      priority_exponent: ``α``.
      sample_rule: the replay kind's draw over the flat item weights (see
        :class:`zoo.replay.ReplayKind`); proportional by default.
      observation_shape: the (stacked) observation shape the actor sees.
      frame_shape: what one slot stores.
      observation_dtype: the dtype of stored frames.
    """

    def __init__(
        self,
        *,
        num_envs: int,
        capacity_per_env: int,
        period: int,
        after: int,
        stack: int,
        observation_shape: tuple[int, ...],
        observation_dtype: Any,
        prioritized: bool,
        priority_exponent: float,
        core_state: PyTree | None,
        sample_rule: SampleRule = proportional_sample,
        repeat_first_frame: bool = False,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if stack < 1:
            raise ValueError(f"stack must be at least 1, got {stack}")
        observation_shape = tuple(int(d) for d in observation_shape)
        if stack > 1:
            if len(observation_shape) < 1 or observation_shape[0] != stack:
                raise ValueError(
                    f"with stack={stack} observation_shape must be the stacked shape "
                    f"(stack, ...), got {observation_shape}"
                )
            self.frame_shape = observation_shape[1:]
        else:
            self.frame_shape = observation_shape
        self.num_envs = num_envs
        self.capacity_per_env = capacity_per_env
        self.period = period
        self.items_per_env = capacity_per_env // period
        self.stack = stack
        self.repeat_first_frame = repeat_first_frame
        self.after = after
        self.observation_shape = observation_shape
        self.observation_dtype = jnp.dtype(observation_dtype)
        self.prioritized = prioritized
        self.priority_exponent = float(priority_exponent)
        self.sample_rule = sample_rule
        self._core_template = None if core_state is None else jax.tree.map(jnp.asarray, core_state)

    # ------------------------------------------------------------------------ memory

    def init(self) -> ReplayState:
        """Allocate an empty state (``nbytes()`` bytes)."""
        envs, cap, items = self.num_envs, self.capacity_per_env, self.items_per_env

        def flags() -> Array:
            return jnp.zeros((envs, cap), jnp.bool_)

        core = None
        if self._core_template is not None:
            core = jax.tree.map(
                lambda x: jnp.zeros((envs, items, *x.shape), x.dtype), self._core_template
            )
        return ReplayState(
            frames=jnp.zeros((envs, cap, *self.frame_shape), self.observation_dtype),
            action=jnp.zeros((envs, cap), jnp.int32),
            reward=jnp.zeros((envs, cap), jnp.float32),
            terminated=flags(),
            truncated=flags(),
            first=flags(),
            valid=flags(),
            weight=jnp.zeros((envs, items), jnp.float32) if self.prioritized else None,
            core_state=core,
            cursor=jnp.zeros((), jnp.int32),
            max_priority=jnp.ones((), jnp.float32),
        )

    def nbytes(self) -> int:
        """Exact bytes :meth:`init` allocates, computed from shapes without allocating."""
        shapes = jax.eval_shape(self.init)
        return int(
            sum(math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(shapes))
        )

    # ------------------------------------------------------------------------ writing

    def add(self, state: ReplayState, step: StepBatch) -> ReplayState:
        """Write one vector step at the cursor (overwriting the oldest slot once full)."""
        cap = self.capacity_per_env
        pos = jnp.remainder(state.cursor, cap)
        observation = jnp.asarray(step.observation)
        frame = observation[:, -1] if self.stack > 1 else observation

        def put(buffer: Array, value: Any) -> Array:
            value = jnp.asarray(value).astype(buffer.dtype)
            return jax.lax.dynamic_update_index_in_dim(buffer, value, pos, axis=1)

        item = pos // self.period
        starts = jnp.remainder(pos, self.period) == 0
        weight = state.weight
        if weight is not None:
            new = state.max_priority**self.priority_exponent
            current = jax.lax.dynamic_index_in_dim(weight, item, axis=1, keepdims=False)
            weight = jax.lax.dynamic_update_index_in_dim(
                weight, jnp.where(starts, new, current), item, axis=1
            )
        core = state.core_state
        if core is not None:
            if step.core_state is None:
                raise ValueError("this replay stores core states; StepBatch.core_state is None")

            def put_core(buffer: Array, value: Any) -> Array:
                value = jnp.asarray(value).astype(buffer.dtype)
                current = jax.lax.dynamic_index_in_dim(buffer, item, axis=1, keepdims=False)
                value = jnp.where(starts, value, current)
                return jax.lax.dynamic_update_index_in_dim(buffer, value, item, axis=1)

            core = jax.tree.map(put_core, core, step.core_state)
        return ReplayState(
            frames=put(state.frames, frame),
            action=put(state.action, step.action),
            reward=put(state.reward, step.reward),
            terminated=put(state.terminated, step.terminated),
            truncated=put(state.truncated, step.truncated),
            first=put(state.first, step.first),
            valid=put(state.valid, step.valid),
            weight=weight,
            core_state=core,
            cursor=state.cursor + 1,
            max_priority=state.max_priority,
        )

    def seal(self, state: ReplayState) -> ReplayState:
        """Close the open episodes at a resume boundary.

        After a resume the environments restart, so the slot after the newest one of each ring
        will be a new game's first step while the newest slot never saw its successor. Marking
        the newest ``after`` slots invalid makes every item whose window would reach past the
        boundary ineligible (items that end before it are untouched), and frame stacks never
        cross the new game's ``first`` slot.
        """
        cap, count = self.capacity_per_env, jnp.minimum(state.cursor, self.after)
        back = jnp.arange(self.after)
        slots = jnp.remainder(state.cursor - 1 - back, cap)
        keep = back >= count  # fewer than `after` steps written so far
        valid = state.valid.at[:, slots].set(state.valid[:, slots] & keep[None, :])
        return state._replace(valid=valid)

    def update_priorities(
        self,
        state: ReplayState,
        indices: Array,
        priorities: Array,
        sampled_at: Array | None = None,
    ) -> ReplayState:
        """Write new priorities ``p`` of sampled items (a no-op for uniform replay).

        Args:
          state: the replay state.
          indices: ``[B]`` ``SampleInfo.indices`` of the batch.
          priorities: ``[B]`` new priorities (``LossAux.priorities``). Each becomes
            ``max(p, PRIORITY_FLOOR)^α``; non-finite ones are replaced by the running maximum.
            With duplicate indices one of the writes wins.
          sampled_at: the replay's ``cursor`` when the batch was sampled, when steps were
            added between the sample and this call (the loop writes an update's priorities
            just before the next sample, so that acting overlaps the update). An item whose
            first slot was overwritten since then now holds a new transition and keeps the
            priority it entered with. ``None``: no step was added in between.
        """
        if state.weight is None:
            return state
        p = jnp.asarray(priorities, jnp.float32)
        finite = jnp.isfinite(p)
        top = jnp.maximum(state.max_priority, jnp.max(jnp.where(finite, p, 0.0)))
        p = jnp.maximum(jnp.where(finite, p, top), PRIORITY_FLOOR)
        items = self.items_per_env
        env, item = indices // items, indices % items
        new = p**self.priority_exponent
        if sampled_at is not None:
            cap = self.capacity_per_env
            added = state.cursor - sampled_at
            overwritten = jnp.remainder(item * self.period - sampled_at, cap) < added
            new = jnp.where(overwritten, state.weight[env, item], new)
        weight = state.weight.at[env, item].set(new)
        return state._replace(weight=weight, max_priority=top)

    def no_pending_priorities(self, batch_size: int) -> PendingPriorities | None:
        """What a driver carries before the first update: nothing to write (``valid`` False),
        with the shapes of a batch of ``batch_size``; ``None`` without priorities."""
        if not self.prioritized:
            return None
        return PendingPriorities(
            indices=jnp.zeros((batch_size,), jnp.int32),
            priorities=jnp.zeros((batch_size,), jnp.float32),
            sampled_at=jnp.zeros((), jnp.int32),
            valid=jnp.zeros((), bool),
        )

    def defer_priorities(
        self, info: SampleInfo, priorities: Array | None
    ) -> PendingPriorities | None:
        """New priorities of a sampled batch, to be written later by :meth:`write_priorities`
        (``None`` without priorities). ``info`` is the batch's :class:`SampleInfo`."""
        if not self.prioritized:
            return None
        return PendingPriorities(info.indices, priorities, info.sampled_at, jnp.ones((), bool))

    def write_priorities(
        self, state: ReplayState, pending: PendingPriorities | None
    ) -> ReplayState:
        """``state`` with deferred priorities written (:meth:`update_priorities` with the
        cursor they were sampled at); unchanged where ``pending`` is ``None`` or not valid."""
        if pending is None:
            return state
        written = self.update_priorities(
            state, pending.indices, pending.priorities, pending.sampled_at
        )
        return state._replace(
            weight=jnp.where(pending.valid, written.weight, state.weight),
            max_priority=jnp.where(pending.valid, written.max_priority, state.max_priority),
        )

    def priority_state(self, state: ReplayState) -> tuple[Array | None, Array]:
        """The part of ``state`` that writing priorities changes: ``(weight, max_priority)``.

        Small beside the frames: a compiled driver passes only this through ``lax.cond`` around
        a learn step, so that XLA never copies the buffer.
        """
        return state.weight, state.max_priority

    def with_priority_state(
        self, state: ReplayState, part: tuple[Array | None, Array]
    ) -> ReplayState:
        """``state`` with its :meth:`priority_state` replaced by ``part``."""
        weight, top = part
        return state._replace(weight=weight, max_priority=top)

    # ------------------------------------------------------------------------ reading

    def _inside(self, state: ReplayState, item: Array) -> Array:
        """Whether items (indices within an env) have all their slots in the ring.

        The slots ``[t − stack + 1, t + after]`` of an item starting at ``t`` must be written and
        not overwritten: ``after ≤ age(t) ≤ min(T, C) − stack`` where ``age`` counts slots back
        from the newest (0) and ``T`` is the number of steps added.
        """
        cap = self.capacity_per_env
        age = jnp.remainder(jnp.remainder(state.cursor, cap) - 1 - item * self.period, cap)
        written = jnp.minimum(state.cursor, cap)
        return (age >= self.after) & (age <= written - self.stack)

    def _eligible_flat(self, state: ReplayState) -> Array:
        """``[num_envs · items_per_env]`` bool eligibility, flat (env-major).

        Computed on a flat index rather than broadcast over ``[num_envs, items]``: XLA CPU
        sampled ~3x slower at 8 envs × 125k slots with the broadcast form.
        """
        flat = jnp.arange(self.num_envs * self.items_per_env, dtype=jnp.int32)
        inside = self._inside(state, jnp.remainder(flat, self.items_per_env))
        return inside & state.valid[:, :: self.period].reshape(-1)

    def eligible(self, state: ReplayState) -> Array:
        """``[num_envs, items_per_env]`` bool: items sampleable now.

        An item is eligible when every slot it reads is in the ring (see :meth:`_inside`) and its
        first slot is ``valid``.
        """
        return self._eligible_flat(state).reshape(self.num_envs, self.items_per_env)

    def _weights(self, state: ReplayState) -> Array:
        """``[num_envs · items_per_env]`` flat sampling weights, zero for ineligible items."""
        eligible = self._eligible_flat(state)
        if state.weight is None:
            return eligible.astype(jnp.float32)
        return jnp.where(eligible, state.weight.reshape(-1), 0.0)

    def size(self, state: ReplayState) -> Array:
        """int32 scalar: the number of sampleable items."""
        return jnp.sum(self._eligible_flat(state), dtype=jnp.int32)

    def can_sample(self, state: ReplayState, batch_size: int) -> Array:
        """bool scalar: at least ``batch_size`` items are sampleable."""
        return self.size(state) >= batch_size

    def sample(
        self, state: ReplayState, key: Array, batch_size: int, horizon: Any = None
    ) -> tuple[Any, SampleInfo]:
        """Draw ``batch_size`` items with replacement by the kind's rule over eligible items.

        ``P(i) ∝ p_i^α`` for ``prioritized`` (uniform over eligible items without priorities);
        another registered kind supplies its own rule (:class:`zoo.replay.ReplayKind`).

        ``batch_size`` is static (``jax.jit(replay.sample, static_argnums=2)``). Check
        :meth:`can_sample` first: with no eligible item the batch is garbage with probability 0.
        ``horizon``: ``(n, γ)`` for this batch's n-step windows where they are scheduled
        (:class:`zoo.horizon.Horizon`; ``n`` at most the replay's own); ``None``: the replay's.
        """
        indices, probability = self.sample_rule(key, self._weights(state), batch_size)
        env = indices // self.items_per_env
        item = indices % self.items_per_env
        batch = self._batch(state, env, item, probability, horizon)
        return batch, SampleInfo(indices=indices, probability=probability, sampled_at=state.cursor)

    @abc.abstractmethod
    def _batch(
        self, state: ReplayState, env: Array, item: Array, probability: Array, horizon: Any = None
    ) -> Any:
        """The batch of the sampled items (a Transition or a SequenceBatch); ``horizon`` as
        :meth:`sample`'s (a kind without n-step windows ignores it)."""

    def observation(self, state: ReplayState, env: Array, slot: Array) -> Array:
        """The (stacked) observation of physical ``slot`` of ``env`` as the actor saw it.

        For inspection and tests; valid where the slot and its ``stack − 1`` predecessors are in
        the ring.
        """
        return self.stacked(state, jnp.asarray(env), jnp.asarray(slot))

    def stacked(self, state: ReplayState, env: Array, slot: Array) -> Array:
        """:func:`~zoo.replay.frames.stacked_frames` of ``(env, slot)`` under this replay's
        stack and fill."""
        return stacked_frames(
            state.frames, state.first, env, slot, self.stack, repeat=self.repeat_first_frame
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self.num_envs}, "
            f"capacity_per_env={self.capacity_per_env}, items_per_env={self.items_per_env}, "
            f"stack={self.stack}, prioritized={self.prioritized}, "
            f"nbytes={self.nbytes():,})"
        )
