"""What a run saves and how it is restored.

A checkpoint of a run holds its *run state* (:func:`run_state`): the learner, the counters
(``env_steps``, ``credit``, ``games``), the actors' and sampler's RNG key, and the replay unless
the run opted out (``save_replay``). The pending step, the actors' network and their recurrent
state are not saved: environments cannot be checkpointed, so a resumed run starts new episodes,
acting with the learner's network. :func:`save_run_state` writes one checkpoint with its
metadata (``env_steps``, ``updates``, ``games``, ``replay_saved``).

:func:`restore_run_state` is its inverse for a resume: the same template, filled from the newest
intact checkpoint (damaged newer ones are reported, set aside and recorded; over several
processes, the newest step every process completed), the replay sealed so that no window
crosses the boundary, and the history's ``resumed`` event. :func:`restore_learner` restores the
learner part alone (to act: ``zoo.load_policy``, ``zoo eval``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax.numpy as jnp
import yaml

from zoo.fileio import read_text, write_atomic
from zoo.runs import rundir
from zoo.runs.checkpoint import CheckpointCorruptError, CheckpointError
from zoo.runs.create import spec_dump
from zoo.runs.errors import RunError, RunRefusedError
from zoo.runs.group import ProcessGroup
from zoo.runs.notes import say
from zoo.runs.rundir import RunDir
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec

if TYPE_CHECKING:  # pragma: no cover
    from zoo.loop import Loop, LoopCarry
    from zoo.runs.checkpoint import Checkpointer

__all__ = ["restore_learner", "restore_run_state", "run_state", "save_run_state"]


def run_state(loop: Loop, carry: LoopCarry, games: int, save_replay: bool) -> dict[str, Any]:
    """What a checkpoint of ``carry`` holds: learner, counters, RNG key, and the replay unless
    opted out (``save_replay``).

    The replay is saved with the latest update's priorities written. The learner is this
    process's copy of a learner replicated over processes (:mod:`zoo.runs.distributed`).
    """
    state = {
        "learner": loop.learner.unreplicate(carry.learner),
        "counters": {
            "env_steps": carry.env_steps,
            "credit": carry.credit,
            "games": jnp.asarray(games, jnp.int32),
        },
        "key": carry.key,
    }
    if save_replay:
        state["replay"] = loop.replay.write_priorities(carry.replay, carry.deferred)
    return state


def save_run_state(
    checkpointer: Checkpointer, loop: Loop, carry: LoopCarry, games: int, save_replay: bool
) -> None:
    """Save ``carry``'s run state (:func:`run_state`) as the checkpoint of its ``env_steps``,
    with the metadata ``env_steps``, ``updates``, ``games`` and ``replay_saved``."""
    env_steps = int(carry.env_steps)
    checkpointer.save(
        env_steps,
        run_state(loop, carry, games, save_replay),
        {
            "env_steps": env_steps,
            "updates": int(carry.learner.updates),
            "games": games,
            "replay_saved": save_replay,
        },
    )


def restore_run_state(
    loop: Loop,
    carry: LoopCarry,
    checkpointer: Checkpointer,
    run_path: Path,
    spec: AlgorithmSpec,
    settings: RunSettings,
    previous_total: int | None,
    group: ProcessGroup,
) -> tuple[LoopCarry, int, int]:
    """The fresh ``carry`` with the run state of the newest intact checkpoint written into it
    (in place: the replay is filled, not copied). Returns ``(carry, games, resume_from)``,
    ``resume_from`` being the checkpoint's env step (records after it are truncated)."""
    template = run_state(loop, carry, 0, settings.save_replay)
    try:
        if group.several:
            step = _common_step(run_path, group)
            restored, meta = checkpointer.restore(template, step)
            skipped: list[tuple[int, str]] = []
        else:
            restored, meta, step, skipped = checkpointer.restore_intact(template)
    except CheckpointCorruptError as e:
        raise RunError(f"cannot resume {run_path}: no checkpoint is intact ({e})") from None
    except CheckpointError as e:
        raise RunError(f"cannot resume {run_path}: {e}") from None
    if settings.total_env_steps < step:
        raise RunRefusedError(
            f"cannot resume {run_path} with --steps {settings.total_env_steps:,}: the run has "
            f"already reached env step {step:,}; give a larger budget"
        )
    for bad, reason in skipped:
        say(f"checkpoint {bad} of {run_path} is damaged ({reason}); resuming from {step}")
    if skipped:
        _set_aside(run_path, [bad for bad, _ in skipped], checkpointer)
    counters = restored["counters"]
    # open episodes restart: seal the replay so that no window crosses the boundary (an
    # opted-out replay starts empty)
    replay_state = loop.replay.seal(restored["replay"]) if "replay" in restored else carry.replay
    carry = eqx.tree_at(
        lambda c: (c.replay, c.key, c.env_steps, c.credit),
        carry,
        (replay_state, restored["key"], counters["env_steps"], counters["credit"]),
    )
    carry = loop.with_learner(carry, loop.learner.replicate(restored["learner"]))
    if group.main:
        _record_resume(run_path, spec, settings, int(step), previous_total, skipped)
    return carry, int(counters["games"]), int(meta["env_steps"])


def _common_step(run_path: Path, group: Any) -> int:
    """The newest checkpoint step that every process of ``group`` completed (process 0 reads
    their folders and tells the others): the processes are in lockstep, so a kill leaves them
    at most one checkpoint apart, and each keeps two."""

    step = -1
    if group.main:
        common = None
        for folder in group.process_dirs(run_path):
            steps = set(rundir.complete_steps(RunDir(folder).checkpoints))
            common = steps if common is None else common & steps
        step = max(common) if common else -1
    step = int(group.broadcast(step))
    if step < 0:
        raise CheckpointError(
            f"no checkpoint step is complete in every process's folder of {run_path}"
        )
    return step


def _set_aside(run_path: Path, steps: list[int], checkpointer: Any) -> None:
    """Move damaged checkpoints out of ``checkpoints/`` (kept for inspection, never deleted), so
    that the run can write those steps again."""
    aside = run_path / "damaged-checkpoints"
    aside.mkdir(exist_ok=True)
    for step in steps:
        source = RunDir(run_path).checkpoints / str(step)
        if source.exists():
            target = aside / str(step)
            n = 1
            while target.exists():
                n += 1
                target = aside / f"{step}-{n}"
            os.replace(source, target)
    checkpointer.latest_step()  # re-reads the folder


def _record_resume(
    run_path: Path,
    spec: AlgorithmSpec,
    settings: RunSettings,
    step: int,
    previous_total: int | None,
    skipped: list[tuple[int, str]],
) -> None:
    """The history's ``resumed`` event (and ``run.yaml`` when the budget changed)."""
    history = rundir.read_history(run_path)
    if rundir.creation_record(history) is None:
        # a run from before histories: what it holds now is what later resumes are held to
        spec_text = read_text(RunDir(run_path).spec_file, what="spec file")
        recorded = settings.model_dump(mode="json")
        if previous_total is not None:
            recorded["total_env_steps"] = previous_total
        rundir.append_history(
            run_path,
            "adopted",
            note="created before zoo kept run histories; its spec and settings as found",
            **rundir.creation_fields(spec_text, spec_dump(spec), recorded),
        )
    fields: dict[str, Any] = {"from_env_steps": step, "total_env_steps": settings.total_env_steps}
    if previous_total is not None:
        fields["budget_changed_from"] = previous_total
        write_atomic(
            RunDir(run_path).settings_file,
            yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False),
        )
    if skipped:
        fields["damaged_checkpoints"] = [{"step": s, "reason": r} for s, r in skipped]
    rundir.append_history(run_path, "resumed", command=list(sys.argv), **fields)


def restore_learner(checkpointer: Any, learner_state: Any, step: int | None, run_path: Path):
    """Restore only the learner part of a checkpoint (the replay is not needed to act): the
    given step, or the newest intact one."""

    try:
        if step is not None:
            restored, meta = checkpointer.restore({"learner": learner_state}, step)
        else:
            restored, meta, used, skipped = checkpointer.restore_intact({"learner": learner_state})
            for bad, reason in skipped:
                say(f"checkpoint {bad} of {run_path} is damaged ({reason}); using {used}")
    except CheckpointCorruptError as e:
        raise RunError(f"cannot load {run_path}: no checkpoint is intact ({e})") from None
    except CheckpointError as e:
        raise RunError(f"cannot load {run_path}: {e}") from None
    return restored["learner"], meta
