"""Scalar schedules of a step count (ε over transitions; β and learning rates over updates).

Each factory takes its validated config and returns ``fn(step) -> float array``, usable inside
``jit`` (``step`` may be a traced integer) and by optax as a learning-rate schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax.numpy as jnp

from zoo import registry
from zoo.spec import ConstantSchedule, ExponentialSchedule, GeometricSchedule, LinearSchedule

ScheduleFn = Callable[[jnp.ndarray | int], jnp.ndarray]

__all__ = ["ScheduleFn", "build_schedule", "constant", "exponential", "geometric", "linear"]


def build_schedule(config: object) -> ScheduleFn:
    """The schedule function of a validated schedule config (any registered kind)."""
    return registry.get("schedule", config.kind)(config)  # type: ignore[attr-defined]


@registry.register("schedule", "constant")
def constant(config: ConstantSchedule) -> ScheduleFn:
    """The same value at every step."""
    value = float(config.value)
    return lambda step: jnp.full((), value, jnp.float32)


@registry.register("schedule", "linear")
def linear(config: LinearSchedule) -> ScheduleFn:
    """Held at ``start`` until ``begin``, linear to ``end`` over ``steps``, then held."""
    start, end, steps, begin = float(config.start), float(config.end), config.steps, config.begin

    def fn(step: jnp.ndarray | int) -> jnp.ndarray:
        frac = jnp.clip((jnp.asarray(step, jnp.float32) - begin) / steps, 0.0, 1.0)
        return jnp.asarray(start + frac * (end - start), jnp.float32)

    return fn


@registry.register("schedule", "exponential")
def exponential(config: ExponentialSchedule) -> ScheduleFn:
    """``start · rate^(step / steps)``, never past ``end``; with ``asymptote``,
    ``end + (start − end) · rate^(step / steps)``."""
    start, rate, steps, end = float(config.start), float(config.rate), config.steps, config.end

    if config.asymptote:
        gap = start - float(end)

        def toward(step: jnp.ndarray | int) -> jnp.ndarray:
            factor = rate ** (jnp.asarray(step, jnp.float32) / steps)
            return jnp.asarray(end + gap * factor, jnp.float32)

        return toward

    def fn(step: jnp.ndarray | int) -> jnp.ndarray:
        value = start * rate ** (jnp.asarray(step, jnp.float32) / steps)
        if end is not None:
            value = jnp.maximum(value, end) if rate < 1 else jnp.minimum(value, end)
        return jnp.asarray(value, jnp.float32)

    return fn


@registry.register("schedule", "geometric")
def geometric(config: GeometricSchedule) -> ScheduleFn:
    """``start·(end/start)^min(step/steps, 1)``, or of ``1 − value`` with ``complement``
    (BBF's ``exponential_decay_scheduler``)."""
    start, end, steps = float(config.start), float(config.end), config.steps
    if config.complement:
        start, end = 1.0 - start, 1.0 - end
    log_start, log_end = math.log(start), math.log(end)

    def fn(step: jnp.ndarray | int) -> jnp.ndarray:
        frac = jnp.clip(jnp.asarray(step, jnp.float32) / steps, 0.0, 1.0)
        value = jnp.exp(log_start + frac * (log_end - log_start))
        return jnp.asarray(1.0 - value if config.complement else value, jnp.float32)

    return fn
