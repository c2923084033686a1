"""``zoo show``: a resolved spec as YAML, each field commented with its description."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import yaml
from pydantic import BaseModel

__all__ = ["describe"]


def describe(
    spec: BaseModel,
    *,
    hide: Collection[str] = (),
    marks: Mapping[str, str] | None = None,
    hidden: str = "not read by this algorithm, so not shown",
) -> str:
    """The fully resolved YAML of ``spec``, each field commented with its description.

    Args:
      spec: any model of the spec tree.
      hide: dotted paths of fields left out (with everything under them), e.g. the settings an
        algorithm never reads (:func:`zoo.spec.unused_settings`); one closing line names them.
      marks: dotted path -> a note put first in that field's comment (``zoo show`` of a preset
        marks the fields the preset sets, with the catalogue's value).
      hidden: what the closing line says of the hidden fields.
    """
    lines: list[str] = []
    _describe_into(spec, lines, 0, "", frozenset(hide), dict(marks or {}))
    if hide:
        lines.append(f"# {hidden}: {', '.join(sorted(hide))}")
    return "\n".join(lines) + "\n"


def _describe_into(
    model: BaseModel,
    lines: list[str],
    indent: int,
    prefix: str,
    hide: frozenset[str],
    marks: dict[str, str],
) -> None:
    pad = "  " * indent
    for field, info in type(model).model_fields.items():
        path = f"{prefix}{field}"
        if path in hide:
            continue
        value = getattr(model, field)
        notes = [text for text in (marks.get(path), info.description) if text]
        comment = f"  # {'; '.join(notes)}" if notes else ""
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{field}:{comment}")
            _describe_into(value, lines, indent + 1, f"{path}.", hide, marks)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            # a list of models (optimizer.groups): one block per item, its first line "- "
            lines.append(f"{pad}{field}:{comment}")
            for i, item in enumerate(value):
                block: list[str] = []
                _describe_into(item, block, indent + 2, f"{path}.{i}.", hide, marks)
                block[0] = f"{pad}  - {block[0].lstrip()}"
                lines.extend(block)
        else:
            text = yaml.safe_dump(
                _plain(value), default_flow_style=True, width=10_000, allow_unicode=True
            ).strip()
            text = text.removesuffix("\n...").removesuffix("...").strip()
            lines.append(f"{pad}{field}: {text}{comment}")


def _plain(value: object) -> object:
    """``value`` with every model in it (a mapping of models, ``reference.differences``) as its
    fields, for YAML."""
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
