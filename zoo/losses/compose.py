"""The loss composer: one function that turns any spec into a loss.

``build_loss(spec)`` looks every component up in the registry once (the config stops here) and
returns a :class:`Loss`, called as ``loss(online=net, target=target_net, batch=batch, key=key,
step=0) -> (scalar, LossAux)``. The composer never branches on an algorithm's name; the only
structural choice is whether the network has a recurrent core (sequences with burn-in, Kapturowski
et al. 2019) or not (single, possibly n-step, transitions).

The pipeline, per example (rlax style, vmapped over the batch):

1. forward passes: online at s (with gradient), and, gradient stopped, online at s′ (double-Q
   selector), target at s′ and target at s (the Munchausen log-policy, unless
   ``loss.munchausen.policy`` is ``online``: then the online output at s, gradient stopped);
   unused ones are removed by XLA's dead-code elimination under ``jit``;
2. reward: clipped to ±``reward_clip`` (or not), plus the Munchausen bonus (or the neutral zero);
3. bootstrap policy (π, shift) at s′ from the ``bootstrap`` component;
4. the head loss (``head_loss`` axis): target h(r + d·Σπ(h⁻¹Z + shift)) and element loss;
5. reduction: importance weights (1/(p + ε))^β / max over the *global* batch, weighted mean,
   plus the regulariser; priorities from the priority rule where the replay is prioritised.

Sequences: n-step returns are accumulated inside the stored sequence (truncated at its end, as
rlax.n_step_bootstrapped_returns), the Munchausen bonus is added at every step, and the
per-sequence loss is the (masked) sum over time.

Rollouts (PQN, Gallici et al. 2024, https://arxiv.org/abs/2407.04811; :mod:`zoo.rollout`): the
targets are Q(λ) returns built once per rollout by :meth:`Loss.rollout_targets` from the same
components (clipped rewards and the Munchausen bonus, the bootstrap's value through h⁻¹ at each
next observation, the discount),
and the minibatches arrive as :class:`~zoo.types.TargetBatch`: a complete return enters the head
loss as its reward with discount 0, so step 4 is the same head loss with no next-state pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from zoo import registry
from zoo.horizon import Horizon
from zoo.losses.components import Bonus, munchausen_bonus, no_bonus
from zoo.losses.returns import q_lambda_targets
from zoo.networks.auxiliary import build_auxiliary
from zoo.networks.heads import Role
from zoo.networks.network import apply_batch, example_keys
from zoo.schedules import build_schedule
from zoo.spec import AlgorithmSpec
from zoo.types import LossAux, NetworkOutput, SequenceBatch, TargetBatch, Transition

Array = jax.Array

__all__ = ["Loss", "build_loss", "n_step_targets"]


def n_step_targets(r: Array, d: Array, n: int) -> tuple[Array, Array, Array]:
    """n-step return components inside one sequence, truncated at its end.

    Args:
      r: ``[L]`` rewards r₀ … r_{L−1}.
      d: ``[L]`` discounts (agent γ included) d₀ … d_{L−1}.
      n: the number of steps.

    Returns:
      ``(R, G, idx)``, each ``[L]``: Rₜ = Σ_{k<m} (Π_{i<k} d_{t+i})·r_{t+k},
      Gₜ = Π_{i<m} d_{t+i} and idx_t = t + m, the state bootstrapped from, with m = min(n, L − t).
      Rₜ + Gₜ·v(idx_t) is rlax.n_step_bootstrapped_returns (λ = 1).
    """
    length = r.shape[0]
    r_pad = jnp.concatenate([r, jnp.zeros((n,), r.dtype)])
    d_pad = jnp.concatenate([d, jnp.ones((n,), d.dtype)])
    ret = jnp.zeros_like(r)
    gain = jnp.ones_like(d)
    for k in range(n):
        ret = ret + gain * r_pad[k : k + length]
        gain = gain * d_pad[k : k + length]
    idx = jnp.minimum(jnp.arange(length) + n, length)
    return ret, gain, idx


def _apply(
    net: Any,
    observations: Array,
    key: Array,
    role: Role = "learn",
    axis_name: str | None = None,
) -> NetworkOutput:
    """A feed-forward network over a batch; one noise sample shared by the batch, per-example
    samples for a sampling head (:func:`zoo.networks.network.apply_batch`)."""
    return apply_batch(net, observations, key, role=role, axis_name=axis_name)


def _unroll(
    net: Any, observations: Array, state: Any, key: Array, sample_key: Array, role: Role
) -> tuple[NetworkOutput, Any]:
    """One example's unroll; a sampling head gets its own ``sample_key`` and the ``role``."""
    if getattr(net, "samples", False):
        return net.unroll(observations, state, key=key, sample_key=sample_key, role=role)
    return net.unroll(observations, state, key=key)


def _time_major_atoms(out: NetworkOutput, length: int) -> NetworkOutput:
    """Give the atoms a time axis when an unroll returned them once."""
    if getattr(out, "atoms", None) is not None and out.atoms.ndim == 1:
        out = out._replace(atoms=jnp.broadcast_to(out.atoms, (length, out.atoms.shape[0])))
    return out


class Loss:
    """A composed loss. Call as ``loss(online=, target=, batch=, key=, step=0)``.

    Attributes:
      spec: the spec it was built from.
      recurrent: whether it takes :class:`~zoo.types.SequenceBatch` (else
        :class:`~zoo.types.Transition`).
      prioritized: whether it returns priorities: whether the spec's replay kind samples by
        priority (the ``replay`` axis of the registry says; the loss never imports the replay).
      metric_names: the keys of ``LossAux.metrics``, in a fixed order (the training loop sums
        them in this order).
    """

    metric_names: tuple[str, ...] = (
        "loss",
        "td_loss",
        "regularizer",
        "abs_td",
        "q_sa",
        "importance_exponent",
    )

    def __init__(self, spec: AlgorithmSpec, axis_name: str | None = None):
        loss = spec.loss
        self.spec = spec
        #: the spec's auxiliary loss (zoo.networks.auxiliary), added to each item's TD loss
        self._auxiliary = build_auxiliary(spec)
        if self._auxiliary is not None:
            self.metric_names = (*type(self).metric_names, "auxiliary")
        self.recurrent = spec.recurrent
        self.prioritized = bool(registry.get("replay", spec.replay.kind)(spec.replay).prioritized)
        self._axis_name = axis_name
        td = registry.get("td", loss.td.kind)(loss.td)
        self._head_loss = registry.get("head_loss", spec.network.head.kind)(
            spec.network.head, td=td
        )
        self._bootstrap = registry.get("bootstrap", loss.bootstrap.kind)(
            loss.bootstrap, temperature=loss.temperature
        )
        self._tx = registry.get("value_transform", loss.value_transform.kind)(loss.value_transform)
        self._regularizer = registry.get("regularizer", loss.regularizer.kind)(loss.regularizer)
        self._priority = registry.get("priority", loss.priority.kind)(loss.priority)
        self._beta = build_schedule(loss.importance_exponent)
        self._importance_eps = float(loss.importance_eps)
        self._discount = float(loss.discount)
        self._horizon = Horizon(spec)
        self._bonus: Bonus = (
            munchausen_bonus(loss.munchausen.alpha, loss.munchausen.clip_min, loss.temperature)
            if loss.munchausen is not None
            else no_bonus
        )
        #: whether the Munchausen log-policy at s comes from the online network's output
        self._bonus_online = loss.munchausen is not None and loss.munchausen.policy == "online"
        clip = loss.reward_clip
        self._clip: Callable[[Array], Array] = (
            (lambda r: jnp.clip(r, -clip, clip)) if clip is not None else (lambda r: r)
        )
        self._n_step = loss.n_step
        self._sequence = spec.replay.sequence
        self._rollout = spec.rollout

    def __repr__(self) -> str:
        return f"Loss({self.spec.name or 'custom'}, recurrent={self.recurrent})"

    def __call__(
        self,
        online: Any,
        target: Any | None,
        batch: Transition | SequenceBatch,
        key: Array,
        step: Array | int = 0,
    ) -> tuple[Array, LossAux]:
        """The scalar loss (differentiable w.r.t. ``online``) and its :class:`LossAux`.

        ``target=None``: the target network *is* the online one, under stop-gradient (the
        learner passes it where the target is synced after every update, so that the two are
        equal at every update: Dopamine's DrQ(ε), ``target_update_period: 1``). The
        bootstrap then reads one pass of the online network at s′ for both the selection and the
        evaluation where that pass draws nothing (no noisy layers, no sampling head), instead of
        two passes of equal networks.
        """
        shared = target is None
        if target is None:
            target = jax.tree.map(
                lambda x: jax.lax.stop_gradient(x) if eqx.is_array(x) else x, online
            )
        if isinstance(batch, TargetBatch):
            parts = self._target_items(online, batch, key)
        elif self.recurrent:
            if not isinstance(batch, SequenceBatch):
                raise TypeError(
                    f"{self.spec.name or 'this spec'} has a recurrent core and learns from "
                    f"zoo.SequenceBatch, got {type(batch).__name__}"
                )
            parts = self._sequence_items(online, target, batch, key)
        else:
            if not isinstance(batch, Transition):
                raise TypeError(
                    f"{self.spec.name or 'this spec'} learns from zoo.Transition, "
                    f"got {type(batch).__name__}"
                )
            parts = self._transition_items(online, target, batch, key, shared=shared, step=step)
            if self._auxiliary is not None:
                weight = float(self.spec.auxiliary.weight)
                extra = weight * self._auxiliary.item_losses(online, target, batch) * parts[2][:, 0]
                return self._reduce(
                    *parts, probability=batch.probability, step=step, auxiliary=extra
                )
        return self._reduce(*parts, probability=batch.probability, step=step)

    # ---------------------------------------------------------------- single transitions

    def _transition_items(
        self,
        online: Any,
        target: Any,
        batch: Transition,
        key: Array,
        shared: bool = False,
        step: Array | int = 0,
    ) -> tuple[Array, Array, Array, Array]:
        k_online, k_select, k_target, k_target_tm1 = jax.random.split(key, 4)
        sg = jax.lax.stop_gradient
        axis = self._axis_name
        out_tm1 = _apply(online, batch.observation, k_online, "learn", axis)
        select_t = sg(_apply(online, batch.next_observation, k_select, "bootstrap", axis))
        if shared and not (self.spec.network.noisy or getattr(online, "samples", False)):
            out_t = select_t  # the target is the online network and the pass draws nothing
        else:
            out_t = sg(_apply(target, batch.next_observation, k_target, "bootstrap", axis))
        if self._bonus_online:
            bonus_tm1 = sg(out_tm1.q_values)
        else:
            bonus_tm1 = sg(
                _apply(target, batch.observation, k_target_tm1, "bootstrap", axis)
            ).q_values

        def example(o_tm1, a_tm1, r, d, o_t, q_select_t, q_target_tm1):
            pi, shift = self._bootstrap.policy(q_select_t, o_t.q_values)
            r = self._clip(r) + self._bonus(q_target_tm1, a_tm1)
            return self._head_loss(o_tm1, a_tm1, r, d, o_t, pi, shift, self._tx)

        # γ of this update (a schedule of the learner's updates, zoo.horizon), as the replay
        # built the batch's windows with
        d = batch.discount * self._horizon.discount(step)
        item_loss, td = jax.vmap(example)(
            out_tm1, batch.action, batch.reward, d, out_t, select_t.q_values, bonus_tm1
        )
        mask = (
            jnp.ones_like(item_loss) if batch.mask is None else batch.mask.astype(item_loss.dtype)
        )
        q_sa = jnp.take_along_axis(out_tm1.q_values, batch.action[:, None], axis=-1)[:, 0]
        return item_loss * mask, jnp.abs(td)[:, None], mask[:, None], q_sa[:, None]

    # ------------------------------------------------------------ rollouts (precomputed)

    def _target_items(
        self, online: Any, batch: TargetBatch, key: Array
    ) -> tuple[Array, Array, Array, Array]:
        out_tm1 = _apply(online, batch.observation, key, "learn", self._axis_name)
        # a complete return: reward = the target, discount 0; the "next state" is the same
        # output (gradient stopped, and multiplied by 0), so no other forward pass runs
        out_t = jax.lax.stop_gradient(out_tm1)
        num_actions = out_tm1.q_values.shape[-1]
        pi = jnp.full((num_actions,), 1.0 / num_actions, out_tm1.q_values.dtype)
        shift = jnp.zeros((num_actions,), out_tm1.q_values.dtype)
        zero = jnp.zeros((), batch.target.dtype)

        def example(o_tm1, a_tm1, target, o_t):
            return self._head_loss(o_tm1, a_tm1, target, zero, o_t, pi, shift, self._tx)

        item_loss, td = jax.vmap(example)(out_tm1, batch.action, batch.target, out_t)
        mask = (
            jnp.ones_like(item_loss) if batch.mask is None else batch.mask.astype(item_loss.dtype)
        )
        q_sa = jnp.take_along_axis(out_tm1.q_values, batch.action[:, None], axis=-1)[:, 0]
        return item_loss * mask, jnp.abs(td)[:, None], mask[:, None], q_sa[:, None]

    def rollout_targets(
        self,
        online: Any,
        target: Any,
        observation: Array,
        action: Array,
        reward: Array,
        terminated: Array,
        truncated: Array,
        valid: Array,
        key: Array,
    ) -> Array:
        """The Q(λ) targets of a time-major rollout (``spec.rollout``; see
        :func:`zoo.losses.returns.q_lambda_targets`).

        Args:
          online: the online network (the double bootstrap's selector).
          target: the network the targets come from; PQN has none, i.e. it is the online network
            as it is when the rollout is complete (``schedule.target_update_period`` = the
            updates of one learning phase).
          observation: ``[T + 1, N, ...]``: the observations acted on, then the one after the
            last step (the bootstrap of the rollout's end).
          action, reward, terminated, truncated: ``[T, N]`` each step's action and the
            environment's answer.
          valid: ``[T, N]`` whether each step is a real one (not envpool's pseudo-step after a
            game's end, nor a slot left unwritten): the trace never runs into an invalid step.
          key: the noise key of noisy layers (one sample for the whole rollout).

        Returns:
          ``[T, N]`` targets (gradient stopped): rewards clipped as ``loss.reward_clip`` says,
          plus the Munchausen bonus from the target network (the online one with
          `loss.munchausen.policy: online`) at each step where the spec has one,
          bootstrapped with the bootstrap's value ``Σₐ π(a)·(h⁻¹(Q(o′, a)) + shift(a))`` of each
          next observation; Watkins' trace (``rollout.trace``) is cut after non-greedy actions.
        """
        rollout = self._rollout
        if rollout is None:
            raise ValueError(f"{self.spec.name or 'this spec'} has no `rollout` section")
        steps, envs = action.shape
        k_online, k_target = jax.random.split(key)
        flat = observation.reshape((-1, *observation.shape[2:]))
        sg = jax.lax.stop_gradient

        def values(net: Any, k: Array) -> Array:
            return sg(_apply(net, flat, k, "bootstrap").q_values).reshape((steps + 1, envs, -1))

        q_target = values(target, k_target)
        q_select = values(online, k_online)  # removed under jit unless the bootstrap reads it
        pi, shift = jax.vmap(jax.vmap(self._bootstrap.policy))(q_select[1:], q_target[1:])
        value = jnp.sum(pi * (self._tx.apply_inv(q_target[1:]) + shift), axis=-1)
        q_bonus = q_select if self._bonus_online else q_target
        bonus = jax.vmap(jax.vmap(self._bonus))(q_bonus[:-1], action)
        lambda_ = jnp.full((steps, envs), rollout.td_lambda, jnp.float32)
        # λ_t weighs G_{t+1}: never into a step that is not a real continuation
        lambda_ = lambda_.at[:-1].multiply(valid[1:].astype(jnp.float32))
        if rollout.trace == "watkins":
            # ... nor past a non-greedy action a_{t+1} (greedy under the target policy)
            greedy = action[1:] == jnp.argmax(pi[:-1], axis=-1)
            lambda_ = lambda_.at[:-1].multiply(greedy.astype(jnp.float32))
        return q_lambda_targets(
            self._clip(reward) + bonus,
            value,
            terminated,
            truncated,
            self._discount,
            lambda_,
            rollout.truncation,
        )

    # ---------------------------------------------------------------------- sequences

    def _sequence_items(
        self, online: Any, target: Any, batch: SequenceBatch, key: Array
    ) -> tuple[Array, Array, Array, Array]:
        seq = self._sequence
        burn_in = seq.burn_in
        k_burn_online, k_burn_target, k_online, k_target = jax.random.split(key, 4)
        sg = jax.lax.stop_gradient
        state = batch.core_state
        if not seq.stored_state or state is None:
            if seq.stored_state:
                raise ValueError(
                    "replay.sequence.stored_state is true but the batch has no core_state; "
                    "store the core state or set replay.sequence.stored_state: false"
                )
            initial = online.initial_state()
            size = batch.action.shape[0]
            state = jax.tree.map(lambda x: jnp.broadcast_to(x, (size, *x.shape)), initial)
        mask = batch.mask
        if mask is None:
            mask = jnp.ones(batch.action.shape, batch.reward.dtype)

        def sequence(obs, actions, rewards, discounts, start, mask_t, sample_key):
            online_state = target_state = start
            s_burn_online, s_burn_target, s_online, s_target = jax.random.split(sample_key, 4)
            if burn_in > 0:
                _, online_state = _unroll(
                    online, obs[:burn_in], start, k_burn_online, s_burn_online, "learn"
                )
                _, target_state = _unroll(
                    target, obs[:burn_in], start, k_burn_target, s_burn_target, "bootstrap"
                )
                if not seq.burn_in_grad:
                    online_state = sg(online_state)
            obs, actions, rewards, discounts, mask_t = (
                x[burn_in:] for x in (obs, actions, rewards, discounts, mask_t)
            )
            length = actions.shape[0]
            out, _ = _unroll(online, obs, online_state, k_online, s_online, "learn")
            out_target, _ = _unroll(target, obs, target_state, k_target, s_target, "bootstrap")
            out = _time_major_atoms(out, length)
            out_target = sg(_time_major_atoms(out_target, length))
            pi, shift = jax.vmap(self._bootstrap.policy)(sg(out.q_values), out_target.q_values)
            q_bonus = sg(out.q_values) if self._bonus_online else out_target.q_values
            bonus = jax.vmap(self._bonus)(q_bonus[:-1], actions[:-1])
            r = self._clip(rewards[:-1]) + bonus
            ret, gain, idx = n_step_targets(r, discounts[:-1] * self._discount, self._n_step)
            out_boot = jax.tree.map(lambda x: x[idx], out_target)
            out_tm1 = jax.tree.map(lambda x: x[:-1], out)
            step_loss, td = jax.vmap(self._head_loss, in_axes=(0, 0, 0, 0, 0, 0, 0, None))(
                out_tm1, actions[:-1], ret, gain, out_boot, pi[idx], shift[idx], self._tx
            )
            m = mask_t[:-1]
            q_sa = jnp.take_along_axis(out_tm1.q_values, actions[:-1, None], axis=-1)[:, 0]
            return jnp.sum(m * step_loss), jnp.abs(td), m, q_sa

        # per-sequence keys of sampling heads (unused, and removed under jit, by the others)
        sample_keys = example_keys(
            jax.random.fold_in(key, 1), batch.action.shape[0], self._axis_name
        )
        return jax.vmap(sequence)(
            batch.observation, batch.action, batch.reward, batch.discount, state, mask, sample_keys
        )

    # ---------------------------------------------------------------------- reduction

    def _reduce(
        self,
        item_loss: Array,
        abs_td: Array,
        mask: Array,
        q_sa: Array,
        *,
        probability: Array,
        step: Array | int,
        auxiliary: Array | None = None,
    ) -> tuple[Array, LossAux]:
        beta = self._beta(step)
        weights = (1.0 / (probability + self._importance_eps)).astype(item_loss.dtype) ** beta
        top = jnp.max(weights)
        if self._axis_name is not None:
            top = jax.lax.pmax(top, self._axis_name)
        weights = weights / top
        td_loss = jnp.mean(weights * item_loss)
        regularizer = self._regularizer(q_sa, mask)
        total = td_loss + regularizer
        extra: tuple[Array, ...] = ()
        if auxiliary is not None:
            # weighted like the TD loss it is added to (BBF: (dqn + w·spr)·weights, then mean)
            extra = (jnp.mean(weights * auxiliary),)
            total = total + extra[0]
        priorities = jax.vmap(self._priority)(abs_td, item_loss, mask) if self.prioritized else None
        values = (
            total,
            td_loss,
            regularizer,
            jnp.sum(mask * abs_td) / jnp.maximum(jnp.sum(mask), 1.0),
            jnp.sum(mask * q_sa) / jnp.maximum(jnp.sum(mask), 1.0),
            beta,
            *extra,
        )
        metrics = dict(zip(self.metric_names, values, strict=True))
        return total, LossAux(priorities=priorities, metrics=metrics)


def build_loss(spec: AlgorithmSpec, *, axis_name: str | None = None) -> Loss:
    """Compose the loss described by ``spec``.

    Args:
      spec: a validated :class:`~zoo.spec.AlgorithmSpec` (see :func:`zoo.load_algorithm`).
      axis_name: the ``pmap``/``shard_map`` axis over which the importance-weight normaliser is
        taken (``lax.pmax``), so one device and many give the same update; ``None`` on one.

    Returns:
      A :class:`Loss`: ``loss(online=, target=, batch=, key=, step=0) -> (scalar, LossAux)``.
    """
    return Loss(spec, axis_name=axis_name)
