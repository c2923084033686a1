"""Whole networks: torso → (recurrent core) → hidden layers → output layer → head.

:func:`build_network` turns the YAML ``network:`` block into an Equinox module. It looks every
``kind`` up in :mod:`zoo.registry` (axes ``torso``, ``core``, ``head``), so a registered user
component is usable from YAML with no change here; see the docstrings of
:mod:`zoo.networks.torsos`, :mod:`zoo.networks.cores` and :mod:`zoo.networks.heads` for the factory
signatures.

Conventions (Equinox): a network acts on **one** observation; callers batch with ``jax.vmap``.
``key`` is the noise key of noisy layers: ``key=None`` uses their mean weights (deterministic);
inside ``jax.vmap(lambda o: net(o, key=k))`` the key is unbatched, so one noise sample is shared
by the whole batch, as in Fortunato et al. (2018). Non-noisy networks ignore ``key``. A network
whose head samples per example (``net.samples``, IQN's τ) also takes a ``sample_key`` of its own
for each example and a ``role`` (:data:`zoo.networks.heads.Role`); :func:`apply_batch` calls any
network on a batch the right way.

Observations: ``uint8`` inputs are cast to ``float32`` and divided by 255, anything else is cast to
``float32``; images are channels-first ``[C, H, W]`` as envpool returns them.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from zoo import registry
from zoo.networks.cores import AbstractCore
from zoo.networks.heads import AbstractHead, Role
from zoo.networks.layers import MLP
from zoo.networks.torsos import MinMaxNormalized, initialise
from zoo.types import NetworkOutput

__all__ = [
    "DuelingStreams",
    "FeedForwardNetwork",
    "RecurrentNetwork",
    "SingleStream",
    "apply_batch",
    "build_network",
    "example_keys",
    "initialise_everywhere",
    "initialise_outputs",
    "preprocess",
]

M = typing.TypeVar("M")


def preprocess(observation: Array) -> Float[Array, "*dims"]:
    """``uint8`` → ``float32 / 255``; any other dtype → ``float32``."""
    if observation.dtype == jnp.uint8:
        return observation.astype(jnp.float32) / 255.0
    return observation.astype(jnp.float32)


def _split(key: PRNGKeyArray | None, num: int) -> tuple[PRNGKeyArray | None, ...]:
    if key is None:
        return (None,) * num
    return tuple(jax.random.split(key, num))


@typing.final
class SingleStream(eqx.Module):
    """Hidden ReLU layers (each ``dense → LayerNorm → ReLU`` with ``norm``), then one linear layer
    to ``A·N`` outputs, read as ``[A, N]``."""

    mlp: MLP
    num_actions: int = eqx.field(static=True)
    num_outputs: int = eqx.field(static=True)

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int],
        num_actions: int,
        num_outputs: int,
        *,
        noisy: bool = False,
        sigma0: float = 0.5,
        norm: bool = False,
        key: PRNGKeyArray,
    ):
        self.mlp = MLP(
            in_features,
            [*hidden, num_actions * num_outputs],
            activate_final=False,
            noisy=noisy,
            sigma0=sigma0,
            norm=norm,
            key=key,
        )
        self.num_actions = num_actions
        self.num_outputs = num_outputs

    def __call__(
        self, x: Float[Array, " features"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, "actions outputs"]:
        return self.mlp(x, key=key).reshape(self.num_actions, self.num_outputs)

    @staticmethod
    def output_layers(streams: SingleStream) -> tuple[eqx.Module, ...]:
        """The output layer (for ``eqx.tree_at``)."""
        return (streams.mlp.layers[-1],)


@typing.final
class DuelingStreams(eqx.Module):
    """Dueling architecture (Wang et al. 2016, "Dueling Network Architectures for Deep
    Reinforcement Learning", https://arxiv.org/abs/1511.06581, equation 9):

    ``out[a, :] = V[:] + A[a, :] − mean_a' A[a', :]``, applied per atom or quantile for
    distributional heads as in Rainbow. By default the value and the advantage streams each have
    their own copy of the hidden layers (the paper's, dqn_zoo's and Acme's); with
    ``shared_hidden`` the hidden layers are one trunk whose output both streams' output layers
    read (Dopamine's ``FullRainbowNetwork``, behind DER and DrQ(ε)).

    Attributes:
      trunk: the shared hidden layers (every one followed by a ReLU), or ``None``.
      value: (the hidden layers, unless shared, then) ``N`` outputs.
      advantage: (the hidden layers, unless shared, then) ``A·N`` outputs.
    """

    value: MLP
    advantage: MLP
    num_actions: int = eqx.field(static=True)
    num_outputs: int = eqx.field(static=True)
    trunk: MLP | None = None

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int],
        num_actions: int,
        num_outputs: int,
        *,
        noisy: bool = False,
        sigma0: float = 0.5,
        norm: bool = False,
        shared_hidden: bool = False,
        key: PRNGKeyArray,
    ):
        kwargs = {"noisy": noisy, "sigma0": sigma0, "norm": norm}
        if shared_hidden:
            tkey, vkey, akey = jax.random.split(key, 3)
            self.trunk = MLP(in_features, list(hidden), activate_final=True, key=tkey, **kwargs)
            in_features, hidden = (list(hidden)[-1] if hidden else in_features), []
        else:
            vkey, akey = jax.random.split(key)
            self.trunk = None
        self.value = MLP(
            in_features, [*hidden, num_outputs], activate_final=False, key=vkey, **kwargs
        )
        self.advantage = MLP(
            in_features,
            [*hidden, num_actions * num_outputs],
            activate_final=False,
            key=akey,
            **kwargs,
        )
        self.num_actions = num_actions
        self.num_outputs = num_outputs

    def streams(
        self, x: Float[Array, " features"], *, key: PRNGKeyArray | None = None
    ) -> tuple[Float[Array, " outputs"], Float[Array, "actions outputs"]]:
        """The raw streams ``(V [N], A [A, N])`` before they are combined."""
        if self.trunk is not None:
            key, tkey = _split(key, 2)
            x = self.trunk(x, key=tkey)
        vkey, akey = _split(key, 2)
        value = self.value(x, key=vkey)
        advantage = self.advantage(x, key=akey).reshape(self.num_actions, self.num_outputs)
        return value, advantage

    def __call__(
        self, x: Float[Array, " features"], *, key: PRNGKeyArray | None = None
    ) -> Float[Array, "actions outputs"]:
        value, advantage = self.streams(x, key=key)
        return value[None, :] + advantage - jnp.mean(advantage, axis=0, keepdims=True)

    @staticmethod
    def output_layers(streams: DuelingStreams) -> tuple[eqx.Module, ...]:
        """The output layers of the value and the advantage stream (for ``eqx.tree_at``)."""
        return (streams.value.layers[-1], streams.advantage.layers[-1])


@typing.final
class FeedForwardNetwork(eqx.Module):
    """``torso → hidden → output layer (or dueling streams) → head`` for one observation."""

    is_recurrent: ClassVar[bool] = False

    torso: eqx.Module
    streams: SingleStream | DuelingStreams
    head: AbstractHead
    #: the parameters an auxiliary loss adds (``zoo.networks.auxiliary``), unused by the Q-values
    auxiliary: eqx.Module | None = None

    @property
    def samples(self) -> bool:
        """Whether the head samples per example (then pass ``sample_key``)."""
        return self.head.samples

    @property
    def reads_role(self) -> bool:
        """Whether the head's output depends on the ``role`` (then pass it)."""
        return self.head.samples or self.head.reads_role

    def __call__(
        self,
        observation: Array,
        *,
        key: PRNGKeyArray | None = None,
        sample_key: PRNGKeyArray | None = None,
        role: Role = "learn",
    ) -> NetworkOutput:
        """Args:
          observation: one observation (``uint8`` images are scaled by 1/255).
          key: noise key of noisy layers; ``None`` uses their mean weights.
          sample_key: this example's key, for a head that samples (``self.samples``).
          role: who evaluates the network (``act``, ``learn``, ``bootstrap``); sampling heads
            draw as many samples as the role asks.

        Returns:
          A :class:`NetworkOutput` with ``q_values`` ``[A]`` and the head's other fields.
        """
        torso_key, stream_key = _split(key, 2)
        features = self.torso(preprocess(observation), key=torso_key)
        return self.head.apply(
            features, self.streams, key=stream_key, sample_key=sample_key, role=role
        )


# ``atoms`` is the head's fixed support: an unroll does not stack it over time.
_UNROLL_OUT_AXES = NetworkOutput(
    q_values=0,
    logits=0,
    atoms=None,
    quantiles=0,
    taus=0,
    fractions=0,
    fraction_quantiles=0,
)


@typing.final
class RecurrentNetwork(eqx.Module):
    """``torso → recurrent core → hidden → output layer (or dueling streams) → head`` (R2D2,
    Kapturowski et al. 2019, with an LSTM core).
    """

    is_recurrent: ClassVar[bool] = True

    torso: eqx.Module
    core: AbstractCore
    streams: SingleStream | DuelingStreams
    head: AbstractHead

    def initial_state(self) -> PyTree[Array]:
        """The core's zero state for one example, e.g. ``(h, c)`` of ``[size]`` arrays."""
        return self.core.initial_state()

    @property
    def samples(self) -> bool:
        """Whether the head samples per example (then pass ``sample_key``)."""
        return self.head.samples

    @property
    def reads_role(self) -> bool:
        """Whether the head's output depends on the ``role`` (then pass it)."""
        return self.head.samples or self.head.reads_role

    def _output(
        self,
        x: Array,
        key: PRNGKeyArray | None,
        sample_key: PRNGKeyArray | None = None,
        role: Role = "learn",
    ) -> NetworkOutput:
        return self.head.apply(x, self.streams, key=key, sample_key=sample_key, role=role)

    def __call__(
        self,
        observation: Array,
        state: PyTree[Array],
        *,
        key: PRNGKeyArray | None = None,
        sample_key: PRNGKeyArray | None = None,
        role: Role = "learn",
    ) -> tuple[NetworkOutput, PyTree[Array]]:
        """One step on one observation: ``(output, new_state)``."""
        torso_key, core_key, stream_key = _split(key, 3)
        features = self.torso(preprocess(observation), key=torso_key)
        features, state = self.core(features, state, key=core_key)
        return self._output(features, stream_key, sample_key, role), state

    def unroll(
        self,
        observations: Array,
        state: PyTree[Array],
        *,
        key: PRNGKeyArray | None = None,
        sample_key: PRNGKeyArray | None = None,
        role: Role = "learn",
    ) -> tuple[NetworkOutput, PyTree[Array]]:
        """Runs the network over a sequence ``[T, ...]`` of one example from ``state``.

        Equal to calling the network step by step with the same ``key`` (one noise sample for the
        whole sequence) and, for a sampling head, step ``t``'s sample key
        ``jax.random.split(sample_key, T)[t]``. The state is never reset inside the sequence (as
        in the reference R2D2). The torso and the output layers are batched over time; only the
        core is scanned.

        Returns:
          ``(output, final_state)``; every field of ``output`` has a leading ``T`` axis except
          ``atoms``, which stays ``[N]``.
        """
        torso_key, core_key, stream_key = _split(key, 3)
        features = jax.vmap(lambda o: self.torso(preprocess(o), key=torso_key))(observations)

        def step(carry: PyTree[Array], x: Array) -> tuple[PyTree[Array], Array]:
            y, carry = self.core(x, carry, key=core_key)
            return carry, y

        state, features = jax.lax.scan(step, state, features)
        length = observations.shape[0]
        step_keys = None if sample_key is None else jax.random.split(sample_key, length)
        outputs = jax.vmap(
            lambda x, k: self._output(x, stream_key, k, role), out_axes=_UNROLL_OUT_AXES
        )(features, step_keys)
        return outputs, state


def example_keys(key: PRNGKeyArray, size: int, axis_name: str | None = None) -> PRNGKeyArray:
    """One key per example of a batch of ``size``: ``jax.random.split(key, size)``.

    Inside a data-parallel map over ``axis_name`` (each device holding ``size`` examples of the
    global batch, in device order), each device takes its own slice of
    ``jax.random.split(key, size · devices)``, so an example draws the same numbers as it would
    in the global batch on one device.
    """
    if axis_name is None:
        return jax.random.split(key, size)
    devices = jax.lax.psum(1, axis_name)
    index = jax.lax.axis_index(axis_name)
    keys = jax.random.split(key, size * devices)
    return jax.lax.dynamic_slice_in_dim(keys, index * size, size)


def apply_batch(
    net: Any,
    observations: Array,
    key: PRNGKeyArray | None,
    *,
    role: Role = "learn",
    state: PyTree[Array] | None = None,
    axis_name: str | None = None,
) -> Any:
    """Calls a network on a batch ``[B, ...]`` of observations (one step of a recurrent one with
    its ``state`` ``[B, ...]``).

    The noise of noisy layers is one sample shared by the batch (``key``), as in Fortunato et
    al. (2018). A network whose head samples per example (``net.samples``, IQN's τ) gets its
    own ``sample_key`` for each example, split from ``key`` (:func:`example_keys`; with
    ``axis_name``, the data-parallel axis, by the example's place in the global batch), and the
    ``role``; a network whose head reads the role without sampling (``net.reads_role``, FQF)
    gets the ``role``; any other network, a user's included, is called exactly as
    ``net(o, key=key)`` (``net(o, s, key=key)``).

    Returns:
      The batched output (and, with ``state``, the new state), as ``jax.vmap`` gives them.
    """
    size = observations.shape[0]
    if getattr(net, "samples", False):
        if key is None:
            raise ValueError("a network whose head samples per example needs a key")
        noise_key, sample_key = jax.random.split(key)
        sample_keys = example_keys(sample_key, size, axis_name)
        if state is None:
            return jax.vmap(lambda o, k: net(o, key=noise_key, sample_key=k, role=role))(
                observations, sample_keys
            )
        return jax.vmap(lambda o, s, k: net(o, s, key=noise_key, sample_key=k, role=role))(
            observations, state, sample_keys
        )
    given = {"role": role} if getattr(net, "reads_role", False) else {}
    if state is None:
        return jax.vmap(lambda o: net(o, key=key, **given))(observations)
    return jax.vmap(lambda o, s: net(o, s, key=key, **given))(observations, state)


def _feature_count(fn: Any, *args: Any) -> int:
    out = eqx.filter_eval_shape(fn, *args)
    out = out[0] if isinstance(out, tuple) else out
    if len(out.shape) != 1:
        raise ValueError(f"a torso or core must return a rank-1 feature vector; got {out.shape}")
    return int(out.shape[0])


def build_network(
    spec: Any,
    observation_shape: tuple[int, ...],
    num_actions: int,
    *,
    key: PRNGKeyArray,
) -> FeedForwardNetwork | RecurrentNetwork:
    """Builds the network of an algorithm spec.

    Args:
      spec: the algorithm spec (anything with a ``.network`` attribute) or its ``network`` block
        itself: ``torso``, ``hidden``, ``dueling``, ``noisy``, ``noisy_sigma0``, ``core``, ``head``.
      observation_shape: shape of one observation (images channels-first ``[C, H, W]``).
      num_actions: number of discrete actions ``A``.
      key: initialisation key (keyword only).

    Returns:
      A :class:`FeedForwardNetwork` (``net(obs, *, key=None)``) when ``core`` is null, else a
      :class:`RecurrentNetwork` (``net(obs, state, *, key=None)``, ``initial_state()``,
      ``unroll(observations, state, *, key=None)``). ``net.is_recurrent`` tells which.

    Noisy networks (``noisy: true``) make the hidden layers and the output layer(s)
    :class:`~zoo.networks.layers.NoisyLinear`, as in Rainbow; torsos and cores stay plain.
    """
    config = getattr(spec, "network", spec)
    observation_shape = tuple(int(d) for d in observation_shape)
    torso_key, core_key, stream_key = jax.random.split(key, 3)

    torso = registry.get("torso", config.torso.kind)(config.torso, observation_shape, key=torso_key)
    if getattr(config, "torso_norm", "none") == "min_max":
        torso = MinMaxNormalized(torso)
    features = _feature_count(torso, jax.ShapeDtypeStruct(observation_shape, jnp.float32))

    core = None
    if config.core is not None:
        core = registry.get("core", config.core.kind)(config.core, features, key=core_key)
        features = _feature_count(
            core, jax.ShapeDtypeStruct((features,), jnp.float32), core.initial_state()
        )

    # the head's own key: the other layers draw exactly what they drew before heads held any
    head = registry.get("head", config.head.kind)(
        config.head, features=features, key=jax.random.fold_in(key, 2)
    )
    layout = (
        int(features),
        [int(h) for h in (config.hidden or ())],
        int(num_actions),
        head.num_outputs,
    )
    options = {
        "noisy": bool(config.noisy),
        "sigma0": float(config.noisy_sigma0),
        "norm": getattr(config, "norm", "none") == "layer_norm",
        "key": stream_key,
    }
    streams = (
        DuelingStreams(
            *layout, shared_hidden=bool(getattr(config, "shared_hidden", False)), **options
        )
        if config.dueling
        else SingleStream(*layout, **options)
    )
    built = network = (
        FeedForwardNetwork(torso, streams, head)
        if core is None
        else RecurrentNetwork(torso, core, streams, head)
    )
    auxiliary = getattr(spec, "auxiliary", None)
    if auxiliary is not None:
        # its parameters live in the network (trained, averaged into the target, reset, saved
        # as any others), drawn with a key of their own
        extra = registry.get("auxiliary", auxiliary.kind)(auxiliary, spec).module(
            network, observation_shape, int(num_actions), key=jax.random.fold_in(key, 4)
        )
        built = network = FeedForwardNetwork(torso, streams, head, auxiliary=extra)
    init = getattr(config, "init", "default")
    if init != "default":
        # a key of its own: the default initialisation draws exactly what it drew before
        network = initialise_everywhere(network, jax.random.fold_in(key, 1), init)
    output_init = getattr(config, "output_init", None)
    if output_init is not None:
        network = initialise_outputs(
            network, jax.random.fold_in(key, 3), output_init, default=built.streams
        )
    return network


def _plain_layer(x: Any) -> bool:
    return isinstance(x, eqx.nn.Linear | eqx.nn.Conv)


def initialise_everywhere(module: M, key: PRNGKeyArray, scheme: str) -> M:
    """``module`` with every ``eqx.nn.Linear`` and ``eqx.nn.Conv`` in it re-initialised by
    :func:`zoo.networks.torsos.initialise` under ``scheme`` (zero biases), each with its own key;
    other layers (noisy layers, LSTM cells) are left as they are."""
    layers = [x for x in jax.tree_util.tree_leaves(module, is_leaf=_plain_layer) if _plain_layer(x)]
    keys = iter(jax.random.split(key, max(len(layers), 1)))
    return jax.tree_util.tree_map(
        lambda x: initialise(x, next(keys), scheme) if _plain_layer(x) else x,
        module,
        is_leaf=_plain_layer,
    )


def initialise_outputs(
    network: FeedForwardNetwork | RecurrentNetwork,
    key: PRNGKeyArray,
    scheme: str,
    *,
    default: SingleStream | DuelingStreams,
) -> FeedForwardNetwork | RecurrentNetwork:
    """``network`` with its output layer(s) (each stream's last) under ``scheme``; ``default``
    (the streams as built, before any re-initialisation) gives them back for ``scheme="default"``.
    Noisy output layers are refused by the spec (``network.output_init``)."""
    where = type(network.streams).output_layers
    current = where(network.streams)
    if scheme == "default":
        new = where(default)
    else:
        keys = jax.random.split(key, len(current))
        new = tuple(initialise(layer, k, scheme) for layer, k in zip(current, keys, strict=True))
    return eqx.tree_at(lambda n: where(n.streams), network, new)
