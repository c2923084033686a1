"""Pydantic's validation errors as readable problems: the field path as the user wrote it, the
bad value, the allowed values (the registered user components of an axis included) and the
closest valid name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic
from pydantic import BaseModel

from zoo import registry
from zoo.spec.base import axis_paths
from zoo.spec.errors import Problem, SpecError

__all__ = ["validate"]


def validate(model: type[BaseModel], data: dict[str, Any], source: str, entry: str) -> Any:
    """``model.model_validate(data)``, its errors as a :class:`SpecError` naming ``source``,
    ``entry``, each field path, the bad value, the allowed values and the closest valid name."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        raise SpecError(_problems_from(e, model, data, source, entry)) from None


def _problems_from(
    error: pydantic.ValidationError,
    model: type[BaseModel],
    data: Any,
    source: str,
    entry: str,
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for err in error.errors(include_url=False):
        path_parts, node = _clean_loc(err["loc"], data)
        path = ".".join(str(p) for p in path_parts)
        kind, ctx, msg = err["type"], err.get("ctx") or {}, err["msg"]
        value = err.get("input")
        if kind == "value_error" and "@" in msg:
            for line in msg.removeprefix("Value error, ").splitlines():
                sem_path, _, sem_msg = line.partition("@ ")
                problems.append(Problem(source, entry, sem_path.strip("@"), sem_msg))
            continue
        if kind == "extra_forbidden":
            field = str(path_parts[-1]) if path_parts else "?"
            allowed = _allowed_keys(model, path_parts[:-1], data)
            hint = registry.suggest(field, allowed)
            text = f"unknown field {field!r}"
            text += f"; did you mean {hint!r}?" if hint else ""
            text += f" Allowed: {', '.join(allowed)}." if allowed else ""
            path = ".".join(str(p) for p in path_parts)
        elif kind in ("union_tag_invalid", "literal_error"):
            expected = _expected(ctx, model, path_parts, kind)
            bad = ctx.get("tag", value)
            hint = registry.suggest(str(bad), expected)
            text = f"unknown value {bad!r}"
            text += f"; did you mean {hint!r}?" if hint else ""
            text += f" Allowed: {', '.join(expected)}." if expected else ""
        elif kind == "union_tag_not_found":
            text = f"needs a `kind` ({', '.join(_expected(ctx, model, path_parts, kind))})"
        elif kind == "missing":
            text = "required field is missing"
        else:
            msg = msg.removeprefix("Value error, ")
            text = f"{msg} (got {value!r})" if not isinstance(value, dict | list) else msg
        key = f"{path}|{text}"
        if key not in seen:
            seen.add(key)
            problems.append(Problem(source, entry, path, text))
        del node
    return problems


def _clean_loc(loc: tuple[Any, ...], data: Any) -> tuple[list[Any], Any]:
    """Drop the union tags and validator names Pydantic puts in error locations."""
    parts: list[Any] = []
    node = data
    for item in loc:
        if isinstance(item, str) and item.startswith("function-"):
            continue
        if isinstance(node, str):  # bare component name: its fields live under {kind: name}
            node = {"kind": node}
        if isinstance(node, Mapping):
            if item in node:
                parts.append(item)
                node = node[item]
                continue
            if node.get("kind") == item:
                continue  # the discriminator tag of a union member
            if isinstance(item, str) and item in ("constant", "linear", "exponential", "kind"):
                if item == "kind":
                    parts.append(item)
                continue
        elif isinstance(node, list) and isinstance(item, int):
            parts.append(item)
            node = node[item] if item < len(node) else None
            continue
        if isinstance(node, int | float) and item in ("constant", "value"):
            continue  # a bare number is a constant schedule: its error is the number's
        parts.append(item)
        node = None
    return parts, node


def _model_at(model: Any, parts: list[Any], data: Any) -> Any:
    """The model class that validates the mapping at ``parts`` of ``data`` (best effort)."""
    node = data
    for part in parts:
        if isinstance(part, int):
            return None
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        annotation = fields[part].annotation
        node = node.get(part) if isinstance(node, Mapping) else None
        model = _pick_member(annotation, node)
    return model


def _pick_member(annotation: Any, node: Any) -> Any:
    members = _flatten_annotation(annotation)
    kind = node.get("kind") if isinstance(node, Mapping) else node
    for m in members:
        if isinstance(m, type) and issubclass(m, BaseModel):
            tag = m.model_fields.get("kind")
            if tag is None or tag.default == kind:
                return m
    return None


def _flatten_annotation(annotation: Any) -> list[Any]:
    origin_args = getattr(annotation, "__args__", None)
    metadata = getattr(annotation, "__origin__", None)
    if metadata is not None and hasattr(annotation, "__metadata__"):
        return _flatten_annotation(metadata)
    if origin_args:
        out: list[Any] = []
        for a in origin_args:
            out.extend(_flatten_annotation(a))
        return out
    return [annotation]


def _allowed_keys(model: Any, parts: list[Any], data: Any) -> list[str]:
    found = _model_at(model, parts, data)
    return sorted(found.model_fields) if found is not None else []


def _expected(ctx: Mapping[str, Any], model: Any, parts: list[Any], kind: str) -> list[str]:
    tags = ctx.get("expected_tags") or ctx.get("expected") or ""
    names = [t.strip().strip("'\"") for t in str(tags).replace(" or ", ",").split(",") if t.strip()]
    axis = _axis_of(model, parts)
    if axis is not None:
        names = sorted(set(names) | set(registry.names(axis, load=False)))
    return names


def _axis_of(model: Any, parts: list[Any]) -> str | None:
    strs = tuple(p for p in parts if p != "kind")
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    for prefix, axis_name in axis_paths(model).items():
        if strs[: len(prefix)] == prefix and len(strs) <= len(prefix) + 1:
            return axis_name
    return None
