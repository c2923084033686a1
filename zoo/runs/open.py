"""Opening a run: new, resumed, restarted or already finished, decided before anything is built.

:func:`open_run` returns an :class:`Opened` run: its directory (locked), spec, settings and mode.
A new run's spec and settings come from what was asked (:mod:`zoo.runs.create`); a resumed run
keeps those recorded at its creation, and a resume asked to be another run (another algorithm,
``--set``, setting, or a run.yaml or spec.yaml edited since) is refused with what differs; only
the budget may change. Over several processes (:mod:`zoo.runs.distributed`) process 0 decides
as one process would and the others follow its answer; one process is the group of one, so
there is one path. No JAX at import.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from zoo import spec as spec_lib
from zoo.envs import resolve_env
from zoo.fileio import read_text
from zoo.runs import rundir
from zoo.runs import settings as run_settings
from zoo.runs.create import (
    check_budget,
    checkpoint_steps,
    create_run_dir,
    last_record_step,
    make_dir,
    new_settings,
    spec_dump,
    write_provenance,
    write_settings,
)
from zoo.runs.errors import RunError, RunRefusedError
from zoo.runs.metrics import read_jsonl
from zoo.runs.notes import say
from zoo.runs.request import TrainRequest
from zoo.runs.result import RunResult
from zoo.runs.rundir import RunDir, RunSettingsError
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec, SpecError

if TYPE_CHECKING:  # pragma: no cover
    from zoo.runs.group import ProcessGroup

__all__ = [
    "Opened",
    "closing",
    "forget_refused",
    "open_run",
    "preflight",
    "read_settings",
    "recorded_spec",
    "seed_members",
]

#: The name of a seed's run in a group of seeds (:mod:`zoo.runs.seeds`): ``seed<S>``.
_SEED_MEMBER = re.compile(r"seed(\d+)")

#: What a new run is checked with before its directory is written: the run's blueprint from
#: shapes (:func:`zoo.runs.assemble.preflight`), handed on to the build.
Preflight = Callable[[AlgorithmSpec, RunSettings, Any], Any]


@dataclass
class Opened:
    """A run that is open for training (its directory locked), or finished.

    Attributes:
      path: the run directory.
      spec, settings: the run's (a resumed run's own; ``total_env_steps`` as asked); no spec
        for a finished run opened by a process other than 0.
      mode: ``"new"``, ``"resume"`` or ``"restart"``.
      lock: this process's lock on its directory (release it when done).
      previous_total: the budget before a resume changed it (``None``: unchanged).
      finished: the run as it stands when its budget is already reached (nothing to train).
      blueprint: what the preflight of a new run returned (``None`` otherwise).
      created: whether opening created the directory (a new run in a directory that did not
        exist).
    """

    path: Path
    spec: AlgorithmSpec | None
    settings: RunSettings
    mode: str
    lock: Any
    previous_total: int | None = None
    finished: RunResult | None = None
    blueprint: Any = None
    created: bool = False


def open_run(request: TrainRequest, group: ProcessGroup, preflight: Preflight) -> Opened:
    """Open the run ``request`` asks for, as process ``group.process_id`` of the group.

    Raises:
      RunRefusedError, RunError, SpecError: on every process, when process 0 refused or failed
        (its error on process 0, a pointer to its output on the others).
    """
    if not group.several:
        return _decide(request, group, preflight)
    opened, failure = None, None
    if group.main:
        try:
            opened = _decide(request, group, preflight)
        except (RunError, SpecError) as e:
            failure = e
    # 0: train; 1: process 0 refused or failed (its error says why); 2: nothing left to train
    finished = opened is not None and opened.finished is not None
    answer = int(group.broadcast(1 if failure is not None else 2 if finished else 0))
    if failure is not None:
        raise failure
    run_path = Path(request.resume if request.resume is not None else request.run_dir)
    if answer == 1:
        raise RunRefusedError(f"process 0 did not start the run in {run_path}; its output says why")
    if opened is not None:
        return opened
    settings = read_settings(run_path)
    if answer == 2:
        done = _already_finished(run_path, settings)
        return Opened(run_path, None, settings, "resume", None, finished=done)
    if request.total_env_steps is not None:
        settings = settings.model_copy(update={"total_env_steps": request.total_env_steps})
    spec = _spec_of(run_path)
    _check_processes(run_path, settings, group.num_processes)
    own = group.own_dir(run_path)
    make_dir(own)
    mode = "resume" if request.resume is not None else "new"
    return Opened(run_path, spec, settings, mode, rundir.RunLock(own).acquire())


def _spec_of(run_path: Path) -> AlgorithmSpec:
    """The spec of a run process 0 opened (another process reads it from the directory)."""
    created = rundir.creation_record(rundir.read_history(run_path))
    return recorded_spec(run_path, created, "resume")


def _decide(request: TrainRequest, group: ProcessGroup, preflight: Preflight) -> Opened:
    """What one process (or process 0 of several) opens: a resume, a restart or a new run."""
    given = request.given()
    if request.resume is not None:
        run_path = Path(request.resume)
        lock = _lock_run_to_resume(run_path)
        try:
            spec, settings, previous = _resumable(
                run_path, request.algorithm, request.overrides, request.total_env_steps, given
            )
            _check_processes(run_path, settings, group.num_processes)
            opened = Opened(run_path, spec, settings, "resume", lock, previous)
            if request.restart:
                _restart(run_path, settings)
                opened.mode = "restart"
            elif (done := _already_finished(run_path, settings)) is not None:
                opened.finished = done
            elif not checkpoint_steps(run_path):
                raise RunRefusedError(_no_checkpoint(run_path, group.several))
            else:
                _note_early_stop(run_path, settings)
        except BaseException:
            lock.release()
            raise
        return opened
    if request.algorithm is None:
        raise RunRefusedError("name an algorithm or preset to train, or a run directory to resume")
    spec, settings = new_settings(request.algorithm, request.overrides, given)
    if group.several:
        settings = settings.model_copy(update={"processes": group.num_processes})
    blueprint = preflight(spec, settings, group)
    existed = request.run_dir is not None and os.path.lexists(request.run_dir)
    run_path, lock = create_run_dir(request.run_dir, spec, settings)
    return Opened(run_path, spec, settings, "new", lock, blueprint=blueprint, created=not existed)


def _no_checkpoint(run_path: Path, several: bool) -> str:
    """Why a run that stopped before its first checkpoint cannot be resumed, and what to do."""
    if several:
        return (
            f"cannot resume {run_path}: it stopped before its first checkpoint; train it again "
            "in a new --run-dir"
        )
    last = last_record_step(run_path)
    records = f" (records up to env step {last:,})" if last is not None else ""
    return (
        f"cannot resume {run_path}: it stopped before its first checkpoint{records}; start it "
        f"over from scratch, with its own spec and settings, with: zoo train --resume "
        f"{run_path} --restart"
    )


def seed_members(parent: str | os.PathLike[str]) -> list[Path]:
    """The seeds' run directories of a group (``seed<S>`` holding a ``run.yaml``), by seed;
    empty for any other directory."""
    parent = Path(parent)
    if not parent.is_dir() or (parent / "run.yaml").exists():
        return []
    found = [
        (int(m.group(1)), p)
        for p in parent.iterdir()
        if (m := _SEED_MEMBER.fullmatch(p.name)) and (p / "run.yaml").is_file()
    ]
    return [p for _, p in sorted(found)]


def preflight(spec: AlgorithmSpec, settings: RunSettings, group: ProcessGroup) -> Any:
    """A new run's blueprint (:func:`zoo.runs.assemble.preflight`), the :data:`Preflight` of
    :func:`open_run`: JAX starts here."""
    from zoo.runs import assemble

    return assemble.preflight(spec, settings, group)


@contextlib.contextmanager
def closing(opened: Opened, group: ProcessGroup) -> Iterator[None]:
    """Release the run's lock however training ends; a new run refused before it trained leaves
    no run behind, and a failure is recorded in the run's history."""
    try:
        yield
    except RunRefusedError:
        if group.main and not group.several:
            forget_refused(opened)
        raise
    except RunError as e:
        if group.main:
            with contextlib.suppress(OSError):
                rundir.append_history(opened.path, "stopped", status="failed", reason=str(e))
        raise
    finally:
        opened.lock.release()


def forget_refused(opened: Opened) -> None:
    """A new run refused before it trained (its memory is checked once its update is compiled,
    after the directory is written) leaves no run behind: the directory as it was before, gone
    where the run created it."""
    if opened.mode != "new":
        return
    with contextlib.suppress(OSError):
        if rundir.undo_creation(opened.path) and opened.created:
            (opened.path / rundir.LOCK).unlink(missing_ok=True)
            opened.path.rmdir()


def _check_processes(run_path: Path, settings: RunSettings, processes: int) -> None:
    """A run's replay is in one shard per process: it resumes with as many processes."""
    if settings.processes != processes:
        how = (
            "zoo train --resume RUN with --num-processes, --process-id and --coordinator"
            if settings.processes > 1
            else "zoo train --resume RUN"
        )
        raise RunRefusedError(
            f"cannot resume {run_path} with {processes} process(es): it was trained by "
            f"{settings.processes} (its replay is kept in one shard per process); resume it "
            f"with {settings.processes}: {how}"
        )


def _already_finished(run_path: Path, settings: RunSettings) -> RunResult | None:
    """A run whose newest checkpoint has reached its budget, as it stands (nothing is built or
    written), saying so; ``None`` when there is something left to train."""
    steps = checkpoint_steps(run_path)
    if not steps or steps[-1] < settings.total_env_steps:
        return None
    step = steps[-1]
    records = [
        r for r in read_jsonl(RunDir(run_path).metrics_file) if r.get("env_steps", 0) <= step
    ]
    say(
        f"{run_path} is already finished: its checkpoint at env step {step:,} has reached the "
        f"budget of {settings.total_env_steps:,}; nothing to train. Train it further with: "
        f"zoo train --resume {run_path} --steps N (N above {step:,}); evaluate it with: "
        f"zoo eval {run_path}"
    )
    return RunResult(
        run_dir=run_path,
        env_steps=step,
        updates=int(records[-1]["updates"]) if records else 0,
        evaluations=[
            e for e in read_jsonl(RunDir(run_path).evals_file) if e.get("env_steps", 0) <= step
        ],
    )


def _note_early_stop(run_path: Path, settings: RunSettings) -> None:
    """Say that a resume continues a run that stopped at its return target before its budget
    (it trains on, and stops again at the next evaluation that reaches the target)."""
    stops = [e for e in rundir.read_history(run_path) if e.get("event") == "stopped"]
    target = settings.stop_at_return
    if target is None or not stops or stops[-1].get("status") != "finished":
        return
    at = stops[-1].get("env_steps")
    if isinstance(at, int) and at < settings.total_env_steps:
        say(
            f"{run_path} stopped at env step {at:,} when an evaluation reached its "
            f"--stop-at-return {target:g}; resuming toward its budget of "
            f"{settings.total_env_steps:,} env steps (it stops again at the next evaluation "
            "that reaches the target)"
        )


def _lock_run_to_resume(run_path: Path) -> rundir.RunLock:
    state = rundir.classify(run_path)
    if state == "absent":
        raise RunRefusedError(f"cannot resume {run_path}: no such directory")
    if state != "run":
        raise RunRefusedError(
            f"cannot resume {run_path}: it is not a zoo run directory (no run.yaml)"
        )
    rundir.check_run_files(run_path)
    return rundir.RunLock(run_path).acquire()


def read_settings(run_path: Path) -> RunSettings:
    try:
        return RunDir(run_path).settings()
    except RunSettingsError as e:
        raise RunRefusedError(f"cannot resume {e}") from None


def _resumable(
    run_path: Path,
    algorithm: Any,
    overrides: Mapping[str, Any] | None,
    total_env_steps: int | None,
    given: Mapping[str, Any],
) -> tuple[AlgorithmSpec, RunSettings, int | None]:
    """The run's own spec and settings, checked against its creation record and against what
    was asked; the budget (``total_env_steps``) is the one thing a resume may change."""
    settings = read_settings(run_path)
    created = rundir.creation_record(rundir.read_history(run_path))
    spec = recorded_spec(run_path, created, "resume")
    if created is not None:
        lines = rundir.describe_differences(
            _as_created(created.get("settings", {})),
            settings.model_dump(mode="json"),
            labels=("at creation", "in run.yaml"),
            ignore=("total_env_steps",),
        )
        if lines:
            raise RunRefusedError(
                f"cannot resume {run_path}: its run.yaml was edited after the run was created "
                f"({'; '.join(lines)}); a resumed run keeps its settings (only --steps may "
                "change the budget): undo the edit"
            )
    _check_requested(run_path, spec, settings, algorithm, overrides, given)
    previous = None
    on_disk = checkpoint_steps(run_path)
    if total_env_steps is not None and on_disk and total_env_steps < on_disk[-1]:
        raise RunRefusedError(
            f"cannot resume {run_path} with --steps {total_env_steps:,}: the run has already "
            f"reached env step {on_disk[-1]:,}; give a larger budget"
        )
    if total_env_steps is not None and total_env_steps != settings.total_env_steps:
        previous = settings.total_env_steps
        settings = settings.model_copy(update={"total_env_steps": int(total_env_steps)})
    check_budget(spec, settings)
    return spec, settings, previous


def recorded_spec(run_path: Path, created: Mapping[str, Any] | None, action: str) -> AlgorithmSpec:
    """The run's spec from its spec.yaml, refused if it was edited since the run was created."""
    spec_path = RunDir(run_path).spec_file
    try:
        spec_text = read_text(spec_path, what="spec file")
    except OSError as e:
        raise RunRefusedError(f"cannot {action} {run_path}: cannot read spec.yaml ({e})") from None
    if created is not None and rundir.sha256_text(spec_text) != created.get("spec_sha256"):
        try:
            current = spec_dump(spec_lib.load_algorithm(spec_path))
        except SpecError as e:
            raise RunRefusedError(
                f"cannot {action} {run_path}: its spec.yaml was edited after the run was "
                f"created and no longer validates ({e.problems[0]}); a run keeps the spec it "
                "was created with: undo the edit"
            ) from None
        lines = rundir.describe_differences(
            created.get("spec", {}), current, labels=("at creation", "in spec.yaml")
        )
        if lines:
            raise RunRefusedError(
                f"cannot {action} {run_path}: its spec.yaml was edited after the run was "
                f"created ({'; '.join(lines)}); a run keeps the spec it was created with: undo "
                f"the edit, or train the edited spec as a new run (zoo train {spec_path} "
                "--run-dir NEW_DIR)"
            )
    return spec_lib.load_algorithm(spec_path)


def _check_requested(
    run_path: Path,
    spec: AlgorithmSpec,
    settings: RunSettings,
    algorithm: Any,
    overrides: Mapping[str, Any] | None,
    given: Mapping[str, Any],
) -> None:
    """Refuse a resume asked to be another run: another algorithm, spec or setting."""
    keep = (
        f"a resumed run keeps the spec and settings it was created with (only --steps may "
        f"extend its budget): resume with just `zoo train --resume {run_path}`, or start a new "
        "run"
    )
    if algorithm is not None:
        same = (
            spec_dump(algorithm) == spec_dump(spec)
            if isinstance(algorithm, AlgorithmSpec)
            else str(algorithm) == settings.algorithm
        )
        if not same:
            name = algorithm.name if isinstance(algorithm, AlgorithmSpec) else str(algorithm)
            raise RunRefusedError(
                f"cannot resume {run_path} as {name!r}: it is a run of "
                f"{settings.algorithm!r}; {keep}"
            )
    if overrides:
        asked = spec_dump(spec_lib.load_algorithm(spec, overrides=overrides))
        lines = rundir.describe_differences(
            spec_dump(spec), asked, labels=("in the run", "asked by --set")
        )
        if lines:
            raise RunRefusedError(
                f"cannot resume {run_path} with --set: it would change the run's spec "
                f"({'; '.join(lines)}); {keep}"
            )
    asked = dict(given)
    if asked.get("env") is not None:
        asked["env"] = resolve_env(asked["env"]).env_id
    conflicts = run_settings.resume_conflicts(asked, settings.model_dump())
    if conflicts:
        raise RunRefusedError(
            f"cannot resume {run_path} with other settings: {'; '.join(conflicts)}; {keep}"
        )


def _as_created(recorded: Any) -> Any:
    """The creation record's settings with the settings added since then at their defaults
    (``eval_envs`` is 1 in a run made before it existed), so that an older run is not taken for
    one whose run.yaml was edited; a record that is no longer valid is returned as it is."""
    try:
        return RunSettings(**recorded).model_dump(mode="json")
    except (ValidationError, TypeError):
        return recorded


def _restart(run_path: Path, settings: RunSettings) -> None:
    """Start a run that has no checkpoint over: discard its records (only), record it."""
    steps = checkpoint_steps(run_path)
    if steps:
        raise RunRefusedError(
            f"cannot restart {run_path}: it has checkpoints (up to env step {steps[-1]:,}) and "
            f"--restart only starts over a run that has none; continue it with: zoo train "
            f"--resume {run_path} (or train a new run elsewhere)"
        )
    last = last_record_step(run_path)
    rundir.append_history(
        run_path,
        "restarted",
        reason="no checkpoint",
        discarded_records_up_to=last,
        total_env_steps=settings.total_env_steps,
        command=list(sys.argv),
    )
    for name in (RunDir.METRICS, RunDir.EVALS, "tb", RunDir.CHECKPOINTS):
        target = run_path / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    run = RunDir(run_path)
    write_settings(run, settings)
    write_provenance(run, settings)
    say(f"restarting {run_path} from scratch (it had no checkpoint)")
