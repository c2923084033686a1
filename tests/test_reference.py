"""Reference series: loading, lookups at a frame budget, human normalisation, protocol refusal.

Expected values are read by hand from the CSV files in zoo/reference_data (each names its source
in its header).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from zoo import reference as ref
from zoo.compare import record_series, training_statistic

pytestmark = pytest.mark.unit

DOPAMINE = [
    "dopamine/dqn_adam_mse",
    "dopamine/dqn",
    "dopamine/c51",
    "dopamine/rainbow",
    "dopamine/quantile",
    "dopamine/iqn",
]
PUBLISHED = [
    "published/DQN_nature_50M",
    "published/DQN_200M",
    "published/DDQN_tuned",
    "published/PrioDDQN_prop",
    "published/DistribDQN_rainbowimpl",
    "published/C51_paper",
    "published/QRDQN1_paper",
    "published/Rainbow",
    "published/IQN_paper",
]


def test_every_series_id_of_the_interface_is_shipped_with_protocol_and_statistic():
    ids = ref.series_ids()
    for series_id in [*DOPAMINE, *PUBLISHED, "atari100k/der", "cleanrl/dqn_cartpole"]:
        assert series_id in ids
        series = ref.load_series(series_id)
        assert series.kind == "published"
        assert series.source
    for series_id in DOPAMINE:
        s = ref.load_series(series_id)
        assert (s.protocol, s.statistic, s.window_frames) == ("dopamine_2018", "training", 10**6)
        assert len(s.games) == 60
    for series_id in PUBLISHED:
        s = ref.load_series(series_id)
        assert (s.protocol, s.statistic) == ("nature_2015", "evaluation")
    assert ref.load_series("atari100k/der").protocol == "atari_100k"
    cleanrl = ref.load_series("cleanrl/dqn_cartpole")
    assert (cleanrl.protocol, cleanrl.statistic) == ("classic", "training")


def test_dopamine_curves_at_10m_frames_match_the_csv():
    # dopamine_atari_curves.csv: pong,DQN (Adam + MSE in JAX),9,10,6.34,0.58,15.93,5
    pong = ref.load_series("dopamine/dqn_adam_mse").value_at("Pong-v5", 10_000_000)
    assert (pong.mean, pong.min, pong.max, pong.seeds) == (6.34, 0.58, 15.93, 5)
    # The README's "15.9 at iteration 9" is one seed's value (the best seed, 15.93), not the mean.
    assert pong.min <= 15.9 <= pong.max
    # breakout,C51,9,10,47.14,43.62,49.58,5  (the README's 49.5 is again a seed's value)
    breakout = ref.load_series("dopamine/c51").value_at("breakout", 10_000_000)
    assert (breakout.mean, breakout.min, breakout.max) == (47.14, 43.62, 49.58)
    assert breakout.min <= 49.5 <= breakout.max
    # the first iteration is 1M frames: pong,DQN (Adam + MSE in JAX),0,1,-20.19,-20.27,-20.09,5
    first = ref.load_series("dopamine/dqn_adam_mse").value_at("PongNoFrameskip-v4", 1_000_000)
    assert first.mean == -20.19


def test_lookup_answers_only_at_a_budget_the_series_has():
    curves = ref.load_series("dopamine/dqn_adam_mse")
    with pytest.raises(ref.ReferenceLookupError, match=r"2,500,000 frames.*every 1,000,000"):
        curves.value_at("pong", 2_500_000)
    final = ref.load_series("published/DQN_nature_50M")
    assert final.value_at("pong", 50_000_000).mean == 18.9
    assert final.value_at("space_invaders", 50_000_000).mean == 1976
    with pytest.raises(ref.ReferenceLookupError, match=r"it has: 50,000,000"):
        final.value_at("pong", 200_000_000)
    assert ref.load_series("published/Rainbow").value_at("Breakout-v5", 200_000_000).mean == 417.5
    with pytest.raises(ref.ReferenceLookupError, match="no values for 'CartPole-v1'"):
        final.value_at("CartPole-v1", 50_000_000)


#: the 19 column names of BTR's results.csv, in its order
BTR_GAMES = [
    "Assault",
    "Asterix",
    "BattleZone",
    "BeamRider",
    "Boxing",
    "Breakout",
    "CrazyClimber",
    "DemonAttack",
    "DoubleDunk",
    "Enduro",
    "FishingDerby",
    "MsPacman",
    "NameThisGame",
    "Phoenix",
    "Pong",
    "Qbert",
    "SpaceInvaders",
    "Tutankham",
    "VideoPinball",
]


def zoo_btr_games() -> list[str]:
    """The btr preset's games without their ``-v5``."""
    import zoo

    return [g.removesuffix("-v5") for g in zoo.load_preset("btr").env.games]


def test_btr_series_holds_the_authors_results_csv():
    # VIPTankz/BeyondTheRainbowICML results.csv@86ee767, read by hand: line 1 is the header of
    # 19 games, line k + 1 the evaluation at k × 1M frames.
    btr = ref.load_series("published/BTR")
    assert (btr.kind, btr.protocol, btr.statistic, btr.window_frames) == (
        "published",
        "dopamine_2018",
        "evaluation",
        None,
    )
    assert "86ee767" in btr.source and "100 episodes" in btr.source
    assert btr.games == sorted(BTR_GAMES)
    for game in BTR_GAMES:
        assert btr.budgets(game) == [k * 1_000_000 for k in range(1, 201)]
    # line 2 (1M frames): Assault 382.83, Breakout 0.34, VideoPinball 7950.21
    assert btr.value_at("Assault-v5", 1_000_000).mean == 382.83
    assert btr.value_at("Breakout", 1_000_000).mean == 0.34
    assert btr.value_at("video_pinball", 1_000_000).mean == 7950.21
    # line 11 (10M frames): Breakout 239.3, Pong -6.04
    assert btr.value_at("Breakout-v5", 10_000_000).mean == 239.3
    assert btr.value_at("PongNoFrameskip-v4", 10_000_000).mean == -6.04
    # line 50 (49M frames): MsPacman 5615.82
    assert btr.value_at("ms_pacman", 49_000_000).mean == 5615.82
    # line 201, the last (200M frames), on the btr preset's five games: BattleZone 132230.0,
    # DoubleDunk 21.64, NameThisGame 28931.4, Phoenix 125452.2, Qbert 28704.5
    last = {g: btr.value_at(f"{g}-v5", 200_000_000).mean for g in zoo_btr_games()}
    assert last == {
        "BattleZone": 132230.0,
        "DoubleDunk": 21.64,
        "NameThisGame": 28931.4,
        "Phoenix": 125452.2,
        "Qbert": 28704.5,
    }
    # the file gives no seeds and no spread: none is made up
    point = btr.value_at("Qbert", 200_000_000)
    assert (point.min, point.max, point.std, point.seeds, point.range) == (None,) * 5
    with pytest.raises(ref.ReferenceLookupError, match=r"every 1,000,000 frames from 1,000,000"):
        btr.value_at("Pong", 2_500_000)


def test_btr_games_are_envpool_games():
    from zoo.reproduce import game_env_id

    for game in BTR_GAMES:
        assert game_env_id(game) == f"{game}-v5"


def test_a_points_table_loads_with_its_optional_columns(tmp_path, monkeypatch):
    (tmp_path / "pts_test.csv").write_text(
        "# a comment line\n"
        "game,frames,mean,min,max,std,seeds,tag\n"
        "Pong,2000000,-3.0,-5.0,-1.0,,3,V\n"
        "Pong,1000000,-20.0,,,,,\n"
        "CartPole-v1,500,480.0,,,16.0,,R\n"
    )
    (tmp_path / "pts_missing.csv").write_text("game,mean\nPong,1.0\n")
    monkeypatch.setattr(ref, "data_path", lambda: tmp_path)
    path = tmp_path / "series.yaml"
    entry = {"label": "x", "source": "x", "protocol": "dopamine_2018", "statistic": "evaluation"}
    path.write_text(
        yaml.safe_dump({"published/pts": {**entry, "points": {"file": "pts_test.csv"}}})
    )
    series = ref.load_series(str(path))
    assert series.budgets("Pong-v5") == [1_000_000, 2_000_000]  # sorted by frames
    assert series.value_at("pong", 1_000_000) == ref.Point(frames=1_000_000, mean=-20.0)
    second = series.value_at("pong", 2_000_000)
    assert (second.range, second.seeds, second.tag) == ((-5.0, -1.0), 3, "V")
    cartpole = series.value_at("CartPole-v1", 500)
    assert (cartpole.range_kind, cartpole.tag) == ("mean ± std", "R")
    path.write_text(
        yaml.safe_dump({"published/pts": {**entry, "points": {"file": "pts_missing.csv"}}})
    )
    with pytest.raises(ref.UnknownSeriesError, match=r"lacks the column\(s\) frames"):
        ref.load_series(str(path))


def _fake_btr_run(run: Path, seed: int, evaluation: float, training: float) -> None:
    """A run directory of the btr preset on Breakout at 2.5M agent steps (10M frames), made
    without training: its settings and a few records."""
    run.mkdir(parents=True)
    settings = {
        "algorithm": "btr",
        "preset": "btr",
        "env": "Breakout-v5",
        "protocol": "dopamine_2018",
        "num_envs": 64,
        "total_env_steps": 2_500_000,
        "seed": seed,
        "eval_every": 1_250_000,
        "eval_episodes": 100,
        "checkpoint_every": 1_250_000,
        "log_every": 1_250_000,
    }
    (run / "run.yaml").write_text(yaml.safe_dump(settings))
    metrics = [
        {"env_steps": 1_250_000, "updates": 16_406, "games": 400, "return": 10.0},
        {"env_steps": 2_500_000, "updates": 35_937, "games": 700, "return": training},
    ]
    evals = [
        {"env_steps": 1_250_000, "mean_return": 20.0},
        {"env_steps": 2_500_000, "mean_return": evaluation},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))


def test_compare_puts_a_btr_run_beside_the_published_btr_value(tmp_path, capsys):
    from zoo import cli

    root = tmp_path / "runs"
    _fake_btr_run(root / "seed0", 0, evaluation=200.0, training=150.0)
    _fake_btr_run(root / "seed1", 1, evaluation=260.0, training=170.0)
    code = cli.main(["compare", str(root), "--out", str(tmp_path / "cmp")])
    out, err = capsys.readouterr()
    assert code == 0, err
    # the preset's series is used: its evaluation at 10M frames, line 11 of results.csv: 239.3
    rows = json.loads((tmp_path / "cmp" / "comparison.json").read_text())["rows"]
    (row,) = [r for r in rows if r["series"] == "published/BTR"]
    assert (row["statistic"], row["frames"], row["seeds"]) == ("evaluation", 10_000_000, [0, 1])
    assert (row["mean"], row["min"], row["max"]) == (230.0, 200.0, 260.0)
    assert row["reference"]["mean"] == 239.3
    assert row["reference_hns"] == pytest.approx((239.3 - 1.7) / (30.5 - 1.7))
    assert row["inside"] is None and row["range_kind"] is None  # no spread to be inside
    assert "published/BTR (published)" in out and "239.3" in out and "n/a (no spread)" in out
    # the training statistic is shown too, without a reference
    (training,) = [r for r in rows if r["statistic"] == "training"]
    assert training["series"] is None and training["mean"] == 160.0
    assert (tmp_path / "cmp" / "comparison.png").read_bytes()[:4] == b"\x89PNG"


def test_recalled_values_are_tagged_and_cleanrl_carries_its_std():
    der = ref.load_series("atari100k/der")
    point = der.value_at("ms_pacman", 400_000)
    assert (point.mean, point.tag) == (1204.1, "R")
    assert der.aggregates["median_hns"] == 0.189
    cartpole = ref.load_series("cleanrl/dqn_cartpole").value_at("CartPole-v1", 500_000)
    assert (cartpole.mean, cartpole.std, cartpole.seeds) == (488.69, 16.11, 3)
    assert cartpole.range == pytest.approx((472.58, 504.80))
    assert cartpole.range_kind == "mean ± std"


def test_human_normalised_score():
    # atari_human_random.csv: breakout,1.7,30.5 -> (401.2 - 1.7) / (30.5 - 1.7) = 13.8715...
    assert ref.human_random("Breakout-v5") == (1.7, 30.5)
    assert ref.human_normalized("breakout", 401.2) == pytest.approx(399.5 / 28.8)
    # pong,-20.7,14.6: a human's score normalises to 1, a random agent's to 0
    assert ref.human_normalized("PongNoFrameskip-v4", 14.6) == pytest.approx(1.0)
    assert ref.human_normalized("pong", -20.7) == pytest.approx(0.0)
    assert ref.human_normalized("CartPole-v1", 500.0) is None


def test_game_keys_join_every_spelling():
    keys = {ref.game_key(n) for n in ("SpaceInvaders-v5", "space_invaders", "ALE/SpaceInvaders-v5")}
    assert keys == {"spaceinvaders"}
    assert ref.game_key("SpaceInvadersNoFrameskip-v4") == "spaceinvaders"
    assert ref.game_key("CartPole-v1") == "cartpolev1"


def test_comparison_across_protocols_is_refused_with_both_names():
    series = ref.load_series("dopamine/dqn_adam_mse")
    with pytest.raises(ref.ProtocolMismatchError) as info:
        ref.check_protocol(series, "nature_2015")
    message = str(info.value)
    assert "'dopamine_2018'" in message and "'nature_2015'" in message
    assert "--protocol dopamine_2018" in message
    ref.check_protocol(series, "dopamine_2018")  # same protocol: accepted


def test_unknown_series_suggests_close_ids():
    with pytest.raises(ref.UnknownSeriesError, match="did you mean 'dopamine/c51'"):
        ref.load_series("dopamine/c52")


def test_training_statistic_weights_log_windows_by_their_games():
    metrics = [
        {"env_steps": 100, "games": 2, "return": 10.0},
        {"env_steps": 200, "games": 2},  # no game finished in this window
        {"env_steps": 300, "games": 5, "return": 20.0},  # 3 games
        {"env_steps": 400, "games": 6, "return": 40.0},  # 1 game
    ]
    # window (200, 400]: (3 * 20 + 1 * 40) / 4 = 25
    assert training_statistic(metrics, 400, 200) == (25.0, 4)
    # window (0, 400]: (2 * 10 + 3 * 20 + 40) / 6 = 20
    assert training_statistic(metrics, 400, 400) == (20.0, 6)
    assert training_statistic(metrics, 200, 100) == (None, 0)


def test_a_recorded_run_of_ours_is_never_published(tmp_path: Path):
    entry = ref.series_entry(
        "ours/dqn_cartpole",
        label="ours (documented run, not published)",
        source="runs of commit abc",
        protocol="classic",
        statistic="training",
        games={"CartPole-v1": {"frames": 100_000, "mean": 480.0, "min": 470.0, "max": 490.0}},
    )
    path = tmp_path / "ours.yaml"
    path.write_text(yaml.safe_dump(entry))
    series = ref.load_series(str(path))
    assert series.kind == "ours"
    assert series.kind_label == "ours (documented run, not published)"
    point = series.value_at("CartPole-v1", 100_000)
    assert point.range == (470.0, 490.0)
    with pytest.raises(ValueError, match="ours/NAME"):
        ref.series_entry(
            "published/mine",
            label="x",
            source="x",
            protocol="classic",
            statistic="training",
            games={},
        )
    assert json.dumps(entry)  # plain data
    assert callable(record_series)
