"""The data a run learns from: build it for a spec, and say how the loop learns from it.

::

    data = zoo.data.build_data(spec, num_envs=8, observation_shape=(4, 84, 84),
                               observation_dtype=jnp.uint8, stack=4)
    learn_step, credit = zoo.data.learning_parts(data, learner, spec, num_envs=8)

Two data kinds exist: a replay (:mod:`zoo.replay`; sampled, one :class:`zoo.learn.LearnStep` per
``schedule.update_period`` credited transitions) and, for a spec with a ``rollout`` section, the
rollout store of PQN (:mod:`zoo.rollout`; one learning phase per rollout). This module sits above
both and above :mod:`zoo.learn`, so that the replay only stores and samples and imports none of
them (no import circle replay → rollout → learn → replay).

:func:`learning_parts` asks the data for its own ``learning_parts(learner, spec, num_envs)``
(:meth:`zoo.rollout.RolloutStore.learning_parts`; a new data kind joins the same way, editing
nothing here but :func:`build_data`'s choice). A replay has no such method, since
:mod:`zoo.learn` imports the replay: its pair is :func:`zoo.learn.replay_learning_parts`.
"""

from __future__ import annotations

from typing import Any

from zoo.learn import LearnStep, UpdateCredit, replay_learning_parts
from zoo.learner import DataParallelLearner, Learner
from zoo.networks.auxiliary import build_auxiliary
from zoo.replay import Replay, build_replay
from zoo.rollout import RolloutStore, build_rollout
from zoo.spec import AlgorithmSpec

__all__ = ["build_data", "learning_parts"]


def build_data(
    spec: AlgorithmSpec,
    *,
    num_envs: int,
    observation_shape: tuple[int, ...],
    observation_dtype: Any,
    stack: int = 1,
    core_state: Any = None,
    repeat_first_frame: bool = False,
) -> Replay | RolloutStore:
    """The data ``spec`` learns from; allocates nothing (call ``init()``).

    With a ``rollout`` section, a :class:`zoo.rollout.RolloutStore` of ``rollout.length`` vector
    steps (stacked observations stored whole: ``stack``, ``core_state`` and
    ``repeat_first_frame`` do not apply); otherwise :func:`zoo.replay.build_replay` with the same
    arguments (see it for their meaning and its errors).
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1, got {num_envs}")
    if getattr(spec, "rollout", None) is not None:
        return build_rollout(
            spec,
            num_envs=num_envs,
            observation_shape=observation_shape,
            observation_dtype=observation_dtype,
        )
    auxiliary = build_auxiliary(spec)
    return build_replay(
        spec,
        num_envs=num_envs,
        observation_shape=observation_shape,
        observation_dtype=observation_dtype,
        stack=stack,
        core_state=core_state,
        repeat_first_frame=repeat_first_frame,
        # the steps after each transition that the spec's auxiliary loss predicts (SPR's K)
        future=auxiliary.future if auxiliary is not None else 0,
    )


def learning_parts(
    data: Any,
    learner: Learner | DataParallelLearner,
    spec: AlgorithmSpec,
    num_envs: int,
) -> tuple[LearnStep, UpdateCredit]:
    """How the loop learns from ``data``: ``(learn_step, credit)``.

    The data's own ``learning_parts`` method where it has one, else, for a replay,
    :func:`zoo.learn.replay_learning_parts`.

    Raises:
      TypeError: ``data`` is neither a replay nor has a ``learning_parts`` method.
    """
    own = getattr(data, "learning_parts", None)
    if own is not None:
        return own(learner, spec, num_envs)
    if isinstance(data, Replay):
        return replay_learning_parts(data, learner, spec, num_envs)
    raise TypeError(
        f"{type(data).__name__} is no data kind: a replay, or a store with a "
        "learning_parts(learner, spec, num_envs) -> (learn_step, credit) method"
    )
