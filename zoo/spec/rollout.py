"""The rollout section: learning from each rollout of the environments, without a replay (PQN).

``rollout: null`` (the default) learns from a replay; a ``rollout`` block makes the loop keep
only the latest ``length`` vector steps of every environment, turn them into Q(λ) targets once,
and train on them for ``epochs`` passes of ``minibatches`` shuffled minibatches (Gallici et al.
2024, "Simplifying Deep Temporal Difference Learning", https://arxiv.org/abs/2407.04811;
:mod:`zoo.rollout`). The targets come from the target network as it is when the rollout is
complete; with ``schedule.target_update_period: epochs × minibatches`` it is synced after every
learning phase, so it *is* the online network at every rollout: PQN's "no target network".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from zoo.spec.base import Model, a_or_an
from zoo.spec.replay import samples_by_priority

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = ["RolloutSpec"]

#: The fix every rule below offers besides its own.
_OR = "or set `rollout: null` to learn from a replay"


class RolloutSpec(Model):
    """PQN's replay-free learner: Q(λ) over rollouts of T steps × N environments."""

    length: int = Field(
        ge=1,
        description="T: vector steps per rollout (a rollout holds T × num_envs transitions and "
        "is learned from once it is complete)",
    )
    epochs: int = Field(1, ge=1, description="passes over each rollout")
    minibatches: int = Field(
        1,
        ge=1,
        description="minibatches per epoch; each is T × num_envs / minibatches transitions "
        "(must divide it) and one learner update",
    )
    td_lambda: float = Field(
        0.65, ge=0, le=1, description="λ of the Q(λ) targets (0: one-step Q-learning targets)"
    )
    trace: Literal["peng", "watkins"] = Field(
        "peng",
        description="peng: the λ-return with max bootstraps, never cut by the behaviour (PQN's, "
        "Peng & Williams 1996) | watkins: the trace is cut after a non-greedy action "
        "(Watkins 1989)",
    )
    truncation: Literal["bootstrap", "terminal"] = Field(
        "bootstrap",
        description="bootstrap: a time limit bootstraps from the final observation (the zoo's "
        "semantics everywhere) | terminal: every episode end is terminal (purejaxql's one "
        "`done` flag)",
    )

    def unused_settings(self, spec: AlgorithmSpec) -> Iterable[str]:
        """A rollout replaces the replay and the update period (one learning phase per
        rollout)."""
        del spec
        return (
            "replay",
            "schedule.update_period",
            "schedule.updates_per_period",
            "loss.importance_exponent",
            "loss.importance_eps",
            "loss.priority",
        )

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """The axes that mean nothing without a replay: priorities, n-step windows, sequences
        and recurrent cores, target updates in the middle of a rollout's updates, and
        distributional heads (the λ-returns are scalar)."""
        if samples_by_priority(spec.replay):
            yield (
                "replay.kind",
                f"replay.kind={spec.replay.kind!r}: a rollout is learned from whole, in shuffled "
                f"minibatches, so nothing is sampled by priority; set `replay.kind: uniform` {_OR}",
            )
        if spec.loss.n_step != 1:
            yield (
                "loss.n_step",
                f"n_step={spec.loss.n_step}: the rollout's Q(λ) targets replace n-step windows "
                f"(λ weighs every horizon); set `loss.n_step: 1` and choose `rollout.td_lambda` "
                f"{_OR}",
            )
        if spec.network.core is not None or spec.replay.sequence is not None:
            yield (
                "network.core",
                "the rollout learner trains feed-forward networks on single steps; recurrent "
                f"cores and stored sequences need a replay: set `network.core: null` and "
                f"`replay.sequence: null` {_OR}",
            )
        schedule = spec.schedule
        updates = self.epochs * self.minibatches
        if schedule.target_update_period % updates != 0:
            yield (
                "schedule.target_update_period",
                f"target_update_period={schedule.target_update_period}: the targets are computed "
                f"once per rollout, from the target network as it is then, so it may only change "
                f"between rollouts; set a multiple of rollout.epochs × rollout.minibatches = "
                f"{updates} ({updates} is PQN's: the target is the online network at every "
                f"rollout, i.e. no target network) {_OR}",
            )
        head = spec.network.head
        if getattr(head, "output", "values") != "values":
            yield (
                "network.head",
                f"{a_or_an(head.kind)} {head.kind} head: the rollout's Q(λ) targets are scalar "
                f"returns (a distributional head would learn a point mass); set `network.head: q` "
                f"{_OR}",
            )
