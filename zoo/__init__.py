"""zoo: a declarative, config-driven zoo of value-based deep RL algorithms in JAX.

An algorithm is a YAML entry (``algorithms.yaml``); the registry turns it into Equinox losses and
networks. The public API::

    import zoo
    spec = zoo.load_algorithm("mdqn", overrides={"loss.n_step": 3})
    net = zoo.build_network(spec, observation_shape=(4,), num_actions=2, key=key)
    loss_fn = zoo.build_loss(spec)
    loss, aux = loss_fn(online=net, target=target_net, batch=batch, key=key, step=0)

Names are resolved lazily, so ``import zoo`` (and ``zoo validate``) does not start JAX.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Submodules reachable as attributes (``zoo.reference.load_series``, ``zoo.compare.compare``).
_MODULES = ("compare", "reference", "registry", "reproduce", "spec")

_EXPORTS = {
    "AlgorithmSpec": "zoo.spec",
    "Preset": "zoo.spec",
    "SpecError": "zoo.spec",
    "load_algorithm": "zoo.spec",
    "load_algorithms_file": "zoo.spec",
    "load_preset": "zoo.spec",
    "algorithm_names": "zoo.spec",
    "preset_names": "zoo.spec",
    "describe": "zoo.spec",
    "Transition": "zoo.types",
    "FutureSteps": "zoo.types",
    "SequenceBatch": "zoo.types",
    "NetworkOutput": "zoo.types",
    "LossAux": "zoo.types",
    "build_loss": "zoo.losses",
    "Loss": "zoo.losses",
    "build_network": "zoo.networks",
    "build_optimizer": "zoo.optimizers",
    "build_schedule": "zoo.schedules",
    "train": "zoo.runs",
    "train_seeds": "zoo.runs.seeds",
    "load_policy": "zoo.runs.evaluate",
    "evaluate_run": "zoo.runs.evaluate",
    "Learner": "zoo.learner",
    "load_series": "zoo.reference",
}

__all__ = [  # noqa: RUF022 - grouped as in _EXPORTS
    "AlgorithmSpec",
    "Preset",
    "SpecError",
    "load_algorithm",
    "load_algorithms_file",
    "load_preset",
    "algorithm_names",
    "preset_names",
    "describe",
    "Transition",
    "FutureSteps",
    "SequenceBatch",
    "NetworkOutput",
    "LossAux",
    "build_loss",
    "Loss",
    "build_network",
    "build_optimizer",
    "build_schedule",
    "train",
    "train_seeds",
    "load_policy",
    "evaluate_run",
    "Learner",
    "load_series",
    "compare",
    "reproduce",
    "reference",
    "registry",
    "spec",
    "__version__",
]

if TYPE_CHECKING:  # pragma: no cover
    from zoo import compare, reference, registry, reproduce, spec
    from zoo.learner import Learner
    from zoo.losses import Loss, build_loss
    from zoo.networks import build_network
    from zoo.optimizers import build_optimizer
    from zoo.reference import load_series
    from zoo.runs import train
    from zoo.runs.evaluate import evaluate_run, load_policy
    from zoo.runs.seeds import train_seeds
    from zoo.schedules import build_schedule
    from zoo.spec import (
        AlgorithmSpec,
        Preset,
        SpecError,
        algorithm_names,
        describe,
        load_algorithm,
        load_algorithms_file,
        load_preset,
        preset_names,
    )
    from zoo.types import FutureSteps, LossAux, NetworkOutput, SequenceBatch, Transition


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"zoo.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


assert set(__all__) == {*_EXPORTS, *_MODULES, "__version__"}


def __dir__() -> list[str]:
    return __all__
