"""Resets of the network during training: the ``resets`` axis (:class:`zoo.spec.ResetSpec`).

A reset draws a fresh initialisation of the network (the run's own builder, with a key of its
own) and makes each parameter one of three things, by the part of the network it lies in:

- ``shrink``: ``shrink_factor·θ + perturb_factor·θ_fresh`` (shrink and perturb; Ash & Adams
  2020; SR-SPR and BBF, D'Oro et al. 2023, Schwarzer et al. 2023);
- ``keep``: ``θ``;
- anything else: ``θ_fresh`` (Nikishin et al. 2022).

It is what BBF's ``spr_agent.py`` ``jit_reset`` does with ``interpolate_weights`` (old weight
``shrink_factor``, new weight ``perturb_factor``) and ``copy_params`` (the copied keys keep the
interpolated values, every other leaf takes the fresh one), applied to the online network with
one fresh draw and to the target network with another; the optimizer's state starts over
(:meth:`zoo.learner.Learner.reset`). The learner decides when (:meth:`ResetSpec.due`, counted in
learner updates), inside its compiled update, so every driver resets alike.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from zoo.optimizers import group_labels, is_parameter
from zoo.spec import ResetSpec

__all__ = [
    "FRESH",
    "KEEP",
    "SHRINK",
    "check_parts",
    "part_labels",
    "reset_network",
    "resets_done",
    "updates_since_reset",
]

#: What a reset makes of a parameter.
SHRINK, KEEP, FRESH = "shrink", "keep", "fresh"


def part_labels(resets: ResetSpec, params: Any) -> Any:
    """:data:`SHRINK`, :data:`KEEP` or :data:`FRESH` for each parameter of ``params`` (the
    network's inexact arrays, or their shapes), by the parts ``resets`` names.

    Raises:
      ValueError: a part that names no parameter of the network (with the parts it has).
    """
    prefixes = [*resets.shrink, *resets.keep]
    names = [f"resets.shrink[{i}]" for i in range(len(resets.shrink))] + [
        f"resets.keep[{i}]" for i in range(len(resets.keep))
    ]
    labels = group_labels(prefixes, params, names)
    shrunk = len(resets.shrink)

    def what(label: str) -> str:
        if not label.startswith("groups["):
            return FRESH
        return SHRINK if int(label[len("groups[") : -1]) < shrunk else KEEP

    return jax.tree.map(what, labels)


def check_parts(resets: ResetSpec | None, network: Any) -> None:
    """Raise :class:`ValueError` where ``resets`` names a part ``network`` (or its shapes,
    ``eqx.filter_eval_shape``) does not have, before anything is allocated."""
    if resets is not None:
        part_labels(resets, eqx.filter(network, is_parameter))


def reset_network(resets: ResetSpec, network: Any, fresh: Any) -> Any:
    """``network`` after a reset toward ``fresh`` (a fresh initialisation of the same network):
    each parameter shrunk and perturbed, kept, or taken from ``fresh`` (see the module doc);
    everything that is not a parameter is ``network``'s."""
    params, static = eqx.partition(network, eqx.is_inexact_array)
    fresh_params = eqx.filter(fresh, eqx.is_inexact_array)
    labels = part_labels(resets, params)
    old, new = resets.shrink_factor, resets.perturb_factor

    def one(label: str, theta: Any, theta_fresh: Any) -> Any:
        if label == KEEP:
            return theta
        if label == FRESH:
            return theta_fresh.astype(theta.dtype)
        return (old * theta + new * theta_fresh).astype(theta.dtype)

    return eqx.combine(jax.tree.map(one, labels, params, fresh_params), static)


def updates_since_reset(resets: ResetSpec, updates: Any) -> jax.Array:
    """Learner updates done since the last reset at ``updates`` done (all of them before the
    first reset); resets as :meth:`zoo.spec.ResetSpec.due` places them."""
    updates = jnp.asarray(updates, jnp.int32)
    first = resets.first_update
    done = jnp.maximum(updates - first, 0) // resets.every
    if resets.count is not None:
        done = jnp.minimum(done, resets.count - 1)
    last = first + done * resets.every
    return jnp.where(updates >= first, updates - last, updates)


def resets_done(resets: ResetSpec, updates: Any) -> jax.Array:
    """How many resets have happened after ``updates`` learner updates (the ``resets``
    metric)."""
    done = resets.done_after(jnp.asarray(updates, jnp.int32))
    return done if resets.count is None else jnp.minimum(done, resets.count)
