"""Component registry: one table per axis of the algorithm space.

Every YAML ``kind`` names an entry in one of these tables. Built-in components register themselves
when their modules are imported; a user's own component is registered the same way, from a plugin
module imported explicitly (``zoo --plugin MODULE`` or the ``ZOO_PLUGINS`` environment variable),
never from a string inside a YAML file::

    import pydantic
    import zoo

    class LogCosh(zoo.spec.Component):
        kind: Literal["log_cosh"] = "log_cosh"

    @zoo.registry.register("td", "log_cosh", config=LogCosh)
    def log_cosh(config):
        return lambda td: jnp.log(jnp.cosh(td))

After that, ``td: log_cosh`` is valid in every YAML entry. Registering a name twice is an error;
an unknown name raises :class:`UnknownComponentError` with the closest registered names.

This module imports neither JAX nor Pydantic, so listing and validation stay instant.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "AXES",
    "DuplicateComponentError",
    "Entry",
    "UnknownComponentError",
    "config_model",
    "entry",
    "get",
    "list_components",
    "names",
    "register",
    "suggest",
    "unregister",
]

#: The axes of the algorithm space, each with one table of named components.
AXES: dict[str, str] = {
    "bootstrap": "target policy at the next state: max, double, soft (the 'targets' axis)",
    "head": "value head: q, categorical, quantile",
    "torso": "feature extractor: auto, mlp, nature_cnn, impala_cnn, minatar_cnn",
    "core": "recurrent core between torso and head: lstm",
    "head_loss": "per-head target and loss of the value head (same names as `head`)",
    "value_transform": "invertible value rescaling pair h, h^-1: identity, signed_hyperbolic",
    "regularizer": "extra loss term: none, q_value",
    "priority": "replay priority rule: abs_td, abs_loss, max_mean",
    "td": "per-element TD loss: squared, huber, cross_entropy",
    "optimizer": "optax optimizer: adam, adamw, rmsprop, radam",
    "replay": "replay kind: uniform, prioritized",
    "schedule": "scalar schedule of a step count: constant, linear, exponential, geometric",
    "augmentation": "observation augmentation of sampled transition batches: random_shift",
    "auxiliary": "auxiliary loss added to every item's TD loss, with its parameters: spr",
}

# Modules whose import registers the built-in factories of each axis.
_BUILTIN_MODULES = (
    "zoo.augmentation",
    "zoo.losses",
    "zoo.networks",
    "zoo.optimizers",
    "zoo.schedules",
    "zoo.replay.kinds",
)

F = TypeVar("F", bound=Callable[..., Any])


class UnknownComponentError(KeyError):
    """An axis or component name that is not registered."""

    def __init__(self, axis: str, name: str, known: list[str]):
        self.axis, self.name, self.known = axis, name, known
        hint = suggest(name, known)
        message = f"unknown {axis} {name!r}"
        if hint:
            message += f"; did you mean {hint!r}?"
        message += f" Registered {axis} components: {', '.join(sorted(known)) or '(none)'}."
        super().__init__(message)

    def __str__(self) -> str:  # KeyError quotes its message otherwise
        return str(self.args[0])


class DuplicateComponentError(ValueError):
    """A name registered twice on the same axis."""


@dataclass(frozen=True)
class Entry:
    """One registered component.

    Attributes:
      axis: the table it lives in.
      name: its YAML ``kind``.
      factory: builds the component from its validated config.
      config: the Pydantic model of its YAML block (``None`` for built-ins, whose models are part
        of :mod:`zoo.spec`'s discriminated unions).
      summary: first line of the factory's docstring.
    """

    axis: str
    name: str
    factory: Callable[..., Any]
    config: Any = None
    summary: str = ""


_TABLES: dict[str, dict[str, Entry]] = {axis: {} for axis in AXES}
_builtins_loaded = False


def suggest(name: str, candidates: list[str] | tuple[str, ...]) -> str | None:
    """The closest candidate to a misspelt ``name``, or ``None``."""
    matches = difflib.get_close_matches(str(name), list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _table(axis: str) -> dict[str, Entry]:
    if axis not in _TABLES:
        raise UnknownComponentError("axis", axis, list(_TABLES))
    return _TABLES[axis]


def register(axis: str, name: str, *, config: Any = None) -> Callable[[F], F]:
    """Decorator registering ``factory`` as component ``name`` of ``axis``.

    Args:
      axis: one of :data:`AXES`.
      name: the YAML ``kind``.
      config: a Pydantic model (subclass of :class:`zoo.spec.Component`) validating the YAML block
        of a component that is not built in; required for user components so that the spec can
        validate them.

    Raises:
      DuplicateComponentError: if ``name`` is already registered on ``axis``.
    """
    table = _table(axis)

    def decorator(factory: F) -> F:
        if not str(getattr(factory, "__module__", "")).startswith("zoo."):
            _load_builtins()  # a user component may not take a built-in name
        if name in table:
            raise DuplicateComponentError(
                f"{axis} {name!r} is already registered (by {table[name].factory.__module__}); "
                "choose another name, components are never silently replaced"
            )
        doc = (factory.__doc__ or "").strip().splitlines()
        table[name] = Entry(axis, name, factory, config, doc[0] if doc else "")
        return factory

    return decorator


def unregister(axis: str, name: str) -> Entry:
    """Remove component ``name`` from ``axis`` and return its entry.

    For tests and interactive sessions that register a component for a while; a spec validated
    while it was registered keeps its config object, but building that spec afterwards raises
    :class:`UnknownComponentError`. Built-in components are not meant to be removed.

    Raises:
      UnknownComponentError: if ``name`` is not registered on ``axis``.
    """
    table = _table(axis)
    if name not in table:
        raise UnknownComponentError(axis, name, list(table))
    return table.pop(name)


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for module in _BUILTIN_MODULES:
            importlib.import_module(module)


def entry(axis: str, name: str) -> Entry:
    """The registered entry ``name`` of ``axis`` (built-ins are loaded on first use)."""
    table = _table(axis)
    if name not in table:
        _load_builtins()
    if name not in table:
        raise UnknownComponentError(axis, name, list(table))
    return table[name]


def get(axis: str, name: str) -> Callable[..., Any]:
    """The factory registered as ``name`` on ``axis``."""
    return entry(axis, name).factory


def config_model(axis: str, name: str) -> Any:
    """The config model of a user-registered component, or ``None`` (no JAX import)."""
    found = _TABLES.get(axis, {}).get(name)
    return found.config if found else None


def names(axis: str, pattern: str = "*", *, load: bool = True) -> list[str]:
    """Sorted names on ``axis`` matching the shell-style wildcard ``pattern``."""
    if load:
        _load_builtins()
    return sorted(n for n in _table(axis) if fnmatch.fnmatchcase(n, pattern))


def list_components(pattern: str = "*") -> Iterator[Entry]:
    """Every registered entry whose ``axis/name`` or ``name`` matches ``pattern``."""
    _load_builtins()
    for axis, table in _TABLES.items():
        for name in sorted(table):
            if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(f"{axis}/{name}", pattern):
                yield table[name]
