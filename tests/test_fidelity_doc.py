"""``docs/fidelity.md`` is current, and says what each preset claims and where it differs.

The document is rendered from the preset files (zoo/spec/fidelity.py); rendering it from them
keeps the two from drifting, as docs/protocols.md is kept beside the protocols.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import zoo
from zoo.spec.fidelity import VERDICTS, fidelity_markdown, fidelity_rows, value_at

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[1] / "docs" / "fidelity.md"


def test_committed_fidelity_doc_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == fidelity_markdown(), (
        "docs/fidelity.md is stale: python -m zoo.spec.fidelity > docs/fidelity.md"
    )


def test_every_claim_and_difference_of_every_preset_is_a_row() -> None:
    text = fidelity_markdown()
    for name in zoo.preset_names():
        preset = zoo.load_preset(name)
        rows = fidelity_rows(name)
        assert len(rows) == len(preset.reference.sources) + len(preset.differences())
        if rows:
            assert f"\n## `{name}`\n" in text
        else:  # every preset is in the document, those with nothing to check by name
            assert f"`{name}`" in text.split("## Presets without a published source")[1]
        fields = [row[0] for row in rows]
        for setting, *_ in preset.differences():
            assert setting in fields


def test_rows_carry_the_resolved_value_and_the_verdict_of_the_tag() -> None:
    rows = {row[0]: row for row in fidelity_rows("dqn_adam_mse")}
    _, value, source, verdict = rows["network.torso"]
    assert value == "{kind: nature_cnn, norm: none, padding: SAME}"
    assert "Flax's default 'SAME'" in source and verdict == VERDICTS["[V]"]
    _, here, source, verdict = rows["env.protocol.noop_max"]
    assert verdict.startswith(VERDICTS["difference"]) and "envpool noop_max=1" in here
    recalled = {row[0]: row for row in fidelity_rows("der")}
    assert recalled["network.torso"][3] == VERDICTS["[V]"]
    assert value_at(zoo.load_algorithm("dqn"), "network.hidden") == "[512]"
    assert value_at(zoo.load_algorithm("dqn"), "network.torso.channels") == "—"
