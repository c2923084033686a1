"""The columns of the run settings table (:class:`zoo.runs.settings.RunSettings`): what each setting
is asked with (:class:`Arg`, :class:`Elsewhere`), what a new run's rule sees (:class:`NewRun`) and
one row as the readers of the table see it (:class:`Setting`). No JAX here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Arg", "Elsewhere", "NewRun", "Setting"]


@dataclass(frozen=True)
class NewRun:
    """What a new run's rule for a setting sees: the value given for it (``None``: not given),
    the values of the settings above it in the table, and the preset's run defaults."""

    given: Any
    values: Mapping[str, Any]
    preset: Mapping[str, Any]
    protocol_of: Callable[[str], str]


@dataclass(frozen=True)
class Elsewhere:
    """A setting as another command offers it: its help there, and its choices where fewer."""

    help: str | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Arg:
    """The asking side of a setting, beside its type in :class:`~zoo.runs.settings.RunSettings`.

    Attributes:
      help: ``zoo train --help``'s line (and the meaning of the keyword of :func:`zoo.train`).
      flag: ``zoo train``'s flag; ``None``: the Python API only (errors name the keyword).
      aliases: more spellings of the flag.
      switch: the flag takes no value and sets the setting to ``False`` (``--no-...``).
      from_preset: a new run takes the preset's value when the setting is not given.
      new: a new run's value when neither given nor the preset's: a callable of
        :class:`NewRun`, or a constant; ``None``: the field's default.
      sees_given: ``new`` is called even when the value is given (to check it).
      low, high: the bounds the request checks: the field's unless given (``None``: none).
      resumable: a resume may change it (only the budget may).
      elsewhere: the commands besides ``train`` that offer it for the runs they create,
        with their help there.
    """

    help: str
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    switch: bool = False
    from_preset: bool = False
    new: Any = None
    sees_given: bool = False
    low: int | Literal["field"] | None = "field"
    high: int | Literal["field"] | None = "field"
    resumable: bool = False
    elsewhere: Mapping[str, Elsewhere] = field(default_factory=dict)


@dataclass(frozen=True)
class Setting:
    """One row of the table: a field of :class:`RunSettings` that a run is asked for."""

    name: str
    arg: Arg
    kind: str  # "count", "number", "choice", "text" or "switch"
    low: int | None
    high: int | None
    choices: tuple[str, ...] | None
    default: Any

    @property
    def label(self) -> str:
        """How errors name it: the flag, or the keyword where there is none."""
        return self.arg.flag or self.name
