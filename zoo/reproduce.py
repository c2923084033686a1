"""``zoo reproduce``: run a preset under its protocol on games × seeds, then compare.

Each (game, seed) trains into ``RUN_DIR/<preset>/<game>/seed<k>`` through
:func:`zoo.matrix.ensure_run` (shared with ``zoo bench``):

- a run whose newest checkpoint has reached the budget is **reused** (not retrained);
- a run with a checkpoint short of the budget is **resumed** from it (``train(resume=...)``);
- a run without any checkpoint (killed before its first one) is started over, with its own
  spec and settings (``train(resume=..., restart=True)``, recorded in its history);
- a folder holding a run of another preset, environment, protocol or seed is refused, before any
  run trains.

Then the runs are compared with the preset's reference series exactly as ``zoo compare`` does
(:mod:`zoo.compare`), at the budget trained to, and ``comparison.md``, ``comparison.json`` and
``comparison.png`` are written into ``RUN_DIR``. ``frames`` sets the budget in frames: agent steps =
frames / the protocol's frame skip (4 on Atari, 1 elsewhere).

Ctrl-C (SIGINT) stops the matrix as it stops ``zoo bench``: the running run saves a checkpoint and
stops, no further run starts, and no comparison is written (one of runs at unequal budgets would
be compared at the shortest); rerunning the same command resumes where it stopped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo import compare as compare_lib
from zoo import reference as ref_lib
from zoo import spec as spec_lib
from zoo.matrix import TargetError, agent_steps, check_target, ensure_run, run_targets
from zoo.runs.rundir import safe_component

__all__ = ["ReproduceError", "ReproduceResult", "game_env_id", "reproduce"]


class ReproduceError(ValueError):
    """``zoo reproduce`` cannot run as asked; the message says why and what to do."""


@dataclass
class ReproduceResult:
    """What :func:`reproduce` did: per run its directory and status, and the comparison.

    Attributes:
      runs: (directory, status) of each run made or reused, in matrix order.
      comparison: the comparison, or ``None`` when ``interrupted``.
      outputs: the written ``md``, ``json`` and ``png`` files (empty when ``interrupted``).
      env_steps: the budget in agent steps.
      interrupted: Ctrl-C stopped a run (its checkpoint saved) and the runs after it did not
        start; ``not_started`` counts them.
    """

    runs: list[tuple[Path, str]]
    comparison: compare_lib.Comparison | None
    outputs: dict[str, Path] = field(default_factory=dict)
    env_steps: int = 0
    interrupted: bool = False
    not_started: int = 0


def game_env_id(game: str) -> str:
    """The environment id of a game as a preset or user spells it.

    Any id :func:`zoo.envs.resolve_env` accepts (``"Pong-v5"``, ``"PongNoFrameskip-v4"``,
    ``"CartPole-v1"``, ``"MinAtar/Breakout-v1"``), and the snake-case names of the reference
    tables (``"space_invaders"`` → ``"SpaceInvaders-v5"``).
    """
    from zoo.envs import UnknownEnvironmentError, UnsupportedEnvironmentError, resolve_env

    try:
        return resolve_env(game).env_id
    except (UnknownEnvironmentError, UnsupportedEnvironmentError) as first:
        from envpool.registration import registry

        key = ref_lib.game_key(game)
        for name, entry in registry.specs.items():
            if (
                entry[0] == "envpool.atari"
                and name.endswith("-v5")
                and ref_lib.game_key(name) == key
            ):
                return name
        raise ReproduceError(str(first)) from None


def _frame_skip(protocol: str) -> int:
    from zoo.envs import get_protocol

    return get_protocol(protocol).frame_skip


def reproduce(
    preset: str,
    *,
    games: Sequence[str] | None = None,
    seeds: int = 1,
    frames: int | None = None,
    run_dir: str | os.PathLike[str] = "reproduce",
    reference: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    **settings: Any,
) -> ReproduceResult:
    """Train ``preset`` on games × seeds (reusing or resuming runs), then compare.

    Args:
      preset: a preset name or file.
      games: games or environment ids (default: the preset's ``env.games``, else ``env.id``).
      seeds: seeds ``0 .. seeds-1``.
      frames: budget in frames (default: the preset's budget); agent steps = frames / frame skip.
      run_dir: the folder holding ``<preset>/<game>/seed<k>`` and the comparison files.
      reference: a series id to compare with instead of the preset's (same protocol only).
      overrides: dotted overrides of the preset for new runs (``{"replay.capacity": 400000}``
        where the preset's replay does not fit); a resumed run keeps its own spec.
      progress: show each run's progress line on a terminal.
      log: where status lines go.
      settings: settings of new runs by their names in :class:`zoo.runs.settings.RunSettings`
        (``eval_episodes``, ``eval_every``, ``checkpoint_every`` (default: a fifth of the
        budget; a long run interrupted loses at most this much), ``num_envs``, ``loop``, ...),
        as :func:`zoo.runs.train` takes them; a resumed run keeps its own.

    Raises:
      ReproduceError: the preset has no budget and no ``frames`` was given, a game is unknown, or a
        run folder holds another run.
      zoo.reference.ProtocolMismatchError: ``reference`` has another protocol than the preset.
    """
    if seeds < 1:
        raise ReproduceError(f"--seeds must be at least 1, not {seeds}")
    loaded = spec_lib.load_preset(preset)
    # the preset itself, also where a catalogue entry shares its name (a bare "c51" is the entry)
    preset_ref = preset if spec_lib.is_preset(preset) else f"{spec_lib.PRESET_PREFIX}{preset}"
    protocol = loaded.env.protocol
    skip = _frame_skip(protocol)
    if reference is not None:  # refuse a cross-protocol comparison before training anything
        ref_lib.check_protocol(ref_lib.load_series(reference), protocol)
    if frames is not None:
        try:
            steps = agent_steps(frames, skip, log)
        except ValueError as e:
            raise ReproduceError(str(e)) from None
    elif loaded.budget is not None:
        steps = loaded.budget.agent_steps
    else:
        raise ReproduceError(f"preset {loaded.name} has no budget; give --frames N")
    names = list(games or loaded.env.games or ([loaded.env.id] if loaded.env.id else []))
    if not names:
        raise ReproduceError(f"preset {loaded.name} names no environment; give --games")
    env_ids = [game_env_id(g) for g in names]
    root = Path(run_dir)
    done: list[tuple[Path, str]] = []
    log(
        f"reproducing {loaded.name} ({protocol}) on {', '.join(env_ids)} × {seeds} seed(s) at "
        f"{steps:,} agent steps = {steps * skip:,} frames, in {root}"
    )
    # names from files become path components only once made harmless (no separators, no ..)
    targets = run_targets(
        root,
        safe_component(loaded.name, fallback="preset"),
        preset_ref,
        env_ids,
        seeds,
        steps,
        preset=loaded.name,
        protocol=protocol,
        overrides=overrides,
        settings=settings,
    )
    try:
        for target in targets:  # every folder checked before any run trains
            check_target(target)
        for i, target in enumerate(targets):
            try:
                outcome = ensure_run(target, progress=progress, log=log)
            except KeyboardInterrupt:  # before the run's loop took the signal over (its setup)
                log(f"{target.path}: interrupted before training (any checkpoint it had is kept)")
                outcome = None
            if outcome is not None:
                done.append((outcome.path, outcome.status))
            if outcome is None or outcome.interrupted:
                left = len(targets) - i - 1
                log(
                    f"interrupt: {left} run(s) not started and no comparison written; rerun the "
                    "same command to resume (finished runs are reused)"
                )
                return ReproduceResult(
                    runs=done, comparison=None, env_steps=steps, interrupted=True, not_started=left
                )
    except TargetError as e:
        raise ReproduceError(str(e)) from None
    comparison = compare_lib.compare([p for p, _ in done], reference=reference, env_steps=steps)
    outputs = compare_lib.write_outputs(
        comparison, root, title=f"zoo reproduce {loaded.name} ({steps * skip:,} frames)"
    )
    return ReproduceResult(runs=done, comparison=comparison, outputs=outputs, env_steps=steps)
