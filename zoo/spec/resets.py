"""The resets axis: re-initialising parts of the network during training.

``resets: null`` (the neutral element) never resets. A reset, after every ``every`` learner
updates from update ``first`` on (at most ``count`` of them), draws a fresh initialisation of the
whole network and

- **shrinks and perturbs** the parts named in ``shrink``: ``θ ← shrink_factor·θ +
  perturb_factor·θ_fresh`` (Ash & Adams 2020, "On Warm-Starting Neural Network Training",
  https://arxiv.org/abs/1910.08475; D'Oro et al. 2023's SR-SPR, 0.8/0.2; Schwarzer et al.
  2023's BBF, 0.5/0.5, on the encoder and the transition model);
- **keeps** the parts named in ``keep`` as they are;
- **re-initialises** every other parameter: ``θ ← θ_fresh`` (Nikishin et al. 2022, "The
  Primacy Bias in Deep Reinforcement Learning", https://arxiv.org/abs/2205.07802: the last
  layers; BBF: the projection, predictor and Q head).

The target network gets the same recipe with a fresh initialisation of its own, and the
optimizer's state starts over, as BBF's ``jit_reset`` does (``target: keep`` and ``optimizer:
keep`` leave them). Resets are counted in learner updates, so at a replay ratio above one
(``schedule.updates_per_period``) they follow the updates, not the transitions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from zoo.spec.base import Model, path_within

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["ResetSpec"]


class ResetSpec(Model):
    """When the network is reset, and what each part of it becomes (see the module doc)."""

    every: int = Field(ge=1, description="learner updates between resets")
    first: int | None = Field(
        None,
        ge=1,
        description="the learner update after which the first reset happens; null = `every`",
    )
    count: int | None = Field(
        None, ge=1, description="resets at most (later ones are skipped); null = no limit"
    )
    shrink: list[str] = Field(
        default_factory=list,
        description="parts of the network (dotted parameter paths: torso, streams.hidden.0) "
        "shrunk and perturbed toward a fresh initialisation: θ ← shrink_factor·θ + "
        "perturb_factor·θ_fresh",
    )
    shrink_factor: float = Field(0.5, ge=0, le=1, description="weight of the old parameters")
    perturb_factor: float = Field(0.5, ge=0, le=1, description="weight of the fresh initialisation")
    keep: list[str] = Field(
        default_factory=list,
        description="parts of the network left as they are; every part neither shrunk nor kept "
        "is re-initialised",
    )
    target: Literal["reset", "keep"] = Field(
        "reset",
        description="reset: the target network gets the same recipe toward a fresh "
        "initialisation of its own (BBF) | keep: it is left as it is",
    )
    optimizer: Literal["reset", "keep"] = Field(
        "reset",
        description="reset: the optimizer's state starts over (moments and step count; what "
        "BBF's jit_reset does in effect) | keep: it is left as it is",
    )

    @property
    def first_update(self) -> int:
        """The learner update after which the first reset happens (``first``, else ``every``)."""
        return self.first if self.first is not None else self.every

    def done_after(self, updates: Any) -> Any:
        """Resets after ``updates`` learner updates, ``count`` aside (a Python int or a JAX
        integer array alike): none before ``first``, then one more every ``every``."""
        first = self.first_update
        return (updates >= first) * ((updates - first) // self.every + 1)

    def due(self, update: Any) -> Any:
        """Whether a reset follows learner update ``update`` (counted from 1): a Python int or
        a JAX integer array alike (the learner asks inside its compiled update)."""
        first = self.first_update
        since = update - first
        due = (update >= first) & (since % self.every == 0)
        if self.count is not None:
            due = due & (since // self.every < self.count)
        return due

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """A part is shrunk or kept, not both; a shrink with nothing to shrink is a mistake."""
        del spec
        for path in self.shrink:
            for kept in self.keep:
                if path_within(path, kept) or path_within(kept, path):
                    yield (
                        "resets.keep",
                        f"{kept!r} overlaps the shrunk part {path!r}: a parameter is shrunk, "
                        "kept or re-initialised; give each part one of them",
                    )
        if self.shrink and self.shrink_factor == 1 and self.perturb_factor == 0:
            yield (
                "resets.shrink_factor",
                "shrink_factor 1 with perturb_factor 0 leaves the shrunk parts as they are; "
                "list them under `resets.keep` instead",
            )
