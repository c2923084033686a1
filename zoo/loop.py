"""The training loop: act → env step → insert → learn, with evaluation, logging and checkpoints.

One loop serves every algorithm. Per vector step of N environments it

1. acts ε-greedily (ε from ``schedule.epsilon`` over transitions; noisy networks carry ε = 0 in
   their specs and act greedily on a fresh noise sample; recurrent networks reset their core state
   at each game's first observation),
2. steps the environments (envpool's next-step auto-reset; see :mod:`zoo.envs`),
3. inserts the step into the replay (which builds n-step windows, frame stacks and sequences at
   sample time, and never lets a pseudo-step start a transition),
4. once ``replay.min_size`` transitions are in, credits N transitions and runs one learner update
   per ``schedule.update_period`` credited transitions (fractional credit carries over), writing
   priorities back for prioritised replay.

The *host path* runs the environments through envpool's Python API and calls jitted functions for
acting, inserting and learning; the replay state stays on the device and is donated to each
insert so the buffer is never copied.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo.checkpoint import Checkpointer
from zoo.envs import EpisodeTracker, VectorEnv
from zoo.learner import Learner, LearnerState
from zoo.metrics import MetricsLogger, Progress
from zoo.replay import StepBatch
from zoo.schedules import build_schedule
from zoo.spec import AlgorithmSpec

__all__ = ["Counters", "LoopConfig", "NonFiniteLossError", "Trainer", "make_act"]


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or infinite; the run stops and keeps its last good checkpoint."""


class Counters(eqx.Module):
    """Run counters, checkpointed with the state (int64 on the host side as Python ints)."""

    env_steps: jax.Array
    updates: jax.Array
    games: jax.Array
    credit: jax.Array


@dataclass
class LoopConfig:
    """How long to train and how often to evaluate, log and checkpoint (units: transitions)."""

    total_env_steps: int
    eval_every: int
    eval_episodes: int
    eval_max_steps: int | None
    checkpoint_every: int
    log_every: int
    save_replay: bool = True
    progress: bool = True
    stop_at_return: float | None = None


def make_act(num_actions: int, recurrent: bool, initial_state: Any) -> Callable[..., Any]:
    """The acting function: ``act(online, obs, state, first, key, epsilon)``.

    Returns ``(actions [N] int32, state_before [N, ...], state_after [N, ...])``: the recurrent
    core state the actor used at this observation (reset to the initial state where ``first``),
    and the one it carries on; feed-forward networks pass ``state`` through.
    """

    def act(online, obs, state, first, key, epsilon):
        k_noise, k_explore, k_random = jax.random.split(key, 3)
        if recurrent:
            state = jax.tree.map(
                lambda s, s0: jnp.where(first.reshape((-1,) + (1,) * (s.ndim - 1)), s0, s),
                state,
                initial_state,
            )
            out, new_state = jax.vmap(lambda o, s: online(o, s, key=k_noise))(obs, state)
        else:
            out = jax.vmap(lambda o: online(o, key=k_noise))(obs)
            new_state = state
        n = obs.shape[0]
        greedy = jnp.argmax(out.q_values, axis=-1)
        random = jax.random.randint(k_random, (n,), 0, num_actions)
        explore = jax.random.uniform(k_explore, (n,)) < epsilon
        return jnp.where(explore, random, greedy).astype(jnp.int32), state, new_state

    return act


@dataclass
class Trainer:
    """Runs the host loop for one run; everything it needs is built by :mod:`zoo.run`."""

    spec: AlgorithmSpec
    env: VectorEnv
    learner: Learner
    replay: Any
    config: LoopConfig
    logger: MetricsLogger
    checkpointer: Checkpointer
    evaluate: Callable[[Any, int], dict[str, Any]]
    initial_core_state: Any = None
    stopped_by_signal: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        spec = self.spec
        self.recurrent = spec.recurrent
        self.epsilon = build_schedule(spec.schedule.epsilon)
        self.update_period = spec.schedule.update_period
        self.min_size = spec.replay.min_size
        self.batch_size = spec.replay.batch_size
        batched_initial = None
        if self.recurrent:
            batched_initial = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (self.env.num_envs, *x.shape)),
                self.initial_core_state,
            )
        self._batched_initial = batched_initial
        self._act = eqx.filter_jit(make_act(self.env.num_actions, self.recurrent, batched_initial))
        self._add = jax.jit(self.replay.add, donate_argnums=0)
        prioritized = spec.replay.kind == "prioritized"
        replay, learner = self.replay, self.learner

        def learn(learner_state: LearnerState, replay_state: Any, key: jax.Array):
            batch, info = replay.sample(replay_state, key, self.batch_size)
            learner_state, aux = learner.update(learner_state, batch)
            if prioritized:
                replay_state = replay.update_priorities(replay_state, info.indices, aux.priorities)
            return learner_state, replay_state, aux.metrics

        self._learn = eqx.filter_jit(learn)

    # ------------------------------------------------------------------------------ state

    def initial_state(self, learner_state: LearnerState, key: jax.Array) -> dict[str, Any]:
        """The checkpointable run state at step 0."""
        zero = jnp.zeros((), jnp.int32)
        return {
            "learner": learner_state,
            "replay": self.replay.init(),
            "counters": Counters(zero, zero, zero, jnp.zeros((), jnp.float32)),
            "key": key,
        }

    def checkpoint(self, state: dict[str, Any]) -> None:
        """Save the run state (the replay too unless the run opts out)."""
        saved = dict(state)
        if not self.config.save_replay:
            saved.pop("replay")
        counters = state["counters"]
        self.checkpointer.save(
            int(counters.env_steps),
            saved,
            {
                "env_steps": int(counters.env_steps),
                "updates": int(counters.updates),
                "games": int(counters.games),
                "replay_saved": self.config.save_replay,
            },
        )

    # ------------------------------------------------------------------------------- loop

    def run(self, state: dict[str, Any]) -> dict[str, Any]:
        """Train until ``total_env_steps``; returns the final state (checkpointed)."""
        cfg = self.config
        env = self.env
        n = env.num_envs
        env_steps = int(state["counters"].env_steps)
        updates = int(state["counters"].updates)
        games = int(state["counters"].games)
        credit = float(state["counters"].credit)
        key = state["key"]
        learner_state, replay_state = state["learner"], state["replay"]
        core_state = self._batched_initial
        tracker = EpisodeTracker(n)
        progress = Progress(cfg.total_env_steps, force=False)
        progress.enabled = progress.enabled and cfg.progress
        next_log = (env_steps // cfg.log_every + 1) * cfg.log_every
        next_eval = (env_steps // cfg.eval_every + 1) * cfg.eval_every
        next_ckpt = (env_steps // cfg.checkpoint_every + 1) * cfg.checkpoint_every
        window: dict[str, list[float]] = {}
        start, start_steps, start_updates = time.perf_counter(), env_steps, updates

        interrupted = []
        previous = signal.getsignal(signal.SIGINT)

        def on_sigint(signum, frame):
            interrupted.append(True)

        signal.signal(signal.SIGINT, on_sigint)

        def pack() -> dict[str, Any]:
            return {
                "learner": learner_state,
                "replay": replay_state,
                "counters": Counters(
                    jnp.asarray(env_steps),
                    jnp.asarray(updates),
                    jnp.asarray(games),
                    jnp.asarray(credit, jnp.float32),
                ),
                "key": key,
            }

        ts = env.reset()
        try:
            while env_steps < cfg.total_env_steps:
                key, act_key, learn_key = jax.random.split(key, 3)
                epsilon = self.epsilon(env_steps)
                actions, state_before, core_state = self._act(
                    learner_state.online, ts.observation, core_state, ts.first, act_key, epsilon
                )
                actions_np = np.asarray(actions)
                next_ts = env.step(actions_np)
                replay_state = self._add(
                    replay_state,
                    StepBatch(
                        observation=ts.observation,
                        action=actions_np,
                        reward=next_ts.reward,
                        terminated=next_ts.terminated,
                        truncated=next_ts.truncated,
                        first=ts.first,
                        valid=ts.valid,
                        core_state=state_before,
                    ),
                )
                env_steps += n
                finished = tracker.update(next_ts)
                if finished:
                    games += len(finished)
                    returns = [e.episode_return for e in finished]
                    progress.add_returns(returns)
                    window.setdefault("return", []).extend(returns)
                    window.setdefault("length", []).extend(float(e.length) for e in finished)
                ts = next_ts

                if env_steps >= self.min_size:
                    credit += n
                    while credit >= self.update_period:
                        credit -= self.update_period
                        learn_key, k = jax.random.split(learn_key)
                        learner_state, replay_state, metrics = self._learn(
                            learner_state, replay_state, k
                        )
                        updates += 1
                        loss = float(metrics["loss"])
                        if not math.isfinite(loss):
                            raise NonFiniteLossError(
                                f"the loss became {loss} at learner update {updates} "
                                f"(env step {env_steps}); the run stopped and kept its last good "
                                "checkpoint"
                            )
                        for name, value in metrics.items():
                            window.setdefault(name, []).append(float(value))

                progress.update(env_steps, updates)
                if env_steps >= next_log or env_steps >= cfg.total_env_steps:
                    next_log += cfg.log_every
                    elapsed = time.perf_counter() - start
                    record: dict[str, Any] = {
                        "env_steps": env_steps,
                        "updates": updates,
                        "games": games,
                        "epsilon": float(epsilon),
                        "env_steps_per_s": (env_steps - start_steps) / max(elapsed, 1e-9),
                        "updates_per_s": (updates - start_updates) / max(elapsed, 1e-9),
                    }
                    for name, values in window.items():
                        if values:
                            record[name] = float(np.mean(values))
                    window.clear()
                    self.logger.log(record)
                stop = False
                if env_steps >= next_eval or env_steps >= cfg.total_env_steps:
                    next_eval += cfg.eval_every
                    result = self.evaluate(learner_state.online, env_steps)
                    if cfg.stop_at_return is not None and result["mean"] >= cfg.stop_at_return:
                        stop = True
                if env_steps >= next_ckpt or env_steps >= cfg.total_env_steps or stop:
                    next_ckpt += cfg.checkpoint_every
                    self.checkpoint(pack())
                if interrupted:
                    self.checkpoint(pack())
                    self.stopped_by_signal = True
                    break
                if stop:
                    break
        finally:
            signal.signal(signal.SIGINT, previous)
            progress.update(env_steps, updates, final=True)
        return pack()
