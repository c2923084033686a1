"""The array files of a checkpoint item: one ``.npy`` file per array leaf, streamed in chunks,
checksummed, and read back into the template's own buffers (:class:`ArrayFilesHandler`, the
Orbax ``CheckpointHandler`` that :class:`zoo.runs.checkpoint.Checkpointer` writes each item with;
the module docstring there says why each of these exists).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

__all__ = [
    "CHUNK_BYTES",
    "MANIFEST",
    "ORBAX_METADATA",
    "ArrayFilesHandler",
    "ArrayFilesRestore",
    "ArrayFilesSave",
    "CheckpointCorruptError",
    "CheckpointError",
    "Chunk",
    "array_leaves",
    "chunk_plan",
    "flatten_arrays",
    "unflatten_arrays",
]


CHUNK_BYTES = 64 * 2**20
"""Largest piece of an array held on the host at once while saving or restoring."""


MANIFEST = "manifest.json"


FORMAT = 1


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message says why and what is left."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint's bytes do not match their checksums, or a file is missing or truncated."""


def array_leaves(tree: Any) -> list[tuple[str, Any]]:
    """``[(key path, leaf)]`` of the array leaves of ``tree`` (static leaves skipped)."""
    arrays = eqx.filter(tree, _is_array_like)
    flat, _ = jax.tree_util.tree_flatten_with_path(arrays)
    return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def _is_array_like(x: Any) -> bool:
    return eqx.is_array(x) or isinstance(x, jax.ShapeDtypeStruct)


def flatten_arrays(tree: Any) -> dict[str, np.ndarray]:
    """``{key path: host array}`` for every array leaf of ``tree`` (static leaves skipped).

    Copies every leaf to the host: for small trees (tests, inspection), not for a replay.
    """
    return {k: np.asarray(v) for k, v in array_leaves(tree)}


def unflatten_arrays(template: Any, flat: Mapping[str, Any]) -> Any:
    """``template`` with its array leaves replaced by ``flat`` (checked for shape and dtype)."""
    arrays, static = eqx.partition(template, _is_array_like)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(arrays)
    restored = []
    for path, leaf in leaves:
        name = jax.tree_util.keystr(path)
        if name not in flat:
            raise CheckpointError(
                f"the checkpoint lacks {name} (and perhaps more); it was written by a different "
                "algorithm or configuration"
            )
        value = flat[name]
        if tuple(value.shape) != tuple(leaf.shape) or value.dtype != leaf.dtype:
            raise CheckpointError(
                f"{name}: checkpoint has {_describe(value)}, the run expects {_describe(leaf)}"
            )
        restored.append(value if isinstance(value, jax.Array) else jnp.asarray(value))
    return eqx.combine(jax.tree_util.tree_unflatten(treedef, restored), static)


def _describe(x: Any) -> str:
    return f"{np.dtype(x.dtype).name}{list(x.shape)}"


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A C-contiguous block of an array: index ``prefix`` on the leading axes, rows
    ``[start, start + size)`` of the next axis, all of the trailing axes."""

    prefix: tuple[int, ...]
    start: int
    size: int

    def starts(self, ndim: int) -> tuple[int, ...]:
        rest = (0,) * (ndim - len(self.prefix) - 1)
        return (*self.prefix, self.start, *rest)

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (*((1,) * len(self.prefix)), self.size, *shape[len(self.prefix) + 1 :])


def chunk_plan(shape: tuple[int, ...], itemsize: int, budget: int) -> Iterator[Chunk]:
    """Chunks of at most ``budget`` bytes (or one row, if a row is larger) covering an array of
    ``shape`` in C order, so that writing them one after another writes the array's bytes."""
    if not shape:
        yield Chunk((), 0, 1)
        return
    # the first axis whose rows (everything after it) fit in the budget
    axis = 0
    while axis < len(shape) - 1 and math.prod(shape[axis + 1 :]) * itemsize > budget:
        axis += 1
    row = math.prod(shape[axis + 1 :]) * itemsize
    rows = max(1, budget // max(row, 1))
    for prefix in np.ndindex(*shape[:axis]):
        for start in range(0, shape[axis], rows):
            yield Chunk(tuple(int(i) for i in prefix), start, min(rows, shape[axis] - start))


@functools.partial(jax.jit, static_argnums=(2,))
def _read_chunk(x: jax.Array, starts: tuple[jax.Array, ...], size: tuple[int, ...]) -> jax.Array:
    return jax.lax.dynamic_slice(x, starts, size)


@functools.partial(jax.jit, donate_argnums=(0,))
def _write_chunk(x: jax.Array, value: jax.Array, starts: tuple[jax.Array, ...]) -> jax.Array:
    return jax.lax.dynamic_update_slice(x, value, starts)


def _scalar_starts(chunk: Chunk, ndim: int) -> tuple[jax.Array, ...]:
    # as arrays: one compiled slice per chunk *shape*, not per position
    return tuple(np.int32(i) for i in chunk.starts(ndim))


def _on_cpu(x: jax.Array) -> bool:
    return all(d.platform == "cpu" for d in x.devices())


def _host_chunks(x: jax.Array, budget: int) -> Iterator[np.ndarray]:
    """The bytes of ``x`` in C order, as host arrays of at most ``budget`` bytes each."""
    shape = tuple(x.shape)
    if not shape or x.nbytes <= budget or _on_cpu(x):
        # on the CPU the host array is a view of the device buffer (no copy, measured)
        flat = np.ascontiguousarray(np.asarray(x)).reshape(-1)
        step = max(1, budget // max(x.dtype.itemsize, 1))
        for start in range(0, max(flat.size, 1), step):
            yield flat[start : start + step]
        return
    for chunk in chunk_plan(shape, x.dtype.itemsize, budget):
        piece = _read_chunk(x, _scalar_starts(chunk, len(shape)), chunk.shape(shape))
        yield np.asarray(piece).reshape(-1)


HOLE_BYTES = 64 * 2**10
"""Smallest all-zero piece left as a hole in the file rather than written (see ``save``)."""


def _write_or_skip(f: Any, data: memoryview) -> None:
    """Write ``data`` at ``f``'s position, or seek past it when it is all zero bytes.

    The unfilled part of a replay is zeros: a run's first checkpoints of a 1M-transition Atari
    replay were 6.7 GiB on disk each whatever the fill. Skipped pieces become holes of a sparse
    file (on file systems without holes, zeros), which read back as zeros, so the bytes, the
    ``.npy`` format and the checksum are unchanged; the file takes the disk of what was stored.
    """
    if len(data) >= HOLE_BYTES and not _any_nonzero(np.frombuffer(data, np.uint8)):
        f.seek(len(data), os.SEEK_CUR)
    else:
        f.write(data)


def _any_nonzero(raw: np.ndarray) -> bool:
    """Whether any byte of ``raw`` (bytes, so ``-0.0`` counts as non-zero) is non-zero."""
    wide = raw[: raw.size - raw.size % 8].view(np.uint64)
    return bool(wide.any() or raw[wide.size * 8 :].any())


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> dict[str, Any]:
    try:
        descr = np.lib.format.dtype_to_descr(dtype)
    except ValueError:  # e.g. bfloat16: raw bytes of the same size
        descr = f"|V{dtype.itemsize}"
    return {"descr": descr, "fortran_order": False, "shape": shape}


def _file_name(index: int) -> str:
    return f"{index:05d}.npy"


@dataclasses.dataclass
class ArrayFilesSave(ocp.args.CheckpointArgs):
    """Save args of :class:`ArrayFilesHandler`: the item's pytree."""

    tree: Any
    chunk_bytes: int = CHUNK_BYTES


@dataclasses.dataclass
class ArrayFilesRestore(ocp.args.CheckpointArgs):
    """Restore args of :class:`ArrayFilesHandler`.

    ``template``'s array leaves are the destinations: a ``jax.Array`` leaf is *donated* and
    filled in place (do not use it afterwards), a ``jax.ShapeDtypeStruct`` leaf gets a new
    buffer. ``step`` and ``item`` only name the checkpoint in error messages.
    """

    template: Any
    step: int | None = None
    item: str = ""
    chunk_bytes: int = CHUNK_BYTES


#: The index file of an item in Orbax's standard format (checkpoints made before zoo's own).
ORBAX_METADATA = "_METADATA"


class ArrayFilesHandler(ocp.CheckpointHandler):
    """Writes a pytree's array leaves as ``.npy`` files streamed in chunks, with CRC-32s.

    See the module docstring. Restores into the template's buffers, verifying every checksum.
    """

    def save(self, directory: epath.Path, args: ArrayFilesSave) -> None:
        directory = Path(directory)
        entries = []
        for index, (name, leaf) in enumerate(array_leaves(args.tree)):
            leaf = leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf)
            dtype, shape = np.dtype(leaf.dtype), tuple(int(d) for d in leaf.shape)
            crc = 0
            with open(directory / _file_name(index), "wb") as f:
                np.lib.format.write_array_header_1_0(f, _npy_header(dtype, shape))
                offset = f.tell()
                for piece in _host_chunks(leaf, args.chunk_bytes):
                    data = memoryview(piece.view(np.uint8))
                    crc = zlib.crc32(data, crc)
                    _write_or_skip(f, data)
                f.truncate()  # a trailing hole: the file's size is its end, not the last write
                f.flush()
                os.fsync(f.fileno())
            entries.append(
                {
                    "key": name,
                    "file": _file_name(index),
                    "dtype": dtype.name,
                    "shape": list(shape),
                    "offset": offset,
                    "crc32": crc,
                }
            )
        manifest = {"format": FORMAT, "arrays": entries}
        (directory / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")

    def restore(self, directory: epath.Path, args: ArrayFilesRestore) -> Any:
        directory = Path(directory)
        where = f"checkpoint {args.step}" if args.step is not None else "the checkpoint"
        where += f" ({args.item})" if args.item else ""
        try:
            manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
            stored = {e["key"]: e for e in manifest["arrays"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointCorruptError(f"{where}: unreadable manifest ({e})") from None
        template = array_leaves(args.template)
        _check_structure(where, template, stored)
        seen: set[int] = set()
        flat = {}
        for name, leaf in template:
            entry = stored[name]
            if isinstance(leaf, jax.Array) and id(leaf) not in seen and not leaf.is_deleted():
                seen.add(id(leaf))
                destination = leaf
            else:
                destination = jnp.zeros(leaf.shape, leaf.dtype)
            flat[name] = _read_into(directory / entry["file"], entry, destination, where, args)
        return unflatten_arrays(args.template, flat)

    def metadata(self, directory: epath.Path) -> Any:
        path = Path(directory) / MANIFEST
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _check_structure(where: str, template: list[tuple[str, Any]], stored: dict[str, Any]) -> None:
    """One line naming the first difference between the run's state and the checkpoint's."""
    names = [n for n, _ in template]
    missing = [n for n in names if n not in stored]
    extra = [n for n in stored if n not in set(names)]
    if missing or extra:
        first = (
            f"the run has {missing[0]} which the checkpoint lacks"
            if missing
            else f"the checkpoint has {extra[0]} which the run lacks"
        )
        raise CheckpointError(
            f"{where} was written by a different algorithm or configuration: {first} "
            f"({len(missing)} missing, {len(extra)} extra arrays)"
        )
    for name, leaf in template:
        entry = stored[name]
        shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
        if shape != tuple(leaf.shape) or dtype != np.dtype(leaf.dtype):
            raise CheckpointError(
                f"{where} was written by a different algorithm or configuration: {name} is "
                f"{dtype.name}{list(shape)} there, {_describe(leaf)} in this run"
            )


def _read_into(
    path: Path, entry: Mapping[str, Any], destination: jax.Array, where: str, args: Any
) -> jax.Array:
    """Fill ``destination`` (donated) with the array stored in ``path``, checking its CRC."""
    shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
    expected = math.prod(shape) * dtype.itemsize
    crc = 0
    try:
        with open(path, "rb") as f:
            f.seek(int(entry["offset"]))
            if not shape:
                data = f.read(dtype.itemsize)
                if len(data) != dtype.itemsize:
                    raise EOFError
                crc = zlib.crc32(data)
                value = jnp.asarray(np.frombuffer(data, dtype).reshape(()))
                destination = value
            else:
                for chunk in chunk_plan(shape, dtype.itemsize, args.chunk_bytes):
                    piece_shape = chunk.shape(shape)
                    buffer = np.empty(piece_shape, dtype)
                    view = memoryview(buffer.reshape(-1).view(np.uint8))
                    if f.readinto(view) != len(view):
                        raise EOFError
                    crc = zlib.crc32(view, crc)
                    destination = _write_chunk(
                        destination, jnp.asarray(buffer), _scalar_starts(chunk, len(shape))
                    )
                    # one chunk in flight: asynchronous dispatch would otherwise let the
                    # reads run ahead and hold many chunks at once (measured: +0.5 GiB)
                    destination.block_until_ready()
            trailing = f.read(1)
    except FileNotFoundError:
        raise CheckpointCorruptError(
            f"{where}: {entry['key']}: file {path.name} is missing"
        ) from None
    except EOFError:
        raise CheckpointCorruptError(
            f"{where}: {entry['key']}: file {path.name} is truncated (expected {expected:,} bytes)"
        ) from None
    except OSError as e:
        raise CheckpointCorruptError(
            f"{where}: {entry['key']}: cannot read {path.name}: {e}"
        ) from None
    if trailing:
        raise CheckpointCorruptError(f"{where}: {entry['key']}: file {path.name} has extra bytes")
    if crc != int(entry["crc32"]):
        raise CheckpointCorruptError(
            f"{where}: {entry['key']}: checksum mismatch in {path.name} (the file is damaged)"
        )
    return destination
