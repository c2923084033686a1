"""Presets: a catalogue algorithm pinned to a paper's or a setting's values, with sources."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from zoo.spec.base import Model

__all__ = ["PROTOCOL_PREFIX", "Budget", "Difference", "EnvSpec", "Preset", "Reference"]

#: The prefix of a difference that is one of the preset's protocol's named differences.
PROTOCOL_PREFIX = "env.protocol."


class EnvSpec(Model):
    """Where a preset runs."""

    id: str | None = Field(None, description="environment id (e.g. CartPole-v1, Pong-v5)")
    games: list[str] = Field(default_factory=list, description="Atari games of the preset")
    protocol: str = Field("classic", description="evaluation protocol name")
    num_envs: int = Field(1, ge=1, description="parallel environments")

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, name: str) -> str:
        from zoo.envs.protocols import PROTOCOLS  # plain data: no JAX, no envpool

        if name not in PROTOCOLS:
            raise ValueError(f"unknown protocol {name!r}; known: {', '.join(sorted(PROTOCOLS))}")
        return name


class Budget(Model):
    """Training length; `frames` = agent steps × frame skip."""

    agent_steps: int = Field(gt=0, description="training budget in transitions")
    frames: int | None = Field(None, gt=0, description="the same budget in frames, when Atari")


class Difference(Model):
    """One way a preset knowingly differs from its own source (``reference.differences``).

    An entry keyed ``env.protocol.SETTING`` is a named difference of the preset's protocol
    (``docs/protocols.md``), which says what the source does and what zoo does; it is given
    empty (``{}``), or with a ``why`` of its own.
    """

    source: str | None = Field(None, description="what the source does, and where it says so")
    here: str | None = Field(None, description="what this preset does instead")
    why: str | None = Field(None, description="why it is left so")


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
    differences: dict[str, Difference | None] = Field(
        default_factory=dict,
        description="where the preset knowingly differs from its own source, by setting (a "
        "dotted field path, or env.protocol.SETTING for a named difference of its protocol); "
        "null removes one a base preset states (a preset whose source is not the base's); "
        "`zoo show` prints them and docs/fidelity.md tabulates them",
    )


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

    @model_validator(mode="after")
    def _differences_are_stated(self) -> Preset:
        """A difference of the protocol must be one the protocol names; any other states both
        sides."""
        from zoo.envs.protocols import PROTOCOLS  # plain data: no JAX, no envpool

        protocol = PROTOCOLS[self.env.protocol]
        for setting, entry in self.reference.differences.items():
            if entry is None:
                continue
            if setting.startswith(PROTOCOL_PREFIX):
                name = setting.removeprefix(PROTOCOL_PREFIX)
                if name not in protocol.differences:
                    raise ValueError(
                        f"reference.differences: {setting!r} is not a named difference of "
                        f"protocol {protocol.name!r} (it names: "
                        f"{', '.join(protocol.differences) or 'none'})"
                    )
            elif not (entry.source and entry.here):
                raise ValueError(
                    f"reference.differences: {setting!r} needs `source` (what the source does) "
                    "and `here` (what this preset does)"
                )
        return self

    def differences(self) -> list[tuple[str, str, str, str | None]]:
        """``(setting, source, here, why)`` of each difference, protocol ones filled in from
        the protocol's own comparison with its source."""
        from zoo.envs.protocols import PROTOCOLS

        protocol = PROTOCOLS[self.env.protocol]
        compared = {s.setting: s for s in protocol.source_settings}
        out = []
        for setting, entry in self.reference.differences.items():
            if entry is None:
                continue
            if setting.startswith(PROTOCOL_PREFIX):
                known = compared[setting.removeprefix(PROTOCOL_PREFIX)]
                here = known.zoo_value or str(getattr(protocol, known.setting, ""))
                source = f"{known.source_value} ({known.source})"
                out.append((setting, source, here, entry.why))
            else:
                out.append((setting, str(entry.source), str(entry.here), entry.why))
        return out
