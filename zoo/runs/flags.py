"""The run settings on the command line: ``zoo train``'s, ``zoo reproduce``'s and ``zoo bench``'s
flags of the table :class:`zoo.runs.settings.RunSettings` (each flag, help, type and bound is read
from its field), and the values given there.

No JAX.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from zoo.runs.settings import Elsewhere, RunSettings, Setting, range_text, settings

__all__ = ["add_flags", "finite", "given", "whole"]


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in ``[low, high]`` (0 is never read as "default")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {range_text(low, high)}, got {value}")
        return value

    parse.__name__ = "whole number"
    return parse


def finite(text: str) -> float:
    """An argparse type: a finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _rows(command: str, names: Sequence[str] | None, table: type[RunSettings]) -> Iterator[Setting]:
    rows = {s.name: s for s in settings(table) if s.arg.flag is not None}
    offered = {
        name: s for name, s in rows.items() if command == "train" or command in s.arg.elsewhere
    }
    for name in names if names is not None else list(offered):
        if name not in offered:
            raise KeyError(f"{command} offers no setting {name!r}")
        yield offered[name]


def add_flags(
    parser: argparse.ArgumentParser,
    command: str,
    names: Sequence[str] | None = None,
    *,
    table: type[RunSettings] = RunSettings,
) -> None:
    """Add ``command``'s flags of the settings ``names`` (default: every setting it offers that
    the parser has not got yet, in the table's order) to ``parser``."""
    present = {a.dest for a in parser._actions}
    for row in _rows(command, names, table):
        if names is None and row.name in present:
            continue
        there = row.arg.elsewhere.get(command, Elsewhere()) if command != "train" else Elsewhere()
        spelled = (row.arg.flag, *row.arg.aliases) if command == "train" else (row.arg.flag,)
        options: dict[str, Any] = {"dest": row.name, "help": there.help or row.arg.help}
        if row.kind == "switch":
            options.update(action="store_const", const=False, default=None)
        elif row.kind == "choice":
            options["choices"] = list(there.choices or row.choices or ())
        else:
            options["metavar"] = (row.arg.flag or row.name).lstrip("-").replace("-", "_").upper()
            if row.kind == "count":
                options["type"] = whole(row.low if row.low is not None else 0, row.high)
            elif row.kind == "number":
                options["type"] = finite
        parser.add_argument(*spelled, **options)


def given(
    args: argparse.Namespace, command: str, *, table: type[RunSettings] = RunSettings
) -> dict[str, Any]:
    """The settings given on ``command``'s command line (flags not given are left out)."""
    return {
        row.name: getattr(args, row.name)
        for row in _rows(command, None, table)
        if getattr(args, row.name, None) is not None
    }
