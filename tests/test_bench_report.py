"""``zoo.bench.report`` on real CartPole runs: two presets × two seeds at a tiny budget.

The budgets check bookkeeping and the report's numbers against the runs' own records, not
learning. A seed folder left empty stands for a run that never started.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from scipy import stats as scipy_stats

from zoo.bench import report, stats
from zoo.runs.metrics import read_jsonl

ALGOS = ("dqn_cartpole", "double_dqn_cartpole")
SEEDS = (0, 1)
BUDGET = 1000
# a small network and replay: compile time, not learning, is what a test pays for
FAST = {
    "network.hidden": [16],
    "replay.min_size": 200,
    "replay.capacity": BUDGET,
    "schedule.epsilon.steps": 500,
}


# the module's runs are trained by one module-scoped fixture: its tests share one xdist worker,
# so that the runs are trained once, not once per worker
pytestmark = pytest.mark.xdist_group("bench_report")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from zoo.runs import train

    root = tmp_path_factory.mktemp("bench")
    for algo in ALGOS:
        for seed in SEEDS:
            train(
                algo,
                env="CartPole-v1",
                total_env_steps=BUDGET,
                seed=seed,
                run_dir=root / algo / "CartPole-v1" / f"seed{seed}",
                overrides=FAST,
                eval_every=500,
                eval_episodes=3,
                save_replay=False,
                loop="host",
                progress=False,
            )
    (root / ALGOS[0] / "CartPole-v1" / "seed2").mkdir()  # a run that never started
    out = root / "report"
    paths = report.write_report(root, out, suite="classic", reps=500)
    return root, out, paths


def _last_eval(root, algo, seed):
    return read_jsonl(root / algo / "CartPole-v1" / f"seed{seed}" / "eval.jsonl")[-1]


@pytest.mark.run
def test_collect_reads_each_run_score_from_its_final_evaluation(bench):
    root, _, _ = bench
    data = report.collect(root)
    for algo in ALGOS:
        runs = data.finished(algo, "CartPole-v1")
        assert [r.seed for r in runs] == list(SEEDS)
        for run in runs:
            last = _last_eval(root, algo, run.seed)
            assert last["env_steps"] == BUDGET
            assert (run.score, run.statistic) == (last["mean_return"], "evaluation")
            assert run.env_steps == BUDGET and run.wall_s > 0 and run.env_steps_per_s > 0
            assert [f for f, _ in run.curve] == [500, 1000]


@pytest.mark.unit
def test_missing_runs_are_listed_not_dropped(bench):
    _, out, _ = bench
    payload = json.loads((out / "bench.json").read_text())
    missing = {(m["algo"], m["seed"], m["status"]) for m in payload["missing"]}
    # seed 2 exists (empty) for one algorithm, so it is expected of both
    assert missing == {(ALGOS[0], 2, "not started"), (ALGOS[1], 2, "not started")}
    md = (out / "bench.md").read_text()
    assert f"{ALGOS[0]} · CartPole-v1 · seed 2: not started" in md
    assert f"{ALGOS[1]} · CartPole-v1 · seed 2: not started" in md


@pytest.mark.unit
def test_report_numbers_match_the_runs_records(bench):
    root, out, paths = bench
    keys = ("intervals", "profiles", "improvement", "sample_efficiency", "game_curves")
    for key in ("md", "json", *keys):
        assert paths[key].stat().st_size > 0, key
    for key in keys:
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    payload = json.loads((out / "bench.json").read_text())
    assert payload["normalisation"] == "return_range" and payload["games"] == ["CartPole-v1"]
    md = (out / "bench.md").read_text()
    for algo in ALGOS:
        raw = [_last_eval(root, algo, s)["mean_return"] for s in SEEDS]
        assert payload["raw_scores"][algo] == [[v] for v in raw]
        # CartPole-v1's return range is [0, 500]: normalised = return / 500
        assert np.ravel(payload["normalised_scores"][algo]) == pytest.approx([v / 500 for v in raw])
        cell = f"{np.mean(raw):,.1f} [{min(raw):,.1f}, {max(raw):,.1f}] (n=2)"
        assert cell in md
        iqm = payload["aggregates"][algo]["iqm"]
        by_hand = scipy_stats.trim_mean(np.array(raw) / 500, 0.25)
        assert iqm["point"] == pytest.approx(by_hand)
        assert iqm["lo"] <= iqm["point"] <= iqm["hi"]
    a, b = ALGOS
    p_ab = payload["probability_of_improvement"][f"{a} > {b}"]["point"]
    p_ba = payload["probability_of_improvement"][f"{b} > {a}"]["point"]
    assert p_ab + p_ba == pytest.approx(1.0)
    assert len(payload["sample_efficiency"]["frames"]) == 2
    assert any(v.startswith("IQM") for v in payload["verdicts"])
    # the classic suite has no published per-run data: nothing to place the runs among
    assert payload["placements"] == [] and "among the published runs" not in md


@pytest.mark.unit
def test_a_report_without_a_suite_normalises_by_the_protocol_family(bench, tmp_path):
    root, _, _ = bench
    paths = report.write_report(root, tmp_path, reps=200)
    payload = json.loads(paths["json"].read_text())
    assert payload["suite"] is None and payload["normalisation"] == "return_range"
    direct = stats.aggregate(
        {a: np.array(payload["normalised_scores"][a]) for a in ALGOS}, reps=200, seed=0
    )
    for algo in ALGOS:
        assert payload["aggregates"][algo]["iqm"]["point"] == pytest.approx(
            direct[algo]["iqm"].point
        )
        assert payload["aggregates"][algo]["iqm"]["lo"] == pytest.approx(direct[algo]["iqm"].lo)


@pytest.mark.unit
def test_a_suite_scored_by_training_reads_each_runs_training_games(bench):
    """``statistic: training`` (MinAtar's suite): the score of every run is the mean return of
    its training games that ended in the last 10% of the budget, computed here from the log."""
    root, _, _ = bench
    data = report.collect(root, "training")
    for algo in ALGOS:
        for run in data.finished(algo, "CartPole-v1"):
            records = read_jsonl(root / algo / "CartPole-v1" / f"seed{run.seed}" / "metrics.jsonl")
            total = games = seen = 0
            for record in records:
                new, seen = record["games"] - seen, record["games"]
                if BUDGET - BUDGET // 10 < record["env_steps"] <= BUDGET and new > 0:
                    total, games = total + record["return"] * new, games + new
            if games:
                assert (run.score, run.statistic) == (pytest.approx(total / games), "training")
                assert not run.note
            else:  # no training game ended in the window: the evaluation, marked
                last = _last_eval(root, algo, run.seed)
                assert (run.score, run.statistic) == (last["mean_return"], "evaluation")
                assert run.note == "no training statistic at the budget: evaluation at the budget"
    assert any(r.statistic == "training" for r in data.runs)


@pytest.mark.unit
def test_one_seed_per_game_is_named_not_read_as_95_percent_confidence(bench, tmp_path):
    """With one run per game the stratified bootstrap has zero-width intervals; the report must
    not turn them into "do not overlap ... at 95% confidence" (a 2-game, 1-seed MinAtar bench
    did before this check)."""
    root, _, _ = bench
    single = tmp_path / "single"
    for algo in ALGOS:
        src = root / algo / "CartPole-v1" / "seed0"
        shutil.copytree(src, single / algo / "CartPole-v1" / "seed0")
    report.write_report(single, tmp_path / "out", suite="classic", reps=200)
    md = (tmp_path / "out" / "bench.md").read_text()
    supported = md.split("## What the intervals support", 1)[1].split("\n## ", 1)[0]
    assert "one run per game" in supported and "support no comparison" in supported
    assert "95% confidence" not in supported and "improves on" not in supported
    # with two seeds each (the module's report) the comparison is made
    full = (root / "report" / "bench.md").read_text()
    full_supported = full.split("## What the intervals support", 1)[1].split("\n## ", 1)[0]
    assert "one run per game" not in full_supported and "IQM:" in full_supported


@pytest.mark.unit
def test_each_run_is_placed_among_the_published_runs_of_its_game(tmp_path):
    """A finished Atari 100k run against rliable's 100 DrQ(ε) runs of its game, counted by hand."""
    from zoo.bench.published import published

    drq = next(p for p in published("atari100k") if p.label.startswith("DrQ"))
    boxing = sorted(drq.scores["Boxing-v5"])
    middle = boxing[50]
    runs = [
        report.BenchRun(
            "drq_eps",
            "Boxing-v5",
            0,
            tmp_path,
            "finished",
            score=middle,
            wall_s=3600.0,
            env_steps_per_s=20.0,
            updates_per_s=19.5,
        ),
        report.BenchRun("drq_eps", "Breakout-v5", 0, tmp_path, "finished", score=-1.0),
        report.BenchRun("drq_eps", "Pong-v5", 0, tmp_path, "unfinished"),
        report.BenchRun("drq_eps", "CartPole-v1", 0, tmp_path, "finished", score=100.0),
    ]
    placed = report.placements(report.BenchData(root=tmp_path, runs=runs), [drq])
    # the unfinished run and the game DrQ(ε) never played are not placed
    assert [(r.game, label) for r, label, _ in placed] == [
        ("Boxing-v5", drq.label),
        ("Breakout-v5", drq.label),
    ]
    where = placed[0][2]
    below = sum(v < middle for v in boxing)
    ties = sum(v == middle for v in boxing)
    assert where.runs == 100 and where.rank == pytest.approx(below + ties / 2)
    # numpy's linear percentile of 100 sorted values: p5 sits at index 4.95
    assert where.quantiles[5] == pytest.approx(boxing[4] + 0.95 * (boxing[5] - boxing[4]))
    assert where.quantiles[50] == pytest.approx((boxing[49] + boxing[50]) / 2)
    assert not where.below_5th
    breakout = placed[1][2]
    assert breakout.rank == 0.0 and breakout.below_5th


@pytest.mark.run
def test_a_report_includes_the_finished_runs_an_earlier_report_recorded(bench, tmp_path):
    """A benchmark made in two sessions: the second's folder lacks a run the first finished (its
    machine went with it). Including the first report's bench.json puts that run back with the
    score, curve and rates it recorded, so the report equals the one made from every folder; the
    folder's own finished runs win over their records, and bad reports are refused."""
    from zoo.bench.errors import BenchError

    root, out, _ = bench
    earlier_json = out / "bench.json"
    earlier = json.loads(earlier_json.read_text())
    later = tmp_path / "later"
    shutil.copytree(root, later, ignore=shutil.ignore_patterns("report"))
    shutil.rmtree(later / ALGOS[1] / "CartPole-v1" / "seed1")
    assert [r.seed for r in report.collect(later).finished(ALGOS[1], "CartPole-v1")] == [0]

    data = report.collect(later, include=[earlier_json], suite="classic")
    runs = data.finished(ALGOS[1], "CartPole-v1")
    assert [r.seed for r in runs] == [0, 1]
    assert runs[0].recorded is None and runs[1].recorded == str(earlier_json)
    entry = next(e for e in earlier["runs"] if e["algo"] == ALGOS[1] and e["seed"] == 1)
    assert runs[1].score == entry["score"] and runs[1].wall_s == entry["wall_s"]
    assert runs[1].curve == [tuple(p) for p in entry["curve"]]
    assert sum("the folder's finished run is reported" in n for n in data.notes) == 3

    paths = report.write_report(
        later, tmp_path / "out", suite="classic", reps=500, include=[earlier_json]
    )
    merged = json.loads(paths["json"].read_text())
    assert merged["raw_scores"] == earlier["raw_scores"]
    assert merged["aggregates"] == earlier["aggregates"]
    assert f"Runs recorded in `{earlier_json}`" in paths["md"].read_text()
    assert f"{ALGOS[1]} · CartPole-v1 · seed 1." in paths["md"].read_text()

    from zoo import cli  # the command line's report takes the same file

    argv = ["bench", "report", str(later), "--suite", "classic", "--reps", "500"]
    assert cli.main([*argv, "--include", str(earlier_json), "--out", str(tmp_path / "cli")]) == 0
    assert (
        json.loads((tmp_path / "cli" / "bench.json").read_text())["raw_scores"]
        == (earlier["raw_scores"])
    )

    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(BenchError, match="not a zoo bench report"):
        report.collect(later, include=[bad])
    with pytest.raises(BenchError, match="a report of suite 'classic'"):
        report.collect(later, include=[earlier_json], suite="minatar")
    edited = json.loads(earlier_json.read_text())
    next(e for e in edited["runs"] if e["status"] == "finished")["score"] = "high"
    bad.write_text(json.dumps(edited))
    with pytest.raises(BenchError, match="lacks or mistypes score"):
        report.collect(later, include=[bad])


@pytest.mark.run
def test_a_run_is_flagged_below_the_5th_percentile_of_the_algorithm_it_reproduces(tmp_path):
    """A DrQ(ε) run sits below every BBF run of its game and within DrQ(ε)'s: it is placed among
    all, flagged by none (published.yaml names drq_eps as DrQ(ε)'s preset, bbf as BBF RR=2's);
    a run of drq_eps below DrQ(ε)'s 5th percentile is flagged against DrQ(ε) alone."""
    from zoo.bench.published import published

    items = {p.label: p for p in published("atari100k")}
    assert items["DrQ(ε)"].presets == ("drq_eps",) and items["BBF (RR=2)"].presets == ("bbf",)
    breakout = sorted(items["DrQ(ε)"].scores["Breakout-v5"])
    runs = [
        report.BenchRun(
            "drq_eps", "Breakout-v5", 0, tmp_path, "finished", score=breakout[50],
            protocol="atari_100k", frame_skip=4, env_steps=100_000, budget_env_steps=100_000,
            statistic="evaluation", curve=[(400_000, breakout[50])],
        ),
        report.BenchRun(
            "drq_eps", "Boxing-v5", 0, tmp_path, "finished", score=-50.0,
            protocol="atari_100k", frame_skip=4, env_steps=100_000, budget_env_steps=100_000,
            statistic="evaluation", curve=[(400_000, -50.0)],
        ),
    ]  # fmt: skip
    data = report.BenchData(root=tmp_path, runs=runs)
    placed = report.placements(data, list(items.values()))
    below = {(r.game, label) for r, label, w in placed if w.below_5th}
    assert ("Breakout-v5", "BBF (RR=2)") in below and ("Breakout-v5", "DrQ(ε)") not in below
    text = report._markdown(  # the report's own line, from the same placements
        data, None, report._matrices(data, None), {}, {}, {}, [], [], {}, 10, "evaluation",
        placed, {label: p.presets for label, p in items.items()},
    )  # fmt: skip
    line = next(x for x in text.splitlines() if x.startswith("Below the 5th percentile"))
    header, flagged = line.split("): ", 1)
    assert header.endswith("drq_eps of DrQ(ε), spr of SPR, bbf of BBF (RR=2)")
    assert flagged.startswith("drq_eps Boxing-v5 seed 0 (-50.0 <") and flagged.endswith("DrQ(ε))")
    assert "Breakout" not in flagged and "BBF" not in flagged and "SPR" not in flagged
