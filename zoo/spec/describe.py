"""``zoo show``: a resolved spec as YAML, each field commented with its description."""

from __future__ import annotations

import yaml
from pydantic import BaseModel

__all__ = ["describe"]


def describe(spec: BaseModel) -> str:
    """The fully resolved YAML of ``spec``, each field commented with its description."""
    lines: list[str] = []
    _describe_into(spec, lines, 0)
    return "\n".join(lines) + "\n"


def _describe_into(model: BaseModel, lines: list[str], indent: int) -> None:
    pad = "  " * indent
    for field, info in type(model).model_fields.items():
        value = getattr(model, field)
        comment = f"  # {info.description}" if info.description else ""
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{field}:{comment}")
            _describe_into(value, lines, indent + 1)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            # a list of models (optimizer.groups): one block per item, its first line "- "
            lines.append(f"{pad}{field}:{comment}")
            for item in value:
                block: list[str] = []
                _describe_into(item, block, indent + 2)
                block[0] = f"{pad}  - {block[0].lstrip()}"
                lines.extend(block)
        else:
            text = yaml.safe_dump(
                value, default_flow_style=True, width=10_000, allow_unicode=True
            ).strip()
            text = text.removesuffix("\n...").removesuffix("...").strip()
            lines.append(f"{pad}{field}: {text}{comment}")
