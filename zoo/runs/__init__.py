"""The run job: ``zoo.train`` (``zoo train``); planning a run's memory (:mod:`.assemble`),
``zoo.load_policy`` and ``zoo eval``'s job (:mod:`zoo.runs.evaluate`).

A run reads top to bottom as the job it does; each step is a module named for what it does::

    request = TrainRequest(...)                        # request.py: what was asked, checked
    group = join_run(request)                          # join.py: one process, or a group
    opened = open_run(request, group, preflight)       # open.py: new, resume, restart, finished
    env = make(settings.env, ...)                      #   (a new run: create.py)
    result = train_opened(opened, env, group, ...)     # trainer.py: assemble.py builds the
                                                       #   blueprint, state.py restores, the
                                                       #   trainer follows the driver, evaluate.py
                                                       #   evaluates; state.py saves

The settings of a run are one table (settings.py, flags.py); its directory, checkpoints, records,
memory plan and process group are rundir.py, checkpoint.py, metrics.py, memory.py and
distributed.py (the group of one in group.py). This module and the steps up to opening need no
JAX (a finished run is answered without it); the rest is imported here, once a run is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from zoo import envs
from zoo.runs import rundir
from zoo.runs.errors import RunError, RunRefusedError, environment_errors
from zoo.runs.join import join_run
from zoo.runs.notes import new_run_notes
from zoo.runs.open import closing, open_run, preflight
from zoo.runs.request import TrainRequest
from zoo.runs.result import RunResult
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec

__all__ = [
    "RunError",
    "RunRefusedError",
    "RunResult",
    "RunSettings",
    "TrainRequest",
    "train",
]


def train(
    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None,
    env: str | None = None,
    total_env_steps: int | None = None,
    seed: int | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    restart: bool = False,
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    distributed: bool = False,
    progress: bool = True,
    on_start: Callable[[Path], None] | None = None,
    **settings: Any,
) -> RunResult:
    """Train an algorithm or preset; what ``zoo train`` does.

    A run directory has one owner and one history: it is created fresh (an existing directory
    must be empty) or resumed, never both, and never by two processes at once (see
    :mod:`zoo.runs.rundir`). ``None`` means "not given" for every setting; 0 is never a default.

    Args:
      algorithm: catalogue name, preset name, YAML path (``file.yaml[:entry]``) or a spec.
        Omitted with ``resume``.
      env: environment id (default: the preset's, else ``CartPole-v1``).
      total_env_steps: budget in transitions (default: the preset's, else 50,000). With
        ``resume``, extends (or keeps) the run's budget, recorded in its history.
      seed: seeds networks, exploration, replay sampling and environments (default 0).
      overrides: dotted overrides of the algorithm (``{"loss.n_step": 3}``).
      run_dir: where the run is written (default ``runs/<algorithm>-<env>-s<seed>-<time>``); it
        must not exist or be empty.
      resume: a run directory to continue from its newest intact checkpoint. The run keeps the
        spec and settings recorded at its creation: any other algorithm, ``overrides``, ``env``,
        ``protocol``, ``seed`` or setting is refused with what differs.
      restart: with ``resume``: start a run that stopped before its first checkpoint over from
        scratch, with its recorded spec and settings.
      coordinator, num_processes, process_id: train as one of several processes joined by
        ``jax.distributed`` (:mod:`zoo.runs.distributed`; default: one process). Every process is
        started with the same arguments (and a ``run_dir``); process 0 owns the run directory.
        Must be called before JAX has started in this process.
      distributed: join the process group JAX detects from the cluster's environment (SLURM,
        Open MPI, ...), with whichever of the three values above are given.
      progress: show the progress line on a terminal.
      on_start: called with the run directory once it exists (tests use it).
      settings: the other run settings by their names in :class:`RunSettings` (the table of
        :mod:`zoo.runs.settings`, where each field's ``Arg`` gives its meaning, its flag and the
        default of a new run): ``num_envs``, ``protocol``, ``eval_every``, ``eval_episodes``,
        ``eval_max_steps``, ``eval_envs`` (environments an evaluation plays at once, each
        assigned its share of the games before play starts, so the result does not favour
        short games), ``checkpoint_every``, ``log_every``, ``save_replay``,
        ``stop_at_return``, ``loop`` (``"auto"``, ``"host"``, ``"compiled"`` or ``"async"``;
        see :mod:`zoo.drivers`), and, with ``loop="async"``, ``actor_devices``,
        ``learner_devices`` and ``max_lag``.

    Returns:
      A :class:`RunResult`.

    Raises:
      SpecError: the algorithm or overrides are invalid.
      RunRefusedError: the run was refused before anything was written (invalid values, a run
        directory that is not empty or in use, a resume that would change the run, a budget
        below ``replay.min_size``, a network or replay that cannot fit in memory).
      RunError: the run failed (a non-finite loss, a full disk, no intact checkpoint).
      TypeError: a keyword that is no setting.
    """
    request = TrainRequest(
        algorithm=algorithm,
        settings={"env": env, "total_env_steps": total_env_steps, "seed": seed, **settings},
        overrides=overrides,
        run_dir=run_dir,
        resume=resume,
        restart=restart,
        coordinator=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        distributed=distributed,
        progress=progress,
        on_start=on_start,
    )
    request.check()
    with environment_errors():
        return _train(request)


def _train(request: TrainRequest) -> RunResult:
    """:func:`train`'s pipeline (the group of one is a process group like any other)."""
    group = join_run(request)
    opened = open_run(request, group, preflight)
    if opened.finished is not None:  # answered without JAX
        if opened.lock is not None:
            opened.lock.release()
        return opened.finished
    from zoo.runs import trainer  # JAX starts here (a group's processes started it to join)

    with closing(opened, group):
        settings = opened.settings
        if group.main and opened.mode != "resume":
            new_run_notes(opened.spec, settings)
        if group.main and request.on_start is not None:
            request.on_start(opened.path)
        env = envs.make(
            settings.env,
            num_envs=settings.num_envs,
            seed=group.seed(settings.seed),
            training=True,
            **settings.env_args(),
        )
        try:
            result = trainer.train_opened(opened, env, group, request.progress and group.main)
        finally:
            env.close()
        if group.main:
            status = "interrupted" if result.interrupted else "finished"
            several = {"processes": group.num_processes} if group.several else {}
            rundir.append_history(
                opened.path, "stopped", status=status, env_steps=result.env_steps, **several
            )
        return result
