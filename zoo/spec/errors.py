"""Spec errors: one :class:`Problem` per mistake; all of a load's problems in one
:class:`SpecError`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Problem", "SpecError", "problem"]


@dataclass(frozen=True)
class Problem:
    """One mistake in a spec, located precisely enough to fix it."""

    source: str
    entry: str | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.source
        if self.entry:
            where += f": {self.entry}"
        if self.path:
            where += f": {self.path}"
        return f"{where}: {self.message}"


class SpecError(ValueError):
    """An invalid algorithm or preset spec; ``problems`` lists every mistake found."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def problem(source: str, entry: str | None, path: str, message: str) -> SpecError:
    """A :class:`SpecError` holding one problem."""
    return SpecError([Problem(source, entry, path, message)])
