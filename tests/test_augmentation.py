"""The augmentation axis: DrQ's random shift against numpy, its spec rules, a user's own
augmentation, and the learner applying it to sampled transitions."""

from __future__ import annotations

import itertools
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo import registry
from zoo.augmentation import augment_batch, build_augmentation, random_shift, shift_images
from zoo.learner import Learner


def found_offset(image: np.ndarray, shifted: np.ndarray, pad: int) -> list[tuple[int, int]]:
    """Every crop ``(dy, dx)`` of the edge-padded ``image`` ``[..., H, W]`` equal to ``shifted``."""
    height, width = image.shape[-2:]
    padded = np.pad(image, [(0, 0)] * (image.ndim - 2) + [(pad, pad), (pad, pad)], mode="edge")
    return [
        (dy, dx)
        for dy, dx in itertools.product(range(2 * pad + 1), repeat=2)
        if np.array_equal(padded[..., dy : dy + height, dx : dx + width], shifted)
    ]


@pytest.mark.compiled
def test_random_shift_crops_the_edge_padded_image_at_one_offset_per_example():
    pad = 2
    images = np.asarray(jax.random.randint(jax.random.key(0), (64, 2, 7, 6), 0, 256), np.uint8)
    shifted = np.asarray(
        jax.jit(lambda k, x: random_shift(k, x, pad=pad))(jax.random.key(1), images)
    )
    assert shifted.shape == images.shape and shifted.dtype == np.uint8
    offsets = []
    for image, out in zip(images, shifted, strict=True):
        # both frames of the stack shift together: exactly one offset matches the whole example
        (offset,) = found_offset(image, out, pad)
        offsets.append(offset)
    # independent per example, and every shift in [-pad, pad] is drawn, the extremes included
    assert len(set(offsets)) > 10
    assert {dy for dy, _ in offsets} == {dx for _, dx in offsets} == set(range(2 * pad + 1))


@pytest.mark.compiled
def test_shift_images_equals_numpy_pad_and_crop():
    images = np.asarray(jax.random.normal(jax.random.key(2), (3, 1, 5, 8)))
    offsets = np.array([[0, 0], [3, 1], [6, 6]])  # pad 3: shifts (-3, -3), (0, -2), (3, 3)
    out = np.asarray(shift_images(jnp.asarray(images), jnp.asarray(offsets), 3))
    padded = np.pad(images, [(0, 0), (0, 0), (3, 3), (3, 3)], mode="edge")
    for b, (dy, dx) in enumerate(offsets):
        np.testing.assert_array_equal(out[b], padded[b, :, dy : dy + 5, dx : dx + 8])
    np.testing.assert_array_equal(out[1, :, :, :], padded[1, :, 3:8, 1:9])


def bbf_drq_image_aug(obs: np.ndarray, offsets: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """A float64 transcription of BBF's ``spr_networks.py`` ``drq_image_aug`` (the same as
    Dopamine's ``drq_image_augmentation``) on ``uint8`` frames ``[B, C, H, W]`` (theirs are
    channels-last), with its draws given: ``x = obs / 255``; edge-pad by 4; crop at ``offsets``
    (their ``randint(0, 8)``); ``x · (1 + 0.05·clip(normal, −2, 2))`` per image."""
    height, width = obs.shape[-2:]
    x = obs.astype(np.float64) / 255.0
    padded = np.pad(x, [(0, 0), (0, 0), (4, 4), (4, 4)], mode="edge")
    out = np.stack(
        [padded[b, :, dy : dy + height, dx : dx + width] for b, (dy, dx) in enumerate(offsets)]
    )
    return out * (1.0 + 0.05 * np.clip(normal, -2.0, 2.0))[:, None, None, None]


@pytest.mark.compiled
def test_dopamine_offsets_and_intensity_equal_bbfs_augmentation():
    """``offsets: dopamine`` with ``intensity: 0.05`` is BBF's (and Dopamine's DrQ(ε)'s)
    augmentation: the same pixels as a float64 transcription given the same draws, the key split
    as theirs (intensity first, crop second), shifts in [−4, 3] only, one factor per image."""
    obs = np.asarray(jax.random.randint(jax.random.key(6), (256, 2, 12, 10), 0, 256), np.uint8)
    key = jax.random.key(7)
    augment = build_augmentation(zoo.spec.RandomShift(pad=4, offsets="dopamine", intensity=0.05))
    out = np.asarray(jax.jit(augment)(key, jnp.asarray(obs)))
    assert out.dtype == np.float32 and out.shape == obs.shape
    intensity_key, crop_key = jax.random.split(key)
    offsets = np.asarray(jax.random.randint(crop_key, (256, 2), 0, 8))
    normal = np.asarray(jax.random.normal(intensity_key, (256,)), np.float64)
    np.testing.assert_allclose(out, bbf_drq_image_aug(obs, offsets, normal), rtol=1e-6, atol=1e-7)
    # the draws themselves: every offset 0..7 (shifts −4..3) and never 8; factors in [0.9, 1.1],
    # both bounds reached by the clip
    assert set(offsets.ravel()) == set(range(8))
    factors = out.reshape(256, -1).max(1) / (
        np.asarray(shift_images(jnp.asarray(obs), jnp.asarray(offsets), 4)).reshape(256, -1).max(1)
        / 255.0
    )
    np.testing.assert_allclose(factors, 1 + 0.05 * np.clip(normal, -2, 2), rtol=1e-5)
    assert factors.min() == pytest.approx(0.9) and factors.max() == pytest.approx(1.1)
    # without intensity the frames keep their dtype and the shifts stop at pad − 1 all the same
    plain = random_shift(key, jnp.asarray(obs), pad=4, offsets="dopamine")
    assert plain.dtype == jnp.uint8
    found = {
        o
        for image, out in zip(obs, np.asarray(plain), strict=True)
        for o in found_offset(image, out, 4)
    }
    assert max(max(o) for o in found) <= 7


@pytest.mark.compiled
def test_random_shift_is_deterministic_given_the_key():
    images = jax.random.normal(jax.random.key(3), (16, 1, 6, 6))
    a = random_shift(jax.random.key(4), images, pad=2)
    np.testing.assert_array_equal(a, random_shift(jax.random.key(4), images, pad=2))
    assert not np.array_equal(a, random_shift(jax.random.key(5), images, pad=2))


@pytest.mark.unit
def test_random_shift_refuses_vector_observations():
    with pytest.raises(ValueError, match=r"images \[B, \.\.\., H, W\]; got observations of shape"):
        random_shift(jax.random.key(0), jnp.zeros((8, 4)), pad=4)


def transitions(batch: int = 8, shape=(2, 6, 6), actions: int = 3, seed: int = 0) -> zoo.Transition:
    rng = np.random.default_rng(seed)
    frames = jnp.asarray(rng.integers(0, 256, (batch, *shape)), jnp.uint8)
    return zoo.Transition(
        observation=frames,
        action=jnp.asarray(rng.integers(0, actions, batch), jnp.int32),
        reward=jnp.asarray(rng.uniform(-1, 1, batch), jnp.float32),
        discount=jnp.ones((batch,), jnp.float32),
        next_observation=frames,  # the same frames: their shifts must still differ
        probability=jnp.ones((batch,), jnp.float32),
    )


@pytest.mark.compiled
def test_both_observations_are_augmented_independently_and_nothing_else():
    augment = build_augmentation(zoo.spec.RandomShift(pad=2))
    batch = transitions()
    out = augment_batch(augment, jax.random.key(6), batch)
    first = [
        found_offset(np.asarray(a), np.asarray(b), 2)
        for a, b in zip(batch.observation, out.observation, strict=True)
    ]
    second = [
        found_offset(np.asarray(a), np.asarray(b), 2)
        for a, b in zip(batch.next_observation, out.next_observation, strict=True)
    ]
    assert all(len(f) == 1 for f in first + second)
    assert first != second
    for name in ("action", "reward", "discount", "probability"):
        assert getattr(out, name) is getattr(batch, name)
    assert build_augmentation(None) is None
    sequences = zoo.SequenceBatch(
        batch.observation, batch.action, batch.reward, batch.discount, None, batch.probability
    )
    with pytest.raises(TypeError, match="Transition batches, got a SequenceBatch"):
        augment_batch(augment, jax.random.key(0), sequences)


# ------------------------------------------------------------------------------------ the spec


@pytest.mark.unit
def test_the_spec_names_the_augmentation_and_refuses_rollouts_and_sequences():
    assert zoo.load_algorithm("dqn").augmentation is None
    spec = zoo.load_algorithm("dqn", overrides={"augmentation": "random_shift"})
    assert spec.augmentation == zoo.spec.RandomShift(pad=4)
    with pytest.raises(
        zoo.spec.SpecError,
        match=r"augmentation\.kind: unknown value 'random_shif'; did you mean 'random_shift'",
    ):
        zoo.load_algorithm("dqn", overrides={"augmentation": "random_shif"})
    with pytest.raises(
        zoo.spec.SpecError, match=r"augmentation\.pad: Input should be greater than or equal to 1"
    ):
        zoo.load_algorithm("dqn", overrides={"augmentation": {"kind": "random_shift", "pad": 0}})
    with pytest.raises(
        zoo.spec.SpecError,
        match=r"pqn: augmentation: .* a rollout \(PQN\) .* or drop `rollout`",
    ):
        zoo.load_algorithm("pqn", overrides={"augmentation": "random_shift"})
    with pytest.raises(
        zoo.spec.SpecError,
        match=r"r2d2: augmentation: .* stored sequences .* drop `replay.sequence`",
    ):
        zoo.load_algorithm("r2d2", overrides={"augmentation": "random_shift"})


@pytest.mark.compiled
def test_a_users_augmentation_registers_validates_and_follows_the_rules():
    class Invert(zoo.spec.Augmentation):
        """255 − x on uint8 frames (a made-up augmentation for the test)."""

        kind: Literal["test_invert"] = "test_invert"

    @registry.register("augmentation", "test_invert", config=Invert)
    def invert(config):
        """255 − x."""
        return lambda key, x: 255 - x

    try:
        spec = zoo.load_algorithm("dqn", overrides={"augmentation": "test_invert"})
        assert isinstance(spec.augmentation, Invert)
        out = augment_batch(build_augmentation(spec.augmentation), jax.random.key(0), transitions())
        np.testing.assert_array_equal(out.observation, 255 - transitions().observation)
        with pytest.raises(zoo.spec.SpecError, match="a rollout"):
            zoo.load_algorithm("pqn", overrides={"augmentation": "test_invert"})
    finally:
        registry.unregister("augmentation", "test_invert")


# --------------------------------------------------------------------------------- the learner


@pytest.mark.compiled
def test_the_learner_augments_with_a_key_split_from_the_update_key():
    # with intensity noise the augmented frames reach the network as float32 already scaled
    overrides = {
        "network.torso": {"kind": "minatar_cnn", "channels": 2},
        "network.hidden": [4],
        "replay.batch_size": 8,
    }
    plain = zoo.load_algorithm("dqn", overrides=overrides)
    shifted = zoo.load_algorithm(
        plain,
        overrides={
            "augmentation": {
                "kind": "random_shift",
                "pad": 2,
                "offsets": "dopamine",
                "intensity": 0.05,
            }
        },
    )
    net = zoo.build_network(
        plain, observation_shape=(2, 6, 6), num_actions=3, key=jax.random.key(0)
    )
    batch = transitions()
    learner, reference = Learner(shifted), Learner(plain)
    state = learner.init(net, jax.random.key(1))
    new, aux = eqx.filter_jit(learner.update)(state, batch)
    # the same update by hand: the augmentation's key is split from the update's loss key
    _, loss_key = jax.random.split(state.key)
    _, augment_key = jax.random.split(loss_key)
    expected, expected_aux = reference.update(
        state, augment_batch(learner.augment, augment_key, batch)
    )
    np.testing.assert_allclose(aux.metrics["loss"], expected_aux.metrics["loss"], rtol=1e-6)
    for a, b in zip(
        jax.tree.leaves(eqx.filter(new, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(expected, eqx.is_inexact_array)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # and it is not the unaugmented update
    _, plain_aux = reference.update(state, batch)
    assert float(plain_aux.metrics["loss"]) != float(aux.metrics["loss"])
    assert reference.augment is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["drq_eps", "--env", "CartPole-v1"],
            "zoo train: augmentation: random_shift shifts batches of images [B, ..., H, W]; got "
            "observations of shape (32, 4): set `augmentation: null` for vector observations",
        ),
        (
            ["dqn", "--env", "CartPole-v1", "--set", "network.torso=nature_cnn"],
            "zoo train: network: torso 'nature_cnn' needs channels-first image observations "
            "[C, H, W]; got observation shape (4,)",
        ),
    ],
)
@pytest.mark.compiled
def test_train_refuses_observations_the_spec_cannot_take(tmp_path, monkeypatch, args, message):
    """An augmentation or torso that cannot take the environment's observations is refused by
    name before anything is built (it used to end in a traceback inside the first update), and
    no run directory is left behind."""
    import contextlib
    import io

    from zoo import cli

    monkeypatch.delenv("ZOO_PROGRESS", raising=False)
    run = tmp_path / "run"
    out, err = io.StringIO(), io.StringIO()
    argv = ["train", *args, "--set", "replay.min_size=40", "--steps", "100"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        # no --progress: in-process, the CLI would set ZOO_PROGRESS for the rest of the session
        code = cli.main([*argv, "--run-dir", str(run)])
    assert code == 2, err.getvalue()
    assert message in err.getvalue() and "Traceback" not in err.getvalue()
    assert not run.exists()


@pytest.mark.compiled
@pytest.mark.parametrize("noisy", [False, True])
def test_a_target_synced_every_update_is_read_as_the_online_network(noisy):
    """DrQ(ε)'s ``target_update_period: 1``: the target equals the online network at
    every update, so the learner gives the loss the online network as its target: the update is
    the one with the kept target (to float tolerance), with one pass at s′ fewer where the pass
    draws nothing (no noisy layers: a noisy network keeps its two noise samples)."""
    overrides = {
        "network.torso": {"kind": "minatar_cnn", "channels": 2},
        "network.hidden": [4],
        "network.noisy": noisy,
        "replay.batch_size": 8,
    }
    spec = zoo.load_algorithm("drq_eps", overrides=overrides)
    assert spec.schedule.target_update_period == 1 and spec.loss.bootstrap.kind == "double"
    net = zoo.build_network(spec, observation_shape=(2, 6, 6), num_actions=3, key=jax.random.key(0))
    shared, kept = Learner(spec), Learner(spec)
    assert shared.target_is_online
    kept.target_is_online = False  # the update as it is without the rule: two passes at s′
    state = shared.init(net, jax.random.key(1))
    batch = transitions()
    new, aux = eqx.filter_jit(shared.update)(state, batch)
    expected, expected_aux = eqx.filter_jit(kept.update)(state, batch)
    for name in aux.metrics:
        np.testing.assert_allclose(aux.metrics[name], expected_aux.metrics[name], rtol=1e-6)
    for a, b in zip(
        jax.tree.leaves(eqx.filter(new, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(expected, eqx.is_inexact_array)),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    # the target kept in the state is the online network after the update, exactly
    for a, b in zip(
        jax.tree.leaves(eqx.filter(new.online, eqx.is_inexact_array)),
        jax.tree.leaves(eqx.filter(new.target, eqx.is_inexact_array)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)

    def convolutions(learner: Learner) -> int:
        params, static = eqx.partition(state, eqx.is_array)
        step = jax.jit(lambda p, b: learner.update(eqx.combine(p, static), b))
        return step.lower(params, batch).as_text().count("stablehlo.convolution")

    # one convolution per pass of the minatar torso; its backward pass adds one (the kernel's)
    assert convolutions(kept) == 4
    assert convolutions(shared) == (4 if noisy else 3)
