"""Evaluation: the trainer's evaluations under the run's protocol, ``zoo.load_policy`` and
``zoo eval``'s job (:func:`evaluate_run`). Imports JAX.

Evaluation plays greedy policies (ε = ``schedule.eval_epsilon``) under the run's protocol
(:func:`zoo.envs.evaluate`), each environment with its share of the games fixed before play
starts, so the result does not favour short games; an evaluation that finished no game reports
``None`` statistics (JSON null) and a note, never NaN.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo import spec as spec_lib
from zoo.actor import make_act
from zoo.envs import evaluate, make
from zoo.fileio import open_append
from zoo.learner import Learner
from zoo.networks import build_network
from zoo.runs import rundir
from zoo.runs import settings as run_settings
from zoo.runs.checkpoint import Checkpointer
from zoo.runs.create import checkpoint_steps
from zoo.runs.errors import RunRefusedError
from zoo.runs.notes import say
from zoo.runs.open import read_settings, recorded_spec
from zoo.runs.progress import EvaluationProgress
from zoo.runs.rundir import RunDir
from zoo.runs.settings import RunSettings, eval_envs_for
from zoo.runs.state import restore_learner
from zoo.spec import AlgorithmSpec
from zoo.stops import STOP_SIGNALS, signal_name

__all__ = [
    "evaluate_run",
    "evaluation_summary",
    "evaluator",
    "load_policy",
    "make_policy_fn",
    "no_game_note",
]


def evaluator(
    spec: AlgorithmSpec,
    settings: RunSettings,
    env_obj: Any,
    logger: Any,
    show_progress: bool = False,
) -> Callable[[Any, int], dict[str, Any]]:
    """The trainer's evaluation: play under the protocol, log the record, return it. With
    ``show_progress``, a long evaluation shows its progress and every evaluation ends with a
    line of its result (:class:`zoo.runs.progress.EvaluationProgress`)."""

    policy_fn = make_policy_fn(spec, env_obj.num_actions)

    def evaluate_now(online: Any, env_steps: int) -> dict[str, Any]:

        policy = policy_fn(online, jax.random.PRNGKey(_seed31(settings.seed + 10_000 + env_steps)))
        shown = EvaluationProgress(f"evaluation at env step {env_steps:,}", mode=None)
        with _interrupt_noted(shown if show_progress else None):
            result = evaluate(
                policy,
                settings.env,
                episodes=settings.eval_episodes,
                seed=_seed31(settings.seed + 1 + env_steps),
                max_steps=settings.eval_max_steps,
                num_envs=settings.eval_envs,
                epsilon=spec.schedule.eval_epsilon,
                progress=shown if show_progress else None,
                **settings.env_args(),
            )
        record = {
            "env_steps": env_steps,
            "protocol": settings.protocol,
            **_finished(result, settings.eval_max_steps),
        }
        if show_progress:
            shown.close(evaluation_summary(record))
        logger.log_eval(record)
        if record["mean_return"] is None:
            # the trainer compares the return with --stop-at-return: no game, no stop
            return {**record, "mean_return": float("nan")}
        return record

    return evaluate_now


@contextlib.contextmanager
def _interrupt_noted(shown: Any) -> Iterator[None]:
    """While an evaluation plays, a stop signal (Ctrl-C, SIGTERM, SIGHUP) is answered at once:
    the trainer stops after it (the evaluation is part of the step being checkpointed), which on
    Atari can be minutes away, so say so instead of seeming to ignore it. The trainer's own
    handler still records it (a second signal still stops at once)."""

    if shown is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def on_interrupt(signum: int, frame: Any) -> None:
        say(
            f"{signal_name(signum)} received: the evaluation under way plays to its end, then "
            "the run saves a checkpoint and stops"
        )
        handler = previous[signal.Signals(signum)]
        if callable(handler):
            handler(signum, frame)

    for s in STOP_SIGNALS:
        signal.signal(s, on_interrupt)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def evaluation_summary(evaluation: Mapping[str, Any]) -> str:
    """``return M ± S over N games``, or what an evaluation that finished no game reports."""
    if evaluation.get("mean_return") is None:
        return str(evaluation.get("note") or "no game finished")
    n = evaluation["episodes"]
    return (
        f"return {evaluation['mean_return']:.1f} ± {evaluation['std_return']:.1f} over "
        f"{n} game{'s' * (n != 1)}"
    )


#: Statistics of an evaluation that exist only when a game finished.
_GAME_STATISTICS = (
    "mean_return",
    "std_return",
    "min_return",
    "max_return",
    "mean_length",
    "min_length",
    "max_length",
)


def no_game_note(max_steps: int | None, flag: str = "--eval-max-steps") -> str:
    """What an evaluation that finished no game reports instead of its statistics."""
    cap = f" within {flag} {max_steps:,}" if max_steps is not None else ""
    return f"no game finished{cap}"


def _finished(
    result: Mapping[str, Any], max_steps: int | None, flag: str = "--eval-max-steps"
) -> dict[str, Any]:
    """An evaluation's result with ``None`` (JSON null), not NaN, where no game finished, and a
    note saying so."""
    out = dict(result)
    if int(out.get("episodes", 0)) == 0:
        for name in _GAME_STATISTICS:
            out[name] = None
        out["note"] = no_game_note(max_steps, flag)
    return out


def make_policy_fn(spec: AlgorithmSpec, num_actions: int) -> Callable[[Any, Any], Callable]:
    """``policy_fn(online, key) -> policy(observations [N, ...]) -> actions [N]`` (greedy).

    Recurrent policies keep their core state between calls and reset it where a game starts
    (``policy(observations, first=mask)``); ε-greedy is applied by the evaluator. Given
    ``rows=`` (which environments the observations are, as :func:`zoo.envs.evaluate` passes
    while some have met their quotas), the policy acts for those rows only: a recurrent state
    is read and written at those rows, and the batch is padded to the next power of two (no
    wider than the widest call so far) so that a shrinking batch compiles a few sizes only.
    """

    @eqx.filter_jit
    def greedy(online, obs, state, first, key):
        # the actors' acting function with ε = 0: the same core-state reset at game starts
        initial = None
        if spec.recurrent:
            initial = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (obs.shape[0], *x.shape)), online.initial_state()
            )
            state = initial if state is None else state
        act = make_act(num_actions, spec.recurrent, initial)
        actions, _, state = act(online, obs, state, first, key, 0.0)
        return actions, state

    def policy_fn(online: Any, key: Any) -> Callable:
        box: dict[str, Any] = {"state": None, "key": key, "widest": 0}

        def policy(observations: Any, first: Any = None, rows: Any = None) -> np.ndarray:
            n = len(observations)
            first = np.zeros(n, bool) if first is None else np.asarray(first, bool)
            box["key"], k = jax.random.split(box["key"])
            box["widest"] = max(box["widest"], n)
            if rows is None:
                obs = jnp.asarray(observations)
                actions, box["state"] = greedy(online, obs, box["state"], jnp.asarray(first), k)
                return np.asarray(actions)
            index = np.asarray(rows, np.int64)
            width = min(1 << (n - 1).bit_length(), box["widest"])
            if width > n:  # repeat the last row: its result is dropped
                pad = np.minimum(np.arange(width), n - 1)
                observations, first, index = np.asarray(observations)[pad], first[pad], index[pad]
            state = None
            if spec.recurrent:
                box["state"] = _state_rows(box["state"], int(index.max()) + 1, online)
                state = jax.tree.map(lambda x: x[index], box["state"])
            obs = jnp.asarray(observations)
            actions, state = greedy(online, obs, state, jnp.asarray(first), k)
            if spec.recurrent:
                box["state"] = jax.tree.map(
                    lambda full, new: full.at[index[:n]].set(new[:n]), box["state"], state
                )
            return np.asarray(actions)[:n]

        return policy

    return policy_fn


def _state_rows(state: Any, rows: int, online: Any) -> Any:
    """A recurrent policy's state with at least ``rows`` environments: new ones at the
    network's initial state."""

    have = 0 if state is None else jax.tree.leaves(state)[0].shape[0]
    if have >= rows:
        return state
    more = jax.tree.map(
        lambda x: jnp.broadcast_to(x, (rows - have, *x.shape)), online.initial_state()
    )
    if state is None:
        return more
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), state, more)


def load_policy(run_dir: str | os.PathLike[str], *, step: int | None = None) -> Callable:
    """The trained agent of a run as a callable ``policy(observations [N, ...]) -> actions``.

    Loads the network parameters of the newest intact (or the ``step``) checkpoint; acts
    greedily. A damaged newer checkpoint is passed over with a note on stderr.
    """
    return _load_policy(run_dir, step)[0]


def _load_policy(
    run_dir: str | os.PathLike[str], step: int | None
) -> tuple[Callable, dict[str, Any]]:
    """:func:`load_policy`'s policy and the metadata of the checkpoint it came from."""

    run_path = Path(run_dir)
    if rundir.classify(run_path) != "run":
        raise RunRefusedError(f"{run_path} is not a zoo run directory (no run.yaml)")
    settings = read_settings(run_path)
    created = rundir.creation_record(rundir.read_history(run_path))
    spec = recorded_spec(run_path, created, "load")
    if not checkpoint_steps(run_path):
        raise RunRefusedError(f"{run_path} has no checkpoint yet (nothing to load)")
    with make(settings.env, num_envs=1, seed=0, training=False, **settings.env_args()) as env:
        shape, num_actions = env.observation_shape, env.num_actions
    network = build_network(
        spec, observation_shape=shape, num_actions=num_actions, key=jax.random.PRNGKey(0)
    )
    learner = Learner(spec)
    learner_state = learner.init(network, jax.random.PRNGKey(0))
    checkpointer = Checkpointer(RunDir(run_path).checkpoints)
    try:
        restored, meta = restore_learner(checkpointer, learner_state, step, run_path)
    finally:
        checkpointer.close()
    policy = make_policy_fn(spec, num_actions)(learner.acting(restored), jax.random.PRNGKey(0))
    return policy, dict(meta)


def evaluate_run(
    run_dir: str | os.PathLike[str],
    *,
    episodes: int = 10,
    seed: int = 12345,
    max_steps: int | None = None,
    step: int | None = None,
    num_envs: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Evaluate a run's checkpoint under the run's protocol; what ``zoo eval`` does.

    ``num_envs`` environments play at once (default: one per game, at most
    :data:`DEFAULT_EVAL_ENVS`), each with its share of the games fixed in advance
    (:func:`zoo.envs.evaluate`).

    Where no game finishes within ``max_steps``, the game statistics are ``None`` and ``note``
    says so. With ``progress``, an evaluation that takes more than a moment shows on stderr what
    it plays, the most agent steps it may take and how far it is
    (:class:`zoo.runs.progress.EvaluationProgress`).
    """

    run_settings.check_given(
        {
            "eval_episodes": episodes,
            "eval_max_steps": max_steps,
            "seed": seed,
            "eval_envs": num_envs,
        }
    )
    num_envs = eval_envs_for(episodes, num_envs, ("--envs", "--episodes"))
    run_path = Path(run_dir)
    policy, meta = _load_policy(run_path, step)
    settings = read_settings(run_path)
    spec = spec_lib.load_algorithm(RunDir(run_path).spec_file)
    shown = EvaluationProgress(f"zoo eval {run_path}") if progress else None
    result = evaluate(
        policy,
        settings.env,
        episodes=episodes,
        seed=seed,
        max_steps=max_steps,
        num_envs=num_envs,
        epsilon=spec.schedule.eval_epsilon,
        progress=shown,
        **settings.env_args(),
    )
    if shown is not None:
        shown.close()
    summary = {
        "run_dir": str(run_path),
        "protocol": settings.protocol,
        "checkpoint_env_steps": int(meta.get("env_steps", -1)),
        **_finished(result, max_steps, "--max-steps"),
    }
    _record_posthoc(run_path, summary, max_steps)
    return summary


def _record_posthoc(run_path: Path, summary: Mapping[str, Any], max_steps: int | None) -> None:
    """Append ``zoo eval``'s result to the run's ``posthoc_eval.jsonl`` (a run directory that
    cannot be written, someone else's, keeps the result on the screen only, with a note)."""

    record = {
        "kind": "posthoc",
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "env_steps": summary["checkpoint_env_steps"],
        "max_steps": max_steps,
        **{k: v for k, v in summary.items() if k not in ("run_dir", "checkpoint_env_steps")},
    }
    try:
        with open_append(RunDir(run_path).posthoc_evals_file) as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:
        say(f"this evaluation was not recorded in {run_path} ({e})")


def _seed31(value: int) -> int:
    """A derived seed folded into 31 bits (envpool's and ``PRNGKey``'s range)."""
    return value % 2**31
