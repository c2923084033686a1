"""What a run tells its user on their behalf (stderr, prefixed ``zoo:``): the notes of a new run
whose settings work against each other (an ε still decaying at the end of the budget, a replay
larger than the budget, PQN minibatches of a handful of transitions). No JAX."""

from __future__ import annotations

import sys

from zoo import spec as spec_lib
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec

__all__ = ["SMALL_MINIBATCH", "new_run_notes", "say"]


def say(message: str) -> None:
    """A note for the user (stderr): what the run decided on their behalf."""
    print(f"zoo: {message}", file=sys.stderr, flush=True)


def new_run_notes(spec: AlgorithmSpec, settings: RunSettings) -> None:
    """Every note a new (or restarted) run gets about its settings."""
    _note_capacity(spec, settings)
    _note_exploration(spec, settings)
    _note_minibatch(spec, settings)


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
