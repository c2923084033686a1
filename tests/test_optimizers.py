"""The optimizer axis: each kind equals the optax chain it names; RAdam's own rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from zoo.optimizers import build_optimizer
from zoo.spec import RAdam


def run(opt: optax.GradientTransformation, steps: int = 8) -> np.ndarray:
    """``steps`` updates of a fixed quadratic's parameters: the trajectory's end."""
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    state = opt.init(params)
    for i in range(steps):
        grads = {"w": params["w"] * (i + 1) * 4.0}
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return np.asarray(params["w"])


@pytest.mark.compiled
def test_radam_is_optax_radam_after_global_norm_clipping():
    config = RAdam(learning_rate=0.1, max_grad_norm=10.0)
    want = run(optax.chain(optax.clip_by_global_norm(10.0), optax.radam(0.1)))
    np.testing.assert_allclose(run(build_optimizer(config)), want, rtol=1e-6)
    # the clip binds (gradients reach a norm of ~120): without it the trajectory differs
    assert not np.allclose(run(optax.radam(0.1)), want)
    np.testing.assert_allclose(
        run(build_optimizer(RAdam(learning_rate=0.1))), run(optax.radam(0.1))
    )


def adamw_float64(params: dict, grads: list[dict], lr, b1, b2, eps, wd, decayed) -> dict:
    """AdamW in float64 from Loshchilov & Hutter 2019 (Algorithm 2) in optax's and BBF's form:
    m, v with bias correction, ``θ ← θ − lr·(m̂ / (√v̂ + ε) + wd·θ)`` on the ``decayed`` names
    and without the decay term on the others."""
    theta = {k: np.asarray(v, np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in theta.items()}
    v = {k: np.zeros_like(x) for k, x in theta.items()}
    for t, g in enumerate(grads, start=1):
        for k in theta:
            gk = np.asarray(g[k], np.float64)
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk**2
            step = (m[k] / (1 - b1**t)) / (np.sqrt(v[k] / (1 - b2**t)) + eps)
            theta[k] = theta[k] - lr * (step + (wd * theta[k] if k in decayed else 0.0))
    return theta


@pytest.mark.compiled
def test_adamw_decays_the_matrices_as_bbf_and_equals_a_float64_transcription():
    """BBF's optimizer (AdamW, lr 1e-4, ε 1.5e-4, weight decay 0.1, biases not decayed): five
    steps of a kernel, a bias and a scalar against the float64 AdamW by hand; ``decay: all``
    decays the bias too; weight decay 0 is Adam."""
    rng = np.random.default_rng(0)
    params = {"kernel": rng.normal(size=(3, 2)), "bias": rng.normal(size=(2,)), "scale": 1.5}
    params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    grads = [
        {k: jnp.asarray(rng.normal(size=np.shape(v)), jnp.float32) for k, v in params.items()}
        for _ in range(5)
    ]

    def train(config):
        opt = build_optimizer(config)
        p, state = params, opt.init(params)
        for g in grads:
            updates, state = opt.update(g, state, p)
            p = optax.apply_updates(p, updates)
        return p

    # a large rate so that the decay term shows above float32 rounding
    bbf = zoo.spec.AdamW(learning_rate=0.05, eps=1.5e-4, weight_decay=0.1)
    want = adamw_float64(params, grads, 0.05, 0.9, 0.999, 1.5e-4, 0.1, {"kernel", "scale"})
    got = train(bbf)
    # float32 steps of 0.05 drift ~1.5e-6 from float64 (optax's Adam alone does); the decay
    # term moves these parameters by 5e-3 to 4e-2
    for k in params:
        np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=0, atol=5e-6, err_msg=k)
    every = adamw_float64(params, grads, 0.05, 0.9, 0.999, 1.5e-4, 0.1, set(params))
    np.testing.assert_allclose(
        np.asarray(train(bbf.model_copy(update={"decay": "all"}))["bias"]), every["bias"], atol=5e-6
    )
    assert np.abs(every["bias"] - want["bias"]).min() > 1e-3
    plain = train(zoo.spec.Adam(learning_rate=0.05, eps=1.5e-4))
    no_decay = train(bbf.model_copy(update={"weight_decay": 0.0}))
    for k in params:
        np.testing.assert_allclose(np.asarray(no_decay[k]), np.asarray(plain[k]), rtol=1e-6)
    spec = zoo.load_algorithm("dqn", overrides={"optimizer": {"kind": "adamw"}})
    assert (spec.optimizer.weight_decay, spec.optimizer.decay) == (0.1, "matrices")
    with pytest.raises(zoo.spec.SpecError, match=r"optimizer\.decay"):
        zoo.load_algorithm("dqn", overrides={"optimizer": {"kind": "adamw", "decay": "biases"}})


@pytest.mark.compiled
def test_radam_takes_sgd_steps_before_rectifying():
    """RAdam's first updates (ρ_t ≤ threshold) are momentum SGD steps, not Adam's ±lr."""
    params = {"w": jnp.array([0.5])}
    opt = build_optimizer(RAdam(learning_rate=0.1))
    updates, _ = opt.update({"w": jnp.array([0.5])}, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["w"]), [-0.1 * 0.5], rtol=1e-6)


@pytest.mark.unit
def test_radam_in_a_spec_and_its_rules():
    spec = zoo.load_algorithm(
        "dqn", overrides={"optimizer": {"kind": "radam", "learning_rate": 2.5e-4}}
    )
    assert isinstance(spec.optimizer, RAdam) and spec.optimizer.threshold == 5.0
    assert jax.tree.leaves(build_optimizer(spec.optimizer).init({"w": jnp.zeros(2)}))
    with pytest.raises(zoo.spec.SpecError, match=r"optimizer\.threshold"):
        zoo.load_algorithm("dqn", overrides={"optimizer": {"kind": "radam", "b2": 0.5}})
    with pytest.raises(zoo.spec.SpecError, match="learning rate of 0"):
        zoo.load_algorithm("dqn", overrides={"optimizer": {"kind": "radam", "learning_rate": 0}})


# ------------------------------------------------------------------------------ parameter groups

GROUPED = {
    "network.torso": {"kind": "mlp", "sizes": [8]},
    "network.hidden": [8],
    "network.head": {"kind": "fqf", "num_cosines": 4, "num_fractions": 3},
    "loss.td": {"kind": "huber", "delta": 1.0},
    "optimizer": {
        "kind": "adam",
        "learning_rate": 0.01,
        "eps": 1e-8,
        "max_grad_norm": 0.5,
        "groups": [
            {
                "params": "head.fraction",
                "optimizer": {"kind": "rmsprop", "learning_rate": 0.003, "centered": True},
            },
            {"params": "streams.mlp.layers.1", "optimizer": {"kind": "adam", "learning_rate": 0.1}},
        ],
    },
}


@pytest.mark.compiled
def test_each_group_is_trained_by_its_own_optimizer():
    """Three updates of a network through the grouped optimizer equal three updates of each part
    by its own optax optimizer (clipping applies to the main optimizer's parameters alone)."""
    import equinox as eqx

    from zoo.networks import build_network

    spec = zoo.load_algorithm("dqn", overrides=GROUPED)
    net = build_network(spec, (4,), 2, key=jax.random.key(0))
    params = eqx.filter(net, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(params)
    paths = [
        zoo.optimizers.parameter_path(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)
    ]
    fraction = [i for i, p in enumerate(paths) if p.startswith("head.fraction.")]
    last = [i for i, p in enumerate(paths) if p.startswith("streams.mlp.layers.1.")]
    assert len(fraction) == 2 and len(last) == 2 and len(paths) == 10

    rng = np.random.default_rng(0)
    grads = [[jnp.asarray(rng.normal(size=x.shape) * 3, x.dtype) for x in leaves] for _ in range(3)]

    opt = build_optimizer(spec.optimizer)
    state, got = opt.init(params), params
    for g in grads:
        updates, state = opt.update(jax.tree.unflatten(treedef, g), state, got)
        got = optax.apply_updates(got, updates)

    def alone(tx, idx):
        p = [leaves[i] for i in idx]
        s = tx.init(p)
        for g in grads:
            u, s = tx.update([g[i] for i in idx], s, p)
            p = optax.apply_updates(p, u)
        return p

    main = [i for i in range(len(leaves)) if i not in fraction + last]
    want = dict(
        zip(
            main,
            alone(optax.chain(optax.clip_by_global_norm(0.5), optax.adam(0.01, eps=1e-8)), main),
            strict=True,
        )
    )
    rms = optax.rmsprop(0.003, decay=0.95, eps=0.01 / 32**2, centered=True)
    want.update(zip(fraction, alone(rms, fraction), strict=True))
    want.update(zip(last, alone(optax.adam(0.1, eps=1.5e-4), last), strict=True))
    for i, x in enumerate(jax.tree.leaves(got)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(want[i]), rtol=1e-5, err_msg=paths[i])
    # the groups' parameters moved differently from what the main optimizer alone would do
    only_main = alone(
        optax.chain(optax.clip_by_global_norm(0.5), optax.adam(0.01, eps=1e-8)), fraction
    )
    assert not np.allclose(np.asarray(only_main[0]), np.asarray(want[fraction[0]]))


@pytest.mark.parametrize(
    ("groups", "path", "fragment"),
    [
        (
            [
                {"params": "head", "optimizer": "adam"},
                {"params": "head.fraction", "optimizer": "adam"},
            ],
            "optimizer.groups[1].params",
            "'head.fraction' overlaps the earlier group 'head'",
        ),
        (
            [{"params": "torso", "optimizer": {"kind": "adam", "learning_rate": 0}}],
            "optimizer.groups[0].optimizer.learning_rate",
            "a learning rate of 0 never changes the network",
        ),
        (
            [
                {
                    "params": "torso",
                    "optimizer": {
                        "kind": "adam",
                        "groups": [{"params": "head", "optimizer": "adam"}],
                    },
                }
            ],
            "optimizer.groups[0].optimizer.groups",
            "a group's optimizer cannot have groups of its own",
        ),
        (
            [{"params": "torso", "optimizer": {"kind": "radam", "b2": 0.5}}],
            "optimizer.groups[0].optimizer.threshold",
            "RAdam would never take an adaptive step",
        ),
    ],
)
@pytest.mark.unit
def test_group_problems_name_the_group(groups, path, fragment):
    with pytest.raises(zoo.SpecError) as e:
        zoo.load_algorithm("dqn", overrides={"optimizer.groups": groups})
    assert f"{path}: " in str(e.value) and fragment in str(e.value)


@pytest.mark.compiled
def test_a_group_that_names_no_parameter_is_refused_before_training(tmp_path):
    from zoo.runs import RunRefusedError

    run = tmp_path / "run"
    with pytest.raises(RunRefusedError) as e:
        zoo.train(
            "dqn_cartpole",
            total_env_steps=2000,
            run_dir=run,
            overrides={"optimizer.groups": [{"params": "head.fractoin", "optimizer": "adam"}]},
            progress=False,
        )
    assert str(e.value) == (
        "optimizer.groups[0].params 'head.fractoin' names no parameter of the network; its "
        "parts with parameters are: streams.mlp.layers.0, streams.mlp.layers.1, "
        "streams.mlp.layers.2"
    )
    assert not run.exists()
