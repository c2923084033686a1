"""Heads: how a network's ``[A, N]`` output numbers are read as action values.

The network's last dense layer (or its dueling streams, see :mod:`zoo.networks.network`) produces
``N = head.num_outputs`` numbers per action; the head turns that ``[A, N]`` array into a
:class:`zoo.types.NetworkOutput`. Because dueling is applied to the ``[A, N]`` array before the
head, a distributional head is dueling per atom or quantile, as in Rainbow.

Writing your own head
---------------------
A head factory is registered on the ``"head"`` axis and has the signature::

    @zoo.registry.register("head", "my_head", config=MyHeadConfig)
    def my_head(config) -> AbstractHead:
        ...

``config`` is the validated YAML ``network.head`` block. The returned :class:`AbstractHead` states
``num_outputs`` (numbers per action) and maps ``values: Float[Array, "actions num_outputs"]`` of
one observation to a ``NetworkOutput`` whose ``q_values`` are ``[A]``. Hyperparameters are static
fields; a head holds no trainable arrays (the dense layers before it do).
"""

from __future__ import annotations

import abc
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from zoo.registry import register
from zoo.types import NetworkOutput

__all__ = [
    "AbstractHead",
    "CategoricalHead",
    "QHead",
    "QuantileHead",
    "categorical_head",
    "q_head",
    "quantile_head",
]


class AbstractHead(eqx.Module):
    """Reads the ``[A, num_outputs]`` output of one observation as a :class:`NetworkOutput`."""

    @property
    @abc.abstractmethod
    def num_outputs(self) -> int:
        """Numbers per action that the layer before the head must produce (``N``)."""

    @abc.abstractmethod
    def __call__(self, values: Float[Array, "actions outputs"]) -> NetworkOutput:
        """Maps the ``[A, num_outputs]`` values of one observation to a ``NetworkOutput``."""


@typing.final
class QHead(AbstractHead):
    """One action value per action (Mnih et al. 2015): ``q_values = values[:, 0]``."""

    @property
    def num_outputs(self) -> int:
        return 1

    def __call__(self, values: Float[Array, "actions 1"]) -> NetworkOutput:
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

    def __call__(self, values: Float[Array, "actions atoms"]) -> NetworkOutput:
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

    def __call__(self, values: Float[Array, "actions quantiles"]) -> NetworkOutput:
        return NetworkOutput(q_values=jnp.mean(values, axis=-1), quantiles=values)


@register("head", "q")
def q_head(config) -> QHead:
    """Scalar action values (DQN)."""
    del config
    return QHead()


@register("head", "categorical")
def categorical_head(config) -> CategoricalHead:
    """Categorical distribution on ``num_atoms`` atoms in ``[v_min, v_max]`` (C51)."""
    if not config.v_min < config.v_max or config.num_atoms < 2:
        raise ValueError(
            "categorical head needs num_atoms >= 2 and v_min < v_max; got "
            f"num_atoms={config.num_atoms}, v_min={config.v_min}, v_max={config.v_max}"
        )
    return CategoricalHead(int(config.num_atoms), float(config.v_min), float(config.v_max))


@register("head", "quantile")
def quantile_head(config) -> QuantileHead:
    """``num_quantiles`` quantile values per action (QR-DQN)."""
    return QuantileHead(int(config.num_quantiles))
