"""Several seeds of one run trained in one compiled program: ``zoo train --seeds N``
(:func:`train_seeds`).

Each seed is a whole run in a directory of its own, ``RUN_DIR/seed<S>``: its own spec, settings
(``seed`` ``S``, ``loop: compiled``), environments made and seeded as a single run's, records,
evaluations and checkpoints, in the single-run format. So each seed resumes, evaluates and
compares like any run (``zoo train --resume RUN_DIR/seed1``, ``zoo eval``, ``zoo compare``), and
the group resumes together (``zoo train --resume RUN_DIR``). Together they run in lockstep in one
program (:class:`zoo.drivers.seeds.SeedsDriver`): the seeds' environments are stepped inside it
and the single-seed loop body is vmapped over the seeds, so ``S`` seeds cost one dispatch per
chunk and fill the machine's cores (measured in docs/performance.md, "Seeds in one program").

A seed that reaches its ``--stop-at-return`` stops as a single run would, and the others go on;
one whose loss becomes non-finite stops the group (each seed keeps its last checkpoint).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo import envs, stops
from zoo.drivers.seeds import SeedsDriver
from zoo.runs import rundir
from zoo.runs.create import checkpoint_steps, default_run_dir, new_settings, spec_dump
from zoo.runs.errors import RunRefusedError, environment_errors
from zoo.runs.group import ProcessGroup
from zoo.runs.notes import new_run_notes
from zoo.runs.open import Opened, closing, open_run, preflight, seed_members
from zoo.runs.request import TrainRequest
from zoo.runs.result import RunResult
from zoo.runs.settings import MAX_SEEDS
from zoo.runs.trainer import opened_trainer
from zoo.spec import AlgorithmSpec

__all__ = ["train_seeds"]


def train_seeds(
    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None,
    env: str | None = None,
    total_env_steps: int | None = None,
    seed: int | None = None,
    *,
    seeds: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    progress: bool = True,
    **settings: Any,
) -> list[RunResult]:
    """Train ``seeds`` runs of an algorithm or preset, seeds ``seed .. seed + seeds - 1``, in one
    compiled program; what ``zoo train --seeds N`` does.

    Args:
      algorithm, env, total_env_steps, overrides, settings: as :func:`zoo.train` takes them,
        the same for every seed (``loop`` may only be ``"auto"`` or ``"compiled"``: the seeds
        run in the compiled driver's program).
      seed: the first seed (default 0).
      seeds: how many seeds (1 to :data:`MAX_SEEDS`); with ``resume``, optional (checked
        against the group's).
      run_dir: the group's directory, new or empty (default
        ``runs/<algorithm>-<env>-s<first>-<last>-<time>``); seed ``S`` is written to
        ``run_dir/seed<S>``.
      resume: a group's directory: continue every seed of it that has not finished, from the
        newest checkpoint they share (only ``total_env_steps`` may change, for all of them).
      progress: show the progress line of the first seed on a terminal.

    Returns:
      One :class:`~zoo.runs.RunResult` per seed, in the order of the seeds.

    Raises:
      SpecError, RunRefusedError, RunError: as :func:`zoo.train`, for any seed (a seed's failure
        stops the group and is recorded in every seed's history).
    """
    parent, requests = _requests(
        algorithm,
        {"env": env, "total_env_steps": total_env_steps, **settings},
        seed,
        seeds,
        overrides,
        run_dir,
        resume,
        progress,
    )
    existed = parent.exists()
    try:
        with environment_errors():
            return _train_group(parent, requests, progress)
    except RunRefusedError:
        # a new group refused before it trained leaves nothing behind (each seed's run is
        # forgotten as a single run's is; the group's directory goes where this call made it)
        if not existed:
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise


def _requests(
    algorithm: Any,
    given: dict[str, Any],
    first: int | None,
    seeds: int | None,
    overrides: Mapping[str, Any] | None,
    run_dir: str | os.PathLike[str] | None,
    resume: str | os.PathLike[str] | None,
    progress: bool,
) -> tuple[Path, list[TrainRequest]]:
    """The group's directory and one request per seed, checked (no JAX, nothing written)."""
    if seeds is not None and not 1 <= seeds <= MAX_SEEDS:
        raise RunRefusedError(f"--seeds {seeds}: give 1 to {MAX_SEEDS} seeds")
    if given.get("loop") not in (None, "auto", "compiled"):
        raise RunRefusedError(
            f"--seeds trains the seeds in one compiled program, so --loop {given['loop']} "
            "cannot run them: drop --loop (or train each seed alone: zoo train --seed S)"
        )
    if resume is not None:
        parent = Path(resume)
        members = seed_members(parent)
        if not members:
            raise RunRefusedError(
                f"cannot resume {parent} as a group of seeds: it holds no seed<S>/run.yaml "
                f"(a single run resumes with zoo train --resume {parent})"
            )
        if seeds is not None and seeds != len(members):
            raise RunRefusedError(
                f"cannot resume {parent} with --seeds {seeds}: the group has {len(members)} "
                f"seeds ({', '.join(p.name for p in members)}); omit --seeds"
            )
        if first is not None:
            raise RunRefusedError(
                f"cannot resume {parent} with --seed: its seeds are those it was created with"
            )
        requests = [
            TrainRequest(algorithm, given, overrides, resume=p, progress=progress) for p in members
        ]
    else:
        if algorithm is None:
            raise RunRefusedError("name an algorithm or preset to train, or a group to resume")
        first = 0 if first is None else first
        count = 1 if seeds is None else seeds
        given = {**given, "loop": "compiled"}
        if run_dir is None:
            spec, settings = new_settings(algorithm, overrides, {**given, "seed": first})
            parent = default_run_dir(spec, settings, count)
        else:
            parent = Path(run_dir)
            if rundir.classify(parent) not in ("absent", "empty"):
                raise RunRefusedError(
                    f"cannot write a group of seeds into {parent}: it is not empty (a group "
                    "is written only into a new or empty --run-dir; resume one with zoo train "
                    f"--resume {parent})"
                )
        requests = [
            TrainRequest(
                algorithm,
                {**given, "seed": s},
                overrides,
                run_dir=parent / f"seed{s}",
                progress=progress,
            )
            for s in range(first, first + count)
        ]
    for request in requests:
        request.check()
    return parent, requests


def _train_group(parent: Path, requests: list[TrainRequest], progress: bool) -> list[RunResult]:
    """Open every seed's run, build them, and train those not finished together."""
    group = ProcessGroup()
    results: dict[int, RunResult] = {}
    with contextlib.ExitStack() as stack:
        opened: dict[int, Opened] = {}
        for i, request in enumerate(requests):
            run = open_run(request, group, preflight)
            if run.finished is not None:
                if run.lock is not None:
                    run.lock.release()
                results[i] = run.finished
                continue
            stack.enter_context(closing(run, group))
            opened[i] = run
        if not opened:
            return [results[i] for i in range(len(requests))]
        _check_alike(parent, list(opened.values()))
        lead = next(iter(opened.values()))
        if lead.mode != "resume":
            new_run_notes(lead.spec, lead.settings)
        trainers, carries = [], []
        for k, run in enumerate(opened.values()):
            cfg = run.settings
            pool = stack.enter_context(
                envs.make(
                    cfg.env,
                    num_envs=cfg.num_envs,
                    seed=cfg.seed,
                    training=True,
                    **cfg.env_args(),
                )
            )
            if not pool.has_xla:
                raise RunRefusedError(
                    f"--seeds steps the environments inside one compiled program, and "
                    f"{cfg.env} on the {pool.backend} backend has no XLA interface: choose "
                    "another --env-backend, or train each seed alone (zoo train --seed S)"
                )
            shown = progress and k == 0
            trainer, carry = stack.enter_context(
                opened_trainer(run, pool, group, shown, label=run.path.name, writes=parent)
            )
            trainers.append(trainer)
            carries.append(carry)
        steps = [int(c.env_steps) for c in carries]
        if len(set(steps)) != 1:
            at = ", ".join(
                f"{run.path.name} at {n:,}" for run, n in zip(opened.values(), steps, strict=True)
            )
            raise RunRefusedError(
                f"cannot resume {parent} as one group: its seeds' newest checkpoints are at "
                f"different env steps ({at}); resume each alone (zoo train --resume "
                f"{parent}/seed<S>)"
            )
        driver = SeedsDriver([t.loop for t in trainers])
        begun = [t.begin(c, driver)[0] for t, c in zip(trainers, carries, strict=True)]
        interrupted: list[bool] = []
        try:
            with stops.heard_while(interrupted):
                finals = driver.run_seeds(begun, trainers, interrupted)
        finally:
            for trainer in trainers:
                trainer.finish()
        for (i, run), trainer, final in zip(opened.items(), trainers, finals, strict=True):
            results[i] = trainer.result(final, run.path)
            status = "interrupted" if results[i].interrupted else "finished"
            rundir.append_history(
                run.path,
                "stopped",
                status=status,
                env_steps=results[i].env_steps,
                seeds_group=[r.path.name for r in opened.values()],
            )
    return [results[i] for i in range(len(requests))]


def _check_alike(parent: Path, opened: list[Opened]) -> None:
    """The seeds of a group share every setting but the seed, the spec, and the env step they
    resume from (a seed resumed alone further than the others, a run.yaml edited apart or a
    member from elsewhere is refused)."""
    lead = opened[0]
    newest = {run.path.name: (checkpoint_steps(run.path) or [0])[-1] for run in opened}
    if len(set(newest.values())) != 1:
        at = ", ".join(f"{name} at {step:,}" for name, step in newest.items())
        raise RunRefusedError(
            f"cannot resume {parent} as one group: its seeds' newest checkpoints are at "
            f"different env steps ({at}); resume each alone (zoo train --resume "
            f"{parent}/seed<S>), or resume the group once they are level"
        )
    same = lead.settings.model_dump(exclude={"seed"})
    for run in opened[1:]:
        if spec_dump(run.spec) != spec_dump(lead.spec):
            raise RunRefusedError(
                f"cannot train {parent} as one group: {run.path.name}'s spec differs from "
                f"{lead.path.name}'s; resume each alone (zoo train --resume {run.path})"
            )
        lines = rundir.describe_differences(
            same,
            run.settings.model_dump(exclude={"seed"}),
            labels=(lead.path.name, run.path.name),
        )
        if lines:
            raise RunRefusedError(
                f"cannot train {parent} as one group: its seeds' settings differ "
                f"({'; '.join(lines)}); resume each alone (zoo train --resume {run.path})"
            )
