"""Issue 37 (reliability, round three): files that are not files, temp files that follow links,
numbers YAML 1.1 reads as strings, booleans read as counts, plugins that fail, unfinished runs
compared as finished, ``zoo eval`` without a record, dangling ``--run-dir`` links.

One test (or a parametrized few) per item of the issue; each failed on the code before the fix
(items 1 and 2 by exhausting memory or hanging, which these tests would show as a hang). The
signal and checkpoint-damage items are in ``test_faults.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from inprocess import run_cli

from zoo import fileio, spec
from zoo.compare import compare, format_table
from zoo.runs.metrics import read_jsonl
from zoo.runs.rundir import MAX_ENV_STEPS, RunDir, RunSettings
from zoo.spec import SpecError

SPEC = "mine:\n  extends: dqn\n"


def one_line_refusal(code: int, err: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.strip(), "a refusal names its problem"


# ------------------------------------------------------------- 1, 2, 9: files that are not specs


@pytest.mark.parametrize("command", ["validate", "show", "train"])
@pytest.mark.unit
def test_a_device_named_as_a_spec_is_refused_without_reading_it(command, tmp_path):
    # `zoo show /dev/zero` read until the kernel's OOM killer ended it at ~23 GB
    code, _out, err = run_cli(command, "/dev/zero", cwd=tmp_path)
    one_line_refusal(code, err)
    assert "is a character device, not a spec file: name a regular file" in err
    assert not any(tmp_path.iterdir())  # nothing written (no runs/ folder)


@pytest.mark.unit
def test_a_fifo_named_as_a_spec_is_refused_without_waiting_for_a_writer(tmp_path):
    # `mkfifo f.yaml; zoo validate f.yaml` waited forever in open()
    os.mkfifo(tmp_path / "f.yaml")
    code, _, err = run_cli("validate", "f.yaml", cwd=tmp_path)
    one_line_refusal(code, err)
    assert "f.yaml: is a FIFO (named pipe), not a spec file" in err


@pytest.mark.unit
def test_a_spec_larger_than_the_limit_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:  # sparse: no disk used
        f.truncate(fileio.MAX_INPUT_BYTES + 1)
    code, _, err = run_cli("validate", str(big), cwd=tmp_path)
    one_line_refusal(code, err)
    assert f"is {fileio.MAX_INPUT_BYTES + 1:,} bytes; a spec file is at most" in err


@pytest.mark.parametrize(
    "text", ["", "# only a comment\n", "---\n", "{}\n"], ids=["empty", "comment", "doc", "map"]
)
@pytest.mark.unit
def test_a_spec_file_without_entries_is_refused_not_ok(text, tmp_path):
    # an empty file validated as `ok (0 entries)`
    (tmp_path / "s.yaml").write_text(text)
    code, out, err = run_cli("validate", "s.yaml", cwd=tmp_path)
    one_line_refusal(code, err)
    assert "holds no entries" in err and "ok" not in out


@pytest.mark.unit
def test_dev_null_is_not_an_empty_spec(tmp_path):
    code, out, err = run_cli("validate", "/dev/null", cwd=tmp_path)
    one_line_refusal(code, err)
    assert "ok (0 entries)" not in out and "character device" in err


@pytest.mark.unit
def test_a_reference_series_file_that_is_a_device_is_refused(tmp_path):
    from zoo.reference import UnknownSeriesError, load_series

    os.mkfifo(tmp_path / "series.yaml")
    with pytest.raises(UnknownSeriesError, match="FIFO"):
        load_series(tmp_path / "series.yaml")


# ----------------------------------------------------------------- 3: temp files and symlinks


@pytest.mark.unit
def test_write_atomic_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    # the old rewrite opened the predictable `<name>.tmp` and followed a link there
    for name in ("metrics.jsonl.tmp", ".metrics.jsonl.tmp"):
        (run / name).symlink_to(outside)
    (run / "metrics.jsonl").symlink_to(outside)
    fileio.write_atomic(run / "metrics.jsonl", "new\n")
    assert outside.read_text() == "precious"
    assert not (run / "metrics.jsonl").is_symlink()
    assert (run / "metrics.jsonl").read_text() == "new\n"
    assert oct((run / "metrics.jsonl").stat().st_mode & 0o777) == oct(0o644)
    leftovers = {p.name for p in run.iterdir()} - {"metrics.jsonl.tmp", ".metrics.jsonl.tmp"}
    assert leftovers == {"metrics.jsonl"}  # no temporary file left behind


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
@pytest.mark.unit
def test_open_append_refuses_what_is_not_a_regular_file(tmp_path, kind):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    target = tmp_path / "history.jsonl"
    {"symlink": lambda: target.symlink_to(outside), "fifo": lambda: os.mkfifo(target),
     "folder": target.mkdir}[kind]()  # fmt: skip
    with pytest.raises(fileio.UnsafeFileError, match=r"history\.jsonl is a"):
        fileio.open_append(target)
    assert outside.read_text() == "precious"


@pytest.mark.run
def test_a_resume_never_writes_through_links_planted_in_the_run(finished_run, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    for name in ("metrics.jsonl", "eval.jsonl", "history.jsonl", "run.yaml"):
        (finished_run / f"{name}.tmp").symlink_to(outside)
    code, _, err = run_cli("train", "--resume", finished_run, "--steps", "1600")
    assert code == 0, err
    assert outside.read_text() == "precious"
    for name in ("metrics.jsonl", "eval.jsonl", "history.jsonl", "run.yaml"):
        assert (finished_run / name).is_file() and not (finished_run / name).is_symlink()
    assert yaml.safe_load((finished_run / "run.yaml").read_text())["total_env_steps"] == 1600


@pytest.mark.run
def test_a_run_file_replaced_by_a_link_stops_the_run_with_the_fix(finished_run, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    (finished_run / "history.jsonl").rename(tmp_path / "history.jsonl")
    (finished_run / "history.jsonl").symlink_to(outside)
    code, _, err = run_cli("train", "--resume", finished_run, "--steps", "1600")
    one_line_refusal(code, err)
    assert "history.jsonl is a symbolic link" in err and "remove the link" in err
    assert outside.read_text() == "precious"


# ---------------------------------------------------------- 5, 10: numbers as YAML 1.2 has them


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e-4", 1e-4), ("-1e-3", -1e-3), ("3e5", 3e5), ("1E+3", 1e3), (".5e2", 50.0)],
)
@pytest.mark.unit
def test_exponent_forms_are_floats_as_in_yaml_1_2(text, value):
    assert spec.parse_yaml(f"x: {text}") == {"x": value}
    assert isinstance(spec.parse_yaml(f"x: {text}")["x"], float)


@pytest.mark.unit
def test_yaml_1_1_forms_keep_their_meaning():
    parsed = spec.parse_yaml("a: 1_000\nb: 1.5\nc: abc\nd: e5\ne: 1e\nf: '1e-4'\ng: .inf")
    assert parsed == {"a": 1000, "b": 1.5, "c": "abc", "d": "e5", "e": "1e", "f": "1e-4",
                      "g": float("inf")}  # fmt: skip


@pytest.mark.unit
def test_learning_rate_1e_minus_4_is_a_learning_rate_in_files_and_in_set(tmp_path):
    # it was refused as "unknown value '1e-4'. Allowed: constant, exponential, linear"
    path = tmp_path / "s.yaml"
    path.write_text(SPEC + "  optimizer: {learning_rate: 1e-4}\n  replay: {capacity: 3e5}\n")
    algo = spec.load_algorithm(f"{path}:mine")
    assert algo.optimizer.learning_rate.value == pytest.approx(1e-4)
    assert algo.replay.capacity == 300_000 and isinstance(algo.replay.capacity, int)
    code, out, err = run_cli("show", "dqn", "--set", "optimizer.learning_rate=1e-4")
    assert code == 0, err
    assert "value: 0.0001" in out


@pytest.mark.unit
def test_a_negative_exponent_learning_rate_gets_the_range_message_not_unknown_kind():
    with pytest.raises(SpecError) as e:
        spec.load_algorithm("dqn", overrides={"optimizer.learning_rate": spec.parse_yaml("-1e-3")})
    assert "unknown value" not in str(e.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("loss.n_step", "true"), ("replay.batch_size", "false"), ("loss.discount", "true")],
)
@pytest.mark.unit
def test_a_boolean_is_never_a_number(key, value):
    # `loss.n_step: true` became 1
    code, _, err = run_cli("show", "dqn", "--set", f"{key}={value}")
    one_line_refusal(code, err)
    assert f"{key}: " in err and f"(got {value})" in err


@pytest.mark.unit
def test_booleans_stay_booleans_where_a_field_is_one():
    algo = spec.load_algorithm("dqn", overrides={"network.dueling": True})
    assert algo.network.dueling is True


# ---------------------------------------------------------------------- 7: plugins that fail


@pytest.mark.parametrize(
    ("name", "source", "what"),
    [
        ("broken_raises", "x = 1\nraise ValueError('no config')\n", "ValueError: no config"),
        ("broken_syntax", "def f(:\n", "SyntaxError"),
        ("broken_library", "import numpy\nnumpy.zeros(-1)\n", "ValueError"),
    ],
)
@pytest.mark.unit
def test_a_plugin_that_fails_to_import_is_one_line_naming_it_and_where(
    tmp_path, name, source, what
):
    # each case its own module name: the working directory a plugin is looked for in stays on
    # sys.path for the rest of this process
    (tmp_path / f"{name}.py").write_text(source)
    for argv in (["--plugin", name], ["--plugin", f"{name}.py"]):
        code, _out, err = run_cli(*argv, "list", cwd=tmp_path)
        one_line_refusal(code, err)
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"zoo: plugin module {argv[1]!r} failed while importing (")
        assert f"{name}.py, line" in err and what in err
        assert "leave it out of --plugin and ZOO_PLUGINS" in err


# ------------------------------------------------------------------ 8: unfinished runs compared


def fake_run(folder: Path, seed: int, reached: int, budget: int, status: str) -> Path:
    """A run directory as a run leaves it (records every 100 transitions to ``reached``)."""
    folder.mkdir(parents=True)
    settings = RunSettings(
        algorithm="dqn_cartpole", preset="dqn_cartpole", env="CartPole-v1", protocol="classic",
        num_envs=1, total_env_steps=budget, seed=seed, eval_every=500, eval_episodes=2,
        checkpoint_every=500, log_every=100,
    )  # fmt: skip
    (folder / "run.yaml").write_text(yaml.safe_dump(settings.model_dump(mode="json")))
    rows = [
        {"env_steps": s, "updates": s // 2, "games": s // 20, "return": 20.0 + s / 100}
        for s in range(100, reached + 1, 100)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [
        {"env_steps": s, "mean_return": 30.0 + s / 100, "episodes": 2}
        for s in range(500, reached + 1, 500)
    ]
    (folder / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    stopped = {"event": "stopped", "status": status, "env_steps": reached}
    (folder / "history.jsonl").write_text(json.dumps(stopped) + "\n")
    return folder


@pytest.mark.unit
def test_compare_marks_a_run_stopped_before_its_budget(tmp_path):
    # a run stopped at 22% of its budget was summarised as if it had finished
    fake_run(tmp_path / "a", seed=0, reached=1000, budget=1000, status="finished")
    fake_run(tmp_path / "b", seed=1, reached=1000, budget=4500, status="interrupted")
    comparison = compare([tmp_path])
    (row, *_) = comparison.rows
    assert row.unfinished == [1] and row.seeds == [0, 1]
    note = next(n for n in comparison.notes if "unfinished" in n)
    assert "seed 1 is unfinished: it stopped at 1,000 of its 4,500 env steps (22%)" in note
    assert f"zoo train --resume {tmp_path / 'b'}" in note
    assert "2 (1 unfinished)" in format_table(comparison)


@pytest.mark.unit
def test_compare_counts_a_run_stopped_at_its_target_return_as_finished(tmp_path):
    fake_run(tmp_path / "a", seed=0, reached=1000, budget=5000, status="finished")
    comparison = compare([tmp_path])
    assert comparison.rows[0].unfinished == []
    assert not any("unfinished" in n for n in comparison.notes)


# --------------------------------------------------------------------- 11: zoo eval's record


@pytest.mark.run
def test_zoo_eval_states_epsilon_and_protocol_and_records_the_evaluation(finished_run):
    before = (finished_run / "eval.jsonl").read_bytes()
    code, out, err = run_cli("eval", finished_run, "--episodes", "2", "--seed", "7")
    assert code == 0, err
    assert "checkpoint at 1,200 env steps, protocol classic, ε 0, seed 7" in out
    assert "recorded in posthoc_eval.jsonl" in out
    assert (finished_run / "eval.jsonl").read_bytes() == before  # the run's own curve untouched
    (record,) = read_jsonl(RunDir(finished_run).posthoc_evals_file)
    assert record["kind"] == "posthoc" and record["env_steps"] == 1200
    assert record["epsilon"] == 0.0 and record["protocol"] == "classic" and record["seed"] == 7
    assert record["episodes"] == 2 and len(record["returns"]) == 2
    assert record["mean_return"] == pytest.approx(sum(record["returns"]) / 2)
    # and a second evaluation appends
    code, _, err = run_cli("eval", finished_run, "--episodes", "1")
    assert code == 0, err
    assert len((finished_run / "posthoc_eval.jsonl").read_text().splitlines()) == 2


# ----------------------------------------------------- 12 and budgets: run directories, counts


@pytest.mark.unit
def test_a_dangling_symlink_run_dir_is_refused_with_the_fix(tmp_path):
    # it got "File exists" and exit 1
    (tmp_path / "link").symlink_to(tmp_path / "nowhere" / "run")
    code, _, err = run_cli(
        "train", "dqn_cartpole", "--run-dir", "link", "--steps", "2000", cwd=tmp_path
    )
    one_line_refusal(code, err)
    assert "it is a symbolic link to" in err and "which does not exist" in err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.unit
def test_an_absurd_budget_is_refused_not_estimated(tmp_path):
    code, _, err = run_cli("train", "dqn_cartpole", "--steps", "99999999999999999999", cwd=tmp_path)
    one_line_refusal(code, err)
    assert "total_env_steps" in err and f"{MAX_ENV_STEPS}" in err
    assert not (tmp_path / "runs").exists()
