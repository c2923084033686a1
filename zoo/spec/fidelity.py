"""``docs/fidelity.md``: every preset's values beside its sources', from the presets themselves.

Each row is one claim of a preset (``reference.sources``: the value, where it was read, and the
tag [V] checked in a source file, [R] recalled from the paper, [3P] a third-party transcription)
or one of its recorded differences (``reference.differences``), with the value the preset
resolves to. The document is rendered from the preset files, so it cannot drift from them:
``tests/test_fidelity_doc.py`` checks that the committed file equals :func:`fidelity_markdown`.
Regenerate it with::

    python -m zoo.spec.fidelity > docs/fidelity.md
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from zoo.spec.loading import algorithm_for, load_preset, preset_names

__all__ = ["VERDICTS", "fidelity_markdown", "fidelity_rows", "value_at"]

#: The verdict of a row by the tag its claim starts with, and of a recorded difference.
VERDICTS = {
    "[V]": "equal (checked in the source file)",
    "[R]": "unverified (recalled from the paper)",
    "[3P]": "unverified (a third party's transcription)",
    "difference": "**documented difference**",
}

_HEADER = """\
# Presets beside their sources

<!-- Generated from presets/*.yaml: python -m zoo.spec.fidelity > docs/fidelity.md
     (tests/test_fidelity_doc.py fails when this file is not current). -->

Every value a preset sets names where it comes from (`reference.sources`), and every way the
preset knowingly differs from its own source is recorded beside it (`reference.differences`,
printed by `zoo show PRESET`). This table renders both, preset by preset: the claim's field,
what the preset resolves it to, the source's value and file as the claim states it, and the
verdict: **equal** where the value was read in the source's own file at the level of the layer
or wrapper (framework defaults included: padding, initialisers, pooling, wrapper defaults),
**unverified** where it was recalled from a paper or taken from a third party, and
**documented difference** where the preset does something else, with why. Differences of a
preset's protocol from the code the protocol follows are in `docs/protocols.md`; those that are
also the preset's differences from its own source are listed here as `env.protocol.*`.

The layer-level audit of 2026-12-05 (issue 36) re-read every [V] claim against the cited file;
its tables, with file and line of each value, and what became of each difference it found, are
in [fidelity_audit.md](fidelity_audit.md).
"""


def value_at(model: Any, path: str) -> str:
    """The value at dotted ``path`` of a spec or preset as one line of YAML; ``—`` where the
    path leads nowhere (a field another component kind has, a setting that is no field)."""
    for part in path.split("."):
        if isinstance(model, list) and part.isdigit() and int(part) < len(model):
            model = model[int(part)]
        elif isinstance(model, dict) and part in model:
            model = model[part]
        elif hasattr(model, part) and not callable(getattr(model, part)):
            model = getattr(model, part)
        else:
            return "—"
    if hasattr(model, "model_dump"):
        model = model.model_dump()
    text = yaml.safe_dump(model, default_flow_style=True, width=10_000, allow_unicode=True)
    return text.strip().removesuffix("...").strip()


def _tag(text: str) -> str:
    return next((tag for tag in ("[V]", "[R]", "[3P]") if text.startswith(tag)), "[R]")


def fidelity_rows(name: str) -> list[tuple[str, str, str, str]]:
    """``(field, zoo value, source, verdict)`` for each claim and recorded difference of the
    preset ``name``."""
    preset = load_preset(name)
    resolved = algorithm_for(preset)
    rows = []
    for path, text in preset.reference.sources.items():
        owner = preset if path.split(".")[0] in ("env", "budget") else resolved
        tag = _tag(text)
        rows.append((path, value_at(owner, path), text.removeprefix(tag).strip(), VERDICTS[tag]))
    for setting, source, here, why in preset.differences():
        verdict = VERDICTS["difference"] + (f": {why}" if why else "")
        rows.append((setting, here, source, verdict))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def fidelity_markdown() -> str:
    """The whole of ``docs/fidelity.md``."""
    out = [_HEADER]
    unsourced = []
    for name in preset_names():
        preset = load_preset(name)
        rows = fidelity_rows(name)
        if not rows:
            unsourced.append(name)
            continue
        out.append(f"\n## `{name}`\n")
        source = preset.reference.source or preset.reference.paper or "—"
        out.append(f"{_cell(preset.summary)} Source: {_cell(' '.join(source.split()))}\n")
        out.append("| field | zoo value | source (file: value) | verdict |")
        out.append("|---|---|---|---|")
        for field, value, where, verdict in rows:
            out.append(f"| `{field}` | {_cell(value)} | {_cell(where)} | {_cell(verdict)} |")
    if unsourced:
        out.append("\n## Presets without a published source\n")
        out.append(
            "These claim no source value, so there is nothing to check against one: each says in "
            "its notes whose settings it takes (`zoo show PRESET`). "
            + ", ".join(f"`{name}`" for name in unsourced)
            + "."
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(fidelity_markdown())
