"""The run settings as one table: :class:`RunSettings`, ``run.yaml``'s model.

Each field of :class:`RunSettings` is one setting of a run, written once: its type, bounds and
description (the file's), and, in an :class:`Arg` beside its type, its ``zoo train`` flag and help,
how a new run chooses it when it is not given, whether a resume may change it and where
``zoo reproduce`` and ``zoo bench`` offer it. Everything that asks for settings is derived from
this table: the flags of the three commands (:mod:`zoo.runs.flags`), the request's
checks (:func:`check_given`), a new run's values (:func:`new_run`) and a resume's refusals
(:func:`resume_conflicts`). Adding a setting is adding a field; a subclass of
:class:`RunSettings` with one more field is a table with one more setting (every function takes
the table as ``table``).

Fields without an :class:`Arg` (``algorithm``, ``preset``, ``processes``) are recorded by the
run itself, never asked for. The columns (:class:`Arg`, :class:`Elsewhere`, :class:`NewRun`,
:class:`Setting`) are defined in :mod:`zoo.runs.columns` and importable from here. No JAX here.
"""

from __future__ import annotations

import math
import numbers
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import BaseModel, ConfigDict, Field

from zoo.envs.factory import BackendName
from zoo.runs.columns import Arg, Elsewhere, NewRun, Setting
from zoo.runs.errors import RunRefusedError

__all__ = [
    "DEFAULT_EVAL_ENVS",
    "MAX_ENV_STEPS",
    "MAX_NUM_ENVS",
    "MAX_SEED",
    "MAX_SEEDS",
    "Arg",
    "Elsewhere",
    "NewRun",
    "RunSettings",
    "Setting",
    "check_given",
    "eval_envs_for",
    "new_run",
    "range_text",
    "resume_conflicts",
    "settings",
]

#: The largest budget a run accepts: 10¹² transitions. The longest published Atari runs
#: (Agent57: 90 billion frames, 22.5 billion agent steps) are 45 times shorter; a larger number
#: is a typo, and would print an estimate of 10¹³ hours instead of a refusal.
MAX_ENV_STEPS = 10**12
#: The largest seed (seeds are 31-bit: envpool's and the evaluation's seeds derive from them).
MAX_SEED = 2**31 - 1

#: The most seeds one program trains (``zoo train --seeds N``, :mod:`zoo.runs.seeds`): each holds
#: its own replay and environments.
MAX_SEEDS = 64
#: The most parallel environments one run may ask for.
MAX_NUM_ENVS = 4096
#: The most environments an evaluation plays at once unless asked for more.
DEFAULT_EVAL_ENVS = 16


# --------------------------------------------------------------------------------------------
# The table


def _tenth(c: NewRun) -> int:
    return max(c.values["total_env_steps"] // 10, 1)


def _fifth(c: NewRun) -> int:
    return max(c.values["total_env_steps"] // 5, 1)


def _hundredth(c: NewRun) -> int:
    return max(min(c.values["total_env_steps"] // 100, 10_000), 1)


def _eval_envs(c: NewRun) -> int:
    return eval_envs_for(c.values["eval_episodes"], c.given)


def _protocol(c: NewRun) -> str:
    return c.protocol_of(c.values["env"])


class RunSettings(BaseModel):
    """Everything besides the algorithm that defines a run (saved as ``run.yaml``), and the table
    of the settings a run is asked for (see the module's docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    algorithm: str = Field(description="catalogue name, preset name or YAML path it came from")
    preset: str | None = Field(None, description="preset name, if the run came from one")
    env: Annotated[
        str,
        Arg(
            "environment id (default: the preset's, else CartPole-v1)",
            flag="--env",
            from_preset=True,
            new="CartPole-v1",
        ),
    ] = Field(description="environment id")
    total_env_steps: Annotated[
        int,
        Arg(
            "budget in transitions (agent steps, all envs); with --resume, the new budget",
            flag="--steps",
            from_preset=True,
            new=50_000,
            # the file's cap is refused with the budget's own message (a typo, not a range)
            high=None,
            resumable=True,
        ),
    ] = Field(gt=0, le=MAX_ENV_STEPS, description="training budget in transitions")
    seed: Annotated[int, Arg("seed (default 0)", flag="--seed", new=0)] = Field(
        ge=0, le=MAX_SEED, description="seed of networks, exploration, replay and environments"
    )
    num_envs: Annotated[
        int,
        Arg(
            "parallel environments",
            flag="--num-envs",
            from_preset=True,
            new=1,
            elsewhere={
                "reproduce": Elsewhere("parallel environments (default: the preset's)"),
                "bench": Elsewhere("parallel environments of new runs"),
            },
        ),
    ] = Field(ge=1, le=MAX_NUM_ENVS, description="parallel environments")
    protocol: Annotated[
        str,
        Arg(
            "evaluation protocol (default: the environment's)",
            flag="--protocol",
            from_preset=True,
            new=_protocol,
        ),
    ] = Field(description="evaluation protocol")
    env_backend: Annotated[
        BackendName,
        Arg(
            "what runs the environments: auto (default: envpool for Atari and classic control, "
            "gymnasium for the rest), envpool, ale (ALE's own vector env, Atari games: pip "
            "install 'zoo-rl[ale]'), gymnasium, or gymnax (JAX-native classic control and "
            "MinAtar, stepped inside compiled loops: pip install 'zoo-rl[gymnax]')",
            flag="--env-backend",
            elsewhere={
                "reproduce": Elsewhere("what runs the environments of new runs (as zoo train)"),
                "bench": Elsewhere("what runs the environments of new runs (as zoo train)"),
            },
        ),
    ] = Field(
        "auto",
        description="the environment backend (zoo.envs.make's backend): auto, envpool, ale, "
        "gymnasium or gymnax; auto in runs made before the setting existed",
    )
    eval_every: Annotated[
        int,
        Arg(
            "transitions between evaluations",
            flag="--eval-every",
            new=_tenth,
            elsewhere={"reproduce": Elsewhere(), "bench": Elsewhere()},
        ),
    ] = Field(gt=0, description="transitions between evaluations")
    eval_episodes: Annotated[
        int,
        Arg(
            "games per evaluation (default 10)",
            flag="--eval-episodes",
            new=10,
            elsewhere={"reproduce": Elsewhere("games per evaluation"), "bench": Elsewhere()},
        ),
    ] = Field(gt=0, description="games per evaluation")
    eval_max_steps: Annotated[
        int | None,
        Arg(
            "cap on agent steps per evaluation",
            flag="--eval-max-steps",
            elsewhere={
                "bench": Elsewhere(
                    "cap on agent steps per evaluation of new runs (games unfinished at the cap "
                    "are left out of it)"
                )
            },
        ),
    ] = Field(None, gt=0, description="cap on agent steps per evaluation")
    eval_envs: Annotated[
        int,
        Arg(
            "environments an evaluation plays at once, each with its share of the games "
            f"(default: one per game, at most {DEFAULT_EVAL_ENVS})",
            flag="--eval-envs",
            new=_eval_envs,
            sees_given=True,
        ),
    ] = Field(
        1,
        ge=1,
        le=MAX_NUM_ENVS,
        description="environments an evaluation plays at once (each is assigned its share of "
        "the games in advance; 1 in runs made before the setting existed)",
    )
    checkpoint_every: Annotated[
        int,
        Arg(
            "transitions between checkpoints",
            flag="--checkpoint-every",
            new=_fifth,
            elsewhere={
                "reproduce": Elsewhere("transitions between each run's checkpoints"),
                "bench": Elsewhere(),
            },
        ),
    ] = Field(gt=0, description="transitions between checkpoints")
    log_every: Annotated[int, Arg("transitions between training records", new=_hundredth)] = Field(
        gt=0, description="transitions between training records"
    )
    save_replay: Annotated[
        bool,
        Arg(
            "leave the replay out of checkpoints (a resumed run refills it)",
            flag="--no-replay-checkpoint",
            switch=True,
        ),
    ] = Field(True, description="checkpoint the replay contents and priorities")
    stop_at_return: Annotated[
        float | None,
        Arg("stop once an evaluation reaches this", flag="--stop-at-return"),
    ] = Field(
        None,
        allow_inf_nan=False,
        description="stop early once an evaluation's mean return reaches this",
    )
    loop: Annotated[
        Literal["auto", "host", "compiled", "async"],
        Arg(
            "the driver. host: envpool's Python API between jitted steps; compiled: compiled "
            "chunks with envpool's XLA step (same semantics); auto (default): compiled for "
            "vector observations, host for images (XLA:CPU's convolutions are slow inside "
            "loops); async: an actor thread on its own device beside the learner (not "
            "deterministic; on a CPU host it asks JAX for one virtual device each)",
            flag="--loop",
            aliases=("--driver",),
            elsewhere={
                "reproduce": Elsewhere(
                    "loop path of new runs (as zoo train's --loop; default auto); resumed runs "
                    "keep theirs",
                    choices=("auto", "host", "compiled"),
                ),
                "bench": Elsewhere(
                    "loop path of new runs (as zoo train)", choices=("auto", "host", "compiled")
                ),
            },
        ),
    ] = Field(
        "auto",
        description="the driver (zoo.drivers): host, compiled, async (an actor thread beside "
        "the learner, not deterministic) or auto (compiled where envpool's XLA step exists)",
    )
    actor_devices: Annotated[
        str | None,
        Arg(
            "--loop async: the actor's device, an index of jax.local_devices() or 'cpu' "
            "(default: device 0, or the CPU beside a single accelerator)",
            flag="--actor-devices",
        ),
    ] = Field(None, description="async: the actor's device, an index of jax.local_devices() or cpu")
    learner_devices: Annotated[
        str | None,
        Arg(
            "--loop async: the learner's devices, e.g. 1,2 (default: the devices the actor "
            "does not use; the update is data-parallel over several)",
            flag="--learner-devices",
        ),
    ] = Field(None, description="async: the learner's devices, indices of jax.local_devices()")
    max_lag: Annotated[
        int,
        Arg(
            "--loop async: the most updates the actor's parameters may trail the learner's "
            "(default 1, as the synchronous drivers)",
            flag="--max-lag",
        ),
    ] = Field(1, ge=1, le=1000, description="async: the most updates the actor's parameters trail")
    processes: int = Field(
        1,
        ge=1,
        description="processes training together with jax.distributed (zoo.runs.distributed), each "
        "with num_envs environments and a replay shard of capacity / processes",
    )

    def env_args(self) -> dict[str, Any]:
        """What every environment of the run is made with besides its id, counts, seeds and mode
        (``zoo.envs.make``'s and ``zoo.envs.evaluate``'s keywords): its protocol and backend."""
        return {"protocol": self.protocol, "backend": self.env_backend}


# --------------------------------------------------------------------------------------------
# Reading the table


def _bounds(metadata: Sequence[Any]) -> tuple[int | None, int | None]:
    low = high = None
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            low = int(m.ge)
        elif isinstance(m, annotated_types.Gt):
            low = int(m.gt) + 1
        elif isinstance(m, annotated_types.Le):
            high = int(m.le)
        elif isinstance(m, annotated_types.Lt):
            high = int(m.lt) - 1
    return low, high


def _kind(annotation: Any, arg: Arg) -> tuple[str, tuple[str, ...] | None]:
    if arg.switch:
        return "switch", None
    base = annotation
    if typing.get_origin(base) is not Literal and typing.get_args(base):
        base = next(t for t in typing.get_args(base) if t is not type(None))  # X | None
    if typing.get_origin(base) is Literal:
        return "choice", tuple(typing.get_args(base))
    if base is int:
        return "count", None
    if base is float:
        return "number", None
    return "text", None


def settings(table: type[RunSettings] = RunSettings) -> tuple[Setting, ...]:
    """The settings a run is asked for, in the table's order."""
    rows = []
    for name, info in table.model_fields.items():
        args = [m for m in info.metadata if isinstance(m, Arg)]
        if not args:
            continue
        arg = args[0]
        low, high = _bounds(info.metadata)
        low = low if arg.low == "field" else arg.low
        high = high if arg.high == "field" else arg.high
        kind, choices = _kind(info.annotation, arg)
        default = None if info.is_required() else info.default
        rows.append(Setting(name, arg, kind, low, high, choices, default))
    return tuple(rows)


# --------------------------------------------------------------------------------------------
# A request, a new run, a resume


def range_text(low: int | None, high: int | None) -> str:
    return f"from {low} to {high:,}" if high is not None else f"at least {low}"


def check_given(values: Mapping[str, Any], *, table: type[RunSettings] = RunSettings) -> None:
    """Refuse values no run can take (``None`` is "not given"), naming the flag and the range;
    also refuse a keyword that is no setting.

    Raises:
      RunRefusedError: a value out of its range or of the wrong kind.
      TypeError: ``values`` names a setting the table does not have.
    """
    rows = {s.name: s for s in settings(table)}
    unknown = sorted(set(values) - set(rows))
    if unknown:
        raise TypeError(f"train() got unknown settings {unknown}; the settings are {list(rows)}")
    for name, value in values.items():
        if value is None:
            continue
        row = rows[name]
        label = row.label if row.label == name else f"{row.label} ({name})"
        if row.kind == "count":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise RunRefusedError(f"{label} must be a whole number, got {value!r}")
            low = row.low if row.low is not None else 0
            if value < low or (row.high is not None and value > row.high):
                raise RunRefusedError(f"{label} must be {range_text(low, row.high)}, got {value}")
        elif row.kind == "number":
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Real)
                or not math.isfinite(float(value))
            ):
                raise RunRefusedError(f"{row.label} must be a finite number, got {value!r}")
        elif row.kind == "choice" and value not in (row.choices or ()):
            options = list(row.choices or ())
            spelled = ", ".join(options[:-1]) + f" or {options[-1]}"
            raise RunRefusedError(f"{row.label} must be {spelled}, got {value!r}")


def new_run(
    values: Mapping[str, Any],
    preset: Mapping[str, Any],
    protocol_of: Callable[[str], str],
    *,
    table: type[RunSettings] = RunSettings,
) -> dict[str, Any]:
    """A new run's settings, in the table's order: each given value, else the preset's where the
    setting takes it, else its rule (:attr:`Arg.new`), else the field's default."""
    decided: dict[str, Any] = {}
    for row in settings(table):
        value = values.get(row.name)
        rule = row.arg.new
        if value is None and row.arg.from_preset and preset.get(row.name) is not None:
            value = preset[row.name]
        if (value is None or row.arg.sees_given) and rule is not None:
            value = rule(NewRun(value, decided, preset, protocol_of)) if callable(rule) else rule
        decided[row.name] = row.default if value is None else value
    return decided


def resume_conflicts(
    values: Mapping[str, Any],
    recorded: Mapping[str, Any],
    *,
    table: type[RunSettings] = RunSettings,
) -> list[str]:
    """What a resume was asked that would change the run: one line per setting that a resume
    keeps (all but the budget) given with another value than the run's."""
    lines = []
    for row in settings(table):
        value = values.get(row.name)
        if row.arg.resumable or value is None or value == recorded[row.name]:
            continue
        shown = "given" if row.kind == "switch" else repr(value)
        lines.append(f"{row.label} {shown} (the run's is {recorded[row.name]!r})")
    return lines


def eval_envs_for(
    episodes: int,
    num_envs: int | None,
    flags: tuple[str, str] = ("--eval-envs", "--eval-episodes"),
) -> int:
    """Environments an evaluation of ``episodes`` games plays at once: ``num_envs``, or by
    default one per game, at most :data:`DEFAULT_EVAL_ENVS` (the games of one environment are
    played in sequence).

    Raises:
      RunRefusedError: more environments than games (``flags`` name the two in the message).
    """
    if num_envs is None:
        return max(1, min(int(episodes), DEFAULT_EVAL_ENVS))
    if num_envs > episodes:
        raise RunRefusedError(
            f"{flags[0]} {num_envs} is more than {flags[1]} {episodes}: the environments past "
            f"the games' count would play games that never count; ask for at most {episodes}"
        )
    return num_envs
