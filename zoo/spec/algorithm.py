"""The algorithm: a point in the product of the axes, checked as a whole.

:class:`AlgorithmSpec` validates field by field, then asks every part of the tree for the
combinations it cannot work with (:meth:`zoo.spec.base.Model.spec_problems`): the rules live
with the parts that impose them, and all problems are reported at once.

Units: every count of steps is in *transitions* (agent steps summed over environments), except
``target_update_period`` and the steps of schedules evaluated by the learner (β, learning rate),
which are *learner updates*.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, Union

from pydantic import Field, model_validator

from zoo.spec.augmentation import RandomShift
from zoo.spec.auxiliary import Spr
from zoo.spec.base import Model, at, axis, walk
from zoo.spec.loss import LossSpec
from zoo.spec.network import NetworkSpec
from zoo.spec.optimizers import Adam, Optimizers
from zoo.spec.replay import ReplaySpec
from zoo.spec.resets import ResetSpec
from zoo.spec.rollout import RolloutSpec
from zoo.spec.schedules import LinearSchedule, Schedule, probability_problems, schedule_points

__all__ = ["AlgorithmSpec", "ScheduleSpec", "spec_problems", "unused_settings"]

_Optimizer = axis("optimizer", Optimizers, None)
_Augmentation = axis("augmentation", Union[RandomShift], None)
_Auxiliary = axis("auxiliary", Union[Spr], None)


class ScheduleSpec(Model):
    """When things happen."""

    update_period: int = Field(
        4, ge=1, description="transitions inserted per `updates_per_period` learner updates"
    )
    updates_per_period: int = Field(
        1,
        ge=1,
        le=256,
        description="learner updates per `update_period` transitions: above 1, a replay ratio "
        "above one (D'Oro et al. 2023's replay ratio; BBF: 2, SR-SPR: 8, with update_period 1 "
        "— the gin files' replay_ratio 64 and 256 count sampled items, over batch 32); the "
        "target update period and learner-update schedules count these updates",
    )
    target_update_period: int = Field(
        2000, ge=1, description="learner updates between target updates"
    )
    target_update_rate: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Polyak rate of each target update: 1 copies the online parameters",
    )
    epsilon: Schedule = Field(
        default_factory=lambda: LinearSchedule(start=1.0, end=0.01, steps=250_000),
        description="ε-greedy exploration over transitions (noisy networks act greedily)",
    )
    epsilon_off_after: int | None = Field(
        None,
        gt=0,
        description="null | transitions from which ε is 0 whatever `epsilon` says, leaving "
        "exploration to noisy layers (Beyond The Rainbow keeps ε-greedy beside its noisy "
        "networks for the first half of training: 25M of its 50M transitions)",
    )
    n_step: Schedule | None = Field(
        None,
        description="null (always loss.n_step) | a schedule of the n-step length at each "
        "learner update, rounded to the nearest integer (half to even), at most loss.n_step "
        "(the window the replay keeps); BBF anneals 10 → 3: {kind: geometric, start: 10, end: "
        "3, steps: 10000}",
    )
    discount: Schedule | None = Field(
        None,
        description="null (always loss.discount) | a schedule of γ at each learner update, "
        "in the n-step return and its bootstrap; BBF anneals 0.97 → 0.997: {kind: geometric, "
        "start: 0.97, end: 0.997, steps: 10000, complement: true}",
    )
    cycle: Literal["run", "resets"] = Field(
        "run",
        description="the learner-update count the n_step and discount schedules read: run = "
        "since the start | resets = since the last reset (BBF's cycle_grad_steps)",
    )
    act_with: Literal["online", "target"] = Field(
        "online",
        description="the network the actors and evaluations act with: online | target (BBF "
        "and SR-SPR act with their EMA target network, target_action_selection)",
    )
    eval_epsilon: float | None = Field(
        None,
        ge=0,
        le=1,
        description="ε of the ε-greedy evaluation policy (a paper's value, e.g. 0.05 for Nature "
        "DQN, 0.001 for C51); null = the evaluation protocol's",
    )

    def unused_settings(self, spec: AlgorithmSpec) -> Iterable[str]:
        """The cycle of schedules that are not there."""
        del spec
        if self.n_step is None and self.discount is None:
            yield "schedule.cycle"

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """ε is a probability; n and γ schedules stay in their ranges, on transitions only;
        a cycle of resets needs resets."""
        yield from probability_problems("schedule.epsilon", self.epsilon, "ε is a probability")
        n_max = spec.loss.n_step
        for field, value in schedule_points(self.n_step):
            if not 1 <= value <= n_max:
                yield (
                    at("schedule.n_step", field),
                    f"the n-step length must be from 1 to loss.n_step = {n_max} (the window "
                    f"the replay keeps), got {value}; raise loss.n_step to the schedule's largest",
                )
        for field, value in schedule_points(self.discount):
            if not 0 < value <= 1:
                yield at("schedule.discount", field), f"γ must be in (0, 1], got {value}"
        scheduled = [n for n in ("n_step", "discount") if getattr(self, n) is not None]
        if scheduled and (spec.rollout is not None or spec.replay.sequence is not None):
            yield (
                f"schedule.{scheduled[0]}",
                "n-step length and γ schedules apply to sampled transitions; a rollout (PQN) or "
                f"stored sequences (a recurrent core) keep loss.n_step and loss.discount; drop "
                f"`schedule.{scheduled[0]}`",
            )
        if self.cycle == "resets" and spec.resets is None:
            yield (
                "schedule.cycle",
                "cycle: resets counts learner updates since the last reset, and the spec has no "
                "`resets`; add them or set `schedule.cycle: run`",
            )


class AlgorithmSpec(Model):
    """One algorithm: a point in the product of the axes."""

    name: str = Field("", description="catalogue or file entry name")
    summary: str = Field("", description="what the algorithm is, docstring style")
    paper: str | None = Field(None, description="link to the paper")
    notes: str | None = Field(None, description="where this entry knowingly differs, and why")
    network: NetworkSpec = Field(default_factory=NetworkSpec, description="the network")
    loss: LossSpec = Field(default_factory=LossSpec, description="the loss")
    replay: ReplaySpec = Field(default_factory=ReplaySpec, description="the replay")
    rollout: RolloutSpec | None = Field(
        None,
        description="null (learn from the replay) | {length, epochs, minibatches, td_lambda, "
        "trace, truncation}: learn from each rollout of T vector steps with Q(λ) targets and no "
        "replay (PQN, Gallici et al. 2024); replay.* and schedule.update_period are then unused",
    )
    augmentation: _Augmentation | None = Field(
        None,
        description="null (learn from the batches as sampled) | {kind: random_shift, pad}: "
        "augment the observations of every sampled transition batch in the learner (DrQ, "
        "Kostrikov et al. 2020) | a kind registered with "
        "zoo.registry.register('augmentation', NAME, config=...)",
    )
    auxiliary: _Auxiliary | None = Field(
        None,
        description="null (the TD loss alone) | {kind: spr, steps, weight}: SPR's K-step latent "
        "prediction added to every item's loss (Schwarzer et al. 2021; SPR, SR-SPR, BBF) | a "
        "kind registered with zoo.registry.register('auxiliary', NAME, config=...)",
    )
    optimizer: _Optimizer = Field(
        default_factory=lambda: Adam(), description="{kind: adam | adamw | rmsprop | radam, ...}"
    )
    resets: ResetSpec | None = Field(
        None,
        description="null (never) | {every, first, count, shrink, shrink_factor, perturb_factor, "
        "keep, target, optimizer}: re-initialise parts of the network every `every` learner "
        "updates (Nikishin et al. 2022; SR-SPR and BBF's shrink-and-perturb)",
    )
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec, description="the schedules")

    @model_validator(mode="after")
    def _combinations(self) -> AlgorithmSpec:
        problems = list(spec_problems(self))
        if problems:
            raise ValueError("\n".join(f"@{path}@ {msg}" for path, msg in problems))
        return self

    @property
    def recurrent(self) -> bool:
        """Whether the network has a recurrent core (and the replay stores sequences)."""
        return self.network.core is not None


def unused_settings(spec: AlgorithmSpec) -> list[str]:
    """Dotted paths of the settings ``spec`` never reads, as each part of the tree states them
    (:meth:`zoo.spec.base.Model.unused_settings`), sorted."""
    return sorted({path for part in walk(spec) for path in part.unused_settings(spec)})


def spec_problems(spec: AlgorithmSpec) -> list[tuple[str, str]]:
    """``(path, message)`` of every combination in ``spec`` that validates field by field but
    makes no sense together: each part of the tree states its own rules."""
    return [p for part in walk(spec) for p in part.spec_problems(spec)]
