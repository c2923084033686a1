"""Optax optimizers built from the spec; learning-rate schedules count learner updates."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import optax

from zoo import registry
from zoo.schedules import build_schedule
from zoo.spec import Adam, AdamW, RAdam, RmsProp

__all__ = [
    "MAIN",
    "adam",
    "adamw",
    "build_optimizer",
    "check_groups",
    "group_labels",
    "is_parameter",
    "parameter_path",
    "radam",
    "rmsprop",
]


def build_optimizer(config: object) -> optax.GradientTransformation:
    """The optax transformation of a validated optimizer config (any registered kind).

    With ``groups``, each group's parameters (:class:`zoo.spec.ParamGroup`) are trained by its
    own optimizer and the rest by this one (``optax.multi_transform``); each optimizer clips its
    own parameters' gradients where it sets ``max_grad_norm``.
    """
    main = registry.get("optimizer", config.kind)(config)  # type: ignore[attr-defined]
    groups = list(getattr(config, "groups", None) or ())
    if not groups:
        return main
    transforms = {MAIN: main}
    for i, group in enumerate(groups):
        transforms[f"groups[{i}]"] = build_optimizer(group.optimizer)
    prefixes = [group.params for group in groups]
    return optax.multi_transform(transforms, functools.partial(group_labels, prefixes))


#: The label of the parameters no group claims (the main optimizer's).
MAIN = "main"


def parameter_path(path: tuple[Any, ...]) -> str:
    """A parameter's dotted path from its pytree key path (``head.fraction.weight``,
    ``streams.mlp.layers.0.weight``)."""
    parts = []
    for entry in path:
        for attribute in ("name", "key", "idx"):
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
        else:
            parts.append(str(entry))
    return ".".join(parts)


def group_labels(prefixes: Sequence[str], params: Any, names: Sequence[str] | None = None) -> Any:
    """The label of each parameter of ``params``: ``groups[i]`` for the first group whose dotted
    path it lies under, else :data:`MAIN`.

    Args:
      prefixes: the groups' dotted paths.
      params: the network's parameters (or their shapes).
      names: how an error names each group (default ``optimizer.groups[i].params``).

    Raises:
      ValueError: a group names no parameter of the network (with the parts it has).
    """
    claimed = [0] * len(prefixes)

    def label(path: tuple[Any, ...], _: Any) -> str:
        name = parameter_path(path)
        for i, prefix in enumerate(prefixes):
            if name == prefix or name.startswith(prefix + "."):
                claimed[i] += 1
                return f"groups[{i}]"
        return MAIN

    labels = jax.tree_util.tree_map_with_path(label, params)
    for i, count in enumerate(claimed):
        if count == 0:
            paths = [parameter_path(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
            parts = sorted({n.rsplit(".", 1)[0] for n in paths})
            name = names[i] if names is not None else f"optimizer.groups[{i}].params"
            raise ValueError(
                f"{name} {prefixes[i]!r} names no parameter of the network; its parts with "
                f"parameters are: {', '.join(parts)}"
            )
    return labels


def check_groups(config: object, network: Any) -> None:
    """Raise :class:`ValueError` where a group of ``config`` names no parameter of ``network``,
    a network or its shapes (``eqx.filter_eval_shape``), before anything is allocated."""
    groups = list(getattr(config, "groups", None) or ())
    if groups:
        group_labels([g.params for g in groups], eqx.filter(network, is_parameter))


def is_parameter(x: Any) -> bool:
    """A floating array, or the shape of one."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return bool(jax.numpy.issubdtype(x.dtype, jax.numpy.inexact))
    return eqx.is_inexact_array(x)


def _with_clipping(
    opt: optax.GradientTransformation, max_grad_norm: float | None
) -> optax.GradientTransformation:
    if max_grad_norm is None:
        return opt
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)


@registry.register("optimizer", "adam")
def adam(config: Adam) -> optax.GradientTransformation:
    """Adam (Kingma & Ba 2015), ε outside the square root as in Dopamine and torch."""
    opt = optax.adam(
        learning_rate=build_schedule(config.learning_rate),
        b1=config.b1,
        b2=config.b2,
        eps=config.eps,
    )
    return _with_clipping(opt, config.max_grad_norm)


@registry.register("optimizer", "adamw")
def adamw(config: AdamW) -> optax.GradientTransformation:
    """AdamW (Loshchilov & Hutter 2019), ``optax.adamw``: decoupled weight decay scaled by the
    learning rate, on the matrices only (BBF's mask, ``ndim != 1``) or on every parameter."""
    mask = _matrices if config.decay == "matrices" else None
    opt = optax.adamw(
        learning_rate=build_schedule(config.learning_rate),
        b1=config.b1,
        b2=config.b2,
        eps=config.eps,
        weight_decay=config.weight_decay,
        mask=mask,
    )
    return _with_clipping(opt, config.max_grad_norm)


def _matrices(params: Any) -> Any:
    """``True`` for every parameter that is not a vector (BBF's ``x.ndim != 1``)."""
    return jax.tree.map(lambda x: x.ndim != 1, params)


@registry.register("optimizer", "rmsprop")
def rmsprop(config: RmsProp) -> optax.GradientTransformation:
    """RMSProp; ε inside the square root (optax), as dqn_zoo's Nature DQN uses it."""
    opt = optax.rmsprop(
        learning_rate=build_schedule(config.learning_rate),
        decay=config.decay,
        eps=config.eps,
        centered=config.centered,
        momentum=config.momentum,
    )
    return _with_clipping(opt, config.max_grad_norm)


@registry.register("optimizer", "radam")
def radam(config: RAdam) -> optax.GradientTransformation:
    """Rectified Adam (Liu et al. 2020), ``optax.radam``; with ``max_grad_norm`` the gradients
    are clipped first, as PQN's ``optax.chain(clip_by_global_norm, radam)``."""
    opt = optax.radam(
        learning_rate=build_schedule(config.learning_rate),
        b1=config.b1,
        b2=config.b2,
        eps=config.eps,
        threshold=config.threshold,
    )
    return _with_clipping(opt, config.max_grad_norm)
