"""The augmentation axis: what the learner does to the observations of each sampled batch.

``augmentation: null`` (the neutral element) leaves batches as the replay gives them. A user's
augmentation is a config subclassing :class:`Augmentation` registered on the ``"augmentation"``
axis (:mod:`zoo.augmentation` gives the factory's signature).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from zoo.spec.base import Component

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["AUGMENTS_TRANSITIONS_ONLY", "Augmentation", "RandomShift"]

#: Why an augmentation is refused beside rollouts or sequences.
AUGMENTS_TRANSITIONS_ONLY = (
    "augmentation is applied to sampled transitions (observation and next_observation, each "
    "example on its own); {what} {why}; set `augmentation: null` or drop {field}"
)


class Augmentation(Component):
    """Base of the augmentations: the learner applies them to transition batches only.

    The rule (:meth:`spec_problems`) holds for every subclass, a user's too: the rollout learner's
    targets are computed from the unaugmented next observations before its minibatches are drawn,
    and a stored sequence would need one shift for all its steps and the recurrent state.
    """

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """Refuse rollouts (PQN) and stored sequences (recurrent cores)."""
        if spec.rollout is not None:
            yield (
                "augmentation",
                AUGMENTS_TRANSITIONS_ONLY.format(
                    what="a rollout (PQN)",
                    why="learns from Q(λ) targets computed before its minibatches are drawn",
                    field="`rollout`",
                ),
            )
        if spec.replay.sequence is not None:
            yield (
                "augmentation",
                AUGMENTS_TRANSITIONS_ONLY.format(
                    what="stored sequences (a recurrent core)",
                    why="would need one shift for every step of a sequence, which is not built",
                    field="`replay.sequence` and `network.core`",
                ),
            )


class RandomShift(Augmentation):
    """DrQ's random shift (Kostrikov et al. 2020): pad by repeating the edge, crop back at random.

    Each example's image is shifted by its own integer offset, uniform over ``[−pad, pad]`` on
    each axis, the same for every channel (frame) of it; observation and next observation get
    independent offsets.
    """

    kind: Literal["random_shift"] = "random_shift"
    pad: int = Field(
        4,
        ge=1,
        description="pixels of edge (replicate) padding on each side; shifts are uniform over "
        "[−pad, pad] (DrQ and Dopamine's DrQ(ε) pad by 4)",
    )
