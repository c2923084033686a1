"""Augmentations of sampled batches: the ``augmentation`` axis.

The learner (:meth:`zoo.learner.Learner.update`) draws a key of its own for the augmentation,
split from the update's key, and applies the spec's augmentation to ``observation`` and
``next_observation`` of each :class:`~zoo.types.Transition` batch with independent keys, before
the loss sees them; ``augmentation: null`` draws no key and changes nothing. The rollout learner
and stored sequences are refused by the spec (:class:`zoo.spec.Augmentation`).

Writing your own augmentation
-----------------------------
Register a factory on the ``"augmentation"`` axis with a config subclassing
:class:`zoo.spec.Augmentation` (so the spec's rules apply to it too)::

    class Flip(zoo.spec.Augmentation):
        kind: Literal["flip"] = "flip"

    @zoo.registry.register("augmentation", "flip", config=Flip)
    def flip(config):
        def augment(key, observations):  # [B, ...] → [B, ...], same shape and dtype
            ...
        return augment

``observations`` are the batch's observations as the replay stores them (``uint8`` frames on
Atari, ``[B, C, H, W]``); the returned array must keep their shape, and either their dtype (the
network scales ``uint8`` inputs itself) or be ``float32`` already scaled as the network would
scale them (:func:`zoo.networks.network.preprocess`), as intensity noise returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from zoo import registry
from zoo.networks.network import preprocess
from zoo.types import Transition

__all__ = [
    "Augment",
    "augment_batch",
    "build_augmentation",
    "intensity_noise",
    "random_shift",
    "scale_intensity",
    "shift_images",
]

#: An augmentation: ``augment(key, observations[B, ...]) -> observations[B, ...]``.
Augment = Callable[[PRNGKeyArray, Array], Array]


def shift_images(images: Array, offsets: Array, pad: int) -> Array:
    """Each image of ``images`` ``[B, ..., H, W]`` padded by ``pad`` pixels that repeat its edge,
    then cropped back to ``H × W`` at ``offsets[b] = (dy, dx)`` in ``[0, 2·pad]`` of the padded
    image (a shift by ``(dy − pad, dx − pad)``), the same offset for every leading channel.

    Computed without the padded copy: output pixel ``(y, x)`` is input pixel
    ``(clip(y + dy − pad, 0, H − 1), clip(x + dx − pad, 0, W − 1))``, which is what edge padding
    and the crop give.
    """
    height, width = images.shape[-2:]

    def one(image: Array, offset: Array) -> Array:
        rows = jnp.clip(jnp.arange(height) + offset[0] - pad, 0, height - 1)
        cols = jnp.clip(jnp.arange(width) + offset[1] - pad, 0, width - 1)
        return jnp.take(jnp.take(image, rows, axis=-2), cols, axis=-1)

    return jax.vmap(one)(images, offsets)


def scale_intensity(images: Array, noise: Array) -> Array:
    """``images`` ``[B, ...]`` scaled as the network scales them (``uint8`` / 255; other dtypes
    as they are, in ``float32``), each example multiplied by its factor ``noise[b]``."""
    scaled = preprocess(images)
    return scaled * noise.reshape((-1,) + (1,) * (scaled.ndim - 1)).astype(scaled.dtype)


def intensity_noise(key: PRNGKeyArray, batch: int, scale: float) -> Array:
    """``batch`` intensity factors ``1 + scale·clip(N(0, 1), −2, 2)`` (Dopamine's
    ``atari_100k_rainbow_agent.py`` and BBF's ``spr_networks.py`` ``_intensity_aug``: one
    normal draw per image, clipped at two standard deviations)."""
    return 1.0 + scale * jnp.clip(jax.random.normal(key, (batch,)), -2.0, 2.0)


def random_shift(
    key: PRNGKeyArray,
    images: Array,
    *,
    pad: int,
    offsets: str = "centered",
    intensity: float = 0.0,
) -> Array:
    """DrQ's image augmentation: replicate-pad by ``pad`` and randomly crop back to size, with an
    independent offset per example (Kostrikov et al. 2020, "Image Augmentation Is All You Need:
    Regularizing Deep Reinforcement Learning from Pixels", https://arxiv.org/abs/2004.13649;
    denisyarats/drq: ``nn.ReplicationPad2d(pad)`` then ``kornia.augmentation.RandomCrop``).

    ``offsets="centered"``: uniform over all ``(2·pad + 1)²`` crops (kornia's RandomCrop), so
    shifts cover ``[−pad, pad]`` on each axis. ``offsets="dopamine"``: Dopamine's DrQ(ε) (Agarwal
    et al. 2021, ``dopamine/labs/atari_100k/atari_100k_rainbow_agent.py``,
    ``drq_image_augmentation``), SPR and BBF draw ``randint(0, 2·pad)`` with an exclusive upper
    bound, so their shifts stop at ``pad − 1``. With ``intensity`` above 0 (theirs: 0.05) the
    shifted images are scaled as the network scales them and multiplied by
    :func:`intensity_noise` (the result is then ``float32``); the key is split as theirs is,
    the first half for the intensity and the second for the crop.

    Args:
      key: the augmentation key; the same key gives the same shifts.
      images: ``[B, ..., H, W]``: a batch of channels-first images (frame stacks shift together).
      pad: the padding and largest shift.
      offsets: ``"centered"`` or ``"dopamine"`` (above).
      intensity: the intensity noise's scale; 0: none, and the images keep their dtype.

    Raises:
      ValueError: ``images`` has fewer than three axes (it is not a batch of images).
    """
    if images.ndim < 3:
        raise ValueError(
            f"random_shift shifts batches of images [B, ..., H, W]; got observations of shape "
            f"{tuple(images.shape)}: set `augmentation: null` for vector observations"
        )
    if offsets not in ("centered", "dopamine"):
        raise ValueError(f"offsets must be 'centered' or 'dopamine', got {offsets!r}")
    intensity_key, crop_key = jax.random.split(key) if intensity > 0 else (None, key)
    high = 2 * pad + 1 if offsets == "centered" else 2 * pad
    shifted = shift_images(images, jax.random.randint(crop_key, (images.shape[0], 2), 0, high), pad)
    if intensity_key is None:
        return shifted
    return scale_intensity(shifted, intensity_noise(intensity_key, images.shape[0], intensity))


@registry.register("augmentation", "random_shift")
def random_shift_augmentation(config: Any) -> Augment:
    """DrQ's random shift: replicate-pad by ``config.pad``, crop back at random per example,
    with ``config.offsets`` and ``config.intensity`` noise."""
    pad, offsets, intensity = int(config.pad), str(config.offsets), float(config.intensity)
    return lambda key, images: random_shift(
        key, images, pad=pad, offsets=offsets, intensity=intensity
    )


def build_augmentation(config: Any) -> Augment | None:
    """The augmentation of an ``augmentation`` block, or ``None`` for ``null``."""
    if config is None:
        return None
    return registry.get("augmentation", config.kind)(config)


def augment_batch(augment: Augment, key: PRNGKeyArray, batch: Any) -> Transition:
    """``batch`` with ``observation`` and ``next_observation`` augmented with independent keys
    (as DrQ and Dopamine's DrQ(ε) augment both, independently), and the future observations an
    auxiliary loss reads (:class:`zoo.types.FutureSteps`) with a third.

    Raises:
      TypeError: ``batch`` is not a :class:`~zoo.types.Transition` (the spec refuses
        augmentation with rollouts and sequences; a learner called directly lands here).
    """
    if not isinstance(batch, Transition):
        raise TypeError(
            f"augmentation applies to Transition batches, got a {type(batch).__name__}; set "
            "`augmentation: null` for rollouts (PQN) and recurrent sequences"
        )
    if batch.future is None:
        observation_key, next_key = jax.random.split(key)
        return batch._replace(
            observation=augment(observation_key, batch.observation),
            next_observation=augment(next_key, batch.next_observation),
        )
    observation_key, next_key, future_key = jax.random.split(key, 3)
    batch = batch._replace(
        observation=augment(observation_key, batch.observation),
        next_observation=augment(next_key, batch.next_observation),
    )
    # the K future observations an auxiliary loss reads (SPR's targets), each image on its own
    # draw, as BBF augments all K + 1 stacks of an item
    future = batch.future.observation
    flat = future.reshape((-1, *future.shape[2:]))
    augmented = augment(future_key, flat).reshape(future.shape)
    return batch._replace(future=batch.future._replace(observation=augmented))
