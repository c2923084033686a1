"""Progress while a run trains and evaluates, on a terminal and in a log (issue 16).

A run under ``nohup``, a scheduler or CI writes to a file, not a terminal: it must still say how
it is doing while it runs (rate, ETA, the latest return), and an evaluation that plays long
games must say what it plays, the most agent steps it may take and how far it is. The cadence
here is a share of the budget (``N%``), so what is written depends on steps, never on time.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zoo
from zoo.envs import evaluate
from zoo.envs.evaluation import step_bound
from zoo.runs.metrics import windowed_rate
from zoo.runs.progress import (
    PROGRESS_VARIABLE,
    EvaluationProgress,
    Progress,
    ProgressMode,
    ProgressModeError,
    format_duration,
)

PACKAGE_ROOT = str(Path(zoo.__file__).resolve().parent.parent)


# ------------------------------------------------------------------------------ the modes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("off", ProgressMode("off")),
        ("bar", ProgressMode("bar")),
        ("30s", ProgressMode("seconds", 30.0)),
        ("45", ProgressMode("seconds", 45.0)),
        ("2m", ProgressMode("seconds", 120.0)),
        ("10%", ProgressMode("percent", 10.0)),
        (" 5% ", ProgressMode("percent", 5.0)),
    ],
)
@pytest.mark.unit
def test_progress_modes_parse(text: str, expected: ProgressMode) -> None:
    assert ProgressMode.parse(text) == expected


@pytest.mark.parametrize("text", ["0s", "-1", "0%", "101%", "often", "nan", "inf"])
@pytest.mark.unit
def test_progress_modes_refuse_nonsense(text: str) -> None:
    with pytest.raises(ProgressModeError, match="use auto, bar, off"):
        ProgressMode.parse(text)


@pytest.mark.unit
def test_auto_is_a_redrawn_line_on_a_terminal_and_lines_every_30s_elsewhere() -> None:
    assert ProgressMode.parse("auto", io.StringIO()) == ProgressMode("seconds", 30.0)
    assert ProgressMode.parse(None, io.StringIO()) == ProgressMode("seconds", 30.0)
    main, secondary = os.openpty()
    with open(secondary, "w") as terminal:
        assert ProgressMode.parse("auto", terminal) == ProgressMode("bar")
    os.close(main)


@pytest.mark.unit
def test_a_typo_in_the_environment_variable_never_stops_a_run(monkeypatch) -> None:
    monkeypatch.setenv(PROGRESS_VARIABLE, "evry 30s")
    log = io.StringIO()
    assert Progress(100, stream=log).mode == ProgressMode("seconds", 30.0)
    assert f"zoo: {PROGRESS_VARIABLE}: progress 'evry 30s' is not understood" in log.getvalue()
    again = io.StringIO()  # said once, not at every evaluation
    assert EvaluationProgress("evaluation", stream=again).mode == ProgressMode("seconds", 30.0)
    assert again.getvalue() == ""


@pytest.mark.unit
def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 42.4, 185, 7440, float("nan"))] == [
        "0s",
        "42s",
        "3m05s",
        "2h04m",
        "?",
    ]


@pytest.mark.unit
def test_windowed_rate_recovers_each_records_time_from_its_since_start_rate() -> None:
    # times 10 s, 10 s, 20 s after the session started (env_steps / env_steps_per_s)
    records = [
        {"env_steps": 100, "env_steps_per_s": 10.0, "updates": 0},
        {"env_steps": 200, "env_steps_per_s": 20.0, "updates": 50},
        {"env_steps": 400, "env_steps_per_s": 20.0, "updates": 150},
    ]
    assert windowed_rate(records) == (30.0, 15.0)  # 300 steps, 150 updates over 10 s
    assert windowed_rate(records, start=100) == (20.0, 10.0)  # the record at start is skipped
    with pytest.raises(ValueError, match="need two training records after env step 200"):
        windowed_rate(records, start=200)


# ------------------------------------------------------------------------ training progress


@pytest.mark.unit
def test_training_lines_in_a_log_carry_rate_eta_and_the_latest_return() -> None:
    log = io.StringIO()  # not a terminal
    progress = Progress(1000, stream=log, mode="25%")
    for env_steps in range(10, 1001, 10):
        if env_steps == 300:
            progress.add_returns([12.0, 14.0])
        progress.update(env_steps, updates=env_steps // 2)
    progress.update(1000, 500, final=True)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0] == (
        "training started: 10/1,000 env steps; progress: a line every 25% "
        f"(--progress or {PROGRESS_VARIABLE})"
    )
    shares = [re.match(r"\[ *(\d+)%\] ([\d,]+)/1,000 env steps", line) for line in lines[1:]]
    assert [(m[1], m[2]) for m in shares] == [
        ("25", "250"),
        ("50", "500"),
        ("75", "750"),
        ("100", "1,000"),
    ]
    assert "return - (no game finished yet)" in lines[1]
    for line in lines[1:4]:
        assert re.search(
            r" [\d,]+ env steps/s  [\d,]+ updates/s  \d+s elapsed, ETA (\d+s|\?)  return ", line
        )
    assert "return 13.0 (last 2 games)" in lines[2]
    assert re.fullmatch(
        r"\[100%\] 1,000/1,000 env steps in \d+s  return 13\.0 \(last 2 games\)", lines[4]
    )


@pytest.mark.unit
def test_a_resumed_run_counts_its_shares_from_where_it_starts() -> None:
    log = io.StringIO()
    progress = Progress(1000, stream=log, mode="25%")
    for env_steps in range(610, 1001, 10):
        progress.update(env_steps, updates=0)
    shares = re.findall(r"\[ *(\d+)%\]", log.getvalue())
    assert shares == ["75"]  # 610 starts it; 750 is the next quarter; 1,000 waits for final


@pytest.mark.unit
def test_off_writes_nothing_and_a_terminal_gets_one_redrawn_line() -> None:
    log = io.StringIO()
    progress = Progress(100, stream=log, mode="off")
    progress.update(50, 10)
    progress.update(100, 20, final=True)
    assert log.getvalue() == ""
    main, secondary = os.openpty()
    with open(secondary, "w") as terminal:
        progress = Progress(100, stream=terminal, interval=0.0)
        assert progress.mode.kind == "bar"
        progress.update(50, 10)
        progress.update(100, 20, final=True)
    # everything the terminal got: one read may return part of it (a pty hands over what has
    # arrived; under load the second line came later and a single read saw one)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the other end is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    written = b"".join(chunks).decode()
    assert written.count("\r[") == 2 and "training started" not in written
    assert "100/100 env steps" in written and "ETA" in written


# ---------------------------------------------------------------------- evaluation progress


def balance(observations: np.ndarray) -> np.ndarray:
    """A CartPole controller that keeps the pole up for hundreds of steps: push towards where
    the pole falls (angle plus angular velocity)."""
    obs = np.asarray(observations)
    return (obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int32)


@pytest.mark.parametrize(
    ("episodes", "num_envs", "cap", "max_steps", "bound"),
    [
        (10, 1, 27_000, None, 270_009),  # 10 games to the cap, a reset step between games
        (10, 4, 27_000, None, 3 * 27_001 * 4 - 4),  # quotas 3, 3, 2, 2
        (10, 1, 27_000, 5_000, 5_000),
        (10, 4, 500, 1_001, 1_000),  # whole vector steps
        (10, 1, None, None, None),  # MinAtar: no cap on a game's length
        (10, 1, None, 700, 700),
    ],
)
@pytest.mark.unit
def test_step_bound(episodes, num_envs, cap, max_steps, bound) -> None:
    assert step_bound(episodes, num_envs, cap, max_steps) == bound


@pytest.mark.compiled
def test_the_bound_is_what_an_evaluation_of_games_at_the_cap_plays() -> None:
    # every game runs to the cap (a shortened CartPole limit): the bound is reached exactly
    log = io.StringIO()
    result = evaluate(
        balance,
        "CartPole-v1",
        episodes=4,
        seed=0,
        env_kwargs={"max_episode_steps": 50},
        progress=EvaluationProgress("evaluation", stream=log, mode="50%"),
    )
    assert result["lengths"] == [50] * 4
    assert result["agent_steps"] == step_bound(4, 1, 50) == 4 * 51 - 1
    first, *rest = log.getvalue().splitlines()
    assert first == (
        "evaluation: playing 4 games of CartPole-v1 (protocol classic, ε 0); at most 203 agent "
        "steps (50 per game)"
    )
    assert len(rest) == 2
    for games, steps, line in zip((2, 4), (101, 203), rest, strict=True):
        assert re.fullmatch(
            rf"evaluation: {games}/4 games, {steps} of at most 203 agent steps, [\d,]+ steps/s, "
            r"\d+s(, at most \d+s left)?",
            line,
        ), line


@pytest.mark.compiled
def test_an_atari_evaluation_states_the_protocols_cap_up_front() -> None:
    # a barely trained Breakout agent never presses FIRE: each game runs to the 27,000-step cap,
    # and the evaluation used to look hung
    log = io.StringIO()
    shown = EvaluationProgress("evaluation at env step 4,000", stream=log, mode="10%")
    result = evaluate(
        lambda obs: np.zeros(len(obs), np.int32),  # NOOP, never FIRE
        "Breakout-v5",
        "machado_2018",
        episodes=10,
        seed=0,
        max_steps=300,
        progress=shown,
    )
    shown.close("no game finished within --eval-max-steps 300")
    assert result["truncated"] and result["episodes"] == 0
    lines = log.getvalue().splitlines()
    assert lines[0] == (
        "evaluation at env step 4,000: playing 10 games of Breakout-v5 (protocol machado_2018, "
        "ε 0.001); at most 300 agent steps (27,000 per game)"
    )
    assert re.fullmatch(
        r"evaluation at env step 4,000: no game finished within --eval-max-steps 300 \(\d+s\)",
        lines[-1],
    )
    uncapped = EvaluationProgress("evaluation", stream=(log := io.StringIO()), mode="10%")
    uncapped(
        games=0,
        episodes=10,
        agent_steps=0,
        bound=step_bound(10, 1, 27_000),
        env_id="Breakout-v5",
        protocol="machado_2018",
        episode_cap=27_000,
        epsilon=0.001,
    )
    assert "at most 270,009 agent steps (27,000 per game)" in log.getvalue()


@pytest.mark.compiled
def test_a_short_evaluation_is_quiet_until_it_ends() -> None:
    log = io.StringIO()
    shown = EvaluationProgress("evaluation", stream=log, mode="30s", quiet=3600)
    evaluate(
        balance,
        "CartPole-v1",
        episodes=2,
        seed=0,
        progress=shown,
        env_kwargs={"max_episode_steps": 20},
    )
    assert log.getvalue() == ""
    shown.close("return 20.0 ± 0.0 over 2 games")
    assert re.fullmatch(r"evaluation: return 20\.0 ± 0\.0 over 2 games \(\d+s\)\n", log.getvalue())


# --------------------------------------------------------------------- a logged run, end to end


@pytest.mark.process  # a real run and a real `zoo eval` in subprocesses (15-70 s by the load)
def test_a_run_writing_to_a_file_shows_progress_and_every_evaluation(tmp_path: Path) -> None:
    log_path = tmp_path / "train.log"
    environ = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    environ.pop(PROGRESS_VARIABLE, None)
    run = tmp_path / "run"
    with log_path.open("w") as log:  # stderr is a file, as under nohup
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "zoo.cli",
                "train",
                "dqn_cartpole",
                "--steps",
                "1000",
                "--eval-every",
                "500",
                "--eval-episodes",
                "2",
                "--run-dir",
                str(run),
                "--progress",
                "25%",
                "--set",
                "replay.min_size=100",
                "--set",
                "replay.capacity=1000",
                "--set",
                "network.hidden=[16]",
            ],
            cwd=tmp_path,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=300,
        )
    text = log_path.read_text()
    assert result.returncode == 0, text[-3000:]
    assert "\r" not in text and "Traceback" not in text
    lines = text.splitlines()
    assert any(line.startswith("training started: ") for line in lines)
    assert [re.match(r"\[ *(\d+)%\]", line)[1] for line in lines if line.startswith("[")] == [
        "25",
        "50",
        "75",
        "100",
    ]
    evaluations = [json.loads(r) for r in (run / "eval.jsonl").read_text().splitlines()]
    for record in evaluations:
        at = f"evaluation at env step {record['env_steps']:,}"
        assert f"{at}: playing 2 games of CartPole-v1 (protocol classic, ε 0); at most" in text
        summary = (
            f"{at}: return {record['mean_return']:.1f} ± {record['std_return']:.1f} over 2 games"
        )
        assert summary in text
    assert "curves: tensorboard --logdir " in result.stdout
    # zoo eval shows the same progress
    result = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "eval", str(run), "--episodes", "2", "--progress", "50%"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert (
        f"zoo eval {run}: playing 2 games of CartPole-v1 (protocol classic, ε 0)" in result.stderr
    )
    assert f"zoo eval {run}: 1/2 games" in result.stderr
    assert f"zoo eval {run}: 2/2 games" in result.stderr
    assert (
        "over 2 games (checkpoint at" in result.stdout and "protocol classic, ε 0" in result.stdout
    )


@pytest.mark.process  # an Atari run in a subprocess (a Nature CNN compiles in 20-60 s)
@pytest.mark.xdist_group("timing")
def test_ctrl_c_during_a_long_evaluation_is_answered_at_once(tmp_path: Path) -> None:
    # Ctrl-C during an Atari evaluation (minutes of games to the step cap) seemed ignored: the
    # run stops only once the evaluation ends. One evaluation environment keeps the evaluation
    # long enough (1,000 agent steps in sequence) for the interrupt to land inside it.
    environ = {**os.environ, "PYTHONPATH": PACKAGE_ROOT}
    run = tmp_path / "run"
    args = [
        "train", "dqn", "--env", "Breakout-v5", "--steps", "40", "--eval-every", "40",
        "--eval-max-steps", "1000", "--eval-envs", "1", "--checkpoint-every", "40",
        "--run-dir", str(run),
        "--progress", "10%", "--set", "replay.min_size=20", "--set", "replay.capacity=400",
        "--set", "schedule.eval_epsilon=0.0", "--set", "replay.batch_size=8",
    ]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "zoo.cli", *args],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("evaluation at env step 40: playing 10 games of Breakout-v5"):
            process.send_signal(signal.SIGINT)
            break
    _, rest = process.communicate(timeout=600)
    text = "".join(lines) + rest
    assert process.returncode == 130, text[-3000:]
    after = text[text.index("evaluation at env step 40: playing") :]
    noted = after.index("zoo: SIGINT received: the evaluation under way plays to its end")
    summary = re.search(r"evaluation at env step 40: (return|no game finished) .*\(\w+\)\n", after)
    assert summary is not None, after
    assert noted < summary.start()
    assert "interrupted at env step 40 (checkpoint saved there)" in text
    assert "Traceback" not in text
