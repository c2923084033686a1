"""Orbax checkpoints of a whole run state, written atomically.

The state is any pytree (learner state with its Equinox networks, replay state, counters, keys).
Its array leaves are saved as a flat mapping ``{key path: array}`` with Orbax's
``StandardSave``, plus a JSON mapping of counters and metadata; restoring needs a *template* of
the same structure (built from the spec), whose array leaves are replaced. Nothing is pickled.

Atomicity comes from Orbax: a step is written into a temporary directory and renamed into place
when complete, so a crash during a save leaves the previous checkpoint usable (and the partial
directory is ignored and cleaned up by the next manager).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
import orbax.checkpoint as ocp

__all__ = ["CheckpointError", "Checkpointer", "flatten_arrays", "unflatten_arrays"]


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says why and what is left."""


def flatten_arrays(tree: Any) -> dict[str, np.ndarray]:
    """``{key path: host array}`` for every array leaf of ``tree`` (static leaves skipped)."""
    arrays = eqx.filter(tree, eqx.is_array)
    flat, _ = jax.tree_util.tree_flatten_with_path(arrays)
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}


def unflatten_arrays(template: Any, flat: dict[str, Any]) -> Any:
    """``template`` with its array leaves replaced by ``flat`` (checked for shape and dtype)."""
    arrays, static = eqx.partition(template, eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(arrays)
    missing = [jax.tree_util.keystr(p) for p, _ in leaves if jax.tree_util.keystr(p) not in flat]
    if missing:
        raise CheckpointError(
            f"the checkpoint lacks {len(missing)} arrays of this run's state (first: "
            f"{missing[0]}); it was written by a different algorithm or configuration"
        )
    restored = []
    for path, leaf in leaves:
        value = np.asarray(flat[jax.tree_util.keystr(path)])
        if value.shape != leaf.shape or value.dtype != leaf.dtype:
            raise CheckpointError(
                f"{jax.tree_util.keystr(path)}: checkpoint has {value.dtype}{list(value.shape)}, "
                f"the run expects {leaf.dtype}{list(leaf.shape)}"
            )
        restored.append(jax.numpy.asarray(value))
    return eqx.combine(jax.tree_util.tree_unflatten(treedef, restored), static)


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
    """

    def __init__(self, directory: str | os.PathLike[str], max_to_keep: int = 2):
        self.directory = Path(directory).absolute()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CheckpointError(
                _describe_os_error(e, "creating the checkpoint folder", self.directory)
            ) from None
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False
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
        separately so that a reader can restore only the items it needs.

        Raises:
          CheckpointError: naming the cause (full disk, permissions) and the last good step.
        """
        items = {name: ocp.args.StandardSave(flatten_arrays(tree)) for name, tree in state.items()}
        args = ocp.args.Composite(**items, metadata=ocp.args.JsonSave(dict(metadata or {})))
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

        Only the items named in ``template`` are read (a policy needs no replay).
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        items = {
            name: ocp.args.StandardRestore(
                {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in flatten_arrays(tree).items()}
            )
            for name, tree in template.items()
        }
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**items, metadata=ocp.args.JsonRestore())
            )
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointError(
                f"cannot read checkpoint {step} in {self.directory}: {str(e)[:500]}"
            ) from None
        state = {
            name: unflatten_arrays(tree, dict(restored[name])) for name, tree in template.items()
        }
        return state, dict(restored.metadata or {})

    def close(self) -> None:
        """Finish pending work and release the manager."""
        self._manager.close()
