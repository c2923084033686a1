"""Files of specs: where the shipped catalogue and presets live, and strict YAML reading
(duplicate keys, non-mapping documents and absurd nesting are errors that name the file)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from zoo.fileio import UnsafeFileError, read_text
from zoo.spec.errors import Problem, SpecError, problem

__all__ = [
    "MAX_NESTING",
    "TOO_DEEP",
    "catalogue_path",
    "data_dir",
    "is_package_data",
    "package_data_dir",
    "parse_yaml",
    "presets_dir",
    "read_entries",
    "read_yaml",
    "too_deep",
]


def package_data_dir() -> Path:
    """The wheel's package data folder (``zoo/_data``; absent in a source checkout)."""
    return Path(__file__).resolve().parent.parent / "_data"


def is_package_data(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is package data of an installed (not editable) zoo."""
    return package_data_dir() in Path(path).resolve().parents


def data_dir() -> Path:
    """Where `algorithms.yaml` and `presets/` live: the wheel's package data, else the repo."""
    packaged = package_data_dir()
    if (packaged / "algorithms.yaml").exists():
        return packaged
    return Path(__file__).resolve().parent.parent.parent


def catalogue_path() -> Path:
    """Path of the shipped `algorithms.yaml`."""
    return data_dir() / "algorithms.yaml"


def presets_dir() -> Path:
    """Path of the shipped `presets/` folder."""
    return data_dir() / "presets"


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe loader that refuses duplicate mapping keys instead of keeping the last silently."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=True)
    return out


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# YAML 1.2's floats: PyYAML follows YAML 1.1, where an exponent needs a dot and a sign (`1.0e-4`)
# and `1e-4`, `3e5` or `1E+3` are strings, which a schedule field would then read as an unknown
# kind. These forms are floats in YAML 1.2, JSON and Python, and here.
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """One YAML document with the safe loader, YAML 1.2's number forms and duplicate keys
    refused (:class:`yaml.YAMLError` for malformed text)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def read_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML mapping with a safe loader; errors become :class:`SpecError`."""
    path = Path(path)
    try:
        text = read_text(path, what="spec file")
    except FileNotFoundError:
        raise problem(str(path), None, "", "no such file") from None
    except UnsafeFileError as e:
        raise problem(str(path), None, "", str(e).removeprefix(f"{path} ")) from None
    except (OSError, UnicodeDecodeError) as e:
        raise problem(str(path), None, "", f"cannot read the file: {e}") from None
    try:
        data = parse_yaml(text)
    except RecursionError:
        raise problem(str(path), None, "", TOO_DEEP) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(e, "problem", None) or str(e)
        context = getattr(e, "context", None)
        message = f"malformed YAML: {where}{what}" + (f" ({context})" if context else "")
        raise problem(str(path), None, "", message) from None
    if data is None or data == {}:
        raise problem(
            str(path),
            None,
            "",
            "the file holds no entries (it is empty or all comments): write at least one "
            "`NAME: {algorithm: ..., overrides: ...}` entry, or name another file",
        )
    if too_deep(data):
        raise problem(str(path), None, "", TOO_DEEP)
    if not isinstance(data, dict):
        raise problem(
            str(path),
            None,
            "",
            f"expected a mapping of names to entries, got {type(data).__name__}",
        )
    return data


#: The deepest nesting of mappings and lists a spec file or an override may have (the specs'
#: own is 5); deeper input is refused before any recursive merge or validation sees it.
MAX_NESTING = 32
TOO_DEEP = (
    f"nested more than {MAX_NESTING} levels deep (or an anchor refers to itself); no spec needs "
    "that"
)


def too_deep(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether mappings and lists nest more than ``limit`` levels in ``value`` (or loop).

    Walks level by level, visiting each shared object (a YAML alias) once per level, so that
    neither a deep document nor an alias bomb makes it recurse or explode.
    """
    level = [value]
    for _ in range(limit + 1):
        deeper: dict[int, Any] = {}
        for node in level:
            children = (
                node.values()
                if isinstance(node, Mapping)
                else node
                if isinstance(node, list | tuple)
                else ()
            )
            for child in children:
                if isinstance(child, Mapping | list | tuple):
                    deeper[id(child)] = child
        if not deeper:
            return False
        level = list(deeper.values())
    return True


def read_entries(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The entries of an algorithms file; entry names must be strings."""
    data = read_yaml(path)
    bad = [key for key in data if not isinstance(key, str)]
    if bad:
        raise SpecError(
            [
                Problem(str(path), str(key), "", f"entry names must be strings; quote it: '{key}':")
                for key in bad
            ]
        )
    return data
