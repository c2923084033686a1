"""Disk a test's files occupy (allocated blocks, not apparent sizes), for tests of sparse
checkpoint files."""

from __future__ import annotations

from pathlib import Path


def holes_supported(directory: Path) -> bool:
    """Whether ``directory``'s file system leaves a seeked-over range unallocated (a hole)."""
    probe = directory / ".holes-probe"
    with open(probe, "wb") as f:
        f.seek(2**20)
        f.write(b"x")
    supported = probe.stat().st_blocks * 512 < 2**19
    probe.unlink()
    return supported


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk to ``path``, or to every file under it."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files)
