"""Loading specs: catalogue entries, algorithm files, presets, with ``extends:`` resolved and
overrides applied; every problem of every entry reported at once (:class:`SpecError`)."""

from __future__ import annotations

import copy
import fnmatch
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo import registry
from zoo.spec.algorithm import AlgorithmSpec
from zoo.spec.errors import Problem, SpecError, problem
from zoo.spec.files import catalogue_path, presets_dir, read_entries, read_yaml
from zoo.spec.overrides import OVERRIDES_SOURCE, apply_overrides, check_overrides, merge
from zoo.spec.presets import Preset
from zoo.spec.translate import validate

__all__ = [
    "MAX_EXTENDS_DEPTH",
    "PRESET_PREFIX",
    "algorithm_for",
    "algorithm_names",
    "is_preset",
    "load_algorithm",
    "load_algorithms_file",
    "load_preset",
    "looks_like_path",
    "preset_bases",
    "preset_names",
]


_ENTRY_META = {"extends"}


#: The longest ``extends:`` chain (entries, the entry itself included) a spec may have.
MAX_EXTENDS_DEPTH = 64


def _resolve(
    entries: Mapping[str, Any],
    name: str,
    source: str,
    cache: dict[tuple[str, str], tuple[dict[str, Any], int]] | None = None,
) -> dict[str, Any]:
    """The raw entry ``name`` of ``entries`` with its ``extends:`` chain merged in.

    The chain is walked iteratively (no recursion limit) and its depth is capped at
    :data:`MAX_EXTENDS_DEPTH`; ``cache`` maps ``(source, entry)`` to the merged entry and its
    depth, so that resolving every entry of a file is linear in the file's size.
    """
    cache = {} if cache is None else cache
    chain: list[tuple[tuple[str, str], dict[str, Any]]] = []
    seen: set[tuple[str, str]] = set()
    here_entries, here_source, here = entries, source, name
    base: dict[str, Any] = {}
    base_depth = 0
    while True:
        key = (here_source, here)
        if key in cache:
            base, base_depth = cache[key]
            break
        if key in seen:
            names = [n for (_, n), _ in chain]
            start = names.index(here) if here in names else 0
            cycle = " -> ".join([*names[start:], here])
            raise problem(source, name, "extends", f"cyclic extends: {cycle}")
        seen.add(key)
        raw = here_entries[here]
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise problem(
                here_source,
                here,
                "",
                f"an entry must be a mapping of fields, got {type(raw).__name__}",
            )
        chain.append((key, {k: v for k, v in raw.items() if k not in _ENTRY_META}))
        if len(chain) > MAX_EXTENDS_DEPTH:
            names = [n for (_, n), _ in chain]
            raise problem(
                source,
                name,
                "extends",
                f"the extends chain is more than {MAX_EXTENDS_DEPTH} entries deep "
                f"({' -> '.join(names[:3])} -> … -> {names[-1]} -> …); flatten it",
            )
        parent = raw.get("extends")
        if parent is None:
            break
        if not isinstance(parent, str):
            raise problem(here_source, here, "extends", f"must be an entry name, got {parent!r}")
        if parent in here_entries and parent != here:
            here = parent
            continue
        # a catalogue entry (a user entry may extend the catalogue entry of its own name)
        catalogue = _catalogue_raw()
        if parent not in catalogue:
            if parent == here:
                message = (
                    f"an entry cannot extend itself; {parent!r} may extend only a catalogue "
                    "entry of the same name, and the catalogue has none (`zoo list`)"
                )
            else:
                known = sorted((set(map(str, here_entries)) | set(catalogue)) - {here})
                hint = registry.suggest(parent, known)
                message = f"unknown entry {parent!r}" + (
                    f"; did you mean {hint!r}?" if hint else ""
                )
            raise problem(here_source, here, "extends", message)
        here_entries, here_source, here = catalogue, str(catalogue_path()), parent
    if base_depth + len(chain) > MAX_EXTENDS_DEPTH:
        raise problem(
            source,
            name,
            "extends",
            f"the extends chain is {base_depth + len(chain)} entries deep, more than "
            f"{MAX_EXTENDS_DEPTH}; flatten it",
        )
    merged = base
    for depth, (key, body) in enumerate(reversed(chain), start=base_depth + 1):
        merged = merge(merged, body)
        cache[key] = (merged, depth)
    return copy.deepcopy(merged)


_CATALOGUE_CACHE: dict[str, tuple[float, dict[str, Any]]] = {}


def _catalogue_raw() -> dict[str, Any]:
    path = catalogue_path()
    mtime = path.stat().st_mtime
    cached = _CATALOGUE_CACHE.get(str(path))
    if cached is None or cached[0] != mtime:
        _CATALOGUE_CACHE[str(path)] = (mtime, read_yaml(path))
    return _CATALOGUE_CACHE[str(path)][1]


def algorithm_names(pattern: str = "*") -> list[str]:
    """Catalogue entry names matching a shell-style wildcard."""
    return sorted(n for n in _catalogue_raw() if fnmatch.fnmatchcase(n, pattern))


def preset_names(pattern: str = "*") -> list[str]:
    """Shipped preset names matching a shell-style wildcard."""
    root = presets_dir()
    if not root.is_dir():
        return []
    return sorted(
        p.stem
        for p in root.glob("*.yaml")
        if not p.stem.startswith("_") and fnmatch.fnmatchcase(p.stem, pattern)
    )


def looks_like_path(ref: str) -> bool:
    """Whether an algorithm or preset reference is a file path (``x.yaml``, ``dir/x``,
    ``x.yaml:entry``) rather than a name."""
    return ref.endswith((".yaml", ".yml")) or "/" in ref or os.sep in ref or ".yaml:" in ref


def _split_ref(ref: str) -> tuple[str, str | None]:
    for suffix in (".yaml:", ".yml:"):
        if suffix in ref:
            path, _, name = ref.rpartition(":")
            return path, name
    return ref, None


def load_algorithms_file(
    path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None
) -> dict[str, AlgorithmSpec]:
    """Validate every entry of a YAML file; all problems of all entries in one SpecError."""
    source = str(path)
    entries = read_entries(path)
    specs: dict[str, AlgorithmSpec] = {}
    problems: list[Problem] = []
    cache: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
    for name in entries:
        try:
            specs[name] = _build_algorithm(entries, str(name), source, overrides, cache)
        except SpecError as e:
            problems.extend(e.problems)
    if problems:
        raise SpecError(problems)
    return specs


def _build_algorithm(
    entries: Mapping[str, Any],
    name: str,
    source: str,
    overrides: Mapping[str, Any] | None,
    cache: dict[tuple[str, str], tuple[dict[str, Any], int]] | None = None,
) -> AlgorithmSpec:
    base = _resolve(entries, name, source, cache)
    if overrides:
        check_overrides(overrides)
    try:
        raw = apply_overrides(base, overrides)
    except (TypeError, AttributeError) as e:
        raise problem(OVERRIDES_SOURCE, name, "", f"cannot apply overrides: {e}") from None
    raw["name"] = name
    try:
        return validate(AlgorithmSpec, raw, source, name)
    except SpecError as e:
        if not overrides:
            raise
        # The entry alone may be valid: then every problem is the overrides' (--set), not the
        # file's, and the message must say so rather than blame the file
        try:
            validate(AlgorithmSpec, {**base, "name": name}, source, name)
        except SpecError:
            raise e from None
        raise SpecError(
            [Problem(OVERRIDES_SOURCE, p.entry, p.path, p.message) for p in e.problems]
        ) from None


def load_algorithm(
    ref: str | os.PathLike[str] | AlgorithmSpec,
    overrides: Mapping[str, Any] | None = None,
) -> AlgorithmSpec:
    """Load a catalogue entry by name, or an entry of a YAML file.

    Args:
      ref: a catalogue name (``"mdqn"``), a path (``"mine.yaml"``, which must hold one entry),
        ``"mine.yaml:name"`` for one of several, or an already built spec.
      overrides: dotted (``{"loss.n_step": 3}``) or nested overrides, validated with the rest.

    Raises:
      SpecError: naming the file, entry, field path, bad value and allowed values.
    """
    if isinstance(ref, AlgorithmSpec):
        if not overrides:
            return ref
        check_overrides(overrides)
        data = apply_overrides(ref.model_dump(mode="json", serialize_as_any=True), overrides)
        return validate(AlgorithmSpec, data, "--set", ref.name)
    ref = str(ref)
    if looks_like_path(ref):
        path, name = _split_ref(ref)
        entries = read_entries(path)
        if name is None:
            if len(entries) != 1:
                names = ", ".join(map(str, entries)) or "(none)"
                raise problem(
                    path,
                    None,
                    "",
                    f"holds {len(entries)} entries ({names}); pick one as {path}:NAME",
                )
            name = str(next(iter(entries)))
        if name not in entries:
            hint = registry.suggest(name, list(map(str, entries)))
            raise problem(
                path,
                name,
                "",
                "no such entry"
                + (f"; did you mean {hint!r}?" if hint else "")
                + f". Entries: {', '.join(map(str, entries))}.",
            )
        return _build_algorithm(entries, name, path, overrides)
    catalogue = _catalogue_raw()
    if ref not in catalogue:
        hint = registry.suggest(ref, list(catalogue))
        raise problem(
            "algorithms.yaml",
            None,
            "",
            f"unknown algorithm {ref!r}"
            + (f"; did you mean {hint!r}?" if hint else "")
            + " (`zoo list` shows them all; a path to a YAML file also works)",
        )
    return _build_algorithm(catalogue, ref, str(catalogue_path()), overrides)


PRESET_PREFIX = "preset:"
"""``preset:NAME`` always names the shipped preset ``NAME``, also where a catalogue entry has
the same name (``c51``, ``qr_dqn``, ``rainbow``, ``r2d2``, ...: the bare name is the entry)."""


def is_preset(ref: str | os.PathLike[str]) -> bool:
    """Whether ``ref`` names a preset: ``preset:NAME``, a shipped preset that is not also a
    catalogue name, or a YAML file of preset form (a top-level ``algorithm:`` naming an entry)."""
    ref = str(ref)
    if ref.startswith(PRESET_PREFIX):
        return True
    if not looks_like_path(ref):
        return ref in preset_names() and ref not in algorithm_names()
    path, name = _split_ref(ref)
    if name is not None or not Path(path).is_file():
        return False
    return isinstance(read_yaml(path).get("algorithm"), str)


def load_preset(ref: str | os.PathLike[str]) -> Preset:
    """Load a shipped preset by name (or ``preset:NAME``) or a preset file by path; its
    algorithm is validated too."""
    ref = str(ref)
    named = ref.startswith(PRESET_PREFIX)
    ref = ref.removeprefix(PRESET_PREFIX)
    if looks_like_path(ref) and not named:
        path = Path(ref)
    else:
        path = presets_dir() / f"{ref}.yaml"
        if not path.exists():
            hint = registry.suggest(ref, preset_names())
            raise problem(
                "presets/",
                None,
                "",
                f"unknown preset {ref!r}"
                + (f"; did you mean {hint!r}?" if hint else "")
                + " (`zoo list presets` shows them all)",
            )
    raw = _preset_raw(path, ())
    raw["name"] = path.stem
    preset = validate(Preset, raw, str(path), path.stem)
    algorithm_for(preset, source=str(path))
    return preset


def _preset_raw(path: Path, stack: tuple[Path, ...]) -> dict[str, Any]:
    """A preset file's mapping with its ``extends:`` chain (other presets) merged in.

    A preset may extend another preset by name (looked up beside it, then among the shipped
    ones); files whose names start with ``_`` are bases, not listed by ``zoo list presets``.
    """
    if path in stack:
        chain = " -> ".join(p.stem for p in (*stack, path))
        raise problem(str(stack[0]), stack[0].stem, "extends", f"cyclic extends: {chain}")
    if len(stack) >= MAX_EXTENDS_DEPTH:
        raise problem(
            str(stack[0]),
            stack[0].stem,
            "extends",
            f"the extends chain is deeper than {MAX_EXTENDS_DEPTH} presets; flatten it",
        )
    raw = read_yaml(path)
    parent = raw.pop("extends", None)
    if parent is None:
        return raw
    candidates = [path.parent / f"{parent}.yaml", presets_dir() / f"{parent}.yaml"]
    found = next((c for c in candidates if c.exists()), None)
    if found is None:
        hint = registry.suggest(str(parent), preset_names("*") + preset_bases())
        raise problem(
            str(path),
            path.stem,
            "extends",
            f"unknown preset {parent!r}" + (f"; did you mean {hint!r}?" if hint else ""),
        )
    return merge(_preset_raw(found, (*stack, path)), raw)


def preset_bases() -> list[str]:
    """Shipped preset bases (``presets/_*.yaml``), which other presets extend."""
    root = presets_dir()
    return sorted(p.stem for p in root.glob("_*.yaml")) if root.is_dir() else []


def algorithm_for(preset: Preset, source: str | None = None) -> AlgorithmSpec:
    """The preset's algorithm with its overrides applied and validated."""
    try:
        return load_algorithm(preset.algorithm, overrides=preset.overrides)
    except SpecError as e:
        if source is None:
            raise
        raise SpecError(
            [
                Problem(source, p.entry, f"overrides: {p.path}" if p.path else "", p.message)
                for p in e.problems
            ]
        ) from None
