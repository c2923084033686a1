"""``zoo.bench``'s suites and statistics against published figures and hand-computed numbers.

The shipped Atari 100k runs of DrQ(ε) and SPR must give the aggregates Agarwal et al. 2021
("Deep Reinforcement Learning at the Edge of the Statistical Precipice", NeurIPS) report; the
aggregation is also checked against scipy and against matrices whose answer is known.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from zoo import reference as ref_lib
from zoo.bench import stats
from zoo.bench.errors import BenchError
from zoo.bench.published import published, published_runs
from zoo.bench.suites import SUITES, format_suites, get_suite
from zoo.reproduce import game_env_id

pytestmark = pytest.mark.unit

# Agarwal et al. 2021 (Atari 100k, human-normalised, 26 games × 100 runs): IQM, median, mean
PUBLISHED = {"DrQ(ε)": (0.280, 0.313, 0.465), "SPR": (0.337, 0.396, 0.616)}


@pytest.fixture(scope="module")
def atari100k():
    suite = get_suite("atari100k")
    raw = published_runs("atari100k")
    scores = {
        label: stats.normalise(dict(zip(suite.games, m.T, strict=True)), suite)
        for label, m in raw.items()
    }
    return suite, raw, scores


def test_published_atari100k_runs_give_the_papers_aggregates(atari100k):
    _, raw, scores = atari100k
    assert {k: v.shape for k, v in raw.items()} == {
        "DrQ(ε)": (100, 26),
        "SPR": (100, 26),
        "BBF (RR=8)": (52, 26),  # 52 to 60 runs per game: the first 52 of each
        "BBF (RR=2)": (14, 26),
    }
    results = stats.aggregate(scores, reps=300, seed=0)
    for label, (iqm, median, mean) in PUBLISHED.items():
        got = results[label]
        assert round(got["iqm"].point, 3) == iqm
        assert round(got["median"].point, 3) == median
        assert round(got["mean"].point, 3) == mean
        for metric, value in zip(("iqm", "median", "mean"), (iqm, median, mean), strict=True):
            assert got[metric].contains(value), (label, metric, got[metric])
            assert got[metric].hi - got[metric].lo < 0.1


def test_published_bbf_runs_give_the_papers_iqm(atari100k):
    """BBF's per-run data (Schwarzer et al. 2023): the IQM over the first 52 runs of each game,
    computed here as a trimmed mean of the pooled scores by hand, equals the aggregate's, and
    its 95% interval holds the paper's IQM of 1.045 at replay ratio 8."""
    suite, _, scores = atari100k
    bbf = next(p for p in published("atari100k") if p.label == "BBF (RR=8)")
    assert bbf.runs(suite.games) == [len(bbf.scores[g]) for g in suite.games]
    assert (min(bbf.runs(suite.games)), max(bbf.runs(suite.games))) == (52, 60)
    # one game's matrix holds every run of it (a run is placed among all of its game's)
    assert bbf.matrix(["Krull-v5"]).shape == (len(bbf.scores["Krull-v5"]), 1)
    results = stats.aggregate({k: scores[k] for k in ("BBF (RR=8)", "BBF (RR=2)")}, reps=300)
    for label, iqm in (("BBF (RR=8)", 1.033), ("BBF (RR=2)", 0.940)):
        pooled = np.sort(scores[label].ravel())
        n = len(pooled)
        assert round(float(pooled[n // 4 : n - n // 4].mean()), 3) == iqm
        assert round(results[label]["iqm"].point, 3) == iqm
    assert results["BBF (RR=8)"]["iqm"].contains(1.045)


def test_the_published_normaliser_is_zoos_table():
    """rliable's RANDOM/HUMAN for the 26 games equal dqn_zoo's (what normalise uses)."""
    from pathlib import Path

    import zoo.bench

    data = Path(zoo.bench.__file__).parent / "data"
    random = json.loads((data / "atari100k_RANDOM.json").read_text())
    human = json.loads((data / "atari100k_HUMAN.json").read_text())
    assert len(random) == len(human) == 26
    for game in random:
        assert ref_lib.human_random(game) == (random[game][0], human[game][0]), game
    assert [ref_lib.game_key(g) for g in get_suite("atari100k").games] == [
        ref_lib.game_key(g) for g in random
    ]


def test_iqm_equals_a_trimmed_mean_by_hand_and_median_mean_by_numpy(atari100k):
    _, _, scores = atari100k
    matrix = scores["SPR"]
    results = stats.aggregate({"SPR": matrix}, reps=50, seed=0)["SPR"]
    assert results["iqm"].point == pytest.approx(scipy_stats.trim_mean(matrix.ravel(), 0.25))
    assert results["median"].point == pytest.approx(np.median(matrix.mean(axis=0)))
    assert results["mean"].point == pytest.approx(matrix.mean())
    assert results["optimality_gap"].point == pytest.approx(1 - np.minimum(matrix, 1).mean())
    # an IQM by hand on a small matrix: 8 values, the middle 4 are 3, 4, 5, 6
    small = np.array([[1.0, 8.0, 3.0, 6.0], [2.0, 7.0, 4.0, 5.0]])
    assert stats.aggregate({"x": small}, reps=20)["x"]["iqm"].point == pytest.approx(4.5)


def test_bootstrap_is_reproducible_and_leaves_numpys_generator_alone():
    rng = np.random.default_rng(1)
    scores = {"a": rng.normal(size=(5, 4)), "b": rng.normal(size=(5, 4))}
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = stats.aggregate(scores, reps=200, seed=7)
    assert np.array_equal(np.random.get_state()[1], before)
    assert stats.aggregate(scores, reps=200, seed=7) == first
    assert stats.aggregate(scores, reps=200, seed=8)["a"]["iqm"] != first["a"]["iqm"]


def test_probability_of_improvement_on_matrices_with_known_answers():
    a = np.array([[5.0, 6.0], [7.0, 8.0], [6.0, 9.0]])
    b = a - 10.0  # every run of a beats every run of b, on every game
    c = np.array([[5.0, 1.0], [7.0, 2.0], [6.0, 3.0]])  # game 0 as a (ties: 0.5), game 1 below
    poi = stats.probability_of_improvement({"a": a, "b": b, "c": c}, reps=100, seed=0)
    assert poi[("a", "b")] == stats.Interval(1.0, 1.0, 1.0)
    assert poi[("b", "a")] == stats.Interval(0.0, 0.0, 0.0)
    # game 0: identical columns → 0.5; game 1: a always above → 1.0; mean 0.75
    assert poi[("a", "c")].point == pytest.approx(0.75)
    assert poi[("c", "a")].point == pytest.approx(0.25)
    # one run each, game 0: 2 > 1 (1.0), game 1: 1 < 3 (0.0), game 2: tie (0.5) → 0.5
    single = stats.probability_of_improvement(
        {"x": np.array([[2.0, 1.0, 4.0]]), "y": np.array([[1.0, 3.0, 4.0]])}, reps=10
    )
    assert single[("x", "y")].point == pytest.approx(0.5)


def test_performance_profile_fractions_by_hand():
    scores = {"a": np.array([[0.0, 1.0], [2.0, 3.0]])}
    profile = stats.performance_profile(scores, [-1.0, 0.5, 2.5, 3.0], reps=50)["a"]
    assert profile.fraction.tolist() == [1.0, 0.75, 0.25, 0.0]


def test_sample_efficiency_is_the_iqm_at_each_point():
    rng = np.random.default_rng(0)
    curve = rng.normal(size=(3, 6, 4))  # points, runs, games
    got = stats.sample_efficiency({"a": curve}, [10, 20, 30], reps=100)["a"]
    assert [iv.point for iv in got] == pytest.approx(
        [scipy_stats.trim_mean(curve[i].ravel(), 0.25) for i in range(3)]
    )
    assert all(iv.lo <= iv.point <= iv.hi for iv in got)
    with pytest.raises(BenchError, match="num_points = 2"):
        stats.sample_efficiency({"a": curve}, [10, 20])


def test_atari5_prediction_by_hand():
    # HNS% 99, 9, 0, −5 (clipped to 0), 999: log10(1 + x) = 2, 1, 0, 0, 3
    hns = {
        "battle_zone": 0.99,
        "DoubleDunk-v5": 0.09,
        "NameThisGame": 0.0,
        "Phoenix-v5": -0.05,
        "Qbert-v5": 9.99,
        "Pong-v5": 5.0,  # not one of the five: ignored
    }
    exponent = 0.3820 * 2 + 0.0679 * 1 + 0.3108 * 0 + 0.1241 * 0 + 0.0805 * 3
    assert exponent == pytest.approx(1.0734)
    expected = (10**1.0734 - 1) / 100  # 10.841% as a fraction
    assert stats.predicted_atari57_median(hns) == pytest.approx(expected)
    assert expected == pytest.approx(0.10841, abs=1e-5)
    with pytest.raises(BenchError, match="Qbert"):
        stats.predicted_atari57_median({k: v for k, v in hns.items() if k != "Qbert-v5"})


def test_normalisations_of_each_family():
    # human: Breakout random 1.7, human 30.5
    m = stats.normalise({"Breakout-v5": [1.7, 30.5, 16.1]}, {"Breakout-v5": (1.7, 30.5)})
    assert m[:, 0] == pytest.approx([0.0, 1.0, 0.5])
    assert stats.anchors("human", "breakout") == (1.7, 30.5)
    # MinAtar: random mean and mean + σ, as measured (zoo/bench/data/minatar_random.csv)
    zero, one = stats.anchors("random_sigma", "MinAtar/Breakout-v1")
    assert (zero, one) == pytest.approx((0.5010, 0.5010 + 0.7281))
    minatar = get_suite("minatar")
    raw = {g: [stats.anchors("random_sigma", g)[1]] * 2 for g in minatar.games}
    assert stats.normalise(raw, minatar) == pytest.approx(np.ones((2, 5)))
    # classic: the return range the env allows
    assert stats.anchors("return_range", "CartPole-v1") == (0.0, 500.0)
    assert stats.normalise({"Acrobot-v1": [-500.0, -100.0]}, "classic", games=["Acrobot-v1"])[
        :, 0
    ] == pytest.approx([0.0, 0.8])


def test_normalise_refuses_ragged_runs_unless_told_to_truncate():
    raw = {"CartPole-v1": [100.0, 200.0, 300.0], "Acrobot-v1": [-400.0, -300.0]}
    games = ["CartPole-v1", "Acrobot-v1"]
    with pytest.raises(BenchError, match="CartPole-v1: 3, Acrobot-v1: 2"):
        stats.normalise(raw, "classic", games=games)
    m = stats.normalise(raw, "classic", games=games, ragged="truncate")
    assert m == pytest.approx(np.array([[0.2, 0.2], [0.4, 0.4]]))
    with pytest.raises(BenchError, match="missing MountainCar-v0"):
        stats.normalise(raw, "classic", ragged="truncate")


def test_suites_are_runnable_and_sourced():
    expected = {"atari57": 57, "atari100k": 26, "atari5": 5, "minatar": 5, "classic": 3}
    assert {name: len(s.games) for name, s in SUITES.items()} == expected
    for suite in SUITES.values():
        assert suite.source and suite.description and suite.frames > 0
        for game in suite.games:
            assert game_env_id(game) == game  # an id zoo train accepts as is
            stats.anchors(suite.normalisation, game)  # and one the normalisation covers
    assert get_suite("atari100k").protocol == "atari_100k"
    assert get_suite("atari100k").agent_steps == 100_000
    assert get_suite("minatar").games[1] == "MinAtar/Breakout-v1"
    assert sum(get_suite("atari5").predictor_weights.values()) == pytest.approx(0.9653)
    assert set(get_suite("atari5").games) <= set(get_suite("atari57").games)
    assert set(get_suite("atari100k").games) <= set(get_suite("atari57").games)
    text = format_suites()
    for name in expected:
        assert name in text
    assert "400,000 frames" in text and "atari_100k" in text
    assert [get_suite(n).statistic for n in ("atari100k", "minatar")] == ["evaluation", "training"]
    minatar_row = next(line for line in text.splitlines() if line.startswith("minatar "))
    assert minatar_row.split()[-2:] == ["random_sigma", "training"]


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(BenchError, match=r"did you mean 'atari100k'.*known suites: atari57"):
        get_suite("atari100")
    assert isinstance(BenchError("x"), ValueError)


def test_published_rows_carry_their_protocol_budget_and_source():
    items = published("atari100k")
    assert [p.label for p in items] == ["DrQ(ε)", "SPR", "BBF (RR=8)", "BBF (RR=2)"]
    for item in items:
        assert (item.protocol, item.statistic, item.frames) == ("atari_100k", "evaluation", 400_000)
        assert "arxiv.org" in item.source and "/work" not in item.source
    assert published_runs("minatar") == {}
    assert math.isfinite(published_runs("atari100k")["SPR"].sum())


@pytest.mark.unit
def test_placement_by_hand():
    runs = [1.0, 2.0, 2.0, 3.0, 10.0]
    where = stats.placement(2.0, runs)
    # one run below and two ties among five: (1 + 2 / 2) / 5
    assert where.rank == pytest.approx(40.0) and where.runs == 5
    # linear interpolation over the sorted runs at (n - 1)·q = 4q
    assert where.quantiles == pytest.approx({5: 1.2, 25: 2.0, 50: 2.0, 75: 3.0, 95: 8.6})
    assert stats.placement(0.5, runs).rank == 0.0 and stats.placement(0.5, runs).below_5th
    assert stats.placement(11.0, runs).rank == 100.0
    with pytest.raises(BenchError, match="no published runs"):
        stats.placement(1.0, [])
    with pytest.raises(BenchError, match="finite"):
        stats.placement(float("nan"), runs)
