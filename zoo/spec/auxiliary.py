"""The auxiliary-loss axis: a second objective the learner adds to the TD loss of every item.

``auxiliary: null`` (the neutral element) adds nothing. ``{kind: spr}`` is self-predictive
representations (Schwarzer et al. 2021, "Data-Efficient Reinforcement Learning with
Self-Predictive Representations", https://arxiv.org/abs/2007.05929), as SPR, SR-SPR and BBF use
it (google-research ``bigger_better_faster`` ``spr_agent.py``): from the online encoder's latent
of ``o_t`` an action-conditioned transition model predicts the latents of the next ``steps``
observations; each prediction, projected and passed through a predictor, is compared by cosine
with the target network's projection of the (augmented) observation it predicts, while that
observation is still in the episode.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from zoo.spec.base import Component

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["Auxiliary", "Spr"]


class Auxiliary(Component):
    """Base of the auxiliary losses: they learn from sampled transitions, not from rollouts or
    stored sequences (a user's too)."""

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """Refuse rollouts (PQN) and stored sequences (recurrent cores)."""
        if spec.rollout is not None or spec.replay.sequence is not None:
            what = "a rollout (PQN)" if spec.rollout is not None else "stored sequences"
            yield (
                "auxiliary",
                f"an auxiliary loss learns from sampled transitions, and {what} are not; set "
                "`auxiliary: null`",
            )


class Spr(Auxiliary):
    """SPR's K-step latent prediction (see the module doc).

    The transition model is BBF's: the latent map with the one-hot action tiled over it as extra
    channels, conv 3×3 → ReLU → conv 3×3 → ReLU, min–max normalised where the torso's features
    are (``network.torso_norm``). The projection is the first hidden layer of the Q head (before
    its ReLU), the predictor one dense layer of the same width; the targets are the target
    network's projections of the future observations' latents, under stop-gradient. Per item
    the loss is ``weight · mean_k mask_k · ‖p̂_k − ŷ_k‖²`` (unit vectors: ``2 − 2·cos``).
    """

    kind: Literal["spr"] = "spr"
    steps: int = Field(
        5, ge=1, le=64, description="K: future steps predicted (SPR, SR-SPR and BBF: 5, `jumps`)"
    )
    weight: float = Field(
        5.0,
        gt=0,
        description="weight of the per-item loss averaged over the K steps (`spr_weight`: 5 in "
        "SPR, SR-SPR and BBF; their code's format, not the paper's λ = 2 over a sum)",
    )

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """Besides the base's: a projection to predict with (the Q head's first hidden layer,
        one that both dueling streams read)."""
        yield from super().spec_problems(spec)
        network = spec.network
        if not network.hidden:
            yield (
                "auxiliary",
                "spr projects with the Q head's first hidden layer and the network has none; "
                "give `network.hidden` (BBF: [2048], SPR: [512])",
            )
        elif network.dueling and not network.shared_hidden:
            yield (
                "auxiliary",
                "spr projects with the Q head's first hidden layer, and with dueling each "
                "stream has its own; set `network.shared_hidden: true` (BBF's and Dopamine's "
                "one trunk)",
            )
