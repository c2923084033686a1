"""Loss components against hand-computed values, and the composition's invariants.

The exactness of the seven reference entries against an independent float64 implementation is in
test_reference_losses.py; this file checks the pieces and the principles that let them compose.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

import zoo
from zoo import registry
from zoo.losses import components, n_step_targets
from zoo.schedules import build_schedule
from zoo.spec import (
    CategoricalHead,
    ExponentialSchedule,
    HuberTd,
    LinearSchedule,
    MaxMeanPriority,
    QHead,
    QuantileHead,
    SignedHyperbolicTransform,
    SquaredTd,
)
from zoo.types import NetworkOutput

pytestmark = pytest.mark.compiled

IDENTITY = components.identity(None)


def head_loss(kind: str, config, td) -> object:
    return registry.get("head_loss", kind)(config, td=td)


# ------------------------------------------------------------------------ element pieces


def test_td_losses_by_hand():
    sq = components.squared(SquaredTd(scale=1.0))
    half = components.squared(SquaredTd(scale=0.5))
    hub = components.huber(HuberTd(delta=1.0))
    absolute = components.huber(HuberTd(delta=0.0))
    x = jnp.array([0.5, -2.5])
    np.testing.assert_allclose(sq(x), [0.25, 6.25])
    np.testing.assert_allclose(half(x), [0.125, 3.125])
    np.testing.assert_allclose(hub(x), [0.125, 2.0])
    np.testing.assert_allclose(absolute(x), [0.5, 2.5])
    with pytest.raises(TypeError, match="compares distributions"):
        components.cross_entropy(None)(x)


def test_signed_hyperbolic_pair():
    tx = components.signed_hyperbolic(SignedHyperbolicTransform(eps=1e-3))
    np.testing.assert_allclose(tx.apply(jnp.array(3.0)), 1.0 + 3e-3, rtol=1e-6)
    np.testing.assert_allclose(tx.apply(jnp.array(-8.0)), -(2.0 + 8e-3), rtol=1e-6)
    x = jnp.linspace(-500.0, 500.0, 101)
    np.testing.assert_allclose(tx.apply_inv(tx.apply(x)), x, rtol=1e-4, atol=1e-3)


def test_munchausen_bonus_by_hand():
    bonus = components.munchausen_bonus(alpha=0.9, clip_min=-1.0, temperature=1.0)
    q = jnp.array([0.0, 1.0])
    log_pi = np.log(np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum())  # [-1.3133, -0.3133]
    np.testing.assert_allclose(bonus(q, 0), -0.9, rtol=1e-6)  # clipped at -1
    np.testing.assert_allclose(bonus(q, 1), 0.9 * log_pi[1], rtol=1e-6)
    assert float(components.no_bonus(q, 1)) == 0.0


def test_bootstraps():
    q_online, q_target = jnp.array([3.0, 1.0, 2.0]), jnp.array([0.0, 5.0, 1.0])
    pi, shift = components.max_bootstrap(None).policy(q_online, q_target)
    np.testing.assert_array_equal(pi, [0, 1, 0]) and np.testing.assert_array_equal(shift, 0)
    pi, _ = components.double_bootstrap(None).policy(q_online, q_target)
    np.testing.assert_array_equal(pi, [1, 0, 0])
    tau = 0.7
    pi, shift = components.soft_bootstrap(None, temperature=tau).policy(q_online, q_target)
    np.testing.assert_allclose(pi, jax.nn.softmax(q_target / tau), rtol=1e-6)
    # Σπ(q − τ log π) is the soft value τ·logsumexp(q/τ)
    np.testing.assert_allclose(
        jnp.sum(pi * (q_target + shift)), tau * jax.nn.logsumexp(q_target / tau), rtol=1e-6
    )


def test_priority_rules_and_regularizer():
    abs_td = jnp.array([1.0, 2.0, 3.0])
    mask = jnp.ones(3)
    rule = components.max_mean(MaxMeanPriority(eta=0.9))
    np.testing.assert_allclose(rule(abs_td, jnp.array(7.0), mask), 0.9 * 3 + 0.1 * 2)
    np.testing.assert_allclose(components.abs_td(None)(abs_td, 7.0, mask), 2.0)
    np.testing.assert_allclose(components.abs_loss(None)(abs_td, jnp.array(-7.0), mask), 7.0)
    masked = jnp.array([1.0, 1.0, 0.0])
    np.testing.assert_allclose(rule(abs_td, 0.0, masked), 0.9 * 2 + 0.1 * 1.5)
    reg = components.q_value(zoo.spec.QValueRegularizer(coeff=0.1))
    np.testing.assert_allclose(reg(jnp.array([[1.0], [3.0]]), jnp.ones((2, 1))), 0.2)


def test_schedules():
    linear = build_schedule(LinearSchedule(start=1.0, end=0.1, steps=100, begin=50))
    np.testing.assert_allclose(
        [linear(s) for s in (0, 50, 100, 150, 1000)], [1.0, 1.0, 0.55, 0.1, 0.1], rtol=1e-6
    )
    expo = build_schedule(ExponentialSchedule(start=1.0, rate=0.5, steps=10, end=0.2))
    np.testing.assert_allclose(
        [expo(s) for s in (0, 10, 20, 100)], [1.0, 0.5, 0.25, 0.2], rtol=1e-6
    )
    # traced steps work under jit
    np.testing.assert_allclose(jax.jit(linear)(jnp.int32(100)), 0.55, rtol=1e-6)


def test_exponential_schedule_with_asymptote_is_the_per_step_recurrence():
    """``asymptote: true`` is the closed form of Beyond The Rainbow's per-transition update
    ε ← max(ε − (ε − ε_final)/S, ε_final) (VIPTankz/BeyondTheRainbowICML@67ce0fd Agent.py
    EpsilonGreedy.update_eps) with rate (1 − 1/S)^S over S steps: iterated here in float64."""
    start, final, period = 1.0, 0.01, 1000
    rate = (1.0 - 1.0 / period) ** period
    config = ExponentialSchedule(start=start, rate=rate, steps=period, end=final, asymptote=True)
    fn = build_schedule(config)
    eps, expected = start, {}
    for t in range(6001):
        if t in (0, 1, 10, 999, 1000, 2500, 6000):
            expected[t] = eps
        eps = max(eps - (eps - final) / period, final)
    got = {t: float(fn(t)) for t in expected}
    np.testing.assert_allclose(list(got.values()), list(expected.values()), rtol=2e-6)
    # the corner of the clipped form is gone: it would be start·rate^(t/S) = 0.3677 at t = S
    # where the recurrence gives 0.01 + 0.99·0.3677 = 0.3740
    clipped = build_schedule(ExponentialSchedule(start=start, rate=rate, steps=period, end=final))
    assert abs(float(clipped(period)) - expected[period]) > 5e-3
    np.testing.assert_allclose(float(jax.jit(fn)(jnp.int32(2500))), expected[2500], rtol=2e-6)
    with pytest.raises(ValueError, match="asymptote"):
        ExponentialSchedule(start=1.0, rate=0.5, steps=10, asymptote=True)


def test_n_step_targets_match_rlax():
    rng = np.random.default_rng(0)
    length, n = 9, 4
    r = jnp.asarray(rng.normal(size=length), jnp.float32)
    d = jnp.asarray(rng.choice([0.0, 0.9, 0.99], size=length), jnp.float32)
    v = jnp.asarray(rng.normal(size=length + 1), jnp.float32)  # v[k] = value at state k
    ret, gain, idx = n_step_targets(r, d, n)
    ours = ret + gain * v[idx]
    reference = rlax.n_step_bootstrapped_returns(r, d, v[1:], n)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)
    # by hand for n = 2 on three steps
    ret, gain, idx = n_step_targets(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.5, 0.0, 1.0]), 2)
    np.testing.assert_allclose(ret, [1.0 + 0.5 * 2.0, 2.0, 3.0])
    np.testing.assert_allclose(gain, [0.0, 0.0, 1.0])
    np.testing.assert_array_equal(idx, [2, 3, 3])


# ------------------------------------------------------------------------------ head losses


def test_q_head_by_hand():
    fn = head_loss("q", QHead(), components.squared(SquaredTd(scale=1.0)))
    out_tm1 = NetworkOutput(q_values=jnp.array([1.0, 2.0]))
    out_t = NetworkOutput(q_values=jnp.array([3.0, 4.0]))
    pi, shift = jnp.array([0.0, 1.0]), jnp.zeros(2)
    loss, td = fn(out_tm1, 1, 0.5, 0.9, out_t, pi, shift, IDENTITY)
    np.testing.assert_allclose(td, 0.5 + 0.9 * 4.0 - 2.0, rtol=1e-6)
    np.testing.assert_allclose(loss, 2.1**2, rtol=1e-6)


@pytest.mark.parametrize(("kappa", "expected"), [(0.0, 0.75), (1.0, 0.40625)])
def test_quantile_head_by_hand(kappa, expected):
    """θ = [0, 1], target = r + d·θ_t = [0.5, 2], τ = [¼, ¾]; see the sum worked out below.

    κ = 0: i=0: ¼·(0.5 + 2)/2 = 0.3125; i=1: (¼·0.5 + ¾·1)/2 = 0.4375; total 0.75.
    κ = 1: Huber ½x² inside 1: i=0: ¼·(0.125 + 1.5)/2; i=1: (¼·0.125 + ¾·0.5)/2; total 0.40625.
    """
    fn = head_loss(
        "quantile", QuantileHead(num_quantiles=2), components.huber(HuberTd(delta=kappa))
    )
    out_tm1 = NetworkOutput(
        q_values=jnp.array([0.5, 9.0]), quantiles=jnp.array([[0.0, 1.0], [9.0, 9.0]])
    )
    out_t = NetworkOutput(
        q_values=jnp.array([0.0, 1.25]), quantiles=jnp.array([[-5.0, 5.0], [0.0, 1.5]])
    )
    pi, shift = jnp.array([0.0, 1.0]), jnp.zeros(2)
    loss, td = fn(out_tm1, 0, 0.5, 1.0, out_t, pi, shift, IDENTITY)
    np.testing.assert_allclose(loss, expected, rtol=1e-6)
    np.testing.assert_allclose(td, 1.25 - 0.5, rtol=1e-6)


def test_categorical_head_by_hand():
    """Target atoms 0.5 + [-1, 0, 1] = [-0.5, 0.5, 1.5] with p = [.2, .3, .5] project to
    [.1, .25, .65] on [-1, 0, 1]; a uniform prediction has cross-entropy log 3."""
    atoms = jnp.array([-1.0, 0.0, 1.0])
    fn = head_loss("categorical", CategoricalHead(num_atoms=3, v_min=-1, v_max=1), None)
    logits_t = jnp.log(jnp.array([[0.2, 0.3, 0.5], [1.0, 1.0, 1.0]]))
    out_t = NetworkOutput(q_values=jnp.zeros(2), logits=logits_t, atoms=atoms)
    out_tm1 = NetworkOutput(q_values=jnp.array([0.0, 0.3]), logits=jnp.zeros((2, 3)), atoms=atoms)
    pi, shift = jnp.array([1.0, 0.0]), jnp.zeros(2)
    target = zoo.losses.categorical_project(0.5 + atoms, jnp.array([0.2, 0.3, 0.5]), atoms)
    np.testing.assert_allclose(target, [0.1, 0.25, 0.65], rtol=1e-6)
    loss, td = fn(out_tm1, 1, 0.5, 1.0, out_t, pi, shift, IDENTITY)
    np.testing.assert_allclose(loss, np.log(3.0), rtol=1e-6)
    np.testing.assert_allclose(td, (-0.1 + 0.65) - 0.3, rtol=1e-6)


def test_soft_distributional_targets_have_the_scalar_soft_mean():
    """Munchausen composes with distributional heads: by linearity, the mean of the soft
    categorical target (inside the support) and of the soft quantile target equal the scalar
    M-DQN target built from the heads' mean values."""
    rng = np.random.default_rng(1)
    actions, atoms_n = 4, 11
    tau, r, d = 0.3, 0.2, 0.9
    bootstrap = components.soft_bootstrap(None, temperature=tau)
    scalar = head_loss("q", QHead(), components.squared(SquaredTd(scale=1.0)))

    # categorical: narrow next-state distributions, wide support, so nothing is clipped
    atoms = jnp.linspace(-20.0, 20.0, atoms_n)
    logits_t = jnp.asarray(rng.normal(size=(actions, atoms_n)) * 3, jnp.float32)
    logits_t = logits_t.at[:, :3].set(-30.0).at[:, -3:].set(-30.0)
    logits_tm1 = jnp.asarray(rng.normal(size=(actions, atoms_n)), jnp.float32)
    q_t = jnp.sum(jax.nn.softmax(logits_t) * atoms, -1)
    q_tm1 = jnp.sum(jax.nn.softmax(logits_tm1) * atoms, -1)
    pi, shift = bootstrap.policy(q_t, q_t)
    cat = head_loss("categorical", CategoricalHead(num_atoms=atoms_n, v_min=-20, v_max=20), None)
    _, td_cat = cat(
        NetworkOutput(q_tm1, logits_tm1, atoms),
        2,
        r,
        d,
        NetworkOutput(q_t, logits_t, atoms),
        pi,
        shift,
        IDENTITY,
    )
    _, td_scalar = scalar(NetworkOutput(q_tm1), 2, r, d, NetworkOutput(q_t), pi, shift, IDENTITY)
    np.testing.assert_allclose(td_cat, td_scalar, rtol=1e-4, atol=1e-5)

    # quantile: exact, no support
    theta_t = jnp.asarray(np.sort(rng.normal(size=(actions, 8)), -1), jnp.float32)
    theta_tm1 = jnp.asarray(np.sort(rng.normal(size=(actions, 8)), -1), jnp.float32)
    q_t, q_tm1 = theta_t.mean(-1), theta_tm1.mean(-1)
    pi, shift = bootstrap.policy(q_t, q_t)
    quant = head_loss("quantile", QuantileHead(num_quantiles=8), components.huber(HuberTd()))
    _, td_q = quant(
        NetworkOutput(q_tm1, quantiles=theta_tm1),
        1,
        r,
        d,
        NetworkOutput(q_t, quantiles=theta_t),
        pi,
        shift,
        IDENTITY,
    )
    _, td_scalar = scalar(NetworkOutput(q_tm1), 1, r, d, NetworkOutput(q_t), pi, shift, IDENTITY)
    np.testing.assert_allclose(td_q, td_scalar, rtol=1e-5, atol=1e-6)


def test_greedy_policy_makes_the_mixture_a_selection():
    """With a one-hot policy the categorical mixture target is C51's target of that action."""
    rng = np.random.default_rng(2)
    atoms = jnp.linspace(-2.0, 2.0, 7)
    logits = jnp.asarray(rng.normal(size=(3, 7)), jnp.float32)
    cat = head_loss("categorical", CategoricalHead(num_atoms=7, v_min=-2, v_max=2), None)
    out = NetworkOutput(jnp.sum(jax.nn.softmax(logits) * atoms, -1), logits, atoms)
    # rlax.categorical_q_learning bootstraps from the greedy action of the next-state values
    pi = jax.nn.one_hot(jnp.argmax(out.q_values), 3)
    loss, _ = cat(out, 0, 0.3, 0.8, out, pi, jnp.zeros(3), IDENTITY)
    reference = rlax.categorical_q_learning(atoms, logits, 0, 0.3, 0.8, atoms, logits)
    np.testing.assert_allclose(loss, reference, rtol=1e-5)


# ------------------------------------------------------------------------- the reduction


class Linear(eqx.Module):
    """A tiny feed-forward Q network: q = W·obs."""

    weight: jax.Array
    is_recurrent = False

    def __call__(self, obs: jax.Array, *, key: jax.Array | None = None) -> NetworkOutput:
        return NetworkOutput(q_values=self.weight @ obs)


def transitions(n: int, seed: int = 0, **fields) -> zoo.Transition:
    rng = np.random.default_rng(seed)
    batch = dict(
        observation=jnp.asarray(rng.normal(size=(n, 3)), jnp.float32),
        action=jnp.asarray(rng.integers(0, 2, n), jnp.int32),
        reward=jnp.asarray(rng.uniform(-0.9, 0.9, n), jnp.float32),
        discount=jnp.ones(n, jnp.float32),
        next_observation=jnp.asarray(rng.normal(size=(n, 3)), jnp.float32),
        probability=jnp.full((n,), 0.1, jnp.float32),
    )
    batch.update(fields)
    return zoo.Transition(**batch)


@pytest.fixture(scope="module")
def nets():
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return Linear(jax.random.normal(k1, (2, 3))), Linear(jax.random.normal(k2, (2, 3)))


def per_item_losses(loss_fn, nets, batch):
    online, target = nets
    out = []
    for i in range(batch.action.shape[0]):
        item = jax.tree.map(lambda x, i=i: x[i : i + 1], batch)
        value, _ = loss_fn(online=online, target=target, batch=item, key=jax.random.PRNGKey(0))
        out.append(float(value))
    return np.array(out)


def test_importance_weights_by_hand(nets):
    spec = zoo.load_algorithm("prioritized_ddqn", overrides={"loss.importance_exponent": 0.5})
    loss_fn = zoo.build_loss(spec)
    p = jnp.array([0.5, 0.25, 0.125, 0.0625])
    batch = transitions(4, probability=p)
    items = per_item_losses(loss_fn, nets, batch)  # a single item has weight 1
    weights = (1 / np.asarray(p)) ** 0.5
    weights /= weights.max()
    value, aux = loss_fn(online=nets[0], target=nets[1], batch=batch, key=jax.random.PRNGKey(0))
    np.testing.assert_allclose(value, np.mean(weights * items), rtol=1e-6)
    assert aux.priorities.shape == (4,)
    # β as a schedule is read at the learner step
    spec = zoo.load_algorithm("prioritized_ddqn")
    loss_fn = zoo.build_loss(spec)
    _, early = loss_fn(online=nets[0], target=nets[1], batch=batch, key=jax.random.PRNGKey(0))
    _, late = loss_fn(
        online=nets[0], target=nets[1], batch=batch, key=jax.random.PRNGKey(0), step=12_500_000
    )
    np.testing.assert_allclose(early.metrics["importance_exponent"], 0.4)
    np.testing.assert_allclose(late.metrics["importance_exponent"], 1.0)


def test_mask_removes_items(nets):
    loss_fn = zoo.build_loss(zoo.load_algorithm("dqn"))
    batch = transitions(4, seed=3)
    items = per_item_losses(loss_fn, nets, batch)
    masked = batch._replace(mask=jnp.array([1.0, 0.0, 1.0, 0.0]))
    value, _ = loss_fn(online=nets[0], target=nets[1], batch=masked, key=jax.random.PRNGKey(0))
    np.testing.assert_allclose(value, (items[0] + items[2]) / 4, rtol=1e-6)


def test_loss_rejects_the_wrong_batch_type(nets):
    loss_fn = zoo.build_loss(zoo.load_algorithm("dqn"))
    sequences = zoo.SequenceBatch(*(jnp.zeros((1, 2)),) * 4, None, jnp.ones(1))
    with pytest.raises(TypeError, match=r"learns from zoo\.Transition"):
        loss_fn(online=nets[0], target=nets[1], batch=sequences, key=jax.random.PRNGKey(0))
