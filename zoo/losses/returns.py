"""Q(λ) targets over a time-major rollout: the targets of PQN's replay-free learner.

PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning",
https://arxiv.org/abs/2407.04811) trains on λ-returns over a rollout of ``T`` steps of ``N``
environments, bootstrapped from the network's value of each next observation:

    G_t = r_t + γ·c_t·[v_{t+1} + λ_t·k_t·(G_{t+1} − v_{t+1})],    G_{T−1} = r_{T−1} + γ·c_{T−1}·v_T

with ``v_{t+1}`` the value of the observation after step ``t`` (``max_a Q(o_{t+1}, a)`` for
Q-learning), ``c_t = 1 − terminated_t`` (a termination cuts the bootstrap) and
``k_t = 1 − (terminated_t ∨ truncated_t)`` (the trace stops where the episode stops). At a
truncation the target is ``r_t + γ·v(final observation)``: the time limit is not a terminal
state (Pardo et al. 2018), and ``o_{t+1}`` there is the final observation, not the next game's
first.

With a constant λ this is **Peng's Q(λ)** (Peng & Williams 1996), which is what PQN's code
computes (its paper calls it Q(λ)); **Watkins' Q(λ)** (Watkins 1989) cuts the trace after a
non-greedy action, i.e. ``λ_t = λ·1[a_{t+1} = argmax_a Q(o_{t+1}, a)]``: pass that as the
per-step ``lambda_``. The recursion is ``rlax.lambda_returns`` with ``discount_t = γ·c_t`` and
``λ_t·k_t``, vmapped over environments.

**Where purejaxql differs.** mttga/purejaxql (``pqn_gymnax.py``, ``pqn_minatar.py``,
``pqn_atari.py``) has one ``done`` flag and treats every ``done`` as terminal, truncations
included (its target at a ``done`` step is ``r_t``). ``truncation="terminal"`` reproduces that
for a preset that must match it; the default, ``"bootstrap"``, is the zoo's semantics everywhere
else (n-step windows bootstrap at truncations the same way).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import rlax

Array = jax.Array

__all__ = ["TRUNCATION_MODES", "q_lambda_targets"]

#: How a truncation ends the return: ``bootstrap`` from the final observation (the zoo's), or
#: ``terminal`` (purejaxql's: every ``done`` is a terminal).
TRUNCATION_MODES = ("bootstrap", "terminal")


def q_lambda_targets(
    r_t: Array,
    v_t: Array,
    terminated: Array,
    truncated: Array,
    discount: float,
    lambda_: float | Array,
    truncation: Literal["bootstrap", "terminal"] = "bootstrap",
) -> Array:
    """Q(λ) targets of a time-major rollout (see the module docstring).

    Args:
      r_t: ``[T, N]`` rewards of steps ``0 … T−1`` (already clipped or scaled).
      v_t: ``[T, N]`` the bootstrap value of the observation *after* each step: ``v_t[t]`` is
        ``v(o_{t+1})`` (``max_a Q(o_{t+1}, a)`` for Peng's Q(λ)); at a truncation, the value of
        the final observation.
      terminated: ``[T, N]`` bool, step ``t`` ended the episode in a terminal state.
      truncated: ``[T, N]`` bool, step ``t`` hit a time limit.
      discount: γ.
      lambda_: λ in [0, 1], a scalar or ``[T, N]`` per step (``λ_t`` weighs ``G_{t+1}`` in
        ``G_t``; Watkins' Q(λ) zeroes it after non-greedy actions).
      truncation: ``"bootstrap"`` (default) or ``"terminal"`` (purejaxql's).

    Returns:
      ``[T, N]`` float32 targets ``G_t``, gradient stopped.
    """
    if truncation not in TRUNCATION_MODES:
        raise ValueError(f"truncation must be one of {TRUNCATION_MODES}, got {truncation!r}")
    r_t = jnp.asarray(r_t, jnp.float32)
    v_t = jnp.asarray(v_t, jnp.float32)
    if r_t.ndim != 2 or r_t.shape != v_t.shape:
        raise ValueError(f"r_t and v_t must both be [T, N]; got {r_t.shape} and {v_t.shape}")
    terminated = jnp.asarray(terminated, bool)
    truncated = jnp.asarray(truncated, bool)
    ended = terminated | truncated
    cut = ended if truncation == "terminal" else terminated
    discount_t = discount * (1.0 - cut.astype(jnp.float32))
    lambda_t = jnp.broadcast_to(jnp.asarray(lambda_, jnp.float32), r_t.shape)
    lambda_t = lambda_t * (1.0 - ended.astype(jnp.float32))
    returns = jax.vmap(rlax.lambda_returns, in_axes=1, out_axes=1)(r_t, discount_t, v_t, lambda_t)
    return jax.lax.stop_gradient(returns)
