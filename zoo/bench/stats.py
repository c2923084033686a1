"""Aggregate statistics of a benchmark: normalised scores, IQM and friends with bootstrap CIs.

Everything here follows Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the
Statistical Precipice" (NeurIPS, https://arxiv.org/abs/2108.13264), through their library
`rliable <https://github.com/google-research/rliable>`_; nothing is re-derived:

- a score matrix is ``np.ndarray[num_runs, num_games]`` of *normalised* final scores of one
  algorithm (:func:`normalise`);
- :func:`aggregate`: the interquartile mean (IQM: the mean of the middle 50% of all runs × games,
  ``rliable.metrics.aggregate_iqm``), the median and mean over games of the per-game mean
  scores, and the optimality gap (how far below ``gap_threshold`` the runs fall, on average),
  each with a 95% stratified-bootstrap confidence interval (``rliable.library.
  get_interval_estimates``: runs are resampled with replacement within each game);
- :func:`probability_of_improvement`: P(X > Y), the probability that a run of X on a random game
  beats a run of Y on that game (Mann-Whitney U statistic, averaged over games), with a CI from
  resampling the runs of X and Y independently within each game;
- :func:`performance_profile`: the fraction of runs (× games) scoring above each threshold τ
  (``rliable.library.create_performance_profile``), with CIs;
- :func:`sample_efficiency`: the IQM with its CI at each point of a learning curve;
- :func:`placement`: where one run's score falls among a published algorithm's runs of the same
  game (their 5th/25th/50th/75th/95th percentiles and the run's percentile rank), the check a
  single seed allows when the published data has 100 runs per game (rliable's Atari 100k data);
- :func:`predicted_atari57_median`: the Atari-5 prediction of the 57-game median (Aitchison,
  Sweetser & Hutter 2023, "Atari-5: Distilling the Arcade Learning Environment down to Five
  Games", ICML).

Normalisations (a suite's ``normalisation``; all map a raw score s affinely, ``(s − zero) / (one −
zero)``, so 0 is the suite's "nothing learned" and 1 its reference):

- ``human`` (Atari): zero = random play, one = the human score, from
  ``zoo/reference_data/atari_human_random.csv`` (deepmind/dqn_zoo ``atari_data.py``, the values
  Mnih et al. 2015 and the Atari 100k literature use; the per-run Atari 100k data of rliable was
  normalised with the same numbers for its 26 games).
- ``random_sigma`` (MinAtar): no human (or other published per-game) scores exist for MinAtar,
  so the normalisation uses random play only: zero = the mean return of uniform random play, one
  = that mean plus its standard deviation over games. A normalised score of 10 is "ten standard
  deviations of random play above random play". Both numbers are measured under zoo's
  ``minatar`` protocol by ``benchmarks/minatar_random.py`` (5,000 games per game, seed 0) and
  stored in ``zoo/bench/data/minatar_random.csv``. It is reproducible and scale-free, and needs
  no number that nobody published; it has no notion of "solved", so on MinAtar the optimality
  gap (threshold 1: one standard deviation above random) only says whether runs beat random play.
- ``return_range`` (classic control): zero and one are the lowest and highest returns the
  environment's rewards and time limit allow (CartPole-v1: 0 and its maximum return 500;
  Acrobot-v1: −500 and 0; MountainCar-v0: −200 and 0), in
  ``zoo/bench/data/classic_return_range.csv``.

Unequal numbers of runs per game: rliable's stratified bootstrap needs a full matrix (the same
number of runs on every game). :func:`normalise` refuses a ragged input by default;
``ragged="truncate"`` keeps the first k runs of every game, k the fewest runs any game has (runs
are given in seed order, so that is the k lowest seeds), and the report says which runs that
left out.

Randomness: rliable draws its bootstrap indices from NumPy's global generator; each function
here seeds it with ``seed`` for the duration of the call and restores its previous state, so equal
arguments give equal intervals.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zoo import reference as ref_lib
from zoo.bench.errors import BenchError
from zoo.bench.suites import SUITES, Suite

__all__ = [
    "METRICS",
    "PLACEMENT_QUANTILES",
    "Interval",
    "Placement",
    "Profile",
    "aggregate",
    "anchors",
    "normalise",
    "performance_profile",
    "placement",
    "predicted_atari57_median",
    "probability_of_improvement",
    "sample_efficiency",
]

#: The aggregate metrics of :func:`aggregate`, in order.
METRICS: tuple[str, ...] = ("iqm", "median", "mean", "optimality_gap")

#: How a score table is given to :func:`normalise`: a suite, its name, or per game the raw scores
#: that normalise to 0 and to 1.
SuiteOrTable = Suite | str | Mapping[str, tuple[float, float]]


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval [lo, hi] (95% unless said otherwise)."""

    point: float
    lo: float
    hi: float

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in [lo, hi]."""
        return self.lo <= value <= self.hi

    def overlaps(self, other: Interval) -> bool:
        """Whether the two intervals share a point."""
        return self.lo <= other.hi and other.lo <= self.hi

    def to_dict(self) -> dict[str, float]:
        return {"point": self.point, "lo": self.lo, "hi": self.hi}


@dataclass(frozen=True)
class Profile:
    """A performance profile: at each threshold τ, the fraction of runs scoring above it."""

    taus: np.ndarray
    fraction: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


# ------------------------------------------------------------------------------ normalisation


def _data() -> Path:
    return Path(__file__).resolve().parent / "data"


def _read_csv(name: str) -> list[dict[str, str]]:
    text = (_data() / name).read_text(encoding="utf-8")
    return list(
        csv.DictReader(
            io.StringIO("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")))
        )
    )


@functools.cache
def _minatar_table() -> dict[str, tuple[float, float]]:
    rows = _read_csv("minatar_random.csv")
    return {
        ref_lib.game_key(r["env"]): (
            float(r["random_mean"]),
            float(r["random_mean"]) + float(r["random_std"]),
        )
        for r in rows
    }


@functools.cache
def _return_range_table() -> dict[str, tuple[float, float]]:
    rows = _read_csv("classic_return_range.csv")
    return {ref_lib.game_key(r["env"]): (float(r["lowest"]), float(r["highest"])) for r in rows}


def anchors(normalisation: str, game: str) -> tuple[float, float]:
    """The raw scores of ``game`` that normalise to 0 and to 1 under ``normalisation``.

    Raises:
      BenchError: an unknown normalisation, or a game it has no numbers for.
    """
    if normalisation == "human":
        found = ref_lib.human_random(game)
        where = "zoo/reference_data/atari_human_random.csv"
    elif normalisation == "random_sigma":
        found = _minatar_table().get(ref_lib.game_key(game))
        where = "zoo/bench/data/minatar_random.csv"
    elif normalisation == "return_range":
        found = _return_range_table().get(ref_lib.game_key(game))
        where = "zoo/bench/data/classic_return_range.csv"
    else:
        raise BenchError(f"unknown normalisation {normalisation!r}")
    if found is None:
        raise BenchError(f"no {normalisation} normalisation for {game!r} (not in {where})")
    return found


def _table(suite_or_table: SuiteOrTable, games: Sequence[str]) -> dict[str, tuple[float, float]]:
    if isinstance(suite_or_table, str):
        from zoo.bench.suites import get_suite

        suite_or_table = get_suite(suite_or_table)
    if isinstance(suite_or_table, Suite):
        return {g: anchors(suite_or_table.normalisation, g) for g in games}
    by_key = {ref_lib.game_key(g): tuple(v) for g, v in suite_or_table.items()}
    missing = [g for g in games if ref_lib.game_key(g) not in by_key]
    if missing:
        raise BenchError(f"the normalisation table has no entry for {', '.join(missing)}")
    return {g: by_key[ref_lib.game_key(g)] for g in games}  # type: ignore[misc]


def normalise(
    raw: Mapping[str, Sequence[float]],
    suite_or_table: SuiteOrTable,
    *,
    games: Sequence[str] | None = None,
    ragged: Literal["error", "truncate"] = "error",
) -> np.ndarray:
    """Normalised scores ``[num_runs, num_games]`` from raw scores per game.

    Args:
      raw: per game (any spelling :func:`zoo.reference.game_key` matches), the raw score of each
        run, in seed order.
      suite_or_table: a :class:`~zoo.bench.suites.Suite` or suite name (its normalisation, see the
        module docstring), or per game the raw scores ``(zero, one)`` that normalise to 0 and 1.
      games: the games (columns) in order; default the suite's games, or ``raw``'s for a table.
      ragged: what to do when games have different numbers of runs: ``"error"`` (raise), or
        ``"truncate"``: keep the first k runs of every game, k the fewest any game has.

    Raises:
      BenchError: a game of ``games`` missing from ``raw`` (or ``raw`` holding games outside
        them), a game without normalisation numbers, a game with no run, or ragged runs with
        ``ragged="error"``.
    """
    if games is None:
        if isinstance(suite_or_table, Suite | str):
            from zoo.bench.suites import get_suite

            suite = (
                suite_or_table if isinstance(suite_or_table, Suite) else get_suite(suite_or_table)
            )
            games = suite.games
        else:
            games = list(raw)
    by_key = {ref_lib.game_key(g): list(v) for g, v in raw.items()}
    wanted = {ref_lib.game_key(g) for g in games}
    missing = [g for g in games if ref_lib.game_key(g) not in by_key]
    extra = [g for g in raw if ref_lib.game_key(g) not in wanted]
    if missing or extra:
        raise BenchError(
            "scores do not fit the games: "
            + "; ".join(
                part
                for part in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"not among them {', '.join(extra)}" if extra else "",
                )
                if part
            )
        )
    columns = [by_key[ref_lib.game_key(g)] for g in games]
    counts = [len(c) for c in columns]
    if min(counts) == 0:
        empty = [g for g, n in zip(games, counts, strict=True) if n == 0]
        raise BenchError(f"no run for {', '.join(empty)}")
    if len(set(counts)) > 1:
        if ragged != "truncate":
            shown = ", ".join(f"{g}: {n}" for g, n in zip(games, counts, strict=True))
            raise BenchError(
                f"games have different numbers of runs ({shown}); the stratified bootstrap needs "
                "as many runs on every game: pass ragged='truncate' to keep the first "
                f"{min(counts)} of each"
            )
        columns = [c[: min(counts)] for c in columns]
    table = _table(suite_or_table, games)
    out = np.empty((len(columns[0]), len(games)))
    for j, (game, column) in enumerate(zip(games, columns, strict=True)):
        zero, one = table[game]
        out[:, j] = (np.asarray(column, dtype=float) - zero) / (one - zero)
    return out


# ------------------------------------------------------------------------------ bootstrap


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """NumPy's global generator seeded with ``seed`` inside, restored after (rliable uses it)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _check(scores: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name, matrix in scores.items():
        matrix = np.asarray(matrix, dtype=float)
        if matrix.ndim != 2 or 0 in matrix.shape:
            raise BenchError(f"{name}: a score matrix is [num_runs, num_games], not {matrix.shape}")
        if not np.all(np.isfinite(matrix)):
            raise BenchError(f"{name}: the score matrix holds NaN or infinite values")
        out[name] = matrix
    games = {m.shape[1] for m in out.values()}
    if len(games) > 1:
        raise BenchError(f"score matrices over different numbers of games: {sorted(games)}")
    return out


def aggregate(
    scores: Mapping[str, np.ndarray],
    reps: int = 50000,
    seed: int = 0,
    *,
    gap_threshold: float = 1.0,
    confidence: float = 0.95,
) -> dict[str, dict[str, Interval]]:
    """IQM, median, mean and optimality gap of each algorithm, with stratified-bootstrap CIs.

    As in Agarwal et al. 2021 (rliable's ``aggregate_iqm``, ``aggregate_median``,
    ``aggregate_mean``, ``aggregate_optimality_gap`` under ``get_interval_estimates``, percentile
    method): the median and mean are over games of the per-game mean over runs; the IQM is the
    25%-trimmed mean of all runs × games; the optimality gap is ``gap_threshold`` minus the mean
    of the scores clipped at it. One bootstrap of ``reps`` resamples gives all four intervals.

    Args:
      scores: per algorithm, its normalised score matrix ``[num_runs, num_games]`` (the same games
        in the same order for all).
      reps: bootstrap resamples (the paper uses 50,000; fewer give rougher interval ends, the
        point estimates do not depend on it).
      seed: seeds the resampling.
      gap_threshold: γ of the optimality gap (1 = human on Atari).
      confidence: the coverage of the intervals.

    Returns:
      ``{algorithm: {metric: Interval}}`` for the metrics of :data:`METRICS`.
    """
    from rliable import library, metrics

    checked = _check(scores)

    def func(x: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metrics.aggregate_iqm(x),
                metrics.aggregate_median(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_optimality_gap(x, gap_threshold),
            ]
        )

    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            checked, func, reps=reps, confidence_interval_size=confidence
        )
    return {
        name: {
            metric: Interval(
                float(points[name][i]), float(intervals[name][0, i]), float(intervals[name][1, i])
            )
            for i, metric in enumerate(METRICS)
        }
        for name in checked
    }


def probability_of_improvement(
    scores: Mapping[str, np.ndarray],
    reps: int = 2000,
    seed: int = 0,
    *,
    confidence: float = 0.95,
) -> dict[tuple[str, str], Interval]:
    """P(X > Y) for each ordered pair of algorithms, with a CI.

    Agarwal et al. 2021: the probability that a run of X scores above a run of Y on the same
    game (ties count half; the Mann-Whitney U statistic over the number of run pairs), averaged
    over games (``rliable.metrics.probability_of_improvement``). The CI resamples the runs of X
    and of Y independently within each game (rliable's ``StratifiedIndependentBootstrap``), so X
    and Y may have different numbers of runs. ``reps`` defaults to 2,000, the rliable notebook's
    value for this statistic (each resample computes one U statistic per game).

    Returns:
      ``{(x, y): Interval}`` for every ordered pair ``x != y``; P(Y > X) = 1 − P(X > Y).
    """
    from rliable import library, metrics

    checked = _check(scores)
    names = list(checked)
    # one bootstrap per unordered pair: P(Y > X) = 1 − P(X > Y) on the same resamples
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
    if not pairs:
        return {}
    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            {str(i): [checked[x], checked[y]] for i, (x, y) in enumerate(pairs)},
            metrics.probability_of_improvement,
            reps=reps,
            confidence_interval_size=confidence,
        )
    out: dict[tuple[str, str], Interval] = {}
    for i, (x, y) in enumerate(pairs):
        point = float(points[str(i)])
        lo, hi = (float(v) for v in np.ravel(intervals[str(i)])[:2])
        out[(x, y)] = Interval(point, lo, hi)
        out[(y, x)] = Interval(1.0 - point, 1.0 - hi, 1.0 - lo)
    return out


def performance_profile(
    scores: Mapping[str, np.ndarray],
    taus: Sequence[float] | np.ndarray,
    reps: int = 2000,
    seed: int = 0,
    *,
    confidence: float = 0.95,
) -> dict[str, Profile]:
    """Score distributions: at each τ, the fraction of runs × games with score > τ, with CIs.

    ``rliable.library.create_performance_profile`` with its defaults (run-score distributions,
    percentile bootstrap, ``reps`` 2,000), as in Agarwal et al. 2021, Figure 5.
    """
    from rliable import library

    checked = _check(scores)
    taus = np.asarray(taus, dtype=float)
    with _seeded(seed):
        profiles, cis = library.create_performance_profile(
            checked, taus, reps=reps, confidence_interval_size=confidence
        )
    return {
        name: Profile(taus, np.asarray(profiles[name]), cis[name][0], cis[name][1])
        for name in checked
    }


def sample_efficiency(
    curves: Mapping[str, np.ndarray],
    frames: Sequence[int],
    reps: int = 2000,
    seed: int = 0,
    *,
    confidence: float = 0.95,
) -> dict[str, list[Interval]]:
    """The IQM with its CI at each point of the learning curves.

    Args:
      curves: per algorithm, normalised scores ``[num_points, num_runs, num_games]``: the score of
        each run on each game at each of ``frames``.
      frames: the frames of the points.
      reps: bootstrap resamples; one resample of runs serves every point (as in rliable's
        sample-efficiency curves: a run is resampled with its whole curve).

    Returns:
      ``{algorithm: [Interval per point of frames]}``.
    """
    from rliable import library, metrics

    arrays = {}
    for name, curve in curves.items():
        curve = np.asarray(curve, dtype=float)
        if curve.ndim != 3 or curve.shape[0] != len(frames):
            raise BenchError(
                f"{name}: a curve is [num_points = {len(frames)}, num_runs, num_games], not "
                f"{curve.shape}"
            )
        if not np.all(np.isfinite(curve)):
            raise BenchError(f"{name}: the curve holds NaN or infinite values")
        arrays[name] = np.moveaxis(curve, 0, -1)  # [runs, games, points], as rliable resamples

    def func(x: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(x[..., i]) for i in range(x.shape[-1])])

    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            arrays, func, reps=reps, confidence_interval_size=confidence
        )
    return {
        name: [
            Interval(
                float(points[name][i]), float(intervals[name][0, i]), float(intervals[name][1, i])
            )
            for i in range(len(frames))
        ]
        for name in arrays
    }


# ------------------------------------------------------------------------------ Atari-5


def predicted_atari57_median(
    hns_by_game: Mapping[str, float], weights: Mapping[str, float] | None = None
) -> float:
    """The 57-game median human-normalised score predicted from the five Atari-5 games.

    Aitchison, Sweetser & Hutter 2023, "Atari-5: Distilling the Arcade Learning Environment down
    to Five Games" (ICML): with HNSᵢ% the human-normalised score of game i in percent,
    ``median% = 10 ** (Σ wᵢ · log10(1 + max(HNSᵢ%, 0))) − 1``, weights BattleZone 0.3820,
    DoubleDunk 0.0679, NameThisGame 0.3108, Phoenix 0.1241, Qbert 0.0805 (no intercept; the paper
    reports predictions within 10% of the true median). The weights are the ``atari5`` suite's
    (``zoo/bench/suites.yaml``). The paper's data normalise DoubleDunk with random = −18.55;
    zoo's table (dqn_zoo) has −18.6, which moves a DoubleDunk HNS by about 2%, and the prediction
    by far less (its weight is 0.07).

    Args:
      hns_by_game: human-normalised scores as fractions (1.0 = human), per game (any spelling of
        the five names; other games are ignored).
      weights: per game its weight; default the ``atari5`` suite's.

    Returns:
      The predicted median as a fraction (1.0 = human).

    Raises:
      BenchError: a game of the five is missing.
    """
    weights = dict(weights if weights is not None else SUITES["atari5"].predictor_weights)
    by_key = {ref_lib.game_key(g): float(v) for g, v in hns_by_game.items()}
    missing = [g for g in weights if ref_lib.game_key(g) not in by_key]
    if missing:
        raise BenchError(f"the Atari-5 prediction needs {', '.join(missing)}")
    exponent = sum(
        w * math.log10(1.0 + max(100.0 * by_key[ref_lib.game_key(g)], 0.0))
        for g, w in weights.items()
    )
    return (10.0**exponent - 1.0) / 100.0


#: The percentiles of the published runs a :class:`Placement` reports.
PLACEMENT_QUANTILES: tuple[int, ...] = (5, 25, 50, 75, 95)


@dataclass(frozen=True)
class Placement:
    """Where a score falls among published runs of one game.

    Attributes:
      score: the run's raw score.
      runs: how many published runs there are.
      quantiles: their raw-score percentiles at :data:`PLACEMENT_QUANTILES` (NumPy's default,
        linear interpolation between order statistics).
      rank: the run's percentile rank among them, in [0, 100]: the percentage of published runs
        below the score, ties counted half (the mid-rank definition).
    """

    score: float
    runs: int
    quantiles: dict[int, float]
    rank: float

    @property
    def below_5th(self) -> bool:
        """Whether the score lies below the published 5th percentile (worth a look before it
        counts as a result)."""
        return self.score < self.quantiles[5]

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "runs": self.runs,
            "quantiles": {str(q): v for q, v in self.quantiles.items()},
            "rank": self.rank,
        }


def placement(score: float, runs: Sequence[float] | np.ndarray) -> Placement:
    """Place ``score`` among published ``runs`` of the same game (raw scores).

    Raises:
      BenchError: no published run, or a score or run that is not finite.
    """
    values = np.asarray(runs, dtype=float).ravel()
    if values.size == 0:
        raise BenchError("no published runs to place a score among")
    if not (math.isfinite(score) and np.isfinite(values).all()):
        raise BenchError("a score to place, and every published run, must be finite")
    below = float(np.sum(values < score))
    ties = float(np.sum(values == score))
    return Placement(
        score=float(score),
        runs=int(values.size),
        quantiles={q: float(np.percentile(values, q)) for q in PLACEMENT_QUANTILES},
        rank=100.0 * (below + 0.5 * ties) / values.size,
    )


def interval_table(
    results: Mapping[str, Mapping[str, Interval]], fmt: Callable[[float], str] = "{:.3f}".format
) -> dict[str, dict[str, str]]:
    """``point [lo, hi]`` strings of :func:`aggregate`'s results, for tables."""
    return {
        name: {m: f"{fmt(iv.point)} [{fmt(iv.lo)}, {fmt(iv.hi)}]" for m, iv in per.items()}
        for name, per in results.items()
    }


def to_jsonable(value: Any) -> Any:
    """Intervals, profiles, arrays and tuples as plain JSON values."""
    if isinstance(value, Interval):
        return value.to_dict()
    if isinstance(value, Profile):
        return {
            "taus": value.taus.tolist(),
            "fraction": value.fraction.tolist(),
            "lo": np.asarray(value.lo).tolist(),
            "hi": np.asarray(value.hi).tolist(),
        }
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {
            (k if isinstance(k, str) else " > ".join(map(str, k))): to_jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value
