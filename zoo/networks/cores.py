"""Recurrent cores: the stateful layer between the torso and the output layers.

``network.core: null`` is a feed-forward network; ``{kind: lstm, size: 512}`` is R2D2's core.

Writing your own core
---------------------
A core factory is registered on the ``"core"`` axis and has the signature::

    @zoo.registry.register("core", "my_core", config=MyCoreConfig)
    def my_core(config, in_features: int, *, key: PRNGKeyArray) -> AbstractCore:
        ...

``in_features`` is the torso's feature count. The returned :class:`AbstractCore` is called on one
example as ``output, new_state = core(x, state, *, key=None)`` (``output`` rank 1; ``key`` is the
network's noise key and may be ignored) and gives its zero state for one example with
``initial_state()``. The state is any pytree of arrays; :meth:`zoo.networks.RecurrentNetwork.unroll`
scans the core over time with ``jax.lax.scan``.
"""

from __future__ import annotations

import abc
import math
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from zoo.registry import register

__all__ = ["LSTM", "AbstractCore", "LSTMState", "lstm_core"]

#: The LSTM state ``(h, c)``, each ``[size]`` for one example.
LSTMState = tuple[Float[Array, " size"], Float[Array, " size"]]


class AbstractCore(eqx.Module):
    """A recurrent core acting on one example."""

    @abc.abstractmethod
    def initial_state(self) -> PyTree[Array]:
        """The zero state of one example."""

    @abc.abstractmethod
    def __call__(
        self, x: Float[Array, " features"], state: PyTree[Array], *, key: PRNGKeyArray | None = None
    ) -> tuple[Float[Array, " out"], PyTree[Array]]:
        """One step: ``(output, new_state)``."""


@typing.final
class LSTM(AbstractCore):
    """Long short-term memory (Hochreiter & Schmidhuber 1997, "Long Short-Term Memory",
    https://doi.org/10.1162/neco.1997.9.8.1735), the core of R2D2 (Kapturowski et al. 2019,
    "Recurrent Experience Replay in Distributed Reinforcement Learning",
    https://openreview.net/forum?id=r1lyTjAqYX).

    Gates as in Haiku's ``hk.LSTM``, which the reference R2D2 (Acme) uses, with its +1 added to the
    forget gate's pre-activation::

        i, g, f, o = split(W [x, h] + b, 4)
        c' = σ(f + 1) ⊙ c + σ(i) ⊙ tanh(g)
        h' = σ(o) ⊙ tanh(c')

    The output is ``h'``; the state is ``(h', c')``. Initialisation: weights
    ``U(±1/sqrt(in_features + size))`` (Equinox/PyTorch default for the fused input), bias zeros.

    Attributes:
      weight: ``[4·size, in_features + size]`` fused gate weights.
      bias: ``[4·size]`` gate biases.
      size: number of units.
    """

    weight: Float[Array, "gates inputs"]
    bias: Float[Array, " gates"]
    size: int = eqx.field(static=True)

    def __init__(self, in_features: int, size: int, *, key: PRNGKeyArray):
        fan_in = in_features + size
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = jax.random.uniform(key, (4 * size, fan_in), minval=-bound, maxval=bound)
        self.bias = jnp.zeros((4 * size,))
        self.size = size

    def initial_state(self) -> LSTMState:
        return jnp.zeros((self.size,)), jnp.zeros((self.size,))

    def __call__(
        self, x: Float[Array, " features"], state: LSTMState, *, key: PRNGKeyArray | None = None
    ) -> tuple[Float[Array, " size"], LSTMState]:
        del key
        h, c = state
        gates = self.weight @ jnp.concatenate([x, h]) + self.bias
        i, g, f, o = jnp.split(gates, 4)
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return h, (h, c)


@register("core", "lstm")
def lstm_core(config, in_features: int, *, key: PRNGKeyArray) -> LSTM:
    """An LSTM of ``config.size`` units (R2D2 uses 512)."""
    return LSTM(in_features, int(config.size), key=key)
