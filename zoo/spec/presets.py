"""Presets: a catalogue algorithm pinned to a paper's or a setting's values, with sources."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zoo.spec.base import Model

__all__ = ["Budget", "EnvSpec", "Preset", "Reference"]


class EnvSpec(Model):
    """Where a preset runs."""

    id: str | None = Field(None, description="environment id (e.g. CartPole-v1, Pong-v5)")
    games: list[str] = Field(default_factory=list, description="Atari games of the preset")
    protocol: str = Field("classic", description="evaluation protocol name")
    num_envs: int = Field(1, ge=1, description="parallel environments")


class Budget(Model):
    """Training length; `frames` = agent steps × frame skip."""

    agent_steps: int = Field(gt=0, description="training budget in transitions")
    frames: int | None = Field(None, gt=0, description="the same budget in frames, when Atari")


class Reference(Model):
    """What a preset reproduces, and where each of its values comes from."""

    paper: str | None = Field(None, description="the paper (authors, year, title, link)")
    source: str | None = Field(None, description="where the hyperparameters were checked")
    sources: dict[str, str] = Field(
        default_factory=dict,
        description="per hyperparameter (dotted field path, e.g. `optimizer.learning_rate`): "
        "where its value comes from, tagged [V] checked in a source file, [R] recalled from the "
        "paper, or [3P] a third-party transcription",
    )
    series: list[str] = Field(
        default_factory=list,
        description="ids of the reference series (zoo.reference) a run of this preset is compared "
        "with; a comparison uses only those of the run's protocol and statistic",
    )
    scores: dict[str, float] = Field(default_factory=dict, description="published scores")


class Preset(Model):
    """A pinned configuration: a catalogue algorithm plus a paper's or a setting's values."""

    name: str = Field("", description="preset name (the file's stem)")
    summary: str = Field("", description="what the preset is")
    algorithm: str = Field(description="catalogue entry name")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="nested or dotted overrides of the algorithm's fields"
    )
    env: EnvSpec = Field(default_factory=EnvSpec, description="environment and protocol")
    budget: Budget | None = Field(None, description="training budget")
    reference: Reference = Field(default_factory=Reference, description="published reference")
    notes: str | None = Field(None, description="where the preset knowingly differs")
