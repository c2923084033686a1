"""Exactness of ``iqn`` and ``m_iqn`` against an rlax oracle run in float64, with explicit τ.

IQN (Dabney et al. 2018b, https://arxiv.org/abs/1806.06923) as dqn_zoo's ``iqn/agent.py``:
``rlax.quantile_q_learning(dist_q_tm1 [N, A], τ [N], a, r, γ·d, dist_q_t_selector [K, A],
dist_q_t [N′, A], κ)`` per example, with the selector the *target* network at s′ on K fractions
of its own. M-IQN (Vieillard et al. 2020, https://arxiv.org/abs/2007.14430) as
google-research's ``munchausen_rl/agents/m_iqn.py``: π = softmax(q/τ) of the target network's
K-sample Q-values at s′ and at s, target quantile j = r + α·clip(τ·log π(a|s), −1, 0) +
γ·d·Σₐ′ π(a′|s′)·(θⱼ(s′, a′) − τ·log π(a′|s′)), then ``rlax.quantile_regression_loss`` with the
online fractions.

The quantile fractions are drawn per example. The oracle receives them *explicitly*: it derives
each example's key by the composer's documented contract (the loss splits its key into the four
passes of ``zoo.losses.compose``: online at s, selector at s′, target at s′, target at s; then
:func:`zoo.networks.network.apply_batch` splits each pass key into ``(noise, sample)`` and the
sample key into one key per example) and draws τ from it by this file's network's own rule. The
network is this file's own tiny Equinox module following docs/design.md's protocol for sampling
heads (``samples = True``; ``net(obs, *, key, sample_key, role)``), independent of
``zoo.networks``; a second test runs the zoo's own ``iqn`` head through the same oracle.

The mutation tests change one detail of the oracle at a time (one τ draw for the whole batch,
the greedy action from the N′ target quantiles instead of K fractions of their own, midpoint
fractions, the log-policy from the online network, no clip) and check that the project then no
longer matches: the comparison can fail.

``loss.munchausen.policy: online`` (Beyond The Rainbow's ``Agent.py``, VIPTankz/
BeyondTheRainbowICML@67ce0fd, takes log π(a|s) from the online network's Q-values,
``self.net.qvals(states)``, under ``no_grad``) is checked against the same oracle with
``log_policy="online"``: π from the mean of the online quantiles the loss learns from at s,
gradient stopped; and the target-network oracle must then disagree with it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

import zoo
from zoo.networks.network import build_network

OBS_DIM = 5
NUM_ACTIONS = 4
HIDDEN = 16
BATCH = 32
COSINES = 8
N, N_PRIME, K = 8, 6, 5  # different, so that a pass drawing the wrong number fails to broadcast


class IqnTestNet(eqx.Module):
    """``Z_τ(s, a) = scale · out(tanh(torso(s)) ⊙ relu(embed(cos(π·i·τ))))`` (IQN's form).

    τ are drawn in float32 from ``sample_key`` (then cast), so a float64 copy draws the same
    fractions: ``k_tau, k_policy = split(sample_key)``; ``learn`` draws N, ``bootstrap`` N′ (and
    K more from ``k_policy`` for ``q_values``), ``act`` K.
    """

    torso: eqx.nn.Linear
    embed: eqx.nn.Linear
    out: eqx.nn.Linear
    scale: float = eqx.field(static=True)
    is_recurrent: ClassVar[bool] = False
    samples: ClassVar[bool] = True

    def __init__(self, key: jax.Array, scale: float = 6.0) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.torso = eqx.nn.Linear(OBS_DIM, HIDDEN, key=k1)
        self.embed = eqx.nn.Linear(COSINES, HIDDEN, key=k2)
        self.out = eqx.nn.Linear(HIDDEN, NUM_ACTIONS, key=k3)
        self.scale = scale

    def quantiles(self, obs: jax.Array, taus: jax.Array) -> jax.Array:
        """``[A, len(taus)]`` quantile values at explicitly given fractions."""
        features = jnp.tanh(self.torso(obs))
        i = jnp.arange(1, COSINES + 1, dtype=obs.dtype)
        phi = jax.nn.relu(jax.vmap(self.embed)(jnp.cos(jnp.pi * i[None, :] * taus[:, None])))
        return self.scale * jax.vmap(self.out)(features[None, :] * phi).T

    def __call__(
        self,
        obs: jax.Array,
        *,
        key: jax.Array | None = None,
        sample_key: jax.Array | None = None,
        role: str = "learn",
    ) -> zoo.NetworkOutput:
        """One observation's output."""
        taus, policy_taus = draw(sample_key, {"learn": N, "bootstrap": N_PRIME, "act": K}[role])
        taus, policy_taus = taus.astype(obs.dtype), policy_taus.astype(obs.dtype)
        z = self.quantiles(obs, taus)
        q = jnp.mean(self.quantiles(obs, policy_taus) if role == "bootstrap" else z, axis=-1)
        return zoo.NetworkOutput(q_values=q, quantiles=z, taus=taus)


def draw(sample_key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """This file's rule: ``(n fractions, K policy fractions)`` in float32 from one example's key."""
    k_tau, k_policy = jax.random.split(sample_key)
    return (
        jax.random.uniform(k_tau, (n,), jnp.float32),
        jax.random.uniform(k_policy, (K,), jnp.float32),
    )


def pass_keys(key: jax.Array, batch: int) -> dict[str, jax.Array]:
    """Per-example sample keys ``[B]`` of each of the loss's four passes (the contract)."""
    names = ("online_s", "select_next", "target_next", "target_s")
    out = {}
    for name, k in zip(names, jax.random.split(key, 4), strict=True):
        _, sample = jax.random.split(k)
        out[name] = jax.random.split(sample, batch)
    return out


class Fractions(NamedTuple):
    """The fractions of one batch, float32, drawn outside any float64 block."""

    online: jax.Array  # [B, N] at s (online)
    target: jax.Array  # [B, N′] at s′ (target)
    target_policy: jax.Array  # [B, K] at s′ (target; the greedy action / π)
    target_s_policy: jax.Array  # [B, K] at s (target; M-IQN's log π(a|s))


def fractions(key: jax.Array, batch: int, shared: bool = False) -> Fractions:
    """The τ the project draws for ``key`` (``shared``: the mutation "one draw for the batch")."""
    keys = pass_keys(key, batch)
    if shared:
        keys = {k: jnp.broadcast_to(v[0], v.shape) for k, v in keys.items()}
    online, _ = jax.vmap(lambda k: draw(k, N))(keys["online_s"])
    target, target_policy = jax.vmap(lambda k: draw(k, N_PRIME))(keys["target_next"])
    _, target_s_policy = jax.vmap(lambda k: draw(k, N_PRIME))(keys["target_s"])
    return Fractions(online, target, target_policy, target_s_policy)


class Hyper(NamedTuple):
    """The papers' values (the catalogue must carry them: ``test_catalogue_values``)."""

    discount: float = 0.99
    kappa: float = 1.0
    tau: float = 0.03
    alpha: float = 0.9
    clip_min: float = -1.0


HP = Hyper()

#: Single-detail changes of the oracle; each must make the project disagree with it.
MUTATIONS = ("shared_taus", "selector_from_target_quantiles", "midpoint_taus")
M_IQN_MUTATIONS = (*MUTATIONS, "log_policy_from_online", "no_clip")


def _dist(net: IqnTestNet, obs: jax.Array, taus: jax.Array) -> jax.Array:
    """``[B, n, A]`` (rlax's layout) at per-example fractions ``[B, n]``."""
    return jnp.swapaxes(jax.vmap(net.quantiles)(obs, taus), 1, 2)


def oracle(
    online: IqnTestNet,
    target: IqnTestNet,
    batch: zoo.Transition,
    taus: Fractions,
    munchausen: bool,
    mutation: str | None = None,
    log_policy: str = "target",
) -> jax.Array:
    """The reference loss (dqn_zoo's IQN, or M-IQN) given the fractions explicitly; with
    ``log_policy="online"`` M-IQN's log π(a|s) is the softmax of the online network's mean
    quantiles at s (the N learned fractions), gradient stopped."""
    dtype = batch.reward.dtype
    taus = Fractions(*(t.astype(dtype) for t in taus))
    tau_online = taus.online
    if mutation == "midpoint_taus":
        tau_online = jnp.broadcast_to((jnp.arange(N, dtype=dtype) + 0.5) / N, tau_online.shape)
    dist_tm1 = _dist(online, batch.observation, tau_online)
    dist_t = _dist(target, batch.next_observation, taus.target)
    selector = _dist(target, batch.next_observation, taus.target_policy)
    if mutation == "selector_from_target_quantiles":
        selector = dist_t
    d = batch.discount * HP.discount
    if not munchausen:
        losses = jax.vmap(rlax.quantile_q_learning, in_axes=(0, 0, 0, 0, 0, 0, 0, None))(
            dist_tm1, tau_online, batch.action, batch.reward, d, selector, dist_t, HP.kappa
        )
        return jnp.mean(losses)
    q_next = jnp.mean(selector, axis=1)  # [B, A]
    if log_policy == "online":
        q_s = jax.lax.stop_gradient(jnp.mean(dist_tm1, axis=1))
    else:
        net_s = online if mutation == "log_policy_from_online" else target
        q_s = jnp.mean(_dist(net_s, batch.observation, taus.target_s_policy), axis=1)
    log_pi_s = HP.tau * jax.nn.log_softmax(q_s / HP.tau, axis=-1)
    bonus = jnp.take_along_axis(log_pi_s, batch.action[:, None], axis=-1)[:, 0]
    if mutation != "no_clip":
        bonus = jnp.clip(bonus, HP.clip_min, 0.0)
    pi_next = jax.nn.softmax(q_next / HP.tau, axis=-1)
    log_pi_next = HP.tau * jax.nn.log_softmax(q_next / HP.tau, axis=-1)
    soft = jnp.einsum("ba,bja->bj", pi_next, dist_t - log_pi_next[:, None, :])
    target_quantiles = (batch.reward + HP.alpha * bonus)[:, None] + d[:, None] * soft
    target_quantiles = jax.lax.stop_gradient(target_quantiles)
    theta = jnp.take_along_axis(dist_tm1, batch.action[:, None, None], axis=-1)[..., 0]
    losses = jax.vmap(rlax.quantile_regression_loss, in_axes=(0, 0, 0, None))(
        theta, tau_online, target_quantiles, HP.kappa
    )
    return jnp.mean(losses)


def make_transitions(seed: int) -> zoo.Transition:
    """Random float32 transitions: unclipped rewards, terminal and fractional discounts."""
    rng = np.random.default_rng(seed)
    pattern = np.array([0.0, 1.0, 1.0, 0.9, 0.81, 0.729, 1.0, 0.0])
    return zoo.Transition(
        observation=jnp.asarray(rng.normal(size=(BATCH, OBS_DIM)), jnp.float32),
        action=jnp.asarray(rng.integers(0, NUM_ACTIONS, size=BATCH), jnp.int32),
        reward=jnp.asarray(rng.uniform(-3.0, 3.0, size=BATCH), jnp.float32),
        discount=jnp.asarray(rng.permutation(np.resize(pattern, BATCH)), jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(BATCH, OBS_DIM)), jnp.float32),
        probability=jnp.full((BATCH,), 1.0 / BATCH, jnp.float32),
    )


def to_float64(tree: Any) -> Any:
    """Every floating array leaf as float64 (inside ``jax.enable_x64``)."""
    return jax.tree.map(
        lambda x: (
            jnp.asarray(x, jnp.float64)
            if eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.floating)
            else x
        ),
        tree,
    )


#: test entries that are a catalogue entry with an option set
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "m_iqn_online": ("m_iqn", {"loss.munchausen.policy": "online"}),
}


def spec_of(entry: str) -> Any:
    """The catalogue entry with this file's sample counts (the rest as the catalogue has it)."""
    name, extra = VARIANTS.get(entry, (entry, {}))
    return zoo.load_algorithm(
        name,
        overrides={
            "network.head.num_cosines": COSINES,
            "network.head.num_samples": N,
            "network.head.num_target_samples": N_PRIME,
            "network.head.num_policy_samples": K,
            **extra,
        },
    )


class Answer(NamedTuple):
    """A loss value and its gradient leaves w.r.t. the online network."""

    loss: float
    grads: list[np.ndarray]


def oracle_answer(
    online, target, batch, taus: Fractions, munchausen: bool, mutation=None, log_policy="target"
):
    """The oracle in float64 on float64 copies (the fractions are float32 draws, cast)."""
    with jax.enable_x64(True):
        online64, target64, batch64 = to_float64((online, target, batch))
        fn = functools.partial(
            oracle,
            target=target64,
            batch=batch64,
            taus=taus,
            munchausen=munchausen,
            log_policy=log_policy,
        )
        value, grads = eqx.filter_value_and_grad(lambda n: fn(n, mutation=mutation))(online64)
        answer = Answer(float(value), [np.asarray(g) for g in jax.tree.leaves(grads)])
    assert not jax.config.x64_enabled
    return answer


@eqx.filter_jit
def _project(loss_fn: Callable[..., Any], online, target, batch, key):
    def loss(net):
        return loss_fn(online=net, target=target, batch=batch, key=key)

    (value, _aux), grads = eqx.filter_value_and_grad(loss, has_aux=True)(online)
    return value, grads


@functools.cache
def loss_of(entry: str) -> Callable[..., Any]:
    """The entry's composed loss, built once (so its compiled update is shared by the tests)."""
    return zoo.build_loss(spec_of(entry))


def project_answer(entry: str, online, target, batch, key, float64: bool = False) -> Answer:
    """The project's loss and gradient (float32, or float64 on float64 copies)."""
    loss_fn = loss_of(entry)
    with jax.enable_x64(float64):
        args = to_float64((online, target, batch)) if float64 else (online, target, batch)
        value, grads = _project(loss_fn, *args, key)
        answer = Answer(float(value), [np.asarray(g) for g in jax.tree.leaves(grads)])
    return answer


def close(a: Answer, b: Answer, tol: float) -> bool:
    """Loss within ``tol`` relative (floor 1) and every gradient leaf within ``tol`` of the
    largest gradient component."""
    if abs(a.loss - b.loss) > tol * max(1.0, abs(b.loss)):
        return False
    scale = max(float(np.max(np.abs(g))) for g in b.grads)
    return all(
        np.allclose(x, y, rtol=tol, atol=tol * scale) for x, y in zip(a.grads, b.grads, strict=True)
    )


def explain(a: Answer, b: Answer) -> str:
    """Where two answers differ, for an assertion message."""
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(a.grads, b.grads, strict=True))
    return f"loss {a.loss!r} vs {b.loss!r}; largest gradient difference {diff:.3e}"


@pytest.fixture(scope="module")
def nets() -> tuple[IqnTestNet, IqnTestNet]:
    """float32 online and target test networks (different keys)."""
    return IqnTestNet(jax.random.key(1)), IqnTestNet(jax.random.key(2))


KEY = jax.random.key(7)
# float32 against the float64 oracle: a loss of a few hundred float32 operations on values of a
# few units (as tests/test_reference_losses.py's DEFAULT_TOLERANCE, measured there at ~2e-7).
TOLERANCE = 1e-5
FLOAT64_TOLERANCE = 1e-9


@pytest.mark.unit
def test_catalogue_values() -> None:
    """``iqn`` and ``m_iqn`` carry the papers' values (dqn_zoo/Dopamine: 64 cosines, N = N′ =
    64, K = 32, κ = 1; M-IQN: α 0.9, τ 0.03, clip −1)."""
    iqn, m_iqn = zoo.load_algorithm("iqn"), zoo.load_algorithm("m_iqn")
    for spec in (iqn, m_iqn):
        head = spec.network.head
        assert (head.kind, head.num_cosines, head.num_samples) == ("iqn", 64, 64)
        assert (head.num_target_samples, head.num_policy_samples) == (64, 32)
        assert (spec.loss.td.kind, spec.loss.td.delta) == ("huber", 1.0)
        assert spec.loss.discount == HP.discount and spec.loss.reward_clip is None
    assert iqn.loss.munchausen is None and iqn.loss.bootstrap.kind == "max"
    assert m_iqn.loss.bootstrap.kind == "soft" and m_iqn.loss.temperature == HP.tau
    assert (m_iqn.loss.munchausen.alpha, m_iqn.loss.munchausen.clip_min) == (0.9, -1.0)


@pytest.mark.compiled
def test_oracle_matches_a_naive_numpy_loop(nets) -> None:
    """The IQN oracle equals the quantile Huber loss written out in numpy, item by item."""
    online, target = nets
    batch = make_transitions(0)
    taus = fractions(KEY, BATCH)
    with jax.enable_x64(True):
        online64, target64, batch64 = to_float64((online, target, batch))
        expected = []
        for i in range(BATCH):
            t_on, t_tg, t_pol = (np.asarray(x[i], np.float64) for x in taus[:3])
            obs, nxt = batch64.observation[i], batch64.next_observation[i]
            theta = np.asarray(online64.quantiles(obs, jnp.asarray(t_on)))  # [A, N]
            z_next = np.asarray(target64.quantiles(nxt, jnp.asarray(t_tg)))  # [A, N′]
            greedy = np.asarray(target64.quantiles(nxt, jnp.asarray(t_pol))).mean(-1).argmax()
            y = float(batch64.reward[i]) + 0.99 * float(batch64.discount[i]) * z_next[greedy]
            u = y[None, :] - theta[int(batch64.action[i])][:, None]
            huber = np.where(np.abs(u) <= 1.0, 0.5 * u**2, np.abs(u) - 0.5)
            expected.append(np.sum(np.mean(np.abs(t_on[:, None] - (u < 0)) * huber, axis=1)))
        value = oracle(online64, target64, batch64, taus, munchausen=False)
        np.testing.assert_allclose(float(value), np.mean(expected), rtol=1e-10)


@pytest.mark.compiled
def test_m_iqn_oracle_reduces_to_iqn_without_munchausen_at_small_temperature(nets) -> None:
    """With α = 0 and τ → 0 the soft target is the greedy one: M-IQN's oracle → IQN's."""
    online, target = nets
    batch, taus = make_transitions(1), fractions(KEY, BATCH)
    global HP
    saved = HP
    try:
        HP = Hyper(alpha=0.0, tau=1e-4)
        with jax.enable_x64(True):
            args = to_float64((online, target, batch))
            soft = float(oracle(*args, taus, munchausen=True))
            greedy = float(oracle(*args, taus, munchausen=False))
    finally:
        HP = saved
    np.testing.assert_allclose(soft, greedy, rtol=1e-6)


@pytest.mark.parametrize("entry", ["iqn", "m_iqn"])
@pytest.mark.compiled
def test_entry_matches_oracle(entry: str, nets) -> None:
    """Loss and gradient of the project equal the float64 oracle's, in float32 and float64."""
    online, target = nets
    batch = make_transitions(2 if entry == "iqn" else 3)
    munchausen = entry == "m_iqn"
    reference = oracle_answer(online, target, batch, fractions(KEY, BATCH), munchausen)
    got = project_answer(entry, online, target, batch, KEY)
    assert close(got, reference, TOLERANCE), explain(got, reference)
    got64 = project_answer(entry, online, target, batch, KEY, float64=True)
    assert close(got64, reference, FLOAT64_TOLERANCE), explain(got64, reference)
    if munchausen:  # the data reach both sides of the log-policy clip
        with jax.enable_x64(True):
            target64, batch64 = to_float64((target, batch))
            taus = fractions(KEY, BATCH).target_s_policy.astype(jnp.float64)
            q_s = jnp.mean(jax.vmap(target64.quantiles)(batch64.observation, taus), axis=-1)
            log_pi = HP.tau * jax.nn.log_softmax(q_s / HP.tau, axis=-1)
            raw = np.asarray(jnp.take_along_axis(log_pi, batch64.action[:, None], -1)[:, 0])
        assert np.sum(raw < -1.01) >= 4 and np.sum(raw > -0.99) >= 4, raw


@pytest.mark.parametrize(
    ("entry", "mutation"),
    [("iqn", m) for m in MUTATIONS] + [("m_iqn", m) for m in M_IQN_MUTATIONS],
)
@pytest.mark.compiled
def test_check_fails_on_a_single_detail_change(entry: str, mutation: str, nets) -> None:
    """Each single-detail change of the oracle moves it away from the project by far more than
    the tolerance: the exactness check can fail."""
    online, target = nets
    batch = make_transitions(2 if entry == "iqn" else 3)
    munchausen = entry == "m_iqn"
    shared = mutation == "shared_taus"
    taus = fractions(KEY, BATCH, shared=shared)
    mutated = oracle_answer(online, target, batch, taus, munchausen, None if shared else mutation)
    got = project_answer(entry, online, target, batch, KEY)
    assert not close(got, mutated, 100 * TOLERANCE), f"{mutation}: {explain(got, mutated)}"


@pytest.mark.compiled
def test_online_log_policy_matches_oracle(nets) -> None:
    """``loss.munchausen.policy: online``: loss and gradient equal the float64 oracle's with
    log π(a|s) from the online output at s, in float32 and float64; the bonus reaches both sides
    of the clip."""
    online, target = nets
    batch = make_transitions(3)
    taus = fractions(KEY, BATCH)
    reference = oracle_answer(online, target, batch, taus, True, log_policy="online")
    got = project_answer("m_iqn_online", online, target, batch, KEY)
    assert close(got, reference, TOLERANCE), explain(got, reference)
    got64 = project_answer("m_iqn_online", online, target, batch, KEY, float64=True)
    assert close(got64, reference, FLOAT64_TOLERANCE), explain(got64, reference)
    with jax.enable_x64(True):
        online64, batch64 = to_float64((online, batch))
        on = taus.online.astype(jnp.float64)
        q_s = jnp.mean(jax.vmap(online64.quantiles)(batch64.observation, on), axis=-1)
        log_pi = HP.tau * jax.nn.log_softmax(q_s / HP.tau, axis=-1)
        raw = np.asarray(jnp.take_along_axis(log_pi, batch64.action[:, None], -1)[:, 0])
    assert np.sum(raw < -1.01) >= 4 and np.sum(raw > -0.99) >= 4, raw


@pytest.mark.parametrize(("entry", "log_policy"), [("m_iqn", "online"), ("m_iqn_online", "target")])
@pytest.mark.unit
def test_log_policy_network_is_told_apart(entry: str, log_policy: str, nets) -> None:
    """The oracle of the other setting of ``loss.munchausen.policy`` disagrees with the project
    by far more than the tolerance: each setting is checked, not the same loss twice."""
    online, target = nets
    batch = make_transitions(3)
    other = oracle_answer(online, target, batch, fractions(KEY, BATCH), True, log_policy=log_policy)
    got = project_answer(entry, online, target, batch, KEY)
    assert not close(got, other, 100 * TOLERANCE), explain(got, other)


@pytest.mark.compiled
def test_zoo_iqn_head_draws_per_example_and_by_role() -> None:
    """The zoo's own head: each example its own fractions, as many as the role asks, q from K
    separate fractions at a bootstrap state; the oracle's loss on the zoo's network, with the
    head's fractions read back through ``quantile_values``, equals the project's."""
    spec = spec_of("iqn")
    net = build_network(spec, (OBS_DIM,), NUM_ACTIONS, key=jax.random.key(3))
    obs = make_transitions(4).observation
    for role, n in (("learn", N), ("bootstrap", N_PRIME), ("act", K)):
        out = zoo.networks.network.apply_batch(net, obs, KEY, role=role)
        assert out.quantiles.shape == (BATCH, NUM_ACTIONS, n) and out.taus.shape == (BATCH, n)
        assert len({tuple(np.round(np.asarray(t), 6)) for t in out.taus}) == BATCH
    out = zoo.networks.network.apply_batch(net, obs, KEY, role="bootstrap")
    assert not np.allclose(out.q_values, out.quantiles.mean(-1))  # K other fractions
    # the same example and key give the same fractions; another key others
    again = zoo.networks.network.apply_batch(net, obs, KEY, role="bootstrap")
    np.testing.assert_array_equal(out.taus, again.taus)
    other = zoo.networks.network.apply_batch(net, obs, jax.random.key(8), role="bootstrap")
    assert not np.allclose(out.taus, other.taus)
