"""SPR's latent prediction loss (issue 38), against a float64 transcription of BBF's
``spr_agent.py`` / ``spr_networks.py`` given the encoders' latents: the transition model, the
projection and predictor, the unit-vector distance, the mask and the mean over K; its gradients
by finite differences of the transcription; and the loss composer adding it to each item."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.networks.auxiliary import build_auxiliary, latent_map, projection

OBS, ACTIONS, K = (4, 10, 10), 3, 4
latent = jax.jit(latent_map)

SPEC = {
    "network.torso": {"kind": "impala_cnn", "channels": [4, 6]},
    "network.torso_norm": "min_max",
    "network.hidden": [12],
    "network.dueling": True,
    "network.shared_hidden": True,
    "network.init": "glorot_uniform",
    "network.head.num_atoms": 5,
    "loss.bootstrap": "double",
    "replay.batch_size": 6,
    "auxiliary": {"kind": "spr", "steps": K, "weight": 5.0},
}


def conv3x3_same(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross-correlation with SAME padding, [C, H, W] × [O, C, 3, 3] (flax's and Equinox's)."""
    _, h, wd = x.shape
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    out = np.zeros((w.shape[0], h, wd))
    for di in range(3):
        for dj in range(3):
            out += np.einsum("oc,chw->ohw", w[:, :, di, dj], padded[:, di : di + h, dj : dj + wd])
    return out + b[:, None, None]


def renormalize(x: np.ndarray) -> np.ndarray:
    """BBF's ``renormalize``: min and max over the whole latent of one sample, ε 1e-5."""
    return (x - x.min()) / (x.max() - x.min() + 1e-5)


def bbf_spr_item(z0, actions, target_latents, mask, params) -> float:
    """One item's SPR loss as BBF computes it (float64): the transition model's cell
    (``jax.nn.one_hot`` tiled and concatenated, conv-ReLU-conv-ReLU, renormalize) unrolled over
    the actions, ``spr_predict`` = predictor(projection(flatten)), targets =
    projection(flatten(target latent)), both L2-normalised without ε, ``(p − y)²`` summed over
    features, times the mask, ``.mean`` over the K steps."""
    (w1, b1), (w2, b2), (wp, bp), (wq, bq), (wt, bt) = params
    z, losses = z0, []
    for k, a in enumerate(actions):
        onehot = np.zeros(ACTIONS)
        onehot[a] = 1.0
        x = np.concatenate([z, np.broadcast_to(onehot[:, None, None], (ACTIONS, *z.shape[1:]))])
        x = np.maximum(conv3x3_same(x, w1, b1), 0.0)
        z = renormalize(np.maximum(conv3x3_same(x, w2, b2), 0.0))
        prediction = wq @ (wp @ z.ravel() + bp) + bq
        target = wt @ target_latents[k].ravel() + bt
        p = prediction / np.linalg.norm(prediction)
        y = target / np.linalg.norm(target)
        losses.append(mask[k] * np.sum((p - y) ** 2))
    return float(np.mean(losses))


def f64(x) -> np.ndarray:
    return np.asarray(x, np.float64)


def setup():
    spec = zoo.load_algorithm("c51", overrides=SPEC)
    online = zoo.build_network(
        spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(0)
    )
    target = zoo.build_network(
        spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(1)
    )
    rng = np.random.default_rng(0)
    batch = zoo.Transition(
        observation=jnp.asarray(rng.integers(0, 256, (6, *OBS)), jnp.uint8),
        action=jnp.asarray(rng.integers(0, ACTIONS, 6), jnp.int32),
        reward=jnp.asarray(rng.normal(size=6), jnp.float32),
        discount=jnp.asarray([1.0, 1.0, 0.0, 1.0, 1.0, 1.0], jnp.float32),
        next_observation=jnp.asarray(rng.integers(0, 256, (6, *OBS)), jnp.uint8),
        probability=jnp.ones(6),
        future=zoo.FutureSteps(
            observation=jnp.asarray(rng.integers(0, 256, (6, K, *OBS)), jnp.uint8),
            action=jnp.asarray(rng.integers(0, ACTIONS, (6, K)), jnp.int32),
            mask=jnp.asarray(
                [
                    [1, 1, 1, 1],
                    [1, 1, 0, 0],
                    [0, 0, 0, 0],
                    [1, 0, 0, 0],
                    [1, 1, 1, 1],
                    [1, 1, 1, 0],
                ],
                jnp.float32,
            ),
        ),
    )
    return spec, online, target, batch


def params_of(online, target):
    module = online.auxiliary
    t1, t2 = module.transition.convs
    proj, target_proj = projection(online), projection(target)
    return [
        (f64(t1.weight), f64(t1.bias).ravel()),
        (f64(t2.weight), f64(t2.bias).ravel()),
        (f64(proj.weight), f64(proj.bias)),
        (f64(module.predictor.weight), f64(module.predictor.bias)),
        (f64(target_proj.weight), f64(target_proj.bias)),
    ]


@pytest.mark.compiled
def test_the_spr_loss_equals_bbfs_given_the_latents():
    spec, online, target, batch = setup()
    spr = build_auxiliary(spec)
    got = np.asarray(jax.jit(spr.item_losses)(online, target, batch))
    params = params_of(online, target)
    for i in range(6):
        z0 = f64(latent(online, batch.observation[i]))
        targets = [f64(latent(target, o)) for o in batch.future.observation[i]]
        want = bbf_spr_item(
            z0,
            np.asarray(batch.future.action[i]),
            targets,
            np.asarray(batch.future.mask[i]),
            params,
        )
        np.testing.assert_allclose(got[i], want, rtol=2e-5, atol=1e-6, err_msg=f"item {i}")
    assert got[2] == 0.0  # every step masked: the item contributes nothing
    assert np.all(got[[0, 1, 3, 4, 5]] > 0)
    # the latents are the renormalised torso maps: in [0, 1), 0 reached
    z0 = np.asarray(latent(online, batch.observation[0]))
    assert z0.min() == 0.0 and z0.max() < 1.0


@pytest.mark.compiled
def test_spr_gradients_match_finite_differences_of_the_transcription():
    """d loss / d (predictor and transition weights) of one item, against central differences
    of the float64 transcription (the targets carry no gradient)."""
    spec, online, target, batch = setup()
    spr = build_auxiliary(spec)
    one = jax.tree.map(lambda x: x[:1], batch)

    def loss(net):
        return spr.item_losses(net, target, one)[0]

    grads = eqx.filter_jit(eqx.filter_grad(loss))(online)
    params = params_of(online, target)
    z0 = f64(latent(online, one.observation[0]))
    targets = [f64(latent(target, o)) for o in one.future.observation[0]]
    actions, mask = np.asarray(one.future.action[0]), np.asarray(one.future.mask[0])
    rng = np.random.default_rng(1)
    checked = 0
    for which, grad in (
        (3, np.asarray(grads.auxiliary.predictor.weight)),
        (1, np.asarray(grads.auxiliary.transition.convs[1].weight)),
        (0, np.asarray(grads.auxiliary.transition.convs[0].weight)),
    ):
        for _ in range(4):
            index = tuple(rng.integers(0, n) for n in grad.shape)
            eps = 1e-5
            values = []
            for sign in (1, -1):
                moved = [(w.copy(), b.copy()) for w, b in params]
                moved[which][0][index] += sign * eps
                values.append(bbf_spr_item(z0, actions, targets, mask, moved))
            numeric = (values[0] - values[1]) / (2 * eps)
            np.testing.assert_allclose(grad[index], numeric, rtol=2e-3, atol=2e-6)
            checked += 1
    assert checked == 12
    # no gradient reaches the target network's parameters through the targets
    target_grads = eqx.filter_jit(eqx.filter_grad(lambda t: spr.item_losses(online, t, one)[0]))(
        target
    )
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(target_grads))


@pytest.mark.compiled
def test_the_loss_adds_the_weighted_spr_term_to_every_item():
    """total = TD loss + mean(importance weight · 5 · spr item), the TD part unchanged; the
    metrics carry it as ``auxiliary``."""
    spec, online, target, batch = setup()
    plain = zoo.load_algorithm(spec, overrides={"auxiliary": None})
    loss, td_only = zoo.build_loss(spec), zoo.build_loss(plain)
    key = jax.random.key(3)
    total, aux = eqx.filter_jit(loss)(online=online, target=target, batch=batch, key=key)
    td, td_aux = eqx.filter_jit(td_only)(online=online, target=target, batch=batch, key=key)
    items = eqx.filter_jit(build_auxiliary(spec).item_losses)(online, target, batch)
    assert loss.metric_names[-1] == "auxiliary" and "auxiliary" not in td_only.metric_names
    np.testing.assert_allclose(aux.metrics["td_loss"], td_aux.metrics["td_loss"], rtol=1e-6)
    np.testing.assert_allclose(aux.metrics["auxiliary"], 5.0 * jnp.mean(items), rtol=1e-5)
    np.testing.assert_allclose(total, td + 5.0 * jnp.mean(items), rtol=1e-5)


@pytest.mark.unit
def test_spr_is_refused_where_it_cannot_predict():
    with pytest.raises(zoo.SpecError, match=r"auxiliary: spr projects with the Q head's first"):
        zoo.load_algorithm("c51", overrides={**SPEC, "network.shared_hidden": False})
    with pytest.raises(zoo.SpecError, match=r"has none; give `network.hidden`"):
        zoo.load_algorithm("c51", overrides={**SPEC, "network.hidden": []})
    with pytest.raises(zoo.SpecError, match=r"auxiliary: an auxiliary loss learns from sampled"):
        zoo.load_algorithm("r2d2", overrides={"auxiliary": "spr"})
    spec = zoo.load_algorithm("c51", overrides={**SPEC, "network.torso": {"kind": "mlp"}})
    with pytest.raises(ValueError, match=r"the torso MLPTorso has none \(feature_map\)"):
        zoo.build_network(spec, observation_shape=(4,), num_actions=2, key=jax.random.key(0))


@pytest.mark.long
def test_a_minatar_run_learns_with_spr_and_resumes(tmp_path):
    """A real MinAtar run (host driver) with SPR: the replay hands the loss the future steps,
    the metrics carry the auxiliary loss, the SPR parameters are checkpointed and resume."""
    from zoo.runs.metrics import read_jsonl

    overrides = {
        "auxiliary": {"kind": "spr", "steps": 3},
        "network.hidden": [32],
        "network.torso_norm": "min_max",
        "replay.capacity": 2000,
        "replay.min_size": 200,
        "replay.batch_size": 8,
        "schedule.update_period": 4,
    }
    run = tmp_path / "spr"
    options = dict(progress=False, eval_every=400, eval_episodes=2, checkpoint_every=400)
    zoo.train("dqn_minatar", total_env_steps=400, overrides=overrides, run_dir=run, **options)
    resumed = zoo.train(resume=run, total_env_steps=600, progress=False)
    assert resumed.env_steps == 600 and resumed.updates == 100
    logged = [m for m in read_jsonl(run / "metrics.jsonl") if m.get("updates")]
    assert logged and all(np.isfinite(m["auxiliary"]) and m["auxiliary"] > 0 for m in logged)
    assert all(m["loss"] >= m["auxiliary"] for m in logged)
