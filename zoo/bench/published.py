"""Published per-run scores that a benchmark report puts beside ours.

Only where the protocol, statistic and budget match ours: the Atari 100k per-run final scores of
DrQ(ε) and SPR that Agarwal et al. 2021 (NeurIPS, "Deep Reinforcement Learning at the Edge of the
Statistical Precipice") published with rliable, 100 runs per game, under the Atari 100k protocol
(zoo's ``atari_100k``) at 100k agent steps = 400k frames, as final evaluation scores. The files
and their sources are listed in ``zoo/bench/data/published.yaml``.

For Dopamine-protocol runs the report uses Dopamine's learning curves through
:mod:`zoo.compare` and :mod:`zoo.reference` instead (per-game means over 5 seeds, no per-run data).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from zoo import reference as ref_lib
from zoo.bench.errors import BenchError

__all__ = ["PublishedRuns", "published", "published_runs"]


def _data() -> Path:
    return Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class PublishedRuns:
    """One published algorithm's per-run scores on a suite.

    Attributes:
      label: how the report names it (``DrQ(ε)``).
      source: where the numbers come from.
      protocol, statistic, frames: what they were measured under (a zoo protocol name,
        ``evaluation`` or ``training``, the budget in frames).
      scores: per game (the suite's env ids, suite order), the raw score of each run.
      presets: the zoo presets that reproduce it (``published.yaml``'s ``presets``): a run of one
        of them below its 5th percentile is flagged; every run is placed among every item.
    """

    label: str
    source: str
    protocol: str
    statistic: str
    frames: int
    scores: Mapping[str, tuple[float, ...]]
    presets: tuple[str, ...] = ()

    def runs(self, games: list[str] | tuple[str, ...]) -> list[int]:
        """How many runs each of ``games`` has (any spelling; BBF's data has 14 to 60)."""
        return [len(v) for v in self._of(games)]

    def matrix(self, games: list[str] | tuple[str, ...]) -> np.ndarray:
        """Raw scores ``[num_runs, len(games)]`` of ``games`` (any spelling).

        Where the games have different numbers of runs, the first ``min`` runs of each (in the
        published order): rliable's statistics read a runs × games matrix. One game's matrix
        holds every run of it.
        """
        rows = self._of(games)
        k = min(len(v) for v in rows)
        return np.array([v[:k] for v in rows], dtype=float).T

    def _of(self, games: list[str] | tuple[str, ...]) -> list[tuple[float, ...]]:
        by_key = {ref_lib.game_key(g): v for g, v in self.scores.items()}
        missing = [g for g in games if ref_lib.game_key(g) not in by_key]
        if missing:
            raise BenchError(f"{self.label} has no runs of {', '.join(missing)}")
        return [by_key[ref_lib.game_key(g)] for g in games]


@functools.cache
def _entries() -> dict[str, Any]:
    return yaml.safe_load((_data() / "published.yaml").read_text(encoding="utf-8")) or {}


@functools.cache
def published(suite_name: str) -> tuple[PublishedRuns, ...]:
    """The published per-run data of a suite (empty for a suite without any)."""
    from zoo.bench.suites import get_suite

    suite = get_suite(suite_name)
    entry = dict(_entries().get(suite_name) or {})
    meta = entry.pop("_meta", {})
    out = []
    for label, item in entry.items():
        raw = json.loads((_data() / item["file"]).read_text(encoding="utf-8"))
        by_key = {ref_lib.game_key(g): v for g, v in raw.items()}
        missing = [g for g in suite.games if ref_lib.game_key(g) not in by_key]
        if missing:
            raise BenchError(f"{item['file']} lacks {', '.join(missing)} of suite {suite_name}")
        out.append(
            PublishedRuns(
                label=str(label),
                source=" ".join(str(item["source"]).split()),
                protocol=str(meta["protocol"]),
                statistic=str(meta["statistic"]),
                frames=int(meta["frames"]),
                scores={
                    g: tuple(float(x) for x in by_key[ref_lib.game_key(g)]) for g in suite.games
                },
                presets=tuple(str(x) for x in item.get("presets", ())),
            )
        )
    return tuple(out)


def published_runs(suite_name: str) -> dict[str, np.ndarray]:
    """Per published algorithm, its raw scores ``[num_runs, num_games]`` in the suite's game order.

    Empty for a suite without published per-run data (every suite but ``atari100k``).

    Raises:
      BenchError: an unknown suite.
    """
    from zoo.bench.suites import get_suite

    games = get_suite(suite_name).games
    return {p.label: p.matrix(games) for p in published(suite_name)}
