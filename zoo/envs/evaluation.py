"""Evaluation: whole games under a protocol's evaluation settings, ε-greedy around a policy."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from zoo.envs.core import EpisodeTracker
from zoo.envs.factory import BackendName, make
from zoo.envs.protocols import Protocol

__all__ = ["Policy", "ProgressCallback", "evaluate", "step_bound"]

#: A greedy policy: observations ``[N, *observation_shape]`` -> integer actions ``[N]``; it may
#: take ``first=`` (where games start, for a recurrent state) and ``rows=`` (which environments
#: the rows are: then it is asked only about those still owed games; see :func:`evaluate`).
Policy = Callable[[np.ndarray], Any]

#: Called after every vector step of an evaluation with keyword arguments ``games`` (counted so
#: far), ``episodes``, ``agent_steps`` (played so far), ``bound`` (the most agent steps the
#: evaluation can play, or ``None``), ``env_id``, ``protocol``, ``episode_cap`` (the most agent
#: steps of one game, or ``None``) and ``epsilon``;
#: :class:`zoo.runs.progress.EvaluationProgress` is one.
ProgressCallback = Callable[..., None]


def step_bound(
    episodes: int, num_envs: int, episode_cap: int | None, max_steps: int | None = None
) -> int | None:
    """The most agent steps :func:`evaluate` can play: ``None`` when games have no length cap
    (and no ``max_steps`` is given).

    Environment ``i`` plays its quota ``q_i`` of games (see :func:`evaluate`), each at most
    ``episode_cap`` steps, with one reset step between games (envpool's autoreset), so the
    evaluation ends within ``max(q) * (episode_cap + 1) - 1`` vector steps of ``num_envs`` agent
    steps each, or at ``max_steps``.
    """
    bound = None
    if episode_cap is not None:
        most_games = -(-episodes // num_envs)
        bound = (most_games * (episode_cap + 1) - 1) * num_envs
    if max_steps is not None:
        cap = max_steps // num_envs * num_envs
        bound = cap if bound is None else min(bound, cap)
    return bound


def evaluate(
    policy: Policy,
    env_id: str,
    protocol: str | Protocol | None = None,
    *,
    episodes: int,
    seed: int,
    max_steps: int | None = None,
    num_envs: int = 1,
    epsilon: float | None = None,
    backend: BackendName = "auto",
    env_kwargs: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Play exactly ``episodes`` whole games with an ε-greedy ``policy`` and summarise them.

    The environments use the protocol's *evaluation* settings (``training=False``): whole games
    (a lost life is never terminal; it still restarts the frame stack where the protocol says
    so), unclipped rewards, the protocol's no-op starts, sticky actions and frame cap. The
    evaluator adds ε-greedy exploration around ``policy`` with ``protocol.eval_epsilon`` unless
    ``epsilon`` is given (a run passes its preset's ``schedule.eval_epsilon`` where it sets one).

    Which games count, with ``N = num_envs``: environment ``i`` is assigned
    ``episodes // N + (i < episodes % N)`` games fixed in advance, and only its first games up to
    that quota count; games an environment finishes past its quota are discarded. Fixing the
    quotas before playing keeps the sample unbiased (taking the first games to finish across all
    environments would favour short games) and the result deterministic for a seed.

    An environment that has played its quota is retired (:meth:`VectorEnv.retire`): envpool
    stops stepping it, so the tail of an evaluation, where one long game plays on after the
    others have met their quotas, steps one environment instead of ``N``. A policy that takes
    ``rows`` is asked only about the environments still owed games, ``policy(observations[rows],
    first=first[rows], rows=rows)`` with ``rows`` their indices (ascending, never empty); any
    other policy is asked about all ``N`` rows every step (a retired row holds its last
    observation; its answer is unused). The ε-greedy draws stay those of all ``N``, so the games
    counted are those of whole-batch steps wherever the policy's action for a row depends on
    that row alone.

    Args:
      policy: observations ``[N, ...]`` -> integer actions ``[N]`` (greedy; ε is added here).
      env_id: any id :func:`zoo.envs.make` accepts.
      protocol: protocol name or object (default as in :func:`zoo.envs.make`).
      episodes: number of games to count.
      seed: seeds the environments and the ε-greedy draws.
      max_steps: budget in agent steps summed over the environments (``N`` per vector step,
        retired environments included, so a budget ends an evaluation at the same step however
        many environments still play);
        when it runs out before ``episodes`` games finish, the result has ``truncated=True`` and
        summarises the games that did finish.
      num_envs: environments played in parallel.
      epsilon: overrides ``protocol.eval_epsilon``.
      backend: as in :func:`zoo.envs.make`.
      env_kwargs: as in :func:`zoo.envs.make`.
      progress: called after every vector step with the games counted, the agent steps played
        and the most the evaluation can play (:data:`ProgressCallback`, :func:`step_bound`).

    Returns:
      A dict with ``mean_return``, ``std_return``, ``min_return``, ``max_return`` (unclipped game
      returns; ``nan`` when no game finished), ``mean_length``, ``min_length``, ``max_length``
      (agent steps), ``episodes`` (games counted), ``returns`` and ``lengths`` (per game, in the
      order they finished), ``truncated``, ``agent_steps``, ``frames`` (agent steps × frame skip),
      ``epsilon``, ``protocol``, ``env_id`` and ``seed``.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be positive, got {episodes}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be positive or None, got {max_steps}")
    env = make(
        env_id,
        protocol=protocol,
        num_envs=num_envs,
        seed=seed,
        training=False,
        backend=backend,
        env_kwargs=env_kwargs,
        retiring=True,
    )
    resolved = env.protocol
    eps = resolved.eval_epsilon if epsilon is None else float(epsilon)
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"epsilon must lie in [0, 1], got {eps}")
    quota = np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])
    counted = np.zeros(num_envs, np.int64)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    tracker = EpisodeTracker(num_envs)
    returns: list[float] = []
    lengths: list[int] = []
    agent_steps = 0
    truncated = False
    # A recurrent policy resets its state where a game starts: it takes ``first=`` if it can;
    # one that takes ``rows=`` is asked only about the environments still owed games.
    try:
        parameters = inspect.signature(policy).parameters
    except (TypeError, ValueError):
        parameters = {}
    takes_first, takes_rows = "first" in parameters, "rows" in parameters
    cap = env.max_episode_steps
    bound = step_bound(episodes, num_envs, cap, max_steps)

    def report() -> None:
        if progress is not None:
            progress(
                games=len(returns),
                episodes=episodes,
                agent_steps=agent_steps,
                bound=bound,
                env_id=env.env_id,
                protocol=resolved.name,
                episode_cap=cap,
                epsilon=eps,
            )

    with env:
        # the environments' latest observations and first flags, retired ones included (a
        # policy without ``rows`` is asked about every row; a retired row's answer is unused)
        timestep = env.reset()
        observation, first = np.array(timestep.observation), np.array(timestep.first)
        env.retire(np.flatnonzero(quota == 0))
        report()
        while np.any(counted < quota):
            if max_steps is not None and agent_steps + num_envs > max_steps:
                truncated = True
                break
            active = env.active  # the environments still owed games
            rows = active if takes_rows else None
            greedy = _greedy_actions(policy, observation, first, rows, takes_first)
            explore = rng.random(num_envs) < eps
            random_actions = rng.integers(0, env.num_actions, num_envs)
            actions = np.where(explore, random_actions, greedy).astype(np.int32)
            timestep = env.step(actions[active])
            observation[active], first[active] = timestep.observation, timestep.first
            agent_steps += num_envs
            for episode in tracker.update(timestep, active):
                if counted[episode.env_index] < quota[episode.env_index]:
                    counted[episode.env_index] += 1
                    returns.append(episode.episode_return)
                    lengths.append(episode.length)
                    if counted[episode.env_index] == quota[episode.env_index]:
                        env.retire(episode.env_index)
            report()
    return {
        **_summary(returns, lengths),
        "episodes": len(returns),
        "returns": returns,
        "lengths": lengths,
        "truncated": truncated,
        "agent_steps": agent_steps,
        "frames": agent_steps * env.frame_skip,
        "epsilon": eps,
        "protocol": resolved.name,
        "env_id": env.env_id,
        "seed": seed,
    }


def _greedy_actions(
    policy: Policy,
    observation: np.ndarray,
    first: np.ndarray,
    rows: np.ndarray | None,
    takes_first: bool,
) -> np.ndarray:
    """The policy's actions for all ``N`` environments: asked of every row, or (``rows``, for
    a policy that takes them) of those rows only, the others 0."""

    num_envs = len(observation)
    kwargs: dict[str, Any] = {}
    if rows is not None:
        observation, first = observation[rows], first[rows]
        kwargs["rows"] = rows
    if takes_first:
        kwargs["first"] = first
    asked = np.asarray(policy(observation, **kwargs))
    expected = num_envs if rows is None else len(rows)
    if asked.shape != (expected,):
        raise ValueError(
            f"policy must return {expected} actions (shape ({expected},)), got shape {asked.shape}"
        )
    if rows is None:
        return asked
    greedy = np.zeros(num_envs, asked.dtype)
    greedy[rows] = asked
    return greedy


def _summary(returns: list[float], lengths: list[int]) -> dict[str, float]:
    if not returns:
        keys = ("mean_return", "std_return", "min_return", "max_return")
        return dict.fromkeys((*keys, "mean_length", "min_length", "max_length"), math.nan)
    r = np.asarray(returns, np.float64)
    n = np.asarray(lengths, np.float64)
    return {
        "mean_return": float(r.mean()),
        "std_return": float(r.std()),
        "min_return": float(r.min()),
        "max_return": float(r.max()),
        "mean_length": float(n.mean()),
        "min_length": float(n.min()),
        "max_length": float(n.max()),
    }
