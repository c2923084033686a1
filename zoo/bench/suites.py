"""Benchmark suites as data: the games, protocol, default budget and normalisation of each.

The suites live in ``zoo/bench/suites.yaml`` (package data), each with its source:

- ``atari57``: the 57 Atari games, human-normalised, Dopamine's protocol and 200M frames.
- ``atari100k``: the 26 games of Atari 100k (Kaiser et al. 2020), 400k frames, human-normalised;
  the published per-run scores of DrQ(ε) and SPR (Agarwal et al. 2021) stand beside ours.
- ``atari5``: Atari-5 (Aitchison, Sweetser & Hutter, ICML 2023), five games whose scores predict
  the 57-game median (:func:`zoo.bench.stats.predicted_atari57_median`).
- ``minatar``: the five MinAtar games (Young & Tian 2019), normalised by random play.
- ``classic``: CartPole-v1, Acrobot-v1, MountainCar-v0, normalised by their return range.

``frames`` is the default budget in frames (agent steps × the protocol's frame skip).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import yaml

from zoo.bench.errors import BenchError

__all__ = [
    "NORMALISATIONS",
    "STATISTICS",
    "SUITES",
    "Suite",
    "format_suites",
    "get_suite",
    "suite_names",
]

#: The normalisations a suite may name, each in one line (the formulas: :mod:`zoo.bench.stats`).
NORMALISATIONS: Mapping[str, str] = MappingProxyType(
    {
        "human": "(score − random) / (human − random), dqn_zoo's random and human scores",
        "random_sigma": "(score − random mean) / random standard deviation (measured random play)",
        "return_range": "(score − lowest) / (highest − lowest) of the returns the env allows",
    }
)


#: What can score a run: its greedy evaluation at the budget, or its training statistic.
STATISTICS = ("evaluation", "training")


@dataclass(frozen=True)
class Suite:
    """One benchmark suite.

    Attributes:
      name: the suite's name (``atari100k``).
      games: environment ids that ``zoo train --env`` accepts, in report order.
      protocol: the zoo protocol its runs use (:func:`zoo.envs.get_protocol`).
      frames: the default budget per run, in frames (agent steps × the protocol's frame skip).
      normalisation: one of :data:`NORMALISATIONS`.
      source: where the suite, its budget and its normalisation come from.
      description: one line for ``zoo bench --list-suites``.
      predictor_weights: for Atari-5, the weight of each game in the prediction of the 57-game
        median (:func:`zoo.bench.stats.predicted_atari57_median`); empty otherwise.
      statistic: what scores a run, as the suite's literature reports it (one of
        :data:`STATISTICS`): ``evaluation`` (greedy games at the budget; Atari) or ``training``
        (the returns of the training games that ended just before the budget; MinAtar, whose
        papers report training returns).
    """

    name: str
    games: tuple[str, ...]
    protocol: str
    frames: int
    normalisation: str
    source: str
    description: str
    predictor_weights: Mapping[str, float] = field(default_factory=dict)
    statistic: str = "evaluation"

    def __post_init__(self) -> None:
        if self.statistic not in STATISTICS:
            raise BenchError(
                f"suite {self.name!r}: unknown statistic {self.statistic!r} (known: "
                f"{', '.join(STATISTICS)})"
            )
        if self.normalisation not in NORMALISATIONS:
            raise BenchError(
                f"suite {self.name!r}: unknown normalisation {self.normalisation!r} (known: "
                f"{', '.join(NORMALISATIONS)})"
            )
        if not self.games or len(set(self.games)) != len(self.games):
            raise BenchError(f"suite {self.name!r}: games must be a non-empty list without repeats")
        unknown = set(self.predictor_weights) - set(self.games)
        if unknown:
            raise BenchError(f"suite {self.name!r}: predictor games {sorted(unknown)} not in games")

    @property
    def agent_steps(self) -> int:
        """The default budget in agent steps (frames / the protocol's frame skip)."""
        from zoo.envs import get_protocol

        return self.frames // get_protocol(self.protocol).frame_skip


def _path() -> Path:
    return Path(__file__).resolve().parent / "suites.yaml"


@functools.cache
def _load() -> Mapping[str, Suite]:
    entries = yaml.safe_load(_path().read_text(encoding="utf-8"))
    suites = {}
    for name, entry in entries.items():
        suites[name] = Suite(
            name=name,
            games=tuple(entry["games"]),
            protocol=str(entry["protocol"]),
            frames=int(entry["frames"]),
            normalisation=str(entry["normalisation"]),
            source=" ".join(str(entry["source"]).split()),
            description=" ".join(str(entry["description"]).split()),
            statistic=str(entry.get("statistic", "evaluation")),
            predictor_weights=MappingProxyType(
                {g: float(w) for g, w in (entry.get("predictor") or {}).get("weights", {}).items()}
            ),
        )
    return MappingProxyType(suites)


#: Every shipped suite by name.
SUITES: Mapping[str, Suite] = _load()


def suite_names() -> list[str]:
    """The names of the shipped suites, in file order."""
    return list(SUITES)


def get_suite(name: str) -> Suite:
    """The suite called ``name``.

    Raises:
      BenchError: an unknown name, with the known suites and the closest ones.
    """
    if name in SUITES:
        return SUITES[name]
    close = difflib.get_close_matches(name, list(SUITES), n=2, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise BenchError(f"unknown suite {name!r}{hint} (known suites: {', '.join(SUITES)})")


def format_suites() -> str:
    """The table of ``zoo bench --list-suites``: name, games, protocol, default budget,
    normalisation and the statistic that scores a run; then each suite's source."""
    header = ("suite", "games", "protocol", "default budget", "normalisation", "statistic")
    rows = [header]
    for s in SUITES.values():
        budget = f"{s.frames:,} frames"
        rows.append((s.name, str(len(s.games)), s.protocol, budget, s.normalisation, s.statistic))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    for s in SUITES.values():
        lines.append(f"{s.name}: {s.description}")
        lines.append(f"  source: {s.source}")
    return "\n".join(lines) + "\n"
