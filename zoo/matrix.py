"""One run of a matrix of runs, made to exist: reused, resumed, restarted or trained.

``zoo reproduce`` and ``zoo bench`` both train a matrix of (algorithm, game, seed) runs into
``ROOT/<algorithm>/<game>/seed<k>`` and share its rules through :func:`ensure_run`:

- a run whose newest checkpoint has reached the budget is **reused** (not retrained, its files
  untouched);
- a run with a checkpoint short of the budget is **resumed** from it (``train(resume=...)``);
- a run without any checkpoint (killed before its first one) is started over, with its own
  spec and settings (``train(resume=..., restart=True)``, recorded in its history);
- a folder holding a run of another algorithm, preset, environment, protocol or seed is
  refused (:func:`check_target`, which callers run on every target before training any).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.runs.rundir import RunDir, RunSettingsError, safe_component
from zoo.runs.settings import check_given

#: The settings a matrix decides for each of its runs (never given among the new-run settings).
MATRIX_DECIDES = ("env", "seed", "total_env_steps", "protocol")

__all__ = [
    "RunOutcome",
    "RunTarget",
    "TargetError",
    "agent_steps",
    "check_target",
    "ensure_run",
    "run_state",
    "run_targets",
]


class TargetError(ValueError):
    """A run folder holds another run (or a damaged one); the message says what differs."""


@dataclass(frozen=True)
class RunTarget:
    """One run of a matrix: where it lives and what it must be.

    Attributes:
      path: the run directory (``ROOT/<algorithm>/<game>/seed<k>``).
      algorithm: what :func:`zoo.runs.train` is given for a new run: ``preset:NAME``, a preset
        file, a catalogue name or ``FILE.yaml[:ENTRY]``.
      env: the environment id.
      seed: the run's seed.
      env_steps: the budget in transitions (agent steps summed over environments).
      preset: the preset's name when ``algorithm`` names a preset (``run.yaml``'s ``preset``).
      protocol: the evaluation protocol; ``None`` lets the preset or environment choose.
      overrides: dotted overrides for a new run (a resumed run keeps its own spec).
      settings: the other settings of a new run, by their names in
        :class:`zoo.runs.settings.RunSettings`, as :func:`zoo.runs.train` takes them (left out:
        its default); a resumed run keeps its own.
    """

    path: Path
    algorithm: str
    env: str
    seed: int
    env_steps: int
    preset: str | None = None
    protocol: str | None = None
    overrides: Mapping[str, Any] | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def expected(self) -> dict[str, Any]:
        """The ``run.yaml`` values a run found in :attr:`path` must have to be this run."""
        who: dict[str, Any] = (
            {"preset": self.preset}
            if self.preset is not None
            else {"algorithm": self.algorithm, "preset": None}
        )
        where = {"env": self.env, "seed": self.seed}
        if self.protocol is not None:
            where["protocol"] = self.protocol
        return {**who, **where}


def agent_steps(frames: int, frame_skip: int, log: Callable[[str], None] = print) -> int:
    """The agent steps of a budget of ``frames`` emulator frames at ``frame_skip`` frames per
    step: ``frames // frame_skip``, with a note through ``log`` when ``frames`` is not a
    multiple of the frame skip (the budget is rounded down, never up).

    Raises:
      ValueError: ``frames`` is less than one agent step.
    """
    if frames < frame_skip:
        raise ValueError(f"--frames {frames} is less than one agent step ({frame_skip} frames)")
    steps = frames // frame_skip
    if steps * frame_skip != frames:
        log(
            f"note: {frames:,} frames is not a multiple of the frame skip {frame_skip}; "
            f"training {steps:,} agent steps ({steps * frame_skip:,} frames)"
        )
    return steps


def run_targets(
    root: str | os.PathLike[str],
    folder: str,
    algorithm: str,
    envs: Sequence[str],
    seeds: int,
    env_steps: int,
    *,
    preset: str | None = None,
    protocol: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> list[RunTarget]:
    """The targets ``ROOT/<folder>/<env>/seed<k>`` of one algorithm over ``envs`` × seeds
    ``0 .. seeds-1`` (environment-major), with the same ``preset``, ``protocol``, ``overrides``
    and new-run ``settings`` (see :class:`RunTarget`); environment ids become folder names
    through :func:`zoo.runs.rundir.safe_component`.

    Raises:
      TypeError: ``settings`` names a setting the matrix itself decides, or no setting at all.
    """
    chosen = dict(settings or {})
    fixed = sorted(set(chosen) & set(MATRIX_DECIDES))
    if fixed:
        raise TypeError(f"{fixed}: a matrix decides each run's {', '.join(MATRIX_DECIDES)}")
    check_given(chosen)
    base = Path(root) / folder
    return [
        RunTarget(
            path=base / safe_component(env, fallback="env") / f"seed{seed}",
            algorithm=algorithm,
            env=env,
            seed=seed,
            env_steps=env_steps,
            preset=preset,
            protocol=protocol,
            overrides=overrides,
            settings=chosen,
        )
        for env in envs
        for seed in range(seeds)
    ]


@dataclass
class RunOutcome:
    """What :func:`ensure_run` did with one target.

    Attributes:
      path: the run directory.
      action: ``reused``, ``resumed``, ``restarted`` or ``trained``.
      status: the line printed for it (``resumed from 1,500 env steps``).
      env_steps: the env steps the run stands at now.
      before: the env steps of its newest checkpoint before (``None``: it had none).
      interrupted: the run was stopped by Ctrl-C (SIGINT) after saving a checkpoint.
    """

    path: Path
    action: str
    status: str
    env_steps: int
    before: int | None = None
    interrupted: bool = False


def run_state(run_dir: str | os.PathLike[str]) -> int | None:
    """The env steps of the newest complete checkpoint of ``run_dir``, or ``None``."""
    ckpt = RunDir(run_dir).checkpoints
    if not ckpt.is_dir() or not any(ckpt.iterdir()):
        return None
    from zoo.runs.checkpoint import Checkpointer

    checkpointer = Checkpointer(ckpt)
    try:
        return checkpointer.latest_step()
    finally:
        checkpointer.close()


def check_target(target: RunTarget) -> int | None:
    """Check that ``target.path`` is free or holds this very run; its checkpoint's env steps.

    Returns:
      The env steps of the run's newest checkpoint, or ``None`` (no run there, or one without a
      checkpoint).

    Raises:
      TargetError: the folder holds a run of another algorithm, preset, environment, protocol or
        seed, or one whose ``run.yaml`` is damaged.
    """
    path = target.path
    run = RunDir(path)
    if not run.is_run():
        return None
    try:
        settings = run.settings().model_dump()
    except RunSettingsError as e:
        raise TargetError(f"{e}; choose another --run-dir or remove it") from None
    wrong = {k: (settings.get(k), v) for k, v in target.expected().items() if settings.get(k) != v}
    if wrong:
        what = ", ".join(f"{k} {have!r} (expected {want!r})" for k, (have, want) in wrong.items())
        raise TargetError(
            f"{path} holds another run: {what}; choose another --run-dir or remove it"
        )
    return run_state(path)


def ensure_run(
    target: RunTarget,
    *,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> RunOutcome:
    """Make ``target`` a run trained to its budget: reuse, resume, restart or train it.

    Args:
      target: the run.
      progress: show the run's progress line (see :mod:`zoo.runs.metrics`).
      log: where status lines go (``<path>: resuming from 1,500 env steps``).

    Returns:
      A :class:`RunOutcome`; ``interrupted`` when Ctrl-C stopped the run (its checkpoint saved).

    Raises:
      TargetError: the folder holds another run.
      zoo.runs.RunRefusedError, zoo.runs.RunError: as :func:`zoo.runs.train` raises them.
    """
    from zoo.runs import train

    path, steps = target.path, target.env_steps
    is_run = RunDir(path).is_run()
    have = check_target(target)
    if have is not None and have >= steps:
        status = f"reused (finished at {have:,} env steps)"
        log(f"{path}: {status}")
        return RunOutcome(path, "reused", status, have, before=have)
    if have is not None:
        log(f"{path}: resuming from {have:,} env steps")
        result = train(resume=path, total_env_steps=steps, progress=progress)
        action, status = "resumed", f"resumed from {have:,} env steps"
    elif is_run:
        # killed before its first checkpoint: the same run, started over explicitly
        log(f"{path}: no checkpoint; restarting, {steps:,} env steps")
        result = train(resume=path, restart=True, total_env_steps=steps, progress=progress)
        action, status = "restarted", "restarted (it had no checkpoint)"
    else:
        log(f"{path}: training {steps:,} env steps")
        result = train(
            target.algorithm,
            overrides=target.overrides,
            env=target.env,
            total_env_steps=steps,
            seed=target.seed,
            run_dir=path,
            protocol=target.protocol,
            progress=progress,
            **target.settings,
        )
        action, status = "trained", "trained"
    if result.interrupted:
        status = f"interrupted at {result.env_steps:,} env steps (checkpoint saved)"
    log(f"{path}: {status}")
    return RunOutcome(
        path, action, status, result.env_steps, before=have, interrupted=result.interrupted
    )
