"""Deep merging (``extends:``) and dotted overrides (``--set loss.n_step=3``)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from zoo.spec.errors import problem
from zoo.spec.files import MAX_NESTING, TOO_DEEP, parse_yaml, too_deep

__all__ = ["OVERRIDES_SOURCE", "apply_overrides", "check_overrides", "merge", "parse_overrides"]

#: The source named by problems that dotted overrides (``--set KEY=VALUE``) cause.
OVERRIDES_SOURCE = "--set"


def merge(base: Any, child: Any) -> Any:
    """Deep merge: mappings merge key by key, everything else (lists too) replaces.

    A bare component name counts as ``{kind: name}``; a child naming another ``kind`` replaces
    the base component whole, so the old kind's parameters never leak into the new one.
    """
    if isinstance(base, str) and isinstance(child, Mapping):
        base = {"kind": base}
    if not (isinstance(base, Mapping) and isinstance(child, Mapping)):
        return copy.deepcopy(child)
    if "kind" in child and "kind" in base and base["kind"] != child["kind"]:
        return copy.deepcopy(dict(child))
    out = dict(copy.deepcopy(base))
    for key, value in child.items():
        out[key] = merge(out[key], value) if key in out else copy.deepcopy(value)
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Parse ``["loss.n_step=3", "network.head={kind: quantile}"]``; values are YAML."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise problem("--set", None, item, "expected KEY=VALUE, e.g. loss.n_step=3")
        try:
            value = parse_yaml(text) if text.strip() else None
        except RecursionError:
            raise problem("--set", None, key.strip(), TOO_DEEP) from None
        except yaml.YAMLError as e:
            raise problem(
                "--set", None, key.strip(), f"malformed YAML value {text!r}: {e}"
            ) from None
        out[key.strip()] = value
    check_overrides(out)
    return out


def check_overrides(overrides: Mapping[str, Any]) -> None:
    """Refuse overrides nested (by dots or by value) deeper than :data:`MAX_NESTING`."""
    for key, value in overrides.items():
        if str(key).count(".") >= MAX_NESTING or too_deep(value):
            shown = str(key) if len(str(key)) <= 60 else str(key)[:57] + "..."
            raise problem(OVERRIDES_SOURCE, None, shown, TOO_DEEP)


def _nest(dotted: Mapping[str, Any]) -> dict[str, Any]:
    """``{"loss.n_step": 3}`` → ``{"loss": {"n_step": 3}}`` (later keys merge into earlier)."""
    out: dict[str, Any] = {}
    for key, value in dotted.items():
        parts = str(key).split(".")
        node: dict[str, Any] = {}
        cursor = node
        for part in parts[:-1]:
            cursor[part] = {}
            cursor = cursor[part]
        cursor[parts[-1]] = value
        out = merge(out, node)
    return out


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Deep-merge dotted or nested ``overrides`` into a raw entry."""
    if not overrides:
        return dict(raw)
    return merge(dict(raw), _nest(overrides))
