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
    """DrQ's random shift (Kostrikov et al. 2020): pad by repeating the edge, crop back at random,
    optionally followed by intensity noise (Dopamine's DrQ(ε), SPR, BBF).

    Each example's image is shifted by its own integer offset, uniform over ``[−pad, pad]`` on
    each axis (``offsets: dopamine``: ``[−pad, pad − 1]``), the same for every channel (frame) of
    it; observation and next observation get independent offsets. With ``intensity`` above 0
    the shifted image, scaled as the network scales it (``uint8`` / 255), is multiplied by
    ``1 + intensity·clip(N(0, 1), −2, 2)``, one draw per example.
    """

    kind: Literal["random_shift"] = "random_shift"
    pad: int = Field(
        4,
        ge=1,
        description="pixels of edge (replicate) padding on each side; shifts are uniform over "
        "[−pad, pad] (DrQ and Dopamine's DrQ(ε) pad by 4)",
    )
    offsets: Literal["centered", "dopamine"] = Field(
        "centered",
        description="centered: crop offsets uniform over [0, 2·pad], shifts [−pad, pad] (DrQ's "
        "kornia RandomCrop) | dopamine: randint(0, 2·pad) with its exclusive upper bound, "
        "shifts [−pad, pad − 1] (Dopamine's drq_image_augmentation, SPR and BBF's "
        "_per_image_random_crop)",
    )
    intensity: float = Field(
        0.0,
        ge=0,
        lt=0.5,
        description="scale of the intensity noise 1 + intensity·clip(N(0, 1), ±2) applied to "
        "each shifted image, one draw per example (Dopamine's DrQ(ε), SPR and BBF: 0.05); 0 "
        "= none (DrQ)",
    )
