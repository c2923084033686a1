"""Run directories with one owner and one history.

A run directory is created fresh or resumed, never both, and never by two processes at once:

- **Ownership**: a process that trains in a run directory holds an exclusive ``flock`` on its
  ``.lock`` file for its whole life. The kernel releases the lock when the process ends, however
  it ends (``kill -9`` included), so a crashed owner never leaves the directory stuck; a second
  process is refused while the first lives.
- **Creation** refuses any existing directory that is not empty and not a run of ours (files are
  never written among a user's own), and any run of ours: one with checkpoints is continued with
  ``--resume``; one that stopped before its first checkpoint is started over, explicitly, with
  ``--resume DIR --restart``.
- **History**: ``history.jsonl`` records what happened to the run, one JSON object per line:
  ``created`` (with the resolved spec, its SHA-256 and the settings, as they were at creation),
  ``resumed`` (from which checkpoint, budget changes, damaged checkpoints passed over),
  ``restarted`` and ``stopped``. A resume checks the run's ``spec.yaml`` and ``run.yaml`` against
  the creation record, so an edited file is refused with what differs.
- **Names** from YAML (entry names) and environment ids become path components only through
  :func:`safe_component`.

- **Layout and records**: :class:`RunDir` names every file of a run directory and reads its
  records; :class:`RunSettings` is ``run.yaml``. ``zoo train``, ``zoo compare``, ``zoo
  reproduce`` and ``zoo bench`` read runs through them.

A run directory holds::

    spec.yaml          the resolved algorithm (after extends and overrides)
    run.yaml           the run's settings (environment, protocol, budget, seed, ...)
    provenance.json    package versions, git commit, hardware, protocol, seed, command line
    history.jsonl      created, resumed, restarted, stopped: who did what, when
    metrics.jsonl      training records (env_steps, updates, returns, loss, rates, ...)
    eval.jsonl         evaluation results under the protocol
    tb/                TensorBoard event files
    checkpoints/       Orbax checkpoints of the whole run state (replay included unless opted out)

``--resume DIR`` continues from the newest checkpoint: counters, schedules, RNG, optimizer and
replay continue; open episodes restart (environments cannot be checkpointed) and records logged
after the checkpoint are truncated, so nothing is duplicated and nothing checkpointed is lost.

This module needs neither JAX nor the spec's models.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import socket
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from zoo.fileio import open_append, read_text
from zoo.runs.errors import RunError, RunRefusedError
from zoo.runs.settings import MAX_ENV_STEPS, RunSettings

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locking
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "HISTORY",
    "LOCK",
    "MAX_ENV_STEPS",
    "RUN_FILE_NAMES",
    "RunDir",
    "RunError",
    "RunLock",
    "RunRefusedError",
    "RunSettings",
    "RunSettingsError",
    "append_history",
    "check_run_files",
    "classify",
    "complete_steps",
    "creation_record",
    "describe_differences",
    "read_history",
    "read_jsonl",
    "safe_component",
    "sha256_text",
    "undo_creation",
]

#: The lock file whose ``flock`` marks the process that owns a run directory.
LOCK = ".lock"
#: The run's history, one event per line.
HISTORY = "history.jsonl"
#: What a run directory of ours may hold (besides temporary ``*.tmp`` files).
RUN_FILES = frozenset(
    {
        "spec.yaml",
        "run.yaml",
        "provenance.json",
        "metrics.jsonl",
        "eval.jsonl",
        "posthoc_eval.jsonl",
        "tb",
        "checkpoints",
        "damaged-checkpoints",
        HISTORY,
        LOCK,
    }
)
#: Files a run writes before ``run.yaml``: a directory holding only these is a creation that was
#: interrupted (no records were written), and a new run may take it.
_CREATION_FILES = frozenset({"spec.yaml", "provenance.json", HISTORY, LOCK, ".write-test"})


def safe_component(text: str, fallback: str = "run", limit: int = 100) -> str:
    """``text`` as one harmless path component: letters, digits, ``.``, ``_``, ``-`` only.

    Separators and everything else become ``_``; leading dots are dropped (no ``..``, no hidden
    files), so a name from YAML such as ``a/../../x`` or ``/etc`` cannot leave its folder.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).lstrip(".")[:limit].strip("_")
    return cleaned or fallback


def sha256_text(text: str) -> str:
    """The SHA-256 of ``text`` (UTF-8), as hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------- locking


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``run_dir/.lock``, held until :meth:`release`.

    Raises:
      RunRefusedError: another process holds the lock (the message names it).
    """

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        if fcntl is None:  # pragma: no cover - not POSIX: no locking
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise RunError(f"cannot write the run directory {self.run_dir}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 500).decode("utf-8", "replace").strip()
            os.close(fd)
            raise RunRefusedError(
                f"{self.run_dir} is in use by another zoo process"
                + (f" ({holder})" if holder else "")
                + "; wait for it to finish or stop it (Ctrl-C saves a checkpoint), then resume "
                f"with: zoo train --resume {self.run_dir}"
            ) from None
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {now}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        # the holder's line goes first: a reader never names a process that has let go
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# --------------------------------------------------------------------------------- what it is

State = Literal[
    "absent",
    "empty",
    "run",
    "interrupted_creation",
    "not_a_directory",
    "dangling_link",
    "foreign",
]


def _entries(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def classify(path: str | os.PathLike[str]) -> State:
    """What ``path`` is to a new run.

    ``absent`` or ``empty`` (a lone lock file counts as empty): a run may be created there;
    ``run``: a run of ours (it has ``run.yaml``); ``interrupted_creation``: only files a run writes
    before its ``run.yaml`` (a creation cut short: nothing was trained); ``not_a_directory``;
    ``dangling_link``: a symbolic link to nothing (creating the directory would fail, or create
    it somewhere the link names); ``foreign``: anything else (a user's own files).
    """
    path = Path(path)
    if not path.exists():
        return "dangling_link" if path.is_symlink() else "absent"
    if not path.is_dir():
        return "not_a_directory"
    names = [n for n in _entries(path) if n != LOCK]
    if not names:
        return "empty"
    if "run.yaml" in names and (path / "run.yaml").is_file():
        return "run"
    if all(n in _CREATION_FILES or n.endswith(".tmp") for n in names):
        return "interrupted_creation"
    return "foreign"


#: The files of a run (as opposed to its folders): each must be a regular file, never a link.
RUN_FILE_NAMES = frozenset(
    {"spec.yaml", "run.yaml", "provenance.json", "metrics.jsonl", "eval.jsonl",
     "posthoc_eval.jsonl", HISTORY}
)  # fmt: skip


def check_run_files(path: str | os.PathLike[str]) -> None:
    """Refuse a run whose files are links, FIFOs or folders (someone else's doing: zoo writes
    regular files only); its ``checkpoints`` folder may be a link, to put them on another disk.

    Raises:
      RunRefusedError: naming the first such file and the fix.
    """
    for name in sorted(RUN_FILE_NAMES):
        try:
            mode = os.lstat(Path(path) / name).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise RunRefusedError(
                f"{Path(path) / name} is {what}; zoo reads and writes only regular files in a run "
                "directory (a link could make it write outside it): remove the link or "
                "restore the file"
            )


def foreign_example(path: str | os.PathLike[str]) -> str:
    """One of the names in ``path`` that a run of ours would not hold."""
    names = [n for n in _entries(Path(path)) if n not in RUN_FILES and not n.endswith(".tmp")]
    return names[0] if names else _entries(Path(path))[0]


def clear_creation(path: str | os.PathLike[str]) -> None:
    """Remove the files of an interrupted creation (only names a run writes before run.yaml)."""
    for name in _entries(Path(path)):
        if name != LOCK and (name in _CREATION_FILES or name.endswith(".tmp")):
            target = Path(path) / name
            if target.is_file():
                target.unlink()


def undo_creation(path: str | os.PathLike[str]) -> bool:
    """Take back the creation of a run refused before it trained: its ``run.yaml`` and creation
    files, and its ``checkpoints`` and ``tb`` folders where they are empty, so that the same
    directory takes the corrected run. Returns False (and removes nothing) where the run holds
    anything a run writes while training (records, checkpoints)."""
    root = Path(path)
    for name in ("metrics.jsonl", "eval.jsonl", "damaged-checkpoints"):
        if (root / name).exists():
            return False
    for name in ("checkpoints", "tb"):
        if (root / name).is_dir() and any((root / name).iterdir()):
            return False
    for name in ("checkpoints", "tb"):
        if (root / name).is_dir():
            (root / name).rmdir()
    (root / "run.yaml").unlink(missing_ok=True)
    clear_creation(root)
    return True


# ------------------------------------------------------------------------------------- history


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def append_history(run_dir: str | os.PathLike[str], event: str, **fields: Any) -> dict[str, Any]:
    """Append ``{"event": event, "time": ..., **fields}`` to the run's history (fsynced)."""
    record = {"event": event, "time": _now(), **fields}
    path = Path(run_dir) / HISTORY
    with open_append(path) as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return record


def read_history(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The run's history events, oldest first (unreadable lines skipped)."""
    return read_jsonl(Path(run_dir) / HISTORY)


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete records of a JSON-lines file (a torn last line from a crash, and anything
    that is not a JSON object, is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def creation_record(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The event that fixed the run's spec and settings: ``created`` (or ``adopted``)."""
    return next((e for e in history if e.get("event") in ("created", "adopted")), None)


def creation_fields(
    spec_text: str, spec: Mapping[str, Any], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """What a creation record holds: the spec (with its hash), the settings and the command."""
    return {
        "spec_sha256": sha256_text(spec_text),
        "spec": dict(spec),
        "settings": dict(settings),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": list(sys.argv),
    }


# ------------------------------------------------------------------------------------ differences


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_differences(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    labels: tuple[str, str] = ("in the run", "now"),
    ignore: tuple[str, ...] = (),
    limit: int = 3,
) -> list[str]:
    """The leaves that differ, one short line each: ``path: A in the run, B now`` (at most
    ``limit`` lines, then how many more)."""
    old, new = dict(_flatten(before)), dict(_flatten(after))
    keys = [k for k in dict.fromkeys([*old, *new]) if k not in ignore]
    missing = object()
    lines = []
    for key in keys:
        a, b = old.get(key, missing), new.get(key, missing)
        if a == b:
            continue
        a_text = "absent" if a is missing else _short(a)
        b_text = "absent" if b is missing else _short(b)
        lines.append(f"{key}: {a_text} {labels[0]}, {b_text} {labels[1]}")
    if len(lines) > limit:
        lines = [*lines[:limit], f"and {len(lines) - limit} more"]
    return lines


# --------------------------------------------------------------------------------------------
# Layout and records


def complete_steps(directory: str | os.PathLike[str]) -> list[int]:
    """Steps of the complete checkpoints in ``directory``, oldest first, read without opening a
    manager there (another process may own it): Orbax writes a checkpoint under a temporary
    name and renames it to its step once complete."""
    folder = Path(directory)
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit() and p.is_dir())


class RunSettingsError(ValueError):
    """A run directory's ``run.yaml`` is missing or damaged."""


class RunDir:
    """One run directory: where each of its files lives, and its records read back.

    ``spec.yaml`` (the resolved algorithm), ``run.yaml`` (:class:`RunSettings`; its presence
    makes the folder a run), ``provenance.json``, ``metrics.jsonl`` (training records),
    ``eval.jsonl`` (evaluations), ``history.jsonl`` (what happened to the run), ``checkpoints/``,
    ``damaged-checkpoints/``, ``tb/`` (TensorBoard events) and ``.lock``.
    """

    SPEC = "spec.yaml"
    SETTINGS = "run.yaml"
    PROVENANCE = "provenance.json"
    METRICS = "metrics.jsonl"
    EVALS = "eval.jsonl"
    POSTHOC_EVALS = "posthoc_eval.jsonl"
    CHECKPOINTS = "checkpoints"

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def spec_file(self) -> Path:
        """``spec.yaml``."""
        return self.path / self.SPEC

    @property
    def settings_file(self) -> Path:
        """``run.yaml``."""
        return self.path / self.SETTINGS

    @property
    def provenance_file(self) -> Path:
        """``provenance.json``."""
        return self.path / self.PROVENANCE

    @property
    def metrics_file(self) -> Path:
        """``metrics.jsonl``."""
        return self.path / self.METRICS

    @property
    def evals_file(self) -> Path:
        """``eval.jsonl``."""
        return self.path / self.EVALS

    @property
    def posthoc_evals_file(self) -> Path:
        """``posthoc_eval.jsonl``: the evaluations ``zoo eval`` made of the run's checkpoints
        after the fact, one record each (never mixed with the run's own ``eval.jsonl``)."""
        return self.path / self.POSTHOC_EVALS

    @property
    def checkpoints(self) -> Path:
        """The checkpoint folder."""
        return self.path / self.CHECKPOINTS

    def is_run(self) -> bool:
        """Whether the folder holds a run (its ``run.yaml`` exists)."""
        return self.settings_file.is_file()

    def settings(self) -> RunSettings:
        """``run.yaml`` as :class:`RunSettings`.

        Raises:
          RunSettingsError: it is missing (``is not a zoo run directory``) or damaged, with the
            first line of the reason.
        """
        if not self.is_run():
            raise RunSettingsError(f"{self.path} is not a zoo run directory (no run.yaml)")
        try:
            data = yaml.safe_load(read_text(self.settings_file, what="run.yaml"))
            return RunSettings.model_validate(data)
        except (OSError, yaml.YAMLError, ValidationError) as e:
            first = str(e).splitlines()[0][:200]
            raise RunSettingsError(f"{self.path}: its run.yaml is damaged ({first})") from None

    def metrics(self) -> list[dict[str, Any]]:
        """The training records, oldest first."""
        return read_jsonl(self.metrics_file)

    def evals(self) -> list[dict[str, Any]]:
        """The evaluation records, oldest first."""
        return read_jsonl(self.evals_file)

    def history(self) -> list[dict[str, Any]]:
        """The history events, oldest first."""
        return read_history(self.path)
