"""The base of every spec model, components, axis field types, and the rules hook.

A spec is a tree of frozen Pydantic models. Each *axis* of the algorithm space (``docs/design.md``)
is a field whose type :func:`axis` builds: the built-in components as a discriminated union on
``kind``, plus the components users register (:func:`zoo.registry.register` with ``config=``).
The axis declarations are the single statement of where each axis lives: :func:`axis_paths`
derives the field paths from them.

Cross-field rules live with the part that imposes them: a model's :meth:`Model.spec_problems`
receives the whole :class:`~zoo.spec.algorithm.AlgorithmSpec` and yields ``(path, message)`` for
each combination it cannot work with (a head names the td losses it can be trained with, a
bootstrap that needs a temperature says so). A user's component gets the same hook.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, WrapValidator

from zoo import registry

if TYPE_CHECKING:  # pragma: no cover
    from zoo.spec.algorithm import AlgorithmSpec

__all__ = [
    "AxisMarker",
    "Component",
    "Model",
    "a_or_an",
    "at",
    "axis",
    "axis_paths",
    "path_within",
    "union_tags",
    "walk",
]


class _Boolean:
    """A YAML boolean given where a number belongs; no number validator accepts it, and its repr
    is the YAML the user wrote (``got true``)."""

    def __init__(self, value: bool):
        self.value = value

    def __repr__(self) -> str:
        return "true" if self.value else "false"


def _types_of(annotation: Any) -> set[Any]:
    """The plain types an annotation admits (``Annotated`` and unions unwrapped)."""
    if typing.get_origin(annotation) is Annotated:
        return _types_of(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return set().union(*(_types_of(a) for a in typing.get_args(annotation)))
    return {annotation}


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> frozenset[str]:
    """Fields of ``model`` that take a number and not a boolean."""
    out = set()
    for name, field in model.model_fields.items():
        admitted = _types_of(field.annotation)
        if admitted & {int, float} and bool not in admitted:
            out.add(name)
    return frozenset(out)


class Model(BaseModel):
    """Base of every spec model: frozen, unknown keys forbidden, no NaN or infinite values, and
    no boolean where a number belongs (Pydantic would read ``n_step: true`` as 1)."""

    # allow_inf_nan=False: no spec value may be NaN or infinite (a learning rate of .nan or a
    # discount of .inf validates field by field and then trains nothing)
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False
    )

    @pydantic.model_validator(mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            numeric = _numeric_fields(cls)
            if any(isinstance(data.get(name), bool) for name in numeric):
                data = {
                    k: _Boolean(v) if k in numeric and isinstance(v, bool) else v
                    for k, v in data.items()
                }
        return data

    def spec_problems(self, spec: AlgorithmSpec) -> Iterable[tuple[str, str]]:
        """``(field path, message)`` for each way the rest of ``spec`` conflicts with this part.

        Called once per model instance of a validated algorithm (every component of every axis,
        and the section models); the default has no rules. Paths are dotted from the spec's root
        (``loss.td``), so the message points at the field to change.
        """
        del spec
        return ()

    def unused_settings(self, spec: AlgorithmSpec) -> Iterable[str]:
        """Dotted paths of settings that ``spec`` never reads because of this part (a rollout
        learner has no replay; a network without noise has no σ₀): ``zoo show`` hides them.
        The default names none."""
        del spec
        return ()


class Component(Model):
    """Base of every component config: a ``kind`` naming a registry entry plus its parameters.

    A user's own component subclasses this with ``kind: Literal["name"]`` and passes the class as
    ``config=`` to :func:`zoo.registry.register`; it may override :meth:`Model.spec_problems` to
    state what it needs of the rest of the spec.
    """

    kind: str = Field(description="registry name of the component")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        field = cls.model_fields["kind"]
        if not field.description:
            doc = (cls.__doc__ or "").strip().splitlines()
            field.description = f"{field.default}: {doc[0]}" if doc else "component kind"
            cls.model_rebuild(force=True, raise_errors=False)  # forward refs: rebuilt later


@dataclass(frozen=True)
class AxisMarker:
    """Metadata on an axis field's type: the registry axis its components come from."""

    axis: str


def axis(axis_name: str, builtin: Any, neutral: str | None, numbers: str | None = None) -> Any:
    """An axis field type: the built-in discriminated union, plus registered user components.

    Accepts the shorthand of a bare name (``bootstrap: double``) for ``{kind: double}``, maps
    ``null`` to the axis' neutral component where it has one, and, where ``numbers`` names a
    kind, a bare number ``x`` to ``{kind: numbers, value: x}``.
    """

    tags = union_tags(builtin)

    def validate(value: Any, handler: Any) -> Any:
        if value is None and neutral is not None:
            value = neutral
        if numbers and isinstance(value, int | float) and not isinstance(value, bool):
            value = {"kind": numbers, "value": value}
        if isinstance(value, str):
            value = {"kind": value}
        if isinstance(value, Mapping) and value.get("kind") not in tags:
            user = registry.config_model(axis_name, str(value.get("kind")))
            if user is not None:
                return user.model_validate(dict(value))
        return handler(value)

    inner = Annotated[builtin, Field(discriminator="kind")] if len(tags) > 1 else builtin
    return Annotated[pydantic.SerializeAsAny[inner], WrapValidator(validate), AxisMarker(axis_name)]


def union_tags(union: Any) -> list[str]:
    """The ``kind`` of each member of a union of components (or of one component)."""
    members = getattr(union, "__args__", (union,))
    return [m.model_fields["kind"].default for m in members]


def _markers(annotation: Any) -> list[AxisMarker]:
    found = [m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, AxisMarker)]
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _markers(arg)
    return found


def _submodels(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        out += _submodels(arg)
    return out


def axis_paths(model: type[BaseModel]) -> dict[tuple[str, ...], str]:
    """Field path → axis name of every axis field under ``model``, read off the declarations
    (``{("network", "head"): "head", ("optimizer",): "optimizer", ...}``); schedule fields are
    axes too, wherever they are."""
    out: dict[tuple[str, ...], str] = {}
    for name, field in model.model_fields.items():
        markers = [m for m in field.metadata if isinstance(m, AxisMarker)]
        markers += _markers(field.annotation)
        if markers:
            out[(name,)] = markers[0].axis
            continue
        for sub in _submodels(field.annotation):
            if issubclass(sub, Component):
                continue
            for path, axis_name in axis_paths(sub).items():
                out.setdefault((name, *path), axis_name)
    return out


def walk(model: BaseModel) -> Iterable[Model]:
    """Every :class:`Model` in the tree of ``model``, parents before children, in field order."""
    if isinstance(model, Model):
        yield model
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from walk(value)


def at(path: str, field: str) -> str:
    """``path.field``, or ``path`` where ``field`` is empty."""
    return f"{path}.{field}" if field else path


def a_or_an(word: str) -> str:
    """The indefinite article of ``word`` in messages (``an iqn head``, ``a quantile head``)."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def path_within(inner: str, outer: str) -> bool:
    """Whether the dotted path ``inner`` lies under ``outer`` (or is it): ``torso.stacks.0``
    lies within ``torso``; ``torso_norm`` does not."""
    return inner == outer or inner.startswith(outer + ".")
