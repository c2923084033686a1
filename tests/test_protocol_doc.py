"""``docs/protocols.md`` is current: it equals what the protocol objects render.

The document prints every Atari protocol's settings beside its source's (zoo/envs/protocols.py,
``Protocol.source_settings``); rendering it from the objects keeps the two from drifting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import zoo.envs as ze
from zoo.envs.protocol_doc import protocols_markdown, zoo_value

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocols.md"


def test_committed_protocol_doc_is_current():
    expected = protocols_markdown()
    assert DOC.read_text(encoding="utf-8") == expected, (
        "docs/protocols.md is stale: python -m zoo.envs.protocol_doc > docs/protocols.md"
    )


def test_every_atari_setting_and_difference_is_in_the_doc():
    text = protocols_markdown()
    for protocol in ze.PROTOCOLS.values():
        if protocol.suite != "atari":
            assert f"`{protocol.name}` ({protocol.suite})" in text
            continue
        section = text.split(f"## `{protocol.name}`")[1].split("\n## ")[0]
        rows = [line for line in section.splitlines() if line.startswith("| `")]
        assert len(rows) == len(protocol.source_settings)
        for row, entry in zip(rows, protocol.source_settings, strict=True):
            assert row.startswith(f"| `{entry.setting}` |")
            assert row.endswith("**differs** [V] |" if not entry.matches else "[V] |") or (
                not entry.verified and row.endswith("[R] |")
            )
        listed = ", ".join(f"`{d}`" for d in protocol.differences) or "none"
        assert f"Differences: {listed}." in section


def test_zoo_values_render_the_fields():
    nature = ze.get_protocol("nature_2015")
    by_name = {s.setting: s for s in nature.source_settings}
    assert zoo_value(nature, by_name["reward_clip"]) == "±1"
    assert zoo_value(nature, by_name["frame_shape"]) == "84×84"
    assert zoo_value(nature, by_name["max_episode_frames"]).startswith("108,000 frames (27,000")
    assert zoo_value(nature, by_name["life_loss_terminal"]) == "yes"
    r2d2 = ze.get_protocol("r2d2_2019")
    assert zoo_value(r2d2, {s.setting: s for s in r2d2.source_settings}["reward_clip"]) == "none"
