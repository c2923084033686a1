"""Deprecated: the run job is the package :mod:`zoo.runs` (``zoo.train`` and ``zoo eval`` are
unchanged). This module re-exports its former public names for one release."""

from __future__ import annotations

from zoo.runs import RunError, RunRefusedError, RunResult, RunSettings, TrainRequest, train
from zoo.runs.assemble import plan_memory, replay_for_env
from zoo.runs.evaluate import evaluate_run, load_policy, make_policy_fn
from zoo.runs.settings import DEFAULT_EVAL_ENVS, MAX_NUM_ENVS, MAX_SEED
from zoo.spec import SpecError

__all__ = [
    "DEFAULT_EVAL_ENVS",
    "MAX_NUM_ENVS",
    "MAX_SEED",
    "RunError",
    "RunRefusedError",
    "RunResult",
    "RunSettings",
    "SpecError",
    "TrainRequest",
    "evaluate_run",
    "load_policy",
    "make_policy_fn",
    "plan_memory",
    "replay_for_env",
    "train",
]
