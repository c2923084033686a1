"""The actor: ε-greedy acting with the online network, ε over transitions, recurrent resets.

One :class:`Actor` acts for ``N`` environments at once. It reads an observation (a
:class:`~zoo.envs.TimeStep`) and the network it is handed, and returns the actions and the
:class:`Pending` step: the observation acted on, its action and the recurrent state before acting,
waiting for the environment's answer. It never touches the replay or the learner; a driver
inserts the pending step once the environment has answered (:mod:`zoo.loop`).

- ε comes from ``schedule.epsilon`` over transitions inserted so far (Mnih et al. 2015 anneal it
  linearly), and is 0 from ``schedule.epsilon_off_after`` on where that is set; noisy networks
  (Fortunato et al. 2018) carry ε = 0 in their specs and act greedily on a fresh noise sample
  (Beyond The Rainbow keeps an ε beside them for half of its training).
- Recurrent networks (Kapturowski et al. 2019) carry a core state per environment and reset it
  to the initial state at each game's first observation (``TimeStep.first``).

:func:`make_act` is the acting function alone; evaluation
(:func:`zoo.runs.evaluate.make_policy_fn`) uses it with ε = 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from zoo.envs import TimeStep
from zoo.networks.network import apply_batch
from zoo.schedules import build_schedule
from zoo.spec import AlgorithmSpec

__all__ = ["Actor", "Pending", "make_act", "starts_transition"]


def starts_transition(ts: TimeStep) -> Any:
    """``[N]`` bool: whether ``ts.observation`` starts a transition (the replay's ``valid``).

    False exactly on a game's final observation (``game_over``: terminal or truncated): the
    environment ignores the action taken there and auto-resets. True after ``reset()`` and on
    the auto-reset step that returns a new game's first observation, although ``ts.valid`` is
    False on both, and after a lost life, although ``ts.terminated`` may be set there: the game
    goes on from that observation (:mod:`zoo.envs.core`).
    """
    return ~ts.game_over


class Pending(eqx.Module):
    """The step acted on but not yet answered by the environment.

    ``valid`` is the replay's slot flag (:class:`~zoo.replay.StepBatch`): whether the
    observation *starts* a transition, i.e. the step that returned it did not end the game
    (:func:`starts_transition`; a lost life does not end it). It is not ``TimeStep.valid``,
    which says whether that step *ended* one: a game's final observation ends a transition but
    starts none (the next step ignores its action), and the next game's first observation ends
    none but starts one.
    """

    observation: jax.Array
    action: jax.Array
    first: jax.Array
    valid: jax.Array
    core_state: Any


def make_act(num_actions: int, recurrent: bool, initial_state: Any) -> Callable[..., Any]:
    """The acting function: ``act(online, obs, state, first, key, epsilon)``.

    Returns ``(actions [N] int32, state_before [N, ...], state_after [N, ...])``: the recurrent
    core state the actor used at this observation (reset to ``initial_state`` where ``first``),
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
            out, new_state = apply_batch(online, obs, k_noise, role="act", state=state)
        else:
            out = apply_batch(online, obs, k_noise, role="act")
            new_state = state
        n = obs.shape[0]
        greedy = jnp.argmax(out.q_values, axis=-1)
        random = jax.random.randint(k_random, (n,), 0, num_actions)
        explore = jax.random.uniform(k_explore, (n,)) < epsilon
        return jnp.where(explore, random, greedy).astype(jnp.int32), state, new_state

    return act


class Actor:
    """ε-greedy actors of ``num_envs`` environments (pure functions of explicit state).

    Args:
      spec: the algorithm (``schedule.epsilon``; whether the network is recurrent).
      num_envs: environments acted for at once, ``N``.
      num_actions: size of the discrete action set.
      initial_core_state: one environment's initial recurrent state (recurrent specs).

    Attributes:
      initial_state: the initial core state of all ``N`` environments (leading axis ``N``), or
        ``None`` for feed-forward networks.
    """

    def __init__(
        self,
        spec: AlgorithmSpec,
        num_envs: int,
        num_actions: int,
        initial_core_state: Any = None,
    ):
        self.num_envs = num_envs
        self.recurrent = spec.recurrent
        self.initial_state = None
        if self.recurrent:
            self.initial_state = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (num_envs, *x.shape)), initial_core_state
            )
        self._act = make_act(num_actions, self.recurrent, self.initial_state)
        self._epsilon = build_schedule(spec.schedule.epsilon)
        self._epsilon_off_after = spec.schedule.epsilon_off_after

    def epsilon(self, env_steps: Any) -> jax.Array:
        """ε after ``env_steps`` transitions (``schedule.epsilon``; 0 from
        ``schedule.epsilon_off_after`` on)."""
        epsilon = self._epsilon(env_steps)
        if self._epsilon_off_after is None:
            return epsilon
        return jnp.where(jnp.asarray(env_steps) < self._epsilon_off_after, epsilon, 0.0)

    def nothing_pending(self, observation_shape: tuple[int, ...], dtype: Any) -> Pending:
        """A placeholder :class:`Pending` before the first observation (all zeros)."""
        n = self.num_envs
        flags = jnp.zeros((n,), bool)
        observation = jnp.zeros((n, *observation_shape), dtype)
        return Pending(observation, jnp.zeros((n,), jnp.int32), flags, flags, self.initial_state)

    def act(
        self, network: Any, key: jax.Array, core: Any, env_steps: Any, ts: TimeStep
    ) -> tuple[jax.Array, Any, Pending, jax.Array]:
        """Act on ``ts.observation`` with ``network``.

        Args:
          network: the online network the actors act with.
          key: the PRNG key (split here; the rest is returned).
          core: the actors' recurrent state ``[N, ...]`` (``None`` for feed-forward networks).
          env_steps: transitions inserted so far (ε's step).
          ts: the environments' latest :class:`~zoo.envs.TimeStep`.

        Returns:
          ``(key, core, pending, actions)``: the key to carry on, the core state after acting,
          the :class:`Pending` step (with the core state *before* acting, which the replay
          stores) and the actions ``[N]`` int32.
        """
        key, act_key = jax.random.split(key)
        epsilon = self.epsilon(env_steps)
        actions, before, after = self._act(
            network, ts.observation, core, ts.first, act_key, epsilon
        )
        pending = Pending(ts.observation, actions, ts.first, starts_transition(ts), before)
        return key, after, pending, actions
