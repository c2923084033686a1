"""Heads: how the output layers' numbers become action values, and how a head learns them.

A head sits after the torso (and core): it receives the torso's features, the network's output
layers (``streams``: the hidden layers and the last layer, or dueling streams; see
:mod:`zoo.networks.network`) and two keys, and returns a :class:`zoo.types.NetworkOutput`.
Fixed-support heads (``q``, ``categorical``, ``quantile``) run the streams once to an ``[A, N]``
array and read it (:meth:`AbstractHead.read`); because dueling is applied to that array before
the head, a distributional head is dueling per atom or quantile, as in Rainbow. A sampling head
(``iqn``) holds parameters of its own (the cosine τ-embedding) and runs the streams once per
sampled quantile fraction.

Writing your own head
---------------------
A head is one registration on the ``"head"`` axis, plus its loss on the ``head_loss`` axis under
the same name (:mod:`zoo.losses.heads`) and its config model, whose rules (which td losses train
it) are stated in its :meth:`~zoo.spec.Model.spec_problems`::

    @zoo.registry.register("head", "my_head", config=MyHeadConfig)
    def my_head(config, *, features: int, key: PRNGKeyArray) -> AbstractHead:
        ...

``config`` is the validated YAML ``network.head`` block, ``features`` the size of the torso's
(or core's) feature vector and ``key`` an initialisation key for parameters the head holds. The
returned :class:`AbstractHead` states ``num_outputs`` (numbers per action the output layer makes)
and implements :meth:`AbstractHead.apply` (or only :meth:`AbstractHead.read` for a head that reads
one ``[A, N]`` array). A head that draws random numbers per example sets ``samples = True``: the
network is then called with a ``sample_key`` per example and a ``role`` (``act``, ``learn`` or
``bootstrap``; see :func:`zoo.networks.network.apply_batch`).
"""

from __future__ import annotations

import abc
import typing
from collections.abc import Callable
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from zoo.registry import register
from zoo.types import NetworkOutput

__all__ = [
    "ROLES",
    "AbstractHead",
    "CategoricalHead",
    "FullyParameterizedQuantileHead",
    "ImplicitQuantileHead",
    "QHead",
    "QuantileHead",
    "Role",
    "categorical_head",
    "cosine_quantile_values",
    "fqf_head",
    "iqn_head",
    "q_head",
    "quantile_head",
]


#: Who evaluates the network: the actor (``act``), the loss at the state it learns
#: (``learn``), or the loss at a state it bootstraps from (``bootstrap``, the target network's
#: passes and the double-Q selector). Only sampling heads (IQN's N, N′ and K) read it.
Role = Literal["act", "learn", "bootstrap"]
ROLES: tuple[str, ...] = typing.get_args(Role)


class AbstractHead(eqx.Module):
    """Turns the torso's features into a :class:`NetworkOutput` for one observation.

    Attributes:
      samples: whether the head draws random numbers per example (IQN's τ); networks with such
        a head take a ``sample_key`` per example.
      reads_role: whether the head's output depends on the ``role`` without sampling.
    """

    samples: ClassVar[bool] = False
    #: Whether the head's output depends on who evaluates it (:data:`Role`) although it does not
    #: sample (FQF computes its fraction loss's extra quantiles for ``learn`` only); sampling
    #: heads always get the role.
    reads_role: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def num_outputs(self) -> int:
        """Numbers per action that the layer before the head must produce (``N``)."""

    def read(self, values: Float[Array, "actions outputs"]) -> NetworkOutput:
        """Maps the ``[A, num_outputs]`` values of one observation to a ``NetworkOutput``."""
        raise NotImplementedError(f"{type(self).__name__} does not read a fixed [A, N] array")

    def __call__(self, values: Float[Array, "actions outputs"]) -> NetworkOutput:
        """:meth:`read` (fixed-support heads are callable on their ``[A, N]`` array)."""
        return self.read(values)

    def apply(
        self,
        features: Float[Array, " features"],
        streams: Callable[..., Float[Array, "actions outputs"]],
        *,
        key: PRNGKeyArray | None = None,
        sample_key: PRNGKeyArray | None = None,
        role: Role = "learn",
    ) -> NetworkOutput:
        """The head's output for one observation's ``features``.

        Args:
          features: the torso's (or core's) feature vector.
          streams: the output layers, ``streams(x, *, key) -> [A, num_outputs]``.
          key: the noise key of noisy layers (shared by a batch), ``None`` for their means.
          sample_key: this example's own key (sampling heads only).
          role: who evaluates the network (:data:`Role`).

        The default runs the streams once and reads the result with :meth:`read`.
        """
        del sample_key, role
        return self.read(streams(features, key=key))


@typing.final
class QHead(AbstractHead):
    """One action value per action (Mnih et al. 2015): ``q_values = values[:, 0]``."""

    @property
    def num_outputs(self) -> int:
        return 1

    def read(self, values: Float[Array, "actions 1"]) -> NetworkOutput:
        return NetworkOutput(q_values=values[:, 0])


@typing.final
class CategoricalHead(AbstractHead):
    """A categorical return distribution on a fixed support (C51: Bellemare et al. 2017, "A
    Distributional Perspective on Reinforcement Learning", https://arxiv.org/abs/1707.06887).

    ``logits = values`` ``[A, N]``; ``atoms = linspace(v_min, v_max, N)`` is a constant built from
    static floats (never trained); ``q_values = Σ_i softmax(logits)_i · atoms_i``.
    """

    num_atoms: int = eqx.field(static=True)
    v_min: float = eqx.field(static=True)
    v_max: float = eqx.field(static=True)

    @property
    def num_outputs(self) -> int:
        return self.num_atoms

    @property
    def atoms(self) -> Float[Array, " atoms"]:
        """The support ``linspace(v_min, v_max, num_atoms)``."""
        return jnp.linspace(self.v_min, self.v_max, self.num_atoms, dtype=jnp.float32)

    def read(self, values: Float[Array, "actions atoms"]) -> NetworkOutput:
        atoms = self.atoms
        q_values = jnp.sum(jax.nn.softmax(values, axis=-1) * atoms, axis=-1)
        return NetworkOutput(q_values=q_values, logits=values, atoms=atoms)


@typing.final
class QuantileHead(AbstractHead):
    """Quantile values at the midpoints ``τ_i = (i + ½)/N`` (QR-DQN: Dabney et al. 2018,
    "Distributional Reinforcement Learning with Quantile Regression",
    https://arxiv.org/abs/1710.10044): ``quantiles = values`` ``[A, N]``, ``q_values`` their mean.
    """

    num_quantiles: int = eqx.field(static=True)

    @property
    def num_outputs(self) -> int:
        return self.num_quantiles

    def read(self, values: Float[Array, "actions quantiles"]) -> NetworkOutput:
        return NetworkOutput(q_values=jnp.mean(values, axis=-1), quantiles=values)


def cosine_quantile_values(
    embedding: eqx.nn.Linear,
    features: Float[Array, " features"],
    streams: Callable[..., Float[Array, "actions 1"]],
    taus: Float[Array, " fractions"],
    key: PRNGKeyArray | None = None,
) -> Float[Array, "actions fractions"]:
    """``Z_τ(s, a)`` at each fraction of ``taus``, ``[A, len(taus)]``: the output layers run on
    ``features ⊙ ReLU(embedding([cos(π·i·τ)]_{i=1..M}))`` (IQN's eq. 4, also FQF's quantile
    value network); ``M`` is the embedding's input size."""
    num_cosines = embedding.in_features
    multiples = jnp.arange(1, num_cosines + 1, dtype=features.dtype) * jnp.pi
    cosines = jnp.cos(multiples[None, :] * taus[:, None])
    embedded = jax.nn.relu(jax.vmap(embedding)(cosines))
    values = jax.vmap(lambda x: streams(x, key=key))(features[None, :] * embedded)
    return values[..., 0].T


@typing.final
class ImplicitQuantileHead(AbstractHead):
    """Implicit quantiles (IQN: Dabney, Ostrovski, Silver & Munos 2018, "Implicit Quantile
    Networks for Distributional Reinforcement Learning", https://arxiv.org/abs/1806.06923, eq. 4;
    as dqn_zoo's ``iqn_atari_network`` and Dopamine's ``ImplicitQuantileNetwork``).

    Per example, quantile fractions ``τ ~ U(0, 1)`` are drawn from its ``sample_key``; each is
    embedded as ``φ(τ) = ReLU(W·[cos(π·i·τ)]_{i=1..M} + b)``, a dense layer to the feature size,
    and the output layers run on ``features ⊙ φ(τ)``, giving ``Z_τ(s, a)``. ``quantiles`` is
    ``[A, n]`` at the fractions ``taus`` ``[n]``; how many depends on the ``role``:

    - ``learn`` (the online network at the state learned): N = ``num_samples``;
    - ``bootstrap`` (target network and double-Q selector at the next state): N′ =
      ``num_target_samples`` quantiles, and ``q_values`` from K other fractions, as dqn_zoo's
      selector pass with ``tau_samples_policy`` and Dopamine's ``num_quantile_samples`` pass;
    - ``act``: K = ``num_policy_samples``.

    ``q_values`` is the mean of the quantiles it is computed from (eq. 6 of the paper, the
    K-sample estimate of the greedy policy). The embedding is the only parameter the head holds.
    """

    samples: ClassVar[bool] = True

    embedding: eqx.nn.Linear
    num_cosines: int = eqx.field(static=True)
    num_samples: int = eqx.field(static=True)
    num_target_samples: int = eqx.field(static=True)
    num_policy_samples: int = eqx.field(static=True)

    @property
    def num_outputs(self) -> int:
        return 1

    def quantile_values(
        self,
        features: Float[Array, " features"],
        streams: Callable[..., Float[Array, "actions 1"]],
        taus: Float[Array, " samples"],
        key: PRNGKeyArray | None = None,
    ) -> Float[Array, "actions samples"]:
        """``Z_τ(s, a)`` for each fraction in ``taus``: ``[A, len(taus)]``."""
        return cosine_quantile_values(self.embedding, features, streams, taus, key)

    def apply(
        self,
        features: Float[Array, " features"],
        streams: Callable[..., Float[Array, "actions outputs"]],
        *,
        key: PRNGKeyArray | None = None,
        sample_key: PRNGKeyArray | None = None,
        role: Role = "learn",
    ) -> NetworkOutput:
        if sample_key is None:
            raise ValueError(
                "an iqn head samples its quantile fractions per example: call the network with "
                "sample_key= (zoo.networks.apply_batch does)"
            )
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        k_taus, k_policy = jax.random.split(sample_key)
        n = {
            "act": self.num_policy_samples,
            "learn": self.num_samples,
            "bootstrap": self.num_target_samples,
        }[role]
        taus = jax.random.uniform(k_taus, (n,), features.dtype)
        quantiles = self.quantile_values(features, streams, taus, key)
        if role == "bootstrap":
            policy_taus = jax.random.uniform(k_policy, (self.num_policy_samples,), features.dtype)
            q_values = jnp.mean(self.quantile_values(features, streams, policy_taus, key), -1)
        else:
            q_values = jnp.mean(quantiles, axis=-1)
        return NetworkOutput(q_values=q_values, quantiles=quantiles, taus=taus)


@typing.final
class FullyParameterizedQuantileHead(AbstractHead):
    """Proposed quantile fractions (FQF: Yang, Zhao, Lin, Qin, Bian & Liu 2019, "Fully
    Parameterized Quantile Function for Distributional Reinforcement Learning",
    https://arxiv.org/abs/1911.02140; as microsoft/FQF's ``fqf_network``).

    A fraction proposal layer maps the features to ``N`` logits; their softmax, summed
    cumulatively, gives fractions ``0 = τ_0 < τ_1 < … < τ_N ≈ 1``. The quantile value network is
    IQN's (:func:`cosine_quantile_values`), evaluated at the midpoints ``τ̂_i = (τ_i + τ_{i+1})/2``:
    ``quantiles`` ``[A, N]`` at ``taus = τ̂``, and ``q_values = Σ_i (τ_{i+1} − τ_i)·Z_τ̂_i`` (the
    paper's eq. for Q; the source's ``ws`` variant) in every role. In the ``learn`` role the head
    also returns the interior fractions ``fractions = τ_1 … τ_{N−1}`` and the quantile values at
    them (``fraction_quantiles``), which FQF's fraction loss needs (:mod:`zoo.losses.heads`).

    Gradients follow the source's two optimisers, so that one loss can train both parts: the
    fractions behind ``quantiles`` use a stopped copy of the proposal layer (the quantile loss
    reaches the torso through them, as in the source's graph, but never the proposal layer), and
    ``fractions`` are proposed from stopped features (the fraction loss reaches the proposal
    layer only). ``taus`` and ``fraction_quantiles`` carry no gradient.
    """

    reads_role: ClassVar[bool] = True

    fraction: eqx.nn.Linear
    embedding: eqx.nn.Linear
    num_fractions: int = eqx.field(static=True)

    @property
    def num_outputs(self) -> int:
        return 1

    @staticmethod
    def propose(
        fraction: eqx.nn.Linear, features: Float[Array, " features"]
    ) -> Float[Array, " fractions_plus_one"]:
        """``[τ_0 = 0, τ_1, …, τ_N]``: the cumulative softmax of ``fraction(features)``."""
        probabilities = jax.nn.softmax(fraction(features))
        return jnp.concatenate([jnp.zeros((1,), probabilities.dtype), jnp.cumsum(probabilities)])

    def apply(
        self,
        features: Float[Array, " features"],
        streams: Callable[..., Float[Array, "actions outputs"]],
        *,
        key: PRNGKeyArray | None = None,
        sample_key: PRNGKeyArray | None = None,
        role: Role = "learn",
    ) -> NetworkOutput:
        del sample_key
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        taus = self.propose(jax.lax.stop_gradient(self.fraction), features)
        hats = (taus[1:] + taus[:-1]) / 2
        quantiles = cosine_quantile_values(self.embedding, features, streams, hats, key)
        q_values = quantiles @ (taus[1:] - taus[:-1])
        fractions = fraction_quantiles = None
        if role == "learn":
            fractions = self.propose(self.fraction, jax.lax.stop_gradient(features))[1:-1]
            interior = jax.lax.stop_gradient(taus[1:-1])
            fraction_quantiles = jax.lax.stop_gradient(
                cosine_quantile_values(self.embedding, features, streams, interior, key)
            )
        return NetworkOutput(
            q_values=q_values,
            quantiles=quantiles,
            taus=jax.lax.stop_gradient(hats),
            fractions=fractions,
            fraction_quantiles=fraction_quantiles,
        )


@register("head", "q")
def q_head(config, *, features: int = 0, key: PRNGKeyArray | None = None) -> QHead:
    """Scalar action values (DQN)."""
    del config, features, key
    return QHead()


@register("head", "categorical")
def categorical_head(
    config, *, features: int = 0, key: PRNGKeyArray | None = None
) -> CategoricalHead:
    """Categorical distribution on ``num_atoms`` atoms in ``[v_min, v_max]`` (C51)."""
    del features, key
    if not config.v_min < config.v_max or config.num_atoms < 2:
        raise ValueError(
            "categorical head needs num_atoms >= 2 and v_min < v_max; got "
            f"num_atoms={config.num_atoms}, v_min={config.v_min}, v_max={config.v_max}"
        )
    return CategoricalHead(int(config.num_atoms), float(config.v_min), float(config.v_max))


@register("head", "quantile")
def quantile_head(config, *, features: int = 0, key: PRNGKeyArray | None = None) -> QuantileHead:
    """``num_quantiles`` quantile values per action (QR-DQN)."""
    del features, key
    return QuantileHead(int(config.num_quantiles))


@register("head", "fqf")
def fqf_head(config, *, features: int, key: PRNGKeyArray) -> FullyParameterizedQuantileHead:
    """FQF: a ``num_fractions``-way fraction proposal layer and IQN's quantile value network
    (``num_cosines`` cosines embedded to the ``features`` size)."""
    k_fraction, k_embedding = jax.random.split(key)
    return FullyParameterizedQuantileHead(
        eqx.nn.Linear(int(features), int(config.num_fractions), key=k_fraction),
        eqx.nn.Linear(int(config.num_cosines), int(features), key=k_embedding),
        int(config.num_fractions),
    )


@register("head", "iqn")
def iqn_head(config, *, features: int, key: PRNGKeyArray) -> ImplicitQuantileHead:
    """Implicit quantiles (IQN): ``num_cosines`` cosines embedded to the ``features`` size."""
    return ImplicitQuantileHead(
        eqx.nn.Linear(int(config.num_cosines), int(features), key=key),
        int(config.num_cosines),
        int(config.num_samples),
        int(config.num_target_samples),
        int(config.num_policy_samples),
    )
