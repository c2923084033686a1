"""Tiny specs by name, and the settings of the one finished run the tests share (``conftest.py``).

Overrides that make a preset train in seconds on CartPole: a small network and a replay that
fills within a few hundred transitions. A test that needs other numbers states its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TINY: Mapping[str, Mapping[str, Any]] = {
    "dqn_cartpole": {"replay.min_size": 200, "replay.capacity": 5000, "network.hidden": [32]},
}


def tiny_overrides(name: str) -> dict[str, Any]:
    """The overrides that make ``name`` a tiny CartPole run (a copy; unknown names are refused)."""
    if name not in _TINY:
        raise KeyError(f"no tiny overrides for {name!r}; known: {', '.join(sorted(_TINY))}")
    return dict(_TINY[name])


#: The shared finished run: 1,200 transitions of ``dqn_cartpole`` (tiny), checkpoints at 400, 800
#: and 1,200, a record every 100 transitions and one 2-game evaluation at the end.
FINISHED_RUN: Mapping[str, Any] = {
    "algorithm": "dqn_cartpole",
    "total_env_steps": 1200,
    "overrides": tiny_overrides("dqn_cartpole"),
    "eval_every": 1200,
    "eval_episodes": 2,
    "checkpoint_every": 400,
    "log_every": 100,
}
