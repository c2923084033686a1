"""Auxiliary losses: the ``auxiliary`` axis (:mod:`zoo.spec.auxiliary`); importing
:mod:`zoo.networks` registers ``spr``.

An auxiliary loss adds parameters to the network (:meth:`AuxiliaryLoss.module`, held in
``network.auxiliary``, so the optimizer, the target update, resets and checkpoints treat them as
any others), asks the replay for the steps after each transition
(:attr:`AuxiliaryLoss.future`, :class:`zoo.types.FutureSteps`) and returns a loss per item that
the loss composer adds, weighted, to each item's TD loss before the importance weights
(:class:`zoo.losses.Loss`).

``spr`` is SPR's latent prediction as BBF's ``spr_agent.py`` computes it (Schwarzer et al. 2021,
2023; D'Oro et al. 2023):

- ``z_0`` = the online torso's feature map of ``o_t`` (min–max normalised with
  ``network.torso_norm: min_max``, BBF's ``renormalize``);
- ``z_k = T(z_{k−1}, a_{t+k−1})``, ``T`` = [z; one-hot(a) tiled] → conv 3×3 → ReLU → conv 3×3 →
  ReLU (→ min–max), BBF's ``TransitionModel``;
- ``p_k = predictor(projection(flatten(z_k)))``, the projection being the Q head's first hidden
  layer before its ReLU (BBF's shared ``projection``) and the predictor one dense layer;
- ``y_k = projection_target(flatten(z_target(o_{t+k})))`` from the target network (the online
  one under stop-gradient where the target is synced every update: SPR's τ = 0), no noise;
- per item ``mean_k mask_k·‖p_k/‖p_k‖ − y_k/‖y_k‖‖²`` (``2 − 2·cos``, no ε, averaged over all
  K steps, masked ones included, as BBF's ``.mean(0)``).

Noisy layers run with their mean weights on these paths, as BBF's ``eval_mode=True`` does.
"""

from __future__ import annotations

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from zoo import registry
from zoo.networks.network import preprocess
from zoo.networks.torsos import MinMaxNormalized, min_max
from zoo.spec import Spr

__all__ = ["AuxiliaryLoss", "SprLoss", "SprModule", "TransitionModel", "build_auxiliary"]


class TransitionModel(eqx.Module):
    """SPR's action-conditioned transition of a latent map ``[C, H, W]`` (BBF's
    ``spr_networks.py`` ``TransitionModel``: one-hot action tiled as extra channels, two 3×3
    convolutions with SAME padding, each followed by a ReLU, then ``renormalize``)."""

    convs: tuple[eqx.nn.Conv2d, eqx.nn.Conv2d]
    num_actions: int = eqx.field(static=True)
    renormalize: bool = eqx.field(static=True)

    def __init__(self, channels: int, num_actions: int, renormalize: bool, *, key: PRNGKeyArray):
        k1, k2 = jax.random.split(key)
        self.convs = (
            eqx.nn.Conv2d(channels + num_actions, channels, 3, padding="SAME", key=k1),
            eqx.nn.Conv2d(channels, channels, 3, padding="SAME", key=k2),
        )
        self.num_actions = num_actions
        self.renormalize = renormalize

    def __call__(self, latent: Array, action: Array) -> Array:
        onehot = jax.nn.one_hot(action, self.num_actions, dtype=latent.dtype)
        tiled = jnp.broadcast_to(onehot[:, None, None], (self.num_actions, *latent.shape[1:]))
        x = jnp.concatenate([latent, tiled], axis=0)
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
        return min_max(x) if self.renormalize else x


class SprModule(eqx.Module):
    """The parameters SPR adds to a network: the transition model and the predictor."""

    transition: TransitionModel
    predictor: eqx.nn.Linear


class AuxiliaryLoss(abc.ABC):
    """What an auxiliary loss gives the rest of the zoo (see the module doc)."""

    #: steps after each transition the replay must keep (0: none)
    future: int = 0

    @abc.abstractmethod
    def module(
        self,
        network: Any,
        observation_shape: tuple[int, ...],
        num_actions: int,
        *,
        key: PRNGKeyArray,
    ) -> eqx.Module | None:
        """The parameters added to ``network`` (``None``: none)."""

    @abc.abstractmethod
    def item_losses(self, online: Any, target: Any, batch: Any) -> Array:
        """The loss of each item ``[B]`` (the composer weighs and adds it)."""


def latent_map(network: Any, observation: Array) -> Array:
    """The torso's feature map ``[C, H, W]`` of one observation, as the network preprocesses it.

    Raises:
      ValueError: a torso without a feature map (SPR needs one: nature_cnn, impala_cnn).
    """
    torso = network.torso
    inner = torso.inner if isinstance(torso, MinMaxNormalized) else torso
    if not hasattr(inner, "feature_map"):
        raise ValueError(
            f"spr predicts the torso's feature map, and the torso {type(inner).__name__} has "
            "none (feature_map); use nature_cnn, impala_cnn or minatar_cnn"
        )
    return torso.feature_map(preprocess(observation))


def projection(network: Any) -> eqx.Module:
    """The Q head's first hidden layer, which SPR projects with (before its ReLU)."""
    streams = network.streams
    trunk = getattr(streams, "trunk", None)
    mlp = trunk if trunk is not None else getattr(streams, "mlp", None)
    if mlp is None or len(mlp.layers) < 1:
        raise ValueError("spr projects with the Q head's first hidden layer; the network has none")
    return mlp.layers[0]


class SprLoss(AuxiliaryLoss):
    """SPR's latent prediction loss (see the module doc)."""

    def __init__(self, config: Spr, renormalize: bool):
        self.config = config
        self.future = int(config.steps)
        self.renormalize = renormalize

    def module(
        self,
        network: Any,
        observation_shape: tuple[int, ...],
        num_actions: int,
        *,
        key: PRNGKeyArray,
    ) -> SprModule:
        shape = jax.eval_shape(
            lambda o: latent_map(network, o), jax.ShapeDtypeStruct(observation_shape, jnp.float32)
        ).shape
        width = projection(network).out_features
        k_transition, k_predictor = jax.random.split(key)
        return SprModule(
            transition=TransitionModel(shape[0], num_actions, self.renormalize, key=k_transition),
            predictor=eqx.nn.Linear(width, width, key=k_predictor),
        )

    def item_losses(self, online: Any, target: Any, batch: Any) -> Array:
        future = batch.future
        if future is None:
            raise ValueError(
                "spr predicts the steps after each transition and the batch carries none: "
                "build the replay with zoo.data.build_data (future=auxiliary.steps)"
            )
        module = online.auxiliary
        project = projection(online)
        target_project = projection(target)

        def one(observation: Array, actions: Array, futures: Array, mask: Array) -> Array:
            def step(z: Array, action: Array) -> tuple[Array, Array]:
                z = module.transition(z, action)
                return z, module.predictor(project(jnp.ravel(z)))

            # unrolled: XLA:CPU runs the transition model's convolutions and their gradients
            # inside a rolled scan about 14× slower than the same K steps unrolled (measured
            # 2026-12-06, docs/performance.md); K is small (5 in SPR, SR-SPR and BBF)
            _, predictions = jax.lax.scan(
                step, latent_map(online, observation), actions, unroll=True
            )
            targets = jax.vmap(lambda o: target_project(jnp.ravel(latent_map(target, o))))(futures)
            targets = jax.lax.stop_gradient(targets)
            p = predictions / jnp.linalg.norm(predictions, axis=-1, keepdims=True)
            y = targets / jnp.linalg.norm(targets, axis=-1, keepdims=True)
            return jnp.mean(mask * jnp.sum((p - y) ** 2, axis=-1))

        return jax.vmap(one)(batch.observation, future.action, future.observation, future.mask)


@registry.register("auxiliary", "spr")
def spr(config: Spr, spec: Any = None) -> SprLoss:
    """SPR's latent prediction (Schwarzer et al. 2021), as BBF computes it."""
    renormalize = spec is not None and spec.network.torso_norm == "min_max"
    return SprLoss(config, renormalize)


def build_auxiliary(spec: Any) -> AuxiliaryLoss | None:
    """The auxiliary loss of a spec, or ``None`` for ``auxiliary: null``."""
    config = getattr(spec, "auxiliary", None)
    if config is None:
        return None
    return registry.get("auxiliary", config.kind)(config, spec)
