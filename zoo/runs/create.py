"""A new run: its spec and settings from what was asked, its directory and what is written into it
(spec.yaml, provenance.json, the history's creation record, then run.yaml). No JAX at import.

A run directory has one owner and one history: it is created fresh (an existing directory must
be empty, or an interrupted creation) and locked (:class:`zoo.runs.rundir.RunLock`) before
anything is written; a directory that holds a run is refused with the command that continues it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from zoo import spec as spec_lib
from zoo.envs import default_protocol, get_protocol, resolve_env
from zoo.fileio import write_atomic
from zoo.runs import rundir
from zoo.runs import settings as run_settings
from zoo.runs.errors import RunError, RunRefusedError
from zoo.runs.metrics import read_jsonl
from zoo.runs.notes import say
from zoo.runs.rundir import RunDir, RunSettingsError
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec

__all__ = [
    "check_budget",
    "checkpoint_steps",
    "create_run_dir",
    "default_run_dir",
    "last_record_step",
    "make_dir",
    "new_settings",
    "spec_dump",
    "write_provenance",
    "write_settings",
]


def _resolve(
    algorithm: str | os.PathLike[str] | AlgorithmSpec, overrides: Mapping[str, Any] | None
) -> tuple[AlgorithmSpec, str | None, dict[str, Any]]:
    """The algorithm spec, the preset name (if any) and the preset's run settings."""
    if isinstance(algorithm, AlgorithmSpec):
        return spec_lib.load_algorithm(algorithm, overrides=overrides), None, {}
    name = str(algorithm)
    if name in spec_lib.algorithm_names() and name in spec_lib.preset_names():
        say(
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


def new_settings(
    algorithm: Any, overrides: Mapping[str, Any] | None, given: Mapping[str, Any]
) -> tuple[AlgorithmSpec, RunSettings]:
    """The spec and settings of a new run (the table's rules fill in what was not given; every
    value checked)."""
    spec, preset_name, defaults = _resolve(algorithm, overrides)
    values = run_settings.new_run(
        given, defaults, lambda env: default_protocol(resolve_env(env).env_id)
    )
    # unknown ids, and ids the backend does not run, fail before anything is written
    values["env"] = resolve_env(values["env"], values["env_backend"]).env_id
    values["protocol"] = get_protocol(values["protocol"]).name
    who = str(algorithm if not isinstance(algorithm, AlgorithmSpec) else spec.name)
    try:
        settings = RunSettings(algorithm=who, preset=preset_name, **values)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(map(str, first["loc"]))
        raise RunRefusedError(f"{where}: {first['msg']} (got {first.get('input')!r})") from None
    check_budget(spec, settings)
    return spec, settings


def check_budget(spec: AlgorithmSpec, settings: RunSettings) -> None:
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


def default_run_dir(spec: AlgorithmSpec, settings: RunSettings, seeds: int = 1) -> Path:
    """``runs/<preset or algorithm>-<env>-s<seed>-<time>``: a preset's run is named after the
    preset (``dqn_adam_mse``), not its catalogue algorithm (``dqn``), so runs of both differ.
    For ``seeds`` runs from ``settings.seed`` on (:mod:`zoo.runs.seeds`):
    ``-s<first>-<last>-``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = rundir.safe_component(settings.preset or spec.name or "custom", fallback="custom")
    env = rundir.safe_component(settings.env, fallback="env")
    last = f"-{settings.seed + seeds - 1}" if seeds > 1 else ""
    return Path("runs") / f"{name}-{env}-s{settings.seed}{last}-{stamp}"


def checkpoint_steps(run_path: Path) -> list[int]:
    """Steps of the complete checkpoints on disk, read without Orbax."""
    return rundir.complete_steps(RunDir(run_path).checkpoints)


def _describe_run(run_path: Path) -> str:
    try:
        settings = RunDir(run_path).settings()
    except RunSettingsError:
        return "a zoo run"
    return f"{settings.algorithm} on {settings.env}, seed {settings.seed}"


def last_record_step(run_path: Path) -> int | None:
    records = read_jsonl(RunDir(run_path).metrics_file)
    return int(records[-1]["env_steps"]) if records else None


def _refuse_existing_run(run_path: Path) -> None:
    """A new run may not go into a directory holding a run: say how to continue that one."""
    with rundir.RunLock(run_path):  # refused (naming the owner) if it is running
        pass
    what = _describe_run(run_path)
    steps = checkpoint_steps(run_path)
    if steps:
        raise RunRefusedError(
            f"{run_path} already holds a run ({what}) with checkpoints up to env step "
            f"{steps[-1]:,}; continue it with: zoo train --resume {run_path} (or choose another "
            "--run-dir)"
        )
    last = last_record_step(run_path)
    records = f" (records up to env step {last:,})" if last is not None else ""
    raise RunRefusedError(
        f"{run_path} holds a run ({what}) that stopped before its first checkpoint{records}; "
        f"start that run over with: zoo train --resume {run_path} --restart (or choose another "
        "--run-dir)"
    )


def create_run_dir(
    run_dir: Any, spec: AlgorithmSpec, settings: RunSettings
) -> tuple[Path, rundir.RunLock]:
    """Create and lock a fresh run directory and write its spec, settings, provenance and
    history; an existing directory must be empty (or an interrupted creation)."""
    if run_dir is None:
        base = default_run_dir(spec, settings)
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
        make_dir(path)
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


def make_dir(path: Path) -> None:
    """Create ``path`` (and its parents), or :class:`RunError` saying why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunError(f"cannot write the run directory {path}: {e.strerror or e}") from None


def write_settings(run: RunDir, settings: RunSettings) -> None:
    """``run.yaml``."""
    write_atomic(
        run.settings_file, yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False)
    )


def write_provenance(run: RunDir, settings: RunSettings) -> None:
    """``provenance.json``: versions, commit, machine and the protocol's settings."""
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
        write_provenance(run, settings)
        rundir.append_history(
            path,
            "created",
            **rundir.creation_fields(spec_text, spec_dump(spec), settings.model_dump(mode="json")),
        )
        write_settings(run, settings)
    except OSError as e:
        raise RunError(f"cannot write the run directory {path}: {e.strerror or e}") from None


def spec_dump(spec: AlgorithmSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", serialize_as_any=True)


def _spec_yaml(spec: AlgorithmSpec) -> str:
    data = spec.model_dump(mode="json", serialize_as_any=True)
    return yaml.safe_dump({spec.name or "algorithm": data}, sort_keys=False, allow_unicode=True)


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
