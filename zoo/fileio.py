"""Reading and writing files the way a shared machine needs (no JAX).

Two classes of file, two rules (docs/reliability.md):

- **Files zoo reads as input** (spec files, reference series, a run's ``spec.yaml`` and
  ``run.yaml``) must be regular files of bounded size. :func:`read_text` opens them without
  blocking (a FIFO named as a spec cannot hang the command), refuses anything that is not a
  regular file (``/dev/zero`` would otherwise be read until memory runs out) and reads at most
  ``limit`` bytes.
- **Files zoo writes in a run or bench directory** never follow a link planted there.
  :func:`write_atomic` writes a new file made with ``O_CREAT | O_EXCL`` by
  :func:`tempfile.mkstemp` in the target's folder and renames it into place (a predictable
  ``<name>.tmp`` could be a symlink to a file outside the directory); :func:`open_append` opens
  with ``O_NOFOLLOW`` and refuses anything but a regular file, so that an append can never land
  outside the directory either.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "MAX_INPUT_BYTES",
    "UnsafeFileError",
    "make_output_dir",
    "open_append",
    "read_text",
    "save_figure",
    "write_atomic",
]

#: The largest input file zoo reads (a spec, a reference series, a run's records of settings).
#: The shipped catalogue is ~40 kB and the largest reference series ~200 kB.
MAX_INPUT_BYTES = 16 * 1024 * 1024

#: Suffix of the temporary files :func:`write_atomic` makes (run directories tolerate them).
TMP_SUFFIX = ".tmp"


class UnsafeFileError(OSError):
    """A file zoo was asked to read or write is not a regular file (a device, a FIFO, a folder,
    a symlink where zoo writes), or is too large to be what it should be. The message names the
    file, what it is and what to do."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_text(
    path: str | os.PathLike[str], *, limit: int = MAX_INPUT_BYTES, what: str = "file"
) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes of it.

    Raises:
      FileNotFoundError: ``path`` does not exist (a dangling symlink included).
      UnsafeFileError: ``path`` is not a regular file (a device, FIFO, folder, socket), or is
        larger than ``limit``.
      OSError: it cannot be read (permissions).
      UnicodeDecodeError: it is not UTF-8 text.
    """
    path = Path(path)
    # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting forever
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(
                f"{path} is {_kind(info.st_mode)}, not a {what}: name a regular file"
            )
        if info.st_size > limit:
            raise UnsafeFileError(
                f"{path} is {info.st_size:,} bytes; a {what} is at most {limit:,} bytes: "
                "is it the right file?"
            )
        os.set_blocking(fd, True)
        chunks = []
        size = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew while being read
                raise UnsafeFileError(f"{path} is larger than {limit:,} bytes: not a {what}")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically, never following a link planted beside it.

    The data goes to a new file made by :func:`tempfile.mkstemp` (``O_CREAT | O_EXCL``, mode
    0600 widened to 0644) in ``path``'s folder, is fsynced (``sync``) and renamed over ``path``.
    A reader sees the old file or the new one, never a part; a symlink at ``path`` is replaced,
    not written through.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_append(path: str | os.PathLike[str]) -> TextIO:
    """``path`` opened for appending UTF-8 text (created if absent), never through a link.

    Raises:
      UnsafeFileError: ``path`` is a symlink, a FIFO, a device or a folder.
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        if path.is_symlink():
            raise UnsafeFileError(
                f"{path} is a symbolic link; zoo writes only regular files in a run or bench "
                "directory: remove the link"
            ) from None
        if e.errno is not None and path.exists() and not path.is_file():
            raise UnsafeFileError(
                f"{path} is {_kind(os.lstat(path).st_mode)}; zoo appends only to regular "
                "files: remove it"
            ) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFileError(
            f"{path} is {_kind(info.st_mode)}; zoo appends only to regular files: remove it"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


def make_output_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a folder for outputs the user named (created with its parents if absent).

    Raises:
      UnsafeFileError: ``path`` exists and is not a folder (a file, a FIFO, a device), or is a
        symbolic link to nothing.
    """
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise UnsafeFileError(
            f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: create "
            "that folder or name another one"
        )
    if path.exists() and not path.is_dir():
        raise UnsafeFileError(
            f"{path} is {_kind(os.stat(path).st_mode)}, not a folder: name a folder for the outputs"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_figure(figure: Any, path: str | os.PathLike[str], **savefig: Any) -> Path:
    """A Matplotlib figure saved as a PNG at ``path`` through :func:`write_atomic` (Matplotlib
    alone would write through a link planted at ``path``)."""
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", **savefig)
    write_atomic(path, buffer.getvalue(), sync=False)
    return Path(path)
