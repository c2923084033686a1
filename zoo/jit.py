"""``async_jit``: ``jax.jit`` over a function of Equinox modules, with asynchronous dispatch.

``eqx.filter_jit`` blocks until every call has finished (it waits on a marker to surface
Equinox runtime errors), so the host cannot run ahead of the device: in the training loop it
serialised Python, environment steps and device work (measured on Breakout: an update's call
returned only after its ~17 ms had run). ``async_jit`` keeps ``jax.jit``'s asynchronous
dispatch: array leaves (``jax.Array`` and ``numpy.ndarray``) are traced, every other leaf
(functions, Python numbers, ``None``) is static and part of the cache key, and the static part
of the output is recorded at trace time and recombined on return.

The training loop's drivers (:mod:`zoo.drivers`), :mod:`zoo.seeds` and the benchmarks use it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax

__all__ = ["async_jit"]


def async_jit(fn: Callable[..., Any], donate_argnums: Sequence[int] = ()) -> Callable[..., Any]:
    """``fn`` jitted over its array leaves; the positional arguments in ``donate_argnums`` are
    donated (their buffers are reused for the outputs; do not use them after the call).

    Non-array leaves are static: a new value retraces, so pass changing numbers as arrays.
    Keyword arguments are not supported (positional only, as the loop calls them). The result's
    ``lower(*args)`` lowers ahead of time (array leaves may be ``jax.ShapeDtypeStruct``).
    """
    donate = frozenset(donate_argnums)
    out_static: dict[Any, Any] = {}

    @functools.partial(jax.jit, static_argnums=0, donate_argnums=1)
    def inner(key: Any, donated: list[Any], kept: list[Any]) -> Any:
        treedefs, statics, layout = key
        args = []
        it_d, it_k = iter(donated), iter(kept)
        for treedef, static, dyn_mask, is_donated in zip(
            treedefs, statics, layout[0], layout[1], strict=True
        ):
            source = it_d if is_donated else it_k
            st = iter(static)
            leaves = [next(source) if dyn else next(st) for dyn in dyn_mask]
            args.append(jax.tree.unflatten(treedef, leaves))
        out = fn(*args)
        dynamic, static_out = eqx.partition(out, eqx.is_array)
        out_static[key] = static_out
        return dynamic

    def split(args: tuple[Any, ...]) -> tuple[Any, list[Any], list[Any]]:
        treedefs, statics, masks, flags = [], [], [], []
        donated: list[Any] = []
        kept: list[Any] = []
        for i, arg in enumerate(args):
            leaves, treedef = jax.tree.flatten(arg)
            mask = tuple(_traced(x) for x in leaves)
            dyn = [x for x, m in zip(leaves, mask, strict=True) if m]
            (donated if i in donate else kept).extend(dyn)
            treedefs.append(treedef)
            statics.append(tuple(x for x, m in zip(leaves, mask, strict=True) if not m))
            masks.append(mask)
            flags.append(i in donate)
        key = (tuple(treedefs), tuple(statics), (tuple(masks), tuple(flags)))
        return key, donated, kept

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        key, donated, kept = split(args)
        dynamic = inner(key, donated, kept)
        return eqx.combine(dynamic, out_static[key])

    def lower(*args: Any) -> Any:
        """Ahead-of-time lowering for the same arguments, as ``jax.jit(...).lower``: array
        leaves may be ``jax.ShapeDtypeStruct``. ``.compile()`` on the result compiles the
        program that a call with arrays of those shapes and dtypes runs, and JAX reuses that
        compilation for the call (its ``memory_analysis()`` is that program's)."""
        return inner.lower(*split(args))

    call.lower = lower  # type: ignore[attr-defined]
    return call


def _traced(leaf: Any) -> bool:
    """Whether a leaf is traced (an array, or an array's shape and dtype for lowering)."""
    return eqx.is_array(leaf) or isinstance(leaf, jax.ShapeDtypeStruct)
