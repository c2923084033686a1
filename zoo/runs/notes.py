"""What a run tells its user on their behalf (stderr, prefixed ``zoo:``): the notes of a new run
whose settings work against each other (an ε still decaying at the end of the budget, a replay
larger than the budget, PQN minibatches of a handful of transitions, resets or n/γ schedules the
budget's learner updates never reach). No JAX."""

from __future__ import annotations

import sys

from zoo import spec as spec_lib
from zoo.envs.protocols import get_protocol  # plain data: no JAX, no envpool
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec

__all__ = ["SMALL_MINIBATCH", "budget_updates", "new_run_notes", "say"]


def say(message: str) -> None:
    """A note for the user (stderr): what the run decided on their behalf."""
    print(f"zoo: {message}", file=sys.stderr, flush=True)


def new_run_notes(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Every note a new (or restarted) run gets about its settings."""
    _note_capacity(spec, settings)
    _note_exploration(spec, settings)
    _note_minibatch(spec, settings)
    _note_updates(spec, settings)
    _note_backend(settings)


def _note_backend(settings: RunSettings) -> None:
    """Say what the chosen backend does differently from envpool under the run's protocol
    (:meth:`zoo.envs.Protocol.backend_differences`): ALE's no-op starts and episode ends."""
    differences = get_protocol(settings.protocol).backend_differences(settings.env_backend)
    if differences:
        say(
            f"note: on the {settings.env_backend} backend, protocol {settings.protocol} differs "
            "from envpool in: " + "; ".join(differences) + " (docs/protocols.md, Backends)"
        )


def _note_exploration(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Say when ε is still decaying at the end of the budget: a catalogue entry (Atari settings,
    ε over 1M transitions) trained on a short CartPole budget acts almost at random throughout."""
    epsilon = spec.schedule.epsilon
    total = settings.total_env_steps
    if (
        spec.network.noisy
        or not isinstance(epsilon, spec_lib.LinearSchedule)
        or epsilon.begin + epsilon.steps <= total
        or epsilon.start <= epsilon.end
    ):
        return
    progress = min(max((total - epsilon.begin) / epsilon.steps, 0.0), 1.0)
    last = epsilon.start + progress * (epsilon.end - epsilon.start)
    say(
        f"note: schedule.epsilon decays over {epsilon.begin + epsilon.steps:,} transitions, "
        f"past the budget of {total:,}: ε is still {last:.2f} at its end, so the agent acts "
        f"mostly at random (catalogue entries carry Atari settings; the *_cartpole presets "
        f"carry CartPole's); --set schedule.epsilon.steps={max(total // 10, 1)} would decay it "
        "over the first tenth"
    )


#: Transitions per minibatch below which a rollout learner is told it has too few environments:
#: the batch of the replay-based catalogue entries (purejaxql's PQN presets learn from 128).
SMALL_MINIBATCH = 32


def _note_minibatch(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Say when a rollout learner (PQN) gets so few environments that its minibatches hold
    fewer than :data:`SMALL_MINIBATCH` transitions: the catalogue's ``pqn`` on one environment
    learns from minibatches of a single transition."""
    rollout = spec.rollout
    if rollout is None:
        return
    size = rollout.length * settings.num_envs // rollout.minibatches
    if size >= SMALL_MINIBATCH:
        return
    wanted = -(-SMALL_MINIBATCH * rollout.minibatches // rollout.length)
    say(
        f"note: with {settings.num_envs} environment{'s' * (settings.num_envs != 1)} each of "
        f"the {rollout.minibatches} minibatches of a rollout holds {size} "
        f"transition{'s' * (size != 1)} (rollout.length × num_envs / rollout.minibatches = "
        f"{rollout.length} × {settings.num_envs} / {rollout.minibatches}); PQN learns from many "
        f"environments at once (purejaxql: 128, minibatches of 128): --num-envs {wanted} or more "
        "gives minibatches of at least 32"
    )


def _note_capacity(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Say when the replay is larger than the budget can fill (it is allocated in full; a
    rollout learner allocates no replay)."""
    if spec.rollout is None and spec.replay.capacity > settings.total_env_steps:
        say(
            f"note: replay.capacity={spec.replay.capacity:,} is more than the budget of "
            f"{settings.total_env_steps:,} transitions, and is allocated in full; "
            f"--set replay.capacity={settings.total_env_steps} would save the memory"
        )


def budget_updates(spec: AlgorithmSpec, total_env_steps: int) -> int:
    """The learner updates a replay-based run makes in ``total_env_steps`` transitions: from the
    transition that fills the replay to ``replay.min_size`` on, ``updates_per_period`` every
    ``update_period`` transitions (what a run's metrics count, e.g. 196,002 for BBF at 100,000)."""
    schedule = spec.schedule
    learning = max(total_env_steps - spec.replay.min_size + 1, 0)
    return learning // schedule.update_period * schedule.updates_per_period


def _note_updates(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Say when resets or the n-step and γ schedules, counted in learner updates, reach past what
    the budget makes: a BBF preset on a short budget never resets, and its n never gets to 3."""
    if spec.rollout is not None:
        return
    total = settings.total_env_steps
    updates = budget_updates(spec, total)
    made = f"the budget of {total:,} transitions makes {updates:,} learner updates"
    resets = spec.resets
    if resets is not None:
        first = resets.first_update
        fit = resets.done_after(updates)
        wanted = resets.count
        if fit == 0:
            say(
                f"note: the first reset follows learner update {first:,} (resets.first) and "
                f"{made}: the run never resets; --set resets.first={max(updates // 2, 1)} "
                "would reset halfway"
            )
        elif wanted is not None and fit < wanted:
            say(
                f"note: resets.count is {wanted} and {made}: {fit} of them happen "
                f"(from update {first:,}, every {resets.every:,})"
            )
    cycle = spec.schedule.cycle
    for name in ("n_step", "discount"):
        schedule = getattr(spec.schedule, name)
        steps = getattr(schedule, "steps", None)
        if steps is None:
            continue
        span = steps + getattr(schedule, "begin", 0)
        if cycle == "run" and span > updates:
            say(
                f"note: schedule.{name} runs over {span:,} learner updates and {made}: it "
                f"stops short of its end value {schedule.end}"
            )
        elif cycle == "resets" and resets is not None and span > resets.every:
            say(
                f"note: schedule.{name} runs over {span:,} learner updates and a reset comes "
                f"every {resets.every:,} (schedule.cycle: resets): each cycle restarts it "
                f"before it reaches {schedule.end}"
            )
