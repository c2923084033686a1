"""Exactness of the reference catalogue entries against an rlax oracle run in float64.

Each catalogue entry that mirrors one of DeepMind Acme's JAX losses (docs/design.md, "Loss
semantics") is compared, value, priorities and gradient, with an *oracle*: the same rlax functions
combined the way the reference loss combines them, evaluated in float64 on a float64 copy of the
networks and of the batch. The project's loss runs in float32 on the float32 networks, as in
training (tolerances justified at ``TOLERANCE``), and once more in float64, where it must agree to
~roundoff.

The oracle is written from the reference's semantics (not copied from it) and is itself checked
first: against hand-computed numbers on two-example batches and against independent numpy
formulas (a naive n-step loop for R2D2, a naive categorical projection for C51, a naive quantile
Huber loss for QR-DQN).

The networks here are this file's own tiny Equinox modules, independent of ``zoo.networks``; they
follow the network protocol of docs/design.md ("Public Python API") and spread their Q values widely
(|Q| of a few units, gaps far above M-DQN's temperature) so that argmaxes are unambiguous and
M-DQN's log-policy clip binds for some items and not for others.

float64 is switched on only inside ``jax.enable_x64(True)`` blocks; ``test_x64_does_not_leak``
checks that the rest of the pytest process keeps JAX's float32 default.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

import zoo

ENTRIES = (
    "dqn",
    "dqn_reg",
    "mdqn",
    "prioritized_ddqn",
    "prioritized_c51",
    "qr_dqn",
    "r2d2",
)

OBS_DIM = 5
NUM_ACTIONS = 4
HIDDEN = 16
BATCH = 32
SEQ_BATCH = 16
# R2D2 with a short stored sequence: T = burn_in + trace_length + 1 = 3 + 6 + 1 = 10.
R2D2_OVERRIDES = {"replay.sequence.burn_in": 3, "replay.sequence.trace_length": 6}
R2D2_BURN_IN = 3
R2D2_T = 10
# Heads of the papers (C51: 51 atoms on [-10, 10]; QR-DQN: 200 quantiles); the test nets use them
# and ``check_spec`` asserts the catalogue does too.
C51_ATOMS, C51_V_MIN, C51_V_MAX = 51, -10.0, 10.0
QR_QUANTILES = 200

# Minimum gap between the best and second-best selector value (float64 oracle) at every place an
# argmax picks an action. Far above the float32-vs-float64 difference of Q values (~1e-6), so the
# project and the oracle cannot pick different actions because of rounding.
MIN_ARGMAX_GAP = 1e-3

Array = jax.Array


# --------------------------------------------------------------------------------------------
# Test networks (this file's own; docs/design.md's network protocol, independent of zoo.networks)
# --------------------------------------------------------------------------------------------


class FeedForwardNet(eqx.Module):
    """Tiny MLP ``obs [D] -> NetworkOutput`` with a scalar, categorical or quantile head."""

    hidden: eqx.nn.Linear
    out: eqx.nn.Linear
    head: str = eqx.field(static=True)
    num_atoms: int = eqx.field(static=True)
    v_min: float = eqx.field(static=True)
    v_max: float = eqx.field(static=True)
    scale: float = eqx.field(static=True)
    is_recurrent: ClassVar[bool] = False

    def __init__(
        self,
        key: Array,
        *,
        head: str = "q",
        num_atoms: int = 1,
        v_min: float = 0.0,
        v_max: float = 0.0,
        scale: float = 8.0,
    ) -> None:
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(OBS_DIM, HIDDEN, key=k1)
        self.out = eqx.nn.Linear(HIDDEN, NUM_ACTIONS * num_atoms, key=k2)
        self.head, self.num_atoms, self.v_min, self.v_max = head, num_atoms, v_min, v_max
        self.scale = scale

    def __call__(self, obs: Array, *, key: Array | None = None) -> zoo.NetworkOutput:
        """Evaluates one observation."""
        y = self.scale * self.out(jnp.tanh(self.hidden(obs)))
        if self.head == "q":
            return zoo.NetworkOutput(q_values=y)
        y = y.reshape(NUM_ACTIONS, self.num_atoms)
        if self.head == "categorical":
            atoms = jnp.linspace(self.v_min, self.v_max, self.num_atoms, dtype=y.dtype)
            q = jnp.sum(jax.nn.softmax(y, axis=-1) * atoms, axis=-1)
            return zoo.NetworkOutput(q_values=q, logits=y, atoms=atoms)
        return zoo.NetworkOutput(q_values=jnp.mean(y, axis=-1), quantiles=y)


class RecurrentNet(eqx.Module):
    """Tiny hand-written LSTM ``(obs [D], (h [H], c [H])) -> (NetworkOutput, state)``."""

    torso: eqx.nn.Linear
    gates: eqx.nn.Linear
    out: eqx.nn.Linear
    scale: float = eqx.field(static=True)
    is_recurrent: ClassVar[bool] = True

    def __init__(self, key: Array, *, scale: float = 10.0) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.torso = eqx.nn.Linear(OBS_DIM, HIDDEN, key=k1)
        self.gates = eqx.nn.Linear(2 * HIDDEN, 4 * HIDDEN, key=k2)
        self.out = eqx.nn.Linear(HIDDEN, NUM_ACTIONS, key=k3)
        self.scale = scale

    def initial_state(self) -> tuple[Array, Array]:
        """Zero ``(h, c)`` for one example."""
        zeros = jnp.zeros(HIDDEN, self.out.weight.dtype)
        return zeros, zeros

    def __call__(
        self, obs: Array, state: tuple[Array, Array], *, key: Array | None = None
    ) -> tuple[zoo.NetworkOutput, tuple[Array, Array]]:
        """One step of the core for one observation."""
        h, c = state
        x = jax.nn.relu(self.torso(obs))
        i, f, g, o = jnp.split(self.gates(jnp.concatenate([x, h])), 4)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return zoo.NetworkOutput(q_values=self.scale * self.out(h)), (h, c)

    def unroll(
        self, observations: Array, state: tuple[Array, Array], *, key: Array | None = None
    ) -> tuple[zoo.NetworkOutput, tuple[Array, Array]]:
        """Unrolls ``observations [T, D]`` from ``state``; outputs carry a leading T axis."""

        def step(carry: tuple[Array, Array], obs: Array) -> tuple[Any, zoo.NetworkOutput]:
            out, carry = self(obs, carry)
            return carry, out

        final, outputs = jax.lax.scan(step, state, observations)
        return outputs, final


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------


def make_transitions(seed: int, batch: int = BATCH) -> zoo.Transition:
    """Random float32 transitions: unclipped rewards, mixed discounts, skewed probabilities."""
    rng = np.random.default_rng(seed)
    # Terminal, non-terminal and n-step-like fractional discounts (γ^{k-1} products).
    pattern = np.array([0.0, 1.0, 1.0, 0.9, 0.81, 0.729, 1.0, 0.0])
    discount = rng.permutation(np.resize(pattern, batch))
    return zoo.Transition(
        observation=jnp.asarray(rng.normal(size=(batch, OBS_DIM)), jnp.float32),
        action=jnp.asarray(rng.integers(0, NUM_ACTIONS, size=batch), jnp.int32),
        reward=jnp.asarray(rng.uniform(-3.0, 3.0, size=batch), jnp.float32),
        discount=jnp.asarray(discount, jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(batch, OBS_DIM)), jnp.float32),
        probability=jnp.asarray(10.0 ** rng.uniform(-4.0, -1.0, size=batch), jnp.float32),
    )


def make_sequences(seed: int, batch: int = SEQ_BATCH, length: int = R2D2_T) -> zoo.SequenceBatch:
    """Random float32 sequences with a stored core state and terminals inside the trace."""
    rng = np.random.default_rng(seed)
    discount = np.ones((batch, length))
    for b in range(batch):
        if b % 4 != 3:  # three sequences in four have a terminal, in burn-in or in the trace
            discount[b, rng.integers(1, length - 1)] = 0.0
    core_state = (
        jnp.asarray(np.tanh(rng.normal(size=(batch, HIDDEN))), jnp.float32),
        jnp.asarray(rng.normal(size=(batch, HIDDEN)), jnp.float32),
    )
    return zoo.SequenceBatch(
        observation=jnp.asarray(rng.normal(size=(batch, length, OBS_DIM)), jnp.float32),
        action=jnp.asarray(rng.integers(0, NUM_ACTIONS, size=(batch, length)), jnp.int32),
        reward=jnp.asarray(rng.uniform(-3.0, 3.0, size=(batch, length)), jnp.float32),
        discount=jnp.asarray(discount, jnp.float32),
        core_state=core_state,
        probability=jnp.asarray(10.0 ** rng.uniform(-4.0, -1.0, size=batch), jnp.float32),
    )


def to_float64(tree: Any) -> Any:
    """Casts every floating array leaf of a pytree to float64 (call inside ``enable_x64``)."""

    def cast(x: Any) -> Any:
        if eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.asarray(x, jnp.float64)
        return x

    return jax.tree.map(cast, tree)


# --------------------------------------------------------------------------------------------
# The oracle: rlax functions combined as the reference losses combine them
# --------------------------------------------------------------------------------------------


class OracleHyper(NamedTuple):
    """Reference hyperparameters of one entry (docs/design.md, "Loss semantics")."""

    discount: float
    reward_clip: float | None = None
    tau: float = 0.03
    alpha: float = 0.9
    clip_min: float = -1.0
    huber: float = 1.0
    reg_coeff: float = 0.1
    n: int = 5
    eta: float = 0.9
    importance_eps: float = 0.0


REFERENCE: dict[str, OracleHyper] = {
    "dqn": OracleHyper(discount=0.99, reward_clip=1.0),
    "dqn_reg": OracleHyper(discount=0.99, reward_clip=None, reg_coeff=0.1),
    "mdqn": OracleHyper(discount=0.99, reward_clip=1.0, tau=0.03, alpha=0.9, clip_min=-1.0),
    "prioritized_ddqn": OracleHyper(discount=0.99, reward_clip=1.0, huber=1.0),
    "prioritized_c51": OracleHyper(discount=0.99, reward_clip=1.0),
    "qr_dqn": OracleHyper(discount=0.99, reward_clip=None, huber=1.0),
    "r2d2": OracleHyper(discount=0.997, reward_clip=None, n=5, eta=0.9, importance_eps=1e-6),
}


def _batched(net: eqx.Module, obs: Array) -> zoo.NetworkOutput:
    return jax.vmap(lambda o: net(o))(obs)


def _clip(r: Array, bound: float | None) -> Array:
    return r if bound is None else jnp.clip(r, -bound, bound)


def importance_weights(probability: Array, beta: Array | float, eps: float) -> Array:
    """``w = (1/(p + eps))^β / max_batch(w)``, the reference's normalised weights."""
    w = (1.0 / (probability + eps)) ** beta
    return w / jnp.max(w)


def oracle_dqn(online, target, batch: zoo.Transition, hp: OracleHyper) -> tuple[Array, None]:
    """Acme QLearning: ``mean(td²)`` of ``rlax.q_learning``."""
    q_tm1 = _batched(online, batch.observation).q_values
    q_t = _batched(target, batch.next_observation).q_values
    r = _clip(batch.reward, hp.reward_clip)
    td = jax.vmap(rlax.q_learning)(q_tm1, batch.action, r, batch.discount * hp.discount, q_t)
    return jnp.mean(jnp.square(td)), None


def oracle_dqn_reg(online, target, batch: zoo.Transition, hp: OracleHyper) -> tuple[Array, None]:
    """Acme RegularizedQLearning: ``coeff·mean(Q(s,a)) + mean(½td²)``, rewards unclipped."""
    q_tm1 = _batched(online, batch.observation).q_values
    q_t = _batched(target, batch.next_observation).q_values
    r = _clip(batch.reward, hp.reward_clip)
    td = jax.vmap(rlax.q_learning)(q_tm1, batch.action, r, batch.discount * hp.discount, q_t)
    q_sa = jax.vmap(lambda q, a: q[a])(q_tm1, batch.action)
    return hp.reg_coeff * jnp.mean(q_sa) + jnp.mean(0.5 * jnp.square(td)), None


def munchausen_term(q_target_s: Array, action: Array, hp: OracleHyper) -> Array:
    """``τ·log softmax(q/τ)[a]`` per item, before the clip to ``[clip_min, 0]``."""
    log_pi = hp.tau * jax.nn.log_softmax(q_target_s / hp.tau, axis=-1)
    return jnp.take_along_axis(log_pi, action[:, None], axis=-1)[:, 0]


def oracle_mdqn(online, target, batch: zoo.Transition, hp: OracleHyper) -> tuple[Array, None]:
    """Acme MunchausenQLearning with the paper's clip: target net at both s and s'."""
    q_online_s = _batched(online, batch.observation).q_values
    q_target_s = _batched(target, batch.observation).q_values
    q_target_next = _batched(target, batch.next_observation).q_values
    r = _clip(batch.reward, hp.reward_clip)
    bonus = jnp.clip(munchausen_term(q_target_s, batch.action, hp), hp.clip_min, 0.0)
    next_v = hp.tau * jax.nn.logsumexp(q_target_next / hp.tau, axis=-1)
    y = jax.lax.stop_gradient(r + hp.alpha * bonus + batch.discount * hp.discount * next_v)
    q_sa = jnp.take_along_axis(q_online_s, batch.action[:, None], axis=-1)[:, 0]
    return jnp.mean(rlax.huber_loss(y - q_sa, hp.huber)), None


def oracle_prioritized_ddqn(
    online, target, batch: zoo.Transition, hp: OracleHyper, beta: float
) -> tuple[Array, Array]:
    """Acme PrioritizedDoubleQLearning: weighted Huber of ``rlax.double_q_learning``."""
    q_tm1 = _batched(online, batch.observation).q_values
    q_t_value = _batched(target, batch.next_observation).q_values
    q_t_selector = _batched(online, batch.next_observation).q_values
    r = _clip(batch.reward, hp.reward_clip)
    d = batch.discount * hp.discount
    td = jax.vmap(rlax.double_q_learning)(q_tm1, batch.action, r, d, q_t_value, q_t_selector)
    w = importance_weights(batch.probability, beta, hp.importance_eps)
    return jnp.mean(w * rlax.huber_loss(td, hp.huber)), jnp.abs(td)


def oracle_prioritized_c51(
    online, target, batch: zoo.Transition, hp: OracleHyper, beta: float
) -> tuple[Array, Array]:
    """Acme PrioritizedCategoricalDoubleQLearning: ``rlax.categorical_double_q_learning``."""
    out_tm1 = _batched(online, batch.observation)
    out_t = _batched(target, batch.next_observation)
    q_t_selector = _batched(online, batch.next_observation).q_values
    r = _clip(batch.reward, hp.reward_clip)
    d = batch.discount * hp.discount
    per_item = jax.vmap(rlax.categorical_double_q_learning, in_axes=(None, 0, 0, 0, 0, None, 0, 0))(
        out_tm1.atoms[0],
        out_tm1.logits,
        batch.action,
        r,
        d,
        out_t.atoms[0],
        out_t.logits,
        q_t_selector,
    )
    w = importance_weights(batch.probability, beta, hp.importance_eps)
    return jnp.mean(w * per_item), jnp.abs(per_item)


def oracle_qr_dqn(online, target, batch: zoo.Transition, hp: OracleHyper) -> tuple[Array, None]:
    """Acme QrDqn fed ``discount·γ``: ``rlax.quantile_q_learning`` on ``[N, A]`` quantiles."""
    dist_tm1 = jnp.swapaxes(_batched(online, batch.observation).quantiles, 1, 2)
    dist_t = jnp.swapaxes(_batched(target, batch.next_observation).quantiles, 1, 2)
    n = dist_tm1.shape[1]
    taus = (jnp.arange(n, dtype=dist_tm1.dtype) + 0.5) / n
    r = _clip(batch.reward, hp.reward_clip)
    losses = jax.vmap(rlax.quantile_q_learning, in_axes=(0, None, 0, 0, 0, 0, 0, None))(
        dist_tm1, taus, batch.action, r, batch.discount * hp.discount, dist_t, dist_t, hp.huber
    )
    return jnp.mean(losses), None


def r2d2_time_major_q(
    online, target, batch: zoo.SequenceBatch, burn_in: int, stop_burn_in_grad: bool
) -> tuple[Array, Array]:
    """Online and target Q values ``[T - burn_in, B, A]`` after burn-in from the stored state."""
    unroll = jax.vmap(lambda net, obs, state: net.unroll(obs, state), in_axes=(None, 0, 0))
    online_state = target_state = batch.core_state
    if burn_in:
        _, online_state = unroll(online, batch.observation[:, :burn_in], online_state)
        _, target_state = unroll(target, batch.observation[:, :burn_in], target_state)
        if stop_burn_in_grad:
            online_state = jax.lax.stop_gradient(online_state)
    online_q = unroll(online, batch.observation[:, burn_in:], online_state)[0].q_values
    target_q = unroll(target, batch.observation[:, burn_in:], target_state)[0].q_values
    return jnp.swapaxes(online_q, 0, 1), jnp.swapaxes(target_q, 0, 1)


def oracle_r2d2(
    online,
    target,
    batch: zoo.SequenceBatch,
    hp: OracleHyper,
    beta: float,
    burn_in: int,
    stop_burn_in_grad: bool = False,
) -> tuple[Array, Array]:
    """The Acme R2D2 learner's loss, time-major, with the signed hyperbolic pair."""
    online_q, target_q = r2d2_time_major_q(online, target, batch, burn_in, stop_burn_in_grad)
    action = jnp.swapaxes(batch.action, 0, 1)[burn_in:]
    reward = _clip(jnp.swapaxes(batch.reward, 0, 1)[burn_in:], hp.reward_clip)
    discount = jnp.swapaxes(batch.discount, 0, 1)[burn_in:] * hp.discount
    selector = jnp.argmax(online_q, axis=-1)
    td_fn = functools.partial(
        rlax.transformed_n_step_q_learning, n=hp.n, tx_pair=rlax.SIGNED_HYPERBOLIC_PAIR
    )
    td = jax.vmap(td_fn, in_axes=1, out_axes=1)(
        online_q[:-1], action[:-1], target_q[1:], selector[1:], reward[:-1], discount[:-1]
    )
    per_sequence = 0.5 * jnp.sum(jnp.square(td), axis=0)
    w = importance_weights(batch.probability, beta, hp.importance_eps)
    abs_td = jnp.abs(td)
    priorities = hp.eta * jnp.max(abs_td, axis=0) + (1.0 - hp.eta) * jnp.mean(abs_td, axis=0)
    return jnp.mean(w * per_sequence), priorities


# --------------------------------------------------------------------------------------------
# Specs: the reference values the catalogue must carry, and schedule evaluation
# --------------------------------------------------------------------------------------------


def _get(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


def _kind(value: Any) -> Any:
    """A component's kind (a bare name is shorthand for ``{kind: name}``)."""
    return value if value is None or isinstance(value, str) else value.kind


# Dotted spec path -> expected value. A path ending in ``:kind`` compares the component's kind.
SPEC_EXPECTATIONS: dict[str, dict[str, Any]] = {
    "dqn": {
        "loss.discount": 0.99,
        "loss.reward_clip": 1.0,
        "loss.n_step": 1,
        "loss.bootstrap:kind": "max",
        "loss.td.kind": "squared",
        "loss.td.scale": 1.0,
        "loss.regularizer:kind": "none",
        "loss.value_transform:kind": "identity",
        "loss.munchausen": None,
        "network.head:kind": "q",
    },
    "dqn_reg": {
        "loss.discount": 0.99,
        "loss.reward_clip": None,
        "loss.n_step": 1,
        "loss.bootstrap:kind": "max",
        "loss.td.kind": "squared",
        "loss.td.scale": 0.5,
        "loss.regularizer.kind": "q_value",
        "loss.regularizer.coeff": 0.1,
        "loss.value_transform:kind": "identity",
        "network.head:kind": "q",
    },
    "mdqn": {
        "loss.discount": 0.99,
        "loss.reward_clip": 1.0,
        "loss.n_step": 1,
        "loss.bootstrap:kind": "soft",
        "loss.temperature": 0.03,
        "loss.munchausen.alpha": 0.9,
        "loss.munchausen.clip_min": -1.0,
        "loss.td.kind": "huber",
        "loss.td.delta": 1.0,
        "loss.regularizer:kind": "none",
        "network.head:kind": "q",
    },
    "prioritized_ddqn": {
        "loss.discount": 0.99,
        "loss.reward_clip": 1.0,
        "loss.n_step": 1,
        "loss.bootstrap:kind": "double",
        "loss.td.kind": "huber",
        "loss.td.delta": 1.0,
        "loss.importance_eps": 0.0,
        "loss.priority:kind": "abs_td",
        "replay.kind": "prioritized",
        "replay.priority_exponent": 0.6,  # Schaul et al. 2016, proportional: α = 0.6
        "network.head:kind": "q",
    },
    "prioritized_c51": {
        "loss.discount": 0.99,
        "loss.reward_clip": 1.0,
        "loss.n_step": 1,
        "loss.bootstrap:kind": "double",
        "loss.importance_eps": 0.0,
        "loss.td:kind": "cross_entropy",
        "loss.priority:kind": "abs_loss",
        "replay.kind": "prioritized",
        "replay.priority_exponent": 0.5,  # Rainbow's α (the loss does not read it)
        "network.head.kind": "categorical",
        "network.head.num_atoms": C51_ATOMS,
        "network.head.v_min": C51_V_MIN,
        "network.head.v_max": C51_V_MAX,
    },
    "qr_dqn": {
        "loss.discount": 0.99,
        "loss.reward_clip": None,
        "loss.n_step": 1,
        "loss.bootstrap:kind": "max",
        "loss.td.kind": "huber",
        "loss.td.delta": 1.0,
        "network.head.kind": "quantile",
        "network.head.num_quantiles": QR_QUANTILES,
    },
    "r2d2": {
        "loss.discount": 0.997,
        "loss.reward_clip": None,
        "loss.n_step": 5,
        "loss.bootstrap:kind": "double",
        "loss.td.kind": "squared",
        "loss.td.scale": 0.5,
        "loss.value_transform.kind": "signed_hyperbolic",
        "loss.value_transform.eps": 1e-3,
        "loss.importance_eps": 1e-6,
        "loss.priority.kind": "max_mean",
        "loss.priority.eta": 0.9,
        "replay.kind": "prioritized",
        "replay.priority_exponent": 0.9,
        "replay.sequence.burn_in": 40,
        "replay.sequence.trace_length": 80,
        "replay.sequence.period": 40,
        "replay.sequence.stored_state": True,
        "replay.sequence.burn_in_grad": True,
        "network.head:kind": "q",
    },
}


def check_spec(name: str, spec: Any) -> None:
    """Asserts that the catalogue entry carries the reference's hyperparameters."""
    for key, expected in SPEC_EXPECTATIONS[name].items():
        path, _, kind = key.partition(":")
        value = _get(spec, path)
        if kind:
            value = _kind(value)
        if isinstance(expected, float):
            assert value is not None and math.isclose(value, expected, rel_tol=1e-12), (
                f"{name}: {path} = {value!r}, the reference has {expected!r}"
            )
        else:
            assert value == expected, f"{name}: {path} = {value!r}, the reference has {expected!r}"


def beta_at(spec: Any, step: int) -> float:
    """Evaluates ``loss.importance_exponent`` (a schedule of learner updates) at ``step``."""
    beta = spec.loss.importance_exponent
    if isinstance(beta, int | float):
        return float(beta)
    if beta.kind == "constant":
        return float(beta.value)
    assert beta.kind == "linear", f"the oracle knows constant and linear schedules, got {beta!r}"
    frac = min(max((step - beta.begin) / beta.steps, 0.0), 1.0)
    return float(beta.start + (beta.end - beta.start) * frac)


def check_importance_exponent(name: str, spec: Any) -> tuple[int, ...]:
    """Asserts the entry's β against the reference; returns the learner steps to test at."""
    beta = spec.loss.importance_exponent
    if name in ("prioritized_ddqn", "prioritized_c51"):
        # Schaul et al. 2016 (and Rainbow): β annealed linearly from 0.4 to 1 over training.
        assert _kind(beta) == "linear", f"{name}: β should anneal 0.4 -> 1, got {beta!r}"
        assert (beta.start, beta.end, beta.begin) == (0.4, 1.0, 0), f"{name}: β = {beta!r}"
        return (0, beta.steps // 2)  # β = 0.4 and 0.7
    if name == "r2d2":
        assert beta_at(spec, 0) == 0.6 and beta_at(spec, 10**9) == 0.6, f"r2d2: β = {beta!r}"
        return (0,)
    assert beta_at(spec, 0) == 0.0 and beta_at(spec, 10**9) == 0.0, f"{name}: β = {beta!r}"
    return (0,)


def oracle_for(name: str, spec: Any, step: int) -> Callable[..., tuple[Array, Array | None]]:
    """The oracle loss ``(online, target, batch) -> (loss, priorities)`` of an entry at a step."""
    hp = REFERENCE[name]
    if name == "dqn":
        return functools.partial(oracle_dqn, hp=hp)
    if name == "dqn_reg":
        return functools.partial(oracle_dqn_reg, hp=hp)
    if name == "mdqn":
        return functools.partial(oracle_mdqn, hp=hp)
    if name == "qr_dqn":
        return functools.partial(oracle_qr_dqn, hp=hp)
    beta = beta_at(spec, step)
    if name == "prioritized_ddqn":
        return functools.partial(oracle_prioritized_ddqn, hp=hp, beta=beta)
    if name == "prioritized_c51":
        return functools.partial(oracle_prioritized_c51, hp=hp, beta=beta)
    seq = spec.replay.sequence
    return functools.partial(
        oracle_r2d2,
        hp=hp,
        beta=beta,
        burn_in=seq.burn_in,
        stop_burn_in_grad=not seq.burn_in_grad,
    )


def selector_values(name: str, online, target, batch: Any, burn_in: int) -> Array | None:
    """The values whose argmax picks a bootstrap action in the reference (None if no argmax)."""
    if name in ("prioritized_ddqn", "prioritized_c51"):
        return _batched(online, batch.next_observation).q_values
    if name == "qr_dqn":
        return _batched(target, batch.next_observation).q_values
    if name == "r2d2":
        return r2d2_time_major_q(online, target, batch, burn_in, False)[0][1:]
    return None


def min_argmax_gap(values: Array) -> float:
    """Smallest gap between the best and second-best action over all positions."""
    top2 = jnp.sort(values, axis=-1)[..., -2:]
    return float(jnp.min(top2[..., 1] - top2[..., 0]))


# --------------------------------------------------------------------------------------------
# The oracle checked on its own: hand-computed numbers and independent numpy formulas
# --------------------------------------------------------------------------------------------


class TableNet(eqx.Module):
    """``Q(s) = onehot(s) @ table``: a network whose Q values are written down by hand."""

    table: Array
    is_recurrent: ClassVar[bool] = False

    def __call__(self, obs: Array, *, key: Array | None = None) -> zoo.NetworkOutput:
        """Evaluates one one-hot observation."""
        return zoo.NetworkOutput(q_values=obs @ self.table)


# Three states, three actions.
Q_ONLINE = [[1.0, 2.0, -1.0], [0.5, -0.5, 3.0], [2.0, 0.0, -3.0]]
Q_TARGET = [[0.0, 1.2, 2.5], [-1.0, 4.0, 3.9], [1.0, -2.0, 0.5]]


def _hand_batch() -> zoo.Transition:
    """Two transitions: 0 -a1, r 2.5 (clipped to 1), d 1-> 1 and 1 -a2, r -0.5, d 0.9-> 2."""
    eye = np.eye(3)
    return zoo.Transition(
        observation=jnp.asarray(eye[[0, 1]]),
        action=jnp.asarray([1, 2], jnp.int32),
        reward=jnp.asarray([2.5, -0.5]),
        discount=jnp.asarray([1.0, 0.9]),
        next_observation=jnp.asarray(eye[[1, 2]]),
        probability=jnp.asarray([0.01, 0.04]),
    )


def _huber(x: float) -> float:
    return 0.5 * x * x if abs(x) <= 1.0 else abs(x) - 0.5


@pytest.mark.compiled
def test_oracle_hand_computed() -> None:
    """The oracle reproduces numbers computed by hand from the two tables above."""
    with jax.enable_x64(True):
        online, target = TableNet(jnp.asarray(Q_ONLINE)), TableNet(jnp.asarray(Q_TARGET))
        batch = _hand_batch()
        hp = REFERENCE

        # dqn: r clipped to 1; max_a Q_target(1) = 4.0, max_a Q_target(2) = 1.0.
        td = [1.0 + 0.99 * 4.0 - 2.0, -0.5 + 0.99 * 0.9 * 1.0 - 3.0]  # 2.96, -2.609
        loss, prio = oracle_dqn(online, target, batch, hp["dqn"])
        assert prio is None
        np.testing.assert_allclose(loss, (td[0] ** 2 + td[1] ** 2) / 2, rtol=1e-12)
        np.testing.assert_allclose(loss, 7.7842405, rtol=1e-12)

        # dqn_reg: reward 2.5 unclipped; 0.1·mean(Q(s,a)) + mean(½td²).
        td = [2.5 + 0.99 * 4.0 - 2.0, -0.5 + 0.99 * 0.9 * 1.0 - 3.0]  # 4.46, -2.609
        loss, _ = oracle_dqn_reg(online, target, batch, hp["dqn_reg"])
        np.testing.assert_allclose(loss, 0.1 * 2.5 + 0.25 * (td[0] ** 2 + td[1] ** 2), rtol=1e-12)
        np.testing.assert_allclose(loss, 6.92462025, rtol=1e-12)

        # prioritized_ddqn, β = 0.5: the online net picks a' = 2 in state 1 and a' = 0 in state 2.
        td = [1.0 + 0.99 * 3.9 - 2.0, -0.5 + 0.99 * 0.9 * 1.0 - 3.0]  # 2.861, -2.609
        w = [1.0, 0.5]  # (1/0.01)^0.5 = 10 and (1/0.04)^0.5 = 5, over their max
        loss, prio = oracle_prioritized_ddqn(online, target, batch, hp["prioritized_ddqn"], 0.5)
        np.testing.assert_allclose(loss, (w[0] * _huber(td[0]) + w[1] * _huber(td[1])) / 2)
        np.testing.assert_allclose(loss, (2.361 + 0.5 * 2.109) / 2, rtol=1e-12)
        np.testing.assert_allclose(prio, [2.861, 2.609], rtol=1e-12)

        # mdqn, τ = 0.03: τ·log π_target(a|s) is -1.3 (clipped to -1) for item 0 and about -0.101
        # (not clipped) for item 1; soft values τ·logsumexp(q/τ) are ~4 and ~1 at s'.
        tau = 0.03
        m1 = -0.1 - tau * math.log1p(math.exp(-0.1 / tau) + math.exp(-5.0 / tau))
        v1 = 1.0 + tau * math.log1p(math.exp(-3.0 / tau) + math.exp(-0.5 / tau))
        v0 = 4.0 + tau * math.log1p(math.exp(-5.0 / tau) + math.exp(-0.1 / tau))
        y = [1.0 + 0.9 * -1.0 + 0.99 * 1.0 * v0, -0.5 + 0.9 * m1 + 0.99 * 0.9 * v1]
        loss, _ = oracle_mdqn(online, target, batch, hp["mdqn"])
        np.testing.assert_allclose(loss, (_huber(y[0] - 2.0) + _huber(y[1] - 3.0)) / 2, rtol=1e-12)
        raw = munchausen_term(
            _batched(target, batch.observation).q_values, batch.action, hp["mdqn"]
        )
        np.testing.assert_allclose(raw, [-1.3, m1], rtol=1e-12)


def _numpy_q(net: eqx.Module, obs: Array) -> np.ndarray:
    return np.asarray(_batched(net, obs).q_values)


@pytest.fixture(scope="module")
def ff_nets() -> dict[str, tuple[FeedForwardNet, FeedForwardNet]]:
    """float32 online/target feed-forward nets per head (different keys)."""

    def pair(**kw: Any) -> tuple[FeedForwardNet, FeedForwardNet]:
        return (FeedForwardNet(jax.random.key(1), **kw), FeedForwardNet(jax.random.key(2), **kw))

    return {
        "q": pair(),
        "categorical": pair(
            head="categorical", num_atoms=C51_ATOMS, v_min=C51_V_MIN, v_max=C51_V_MAX, scale=3.0
        ),
        "quantile": pair(head="quantile", num_atoms=QR_QUANTILES),
    }


@pytest.mark.compiled
def test_oracle_dqn_matches_numpy(ff_nets: dict) -> None:
    """The dqn oracle equals ``mean((clip(r) + γd·max Q_target(s') - Q(s, a))²)``."""
    with jax.enable_x64(True):
        online, target = to_float64(ff_nets["q"])
        batch = to_float64(make_transitions(0))
        q, q_next = _numpy_q(online, batch.observation), _numpy_q(target, batch.next_observation)
        b = np.asarray
        r = np.clip(b(batch.reward), -1.0, 1.0)
        td = r + 0.99 * b(batch.discount) * q_next.max(-1) - q[np.arange(BATCH), b(batch.action)]
        loss, _ = oracle_dqn(online, target, batch, REFERENCE["dqn"])
        np.testing.assert_allclose(loss, np.mean(td**2), rtol=1e-12)


@pytest.mark.compiled
def test_oracle_c51_matches_numpy(ff_nets: dict) -> None:
    """The prioritised C51 oracle equals a naive C51 projection and cross-entropy in numpy."""
    beta = 0.7
    with jax.enable_x64(True):
        online, target = to_float64(ff_nets["categorical"])
        batch = to_float64(make_transitions(1))
        out, out_next = (
            _batched(online, batch.observation),
            _batched(target, batch.next_observation),
        )
        select = _numpy_q(online, batch.next_observation).argmax(-1)
        atoms = np.asarray(out.atoms[0])
        logits, logits_next = np.asarray(out.logits), np.asarray(out_next.logits)
        v_min, v_max, dz = atoms[0], atoms[-1], atoms[1] - atoms[0]
        per_item = []
        for i in range(BATCH):
            r = np.clip(float(batch.reward[i]), -1.0, 1.0)
            z = np.clip(r + 0.99 * float(batch.discount[i]) * atoms, v_min, v_max)
            p = np.exp(logits_next[i, select[i]] - logits_next[i, select[i]].max())
            p /= p.sum()
            m = np.zeros_like(atoms)
            for zj, pj in zip(z, p, strict=True):
                pos = min(max((zj - v_min) / dz, 0.0), len(atoms) - 1.0)
                lo, hi = int(np.floor(pos)), int(np.ceil(pos))
                if lo == hi:
                    m[lo] += pj
                else:
                    m[lo] += pj * (hi - pos)
                    m[hi] += pj * (pos - lo)
            row = logits[i, int(batch.action[i])]
            log_p = row - row.max() - np.log(np.sum(np.exp(row - row.max())))
            per_item.append(-np.sum(m * log_p))
        per_item = np.asarray(per_item)
        w = (1.0 / np.asarray(batch.probability)) ** beta
        w /= w.max()
        loss, prio = oracle_prioritized_c51(
            online, target, batch, REFERENCE["prioritized_c51"], beta
        )
        np.testing.assert_allclose(loss, np.mean(w * per_item), rtol=1e-10)
        np.testing.assert_allclose(prio, np.abs(per_item), rtol=1e-10)


@pytest.mark.compiled
def test_oracle_qr_dqn_matches_numpy(ff_nets: dict) -> None:
    """The QR-DQN oracle equals a naive quantile Huber loss (κ = 1) in numpy, fed d·γ."""
    with jax.enable_x64(True):
        online, target = to_float64(ff_nets["quantile"])
        batch = to_float64(make_transitions(2))
        theta = np.asarray(_batched(online, batch.observation).quantiles)  # [B, A, N]
        theta_next = np.asarray(_batched(target, batch.next_observation).quantiles)
        n = theta.shape[-1]
        taus = (np.arange(n) + 0.5) / n
        losses = []
        for i in range(BATCH):
            a_next = theta_next[i].mean(-1).argmax()
            y = float(batch.reward[i]) + 0.99 * float(batch.discount[i]) * theta_next[i, a_next]
            u = y[None, :] - theta[i, int(batch.action[i])][:, None]  # [source i, target j]
            huber = np.where(np.abs(u) <= 1.0, 0.5 * u**2, np.abs(u) - 0.5)
            losses.append(np.sum(np.mean(np.abs(taus[:, None] - (u < 0)) * huber, axis=1)))
        loss, prio = oracle_qr_dqn(online, target, batch, REFERENCE["qr_dqn"])
        assert prio is None
        np.testing.assert_allclose(loss, np.mean(losses), rtol=1e-10)


def _h(x: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + eps * x


def _h_inv(y: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    z = (np.sqrt(1.0 + 4.0 * eps * (eps + 1.0 + np.abs(y))) - 1.0) / (2.0 * eps)
    return np.sign(y) * (z**2 - 1.0)


def numpy_r2d2(
    online: RecurrentNet, target: RecurrentNet, batch: zoo.SequenceBatch, beta: float
) -> tuple[float, np.ndarray]:
    """R2D2's loss written out naively: step-by-step cores, an explicit n-step loop."""
    n, gamma, eta, burn_in = 5, 0.997, 0.9, R2D2_BURN_IN
    step = jax.vmap(lambda net, o, s: net(o, s), in_axes=(None, 0, 0))
    q = {}
    for name, net in (("online", online), ("target", target)):
        state, values = batch.core_state, []
        for t in range(batch.observation.shape[1]):
            out, state = step(net, batch.observation[:, t], state)
            values.append(np.asarray(out.q_values))
        q[name] = np.stack(values, axis=1)[:, burn_in:]  # [B, L, A]
    action = np.asarray(batch.action)[:, burn_in:]
    reward = np.asarray(batch.reward)[:, burn_in:]
    disc = gamma * np.asarray(batch.discount)[:, burn_in:]
    num_b, length = action.shape
    td = np.zeros((num_b, length - 1))
    for b in range(num_b):
        # Bootstrap value at time t + 1: target Q at the online net's greedy action.
        v = [q["target"][b, t, q["online"][b, t].argmax()] for t in range(1, length)]
        for t in range(length - 1):
            k = min(n, length - 1 - t)
            ret, scale = 0.0, 1.0
            for j in range(k):
                ret += scale * reward[b, t + j]
                scale *= disc[b, t + j]
            ret += scale * _h_inv(v[t + k - 1])
            td[b, t] = _h(ret) - q["online"][b, t, action[b, t]]
    w = (1.0 / (np.asarray(batch.probability) + 1e-6)) ** beta
    w /= w.max()
    loss = np.mean(w * 0.5 * np.sum(td**2, axis=1))
    prio = eta * np.abs(td).max(1) + (1 - eta) * np.abs(td).mean(1)
    return float(loss), prio


@pytest.fixture(scope="module")
def rnn_nets() -> tuple[RecurrentNet, RecurrentNet]:
    """float32 online/target recurrent nets (different keys)."""
    return RecurrentNet(jax.random.key(3)), RecurrentNet(jax.random.key(4))


@pytest.mark.compiled
def test_oracle_r2d2_matches_numpy(rnn_nets: tuple[RecurrentNet, RecurrentNet]) -> None:
    """The R2D2 oracle (time-major, vmapped rlax) equals a naive batch-major numpy loop."""
    y = np.linspace(-50.0, 50.0, 11)
    np.testing.assert_allclose(_h(_h_inv(y)), y, atol=1e-9)  # the pair is inverse
    with jax.enable_x64(True):
        online, target = to_float64(rnn_nets)
        batch = to_float64(make_sequences(3))
        expected_loss, expected_prio = numpy_r2d2(online, target, batch, 0.6)
        for stop in (False, True):
            loss, prio = oracle_r2d2(
                online, target, batch, REFERENCE["r2d2"], 0.6, R2D2_BURN_IN, stop
            )
            np.testing.assert_allclose(loss, expected_loss, rtol=1e-10)
            np.testing.assert_allclose(prio, expected_prio, rtol=1e-10)


# --------------------------------------------------------------------------------------------
# The project against the oracle
# --------------------------------------------------------------------------------------------

# Case name -> (catalogue entry, overrides).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    **{name: (name, {}) for name in ENTRIES if name != "r2d2"},
    "r2d2": ("r2d2", R2D2_OVERRIDES),
    "r2d2_no_burn_in_grad": (
        "r2d2",
        {**R2D2_OVERRIDES, "replay.sequence.burn_in_grad": False},
    ),
}
HEAD_OF = {"prioritized_c51": "categorical", "qr_dqn": "quantile"}


class Reference(NamedTuple):
    """The oracle's float64 loss, priorities and gradient w.r.t. the online network's leaves."""

    loss: float
    priorities: np.ndarray | None
    grads: list[np.ndarray]


class Case(NamedTuple):
    """One entry's spec, float32 networks and batch, and the oracle's answers per step."""

    name: str
    spec: Any
    online: eqx.Module
    target: eqx.Module
    batch: Any
    steps: tuple[int, ...]
    reference: dict[int, Reference]


def oracle_value_and_grad(
    oracle: Callable[..., tuple[Array, Array | None]], online, target, batch: Any
) -> Reference:
    """Runs an oracle in float64 on float64 copies of the networks and the batch."""
    with jax.enable_x64(True):
        online64, target64, batch64 = to_float64((online, target, batch))

        def loss(net: eqx.Module) -> tuple[Array, Array | None]:
            return oracle(net, target64, batch64)

        (value, prio), grads = eqx.filter_value_and_grad(loss, has_aux=True)(online64)
        result = Reference(
            loss=float(value),
            priorities=None if prio is None else np.asarray(prio),
            grads=[np.asarray(g) for g in jax.tree.leaves(grads)],
        )
    assert not jax.config.x64_enabled
    return result


def project_value_and_grad(
    loss_fn: Callable[..., Any], online, target, batch: Any, key: Array, step: Any
) -> tuple[Array, Any, Any]:
    """The project's loss, aux and gradient w.r.t. the online network (float32)."""

    def loss(net: eqx.Module) -> tuple[Array, Any]:
        return loss_fn(online=net, target=target, batch=batch, key=key, step=step)

    (value, aux), grads = eqx.filter_value_and_grad(loss, has_aux=True)(online)
    return value, aux, grads


project_value_and_grad_jit = eqx.filter_jit(project_value_and_grad)


class Cases:
    """Module-wide cache of cases and of built losses (compiled functions are shared too)."""

    def __init__(self) -> None:
        self._cases: dict[str, Case] = {}
        self._losses: dict[str, Callable[..., Any]] = {}

    def case(self, variant: str) -> Case:
        """Builds (once) the inputs and the oracle's answers of a case."""
        if variant not in self._cases:
            self._cases[variant] = self._build(variant)
        return self._cases[variant]

    def loss_fn(self, variant: str) -> Callable[..., Any]:
        """``zoo.build_loss`` of the case's spec, built once."""
        if variant not in self._losses:
            self._losses[variant] = zoo.build_loss(self.case(variant).spec)
        return self._losses[variant]

    @staticmethod
    def _build(variant: str) -> Case:
        name, overrides = VARIANTS[variant]
        spec = zoo.load_algorithm(name, overrides=overrides)
        steps = check_importance_exponent(name, spec)
        if name == "r2d2":
            online, target = RecurrentNet(jax.random.key(3)), RecurrentNet(jax.random.key(4))
            batch = make_sequences(seed=54)
        else:
            head = HEAD_OF.get(name, "q")
            kw: dict[str, Any] = {}
            if head == "categorical":
                h = spec.network.head
                kw = {"num_atoms": h.num_atoms, "v_min": h.v_min, "v_max": h.v_max, "scale": 3.0}
            elif head == "quantile":
                kw = {"num_atoms": spec.network.head.num_quantiles}
            online = FeedForwardNet(jax.random.key(1), head=head, **kw)
            target = FeedForwardNet(jax.random.key(2), head=head, **kw)
            batch = make_transitions(seed=10 + ENTRIES.index(name))
        reference = {
            step: oracle_value_and_grad(oracle_for(name, spec, step), online, target, batch)
            for step in steps
        }
        return Case(variant, spec, online, target, batch, steps, reference)


@pytest.fixture(scope="module")
def cases() -> Any:
    """The shared case cache; checks on teardown that float64 never leaked out of the oracle."""
    yield Cases()
    assert not jax.config.x64_enabled
    assert jnp.zeros(()).dtype == jnp.float32


@pytest.mark.parametrize("name", ENTRIES)
@pytest.mark.unit
def test_catalogue_carries_reference_hyperparameters(name: str) -> None:
    """Each reference entry carries the values the oracle hard-codes (and the papers give)."""
    spec = zoo.load_algorithm(name)
    check_spec(name, spec)
    check_importance_exponent(name, spec)


@pytest.mark.parametrize("name", ENTRIES)
@pytest.mark.compiled
def test_batches_exercise_the_reference(name: str, cases: Cases) -> None:
    """The test data reaches the edge cases: clips, terminals, unambiguous argmaxes."""
    case = cases.case(name)
    batch = case.batch
    assert np.any(np.abs(np.asarray(batch.reward)) > 1.0), "rewards beyond the clip range"
    assert np.any(np.asarray(batch.discount) == 0.0) and np.any(np.asarray(batch.discount) == 1.0)
    p = np.asarray(batch.probability)
    assert p.max() / p.min() > 10.0, "non-uniform sampling probabilities"
    with jax.enable_x64(True):
        online, target, batch64 = to_float64((case.online, case.target, batch))
        values = selector_values(name, online, target, batch64, R2D2_BURN_IN)
        if values is not None:
            gap = min_argmax_gap(values)
            assert gap > MIN_ARGMAX_GAP, f"near-tie in an argmax ({gap:.2e}); change the seed"
        if name == "mdqn":
            q = _batched(target, batch64.observation).q_values
            raw = np.asarray(munchausen_term(q, batch64.action, REFERENCE["mdqn"]))
            clip_min = REFERENCE["mdqn"].clip_min
            assert np.sum(raw < clip_min - 1e-2) >= 4, f"the clip must bind for some: {raw}"
            assert np.sum(raw > clip_min + 1e-2) >= 4, f"and not bind for others: {raw}"
        if name == "r2d2":
            trained = np.asarray(batch.discount)[:, R2D2_BURN_IN:-1]
            assert np.any(trained == 0.0), "a terminal inside the trained part of a sequence"
            assert np.any(np.asarray(batch.discount)[:, :R2D2_BURN_IN] == 0.0), "and in burn-in"
    assert not jax.config.x64_enabled


# Tolerances. The project runs in float32 (unit roundoff 6e-8); the oracle in float64 is exact
# by comparison. A loss or priority is the result of a few tens of float32 operations on values
# of the size of the Q values, so its absolute error is ~1e-6 of the largest magnitude involved
# even where the result itself is small (|td| of one item near 0, a gradient component that is a
# sum of cancelling terms). Hence rtol=1e-5 plus an absolute floor of 1e-5 times the magnitude:
# max(1, |loss|) for the loss, the largest priority for priorities, the largest gradient
# component of the whole network for gradients. (Measured: the float32 project is within
# ~2e-7 relative of the oracle for the feed-forward entries, 0.2 of the tolerance at most.)
#
# R2D2 gets 1e-4: its inverse transform h⁻¹ (rlax.signed_parabolic) subtracts two terms of size
# 1/(2ε) = 500, where the float32 spacing is 3e-5, so the reference formula itself, evaluated in
# float32, is only good to ~1e-5 relative (measured: this oracle run in float32 is 1.5e-5 off its
# float64 value in the loss, 6e-5 in the priorities). The float64 test below checks R2D2's
# semantics sharply instead.
TOLERANCE = {"r2d2": 1e-4}
DEFAULT_TOLERANCE = 1e-5
# The project evaluated in float64 (``test_entry_matches_reference_in_float64``) agrees to
# roundoff except where it computes a constant in float32 (importance weights, β: ~1e-7).
FLOAT64_TOLERANCE = 1e-6


def assert_close(actual: Any, expected: Any, tol: float, scale: float, what: str) -> None:
    """``|actual - expected| <= tol·(|expected| + scale)`` elementwise."""
    np.testing.assert_allclose(
        np.asarray(actual, np.float64), expected, rtol=tol, atol=tol * scale, err_msg=what
    )


def check_against_oracle(
    case: Case, loss_fn: Callable[..., Any], jit: bool, float64: bool = False
) -> None:
    """Compares the project's loss, priorities and gradient with the oracle at every step."""
    key = jax.random.key(0)
    name = VARIANTS[case.name][0]
    tol = FLOAT64_TOLERANCE if float64 else TOLERANCE.get(name, DEFAULT_TOLERANCE)
    for step in case.steps:
        ref = case.reference[step]
        with jax.enable_x64(float64):
            args = (case.online, case.target, case.batch)
            online, target, batch = to_float64(args) if float64 else args
            if jit:
                run = functools.partial(project_value_and_grad_jit, step=jnp.asarray(step))
            else:
                run = functools.partial(project_value_and_grad, step=step)
            loss, aux, grads = run(loss_fn, online, target, batch, key)
            loss, grads = np.asarray(loss), [np.asarray(g) for g in jax.tree.leaves(grads)]
            prio = None if aux.priorities is None else np.asarray(aux.priorities)
        where = f"{case.name} at step {step} ({'jit' if jit else 'eager'}"
        where += ", float64)" if float64 else ")"
        assert isinstance(aux, zoo.LossAux), where
        assert loss.shape == (), where
        assert_close(loss, ref.loss, tol, max(1.0, abs(ref.loss)), f"loss of {where}")
        if ref.priorities is None:
            assert prio is None, f"{where}: no prioritisation, priorities must be None"
        else:
            assert prio is not None, f"{where}: priorities missing"
            assert prio.shape == ref.priorities.shape, where
            scale = max(1e-3, float(np.max(ref.priorities)))
            assert_close(prio, ref.priorities, tol, scale, f"priorities of {where}")
        assert len(grads) == len(ref.grads), where
        scale = max(float(np.max(np.abs(g))) for g in ref.grads)
        for i, (g, g_ref) in enumerate(zip(grads, ref.grads, strict=True)):
            assert_close(g, g_ref, tol, scale, f"gradient leaf {i} of {where}")
    assert not jax.config.x64_enabled


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "eager"])
@pytest.mark.parametrize("name", ENTRIES)
@pytest.mark.compiled
def test_entry_matches_reference(name: str, jit: bool, cases: Cases) -> None:
    """Loss, priorities and gradient of each reference entry equal the float64 oracle's."""
    check_against_oracle(cases.case(name), cases.loss_fn(name), jit)


@pytest.mark.parametrize("name", ENTRIES)
@pytest.mark.compiled
def test_entry_matches_reference_in_float64(name: str, cases: Cases) -> None:
    """Fed float64 networks and batch, each entry equals the oracle to ~roundoff (1e-6).

    Sharper than the float32 comparison (which must allow for float32 rounding, and for R2D2 the
    conditioning of h⁻¹): any semantic difference larger than 1e-6 shows here.
    """
    check_against_oracle(cases.case(name), cases.loss_fn(name), jit=False, float64=True)


@pytest.mark.compiled
def test_r2d2_burn_in_grad_option(cases: Cases) -> None:
    """``burn_in_grad: false`` keeps R2D2's loss and changes its gradient, as the oracle does."""
    with_grad, without = cases.case("r2d2"), cases.case("r2d2_no_burn_in_grad")
    ref_with, ref_without = with_grad.reference[0], without.reference[0]
    # The oracle: same value, gradients that differ in the core's parameters.
    np.testing.assert_allclose(ref_with.loss, ref_without.loss, rtol=1e-12)
    diff = max(
        float(np.max(np.abs(a - b))) for a, b in zip(ref_with.grads, ref_without.grads, strict=True)
    )
    scale = max(float(np.max(np.abs(g))) for g in ref_with.grads)
    assert diff > 1e-2 * scale, "the burn-in must matter for the gradient in this test"
    # The project: each variant equals its oracle (loss, priorities and gradient).
    check_against_oracle(without, cases.loss_fn("r2d2_no_burn_in_grad"), jit=True)
    check_against_oracle(with_grad, cases.loss_fn("r2d2"), jit=True)


@pytest.mark.unit
def test_x64_does_not_leak(cases: Cases) -> None:
    """After the oracle has run, JAX is back to its float32 default in this process."""
    cases.case("dqn")
    assert not jax.config.x64_enabled
    assert jnp.asarray(1.0).dtype == jnp.float32
    assert jnp.zeros(3).dtype == jnp.float32
