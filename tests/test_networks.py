"""Tests of zoo.networks: shapes, head algebra, dueling, noisy layers, torsos and the LSTM core."""

from __future__ import annotations

import importlib.util
import math
from types import SimpleNamespace

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo.networks as zn  # imported first: registers the built-in torsos, cores and heads
from zoo import registry
from zoo.networks.torsos import max_pool_3x3_stride_2

OBS_SHAPE = (3,)
NUM_ACTIONS = 2
NUM_ATOMS = 5
NUM_QUANTILES = 4
HEADS = {
    "q": SimpleNamespace(kind="q"),
    "categorical": SimpleNamespace(kind="categorical", num_atoms=NUM_ATOMS, v_min=-2.0, v_max=3.0),
    "quantile": SimpleNamespace(kind="quantile", num_quantiles=NUM_QUANTILES),
}


def network_spec(
    *,
    torso: SimpleNamespace | None = None,
    hidden: tuple[int, ...] = (8,),
    dueling: bool = False,
    noisy: bool = False,
    noisy_sigma0: float = 0.5,
    core: SimpleNamespace | None = None,
    head: str = "q",
) -> SimpleNamespace:
    """A stand-in for the lead's pydantic ``network`` block (same attribute names)."""
    return SimpleNamespace(
        torso=torso or SimpleNamespace(kind="mlp", sizes=[8]),
        hidden=list(hidden),
        dueling=dueling,
        noisy=noisy,
        noisy_sigma0=noisy_sigma0,
        core=core,
        head=HEADS[head],
    )


def build(seed: int = 0, obs_shape=OBS_SHAPE, num_actions=NUM_ACTIONS, **kwargs):
    return zn.build_network(
        network_spec(**kwargs), obs_shape, num_actions, key=jax.random.key(seed)
    )


def observations(n: int, shape=OBS_SHAPE, seed: int = 1) -> jax.Array:
    return jax.random.normal(jax.random.key(seed), (n, *shape))


def noisy_layers(tree) -> list[zn.NoisyLinear]:
    is_noisy = lambda x: isinstance(x, zn.NoisyLinear)  # noqa: E731
    return [x for x in jax.tree.leaves(tree, is_leaf=is_noisy) if is_noisy(x)]


def zero_sigma(net):
    """The same network with every noise scale set to zero."""
    layers = noisy_layers(net)
    net = eqx.tree_at(
        lambda n: [x.weight_sigma for x in noisy_layers(n)],
        net,
        [jnp.zeros_like(x.weight_sigma) for x in layers],
    )
    return eqx.tree_at(
        lambda n: [x.bias_sigma for x in noisy_layers(n)],
        net,
        [jnp.zeros_like(x.bias_sigma) for x in layers],
    )


# --------------------------------------------------------------------------- registry


@pytest.mark.unit
def test_builtins_are_registered():
    expected = {
        ("torso", "auto"): zn.auto_torso,
        ("torso", "mlp"): zn.mlp_torso,
        ("torso", "nature_cnn"): zn.nature_cnn_torso,
        ("torso", "impala_cnn"): zn.impala_cnn_torso,
        ("torso", "minatar_cnn"): zn.minatar_cnn_torso,
        ("core", "lstm"): zn.lstm_core,
        ("head", "q"): zn.q_head,
        ("head", "categorical"): zn.categorical_head,
        ("head", "quantile"): zn.quantile_head,
    }
    for (axis, name), factory in expected.items():
        entry = registry.entry(axis, name)
        assert entry.factory is factory
        assert entry.summary


@pytest.fixture
def user_torso():
    """A user torso registered for one test (removed afterwards so the tables stay built-in)."""

    @registry.register("torso", "test_double_flatten")
    def double_flatten(config, observation_shape, *, key):
        """Flatten and multiply by ``config.scale``."""

        class DoubleFlatten(eqx.Module):
            scale: float = eqx.field(static=True)

            def __call__(self, x, *, key=None):
                return self.scale * jnp.ravel(x)

        return DoubleFlatten(config.scale)

    yield "test_double_flatten"
    registry._TABLES["torso"].pop("test_double_flatten")


@pytest.mark.compiled
def test_user_registered_torso_is_used(user_torso):
    torso = SimpleNamespace(kind=user_torso, scale=2.0)
    net = build(torso=torso, hidden=(), obs_shape=(2, 3))
    obs = observations(1, (2, 3))[0]
    layer = net.streams.mlp.layers[0]
    np.testing.assert_allclose(net(obs).q_values, layer(2.0 * obs.ravel()), rtol=1e-6)


@pytest.mark.skipif(
    importlib.util.find_spec("zoo.optimizers") is None,
    reason="registry.get lazily imports zoo.optimizers/zoo.schedules, not written yet",
)
@pytest.mark.unit
def test_unknown_torso_suggests_a_name():
    with pytest.raises(registry.UnknownComponentError, match="nature_cnn"):
        build(torso=SimpleNamespace(kind="natur_cnn"), obs_shape=(4, 84, 84))


# --------------------------------------------------------------------------- feed-forward outputs


@pytest.mark.parametrize("head", ["q", "categorical", "quantile"])
@pytest.mark.parametrize("dueling", [False, True])
@pytest.mark.parametrize("noisy", [False, True])
@pytest.mark.compiled
def test_output_fields(head, dueling, noisy):
    net = build(head=head, dueling=dueling, noisy=noisy)
    assert net.is_recurrent is False
    obs = observations(3)
    for key in (None, jax.random.key(7)):
        out = jax.vmap(lambda o, key=key: net(o, key=key))(obs)
        assert out.q_values.shape == (3, NUM_ACTIONS)
        assert out.q_values.dtype == jnp.float32
        assert np.all(np.isfinite(out.q_values))
        if head == "q":
            assert out.logits is None and out.atoms is None and out.quantiles is None
        elif head == "categorical":
            assert out.logits.shape == (3, NUM_ACTIONS, NUM_ATOMS)
            assert out.atoms.shape == (3, NUM_ATOMS)
            assert out.quantiles is None
        else:
            assert out.quantiles.shape == (3, NUM_ACTIONS, NUM_QUANTILES)
            assert out.logits is None and out.atoms is None
    # Noisy layers are exactly the hidden and output layers; the torso stays plain.
    expected_noisy = (2 if dueling else 1) * 2 if noisy else 0
    assert len(noisy_layers(net.streams)) == expected_noisy
    assert not noisy_layers(net.torso)


@pytest.mark.compiled
def test_accepts_the_full_algorithm_spec():
    spec = SimpleNamespace(network=network_spec(head="quantile"))
    net = zn.build_network(spec, OBS_SHAPE, NUM_ACTIONS, key=jax.random.key(0))
    assert net(observations(1)[0]).quantiles.shape == (NUM_ACTIONS, NUM_QUANTILES)


@pytest.mark.compiled
def test_jit_matches_eager():
    net = build(head="categorical", dueling=True, noisy=True)
    obs, key = observations(1)[0], jax.random.key(3)
    eager = net(obs, key=key)
    jitted = eqx.filter_jit(lambda n, o, k: n(o, key=k))(net, obs, key)
    np.testing.assert_allclose(jitted.logits, eager.logits, rtol=1e-5, atol=1e-6)


@pytest.mark.compiled
def test_categorical_q_values_from_logits_and_atoms():
    net = build(head="categorical")
    out = net(observations(1)[0])
    atoms = np.linspace(-2.0, 3.0, NUM_ATOMS)
    np.testing.assert_allclose(out.atoms, atoms, rtol=1e-6)
    logits = np.asarray(out.logits, np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.q_values, (probs * atoms).sum(-1), rtol=1e-5)
    # The support is a constant of static floats, not a parameter.
    assert not jax.tree.leaves(eqx.filter(net.head, eqx.is_array))


@pytest.mark.compiled
def test_quantile_q_values_are_the_mean():
    out = build(head="quantile")(observations(1)[0])
    np.testing.assert_allclose(out.q_values, np.mean(out.quantiles, axis=-1), rtol=1e-6)


@pytest.mark.parametrize("head", ["q", "categorical"])
@pytest.mark.compiled
def test_dueling_combines_value_and_mean_free_advantage(head):
    net = build(head=head, dueling=True, hidden=(8, 6))
    obs = observations(1)[0]
    features = net.torso(obs)
    value, advantage = net.streams.streams(features)
    combined = np.asarray(value)[None, :] + advantage - np.mean(advantage, axis=0, keepdims=True)
    np.testing.assert_allclose(net.streams(features), combined, rtol=1e-5, atol=1e-6)
    # Averaging the output over actions gives back the value stream, per atom.
    np.testing.assert_allclose(np.mean(net.streams(features), axis=0), value, rtol=1e-5, atol=1e-6)
    out = net(obs)
    shown = out.logits if head == "categorical" else out.q_values[:, None]
    np.testing.assert_allclose(shown, combined, rtol=1e-5, atol=1e-6)
    # Each stream has its own copy of the hidden layers.
    assert [layer.out_features for layer in net.streams.value.layers] == [8, 6, value.shape[0]]
    assert [layer.out_features for layer in net.streams.advantage.layers] == [8, 6, advantage.size]
    assert not np.allclose(
        net.streams.value.layers[0].weight, net.streams.advantage.layers[0].weight
    )


# --------------------------------------------------------------------------- noisy layers


@pytest.mark.compiled
def test_noisy_linear_init_and_forward():
    p, q, sigma0 = 9, 4, 0.4
    layer = zn.NoisyLinear(p, q, sigma0=sigma0, key=jax.random.key(0))
    bound = 1 / math.sqrt(p)
    assert np.all(np.abs(layer.weight_mu) <= bound) and np.all(np.abs(layer.bias_mu) <= bound)
    np.testing.assert_allclose(layer.weight_sigma, np.full((q, p), sigma0 / math.sqrt(p)))
    np.testing.assert_allclose(layer.bias_sigma, np.full((q,), sigma0 / math.sqrt(p)))
    x, key = jax.random.normal(jax.random.key(1), (p,)), jax.random.key(2)
    mu = layer.weight_mu @ x + layer.bias_mu
    np.testing.assert_allclose(layer(x), mu, rtol=1e-6)
    eps_w, eps_b = layer.noise(key)
    weight = layer.weight_mu + layer.weight_sigma * eps_w
    expected = weight @ x + layer.bias_mu + layer.bias_sigma * eps_b
    np.testing.assert_allclose(layer(x, key=key), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.compiled
def test_factorised_noise_statistics():
    layer = zn.NoisyLinear(6, 4, key=jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 4000)
    eps_w, eps_b = jax.vmap(layer.noise)(keys)
    eps_w, eps_b = np.asarray(eps_w, np.float64), np.asarray(eps_b, np.float64)
    # f(x) = sgn(x)·sqrt|x| with x ~ N(0, 1): E f = 0, E f² = E|x| = sqrt(2/π), Var f² = 1 − 2/π.
    e_f2 = math.sqrt(2 / math.pi)
    n_b = eps_b.size
    assert abs(eps_b.mean()) < 5 * math.sqrt(e_f2 / n_b)
    assert abs((eps_b**2).mean() - e_f2) < 5 * math.sqrt((1 - 2 / math.pi) / n_b)
    # ε_w = f(ε_out) ⊗ f(ε_in): mean 0, E ε_w² = (E f²)² = 2/π, and rank one.
    assert abs(eps_w.mean()) < 0.02
    assert abs((eps_w**2).mean() - 2 / math.pi) < 0.03
    singular = np.linalg.svd(eps_w, compute_uv=False)
    assert np.all(singular[:, 1] < 1e-5 * singular[:, 0])
    # The bias noise is the output factor of the weight noise.
    eps_in = eps_w[:, 0, :] / eps_b[:, :1]
    np.testing.assert_allclose(eps_w, eps_b[:, :, None] * eps_in[:, None, :], rtol=1e-4, atol=1e-6)


@pytest.mark.compiled
def test_noisy_network_keys():
    net = build(head="categorical", dueling=True, noisy=True)
    obs = observations(2)
    one = lambda o, key=None: net(o, key=key).logits  # noqa: E731
    k1, k2 = jax.random.key(11), jax.random.key(12)
    # key=None is deterministic and is the mean network: zero noise scales give the same output.
    np.testing.assert_array_equal(one(obs[0]), one(obs[0]))
    mean_net = zero_sigma(net)
    np.testing.assert_allclose(one(obs[0]), mean_net(obs[0], key=k1).logits, rtol=1e-5, atol=1e-6)
    # The same key gives the same output, another key a different one.
    np.testing.assert_array_equal(one(obs[0], k1), one(obs[0], k1))
    assert not np.allclose(one(obs[0], k1), one(obs[0], k2))
    assert not np.allclose(one(obs[0], k1), one(obs[0]))
    # Under vmap one key is one noise sample for the whole batch.
    batch = jnp.stack([obs[0], obs[1], obs[0]])
    out = jax.vmap(lambda o: net(o, key=k1).logits)(batch)
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_allclose(out[0], one(obs[0], k1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[1], one(obs[1], k1), rtol=1e-5, atol=1e-6)


@pytest.mark.compiled
def test_noise_scales_receive_gradients_only_with_a_key():
    net = build(noisy=True)
    obs = observations(4)

    def loss(n, key):
        return jnp.sum(jax.vmap(lambda o: n(o, key=key).q_values)(obs) ** 2)

    with_key = eqx.filter_grad(loss)(net, jax.random.key(0))
    without = eqx.filter_grad(loss)(net, None)
    for layer in noisy_layers(with_key):
        assert np.any(layer.weight_sigma != 0) and np.any(layer.bias_sigma != 0)
    for layer in noisy_layers(without):
        assert np.all(layer.weight_sigma == 0) and np.all(layer.bias_sigma == 0)


# --------------------------------------------------------------------------- torsos


@pytest.mark.compiled
def test_mlp_torso_without_layers_only_flattens():
    net = build(torso=SimpleNamespace(kind="mlp", sizes=[]), hidden=(), obs_shape=(2, 3))
    obs = observations(1, (2, 3))[0]
    np.testing.assert_array_equal(net.torso(obs), obs.ravel())


@pytest.mark.compiled
def test_auto_torso_picks_by_rank():
    auto = SimpleNamespace(kind="auto", sizes=[5])
    key = jax.random.key(0)
    assert isinstance(zn.auto_torso(auto, (4, 84, 84), key=key), zn.NatureCNN)
    vector = zn.auto_torso(auto, (3,), key=key)
    assert isinstance(vector, zn.MLPTorso) and vector.mlp.out_features == 5


@pytest.mark.compiled
def test_nature_cnn_features_and_uint8_scaling():
    shape = (4, 84, 84)
    torso = registry.get("torso", "nature_cnn")(
        SimpleNamespace(kind="nature_cnn"), shape, key=jax.random.key(0)
    )
    assert jax.eval_shape(torso, jax.ShapeDtypeStruct(shape, jnp.float32)).shape == (3136,)
    net = build(torso=SimpleNamespace(kind="nature_cnn"), hidden=(16,), obs_shape=shape)
    assert net.streams.mlp.layers[0].in_features == 3136
    frames = jax.random.randint(jax.random.key(1), (2, *shape), 0, 256).astype(jnp.uint8)
    forward = jax.jit(jax.vmap(lambda o: net(o).q_values))
    as_uint8 = forward(frames)
    as_float = forward(frames.astype(jnp.float32) / 255.0)
    np.testing.assert_allclose(as_uint8, as_float, rtol=1e-5, atol=1e-6)
    assert not np.allclose(as_uint8, forward(frames.astype(jnp.float32)))


@pytest.mark.compiled
def test_impala_cnn_runs_on_a_small_image():
    torso = SimpleNamespace(kind="impala_cnn", channels=[16, 32, 32])
    net = build(torso=torso, hidden=(16,), obs_shape=(4, 32, 32), head="quantile")
    # Three stride-2 SAME poolings: 32 → 16 → 8 → 4.
    assert net.streams.mlp.layers[0].in_features == 32 * 4 * 4
    obs = jax.random.randint(jax.random.key(1), (4, 32, 32), 0, 256).astype(jnp.uint8)
    out = eqx.filter_jit(net)(obs)
    assert out.quantiles.shape == (NUM_ACTIONS, NUM_QUANTILES)
    assert np.all(np.isfinite(out.quantiles))
    odd = zn.impala_cnn_torso(SimpleNamespace(channels=[2, 3]), (1, 9, 9), key=jax.random.key(0))
    assert jax.eval_shape(odd, jax.ShapeDtypeStruct((1, 9, 9), jnp.float32)).shape == (3 * 3 * 3,)


@pytest.mark.compiled
def test_minatar_cnn_same_padding_and_glorot_uniform_init():
    # Revisiting Rainbow's MinAtar torso: conv 16×3×3 stride 1, SAME padding (Flax's default),
    # ReLU, flatten: [4, 10, 10] → 16·10·10 = 1600 features.
    config = SimpleNamespace(kind="minatar_cnn", channels=16, kernel_size=3, init="glorot_uniform")
    torso = zn.minatar_cnn_torso(config, (4, 10, 10), key=jax.random.key(0))
    assert jax.eval_shape(torso, jax.ShapeDtypeStruct((4, 10, 10), jnp.float32)).shape == (1600,)
    # variance_scaling(1, fan_avg, uniform): U(±sqrt(6 / (fan_in + fan_out))), fan_in = 4·3·3 and
    # fan_out = 16·3·3, so the bound is sqrt(6 / 180); the bias starts at zero.
    weight = np.asarray(torso.conv.weight)
    bound = math.sqrt(6.0 / (4 * 9 + 16 * 9))
    assert weight.shape == (16, 4, 3, 3)
    assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.9 * bound
    np.testing.assert_allclose(weight.var(), bound**2 / 3, rtol=0.15)  # var of U(±b) is b²/3
    np.testing.assert_array_equal(np.asarray(torso.conv.bias), 0.0)
    # A lit corner cell reaches the 2×2 outputs around it (SAME padding; cross-correlation:
    # out[i, j] = w[1 − i, 1 − j] · x[0, 0]).
    x = np.zeros((4, 10, 10), np.float32)
    x[0, 0, 0] = 1.0
    expected = np.maximum(
        np.stack(
            [
                [
                    [weight[c, 0, 1 - i, 1 - j] if i < 2 and j < 2 else 0.0 for j in range(10)]
                    for i in range(10)
                ]
                for c in range(16)
            ]
        ),
        0.0,
    )
    np.testing.assert_allclose(np.asarray(torso(jnp.asarray(x))), expected.ravel(), atol=1e-6)
    default = zn.minatar_cnn_torso(
        SimpleNamespace(channels=8, kernel_size=3, init="default"),
        (2, 10, 10),
        key=jax.random.key(1),
    )
    assert np.abs(np.asarray(default.conv.bias)).max() > 0  # Equinox's default: U(±1/√fan_in)
    assert np.abs(np.asarray(default.conv.weight)).max() <= 1 / math.sqrt(2 * 9)


@pytest.mark.compiled
def test_max_pool_same_padding():
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4)[:, ::-1, :].copy()
    pooled = np.asarray(max_pool_3x3_stride_2(jnp.asarray(x), "same"))
    # TensorFlow SAME for k=3, s=2 on 4: windows start at 0 and 2, padded at the end only.
    expected = np.array([[x[0, 0:3, 0:3].max(), x[0, 0:3, 2:4].max()],
                         [x[0, 2:4, 0:3].max(), x[0, 2:4, 2:4].max()]])  # fmt: skip
    np.testing.assert_array_equal(pooled[0], expected)


def _torch_max_pool(x: np.ndarray) -> np.ndarray:
    """PyTorch's ``MaxPool2d(3, 2, padding=1)`` written out: output ``i`` is the max over inputs
    ``[2i − 1, 2i + 1]`` clipped to the image (the padding is −∞), ``floor((n + 2 − 3) / 2) + 1``
    outputs per axis."""
    c, h, w = x.shape
    out = np.empty((c, (h - 1) // 2 + 1, (w - 1) // 2 + 1), x.dtype)
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            rows = slice(max(2 * i - 1, 0), 2 * i + 2)
            cols = slice(max(2 * j - 1, 0), 2 * j + 2)
            out[:, i, j] = x[:, rows, cols].max(axis=(1, 2))
    return out


@pytest.mark.compiled
@pytest.mark.parametrize("size", [84, 42, 21, 6, 5])
def test_symmetric_max_pool_is_pytorchs_and_differs_from_same_on_even_sizes(size: int) -> None:
    """Beyond The Rainbow's ``nn.MaxPool2d(3, 2, padding=1)``: windows [2i−1, 2i+1]. TF SAME
    pads an even size at the end only (windows [2i, 2i+2]), so on a ramp the two differ at every
    output; on an odd size both pad one cell each side and agree."""
    x = np.random.default_rng(size).normal(size=(2, size, size)).astype(np.float32)
    symmetric = np.asarray(max_pool_3x3_stride_2(jnp.asarray(x), "symmetric"))
    np.testing.assert_array_equal(symmetric, _torch_max_pool(x))
    ramp = np.broadcast_to(np.arange(size, dtype=np.float32), (1, size, size)).copy()
    same = np.asarray(max_pool_3x3_stride_2(jnp.asarray(ramp), "same"))
    torch_like = np.asarray(max_pool_3x3_stride_2(jnp.asarray(ramp), "symmetric"))
    assert same.shape == torch_like.shape == (1, -(-size // 2), -(-size // 2))
    if size % 2 == 0:
        # the last column of window i: 2i + 2 under SAME (clipped to n − 1), 2i + 1 under torch
        last = np.minimum(2 * np.arange(size // 2) + 2, size - 1)
        np.testing.assert_array_equal(same[0, 0], last)
        np.testing.assert_array_equal(torch_like[0, 0], 2 * np.arange(size // 2) + 1)
    else:
        np.testing.assert_array_equal(same, torch_like)


def _conv_same_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int) -> np.ndarray:
    """A direct float64 convolution with XLA's SAME padding, as Flax's ``nn.Conv`` and Haiku's
    ``hk.Conv2D`` apply it by default: ``ceil(n / s)`` outputs, total padding
    ``max((out − 1)·s + k − n, 0)`` split with the odd cell at the end."""
    c_out, c_in, k, _ = w.shape
    n = x.shape[1]
    out = -(-n // stride)
    total = max((out - 1) * stride + k - n, 0)
    lo = total // 2
    padded = np.zeros((c_in, n + total, n + total))
    padded[:, lo : lo + n, lo : lo + n] = x
    y = np.empty((c_out, out, out))
    for i in range(out):
        for j in range(out):
            patch = padded[:, i * stride : i * stride + k, j * stride : j * stride + k]
            y[:, i, j] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2])) + b
    return y


@pytest.mark.compiled
def test_nature_cnn_same_padding_is_flax_and_haikus_default() -> None:
    """``padding: SAME``: 84 → 21 → 11 → 11 and 7,744 features (Dopamine's NatureDQNNetwork and
    Acme's AtariTorso pass no padding, so they inherit SAME); each layer equals a direct SAME
    convolution. VALID stays 84 → 20 → 9 → 7, 3,136."""
    shape = (4, 84, 84)
    same = zn.nature_cnn_torso(
        SimpleNamespace(kind="nature_cnn", padding="SAME"), shape, key=jax.random.key(0)
    )
    valid = zn.nature_cnn_torso(SimpleNamespace(kind="nature_cnn"), shape, key=jax.random.key(0))
    x = np.random.default_rng(0).uniform(size=shape).astype(np.float32)
    assert same(jnp.asarray(x)).shape == (7744,)
    assert valid(jnp.asarray(x)).shape == (3136,)
    h = x.astype(np.float64)
    for conv, size in zip(same.convs, (21, 11, 11), strict=True):
        w, b = np.asarray(conv.weight, np.float64), np.asarray(conv.bias, np.float64).ravel()
        y = np.maximum(_conv_same_reference(h, w, b, int(conv.stride[0])), 0)
        assert y.shape[1:] == (size, size)
        got = np.asarray(jax.nn.relu(conv(jnp.asarray(h, jnp.float32))))
        np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-4)
        h = y
    np.testing.assert_allclose(np.asarray(same(jnp.asarray(x))), h.ravel(), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- recurrent core

LSTM = SimpleNamespace(kind="lstm", size=6)


@pytest.mark.compiled
def test_lstm_cell_matches_hand_computation():
    cell = zn.lstm_core(LSTM, 3, key=jax.random.key(0))
    cell = eqx.tree_at(lambda c: c.bias, cell, jax.random.normal(jax.random.key(1), (24,)))
    x = np.asarray(jax.random.normal(jax.random.key(2), (3,)), np.float64)
    h = np.asarray(jax.random.normal(jax.random.key(3), (6,)), np.float64)
    c = np.asarray(jax.random.normal(jax.random.key(4), (6,)), np.float64)
    gates = np.asarray(cell.weight, np.float64) @ np.concatenate([x, h]) + np.asarray(cell.bias)
    i, g, f, o = np.split(gates, 4)
    sigmoid = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    c_new = sigmoid(f + 1) * c + sigmoid(i) * np.tanh(g)
    h_new = sigmoid(o) * np.tanh(c_new)
    out, (h_out, c_out) = cell(jnp.asarray(x, jnp.float32), (jnp.asarray(h), jnp.asarray(c)))
    np.testing.assert_allclose(c_out, c_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_out, h_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out, h_out)


@pytest.mark.compiled
def test_initial_state_is_zeros():
    net = build(core=LSTM)
    assert net.is_recurrent is True
    h, c = net.initial_state()
    assert h.shape == c.shape == (6,)
    assert not np.any(h) and not np.any(c)


@pytest.mark.compiled
def test_state_changes_the_output():
    net = build(core=LSTM)
    obs = observations(1)[0]
    out0, state1 = net(obs, net.initial_state())
    out1, _ = net(obs, state1)
    assert out0.q_values.shape == (NUM_ACTIONS,)
    assert np.any(np.asarray(state1[0]) != 0)
    assert not np.allclose(out0.q_values, out1.q_values)


@pytest.mark.parametrize(
    ("head", "dueling", "noisy"), [("q", False, False), ("categorical", True, True)]
)
@pytest.mark.compiled
def test_unroll_equals_step_loop(head, dueling, noisy):
    net = build(core=LSTM, head=head, dueling=dueling, noisy=noisy, hidden=(5,))
    T = 4
    obs = observations(T)
    start = jax.tree.map(lambda x: x + 0.1, net.initial_state())
    key = jax.random.key(5) if noisy else None
    unrolled, final = net.unroll(obs, start, key=key)
    state, steps = start, []
    for t in range(T):
        out, state = net(obs[t], state, key=key)
        steps.append(out)
    np.testing.assert_allclose(
        unrolled.q_values, np.stack([s.q_values for s in steps]), rtol=1e-5, atol=1e-6
    )
    for a, b in zip(final, state, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    if head == "categorical":
        assert unrolled.logits.shape == (T, NUM_ACTIONS, NUM_ATOMS)
        assert unrolled.atoms.shape == (NUM_ATOMS,)
        np.testing.assert_allclose(
            unrolled.logits, np.stack([s.logits for s in steps]), rtol=1e-5, atol=1e-6
        )
        # One noise sample per unroll: a different key changes the whole sequence.
        other, _ = net.unroll(obs, start, key=jax.random.key(6))
        assert not np.allclose(other.logits, unrolled.logits)
    else:
        assert unrolled.q_values.shape == (T, NUM_ACTIONS)
        assert unrolled.logits is None and unrolled.atoms is None


@pytest.mark.compiled
def test_recurrent_unroll_batches_with_vmap():
    net = build(core=LSTM, head="quantile")
    obs = observations(3 * 4).reshape(3, 4, *OBS_SHAPE)
    state = jax.tree.map(lambda x: jnp.broadcast_to(x, (3, *x.shape)), net.initial_state())
    out, (h, c) = jax.vmap(net.unroll)(obs, state)
    assert out.quantiles.shape == (3, 4, NUM_ACTIONS, NUM_QUANTILES)
    assert h.shape == c.shape == (3, 6)
    single, _ = net.unroll(obs[1], net.initial_state())
    np.testing.assert_allclose(out.quantiles[1], single.quantiles, rtol=1e-5, atol=1e-6)


@pytest.mark.compiled
def test_glorot_uniform_init_of_every_plain_layer_and_the_default_untouched():
    """``network.init: glorot_uniform``: every Linear and Conv has U(±√(6/(fan_in+fan_out)))
    weights (bound reached, variance ≈ bound²/3) and zero biases, as Flax's xavier_uniform with
    its zero bias init; ``default`` draws exactly what it drew before the option existed."""
    import zoo
    from zoo.networks import build_network

    def layers(net):
        plain = (eqx.nn.Linear, eqx.nn.Conv)
        leaves = jax.tree_util.tree_leaves(net, is_leaf=lambda x: isinstance(x, plain))
        return [x for x in leaves if isinstance(x, plain)]

    key = jax.random.PRNGKey(3)
    glorot = zoo.load_algorithm("dqn", overrides={"network.init": "glorot_uniform"})
    net = build_network(glorot, (4, 84, 84), 18, key=key)
    shapes = [tuple(x.weight.shape) for x in layers(net)]
    assert shapes == [(32, 4, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3), (512, 3136), (18, 512)]
    for layer in layers(net):
        w = np.asarray(layer.weight)
        window = int(np.prod(w.shape[2:]))
        bound = np.sqrt(6.0 / (w.shape[1] * window + w.shape[0] * window))
        assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
        assert abs(w.var() / (bound**2 / 3) - 1) < 0.05
        assert not np.asarray(layer.bias).any()
    # the default: Equinox's U(±1/√fan_in) weights and biases, the same draw as without the field
    default = build_network(zoo.load_algorithm("dqn"), (4, 84, 84), 18, key=key)
    explicit = build_network(
        zoo.load_algorithm("dqn", overrides={"network.init": "default"}), (4, 84, 84), 18, key=key
    )
    for a, b in zip(layers(default), layers(explicit), strict=True):
        assert np.array_equal(a.weight, b.weight) and np.array_equal(a.bias, b.bias)
    first = np.asarray(layers(default)[3].weight)  # the 3136 → 512 layer
    assert np.abs(first).max() <= 1 / np.sqrt(3136) and np.asarray(layers(default)[3].bias).any()
    # noisy layers keep their own initialisation
    noisy = zoo.load_algorithm("rainbow", overrides={"network.init": "glorot_uniform"})
    net = build_network(noisy, (4, 84, 84), 6, key=key)
    assert [tuple(x.weight.shape) for x in layers(net)][:3] == shapes[:3]


def _truncated_normal_variance(bound: float = 2.0) -> float:
    """Variance of a standard normal truncated to ±``bound``: 1 − 2b·φ(b)/(2Φ(b) − 1)."""
    pdf = math.exp(-(bound**2) / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(bound / math.sqrt(2))
    return 1 - 2 * bound * pdf / mass


#: Flax's variance_scaling divides σ by this, the standard deviation of N(0, 1) cut at ±2.
FLAX_TRUNCATION = 0.87962566103423978


@pytest.mark.compiled
@pytest.mark.parametrize(
    ("init", "variance", "bound"),
    [
        # Flax's variance_scaling: truncated normal at ±2σ′, σ′ rescaled so the variance is exact
        ("he_normal", lambda n: 2 / n, lambda n: 2 * math.sqrt(2 / n) / FLAX_TRUNCATION),
        ("lecun_normal", lambda n: 1 / n, lambda n: 2 * math.sqrt(1 / n) / FLAX_TRUNCATION),
        # Dopamine's variance_scaling(1/√3, fan_in, uniform): U(±√(√3/n)), variance bound²/3
        ("dopamine_uniform", lambda n: math.sqrt(3) / n / 3, lambda n: math.sqrt(math.sqrt(3) / n)),
        # Haiku's TruncatedNormal(1/√fan_in): N(0, 1/n) cut at ±2σ, not rescaled
        ("truncated_normal", lambda n: FLAX_TRUNCATION**2 / n, lambda n: 2 / math.sqrt(n)),
    ],
)
def test_named_inits_draw_their_variance_with_zero_biases(init, variance, bound) -> None:
    """Each ``network.init`` draws every plain layer's weights with the variance its source
    states (fan_in = in·∏window), within its bound, and zeroes the biases."""
    import zoo
    from zoo.networks import build_network

    assert abs(_truncated_normal_variance() - FLAX_TRUNCATION**2) < 1e-9
    spec = zoo.load_algorithm("dqn", overrides={"network.init": init})
    net = build_network(spec, (4, 84, 84), 18, key=jax.random.PRNGKey(5))
    plain = (eqx.nn.Linear, eqx.nn.Conv)
    leaves = jax.tree_util.tree_leaves(net, is_leaf=lambda x: isinstance(x, plain))
    for layer in [x for x in leaves if isinstance(x, plain)]:
        w = np.asarray(layer.weight, np.float64)
        fan_in = int(np.prod(w.shape[1:]))
        assert np.abs(w).max() <= bound(fan_in) * (1 + 1e-6)
        # a sample variance of n draws has relative standard error ≈ √(2/n); ≥ 9,216 draws here
        assert abs(w.var() / variance(fan_in) - 1) < 5 * math.sqrt(2 / w.size) + 0.01
        assert not np.asarray(layer.bias).any()


@pytest.mark.compiled
def test_output_init_sets_only_the_output_layers() -> None:
    """purejaxql's networks: he_normal everywhere, the output layer Flax's default lecun_normal
    (``output_init``). With dueling both streams' last layers change and nothing else;
    ``output_init: default`` gives back Equinox's default draw of those layers."""
    import zoo
    from zoo.networks import build_network

    key = jax.random.PRNGKey(7)
    base = {"network.init": "he_normal", "network.dueling": True, "network.hidden": [64]}
    he = build_network(zoo.load_algorithm("dqn", overrides=base), (4, 84, 84), 6, key=key)
    mixed = build_network(
        zoo.load_algorithm("dqn", overrides={**base, "network.output_init": "lecun_normal"}),
        (4, 84, 84),
        6,
        key=key,
    )
    back = build_network(
        zoo.load_algorithm("dqn", overrides={**base, "network.output_init": "default"}),
        (4, 84, 84),
        6,
        key=key,
    )
    default = build_network(
        zoo.load_algorithm("dqn", overrides={"network.dueling": True, "network.hidden": [64]}),
        (4, 84, 84),
        6,
        key=key,
    )
    for stream in ("value", "advantage"):
        he_mlp, mixed_mlp = getattr(he.streams, stream), getattr(mixed.streams, stream)
        assert np.array_equal(he_mlp.layers[0].weight, mixed_mlp.layers[0].weight)
        out = np.asarray(mixed_mlp.layers[-1].weight, np.float64)
        assert not np.array_equal(out, he_mlp.layers[-1].weight)
        assert abs(out.var() * 64 - 1) < 0.35  # lecun_normal: variance 1/fan_in (≤ 384 draws)
        assert not np.asarray(mixed_mlp.layers[-1].bias).any()
        restored = getattr(back.streams, stream).layers[-1]
        original = getattr(default.streams, stream).layers[-1]
        assert np.array_equal(restored.weight, original.weight)
        assert np.array_equal(restored.bias, original.bias)
    for a, b in zip(he.torso.convs, mixed.torso.convs, strict=True):
        assert np.array_equal(a.weight, b.weight)


@pytest.mark.unit
def test_output_init_on_noisy_output_layers_is_refused() -> None:
    import zoo
    from zoo.spec import SpecError

    with pytest.raises(SpecError, match="noisy output layers keep their own initialisation"):
        zoo.load_algorithm("rainbow", overrides={"network.output_init": "lecun_normal"})


# ------------------------------------------------------------------ layer normalisation


def _layer_norm(x: np.ndarray, axis: int = -1, eps: float = 1e-6) -> np.ndarray:
    mean = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


@pytest.mark.compiled
def test_layer_norm_before_each_relu_of_the_hidden_layers():
    """dense → LayerNorm → ReLU per hidden layer, none on the output layer (purejaxql's PQN)."""
    spec = network_spec(torso=SimpleNamespace(kind="mlp", sizes=[]), hidden=(6, 5))
    spec.norm = "layer_norm"
    net = zn.build_network(spec, (3,), NUM_ACTIONS, key=jax.random.key(0))
    mlp = net.streams.mlp
    assert [n.shape for n in mlp.norms] == [(6,), (5,)]
    # give the norms a non-trivial scale and bias, so the test sees where they act
    net = eqx.tree_at(
        lambda n: [x.weight for x in n.streams.mlp.norms], net, [jnp.full(6, 2.0), jnp.ones(5)]
    )
    net = eqx.tree_at(lambda n: n.streams.mlp.norms[0].bias, net, jnp.full(6, -0.5))
    obs = np.asarray(observations(1, (3,))[0])
    layers = [(np.asarray(x.weight), np.asarray(x.bias)) for x in net.streams.mlp.layers]
    h = obs
    for (w, b), scale, bias in zip(layers[:2], (2.0, 1.0), (-0.5, 0.0), strict=True):
        h = np.maximum(_layer_norm(w @ h + b) * scale + bias, 0.0)
    w, b = layers[2]
    np.testing.assert_allclose(np.asarray(net(jnp.asarray(obs)).q_values), w @ h + b, atol=1e-5)
    plain = build(torso=SimpleNamespace(kind="mlp", sizes=[]), hidden=(6, 5), obs_shape=(3,))
    assert plain.streams.mlp.norms == ()  # the default adds no parameters


@pytest.mark.compiled
def test_mlp_torso_and_dueling_streams_take_layer_norm():
    torso = SimpleNamespace(kind="mlp", sizes=[7, 4], norm="layer_norm")
    spec = network_spec(torso=torso, hidden=(3,), dueling=True)
    spec.norm = "layer_norm"
    net = zn.build_network(spec, OBS_SHAPE, NUM_ACTIONS, key=jax.random.key(0))
    assert [n.shape for n in net.torso.mlp.norms] == [(7,), (4,)]  # activate_final: both
    assert [n.shape for n in net.streams.value.norms] == [(3,)]
    assert [n.shape for n in net.streams.advantage.norms] == [(3,)]
    features = np.asarray(net.torso(observations(1)[0]))
    assert features.min() >= 0 and np.isfinite(features).all()


@pytest.mark.compiled
def test_channel_layer_norm_normalises_channels_at_each_position():
    """Flax's nn.LayerNorm on channels-last maps, on Equinox's channels-first ones."""
    x = np.asarray(jax.random.normal(jax.random.key(3), (5, 4, 3))) * 3 + 1
    norm = zn.ChannelLayerNorm(5)
    norm = eqx.tree_at(lambda n: (n.norm.weight, n.norm.bias), norm, (jnp.arange(5.0), jnp.ones(5)))
    want = _layer_norm(x, axis=0) * np.arange(5.0)[:, None, None] + 1.0
    np.testing.assert_allclose(np.asarray(norm(jnp.asarray(x))), want, rtol=1e-5, atol=1e-5)


@pytest.mark.compiled
def test_nature_and_minatar_cnn_layer_norm_and_valid_padding():
    shape = (4, 84, 84)
    config = SimpleNamespace(kind="nature_cnn", norm="layer_norm")
    torso = zn.nature_cnn_torso(config, shape, key=jax.random.key(0))
    assert [n.norm.shape for n in torso.norms] == [(32,), (64,), (64,)]
    obs = jax.random.uniform(jax.random.key(1), shape)
    # the first convolution's map, normalised over channels, then ReLU: by hand
    x = np.asarray(torso.convs[0](obs))
    first = np.maximum(_layer_norm(x, axis=0), 0.0)
    got = np.asarray(jax.nn.relu(torso.norms[0](torso.convs[0](obs))))
    np.testing.assert_allclose(got, first, atol=1e-5)
    assert torso(obs).shape == (3136,)
    plain = zn.nature_cnn_torso(SimpleNamespace(kind="nature_cnn"), shape, key=jax.random.key(0))
    assert plain.norms == ()
    # purejaxql's MinAtar torso: conv 16×3×3 VALID, LayerNorm, ReLU: [4, 10, 10] → 16·8·8
    minatar = SimpleNamespace(
        channels=16, kernel_size=3, init="default", padding="VALID", norm="layer_norm"
    )
    torso = zn.minatar_cnn_torso(minatar, (4, 10, 10), key=jax.random.key(0))
    assert jax.eval_shape(torso, jax.ShapeDtypeStruct((4, 10, 10), jnp.float32)).shape == (1024,)
    assert len(torso.norms) == 1


@pytest.mark.unit
def test_norm_is_validated_by_the_spec():
    import zoo

    spec = zoo.load_algorithm(
        "dqn", overrides={"network.norm": "layer_norm", "network.torso": "nature_cnn"}
    )
    assert spec.network.norm == "layer_norm" and spec.network.torso.norm == "none"
    with pytest.raises(zoo.spec.SpecError, match="layer_norm"):
        zoo.load_algorithm("dqn", overrides={"network.norm": "batch_norm"})


# ------------------------------------------- Beyond The Rainbow's IMPALA: width, pool, spectral


def _numpy_adaptive_max_pool(x: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """PyTorch's AdaptiveMaxPool2d written out: bin i spans [⌊i·H/h⌋, ⌈(i+1)·H/h⌉)."""
    c, h, w = x.shape
    out = np.empty((c, out_h, out_w), x.dtype)
    for i in range(out_h):
        r0, r1 = math.floor(i * h / out_h), math.ceil((i + 1) * h / out_h)
        for j in range(out_w):
            c0, c1 = math.floor(j * w / out_w), math.ceil((j + 1) * w / out_w)
            for k in range(c):
                out[k, i, j] = x[k, r0:r1, c0:c1].max()
    return out


@pytest.mark.parametrize(
    ("in_hw", "out_hw"), [((11, 11), (6, 6)), ((6, 6), (6, 6)), ((7, 10), (3, 4)), ((4, 5), (6, 6))]
)
@pytest.mark.compiled
def test_adaptive_max_pool_matches_a_numpy_loop(in_hw, out_hw):
    # overlapping bins (11 → 6), the identity (6 → 6), uneven sides, and more bins than rows
    x = np.asarray(jax.random.normal(jax.random.key(3), (3, *in_hw)))
    pooled = np.asarray(jax.jit(lambda a: zn.adaptive_max_pool(a, out_hw))(jnp.asarray(x)))
    np.testing.assert_array_equal(pooled, _numpy_adaptive_max_pool(x, *out_hw))
    assert zn.adaptive_pool_bins(11, 6) == [(0, 2), (1, 4), (3, 6), (5, 8), (7, 10), (9, 11)]


def _impala(config: SimpleNamespace, obs_shape=(2, 12, 12), seed: int = 0) -> zn.ImpalaCNN:
    return zn.impala_cnn_torso(config, obs_shape, key=jax.random.key(seed))


def _convs(torso: zn.ImpalaCNN) -> list[eqx.nn.Conv2d]:
    is_conv = lambda x: isinstance(x, eqx.nn.Conv2d)  # noqa: E731
    return [x for x in jax.tree.leaves(torso, is_leaf=is_conv) if is_conv(x)]


@pytest.mark.compiled
def test_impala_defaults_build_todays_network_bit_for_bit():
    from zoo.spec.network import ImpalaCnnTorso

    x = jax.random.uniform(jax.random.key(4), (2, 12, 12))
    old = _impala(SimpleNamespace(channels=[2, 3]))  # a config without the new fields
    new = _impala(ImpalaCnnTorso(channels=[2, 3]))  # the spec's defaults
    assert jax.tree.structure(old) == jax.tree.structure(new)
    for a, b in zip(jax.tree.leaves(old), jax.tree.leaves(new), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(old(x), new(x))
    assert new.pool is None and all(type(c) is eqx.nn.Conv2d for c in _convs(new))


@pytest.mark.compiled
def test_impala_width_multiplies_every_channel_count():
    torso = _impala(SimpleNamespace(channels=[2, 3], width=2))
    # per stack: the stack's convolution, then two blocks of two convolutions
    assert [c.out_channels for c in _convs(torso)] == [4] * 5 + [6] * 5
    assert [c.in_channels for c in _convs(torso)] == [2, 4, 4, 4, 4, 4, 6, 6, 6, 6]
    # 12 → 6 → 3 after two stride-2 poolings
    assert jax.eval_shape(torso, jax.ShapeDtypeStruct((2, 12, 12), jnp.float32)).shape == (6 * 9,)
    # Beyond The Rainbow's torso on Atari frames: conv_out_size = 1152 · model_size = 2304
    btr = SimpleNamespace(channels=[16, 32, 32], width=2, pool=[6, 6], spectral_norm=True)
    frames = jax.ShapeDtypeStruct((4, 84, 84), jnp.float32)
    assert jax.eval_shape(_impala(btr, (4, 84, 84)), frames).shape == (2304,)


@pytest.mark.compiled
def test_impala_adaptive_pool_fixes_the_feature_count_after_the_relu():
    config = SimpleNamespace(channels=[2, 3], pool=[2, 2])
    pooled, plain = _impala(config), _impala(SimpleNamespace(channels=[2, 3]))
    for side in (12, 20):  # final maps 3×3 and 5×5: the same 3·2·2 features
        x = jax.random.uniform(jax.random.key(side), (2, side, side))
        features = pooled(x)
        assert features.shape == (3 * 2 * 2,)
        final = np.asarray(plain(x)).reshape(3, side // 4 + (side % 4 > 0), -1)  # ReLU'd map
        expected = _numpy_adaptive_max_pool(final, 2, 2).ravel()
        np.testing.assert_allclose(features, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.compiled
def test_spectral_norm_estimates_the_largest_singular_value():
    # Equinox's initialisation of 3×3 convolutions: singular values close together, the slowest
    # case for the power iteration; a dense layer too
    layers = [
        eqx.nn.Conv2d(32, 32, 3, padding="SAME", key=jax.random.key(32)),
        eqx.nn.Conv2d(64, 64, 3, padding="SAME", key=jax.random.key(64)),
        eqx.nn.Linear(48, 20, key=jax.random.key(7)),
    ]
    for layer in layers:
        matrix = layer.weight.reshape(layer.weight.shape[0], -1)
        true = float(jnp.linalg.norm(matrix, 2))
        errors = [1 - float(zn.spectral_norm_sigma(layer.weight, k)) / true for k in (1, 4, 16)]
        assert all(e >= -1e-6 for e in errors)  # ‖Wv‖ never exceeds σ₁
        assert errors[0] > errors[1] > errors[2]
        assert errors[2] < 0.01  # the default 16 iterations: within 1%
        normalised = zn.SpectralNorm(layer).normalized().weight
        spectral = float(jnp.linalg.norm(normalised.reshape(matrix.shape), 2))
        assert 1.0 <= spectral < 1.01
    # the wrapped layer computes with W / σ, the bias untouched
    dense = zn.SpectralNorm(layers[2], 16)
    x = jax.random.normal(jax.random.key(8), (48,))
    sigma = zn.spectral_norm_sigma(layers[2].weight, 16)
    np.testing.assert_allclose(
        dense(x), layers[2].weight @ x / sigma + layers[2].bias, rtol=1e-5, atol=1e-6
    )


@pytest.mark.compiled
def test_spectral_norm_gradient_treats_the_singular_vectors_as_constants():
    # PyTorch's gradient: σ = uᵀWv with u, v fixed, so dσ/dW = u vᵀ; converged, u and v are the
    # top singular vectors (up to a common sign)
    weight = jax.random.normal(jax.random.key(9), (6, 10))
    grad = jax.grad(lambda w: zn.spectral_norm_sigma(w, 200))(weight)
    left, _, right = np.linalg.svd(np.asarray(weight))
    np.testing.assert_allclose(grad, np.outer(left[:, 0], right[0]), atol=1e-4)


@pytest.mark.compiled
def test_impala_spectral_norm_wraps_the_residual_convolutions_only():
    config = SimpleNamespace(channels=[2, 3], spectral_norm=True, power_iterations=3)
    torso, plain = _impala(config), _impala(SimpleNamespace(channels=[2, 3]))
    for stack, plain_stack in zip(torso.stacks, plain.stacks, strict=True):
        assert type(stack.conv) is eqx.nn.Conv2d  # the stack's first convolution is plain (BTR)
        for block, plain_block in zip(stack.blocks, plain_stack.blocks, strict=True):
            for conv, plain_conv in (
                (block.conv0, plain_block.conv0),
                (block.conv1, plain_block.conv1),
            ):
                assert isinstance(conv, zn.SpectralNorm) and conv.iterations == 3
                np.testing.assert_array_equal(conv.layer.weight, plain_conv.weight)  # same init
    x = jax.random.uniform(jax.random.key(5), (2, 12, 12))
    # the same torso with each residual weight divided by its estimate by hand
    by_hand = jax.tree.map(
        lambda m: m.normalized() if isinstance(m, zn.SpectralNorm) else m,
        torso,
        is_leaf=lambda m: isinstance(m, zn.SpectralNorm),
    )
    np.testing.assert_allclose(eqx.filter_jit(torso)(x), by_hand(x), rtol=1e-5, atol=1e-6)
    assert not np.allclose(torso(x), plain(x))
    # the trained parameter is the unnormalised weight: gradients reach it
    grads = eqx.filter_grad(lambda t: jnp.sum(t(x) ** 2))(torso)
    assert float(jnp.abs(grads.stacks[0].blocks[0].conv0.layer.weight).sum()) > 0


@pytest.mark.unit
def test_impala_options_are_validated_by_the_spec():
    import zoo

    btr = {
        "network.torso": {"kind": "impala_cnn", "width": 2, "pool": [6, 6], "spectral_norm": True}
    }
    torso = zoo.load_algorithm("dqn", overrides=btr).network.torso
    assert (torso.width, torso.pool, torso.spectral_norm, torso.power_iterations) == (
        2,
        [6, 6],
        True,
        16,
    )
    for bad, match in (
        ({"pool": [6]}, "network.torso.pool: List should have at least 2 items"),
        ({"width": 0}, "network.torso.width: Input should be greater than 0"),
        ({"power_iterations": 0}, "network.torso.power_iterations: Input should be greater"),
    ):
        with pytest.raises(zoo.spec.SpecError, match=match):
            zoo.load_algorithm("dqn", overrides={"network.torso": {"kind": "impala_cnn", **bad}})


@pytest.mark.compiled
def test_btr_preset_network_has_btrs_shapes_and_parameter_count():
    """The ``btr`` preset's network, traced only (no compile): BTR's ImpalaCNNLargeIQN (VIPTankz/
    BeyondTheRainbowICML@5ee23db networks.py) on 4×84×84 frames with 18 actions has, counted
    layer by layer as PyTorch holds them (a noisy layer: μ and σ of weights and biases; spectral
    norm keeps the raw weight as its parameter), 5,278,918 parameters; every role gives 8
    quantiles per action."""
    import zoo
    from zoo import spec as spec_lib
    from zoo.networks.network import apply_batch

    spec = spec_lib.algorithm_for(zoo.load_preset("btr"))
    actions, model_size, linear, ncos = 18, 2, 512, 64
    net = eqx.filter_eval_shape(
        zoo.build_network,
        spec,
        observation_shape=(4, 84, 84),
        num_actions=actions,
        key=jax.random.key(0),
    )

    def conv(c_in, c_out):  # 3×3 with bias
        return c_in * c_out * 9 + c_out

    def stack(c_in, c_out):  # conv, then two residual blocks of two convolutions
        return conv(c_in, c_out) + 4 * conv(c_out, c_out)

    def noisy(n_in, n_out):  # weight_mu, weight_sigma, bias_mu, bias_sigma
        return 2 * (n_in * n_out + n_out)

    c1, c2, c3 = 16 * model_size, 32 * model_size, 32 * model_size
    features = 1152 * model_size  # networks.py conv_out_size for maxpool_size 6
    expected = (
        stack(4, c1)
        + stack(c1, c2)
        + stack(c2, c3)
        + (ncos * features + features)  # cos_embedding, an nn.Linear
        + noisy(features, linear)
        + noisy(linear, 1)  # value stream
        + noisy(features, linear)
        + noisy(linear, actions)  # advantage stream
    )
    assert expected == 5_278_918
    shapes = [x for x in jax.tree.leaves(net) if isinstance(x, jax.ShapeDtypeStruct)]
    assert sum(int(np.prod(x.shape)) for x in shapes) == expected
    single = jax.ShapeDtypeStruct((4, 84, 84), jnp.float32)
    torso_out = eqx.filter_eval_shape(lambda t, o: t(o), net.torso, single)
    assert torso_out.shape == (features,)
    frames = jax.ShapeDtypeStruct((2, 4, 84, 84), jnp.float32)
    for role in ("act", "learn", "bootstrap"):
        out = eqx.filter_eval_shape(
            lambda n, o, r=role: apply_batch(n, o, jax.random.key(0), role=r), net, frames
        )
        assert out.q_values.shape == (2, actions)
        assert out.quantiles.shape == (2, actions, 8) and out.taus.shape == (2, 8)


@pytest.mark.compiled
def test_torso_norm_min_max_is_bbfs_renormalize_per_example():
    """``network.torso_norm: min_max`` (SPR and BBF's ``renormalize``): each example's torso
    features mapped by (x − min)/(max − min + 1e-5) over all of them, computed here in float64
    from the same torso's plain output, and the rest of the network reads the normalised ones."""
    import zoo

    overrides = {
        "network.torso": {"kind": "impala_cnn", "channels": [4, 8], "width": 2},
        "network.hidden": [16],
        "network.dueling": True,
    }
    plain_spec = zoo.load_algorithm("dqn", overrides=overrides)
    spec = zoo.load_algorithm(plain_spec, overrides={"network.torso_norm": "min_max"})
    assert plain_spec.network.torso_norm == "none"
    key = jax.random.key(0)
    net = zn.build_network(spec, observation_shape=(4, 12, 12), num_actions=3, key=key)
    plain = zn.build_network(plain_spec, observation_shape=(4, 12, 12), num_actions=3, key=key)
    # the same parameters: normalising adds none and draws nothing
    for a, b in zip(
        jax.tree.leaves(eqx.filter(net, eqx.is_array)),
        jax.tree.leaves(eqx.filter(plain, eqx.is_array)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    obs = jax.random.randint(jax.random.key(1), (5, 4, 12, 12), 0, 256).astype(jnp.uint8)
    for o in obs:
        raw = np.asarray(plain.torso(o.astype(jnp.float32) / 255.0), np.float64)
        want = (raw - raw.min()) / (raw.max() - raw.min() + 1e-5)
        got = np.asarray(net.torso(o.astype(jnp.float32) / 255.0))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert got.min() == 0.0 and 0.99 < got.max() < 1.0
        # the network's Q-values are the streams' on the normalised features
        np.testing.assert_allclose(
            np.asarray(net(o).q_values),
            np.asarray(plain.head.apply(jnp.asarray(got), plain.streams).q_values),
            rtol=1e-5,
        )
