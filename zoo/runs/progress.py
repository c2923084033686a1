"""Progress on stderr, of training and of evaluation.

Progress follows ``ZOO_PROGRESS`` (``zoo train --progress``), see :class:`ProgressMode`: on a
terminal a line redrawn in place; elsewhere (a log file, ``nohup``, a scheduler, CI) a new line
every 30 s, so a logged run is never silent.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TextIO

__all__ = [
    "PROGRESS_VARIABLE",
    "EvaluationProgress",
    "Progress",
    "ProgressMode",
    "ProgressModeError",
    "format_duration",
]


#: The environment variable that sets how progress is shown (``zoo train --progress`` sets it).
PROGRESS_VARIABLE = "ZOO_PROGRESS"


#: Seconds between progress lines when output is not a terminal and nothing else is asked.
DEFAULT_LINE_SECONDS = 30.0


#: ``ZOO_PROGRESS`` values already reported as not understood (said once per process).
_WARNED: set[str | None] = set()


class ProgressModeError(ValueError):
    """A ``ZOO_PROGRESS`` / ``--progress`` value that is not understood."""


@dataclass(frozen=True)
class ProgressMode:
    """How progress is shown on a stream.

    Parsed from ``ZOO_PROGRESS`` (or ``zoo train --progress``):

    - ``auto`` (the default): ``bar`` on a terminal, else a line every 30 s;
    - ``bar``: one line redrawn in place (at most twice a second);
    - ``30s``, ``2m``, ``90`` (seconds): a new line every so many seconds;
    - ``10%``: a new line at every 10% of the training budget (of the games, in an evaluation);
    - ``off``: nothing.

    Written as lines (periods and shares), a run's first line (training started) and last line
    (its total time) are written whatever the cadence.
    """

    kind: Literal["off", "bar", "seconds", "percent"]
    value: float = 0.0

    @classmethod
    def parse(cls, text: str | None, stream: TextIO | None = None) -> ProgressMode:
        """The mode ``text`` names (``None`` or empty: ``auto``) for output on ``stream``."""
        raw = (text or "auto").strip().lower()
        if raw == "auto":
            tty = stream is not None and _isatty(stream)
            return cls("bar") if tty else cls("seconds", DEFAULT_LINE_SECONDS)
        if raw in ("off", "bar"):
            return cls(raw)  # type: ignore[arg-type]
        try:
            if raw.endswith("%"):
                value = float(raw[:-1])
                if not 0 < value <= 100:
                    raise ValueError
                return cls("percent", value)
            scale = 60.0 if raw.endswith("m") else 1.0
            value = float(raw.removesuffix("m").removesuffix("s")) * scale
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ProgressModeError(
                f"progress {text!r} is not understood: use auto, bar, off, a period such as "
                "30s or 2m, or a share of the budget such as 10%"
            )
        return cls("seconds", value)

    @classmethod
    def from_environment(cls, stream: TextIO | None = None) -> ProgressMode:
        """The mode ``ZOO_PROGRESS`` asks for (``auto`` when unset; ``auto``, with a note on
        ``stream``, when it is not understood: a typo never stops a run)."""
        text = os.environ.get(PROGRESS_VARIABLE)
        try:
            return cls.parse(text, stream)
        except ProgressModeError as e:
            if stream is not None and text not in _WARNED:
                _WARNED.add(text)
                stream.write(f"zoo: {PROGRESS_VARIABLE}: {e}; showing progress as auto\n")
            return cls.parse("auto", stream)

    @classmethod
    def resolve(cls, mode: ProgressMode | str | None, stream: TextIO) -> ProgressMode:
        """``mode`` as given, parsed, or (``None``) from the environment."""
        if isinstance(mode, ProgressMode):
            return mode
        if mode is None:
            return cls.from_environment(stream)
        return cls.parse(mode, stream)

    def describe(self) -> str:
        """``a line every 30s``, ``a line every 10%``, ``redrawn in place`` or ``off``."""
        if self.kind == "seconds":
            return f"a line every {format_duration(self.value)}"
        if self.kind == "percent":
            return f"a line every {self.value:g}%"
        return {"bar": "redrawn in place", "off": "off"}[self.kind]


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a file
        return False


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h04m`` (``?`` when not finite)."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """Training progress on stderr: env steps, rates, ETA and the mean return of recent games.

    How it shows follows :class:`ProgressMode` (``ZOO_PROGRESS``, default ``auto``): on a
    terminal one line redrawn at most every ``interval`` seconds; otherwise a new line every 30 s
    (or every N% of the budget), so that a run under ``nohup``, a scheduler or CI says how it is
    doing while it runs. A line::

        [ 12%] 12,000/100,000 env steps  610 env steps/s  305 updates/s  20s elapsed, ETA 2m24s
        return 45.2 (last 20 games)

    (one line in the output). Rates are over the time since the previous line; the ETA uses the
    rate since the first step (compilation excluded, evaluations included).

    Args:
      total: the budget in env steps.
      interval: least seconds between redraws of the terminal line.
      force: show the redrawn line even when the stream is not a terminal.
      stream: where to write (default stderr).
      mode: a :class:`ProgressMode` or its text (default: ``ZOO_PROGRESS``).
    """

    def __init__(
        self,
        total: int,
        *,
        interval: float = 0.5,
        force: bool = False,
        stream: TextIO | None = None,
        mode: ProgressMode | str | None = None,
    ):
        self.total = total
        self.interval = interval
        self.stream = stream or sys.stderr
        if force and mode is None:
            self.mode = ProgressMode("bar")
        else:
            self.mode = ProgressMode.resolve(mode, self.stream)
        self.enabled = self.mode.kind != "off"
        self.returns: deque[float] = deque(maxlen=20)
        self._last = 0.0
        self._mark = (time.perf_counter(), 0, 0)
        self._first: tuple[float, int] | None = None
        self._next_percent = 0.0
        self.env_rate = 0.0
        self.update_rate = 0.0

    def add_returns(self, returns: Iterable[float]) -> None:
        self.returns.extend(float(r) for r in returns)

    def rates(self, env_steps: int, updates: int) -> tuple[float, float]:
        """Env steps/s and updates/s since the previous call (also kept as attributes)."""
        now = time.perf_counter()
        t0, e0, u0 = self._mark
        if now > t0:
            self.env_rate = (env_steps - e0) / (now - t0)
            self.update_rate = (updates - u0) / (now - t0)
        self._mark = (now, env_steps, updates)
        return self.env_rate, self.update_rate

    def eta(self, env_steps: int) -> float:
        """Seconds left at the rate since the first step (``nan`` before there is one)."""
        if self._first is None:
            return math.nan
        t0, e0 = self._first
        elapsed = time.perf_counter() - t0
        done = env_steps - e0
        if done <= 0 or elapsed <= 0:
            return math.nan
        return max(self.total - env_steps, 0) * elapsed / done

    def update(self, env_steps: int, updates: int, *, final: bool = False) -> None:
        """Show progress at ``env_steps`` if it is due (always when ``final``)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._first is None:
            self._first = (now, env_steps)
            self._mark = (now, env_steps, updates)
            self._last = now
            self._next_percent = self._percent_after(env_steps)
            if self.mode.kind != "bar" and not final:
                self._write(
                    f"training started: {env_steps:,}/{self.total:,} env steps; progress: "
                    f"{self.mode.describe()} (--progress or {PROGRESS_VARIABLE})\n"
                )
                return
        if self.mode.kind == "bar":
            if final or now - self._last >= self.interval:
                self._last = now
                self._write("\r" + self._line(env_steps, updates) + ("\n" if final else ""))
            return
        if self.mode.kind == "seconds":
            due = now - self._last >= self.mode.value
        else:
            due = env_steps >= self._next_percent
            self._next_percent = max(self._next_percent, self._percent_after(env_steps))
        # at the budget, the final line (with the whole time) says it
        if (due and env_steps < self.total) or final:
            self._last = now
            self._write(self._line(env_steps, updates, final=final) + "\n")

    def _percent_after(self, env_steps: int) -> float:
        """The first multiple of the percentage's share of the budget above ``env_steps``."""
        share = self.total * self.mode.value / 100 if self.mode.kind == "percent" else math.inf
        return (math.floor(env_steps / share) + 1) * share if share > 0 else math.inf

    def _line(self, env_steps: int, updates: int, final: bool = False) -> str:
        env_rate, update_rate = self.rates(env_steps, updates)
        if self.returns:
            recent = f"{sum(self.returns) / len(self.returns):.1f} (last {len(self.returns)} games)"
        else:
            recent = "- (no game finished yet)"
        frac = min(env_steps / max(self.total, 1), 1.0)
        if self.mode.kind == "bar":
            bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
            return (
                f"[{bar}] {env_steps:>10,}/{self.total:,} env steps  {env_rate:8.0f} steps/s  "
                f"{update_rate:6.0f} updates/s  ETA {format_duration(self.eta(env_steps)):>6}  "
                f"return {recent}"
            )
        if final:
            elapsed = time.perf_counter() - self._first[0] if self._first else math.nan
            return (
                f"[{100 * frac:3.0f}%] {env_steps:,}/{self.total:,} env steps in "
                f"{format_duration(elapsed)}  return {recent}"
            )
        elapsed = time.perf_counter() - self._first[0] if self._first else math.nan
        return (
            f"[{100 * frac:3.0f}%] {env_steps:,}/{self.total:,} env steps  "
            f"{env_rate:,.0f} env steps/s  {update_rate:,.0f} updates/s  "
            f"{format_duration(elapsed)} elapsed, ETA {format_duration(self.eta(env_steps))}  "
            f"return {recent}"
        )

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


class EvaluationProgress:
    """An evaluation's progress on stderr, so that a long one (Atari games that run to the
    protocol's 27,000-step cap) never looks hung.

    An evaluation is quiet while it is short: nothing is written during its first ``quiet``
    seconds. Past them (at once in ``N%`` mode), a first line states what it plays and the most
    agent steps it may take (games × the protocol's episode cap, or the ``max_steps`` cap); then
    progress follows :class:`ProgressMode` (a redrawn line on a terminal, a line every 30 s or
    every N% of the games elsewhere), each with games finished, agent steps played and an upper
    bound on the time left. :meth:`close` ends the display (and writes ``summary`` when given).

    Args:
      label: what is evaluated, e.g. ``evaluation at env step 40,000``.
      stream: where to write (default stderr).
      mode: a :class:`ProgressMode` or its text (default: ``ZOO_PROGRESS``).
      quiet: seconds before anything is shown.
    """

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        mode: ProgressMode | str | None = None,
        quiet: float = 2.0,
    ):
        self.label = label
        self.stream = stream or sys.stderr
        self.mode = ProgressMode.resolve(mode, self.stream)
        self.quiet = 0.0 if self.mode.kind == "percent" else quiet
        self.started = False
        self._t0 = time.perf_counter()
        self._last = self._t0
        self._games_shown = 0
        self._redrawn = False

    def __call__(
        self,
        *,
        games: int,
        episodes: int,
        agent_steps: int,
        bound: int | None,
        env_id: str = "",
        protocol: str = "",
        episode_cap: int | None = None,
        epsilon: float | None = None,
    ) -> None:
        """Report the evaluation's state (the evaluator calls this after every vector step)."""
        if self.mode.kind == "off":
            return
        now = time.perf_counter()
        if not self.started:
            if now - self._t0 < self.quiet:
                return
            self.started = True
            self._last = now
            self._write_line(
                self._start_line(episodes, bound, env_id, protocol, episode_cap, epsilon)
            )
        if self.mode.kind == "bar":
            if now - self._last >= 0.5 or games == episodes:
                self._last = now
                self._redrawn = True
                self._write("\r" + self._line(games, episodes, agent_steps, bound) + "\x1b[K")
            return
        if self.mode.kind == "seconds":
            due = now - self._last >= self.mode.value
        else:
            share = max(episodes * self.mode.value / 100, 1)
            due = math.floor(games / share) > math.floor(self._games_shown / share)
        if due:
            self._last = now
            self._games_shown = games
            self._write_line(self._line(games, episodes, agent_steps, bound))

    def _start_line(
        self,
        episodes: int,
        bound: int | None,
        env_id: str,
        protocol: str,
        episode_cap: int | None,
        epsilon: float | None,
    ) -> str:
        what = f"{episodes} game{'s' * (episodes != 1)}"
        if env_id:
            what += f" of {env_id}"
        settings = ", ".join(
            x
            for x in (
                f"protocol {protocol}" if protocol else "",
                f"ε {epsilon:g}" if epsilon is not None else "",
            )
            if x
        )
        if settings:
            what += f" ({settings})"
        if bound is None:
            limit = "no cap on a game's length, so no bound on its duration"
        else:
            limit = f"at most {bound:,} agent steps"
            if episode_cap is not None:
                limit += f" ({episode_cap:,} per game)"
        return f"{self.label}: playing {what}; {limit}"

    def _line(self, games: int, episodes: int, agent_steps: int, bound: int | None) -> str:
        elapsed = time.perf_counter() - self._t0
        rate = agent_steps / elapsed if elapsed > 0 else 0.0
        of = f" of at most {bound:,}" if bound is not None else ""
        text = (
            f"{self.label}: {games}/{episodes} games, {agent_steps:,}{of} agent steps, "
            f"{rate:,.0f} steps/s, {format_duration(elapsed)}"
        )
        if bound is not None and rate > 0:
            text += f", at most {format_duration((bound - agent_steps) / rate)} left"
        return text

    def close(self, summary: str | None = None) -> None:
        """End the display; write ``summary`` (one line) unless progress is ``off``."""
        if self._redrawn:
            self._write("\r\x1b[K")
            self._redrawn = False
        if summary is not None and self.mode.kind != "off":
            elapsed = format_duration(time.perf_counter() - self._t0)
            self._write_line(f"{self.label}: {summary} ({elapsed})")

    def _write_line(self, text: str) -> None:
        if self._redrawn:
            self._write("\r\x1b[K")
            self._redrawn = False
        elif self.mode.kind == "bar":
            self._write("\r\x1b[K")  # over the training line, which is redrawn afterwards
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
