"""The trainer: one run on the host around a driver.

:class:`Trainer` runs the loop body (:class:`zoo.loop.Loop`) with the driver the run names
(:func:`zoo.drivers.make_driver`) and follows it on the host: episode statistics, the
non-finite check (:class:`NonFiniteLossError`), logging, evaluation, checkpoints
(:func:`zoo.runs.state.save_run_state`) and signals. :func:`train_opened` is the run's
training step: build (:mod:`zoo.runs.assemble`), restore (:mod:`zoo.runs.state`), train, and
say in the run's own terms why it stopped when it failed.
"""

from __future__ import annotations

import contextlib
import errno
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from zoo import stops
from zoo.drivers import make_driver
from zoo.envs import EpisodeTracker
from zoo.runs.assemble import build
from zoo.runs.checkpoint import Checkpointer, CheckpointError
from zoo.runs.errors import RunError
from zoo.runs.evaluate import evaluator
from zoo.runs.group import ProcessGroup
from zoo.runs.metrics import MetricsLogger, read_jsonl
from zoo.runs.progress import Progress
from zoo.runs.result import RunResult
from zoo.runs.rundir import RunDir
from zoo.runs.state import restore_run_state, save_run_state

if TYPE_CHECKING:  # pragma: no cover
    from zoo.loop import Loop, LoopCarry
    from zoo.runs.open import Opened
    from zoo.runs.settings import RunSettings

__all__ = ["NonFiniteLossError", "Trainer", "train_opened"]


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stops and keeps its last good checkpoint."""


@dataclass
class Trainer:
    """Runs one run on the host around a driver: episode statistics, the non-finite check,
    logging, evaluation, checkpoints, signals.

    The driver (``loop_path``, one of :data:`zoo.drivers.DRIVERS`) runs the loop body and
    calls back :meth:`account` after vector steps and :meth:`events` where a log, evaluation or
    checkpoint may be due (:attr:`next_event`). How long to train and how often to log,
    evaluate and checkpoint are the run's own settings (units: transitions).

    Over several processes (``group``, :mod:`zoo.runs.distributed`) every process runs a trainer
    with its own logger and checkpointer; only process 0 evaluates, its early stop is every
    process's, and an interrupt on any process stops all of them at the next log (the
    processes decide together, never one alone: an update is a collective).
    """

    loop: Loop
    settings: RunSettings
    loop_path: str
    logger: MetricsLogger
    checkpointer: Checkpointer
    evaluate: Callable[[Any, int], dict[str, Any]]
    games: int = 0
    #: whether to draw the progress line (on a terminal, or periodic lines in logs)
    progress: bool = True
    #: the run's processes (one by default)
    group: ProcessGroup = field(default_factory=ProcessGroup)
    #: names the run in its messages, where several are trained together (:mod:`zoo.runs.seeds`)
    label: str | None = None
    stopped_by_signal: bool = field(default=False, init=False)
    #: transitions accounted so far (the host's count, after the driver reported them)
    env_steps: int = field(default=0, init=False)
    #: learner updates reported so far
    updates: int = field(default=0, init=False)
    _tracker: EpisodeTracker | None = field(default=None, init=False, repr=False)
    _progress: Progress | None = field(default=None, init=False, repr=False)
    _next: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _window: dict[str, list[float]] = field(default_factory=dict, init=False, repr=False)
    _start: tuple[float, int, int] = field(default=(0.0, 0, 0), init=False, repr=False)
    _driver: Any = field(default=None, init=False, repr=False)
    _signalled: list[bool] = field(default_factory=list, init=False, repr=False)

    def checkpoint(self, carry: LoopCarry, games: int) -> None:
        """Save the run state of ``carry`` (:func:`zoo.runs.state.save_run_state`)."""
        save_run_state(self.checkpointer, self.loop, carry, games, self.settings.save_replay)

    @property
    def next_event(self) -> int:
        """The transition count at which the next log, evaluation or checkpoint is due."""
        return min(self._next.values())

    def run(self, carry: LoopCarry) -> LoopCarry:
        """Train until ``total_env_steps`` (or a signal, or ``stop_at_return``)."""
        driver = make_driver(self.loop_path, self.loop)
        carry, actions = self.begin(carry, driver)
        interrupted: list[bool] = []
        # one process alone never stops: its signal is agreed on at the next log (events)
        heard = self._signalled if self.group.several else interrupted
        try:
            with stops.heard_while(heard):
                carry = driver.run(carry, actions, self, interrupted)
        finally:
            self.finish()
        return carry

    def begin(self, carry: LoopCarry, driver: Any = None) -> tuple[LoopCarry, Any]:
        """Start following a run from ``carry``: the counters, the next events, the
        environments reset and acted on once. Returns the carry and its actions, for the
        ``driver`` that runs it (whose ``stats`` the log records carry, if it has them)."""
        cfg, loop, env = self.settings, self.loop, self.loop.env
        self._driver = driver
        self.env_steps = int(carry.env_steps)
        self.updates = int(carry.learner.updates)
        self._tracker = EpisodeTracker(env.num_envs)
        self._progress = Progress(cfg.total_env_steps)
        self._progress.enabled = self._progress.enabled and self.progress
        self._next = {
            name: (self.env_steps // every + 1) * every
            for name, every in (
                ("log", cfg.log_every),
                ("eval", cfg.eval_every),
                ("ckpt", cfg.checkpoint_every),
            )
        }
        self._window = {}
        self._start = (time.perf_counter(), self.env_steps, self.updates)
        carry = carry.reset_metrics()
        ts = env.reset()
        # every driver starts from the host driver's first act (the host driver that then runs,
        # on the host path: make_driver builds one per loop)
        return make_driver("host", loop).first_act(carry, ts)

    def result(self, carry: LoopCarry, run_path: Path) -> RunResult:
        """The run as it ended in ``carry`` (the counters of its last checkpoint's state: an
        interrupted run's metrics records may stop before it)."""
        return RunResult(
            run_dir=run_path,
            env_steps=int(carry.env_steps),
            updates=int(carry.learner.updates),
            evaluations=read_jsonl(RunDir(run_path).evals_file),
            interrupted=self.stopped_by_signal,
        )

    def finish(self) -> None:
        """Stop following the run: the progress line's last update."""
        self._progress.update(self.env_steps, self.updates, final=True)

    def account(self, timesteps: list[Any], report: Any) -> None:
        """Episode statistics, counters and the non-finite check after some vector steps.

        Args:
          timesteps: the environments' TimeSteps of those vector steps, in order (host arrays).
          report: ``[updates, loss]`` of the learner state the actors acted with last.
        """
        n = self.loop.step_transitions
        for ts in timesteps:
            self.env_steps += n
            finished = self._tracker.update(ts)
            if finished:
                self.games += len(finished)
                returns = [e.episode_return for e in finished]
                self._progress.add_returns(returns)
                self._window.setdefault("return", []).extend(returns)
                self._window.setdefault("length", []).extend(float(e.length) for e in finished)
        updates, loss = int(report[0]), float(report[1])
        if updates != self.updates and not math.isfinite(loss):
            said = f"{self.label}: " if self.label else ""
            raise NonFiniteLossError(
                _non_finite_message(
                    f"{said}the loss became {loss} at learner update {updates} (env step "
                    f"{self.env_steps})",
                    self.checkpointer,
                )
            )
        self.updates = updates
        self._progress.update(self.env_steps, self.updates)

    def events(self, carry: LoopCarry, interrupted: list[bool]) -> tuple[LoopCarry, bool]:
        """Log, evaluate and checkpoint when due; whether to stop."""
        cfg, env_steps, nxt = self.settings, self.env_steps, self._next
        done = env_steps >= cfg.total_env_steps
        if env_steps >= nxt["log"] or done:
            while nxt["log"] <= env_steps:
                nxt["log"] += cfg.log_every
            if self.group.several and self.group.any(bool(self._signalled)):
                interrupted.append(True)
            # the per-step report is the actors' (one update behind): log the learner's count
            updates = int(carry.learner.updates)
            t0, steps0, updates0 = self._start
            elapsed = max(time.perf_counter() - t0, 1e-9)
            record: dict[str, Any] = {
                "env_steps": env_steps,
                "updates": updates,
                "games": self.games,
                "epsilon": float(self.loop.epsilon(env_steps)),
                "loop": self.loop_path,
                "env_steps_per_s": (env_steps - steps0) / elapsed,
                "updates_per_s": (updates - updates0) / elapsed,
            }
            record.update({k: float(np.mean(v)) for k, v in self._window.items() if v})
            record.update(carry.metric_means())
            driver_stats = getattr(self._driver, "stats", None)
            if driver_stats is not None:
                record.update(driver_stats())
            self._window.clear()
            carry = carry.reset_metrics()
            self.logger.log(record)
        stop = False
        if env_steps >= nxt["eval"] or done:
            while nxt["eval"] <= env_steps:
                nxt["eval"] += cfg.eval_every
            target = cfg.stop_at_return
            if self.group.main:
                learner = self.loop.learner
                acting = learner.acting(learner.unreplicate(carry.learner))
                result = self.evaluate(acting, env_steps)
                stop = target is not None and result["mean_return"] >= target
            if target is not None:
                stop = bool(self.group.broadcast(float(stop)))
        if env_steps >= nxt["ckpt"] or done or stop or interrupted:
            while nxt["ckpt"] <= env_steps:
                nxt["ckpt"] += cfg.checkpoint_every
            self.checkpoint(carry, self.games)
        if interrupted:
            self.stopped_by_signal = True
            stop = True
        return carry, stop


def train_opened(opened: Opened, env: Any, group: ProcessGroup, show_progress: bool) -> RunResult:
    """Build the opened run on ``env``, restore it (a resume), and train it to its budget (or a
    signal, or its return target). Over several processes each keeps its checkpoints and
    training records in its own directory (:meth:`zoo.runs.group.ProcessGroup.own_dir`).

    Raises:
      RunError: a non-finite loss (saying truly what is left to resume from), a checkpoint that
        cannot be written or read, a full disk.
    """
    with opened_trainer(opened, env, group, show_progress) as (trainer, carry):
        carry = trainer.run(carry)
    return trainer.result(carry, opened.path)


@contextlib.contextmanager
def opened_trainer(
    opened: Opened,
    env: Any,
    group: ProcessGroup,
    show_progress: bool,
    label: str | None = None,
    writes: Path | None = None,
) -> Iterator[tuple[Trainer, LoopCarry]]:
    """The trainer of an opened run and its first carry: built on ``env`` and restored (a
    resume), its records and checkpoints open until the block ends; what goes wrong in the
    block is said in the run's own terms (a :class:`RunError`).

    Args:
      label: names the run in its messages (one of several trained together).
      writes: the directory a failed write names (default: the run's).
    """
    spec, settings, run_path = opened.spec, opened.settings, opened.path
    own = group.own_dir(run_path)
    try:
        checkpointer = Checkpointer(RunDir(own).checkpoints)
    except CheckpointError as e:
        raise RunError(str(e)) from None
    try:
        built = build(opened.blueprint, spec, settings, env, group)
        carry, games, resume_from = built.carry, 0, None
        if opened.mode == "resume":
            carry, games, resume_from = restore_run_state(
                built.loop,
                carry,
                checkpointer,
                run_path,
                spec,
                settings,
                opened.previous_total,
                group,
            )
        logger = MetricsLogger(own, resume_from=resume_from)
        trainer = Trainer(
            built.loop,
            settings,
            built.loop_path,
            logger,
            checkpointer,
            evaluator(spec, settings, env, logger, show_progress),
            games=games,
            progress=show_progress,
            group=group,
            label=label,
        )
        try:
            yield trainer, carry
        except (NonFiniteLossError, CheckpointError) as e:
            raise RunError(str(e)) from None
        except OSError as e:
            what = "no space left on the device" if e.errno == errno.ENOSPC else str(e)
            raise RunError(f"writing to {writes or run_path} failed: {what}") from None
        finally:
            logger.close()
    finally:
        checkpointer.close()


def _non_finite_message(message: str, checkpointer: Any) -> str:
    """The non-finite-loss stop, saying truly what is left to resume from."""
    last = checkpointer.latest_step()
    if last is None:
        truth = "the run stopped before its first checkpoint, so there is nothing to resume"
    else:
        truth = f"the run stopped; its last good checkpoint is at env step {last:,}"
    return f"{message}; {truth} (a lower optimizer.learning_rate often helps)"
