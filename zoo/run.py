"""Runs: ``zoo.train``, resume, evaluation of a run, and ``zoo.load_policy``.

A run directory holds::

    spec.yaml          the resolved algorithm (after extends and overrides)
    run.yaml           the run's settings (environment, protocol, budget, seed, ...)
    provenance.json    package versions, git commit, hardware, protocol, seed, command line
    metrics.jsonl      training records (env_steps, updates, returns, loss, rates, ...)
    eval.jsonl         evaluation results under the protocol
    tb/                TensorBoard event files
    checkpoints/       Orbax checkpoints of the whole run state (replay included unless opted out)

``--resume DIR`` continues from the newest checkpoint: counters, schedules, RNG, optimizer and
replay continue; open episodes restart (environments cannot be checkpointed) and records logged
after the checkpoint are truncated, so nothing is duplicated and nothing checkpointed is lost.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from zoo import rundir
from zoo import spec as spec_lib
from zoo.fileio import read_text, write_atomic
from zoo.memory import MemoryPlan
from zoo.rundir import RunDir, RunError, RunRefusedError, RunSettings, RunSettingsError
from zoo.runs import settings as run_settings
from zoo.runs.settings import DEFAULT_EVAL_ENVS, MAX_NUM_ENVS, MAX_SEED, eval_envs_for
from zoo.spec import AlgorithmSpec, SpecError

__all__ = [
    "DEFAULT_EVAL_ENVS",
    "MAX_NUM_ENVS",
    "MAX_SEED",
    "RunError",
    "RunRefusedError",
    "RunResult",
    "RunSettings",
    "TrainRequest",
    "evaluate_run",
    "load_policy",
    "plan_memory",
    "replay_for_env",
    "train",
]


@dataclass
class RunResult:
    """What a finished (or interrupted) run reports."""

    run_dir: Path
    env_steps: int
    updates: int
    evaluations: list[dict[str, Any]]
    interrupted: bool = False

    @property
    def final_eval(self) -> dict[str, Any] | None:
        return self.evaluations[-1] if self.evaluations else None

    @property
    def best_return(self) -> float | None:
        """The best mean return over evaluations that finished a game (``None`` if none did)."""
        returns = [e["mean_return"] for e in self.evaluations if e.get("mean_return") is not None]
        return max(returns, default=None)


def _provenance(settings: RunSettings, protocol: Any) -> dict[str, Any]:
    import jax

    versions = {}
    for package in (
        "zoo-rl",
        "jax",
        "jaxlib",
        "equinox",
        "optax",
        "rlax",
        "envpool",
        "gymnasium",
        "orbax-checkpoint",
        "pydantic",
        "numpy",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    commit = None
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            check=False,
            timeout=5,
        )
        if out.returncode == 0:
            commit = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "created": datetime.datetime.now(datetime.UTC).isoformat(),
        "versions": versions,
        "commit": commit,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "protocol": getattr(protocol, "name", str(protocol)),
        # every setting, its source's value and the named differences (docs/protocols.md)
        "protocol_settings": protocol.to_dict() if hasattr(protocol, "to_dict") else None,
        "seed": settings.seed,
        "command": sys.argv,
    }


def _spec_yaml(spec: AlgorithmSpec) -> str:
    data = spec.model_dump(mode="json", serialize_as_any=True)
    return yaml.safe_dump({spec.name or "algorithm": data}, sort_keys=False, allow_unicode=True)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def _check_memory(
    replay_bytes: int, network_bytes: int, spec: AlgorithmSpec, workspace_bytes: int = 0
) -> None:
    """Refuse a run whose learner state, or whose planned peak (replay + the update's working
    memory where measured + overhead, see :mod:`zoo.memory`) beside it, does not fit in the
    memory available now."""
    from zoo.memory import SAFETY, available_memory, plan

    available = available_memory()
    if available is None:
        return
    if network_bytes > SAFETY * available:
        raise RunRefusedError(
            f"the network's parameters need {_gib(network_bytes)} (with the target network and "
            f"the optimizer's state) but only {_gib(available)} of memory is available; use "
            "smaller layers (network.hidden)"
        )
    if replay_bytes:
        memory = plan(
            replay_bytes,
            spec.replay.capacity,
            available=available - network_bytes,
            workspace_bytes=workspace_bytes,
        )
        if not memory.fits:
            raise RunRefusedError(memory.refusal("this run"))


def _network_bytes(spec: AlgorithmSpec, observation_shape: Any, num_actions: int) -> int:
    """Bytes of the learner state's parameters (online, target, two optimizer moments),
    counted from shapes with ``jax.eval_shape``: nothing is allocated. The same shapes check
    ``optimizer.groups`` against the network's parameters (a refusal names the group)."""
    import equinox as eqx
    import jax
    import numpy as np

    from zoo.networks import build_network
    from zoo.optimizers import check_groups

    try:
        shapes = eqx.filter_eval_shape(
            build_network,
            spec,
            observation_shape=tuple(observation_shape),
            num_actions=num_actions,
            key=jax.random.PRNGKey(0),
        )
    except ValueError as e:  # a torso that cannot take these observations (an image torso)
        raise RunRefusedError(f"network: {e}") from None
    try:
        check_groups(spec.optimizer, shapes)
    except ValueError as e:  # a parameter group that names no part of the network
        raise RunRefusedError(str(e)) from None
    leaves = [x for x in jax.tree.leaves(shapes) if isinstance(x, jax.ShapeDtypeStruct)]
    one = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
    return one * spec_lib.PARAMETER_COPIES


def _check_augmentation(
    spec: AlgorithmSpec, observation_shape: Any, observation_dtype: Any
) -> None:
    """Refuses, before anything is built, an augmentation that cannot take this environment's
    observations (``random_shift`` on vector observations), traced with ``jax.eval_shape`` on
    a batch of their shape instead of failing inside the first update."""
    import jax

    from zoo.augmentation import build_augmentation

    augment = build_augmentation(spec.augmentation)
    if augment is None:
        return
    batch = jax.ShapeDtypeStruct((spec.replay.batch_size, *observation_shape), observation_dtype)
    try:
        jax.eval_shape(augment, jax.random.PRNGKey(0), batch)
    except (ValueError, TypeError) as e:
        raise RunRefusedError(f"augmentation: {e}") from None


def _resolve(
    algorithm: str | os.PathLike[str] | AlgorithmSpec, overrides: Mapping[str, Any] | None
) -> tuple[AlgorithmSpec, str | None, dict[str, Any]]:
    """The algorithm spec, the preset name (if any) and the preset's run settings."""
    if isinstance(algorithm, AlgorithmSpec):
        return spec_lib.load_algorithm(algorithm, overrides=overrides), None, {}
    name = str(algorithm)
    if name in spec_lib.algorithm_names() and name in spec_lib.preset_names():
        _say(
            f"note: {name!r} is a catalogue entry and a preset; training the entry (the preset: "
            f"{spec_lib.PRESET_PREFIX}{name})"
        )
    if spec_lib.is_preset(name):
        preset = spec_lib.load_preset(name)
        merged = spec_lib.apply_overrides(preset.overrides, overrides)
        resolved = spec_lib.load_algorithm(preset.algorithm, overrides=merged)
        defaults: dict[str, Any] = {
            "protocol": preset.env.protocol,
            "num_envs": preset.env.num_envs,
        }
        if preset.env.id:
            defaults["env"] = preset.env.id
        if preset.budget is not None:
            defaults["total_env_steps"] = preset.budget.agent_steps
        return resolved, preset.name, defaults
    return spec_lib.load_algorithm(name, overrides=overrides), None, {}


@dataclass(frozen=True)
class TrainRequest:
    """What :func:`train` was asked, as one value: the algorithm, where the run goes, how the
    process joins others, and the run settings given (by their names in :class:`RunSettings`;
    a setting left out or ``None`` is "not given": filled in from the preset or the table's rules
    for a new run, kept by a resumed run, which refuses another)."""

    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    overrides: Mapping[str, Any] | None = None
    run_dir: str | os.PathLike[str] | None = None
    resume: str | os.PathLike[str] | None = None
    restart: bool = False
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    distributed: bool = False
    progress: bool = True
    on_start: Callable[[Path], None] | None = None
    #: the table of settings (:class:`RunSettings` or a subclass with more of them)
    table: type[RunSettings] = RunSettings

    @property
    def total_env_steps(self) -> int | None:
        """The budget asked for (``None``: not given)."""
        return self.settings.get("total_env_steps")

    @property
    def loop(self) -> str | None:
        """The driver asked for (``None``: not given)."""
        return self.settings.get("loop")

    def given(self) -> dict[str, Any]:
        """Every run setting of the table as asked (``None`` where not given)."""
        return {row.name: self.settings.get(row.name) for row in run_settings.settings(self.table)}

    def check(self) -> None:
        """Refuse values no run can take, before anything is built or written.

        Raises:
          RunRefusedError: naming the flag and the allowed range.
          TypeError: a setting the table does not have.
        """
        run_settings.check_given(self.settings, table=self.table)
        async_only = ("actor_devices", "learner_devices", "max_lag")
        if self.loop not in (None, "async") and any(
            self.settings.get(name) is not None for name in async_only
        ):
            raise RunRefusedError(
                "--actor-devices, --learner-devices and --max-lag place the asynchronous "
                "driver: use them with --loop async"
            )
        if self.restart and self.resume is None:
            raise RunRefusedError(
                "--restart starts a run over in its own directory: use it with --resume RUN_DIR"
            )
        if (
            self.resume is not None
            and self.run_dir is not None
            and Path(self.run_dir).absolute() != Path(self.resume).absolute()
        ):
            raise RunRefusedError(
                "--run-dir and --resume name different directories; a resumed run stays in "
                "its own directory (omit --run-dir)"
            )


def train(
    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None,
    env: str | None = None,
    total_env_steps: int | None = None,
    seed: int | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    restart: bool = False,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    distributed: bool = False,
    progress: bool = True,
    on_start: Callable[[Path], None] | None = None,
    **settings: Any,
) -> RunResult:
    """Train an algorithm or preset; what ``zoo train`` does.

    A run directory has one owner and one history: it is created fresh (an existing directory
    must be empty) or resumed, never both, and never by two processes at once (see
    :mod:`zoo.rundir`). ``None`` means "not given" for every setting; 0 is never a default.

    Args:
      algorithm: catalogue name, preset name, YAML path (``file.yaml[:entry]``) or a spec.
        Omitted with ``resume``.
      env: environment id (default: the preset's, else ``CartPole-v1``).
      total_env_steps: budget in transitions (default: the preset's, else 50,000). With
        ``resume``, extends (or keeps) the run's budget, recorded in its history.
      seed: seeds networks, exploration, replay sampling and environments (default 0).
      overrides: dotted overrides of the algorithm (``{"loss.n_step": 3}``).
      run_dir: where the run is written (default ``runs/<algorithm>-<env>-s<seed>-<time>``); it
        must not exist or be empty.
      resume: a run directory to continue from its newest intact checkpoint. The run keeps the
        spec and settings recorded at its creation: any other algorithm, ``overrides``, ``env``,
        ``protocol``, ``seed`` or setting is refused with what differs.
      restart: with ``resume``: start a run that stopped before its first checkpoint over from
        scratch, with its recorded spec and settings.
      coordinator, num_processes, process_id: train as one of several processes joined by
        ``jax.distributed`` (:mod:`zoo.distributed`; default: one process). Every process is
        started with the same arguments (and a ``run_dir``); process 0 owns the run directory.
        Must be called before JAX has started in this process.
      distributed: join the process group JAX detects from the cluster's environment (SLURM,
        Open MPI, ...), with whichever of the three values above are given.
      progress: show the progress line on a terminal.
      on_start: called with the run directory once it exists (tests use it).
      settings: the other run settings by their names in :class:`RunSettings` (the table of
        :mod:`zoo.runs.settings`, where each field's ``Arg`` gives its meaning, its flag and the
        default of a new run): ``num_envs``, ``protocol``, ``eval_every``, ``eval_episodes``,
        ``eval_max_steps``, ``eval_envs`` (environments an evaluation plays at once, each
        assigned its share of the games before play starts, so the result does not favour
        short games), ``checkpoint_every``, ``log_every``, ``save_replay``,
        ``stop_at_return``, ``loop`` (``"auto"``, ``"host"``, ``"compiled"`` or ``"async"``;
        see :mod:`zoo.drivers`), and, with ``loop="async"``, ``actor_devices``,
        ``learner_devices`` and ``max_lag``.

    Returns:
      A :class:`RunResult`.

    Raises:
      SpecError: the algorithm or overrides are invalid.
      RunRefusedError: the run was refused before anything was written (invalid values, a run
        directory that is not empty or in use, a resume that would change the run, a budget
        below ``replay.min_size``, a network or replay that cannot fit in memory).
      RunError: the run failed (a non-finite loss, a full disk, no intact checkpoint).
      TypeError: a keyword that is no setting.
    """
    request = TrainRequest(
        algorithm=algorithm,
        settings={"env": env, "total_env_steps": total_env_steps, "seed": seed, **settings},
        overrides=overrides,
        run_dir=run_dir,
        resume=resume,
        restart=restart,
        coordinator=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        distributed=distributed,
        progress=progress,
        on_start=on_start,
    )
    request.check()
    with _environment_errors():
        return _train(request)


@contextlib.contextmanager
def _environment_errors() -> Iterator[None]:
    """Unknown or mismatched environments and protocols refuse the run."""
    from zoo import envs

    try:
        yield
    except (
        envs.UnknownEnvironmentError,
        envs.UnsupportedEnvironmentError,
        envs.ProtocolMismatchError,
        envs.UnknownProtocolError,
    ) as e:
        raise RunRefusedError(str(e)) from None


def _say(message: str) -> None:
    """A note for the user (stderr): what the run decided on their behalf."""
    print(f"zoo: {message}", file=sys.stderr, flush=True)


def _join(request: TrainRequest) -> Any:
    """The run's process group (:mod:`zoo.distributed`): joined when asked, else one process."""
    from zoo import distributed

    try:
        # the Python API joins only when asked in its arguments (zoo train reads ZOO_*)
        asked = distributed.requested(
            request.coordinator,
            request.num_processes,
            request.process_id,
            environ={},
            detect=request.distributed,
        )
    except ValueError as e:
        raise RunRefusedError(str(e)) from None
    if not asked.given or asked.num_processes == 1:
        return distributed.ProcessGroup()
    if request.run_dir is None and request.resume is None:
        raise RunRefusedError(
            "a run over several processes needs --run-dir (every process must name the same "
            "directory; process 0 owns it)"
        )
    if request.restart:
        raise RunRefusedError(
            "--restart is for one process; a run over several that stopped before its first "
            "checkpoint is started again in a new --run-dir"
        )
    if request.loop == "compiled":
        raise RunRefusedError(
            "--loop compiled runs the update inside lax.scan, which a learner over several "
            "processes cannot; a run over several processes uses --loop host or async"
        )
    loop = request.loop
    if request.resume is not None and loop is None:
        with contextlib.suppress(RunSettingsError, OSError):
            loop = _read_settings(Path(request.resume)).loop
    _request_devices(loop)  # before JAX starts, as joining must be
    try:
        return distributed.join(asked)
    except ValueError as e:
        raise RunRefusedError(str(e)) from None


def _train(request: TrainRequest) -> RunResult:
    """:func:`train`'s body."""
    group = _join(request)
    if group.several:
        return _train_in_group(request, group)
    return _train_alone(request)


def _train_in_group(request: TrainRequest, group: Any) -> RunResult:
    """:func:`train` as one of several processes (:mod:`zoo.distributed`): process 0 creates or
    checks the run directory as one process would; the others wait for its answer, then read
    the run's spec and settings from the directory and keep their own part of it."""
    from zoo.envs import make

    given = request.given()
    run_path = Path(request.resume if request.resume is not None else request.run_dir)
    mode = "resume" if request.resume is not None else "new"
    lock, failure, finished, previous_total = None, None, None, None
    if group.main:
        try:
            if mode == "resume":
                lock = _lock_run_to_resume(run_path)
                spec, settings, previous_total = _resumable(
                    run_path, request.algorithm, request.overrides, request.total_env_steps, given
                )
                _check_processes(run_path, settings, group.num_processes)
                finished = _already_finished(run_path, settings)
                if finished is None and not _checkpoint_steps(run_path):
                    raise RunRefusedError(
                        f"cannot resume {run_path}: it stopped before its first checkpoint; "
                        "train it again in a new --run-dir"
                    )
            else:
                if request.algorithm is None:
                    raise RunRefusedError("name an algorithm or preset to train")
                spec, settings = _new_settings(request.algorithm, request.overrides, given)
                settings = settings.model_copy(update={"processes": group.num_processes})
                _preflight(spec, settings)
                run_path, lock = _create_run_dir(run_path, spec, settings)
        except (RunError, SpecError) as e:
            failure = e
    # 0: train; 1: process 0 refused or failed (its error says why); 2: nothing left to train
    answer = int(group.broadcast(1 if failure is not None else 2 if finished else 0))
    if failure is not None:
        if lock is not None:
            lock.release()
        raise failure
    if answer == 1:
        raise RunRefusedError(f"process 0 did not start the run in {run_path}; its output says why")
    if answer == 2:
        if lock is not None:
            lock.release()
        return (
            finished
            if finished is not None
            else _already_finished(run_path, _read_settings(run_path))
        )
    if not group.main:
        settings = _read_settings(run_path)
        if request.total_env_steps is not None:
            settings = settings.model_copy(update={"total_env_steps": request.total_env_steps})
        created = rundir.creation_record(rundir.read_history(run_path))
        spec = _recorded_spec(run_path, created, "resume")
        _check_processes(run_path, settings, group.num_processes)
        own = group.own_dir(run_path)
        _make_dir(own)
        lock = rundir.RunLock(own).acquire()
    try:
        if group.main and request.on_start is not None:
            request.on_start(run_path)
        env_obj = make(
            settings.env,
            protocol=settings.protocol,
            num_envs=settings.num_envs,
            seed=group.seed(settings.seed),
            training=True,
        )
        try:
            result = _run(
                spec,
                settings,
                env_obj,
                run_path,
                mode,
                request.progress and group.main,
                previous_total,
                group=group,
            )
        finally:
            env_obj.close()
        if group.main:
            rundir.append_history(
                run_path,
                "stopped",
                status="interrupted" if result.interrupted else "finished",
                env_steps=result.env_steps,
                processes=group.num_processes,
            )
        return result
    except RunRefusedError:
        if group.main and not group.several:
            _forget_refused(run_path, mode)
        raise
    except RunError as e:
        if group.main:
            with contextlib.suppress(OSError):
                rundir.append_history(run_path, "stopped", status="failed", reason=str(e))
        raise
    finally:
        lock.release()


def _forget_refused(run_path: Path, mode: str) -> None:
    """A new run refused before it trained (the update's working memory is known only once it
    is compiled, after the directory is written) leaves no run behind."""
    if mode == "new":
        with contextlib.suppress(OSError):
            rundir.undo_creation(run_path)


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


def _train_alone(request: TrainRequest) -> RunResult:
    """:func:`train` in one process."""
    from zoo.envs import make

    given = request.given()
    algorithm, overrides, total_env_steps = (
        request.algorithm,
        request.overrides,
        request.total_env_steps,
    )
    if request.resume is not None:
        run_path = Path(request.resume)
        lock = _lock_run_to_resume(run_path)
        try:
            spec, settings, previous_total = _resumable(
                run_path, algorithm, overrides, total_env_steps, given
            )
            _check_processes(run_path, settings, 1)
            _request_devices(settings.loop)
            mode = "resume"
            if request.restart:
                _restart(run_path, settings)
                mode = "restart"
            elif (done := _already_finished(run_path, settings)) is not None:
                lock.release()
                return done
            elif not _checkpoint_steps(run_path):
                last = _last_record_step(run_path)
                records = f" (records up to env step {last:,})" if last is not None else ""
                raise RunRefusedError(
                    f"cannot resume {run_path}: it stopped before its first checkpoint"
                    f"{records}; start it over from scratch, with its own spec and settings, "
                    f"with: zoo train --resume {run_path} --restart"
                )
            else:
                _note_early_stop(run_path, settings)
        except BaseException:
            lock.release()
            raise
    else:
        if algorithm is None:
            raise RunRefusedError(
                "name an algorithm or preset to train, or a run directory to resume"
            )
        _request_devices(request.loop)
        spec, settings = _new_settings(algorithm, overrides, given)
        _preflight(spec, settings)
        run_path, lock = _create_run_dir(request.run_dir, spec, settings)
        mode, previous_total = "new", None

    try:
        if mode != "resume":
            _note_capacity(spec, settings)
            _note_exploration(spec, settings)
            _note_minibatch(spec, settings)
        if request.on_start is not None:
            request.on_start(run_path)
        env_obj = make(
            settings.env,
            protocol=settings.protocol,
            num_envs=settings.num_envs,
            seed=settings.seed,
            training=True,
        )
        try:
            result = _run(spec, settings, env_obj, run_path, mode, request.progress, previous_total)
        finally:
            env_obj.close()
        rundir.append_history(
            run_path,
            "stopped",
            status="interrupted" if result.interrupted else "finished",
            env_steps=result.env_steps,
        )
        return result
    except RunRefusedError:
        _forget_refused(run_path, mode)
        raise
    except RunError as e:
        with contextlib.suppress(OSError):
            rundir.append_history(run_path, "stopped", status="failed", reason=str(e))
        raise
    finally:
        lock.release()


def _already_finished(run_path: Path, settings: RunSettings) -> RunResult | None:
    """A run whose newest checkpoint has reached its budget, as it stands (nothing is built or
    written), saying so; ``None`` when there is something left to train."""
    from zoo.metrics import read_jsonl

    steps = _checkpoint_steps(run_path)
    if not steps or steps[-1] < settings.total_env_steps:
        return None
    step = steps[-1]
    records = [
        r for r in read_jsonl(RunDir(run_path).metrics_file) if r.get("env_steps", 0) <= step
    ]
    _say(
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
        _say(
            f"{run_path} stopped at env step {at:,} when an evaluation reached its "
            f"--stop-at-return {target:g}; resuming toward its budget of "
            f"{settings.total_env_steps:,} env steps (it stops again at the next evaluation "
            "that reaches the target)"
        )


def _new_settings(
    algorithm: Any, overrides: Mapping[str, Any] | None, given: Mapping[str, Any]
) -> tuple[AlgorithmSpec, RunSettings]:
    """The spec and settings of a new run (the table's rules fill in what was not given; every
    value checked)."""
    from zoo.envs import get_protocol, resolve_env

    spec, preset_name, defaults = _resolve(algorithm, overrides)
    values = run_settings.new_run(
        given, defaults, lambda env: _default_protocol(resolve_env(env).env_id)
    )
    values["env"] = resolve_env(values["env"]).env_id  # unknown ids fail before anything is written
    values["protocol"] = get_protocol(values["protocol"]).name
    who = str(algorithm if not isinstance(algorithm, AlgorithmSpec) else spec.name)
    try:
        settings = RunSettings(algorithm=who, preset=preset_name, **values)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"]))
        raise RunRefusedError(f"{where}: {first['msg']} (got {first.get('input')!r})") from None
    _check_budget(spec, settings)
    return spec, settings


def _check_budget(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """A budget that never reaches ``replay.min_size`` (or, without a replay, one whole
    rollout) would train nothing: refuse it."""
    if spec.rollout is not None:
        first = spec.rollout.length * settings.num_envs
        if settings.total_env_steps < first:
            raise RunRefusedError(
                f"one rollout is rollout.length × num_envs = {spec.rollout.length} × "
                f"{settings.num_envs} = {first:,} transitions, more than the budget of "
                f"{settings.total_env_steps:,}: learning would never start (0 updates); raise "
                f"--steps to at least {first:,} or shorten rollout.length"
            )
        return
    min_size = spec.replay.min_size
    if settings.total_env_steps <= min_size:
        # learning starts once min_size transitions are in: a budget of min_size trains nothing
        relation = "more than" if min_size > settings.total_env_steps else "equal to"
        raise RunRefusedError(
            f"replay.min_size={min_size:,} is {relation} the budget of "
            f"{settings.total_env_steps:,} transitions: learning would never start (0 updates); "
            f"lower it (e.g. --set replay.min_size={max(settings.total_env_steps // 10, 1)}) or "
            f"raise --steps above {min_size:,}"
        )


def _note_exploration(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Say when ε is still decaying at the end of the budget: a catalogue entry (Atari settings,
    ε over 1M transitions) trained on a short CartPole budget acts almost at random throughout."""
    epsilon = spec.schedule.epsilon
    total = settings.total_env_steps
    if (
        spec.network.noisy
        or not isinstance(epsilon, spec_lib.LinearSchedule)
        or epsilon.begin + epsilon.steps <= total
        or epsilon.start <= epsilon.end
    ):
        return
    progress = min(max((total - epsilon.begin) / epsilon.steps, 0.0), 1.0)
    last = epsilon.start + progress * (epsilon.end - epsilon.start)
    _say(
        f"note: schedule.epsilon decays over {epsilon.begin + epsilon.steps:,} transitions, "
        f"past the budget of {total:,}: ε is still {last:.2f} at its end, so the agent acts "
        f"mostly at random (catalogue entries carry Atari settings; the *_cartpole presets "
        f"carry CartPole's); --set schedule.epsilon.steps={max(total // 10, 1)} would decay it "
        "over the first tenth"
    )


#: Transitions per minibatch below which a rollout learner is told it has too few environments:
#: the batch of the replay-based catalogue entries (purejaxql's PQN presets learn from 128).
SMALL_MINIBATCH = 32


def _note_minibatch(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Say when a rollout learner (PQN) gets so few environments that its minibatches hold
    fewer than :data:`SMALL_MINIBATCH` transitions: the catalogue's ``pqn`` on one environment
    learns from minibatches of a single transition."""
    rollout = spec.rollout
    if rollout is None:
        return
    size = rollout.length * settings.num_envs // rollout.minibatches
    if size >= SMALL_MINIBATCH:
        return
    wanted = -(-SMALL_MINIBATCH * rollout.minibatches // rollout.length)
    _say(
        f"note: with {settings.num_envs} environment{'s' * (settings.num_envs != 1)} each of "
        f"the {rollout.minibatches} minibatches of a rollout holds {size} "
        f"transition{'s' * (size != 1)} (rollout.length × num_envs / rollout.minibatches = "
        f"{rollout.length} × {settings.num_envs} / {rollout.minibatches}); PQN learns from many "
        f"environments at once (purejaxql: 128, minibatches of 128): --num-envs {wanted} or more "
        "gives minibatches of at least 32"
    )


def _note_capacity(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Say when the replay is larger than the budget can fill (it is allocated in full; a
    rollout learner allocates no replay)."""
    if spec.rollout is None and spec.replay.capacity > settings.total_env_steps:
        _say(
            f"note: replay.capacity={spec.replay.capacity:,} is more than the budget of "
            f"{settings.total_env_steps:,} transitions, and is allocated in full; "
            f"--set replay.capacity={settings.total_env_steps} would save the memory"
        )


def _default_run_dir(spec: AlgorithmSpec, settings: RunSettings) -> Path:
    """``runs/<preset or algorithm>-<env>-s<seed>-<time>``: a preset's run is named after the
    preset (``dqn_adam_mse``), not its catalogue algorithm (``dqn``), so runs of both differ."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = rundir.safe_component(settings.preset or spec.name or "custom", fallback="custom")
    env = rundir.safe_component(settings.env, fallback="env")
    return Path("runs") / f"{name}-{env}-s{settings.seed}-{stamp}"


def _checkpoint_steps(run_path: Path) -> list[int]:
    """Steps of the complete checkpoints on disk, read without Orbax."""
    return rundir.complete_steps(RunDir(run_path).checkpoints)


def _describe_run(run_path: Path) -> str:
    try:
        settings = RunDir(run_path).settings()
    except RunSettingsError:
        return "a zoo run"
    return f"{settings.algorithm} on {settings.env}, seed {settings.seed}"


def _last_record_step(run_path: Path) -> int | None:
    from zoo.metrics import read_jsonl

    records = read_jsonl(RunDir(run_path).metrics_file)
    return int(records[-1]["env_steps"]) if records else None


def _refuse_existing_run(run_path: Path) -> None:
    """A new run may not go into a directory holding a run: say how to continue that one."""
    with rundir.RunLock(run_path):  # refused (naming the owner) if it is running
        pass
    what = _describe_run(run_path)
    steps = _checkpoint_steps(run_path)
    if steps:
        raise RunRefusedError(
            f"{run_path} already holds a run ({what}) with checkpoints up to env step "
            f"{steps[-1]:,}; continue it with: zoo train --resume {run_path} (or choose another "
            "--run-dir)"
        )
    last = _last_record_step(run_path)
    records = f" (records up to env step {last:,})" if last is not None else ""
    raise RunRefusedError(
        f"{run_path} holds a run ({what}) that stopped before its first checkpoint{records}; "
        f"start that run over with: zoo train --resume {run_path} --restart (or choose another "
        "--run-dir)"
    )


def _create_run_dir(
    run_dir: Any, spec: AlgorithmSpec, settings: RunSettings
) -> tuple[Path, rundir.RunLock]:
    """Create and lock a fresh run directory and write its spec, settings, provenance and
    history; an existing directory must be empty (or an interrupted creation)."""
    if run_dir is None:
        base = _default_run_dir(spec, settings)
        path, n = base, 1
        while True:
            try:
                path.mkdir(parents=True, exist_ok=False)
                break
            except FileExistsError:
                n += 1
                path = base.with_name(f"{base.name}-{n}")
            except OSError as e:
                raise RunError(f"cannot write the run directory {path}: {e.strerror}") from None
    else:
        path = Path(run_dir)
        state = rundir.classify(path)
        if state == "not_a_directory":
            raise RunRefusedError(f"cannot use {path} as a run directory: it is a file")
        if state == "dangling_link":
            raise RunRefusedError(
                f"cannot use {path} as a run directory: it is a symbolic link to "
                f"{os.readlink(path)}, which does not exist; create that directory or choose "
                "another --run-dir"
            )
        if state == "foreign":
            raise RunRefusedError(
                f"{path} is not empty and is not a zoo run directory (it holds "
                f"{rundir.foreign_example(path)!r}, ...); a run is written only into a new or "
                "empty directory: choose another --run-dir"
            )
        if state == "run":
            _refuse_existing_run(path)
        _make_dir(path)
    lock = rundir.RunLock(path).acquire()
    try:
        state = rundir.classify(path)  # again, under the lock: another process may have won
        if state == "run":
            _refuse_existing_run(path)
        if state == "foreign":
            raise RunRefusedError(f"{path} was filled by someone else meanwhile; not touched")
        if state == "interrupted_creation":
            rundir.clear_creation(path)
        _write_new_run(path, spec, settings)
    except BaseException:
        lock.release()
        raise
    return path, lock


def _make_dir(path: Path) -> None:
    """Create ``path`` (and its parents), or :class:`RunError` saying why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot write the run directory {path}: {e.strerror or e}") from None


def _write_settings(run: RunDir, settings: RunSettings) -> None:
    """``run.yaml``."""
    write_atomic(
        run.settings_file, yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False)
    )


def _write_provenance(run: RunDir, settings: RunSettings) -> None:
    """``provenance.json``: versions, commit, machine and the protocol's settings."""
    from zoo.envs import get_protocol

    write_atomic(
        run.provenance_file,
        json.dumps(_provenance(settings, get_protocol(settings.protocol)), indent=2),
    )


def _write_new_run(path: Path, spec: AlgorithmSpec, settings: RunSettings) -> None:
    """spec.yaml, provenance.json and the creation record, then run.yaml (which makes the
    directory a run)."""
    spec_text = _spec_yaml(spec)
    try:
        run = RunDir(path)
        write_atomic(run.spec_file, spec_text)
        _write_provenance(run, settings)
        rundir.append_history(
            path,
            "created",
            **rundir.creation_fields(spec_text, _spec_dump(spec), settings.model_dump(mode="json")),
        )
        _write_settings(run, settings)
    except OSError as e:
        raise RunError(f"cannot write the run directory {path}: {e.strerror or e}") from None


def _spec_dump(spec: AlgorithmSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", serialize_as_any=True)


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


def _read_settings(run_path: Path) -> RunSettings:
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
    settings = _read_settings(run_path)
    created = rundir.creation_record(rundir.read_history(run_path))
    spec = _recorded_spec(run_path, created, "resume")
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
    on_disk = _checkpoint_steps(run_path)
    if total_env_steps is not None and on_disk and total_env_steps < on_disk[-1]:
        raise RunRefusedError(
            f"cannot resume {run_path} with --steps {total_env_steps:,}: the run has already "
            f"reached env step {on_disk[-1]:,}; give a larger budget"
        )
    if total_env_steps is not None and total_env_steps != settings.total_env_steps:
        previous = settings.total_env_steps
        settings = settings.model_copy(update={"total_env_steps": int(total_env_steps)})
    _check_budget(spec, settings)
    return spec, settings, previous


def _recorded_spec(run_path: Path, created: Mapping[str, Any] | None, action: str) -> AlgorithmSpec:
    """The run's spec from its spec.yaml, refused if it was edited since the run was created."""
    spec_path = RunDir(run_path).spec_file
    try:
        spec_text = read_text(spec_path, what="spec file")
    except OSError as e:
        raise RunRefusedError(f"cannot {action} {run_path}: cannot read spec.yaml ({e})") from None
    if created is not None and rundir.sha256_text(spec_text) != created.get("spec_sha256"):
        try:
            current = _spec_dump(spec_lib.load_algorithm(spec_path))
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
    from zoo.envs import resolve_env

    keep = (
        f"a resumed run keeps the spec and settings it was created with (only --steps may "
        f"extend its budget): resume with just `zoo train --resume {run_path}`, or start a new "
        "run"
    )
    if algorithm is not None:
        same = (
            _spec_dump(algorithm) == _spec_dump(spec)
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
        asked = _spec_dump(spec_lib.load_algorithm(spec, overrides=overrides))
        lines = rundir.describe_differences(
            _spec_dump(spec), asked, labels=("in the run", "asked by --set")
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
    import shutil

    steps = _checkpoint_steps(run_path)
    if steps:
        raise RunRefusedError(
            f"cannot restart {run_path}: it has checkpoints (up to env step {steps[-1]:,}) and "
            f"--restart only starts over a run that has none; continue it with: zoo train "
            f"--resume {run_path} (or train a new run elsewhere)"
        )
    last = _last_record_step(run_path)
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
    _write_settings(run, settings)
    _write_provenance(run, settings)
    _say(f"restarting {run_path} from scratch (it had no checkpoint)")


def _default_protocol(env_id: str) -> str:
    from zoo.envs import default_protocol

    return default_protocol(env_id)


def _preflight(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Check that a new run can be built before its directory is written: the replay's layout,
    and the memory its replay and learner state need (from shapes: nothing is allocated)."""
    network_bytes, replay_bytes = _memory_needs(spec, settings, check=True)
    _check_memory(replay_bytes, network_bytes, spec)


def _memory_needs(
    spec: AlgorithmSpec, settings: RunSettings, check: bool = False
) -> tuple[int, int]:
    """The bytes of the learner state's parameters and of the replay of a run, counted from
    shapes (nothing is allocated); with ``check``, the network alone is checked against the
    memory available before the replay is laid out."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from zoo.envs import make
    from zoo.networks import build_network
    from zoo.replay import build_replay

    with make(
        settings.env, protocol=settings.protocol, num_envs=1, seed=settings.seed, training=True
    ) as probe:
        shape, dtype = probe.observation_shape, probe.observation_dtype
        stack, num_actions = probe.stack, probe.num_actions
    network_bytes = _network_bytes(spec, shape, num_actions)
    _check_augmentation(spec, shape, dtype)
    if check:
        _check_memory(0, network_bytes, spec)
    core = None
    if spec.recurrent:
        shapes = eqx.filter_eval_shape(
            lambda: build_network(
                spec,
                observation_shape=shape,
                num_actions=num_actions,
                key=jax.random.PRNGKey(0),
            ).initial_state()
        )
        core = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
    try:
        replay = build_replay(
            spec,
            num_envs=settings.num_envs,
            observation_shape=shape,
            observation_dtype=dtype,
            stack=stack,
            core_state=core,
        )
    except ValueError as e:  # a layout the replay cannot hold (capacity per env too small)
        raise RunRefusedError(str(e)) from None
    return network_bytes, replay.nbytes()


def plan_memory(
    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None,
    env: str | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    total_env_steps: int | None = None,
    protocol: str | None = None,
    num_envs: int | None = None,
    resume: str | os.PathLike[str] | None = None,
) -> MemoryPlan:
    """The planned peak memory of a run, known before it starts (see :mod:`zoo.memory`).

    Either the run :func:`train` would create with these arguments, or (``resume``) the run
    recorded in that directory, with its own spec and settings. Nothing is built, allocated or
    written: the replay and parameters are counted from shapes (one environment is opened to
    read its observation).

    Args:
      algorithm, env, overrides, total_env_steps, protocol, num_envs: as :func:`train` takes them.
      resume: a run directory: plan the run recorded there instead.

    Returns:
      A :class:`zoo.memory.MemoryPlan` whose ``peak`` counts the replay, the parameters (online,
      target, optimizer moments) and :data:`zoo.memory.RUN_OVERHEAD`.

    Raises:
      SpecError, RunRefusedError: as :func:`train` refuses the same run.
    """
    with _environment_errors():
        if resume is not None:
            run_path = Path(resume)
            settings = _read_settings(run_path)
            created = rundir.creation_record(rundir.read_history(run_path))
            spec = _recorded_spec(run_path, created, "plan")
        else:
            if algorithm is None:
                raise RunRefusedError("name an algorithm or preset to plan, or a run directory")
            given = {
                "env": env,
                "protocol": protocol,
                "num_envs": num_envs,
                "total_env_steps": total_env_steps,
            }
            run_settings.check_given(given)
            spec, settings = _new_settings(algorithm, overrides, given)
        network_bytes, replay_bytes = _memory_needs(spec, settings)
    return MemoryPlan(replay_bytes, spec.replay.capacity, network_bytes=network_bytes)


def _build(spec: AlgorithmSpec, settings: RunSettings, env_obj: Any, group: Any = None):
    import jax

    from zoo.networks import build_network

    several = group is not None and group.several
    if several:
        # each process keeps its shard of the replay: capacity / P transitions
        shard = spec.replay.model_copy(
            update={"capacity": spec.replay.capacity // group.num_processes}
        )
        spec = spec.model_copy(update={"replay": shard})

    # counted from shapes before anything is allocated: a network or replay that cannot fit is
    # refused with the fix instead of failing inside JAX after filling the memory
    network_bytes = _network_bytes(spec, env_obj.observation_shape, env_obj.num_actions)
    _check_augmentation(spec, env_obj.observation_shape, env_obj.observation_dtype)
    _check_memory(0, network_bytes, spec)
    key = jax.random.PRNGKey(settings.seed)
    k_net, k_learner, k_run = jax.random.split(key, 3)
    network = build_network(
        spec,
        observation_shape=env_obj.observation_shape,
        num_actions=env_obj.num_actions,
        key=k_net,
    )
    core = network.initial_state() if spec.recurrent else None
    try:
        replay = replay_for_env(spec, env_obj, core_state=core)
    except ValueError as e:  # a layout the replay cannot hold (capacity per env too small)
        raise RunRefusedError(str(e)) from None
    _check_memory(replay.nbytes(), network_bytes, spec)
    learner = _learner(spec, settings, group)
    if several:
        # the processes' actors and samplers draw apart; the networks start identical
        k_run = jax.random.fold_in(k_run, group.process_id)
    return network_bytes, learner, replay, learner.init(network, k_learner), k_run, core


def _learner(spec: AlgorithmSpec, settings: RunSettings, group: Any) -> Any:
    """The run's learner, said in one line where it is not a plain one-device update: over the
    asynchronous driver's learner devices (on every process of a group), over every process's
    devices, or over this host's local devices."""
    import jax

    from zoo.learner import DataParallelLearner, Learner, learner_for_devices

    several = group is not None and group.several
    where = f"process {group.process_id} of {group.num_processes}: " if several else ""
    if settings.loop == "async":
        placement = _placement(settings)
        devices = _across_processes(placement.learner) if several else list(placement.learner)
        learner = DataParallelLearner(spec, devices=devices) if len(devices) > 1 else Learner(spec)
        shared = " (one device: acting and learning share it and do not overlap)"
        _say(
            f"asynchronous driver: {where}{placement.describe()}"
            + (shared if placement.shared else "")
            + (
                f"; the update runs data-parallel over {len(devices)} devices of "
                f"{group.num_processes} processes"
                if several
                else ""
            )
        )
        return learner
    if several:
        # every process's devices: gradients averaged over all of them
        learner = DataParallelLearner(spec, devices=jax.devices())
        _say(
            f"{where}the update runs data-parallel over {len(learner.devices)} devices of "
            f"{group.num_processes} processes (zoo.distributed)"
        )
        return learner
    learner = learner_for_devices(spec)
    if isinstance(learner, DataParallelLearner):
        _say(
            f"the update runs data-parallel over {learner.num_devices} local devices "
            "(zoo.learner.DataParallelLearner); the environments step on the host"
        )
    return learner


def replay_for_env(spec: AlgorithmSpec, env: Any, core_state: Any = None) -> Any:
    """The replay a run of ``spec`` on the :class:`~zoo.envs.VectorEnv` ``env`` uses.

    Frame stacking follows the environment's protocol (``env.stack``), never the observation's
    rank: an Atari protocol with ``stack: 4`` stores one 84×84 frame per step and rebuilds the
    stack at sample time, while a MinAtar observation ``[C, 10, 10]`` is ``C`` feature channels
    of *one* step (Young & Tian 2019, https://arxiv.org/abs/1903.03176) and is stored whole.
    Treating those channels as a stack of frames fed the learner the last channel of ``C``
    consecutive steps (for Breakout: the bricks four times, no paddle or ball), so MinAtar did
    not learn.

    Args:
      spec: the algorithm.
      env: the training environments (``num_envs``, observation shape and dtype, ``stack``).
      core_state: one env's initial recurrent state (recurrent specs with stored state).
    """
    from zoo.replay import build_replay

    return build_replay(
        spec,
        num_envs=env.num_envs,
        observation_shape=env.observation_shape,
        observation_dtype=env.observation_dtype,
        stack=env.stack,
        core_state=core_state,
        repeat_first_frame=env.game_start_stack == "repeat",
    )


def _seed31(value: int) -> int:
    """A derived seed folded into 31 bits (envpool's and ``PRNGKey``'s range)."""
    return value % 2**31


def _run(
    spec: AlgorithmSpec,
    settings: RunSettings,
    env_obj: Any,
    run_path: Path,
    mode: str,
    show_progress: bool,
    previous_total: int | None = None,
    group: Any = None,
) -> RunResult:
    """Build, restore (``mode == "resume"``) and train; ``previous_total`` is the budget before
    a resume changed it. Over several processes (``group``) each keeps its checkpoints and
    training records in its own directory (:meth:`zoo.distributed.ProcessGroup.own_dir`)."""
    from zoo.checkpoint import Checkpointer, CheckpointError
    from zoo.distributed import ProcessGroup
    from zoo.loop import NonFiniteLossError, Trainer
    from zoo.metrics import MetricsLogger, read_jsonl

    group = group or ProcessGroup()
    own = group.own_dir(run_path)
    loop_path = (
        ("async" if settings.loop == "async" else "host")
        if group.several
        else _loop_path(settings.loop, env_obj)
    )
    try:
        checkpointer = Checkpointer(RunDir(own).checkpoints)
    except CheckpointError as e:
        raise RunError(str(e)) from None
    try:
        loop, carry, games, resume_from = _start(
            spec, settings, env_obj, run_path, mode, checkpointer, previous_total, group, loop_path
        )
        logger = MetricsLogger(own, resume_from=resume_from)
        evaluate_now = _evaluator(spec, settings, env_obj, logger, show_progress)
        trainer = Trainer(
            loop,
            settings,
            loop_path,
            logger,
            checkpointer,
            evaluate_now,
            games=games,
            progress=show_progress,
            group=group,
        )
        try:
            carry = trainer.run(carry)
        except NonFiniteLossError as e:
            raise RunError(_non_finite_message(str(e), checkpointer)) from None
        except CheckpointError as e:
            raise RunError(str(e)) from None
        except OSError as e:
            import errno

            what = "no space left on the device" if e.errno == errno.ENOSPC else str(e)
            raise RunError(f"writing to {run_path} failed: {what}") from None
        finally:
            logger.close()
    finally:
        checkpointer.close()
    # the counters of the state the run ended in: the last checkpoint's (an interrupted run's
    # metrics records may stop before it)
    return RunResult(
        run_dir=run_path,
        env_steps=int(carry.env_steps),
        updates=int(carry.learner.updates),
        evaluations=read_jsonl(RunDir(run_path).evals_file),
        interrupted=trainer.stopped_by_signal,
    )


def _non_finite_message(message: str, checkpointer: Any) -> str:
    """The non-finite-loss stop, saying truly what is left to resume from."""
    last = checkpointer.latest_step()
    claim = "the run stopped and kept its last good checkpoint"
    if last is None:
        truth = "the run stopped before its first checkpoint, so there is nothing to resume"
    else:
        truth = f"the run stopped; its last good checkpoint is at env step {last:,}"
    message = message.replace(claim, truth) if claim in message else f"{message}; {truth}"
    return message + " (a lower optimizer.learning_rate often helps)"


def _start(
    spec: AlgorithmSpec,
    settings: RunSettings,
    env_obj: Any,
    run_path: Path,
    mode: str,
    checkpointer: Any,
    previous_total: int | None,
    group: Any,
    loop_path: str,
) -> tuple[Any, Any, int, int | None]:
    """The loop and its first carry: fresh, or restored from the newest intact checkpoint
    (damaged newer ones are reported, set aside and recorded). Over several processes, every
    process restores the newest step that all of them completed. Returns ``(loop, carry,
    games, resume_from)``."""
    import equinox as eqx

    from zoo.checkpoint import CheckpointCorruptError, CheckpointError
    from zoo.loop import Loop

    network_bytes, learner, replay, learner_state, run_key, core = _build(
        spec, settings, env_obj, group
    )
    placement = _placement(settings) if settings.loop == "async" else None
    loop = Loop(spec, env_obj, learner, replay, core, placement=placement, max_lag=settings.max_lag)
    if (
        loop_path == "host"
        and spec.rollout is None
        and learner.traceable
        and learner.num_devices == 1
    ):
        # the update compiled now (its first call reuses the compilation), before the replay
        # is allocated: its working memory counts in the plan (btr's batch-256 update: ~3 GiB)
        workspace = loop.host.compile_update(learner_state, run_key)
        _check_memory(replay.nbytes(), network_bytes, spec, workspace)
    carry = loop.init(learner_state, run_key)
    if mode != "resume":
        return loop, carry, 0, None
    template = loop.checkpoint_state(carry, 0, settings.save_replay)
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
        _say(f"checkpoint {bad} of {run_path} is damaged ({reason}); resuming from {step}")
    if skipped:
        _set_aside(run_path, [bad for bad, _ in skipped], checkpointer)
    counters = restored["counters"]
    # open episodes restart: seal the replay so that no window crosses the boundary (an
    # opted-out replay starts empty)
    replay_state = replay.seal(restored["replay"]) if "replay" in restored else carry.replay
    carry = eqx.tree_at(
        lambda c: (c.replay, c.key, c.env_steps, c.credit),
        carry,
        (replay_state, restored["key"], counters["env_steps"], counters["credit"]),
    )
    carry = loop.with_learner(carry, learner.replicate(restored["learner"]))
    if group.main:
        _record_resume(run_path, spec, settings, int(step), previous_total, skipped)
    return loop, carry, int(counters["games"]), int(meta["env_steps"])


def _common_step(run_path: Path, group: Any) -> int:
    """The newest checkpoint step that every process of ``group`` completed (process 0 reads
    their folders and tells the others): the processes are in lockstep, so a kill leaves them
    at most one checkpoint apart, and each keeps two."""
    from zoo.checkpoint import CheckpointError

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
            **rundir.creation_fields(spec_text, _spec_dump(spec), recorded),
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


def _evaluator(
    spec: AlgorithmSpec,
    settings: RunSettings,
    env_obj: Any,
    logger: Any,
    show_progress: bool = False,
) -> Callable[[Any, int], dict[str, Any]]:
    """The trainer's evaluation: play under the protocol, log the record, return it. With
    ``show_progress``, a long evaluation shows its progress and every evaluation ends with a
    line of its result (:class:`zoo.metrics.EvaluationProgress`)."""
    from zoo.envs import evaluate
    from zoo.metrics import EvaluationProgress

    policy_fn = make_policy_fn(spec, env_obj.num_actions)

    def evaluate_now(online: Any, env_steps: int) -> dict[str, Any]:
        import jax

        policy = policy_fn(online, jax.random.PRNGKey(_seed31(settings.seed + 10_000 + env_steps)))
        shown = EvaluationProgress(f"evaluation at env step {env_steps:,}", mode=None)
        with _interrupt_noted(shown if show_progress else None):
            result = evaluate(
                policy,
                settings.env,
                settings.protocol,
                episodes=settings.eval_episodes,
                seed=_seed31(settings.seed + 1 + env_steps),
                max_steps=settings.eval_max_steps,
                num_envs=settings.eval_envs,
                epsilon=spec.schedule.eval_epsilon,
                progress=shown if show_progress else None,
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
    import signal
    import threading

    from zoo.stops import STOP_SIGNALS, signal_name

    if shown is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}

    def on_interrupt(signum: int, frame: Any) -> None:
        _say(
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


#: Virtual CPU devices an asynchronous run asks for on a CPU host: one to act, one to learn.
ASYNC_CPU_DEVICES = 2


def _request_devices(loop: str | None) -> None:
    """An asynchronous run on a CPU host gets an actor device and a learner device (before
    JAX starts; see :func:`zoo.drivers.asynchronous.request_cpu_devices`)."""
    if loop == "async":
        from zoo.drivers.asynchronous import request_cpu_devices

        request_cpu_devices(ASYNC_CPU_DEVICES)


def _across_processes(local: tuple[Any, ...]) -> list[Any]:
    """The devices at the indices of ``local`` in ``jax.local_devices()``, on every process
    (each process places its learner alike): the mesh of a learner over processes."""
    import jax

    indices = [jax.local_devices().index(d) for d in local]
    by_process: dict[int, list[Any]] = {}
    for device in sorted(jax.devices(), key=lambda d: d.id):
        by_process.setdefault(device.process_index, []).append(device)
    return [by_process[p][i] for p in sorted(by_process) for i in indices]


def _placement(settings: RunSettings) -> Any:
    """The asynchronous driver's placement from the run's settings (refused when invalid)."""
    from zoo.drivers import Placement

    try:
        placement = Placement.choose(settings.actor_devices, settings.learner_devices)
    except ValueError as e:
        raise RunRefusedError(str(e)) from None
    return placement


def _loop_path(requested: str, env_obj: Any) -> str:
    """The loop path to run: ``auto`` picks the compiled path where the env supports it."""
    import jax

    # envpool's XLA step is a side-effecting custom call that XLA's SPMD partitioner cannot
    # place: with several devices (a data-parallel update) the environments run on the host.
    several = len(jax.local_devices()) > 1
    if requested == "async":
        return requested
    if requested == "auto":
        # Measured on this CPU: compiled is ~10x the host path's rate for MLP networks
        # (CartPole), but XLA:CPU runs convolutions inside scan/cond an order of magnitude
        # slower, so image networks learn faster on the host path.
        return "compiled" if env_obj.has_xla and not several and not env_obj.is_image else "host"
    if requested == "compiled" and (several or not env_obj.has_xla):
        why = (
            f"{len(jax.local_devices())} devices (the update is data-parallel)"
            if several
            else f"{env_obj.env_id} has no envpool XLA interface ({env_obj.backend} backend)"
        )
        raise RunRefusedError(f"--loop compiled is unavailable here: {why}; use --loop host")
    return requested


def make_policy_fn(spec: AlgorithmSpec, num_actions: int) -> Callable[[Any, Any], Callable]:
    """``policy_fn(online, key) -> policy(observations [N, ...]) -> actions [N]`` (greedy).

    Recurrent policies keep their core state between calls and reset it where a game starts
    (``policy(observations, first=mask)``); ε-greedy is applied by the evaluator.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    from zoo.loop import make_act

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
        box = {"state": None, "key": key}

        def policy(observations: Any, first: Any = None) -> np.ndarray:
            obs = jnp.asarray(observations)
            if first is None:
                first = np.zeros(obs.shape[0], bool)
            box["key"], k = jax.random.split(box["key"])
            actions, box["state"] = greedy(online, obs, box["state"], jnp.asarray(first), k)
            return np.asarray(actions)

        return policy

    return policy_fn


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
    import jax

    from zoo.checkpoint import Checkpointer
    from zoo.envs import make
    from zoo.learner import Learner
    from zoo.networks import build_network

    run_path = Path(run_dir)
    if rundir.classify(run_path) != "run":
        raise RunRefusedError(f"{run_path} is not a zoo run directory (no run.yaml)")
    settings = _read_settings(run_path)
    created = rundir.creation_record(rundir.read_history(run_path))
    spec = _recorded_spec(run_path, created, "load")
    if not _checkpoint_steps(run_path):
        raise RunRefusedError(f"{run_path} has no checkpoint yet (nothing to load)")
    with make(settings.env, protocol=settings.protocol, num_envs=1, seed=0, training=False) as env:
        shape, num_actions = env.observation_shape, env.num_actions
    network = build_network(
        spec, observation_shape=shape, num_actions=num_actions, key=jax.random.PRNGKey(0)
    )
    learner_state = Learner(spec).init(network, jax.random.PRNGKey(0))
    checkpointer = Checkpointer(RunDir(run_path).checkpoints)
    try:
        restored, meta = _restore_learner(checkpointer, learner_state, step, run_path)
    finally:
        checkpointer.close()
    return make_policy_fn(spec, num_actions)(restored.online, jax.random.PRNGKey(0)), dict(meta)


def _restore_learner(checkpointer: Any, learner_state: Any, step: int | None, run_path: Path):
    """Restore only the learner part of a checkpoint (the replay is not needed to act): the
    given step, or the newest intact one."""
    from zoo.checkpoint import CheckpointCorruptError, CheckpointError

    try:
        if step is not None:
            restored, meta = checkpointer.restore({"learner": learner_state}, step)
        else:
            restored, meta, used, skipped = checkpointer.restore_intact({"learner": learner_state})
            for bad, reason in skipped:
                _say(f"checkpoint {bad} of {run_path} is damaged ({reason}); using {used}")
    except CheckpointCorruptError as e:
        raise RunError(f"cannot load {run_path}: no checkpoint is intact ({e})") from None
    except CheckpointError as e:
        raise RunError(f"cannot load {run_path}: {e}") from None
    return restored["learner"], meta


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
    (:class:`zoo.metrics.EvaluationProgress`).
    """
    from zoo.envs import evaluate
    from zoo.metrics import EvaluationProgress

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
    settings = _read_settings(run_path)
    spec = spec_lib.load_algorithm(RunDir(run_path).spec_file)
    shown = EvaluationProgress(f"zoo eval {run_path}") if progress else None
    result = evaluate(
        policy,
        settings.env,
        settings.protocol,
        episodes=episodes,
        seed=seed,
        max_steps=max_steps,
        num_envs=num_envs,
        epsilon=spec.schedule.eval_epsilon,
        progress=shown,
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
    from zoo.fileio import open_append

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
        _say(f"this evaluation was not recorded in {run_path} ({e})")


__all__ += ["SpecError"]
