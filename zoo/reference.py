"""Reference results that runs are compared with: published scores, library results, our runs.

A :class:`Series` is one agent's results under one evaluation protocol and one statistic, per game:
points of (frames, mean, and where known the seeds' min/max or standard deviation). The shipped
series live in ``zoo/reference_data/series.yaml`` (each names its source); ``series_ids()`` lists
them. Ids follow ``<origin>/<name>``:

- ``published/*``: final per-game scores from the papers (no-op starts, evaluation returns, protocol
  ``nature_2015``; 200M frames, except ``published/DQN_nature_50M`` at 50M frames).
- ``dopamine/*``: Dopamine's baseline learning curves (google/dopamine
  ``baselines/atari/data/<game>.json``), one point per iteration of 1M frames, mean/min/max over 5
  seeds of the *training* return in that iteration (protocol ``dopamine_2018``: sticky actions
  with the minimal action set, as Dopamine's ``atari_lib.py`` makes its environments).
- ``published/BTR``: Beyond The Rainbow's evaluation curves as its authors publish them
  (VIPTankz/BeyondTheRainbowICML ``results.csv``), 19 games, one point per 1M frames to 200M,
  each the mean of 100 evaluation episodes (protocol ``dopamine_2018``, the closest zoo has; the
  series' source names what BTR's evaluation does differently).
- ``atari100k/der``: data-efficient Rainbow on Atari 100k (400k frames); aggregates checked in
  rliable's notebook [V], per-game values recalled [R].
- ``cleanrl/dqn_cartpole``: CleanRL's documented ``dqn.py`` result on CartPole-v1 (protocol
  ``classic``, training returns, 500k steps).
- ``ours/*``: a documented run of this project (``zoo compare --record``), labelled "ours
  (documented run, not published)" and never called published.

A lookup answers only at a budget the series has (:meth:`Series.value_at`): Dopamine's curves at
every multiple of 1M frames, a paper's final score only at its budget, a ``points`` table at the
frames it lists. A comparison refuses a series whose protocol differs from the run's
(:func:`check_protocol` raises :class:`ProtocolMismatchError`).

Human-normalised scores follow Mnih et al. 2015: ``(score - random) / (human - random)``, with the
random and human scores of deepmind/dqn_zoo ``atari_data.py`` (:func:`human_normalized`).
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = [
    "Point",
    "ProtocolMismatchError",
    "ReferenceLookupError",
    "Series",
    "UnknownSeriesError",
    "check_protocol",
    "data_path",
    "game_key",
    "human_normalized",
    "human_random",
    "load_series",
    "series_ids",
]

Statistic = Literal["training", "evaluation"]
Kind = Literal["published", "ours"]

#: How a series' label kind is printed.
KIND_LABELS: Mapping[str, str] = {
    "published": "published",
    "ours": "ours (documented run, not published)",
}

#: Dopamine's iteration: 250k agent steps of 4 frames.
DOPAMINE_ITERATION_FRAMES = 1_000_000


class UnknownSeriesError(KeyError):
    """A reference series id that is not shipped (the message lists close ids)."""

    def __str__(self) -> str:
        return str(self.args[0])


class ReferenceLookupError(LookupError):
    """A series has no value for this game or at this frame budget (the message says which)."""

    def __str__(self) -> str:
        return str(self.args[0])


class ProtocolMismatchError(ValueError):
    """A comparison between results of different evaluation protocols, which is refused."""


def data_path() -> Path:
    """The folder of the shipped reference data (inside the package, so wheels carry it)."""
    return Path(__file__).resolve().parent / "reference_data"


_ATARI_SUFFIX = re.compile(r"^(?:ALE/)?(?P<game>.+?)(?:NoFrameskip-v4|-v5)$")


def game_key(name: str) -> str:
    """A spelling-independent key of a game or environment id.

    Atari spellings map to one key (``"Pong-v5"``, ``"PongNoFrameskip-v4"``, ``"ALE/Pong-v5"``,
    ``"pong"`` → ``"pong"``; ``"space_invaders"`` and ``"SpaceInvaders-v5"`` → ``"spaceinvaders"``);
    other ids keep their version (``"CartPole-v1"`` → ``"cartpolev1"``).
    """
    match = _ATARI_SUFFIX.match(name)
    base = match.group("game") if match else name
    return re.sub(r"[^a-z0-9]", "", base.lower())


@dataclass(frozen=True)
class Point:
    """One reference value: at ``frames``, the mean over seeds and what is known of the spread.

    Attributes:
      frames: the budget the value refers to, in frames (agent steps × frame skip).
      mean: mean over seeds (or the single published number).
      min, max: the seeds' range, where the source gives it.
      std: the standard deviation over seeds, where the source gives that instead.
      seeds: how many seeds, where known.
      tag: ``V`` checked in a source file, ``R`` recalled (approximate), ``3P`` a third-party
        transcription, or ``None`` where the series' source line says it.
    """

    frames: int
    mean: float
    min: float | None = None
    max: float | None = None
    std: float | None = None
    seeds: int | None = None
    tag: str | None = None

    @property
    def range(self) -> tuple[float, float] | None:
        """The interval a result is checked against: the seeds' [min, max], else mean ± std."""
        if self.min is not None and self.max is not None:
            return (self.min, self.max)
        if self.std is not None:
            return (self.mean - self.std, self.mean + self.std)
        return None

    @property
    def range_kind(self) -> str | None:
        """``"seed min-max"``, ``"mean ± std"`` or ``None`` (no spread known)."""
        if self.min is not None and self.max is not None:
            return "seed min-max"
        if self.std is not None:
            return "mean ± std"
        return None


@dataclass(frozen=True)
class Series:
    """One agent's reference results under one protocol and statistic, per game.

    Attributes:
      id: the series id (``dopamine/dqn_adam_mse``).
      label: a human-readable name.
      kind: ``published`` or ``ours`` (a documented run of this project).
      source: where the numbers come from.
      protocol: the evaluation protocol (a name in :mod:`zoo.envs.protocols`).
      statistic: ``training`` (returns of training episodes) or ``evaluation`` (a separate
        evaluation phase).
      window_frames: for training statistics, the span of frames the reference averages over
        (Dopamine: one iteration, 1M frames); a run is summarised over the same span.
      notes: caveats.
      aggregates: aggregate figures (e.g. human-normalised median over a benchmark's games).
    """

    id: str
    label: str
    kind: Kind
    source: str
    protocol: str
    statistic: Statistic
    window_frames: int | None = None
    notes: str | None = None
    aggregates: Mapping[str, float] = field(default_factory=dict)
    _games: Mapping[str, tuple[Point, ...]] = field(default_factory=dict, repr=False)
    _names: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def kind_label(self) -> str:
        """How the kind is printed: ``published`` or ``ours (documented run, not published)``."""
        return KIND_LABELS[self.kind]

    @property
    def games(self) -> list[str]:
        """The games (or environment ids) the series has, as spelt in its source."""
        return sorted(self._names.values())

    def has_game(self, game: str) -> bool:
        """Whether the series has values for ``game`` (any spelling, see :func:`game_key`)."""
        return game_key(game) in self._games

    def points(self, game: str) -> tuple[Point, ...]:
        """All points of ``game``, by frames."""
        key = game_key(game)
        if key not in self._games:
            raise ReferenceLookupError(
                f"reference series {self.id} has no values for {game!r}; it covers "
                f"{len(self._games)} game(s): {', '.join(self.games[:12])}"
                + (", ..." if len(self._games) > 12 else "")
            )
        return self._games[key]

    def budgets(self, game: str) -> list[int]:
        """The frame budgets at which ``game`` has a value."""
        return [p.frames for p in self.points(game)]

    def value_at(self, game: str, frames: int) -> Point:
        """The reference value of ``game`` at exactly ``frames`` frames.

        Raises:
          ReferenceLookupError: the series has no value for the game, or none at this budget (the
            message lists the budgets it has; Dopamine's curves have one per 1M frames, a paper's
            final score only its own budget).
        """
        points = self.points(game)
        for point in points:
            if point.frames == frames:
                return point
        budgets = [p.frames for p in points]
        if len(budgets) > 4:
            step = budgets[1] - budgets[0]
            have = f"every {step:,} frames from {budgets[0]:,} to {budgets[-1]:,}"
        else:
            have = ", ".join(f"{b:,}" for b in budgets)
        raise ReferenceLookupError(
            f"reference series {self.id} has no value for {game!r} at {frames:,} frames "
            f"(it has: {have}); compare at one of those budgets"
        )


def check_protocol(series: Series, protocol: str) -> None:
    """Refuse to compare a run of ``protocol`` with ``series`` of another protocol.

    Raises:
      ProtocolMismatchError: naming both protocols and what to do instead.
    """
    if series.protocol != protocol:
        raise ProtocolMismatchError(
            f"reference series {series.id} was measured under protocol {series.protocol!r} but "
            f"the run uses {protocol!r}; results of different protocols (sticky actions, no-op "
            f"starts, life loss, evaluation ε) are not comparable. Choose a series of protocol "
            f"{protocol!r} (`zoo compare --list-series` lists them), or compare runs trained "
            f"under {series.protocol!r} (`zoo train ... --protocol {series.protocol}`)."
        )


# --------------------------------------------------------------------------------------------
# Loading


def _read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV whose leading ``#`` lines are comments (the source); ``.gz`` is unpacked."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = [line for line in io.StringIO(raw.decode("utf-8")) if not line.startswith("#")]
    return list(csv.DictReader(lines))


@functools.cache
def _human_random_table() -> dict[str, tuple[float, float]]:
    rows = _read_csv(data_path() / "atari_human_random.csv")
    return {game_key(r["game"]): (float(r["random"]), float(r["human"])) for r in rows}


def human_random(game: str) -> tuple[float, float] | None:
    """``(random, human)`` scores of an Atari game (deepmind/dqn_zoo), or ``None``."""
    return _human_random_table().get(game_key(game))


def human_normalized(game: str, score: float) -> float | None:
    """``(score - random) / (human - random)`` for an Atari game, else ``None``."""
    scores = human_random(game)
    if scores is None:
        return None
    random, human = scores
    return (score - random) / (human - random)


@functools.cache
def _registry() -> dict[str, dict[str, Any]]:
    text = (data_path() / "series.yaml").read_text(encoding="utf-8")
    entries = yaml.safe_load(text) or {}
    ours = data_path() / "ours"
    if ours.is_dir():
        for path in sorted(ours.glob("*.yaml")):
            entries.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return entries


def series_ids(pattern: str | None = None) -> list[str]:
    """Ids of the shipped series (optionally those matching a shell-style ``pattern``)."""
    import fnmatch

    ids = sorted(_registry())
    return [i for i in ids if pattern is None or fnmatch.fnmatch(i, pattern)]


@functools.cache
def _curves(file: str) -> dict[str, dict[str, list[Point]]]:
    """Dopamine's curves file: agent -> game key -> points by frames."""
    out: dict[str, dict[str, list[Point]]] = {}
    for row in _read_csv(data_path() / file):
        point = Point(
            frames=round(float(row["frames_millions"]) * DOPAMINE_ITERATION_FRAMES),
            mean=float(row["mean_training_return"]),
            min=float(row["min_seed"]),
            max=float(row["max_seed"]),
            seeds=int(row["seeds"]),
        )
        out.setdefault(row["agent"], {}).setdefault(row["game"], []).append(point)
    for games in out.values():
        for points in games.values():
            points.sort(key=lambda p: p.frames)
    return out


#: The columns every ``points`` table has; ``min``, ``max``, ``std``, ``seeds`` and ``tag`` are
#: optional (a column left out, or a blank cell, is unknown).
POINTS_COLUMNS = ("game", "frames", "mean")


def _optional_float(row: Mapping[str, str | None], column: str) -> float | None:
    value = (row.get(column) or "").strip()
    return float(value) if value else None


@functools.cache
def _points(file: str) -> dict[str, tuple[Point, ...]]:
    """A long table of per-game points (``game,frames,mean[,min,max,std,seeds,tag]``, one row per
    game and budget): game as spelt in the file -> its points by frames.

    Raises:
      ValueError: a required column is missing.
    """
    rows = _read_csv(data_path() / file)
    missing = [c for c in POINTS_COLUMNS if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"{file} lacks the column(s) {', '.join(missing)} of a points table")
    out: dict[str, list[Point]] = {}
    for row in rows:
        seeds = (row.get("seeds") or "").strip()
        point = Point(
            frames=int(row["frames"]),
            mean=float(row["mean"]),
            min=_optional_float(row, "min"),
            max=_optional_float(row, "max"),
            std=_optional_float(row, "std"),
            seeds=int(seeds) if seeds else None,
            tag=(row.get("tag") or "").strip() or None,
        )
        out.setdefault(row["game"], []).append(point)
    return {game: tuple(sorted(ps, key=lambda p: p.frames)) for game, ps in out.items()}


def _build(series_id: str, entry: Mapping[str, Any], where: str) -> Series:
    games: dict[str, tuple[Point, ...]] = {}
    names: dict[str, str] = {}
    window = entry.get("window_frames")
    if "final" in entry:
        final = entry["final"]
        for row in _read_csv(data_path() / final["file"]):
            value = row.get(final["column"], "")
            if value.strip():
                games[game_key(row["game"])] = (
                    Point(frames=int(final["frames"]), mean=float(value)),
                )
                names[game_key(row["game"])] = row["game"]
    elif "curves" in entry:
        curves = entry["curves"]
        agents = _curves(curves["file"])
        if curves["agent"] not in agents:
            raise UnknownSeriesError(
                f"{where}: series {series_id}: agent {curves['agent']!r} is not in "
                f"{curves['file']} (agents: {', '.join(sorted(agents))})"
            )
        for game, points in agents[curves["agent"]].items():
            games[game_key(game)] = tuple(points)
            names[game_key(game)] = game
        window = window or DOPAMINE_ITERATION_FRAMES
    elif "points" in entry:
        file = entry["points"]["file"]
        try:
            table = _points(file)
        except ValueError as e:
            raise UnknownSeriesError(f"{where}: series {series_id}: {e}") from None
        for game, points in table.items():
            games[game_key(game)] = points
            names[game_key(game)] = game
    for game, points in (entry.get("games") or {}).items():
        rows = points if isinstance(points, list) else [points]
        games[game_key(game)] = tuple(
            sorted(
                (
                    Point(
                        frames=int(p["frames"]),
                        mean=float(p["mean"]),
                        min=p.get("min"),
                        max=p.get("max"),
                        std=p.get("std"),
                        seeds=p.get("seeds"),
                        tag=p.get("tag"),
                    )
                    for p in rows
                ),
                key=lambda p: p.frames,
            )
        )
        names[game_key(game)] = str(game)
    kind = entry.get("kind", "ours" if series_id.startswith("ours/") else "published")
    if series_id.startswith("ours/") and kind != "ours":
        raise UnknownSeriesError(f"{where}: series {series_id}: an ours/ series must be kind ours")
    return Series(
        id=series_id,
        label=str(entry.get("label", series_id)),
        kind=kind,
        source=" ".join(str(entry.get("source", "")).split()),
        protocol=str(entry["protocol"]),
        statistic=entry["statistic"],
        window_frames=int(window) if window else None,
        notes=entry.get("notes"),
        aggregates=dict(entry.get("aggregates") or {}),
        _games=games,
        _names=names,
    )


@functools.cache
def _load_shipped(series_id: str) -> Series:
    return _build(series_id, _registry()[series_id], "zoo/reference_data/series.yaml")


def load_series(ref: str | os.PathLike[str]) -> Series:
    """A reference series by id (``dopamine/dqn_adam_mse``) or from a YAML file of one series.

    Raises:
      UnknownSeriesError: an id that is not shipped (with close ids) or an unreadable file.
    """
    ref = str(ref)
    if ref.endswith((".yaml", ".yml")):
        from zoo.fileio import read_text
        from zoo.spec.files import parse_yaml

        try:
            entries = parse_yaml(read_text(ref, what="reference series file")) or {}
        except FileNotFoundError:
            raise UnknownSeriesError(f"reference series file {ref} does not exist") from None
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise UnknownSeriesError(f"cannot read the reference series file: {first}") from None
        if not isinstance(entries, dict) or len(entries) != 1:
            raise UnknownSeriesError(
                f"{ref} must hold exactly one series (`ID: {{label, protocol, statistic, "
                "games}}`), as `zoo compare --record` writes it"
            )
        (series_id, entry), *_ = entries.items()
        return _build(str(series_id), entry, ref)
    if ref not in _registry():
        import difflib

        close = difflib.get_close_matches(ref, list(_registry()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownSeriesError(
            f"unknown reference series {ref!r}{hint} (`zoo compare --list-series` lists them)"
        )
    return _load_shipped(ref)


def series_entry(
    series_id: str,
    *,
    label: str,
    source: str,
    protocol: str,
    statistic: Statistic,
    games: Mapping[str, Mapping[str, Any]],
    window_frames: int | None = None,
    notes: str | None = None,
) -> dict[str, Any]:
    """The YAML mapping of an ``ours/`` series (what ``zoo compare --record`` writes)."""
    if not series_id.startswith("ours/"):
        raise ValueError(
            f"a documented run of ours is recorded as ours/NAME, not {series_id!r}: only "
            "published results carry other prefixes"
        )
    entry: dict[str, Any] = {
        "label": label,
        "kind": "ours",
        "source": source,
        "protocol": protocol,
        "statistic": statistic,
    }
    if window_frames:
        entry["window_frames"] = int(window_frames)
    if notes:
        entry["notes"] = notes
    entry["games"] = {g: dict(v) for g, v in games.items()}
    return {series_id: entry}
