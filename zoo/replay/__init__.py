"""Replay: per-env ring buffers of steps; transitions, frame stacks and sequences at sample time.

::

    replay = zoo.replay.build_replay(spec, num_envs=8, observation_shape=(4, 84, 84),
                                     observation_dtype=jnp.uint8, stack=4)
    replay.nbytes()                      # exact bytes, before allocating
    state = replay.init()
    state = replay.add(state, StepBatch(observation, action, reward, terminated, truncated,
                                        first, valid))
    batch, info = replay.sample(state, key, batch_size)      # Transition | SequenceBatch
    state = replay.update_priorities(state, info.indices, aux.priorities)
    pending = replay.defer_priorities(info, aux.priorities)  # or write them later:
    state = replay.write_priorities(state, pending)          # (what the training loop does)

Everything is a pure function of an explicit :class:`ReplayState` of device arrays, so the same
replay serves a host loop (jit ``add`` and ``update_priorities`` with ``donate_argnums=0``, and
``sample`` with ``static_argnums=2``) and a loop compiled into ``lax.scan`` (state in the carry).
See :mod:`zoo.replay.base` for the slot semantics and eligibility rule,
:mod:`zoo.replay.transitions` for n-step windows, :mod:`zoo.replay.frames` for frame stacks
(Mnih et al. 2015) and :mod:`zoo.replay.sequences` for R2D2 sequences (Kapturowski et al. 2019).

The replay stores and samples; it builds no learn step and imports nothing of the learner, the
learn step, the rollout store or the loop. :func:`zoo.data.build_data` builds the data a spec
learns from (this replay, or a rollout store for a spec with a ``rollout`` section) and
:func:`zoo.data.learning_parts` says how the loop learns from it (for a replay,
:func:`zoo.learn.replay_learning_parts`).

Sampling (Schaul et al. 2016, proportional) is O(N) per call over all items (see
:mod:`zoo.replay.sampling`). Measured on the project's 2-core CPU (jax 0.10.2), one jitted
``sample`` of a batch of 32 n = 3 transitions with stacks of 4 84×84 frames, at 1M items (1 or
8 envs, 7.07 GB of state): 0.7–1.4 ms uniform, 1.3–2.4 ms prioritised (medians of 100 calls,
spread from run to run with machine load) — a few percent of a ~40 ms Nature-CNN update. ``add``
(donated) takes ~0.02 ms at that size, i.e. it writes in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zoo.replay.base import PRIORITY_FLOOR, Replay
from zoo.replay.frames import stacked_frames
from zoo.replay.kinds import ReplayKind, replay_kind
from zoo.replay.sampling import SampleRule, proportional_sample
from zoo.replay.sequences import SequenceReplay
from zoo.replay.transitions import TransitionReplay, n_step_window
from zoo.replay.types import PendingPriorities, ReplayState, SampleInfo, StepBatch

if TYPE_CHECKING:  # pragma: no cover - the spec is only read, never constructed, here
    from zoo.spec import AlgorithmSpec

PyTree = Any

__all__ = [
    "PRIORITY_FLOOR",
    "PendingPriorities",
    "Replay",
    "ReplayKind",
    "ReplayState",
    "SampleInfo",
    "SampleRule",
    "SequenceReplay",
    "StepBatch",
    "TransitionReplay",
    "build_replay",
    "n_step_window",
    "proportional_sample",
    "replay_kind",
    "stacked_frames",
]


def build_replay(
    spec: AlgorithmSpec,
    *,
    num_envs: int,
    observation_shape: tuple[int, ...],
    observation_dtype: Any,
    stack: int = 1,
    core_state: PyTree | None = None,
    repeat_first_frame: bool = False,
    future: int = 0,
) -> TransitionReplay | SequenceReplay:
    """Build the replay a spec describes; allocates nothing (call ``init()``).

    Args:
      spec: the algorithm spec; reads ``replay.kind``, ``replay.capacity`` (transitions in total,
        ``capacity // num_envs`` slots per env), ``replay.priority_exponent``, ``replay.sequence``
        and, for transitions, ``loss.n_step`` and ``loss.discount``.
      num_envs: environments stepped together (one ring each).
      observation_shape: the observation the actor sees; with ``stack > 1`` the stacked shape
        ``(stack, H, W)``, of which one frame per slot is stored.
      observation_dtype: the dtype stored (uint8 for Atari frames).
      stack: frames per observation (1 = store observations whole).
      core_state: for recurrent specs with ``replay.sequence.stored_state``, a template of one
        env's core state (e.g. ``net.initial_state()``); ignored otherwise.
      repeat_first_frame: rebuilt stacks repeat their episode's first frame where the actor's
        did (the protocol's ``game_start_stack: repeat``); zeros otherwise.
      future: transitions carry the ``future`` steps after them (:class:`zoo.types.FutureSteps`,
        for a loss that predicts them); 0: none.

    Returns:
      A :class:`TransitionReplay` (feed-forward) or :class:`SequenceReplay` (``replay.sequence``
      set; sequence items start every ``period`` slots, and the slots per env are rounded down to
      a multiple of ``period``).

    Raises:
      ValueError: the spec has a ``rollout`` section (it learns from no replay: build its data
        with :func:`zoo.data.build_data`), the capacity per env is too small for one window (with
        its frame stack), or a stored-state sequence replay got no ``core_state`` template.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1, got {num_envs}")
    if getattr(spec, "rollout", None) is not None:
        name = getattr(spec, "name", "") or "this spec"
        raise ValueError(
            f"{name} has a `rollout` section: it learns from a rollout store, not a replay; "
            "build its data with zoo.data.build_data instead of zoo.replay.build_replay"
        )
    replay = spec.replay
    per_env = replay.capacity // num_envs
    kind = replay_kind(spec)
    common: dict[str, Any] = dict(
        num_envs=num_envs,
        stack=stack,
        repeat_first_frame=repeat_first_frame,
        observation_shape=tuple(observation_shape),
        observation_dtype=observation_dtype,
        prioritized=kind.prioritized,
        sample_rule=kind.sample,
        priority_exponent=replay.priority_exponent,
    )
    seq = replay.sequence
    if seq is None:
        n = spec.loss.n_step
        need = max(n, future) + stack
        if per_env < need:
            window = f"an {n}-step window" + (f" and {future} future steps" if future else "")
            rule = "max(n_step, future steps) + stack" if future else "n_step + stack"
            raise ValueError(
                f"replay.capacity={replay.capacity} gives {per_env} slots per env for "
                f"num_envs={num_envs}; {window} with a stack of {stack} needs "
                f"{need} ({rule}): raise replay.capacity to at least {need * num_envs}"
            )
        return TransitionReplay(
            capacity_per_env=per_env,
            n_step=n,
            discount=spec.loss.discount,
            future=future,
            core_state=None,
            **common,
        )
    length, period = seq.length, seq.period
    per_env = per_env // period * period
    # at every moment at least one item start must lie in the eligible age range
    need = -(-(length + stack + period - 2) // period) * period
    if per_env < need:
        raise ValueError(
            f"replay.capacity={replay.capacity} gives {per_env} slots per env (a multiple of "
            f"period={period}) for num_envs={num_envs}; sequences of length {length} "
            f"(burn_in + trace_length + 1) with a stack of {stack} need {need}: raise "
            f"replay.capacity to at least {need * num_envs}"
        )
    if seq.stored_state and core_state is None:
        raise ValueError(
            "replay.sequence.stored_state is true: pass core_state=net.initial_state() (one "
            "env's core state) to build_replay, or set replay.sequence.stored_state: false"
        )
    return SequenceReplay(
        capacity_per_env=per_env,
        period=period,
        length=length,
        core_state=core_state if seq.stored_state else None,
        **common,
    )
