"""Streamed, checksummed checkpoints (zoo.runs.checkpoint) on real files through Orbax's manager.

Small ``chunk_bytes`` force every array through many chunks, so the chunk plan, the streamed
writes and the in-place restores are exercised on arrays of a few kilobytes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from disk import disk_bytes, holes_supported

from zoo.runs.checkpoint import (
    CheckpointCorruptError,
    Checkpointer,
    CheckpointError,
    chunk_plan,
)


def _state(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "learner": {
            "w": jnp.asarray(rng.normal(size=(7, 5)).astype(np.float32)),
            "b": jnp.asarray(rng.normal(size=(5,)).astype(np.float32)),
            "step": jnp.asarray(seed + 3, jnp.int32),
        },
        "replay": {
            "frames": jnp.asarray(rng.integers(0, 255, size=(2, 50, 6, 5), dtype=np.uint8)),
            "valid": jnp.asarray(rng.random((2, 50)) < 0.5),
            "reward": jnp.asarray(rng.normal(size=(2, 50)).astype(np.float32)),
        },
    }


def _zeros_like(state: dict) -> dict:
    return jax.tree.map(jnp.zeros_like, state)


def _equal(a: dict, b: dict) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.mark.parametrize(
    ("shape", "itemsize", "budget"),
    [((2, 50, 6, 5), 1, 64), ((2, 50, 6, 5), 1, 7), ((3,), 4, 4), ((4, 3), 8, 1000), ((), 4, 1)],
)
@pytest.mark.unit
def test_plan_covers_the_array_in_c_order(shape, itemsize, budget):
    """Chunks, written one after another, are exactly the array's bytes in C order."""
    flat = np.arange(math.prod(shape)).reshape(shape)
    pieces = []
    for chunk in chunk_plan(shape, itemsize, budget):
        index = tuple([*chunk.prefix, slice(chunk.start, chunk.start + chunk.size)][: len(shape)])
        piece = flat[index] if shape else flat
        row_bytes = math.prod(chunk.shape(shape)[len(chunk.prefix) + 1 :]) * itemsize
        assert chunk.size == 1 or chunk.size * row_bytes <= budget
        pieces.append(np.asarray(piece).reshape(-1))
    assert np.array_equal(np.concatenate(pieces), flat.reshape(-1))


@pytest.mark.compiled
def test_round_trip_restores_in_place(tmp_path: Path):
    state = _state()
    ck = Checkpointer(tmp_path / "ck", chunk_bytes=64)
    ck.save(10, state, {"env_steps": 10})
    files = sorted(p.name for p in (tmp_path / "ck" / "10" / "replay").iterdir())
    assert "manifest.json" in files and "00000.npy" in files
    # the files are plain .npy: numpy reads them without zoo
    manifest = json.loads((tmp_path / "ck" / "10" / "replay" / "manifest.json").read_text())
    frames = next(e for e in manifest["arrays"] if e["key"].endswith("'frames']"))
    on_disk = np.load(tmp_path / "ck" / "10" / "replay" / frames["file"], mmap_mode="r")
    assert np.array_equal(on_disk, np.asarray(state["replay"]["frames"]))

    template = _zeros_like(state)
    restored, meta = ck.restore(template)
    assert meta == {"env_steps": 10}
    assert _equal(restored, state)
    # the template's buffers were donated and filled (a resumed run holds one replay)
    assert template["replay"]["frames"].is_deleted()
    ck.close()


@pytest.mark.compiled
def test_restore_accepts_shape_templates_and_only_named_items(tmp_path: Path):
    state = _state(1)
    ck = Checkpointer(tmp_path / "ck", chunk_bytes=100)
    ck.save(5, state)
    shapes = {
        "learner": jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state["learner"])
    }
    restored, _ = ck.restore(shapes)
    assert set(restored) == {"learner"}
    assert _equal(restored["learner"], state["learner"])
    ck.close()


def _flip_byte(path: Path, offset_from_end: int = 1) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


def _leaf_file(step_dir: Path, item: str, suffix: str) -> Path:
    manifest = json.loads((step_dir / item / "manifest.json").read_text())
    entry = next(e for e in manifest["arrays"] if e["key"].endswith(suffix))
    return step_dir / item / entry["file"]


@pytest.mark.parametrize(("item", "suffix"), [("replay", "'frames']"), ("learner", "'w']")])
@pytest.mark.unit
def test_flipped_byte_is_detected_and_older_checkpoint_used(tmp_path: Path, item, suffix):
    ck = Checkpointer(tmp_path / "ck", chunk_bytes=64)
    old, new = _state(1), _state(2)
    ck.save(1, old, {"env_steps": 1})
    ck.save(2, new, {"env_steps": 2})
    _flip_byte(_leaf_file(tmp_path / "ck" / "2", item, suffix))

    with pytest.raises(CheckpointCorruptError, match=r"checkpoint 2 \(" + item + r"\).*checksum"):
        ck.restore(_zeros_like(new))

    restored, meta, step, skipped = ck.restore_intact(_zeros_like(new))
    assert step == 1 and meta == {"env_steps": 1}
    assert [s for s, _ in skipped] == [2] and "checksum mismatch" in skipped[0][1]
    assert _equal(restored, old)
    ck.close()


@pytest.mark.unit
def test_truncated_and_missing_files_are_corrupt(tmp_path: Path):
    ck = Checkpointer(tmp_path / "ck", chunk_bytes=64)
    ck.save(3, _state())
    path = _leaf_file(tmp_path / "ck" / "3", "replay", "'frames']")
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CheckpointCorruptError, match="truncated"):
        ck.restore(_zeros_like(_state()))
    path.unlink()
    with pytest.raises(CheckpointCorruptError, match="missing"):
        ck.restore(_zeros_like(_state()))
    with pytest.raises(CheckpointCorruptError, match="every checkpoint is damaged"):
        ck.restore_intact(_zeros_like(_state()))
    ck.close()


@pytest.mark.compiled
def test_structure_mismatch_is_one_line(tmp_path: Path):
    ck = Checkpointer(tmp_path / "ck", chunk_bytes=64)
    ck.save(4, _state())
    other = _zeros_like(_state())
    other["learner"]["w"] = jnp.zeros((7, 6), jnp.float32)
    with pytest.raises(CheckpointError) as info:
        ck.restore(other)
    message = str(info.value)
    assert "\n" not in message
    assert "['w']" in message and "float32[7, 5]" in message and "float32[7, 6]" in message
    other = _zeros_like(_state())
    other["learner"]["extra"] = jnp.zeros((2,))
    with pytest.raises(CheckpointError, match=r"has .*'extra'.* which the checkpoint lacks"):
        ck.restore(other)
    ck.close()


@pytest.mark.compiled
def test_equinox_modules_round_trip(tmp_path: Path):
    """A learner state with static fields (an Equinox module) restores with them intact."""
    model = eqx.nn.MLP(3, 2, 8, 1, key=jax.random.PRNGKey(0))
    ck = Checkpointer(tmp_path / "ck", chunk_bytes=32)
    ck.save(1, {"learner": model})
    template = eqx.nn.MLP(3, 2, 8, 1, key=jax.random.PRNGKey(1))
    restored, _ = ck.restore({"learner": template})
    x = jnp.arange(3.0)
    assert np.allclose(restored["learner"](x), model(x))
    ck.close()


@pytest.mark.compiled
def test_a_partly_filled_replay_takes_the_disk_of_what_it_holds(tmp_path: Path):
    """All-zero pieces are holes: a tenth-filled replay's frames file is its full size, reads
    back byte for byte (checksummed, and by numpy alone), and occupies about a tenth of it;
    ``-0.0`` (a non-zero byte pattern) and a trailing hole survive the round trip."""
    frames = np.zeros((2, 1000, 32, 32), np.uint8)  # 2 MiB, 1 KiB a transition
    frames[:, :100] = np.random.default_rng(0).integers(1, 255, (2, 100, 32, 32), np.uint8)
    negative_zero = np.zeros(40_000, np.float32)
    negative_zero[:20_000] = -0.0
    state = {"replay": {"frames": jnp.asarray(frames), "reward": jnp.asarray(negative_zero)}}
    ck = Checkpointer(tmp_path / "ck", chunk_bytes=64 * 2**10)
    ck.save(1, state)
    path = _leaf_file(tmp_path / "ck" / "1", "replay", "'frames']")
    header = json.loads((path.parent / "manifest.json").read_text())["arrays"][0]["offset"]
    assert path.stat().st_size == header + frames.nbytes  # the trailing hole is in the size
    assert np.array_equal(np.load(path, mmap_mode="r"), frames)
    if holes_supported(tmp_path):
        # 2 × 100 KiB filled fall in five of the 32 pieces of 64 KiB (2 in env 0's rows, 3 in
        # env 1's, which start at 1,000 KiB); with the file system's block rounding, under six
        used = disk_bytes(path)
        assert 2 * 100 * 2**10 <= used < 6 * 64 * 2**10, used
    restored, _ = ck.restore(_zeros_like(state))
    assert _equal(restored, state)
    reward = np.asarray(restored["replay"]["reward"])
    assert np.signbit(reward[:20_000]).all() and not np.signbit(reward[20_000:]).any()
    ck.close()
