"""``docs/protocols.md``: every Atari protocol's settings beside its source's, from the objects.

The document is rendered from :data:`zoo.envs.PROTOCOLS` (each protocol's
:attr:`~zoo.envs.Protocol.source_settings`), so it cannot drift from the code:
``tests/test_protocol_doc.py`` checks that the committed file equals :func:`protocols_markdown`.
Regenerate it with::

    python -m zoo.envs.protocol_doc > docs/protocols.md
"""

from __future__ import annotations

import sys
from typing import Any

from zoo.envs.protocols import ASPECTS, PROTOCOLS, Protocol, SourceSetting

__all__ = ["protocols_markdown", "zoo_value"]

_HEADER = """\
# Atari protocols beside their sources

<!-- Generated from zoo/envs/protocols.py: python -m zoo.envs.protocol_doc > docs/protocols.md
     (tests/test_protocol_doc.py fails when this file is not current). -->

A protocol (`zoo.envs.Protocol`) fixes every environment setting of a published evaluation, and a
preset runs the protocol its reference series was produced with. Below, each Atari protocol's
settings stand beside the value of the source it follows, with the file the value was read in.
A row marked **differs** is a difference that remains; its name is listed in the protocol's
`differences` (printed by `zoo show`, recorded in each run's `provenance.json` and under the
comparison table of `zoo compare`). Tags: [V] read in the source file, [R] recalled from the paper
and not checked here. Source files are cited as `owner/repository path`; the trees read were
deepmind/dqn_zoo at commit f87bb1f, google/dopamine (with its history from 2018), sail-sg/envpool
(envpool 1.2.5 is what runs) and Farama-Foundation/Arcade-Learning-Environment.

How zoo implements the settings (`zoo/envs/core.py`): envpool plays whole games (its
`episodic_life` is never set: it would run 1–`noop_max` no-op frames after each lost life in a
step whose action is dropped); zoo reads `info["lives"]` and, where the protocol says so, marks
the step that loses a life terminal in training (`life_loss_terminal`) and restarts the agent's
frame stack there (`life_loss_resets_stack`). Stacks hold zeros before the first frame of a game
(or of a life, where the stack restarts), in the actor's observation and in the replay's rebuilt
stacks alike.
"""

_ASPECT_TITLE = "## Named aspects"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def zoo_value(protocol: Protocol, entry: SourceSetting) -> str:
    """What zoo does for one source setting, in words (the entry's own text, else the field's)."""
    if entry.zoo_value is not None:
        return entry.zoo_value
    value: Any = getattr(protocol, entry.setting)
    if entry.setting == "max_episode_frames":
        if value is None:
            return "the environment's own"
        return f"{value:,} frames ({protocol.max_episode_steps:,} agent steps), then truncated"
    if entry.setting == "reward_clip":
        return "none" if value is None else f"±{value:g}"
    if entry.setting == "frame_shape":
        return "—" if value is None else "×".join(map(str, value))
    if entry.setting == "full_action_set":
        return "all 18 actions" if value else "the game's minimal set"
    if entry.setting == "noop_max":
        return f"uniform 1–{value} no-op frames at each game start" if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _protocol_section(protocol: Protocol) -> list[str]:
    lines = [f"## `{protocol.name}`", "", protocol.description + ".", ""]
    lines += [f"- {source}" for source in protocol.sources]
    differences = ", ".join(f"`{d}`" for d in protocol.differences) or "none"
    lines += ["", f"Differences: {differences}.", ""]
    lines.append("| setting | zoo | source | source file | |")
    lines.append("|---|---|---|---|---|")
    for entry in protocol.source_settings:
        verdict = "same" if entry.matches else "**differs**"
        tag = "[V]" if entry.verified else "[R]"
        cells = (
            f"`{entry.setting}`",
            _escape(zoo_value(protocol, entry)),
            _escape(entry.source_value),
            _escape(entry.source),
            f"{verdict} {tag}",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def protocols_markdown() -> str:
    """The whole of ``docs/protocols.md``."""
    atari = [p for p in PROTOCOLS.values() if p.suite == "atari"]
    lines = [_HEADER, "## Summary", ""]
    lines.append("| protocol | sticky | actions | no-op starts | lost life | differences |")
    lines.append("|---|---|---|---|---|---|")
    for p in atari:
        life = "terminal (training)" if p.life_loss_terminal else "no signal"
        if p.life_loss_resets_stack:
            life += ", stack restarts"
        noops = f"1–{p.noop_max} frames" if p.noop_max else "none"
        actions = "full (18)" if p.full_action_set else "minimal"
        differences = ", ".join(f"`{d}`" for d in p.differences) or "none"
        lines.append(
            f"| `{p.name}` | {p.sticky_action_prob:g} | {actions} | {noops} | {life} | "
            f"{differences} |"
        )
    lines.append("")
    for p in atari:
        lines += _protocol_section(p)
    lines += [_ASPECT_TITLE, ""]
    lines.append(
        "Besides the `Protocol` fields, each Atari protocol compares these aspects, which zoo does "
        "not vary, with its source:"
    )
    lines.append("")
    lines += [f"- `{name}`: {what}." for name, what in ASPECTS.items()]
    lines.append("")
    lines += ["## Backends", ""]
    lines.append(
        "Every Atari protocol runs on envpool (`--env-backend auto` or `envpool`). ALE's own "
        "vector environment (`--env-backend ale`, ale-py ≥ 0.11) runs the same ids under the "
        "same protocol where it can express it, with the differences below, and refuses it "
        "where it cannot. What was measured (frame-for-frame equality at one frame per step, "
        "random play, throughput) is in `docs/backends.md`."
    )
    lines.append("")
    lines.append("| protocol | ale |")
    lines.append("|---|---|")
    for p in atari:
        gaps = p.backend_gaps("ale")
        ale = (
            "refused: " + "; ".join(gaps)
            if gaps
            else "runs; differs from envpool in: " + "; ".join(p.backend_differences("ale"))
        )
        lines.append(f"| `{p.name}` | {_escape(ale)} |")
    lines.append("")
    others = [p for p in PROTOCOLS.values() if p.suite != "atari"]
    lines += ["## Other protocols", ""]
    for p in others:
        lines.append(f"- `{p.name}` ({p.suite}): {p.description}. Sources: {'; '.join(p.sources)}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Print the document (``python -m zoo.envs.protocol_doc > docs/protocols.md``)."""
    sys.stdout.write(protocols_markdown())


if __name__ == "__main__":
    main()
