"""Optax optimizers built from the spec; learning-rate schedules count learner updates."""

from __future__ import annotations

import optax

from zoo import registry
from zoo.schedules import build_schedule
from zoo.spec import Adam, RAdam, RmsProp

__all__ = ["adam", "build_optimizer", "radam", "rmsprop"]


def build_optimizer(config: object) -> optax.GradientTransformation:
    """The optax transformation of a validated optimizer config (any registered kind)."""
    return registry.get("optimizer", config.kind)(config)  # type: ignore[attr-defined]


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
