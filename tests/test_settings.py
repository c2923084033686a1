"""The run settings as one table (:mod:`zoo.runs.settings`, issue 35).

A setting is one field of :class:`RunSettings`; the flags of ``zoo train``/``reproduce``/
``bench``, the request's checks, a new run's values and a resume's refusals are read from it. The
first test adds a setting in a subclass, as a contributor would add a field, and follows it to
each of them; the others pin the real table's rules by hand-computed values.
"""

from __future__ import annotations

import argparse
from typing import Annotated

import pytest
from pydantic import Field

from zoo.runs import TrainRequest
from zoo.runs.errors import RunRefusedError
from zoo.runs.flags import add_flags, given
from zoo.runs.settings import (
    Arg,
    Elsewhere,
    RunSettings,
    check_given,
    new_run,
    resume_conflicts,
    settings,
)

pytestmark = pytest.mark.unit


def _protocol_of(env: str) -> str:
    return f"protocol of {env}"


class WithShards(RunSettings):
    """The table with one more setting, as a contributor would add it: one field."""

    replay_shards: Annotated[
        int,
        Arg(
            "replay shards of the run",
            flag="--replay-shards",
            new=lambda c: 2 * c.values["num_envs"],
            elsewhere={"bench": Elsewhere("replay shards of new runs")},
        ),
    ] = Field(1, ge=1, le=8, description="replay shards (1 in runs made before it existed)")


def _parser(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"zoo {command}", add_help=False)
    add_flags(parser, command, table=WithShards)
    return parser


def test_a_setting_added_as_one_field_reaches_the_cli_the_request_and_resume(capsys) -> None:
    # the command line: zoo train and zoo bench offer it, with their own help; reproduce does not
    train = _parser("train")
    assert given(train.parse_args(["--replay-shards", "3"]), "train", table=WithShards) == {
        "replay_shards": 3
    }
    assert "--replay-shards REPLAY_SHARDS" in train.format_help()
    assert "replay shards of the run" in train.format_help()
    assert "replay shards of new runs" in _parser("bench").format_help()
    assert "--replay-shards" not in _parser("reproduce").format_help()
    with pytest.raises(SystemExit):
        train.parse_args(["--replay-shards", "9"])
    assert "argument --replay-shards: must be from 1 to 8, got 9" in capsys.readouterr().err

    # the request: checked with the field's bounds, and given to the run like every setting
    request = TrainRequest("dqn", settings={"replay_shards": 4}, table=WithShards)
    request.check()
    assert request.given()["replay_shards"] == 4
    assert set(request.given()) == {row.name for row in settings(WithShards)}
    with pytest.raises(RunRefusedError, match=r"--replay-shards \(replay_shards\) must be from 1"):
        TrainRequest("dqn", settings={"replay_shards": 0}, table=WithShards).check()
    with pytest.raises(TypeError, match="replay_shards"):  # the table without it refuses it
        check_given({"replay_shards": 4})

    # a new run: its rule, after the settings above it (num_envs from the preset: 3 -> 6)
    values = new_run({}, {"num_envs": 3}, _protocol_of, table=WithShards)
    assert values["replay_shards"] == 6
    assert new_run({"replay_shards": 5}, {}, _protocol_of, table=WithShards)["replay_shards"] == 5
    recorded = WithShards(algorithm="dqn", **values)

    # a resume: the same value passes, another is refused with the flag
    assert resume_conflicts({"replay_shards": 6}, recorded.model_dump(), table=WithShards) == []
    assert resume_conflicts({"replay_shards": 7}, recorded.model_dump(), table=WithShards) == [
        "--replay-shards 7 (the run's is 6)"
    ]
    # and a run.yaml written before the setting existed reads with the field's default
    old = RunSettings(algorithm="dqn", **new_run({}, {}, _protocol_of)).model_dump()
    assert WithShards.model_validate(old).replay_shards == 1


def test_a_new_run_fills_in_what_was_not_given_by_the_rules() -> None:
    values = new_run({"total_env_steps": 1_000, "eval_episodes": 3}, {}, _protocol_of)
    assert values == {
        "env": "CartPole-v1",
        "total_env_steps": 1_000,
        "seed": 0,
        "num_envs": 1,
        "protocol": "protocol of CartPole-v1",
        "env_backend": "auto",
        "eval_every": 100,  # a tenth of the budget
        "eval_episodes": 3,
        "eval_max_steps": None,
        "eval_envs": 3,  # one per game
        "checkpoint_every": 200,  # a fifth
        "log_every": 10,  # a hundredth
        "save_replay": True,
        "stop_at_return": None,
        "loop": "auto",
        "actor_devices": None,
        "learner_devices": None,
        "max_lag": 1,
    }
    # the preset's env, budget, environments and protocol come before the rules
    preset = {"env": "Pong-v5", "total_env_steps": 5_000_000, "num_envs": 4, "protocol": "p"}
    values = new_run({"num_envs": 2}, preset, _protocol_of)
    assert (values["env"], values["num_envs"], values["protocol"]) == ("Pong-v5", 2, "p")
    assert values["log_every"] == 10_000 and values["eval_envs"] == 10
    assert new_run({"total_env_steps": 7}, {}, _protocol_of)["eval_every"] == 1  # never 0
    with pytest.raises(RunRefusedError, match="--eval-envs 4 is more than --eval-episodes 3"):
        new_run({"eval_episodes": 3, "eval_envs": 4}, {}, _protocol_of)


def test_the_request_checks_kinds_and_bounds_by_the_table() -> None:
    with pytest.raises(RunRefusedError, match=r"^--steps \(total_env_steps\) must be at least 1"):
        check_given({"total_env_steps": 0})
    check_given({"total_env_steps": 10**15})  # the file's cap is the budget check's, not this
    with pytest.raises(RunRefusedError, match=r"--max-lag \(max_lag\) must be from 1 to 1,000"):
        check_given({"max_lag": 1001})
    with pytest.raises(RunRefusedError, match=r"^log_every must be a whole number, got True"):
        check_given({"log_every": True})
    with pytest.raises(RunRefusedError, match="--loop must be auto, host, compiled or async"):
        check_given({"loop": "fast"})
    with pytest.raises(RunRefusedError, match="--stop-at-return must be a finite number"):
        check_given({"stop_at_return": float("nan")})
    check_given({name: None for name in (row.name for row in settings())})  # None: not given


def test_a_switch_is_given_only_when_its_flag_is() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    add_flags(parser, "train")
    assert "save_replay" not in given(parser.parse_args([]), "train")
    assert given(parser.parse_args(["--no-replay-checkpoint"]), "train") == {"save_replay": False}
    assert given(parser.parse_args(["--driver", "host"]), "train") == {"loop": "host"}
    assert resume_conflicts({"save_replay": False}, {"save_replay": True}) == [
        "--no-replay-checkpoint given (the run's is True)"
    ]
    assert resume_conflicts({"total_env_steps": 9}, {"total_env_steps": 5}) == []  # the budget
