"""Orbax checkpoints of a whole run state: streamed, checksummed, restored in place.

The state is any mapping of item names to pytrees (learner state with its Equinox networks,
replay state, counters, keys). Orbax's ``CheckpointManager`` numbers the checkpoints, keeps the
newest ``max_to_keep`` and makes each one atomic (a step is written into a temporary directory
and renamed into place when complete, so a crash during a save leaves the previous checkpoint
usable). Each item is written by :class:`ArrayFilesHandler`, an Orbax ``CheckpointHandler`` of
this package (:mod:`zoo.runs.arrayfiles`):

- every array leaf becomes one ``.npy`` file (readable with ``numpy.load(..., mmap_mode="r")``),
  written **in chunks** of at most ``chunk_bytes`` copied off the device one at a time, so that
  saving a 6.6 GiB Atari replay needs no second in-memory copy of it (Orbax's standard handler
  held about 1.5 copies of the replay while writing it: measured 17.1 GiB peak for a 6.6 GiB
  replay);
- pieces that are all zero bytes (the unfilled part of a replay) are left as holes of a sparse
  file, so a checkpoint takes the disk of what the replay holds, not of its capacity (a 1M Atari
  replay's first checkpoints were 6.7 GiB each at any fill);
- a ``manifest.json`` lists each leaf's key path, dtype, shape and the CRC-32 of its bytes;
  restoring verifies every checksum, so flipped or truncated bytes are reported as a
  :class:`CheckpointCorruptError` naming the step, item and leaf instead of surfacing later as
  a diverged loss;
- restoring writes each file, chunk by chunk, **into the template's own device buffers**
  (donated to an in-place ``dynamic_update_slice``), so a resumed run holds one replay, not
  the template's and the checkpoint's.

:meth:`Checkpointer.restore_intact` falls back from a damaged newest checkpoint to the newest
intact one and says which it skipped. Nothing is pickled. Checkpoints written before this
format (Orbax's ``StandardSave``, no manifest) are still read, without checksums.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from zoo.runs.arrayfiles import (
    CHUNK_BYTES,
    MANIFEST,
    ORBAX_METADATA,
    ArrayFilesHandler,
    ArrayFilesRestore,
    ArrayFilesSave,
    CheckpointCorruptError,
    CheckpointError,
    Chunk,
    array_leaves,
    chunk_plan,
    flatten_arrays,
    unflatten_arrays,
)

__all__ = [
    "ArrayFilesHandler",
    "CheckpointCorruptError",
    "CheckpointError",
    "Checkpointer",
    "Chunk",
    "chunk_plan",
    "flatten_arrays",
    "unflatten_arrays",
]


# --------------------------------------------------------------------------- pytrees


# --------------------------------------------------------------------------- chunks


# --------------------------------------------------------------------------- handler


ocp.args.register_with_handler(ArrayFilesHandler, for_save=True)(ArrayFilesSave)
ocp.args.register_with_handler(ArrayFilesHandler, for_restore=True)(ArrayFilesRestore)


def _own_process() -> Any:
    """Orbax's multiprocessing options for a folder this process writes alone: over several
    processes (:mod:`zoo.runs.distributed`) each keeps its own checkpoints, as the primary and only
    process of its manager (by default Orbax lets process 0 alone create folders and write JSON,
    and waits for every process at each save)."""
    if jax.process_count() == 1:
        return ocp.options.MultiprocessingOptions()
    k = jax.process_index()
    return ocp.options.MultiprocessingOptions(
        primary_host=k, active_processes={k}, barrier_sync_key_prefix=f"zoo-process-{k}"
    )


class MetadataHandler(ocp.JsonCheckpointHandler):
    """Orbax's JSON handler for a checkpoint's metadata, written by the process that owns the
    folder (:func:`_own_process`); the files are Orbax's own JSON item."""

    def __init__(self) -> None:
        super().__init__(multiprocessing_options=_own_process())


@dataclasses.dataclass
class MetadataSave(ocp.args.JsonSave):
    """Save args of :class:`MetadataHandler`."""


@dataclasses.dataclass
class MetadataRestore(ocp.args.JsonRestore):
    """Restore args of :class:`MetadataHandler`."""


ocp.args.register_with_handler(MetadataHandler, for_save=True)(MetadataSave)
ocp.args.register_with_handler(MetadataHandler, for_restore=True)(MetadataRestore)


# --------------------------------------------------------------------------- manager


def _describe_os_error(error: OSError, action: str, where: Path) -> str:
    if error.errno == errno.ENOSPC:
        return f"no space left on the device while {action} in {where}"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"permission denied while {action} in {where}"
    return f"{action} in {where} failed: {error}"


class Checkpointer:
    """Numbered checkpoints of a run state in ``directory`` (keeps the newest ``max_to_keep``).

    Args:
      directory: where checkpoints live (created if needed).
      max_to_keep: how many to keep; older ones are deleted after a newer one is complete.
      chunk_bytes: the largest piece of an array held on the host while saving or restoring.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_to_keep: int = 2,
        chunk_bytes: int = CHUNK_BYTES,
    ):
        self.directory = Path(directory).absolute()
        self.chunk_bytes = int(chunk_bytes)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CheckpointError(
                _describe_os_error(e, "creating the checkpoint folder", self.directory)
            ) from None
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep,
            create=jax.process_count() == 1,  # the folder exists (made above)
            enable_async_checkpointing=False,
            multiprocessing_options=_own_process(),
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or ``None``."""
        self._manager.reload()
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        """Steps of every complete checkpoint, oldest first."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def save(
        self, step: int, state: Mapping[str, Any], metadata: dict[str, Any] | None = None
    ) -> None:
        """Write ``state`` (and JSON ``metadata``) as checkpoint ``step``, atomically.

        ``state`` maps item names (``learner``, ``replay``, ...) to pytrees; each item is stored
        separately so that a reader can restore only the items it needs. Arrays are streamed to
        disk in chunks (no second in-memory copy).

        Raises:
          CheckpointError: naming the cause (full disk, permissions) and the last good step.
        """
        items = {
            name: ArrayFilesSave(tree, chunk_bytes=self.chunk_bytes) for name, tree in state.items()
        }
        args = ocp.args.Composite(**items, metadata=MetadataSave(dict(metadata or {})))
        try:
            self._manager.save(step, args=args, force=True)
            self._manager.wait_until_finished()
        except OSError as e:
            last = self.latest_step()
            raise CheckpointError(
                _describe_os_error(e, f"writing checkpoint {step}", self.directory)
                + f"; the last good checkpoint is {last if last is not None else 'none'}"
            ) from None

    def restore(
        self, template: Mapping[str, Any], step: int | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The items of ``template`` from checkpoint ``step`` (default: newest), and its metadata.

        Only the items named in ``template`` are read (a policy needs no replay). The
        template's ``jax.Array`` leaves are **donated**: each is filled in place with the
        stored values (so a resumed run never holds two replays) and must not be used
        afterwards; pass ``jax.ShapeDtypeStruct`` leaves to keep the template. Every leaf's
        checksum is verified.

        Raises:
          CheckpointCorruptError: damaged, truncated or missing files (the message names the
            step, item and leaf).
          CheckpointError: no checkpoint, or one of a different structure (one line naming the
            first difference).
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        step_dir = self.directory / str(step)
        items: dict[str, Any] = {}
        for name, tree in template.items():
            if not (step_dir / name).is_dir():
                # the run's settings say what a checkpoint of it holds: a missing item is damage
                # (a deleted folder), and an older checkpoint may be whole
                raise CheckpointCorruptError(f"checkpoint {step} has no {name!r} item")
            if (step_dir / name / MANIFEST).exists():
                items[name] = ArrayFilesRestore(
                    tree, step=step, item=name, chunk_bytes=self.chunk_bytes
                )
            elif not (step_dir / name / ORBAX_METADATA).exists():
                # neither format's index: a deleted manifest (guessing the old format would
                # also bind the item to Orbax's handler for the older checkpoints tried next)
                raise CheckpointCorruptError(
                    f"checkpoint {step} ({name}): its {MANIFEST} is missing"
                )
            else:  # written before the streamed format: Orbax's standard handler
                items[name] = ocp.args.StandardRestore(
                    {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in array_leaves(tree)}
                )
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**items, metadata=MetadataRestore())
            )
        except CheckpointError:
            raise
        except (OSError, ValueError, KeyError, EOFError) as e:
            raise CheckpointCorruptError(
                f"cannot read checkpoint {step} in {self.directory}: {_first_line(e)}"
            ) from None
        state = {}
        for name, tree in template.items():
            value = restored[name]
            state[name] = (
                value
                if isinstance(items[name], ArrayFilesRestore)
                else (unflatten_arrays(tree, dict(value)))
            )
        return state, dict(restored.metadata or {})

    def restore_intact(
        self, template: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], int, list[tuple[int, str]]]:
        """The newest checkpoint whose checksums hold, falling back past damaged ones.

        Returns ``(state, metadata, step, skipped)`` with ``skipped`` the ``(step, reason)``
        of each damaged newer checkpoint passed over. The template is donated as in
        :meth:`restore` (a failed attempt's buffers are reused by the next one).

        Raises:
          CheckpointCorruptError: every checkpoint is damaged (the message lists them).
          CheckpointError: there is no checkpoint, or the structure differs.
        """
        steps = self.all_steps()
        if not steps:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        skipped: list[tuple[int, str]] = []
        current = dict(template)
        for step in reversed(steps):
            try:
                state, metadata = self.restore(current, step)
            except CheckpointCorruptError as e:
                skipped.append((step, str(e)))
                # the donated buffers of the failed attempt are gone: restore into new ones
                current = {
                    name: jax.tree.map(
                        lambda x: (
                            jax.ShapeDtypeStruct(x.shape, x.dtype)
                            if isinstance(x, jax.Array) and x.is_deleted()
                            else x
                        ),
                        tree,
                    )
                    for name, tree in current.items()
                }
                continue
            return state, metadata, step, skipped
        raise CheckpointCorruptError(
            "every checkpoint is damaged: " + "; ".join(reason for _, reason in skipped)
        )

    def close(self) -> None:
        """Finish pending work and release the manager."""
        self._manager.close()


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__
