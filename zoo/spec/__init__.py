"""Algorithm specs: frozen Pydantic models of the YAML vocabulary, and how YAML becomes one.

An algorithm is a point in a product of orthogonal axes (``docs/design.md``). Each axis is one model
here; components with parameters are discriminated unions on ``kind``. Every model forbids unknown
keys and every field carries a ``description`` (read by ``zoo show``). Loading supports ``extends:``
(deep merge, lists replace, cycles detected) and dotted overrides (``loss.n_step=3``).

Errors are :class:`SpecError`: one :class:`Problem` per mistake, each naming the YAML file, the
entry, the field path, the bad value, the allowed values and, for a misspelling, the closest valid
name. This package imports neither JAX nor the loss code, so validation is instant.

Each fact is stated once, in the module whose name says what it holds:

- :mod:`zoo.spec.base`: the base models, axis field types (:func:`~zoo.spec.base.axis`; the axis
  paths are derived from them) and the rules hook :meth:`~zoo.spec.base.Model.spec_problems`;
- :mod:`zoo.spec.schedules`, :mod:`zoo.spec.network`, :mod:`zoo.spec.loss`,
  :mod:`zoo.spec.replay`, :mod:`zoo.spec.optimizers`, :mod:`zoo.spec.augmentation`: the
  components of each axis, each with the cross-field rules it imposes (a head names the td
  losses that train it);
- :mod:`zoo.spec.algorithm`: :class:`AlgorithmSpec`, which gathers every part's problems;
- :mod:`zoo.spec.presets`: presets, budgets and their references;
- :mod:`zoo.spec.files`, :mod:`zoo.spec.overrides`, :mod:`zoo.spec.loading`: reading YAML,
  ``extends:`` and overrides, the public loading functions;
- :mod:`zoo.spec.translate`: Pydantic's errors as readable problems;
- :mod:`zoo.spec.describe`: ``zoo show``.

Units: every count of steps is in *transitions* (agent steps summed over environments), except
``target_update_period`` and the steps of schedules evaluated by the learner (β, learning rate),
which are *learner updates*.
"""

from __future__ import annotations

from zoo.spec.algorithm import AlgorithmSpec, ScheduleSpec, spec_problems, unused_settings
from zoo.spec.augmentation import Augmentation, RandomShift
from zoo.spec.auxiliary import Auxiliary, Spr
from zoo.spec.base import Component, Model, axis_paths
from zoo.spec.describe import describe
from zoo.spec.errors import Problem, SpecError
from zoo.spec.files import (
    MAX_NESTING,
    catalogue_path,
    data_dir,
    is_package_data,
    package_data_dir,
    parse_yaml,
    presets_dir,
    read_yaml,
    too_deep,
)
from zoo.spec.loading import (
    MAX_EXTENDS_DEPTH,
    PRESET_PREFIX,
    algorithm_for,
    algorithm_names,
    is_preset,
    load_algorithm,
    load_algorithms_file,
    load_preset,
    looks_like_path,
    preset_bases,
    preset_names,
)
from zoo.spec.loss import (
    AbsLossPriority,
    AbsTdPriority,
    CrossEntropyTd,
    DoubleBootstrap,
    HuberTd,
    IdentityTransform,
    LossSpec,
    MaxBootstrap,
    MaxMeanPriority,
    Munchausen,
    NoRegularizer,
    QValueRegularizer,
    ScaleTransform,
    SignedHyperbolicTransform,
    SoftBootstrap,
    SquaredTd,
)
from zoo.spec.network import (
    PARAMETER_COPIES,
    AutoTorso,
    CategoricalHead,
    FqfHead,
    Head,
    ImpalaCnnTorso,
    ImplicitQuantileHead,
    LstmCore,
    MinatarCnnTorso,
    MlpTorso,
    NatureCnnTorso,
    NetworkSpec,
    QHead,
    QuantileHead,
    network_parameter_lower_bound,
    physical_memory,
)
from zoo.spec.optimizers import Adam, AdamW, Optimizer, RAdam, RmsProp
from zoo.spec.overrides import OVERRIDES_SOURCE, apply_overrides, parse_overrides
from zoo.spec.presets import Budget, EnvSpec, Preset, Reference
from zoo.spec.replay import ReplaySpec, SequenceSpec
from zoo.spec.resets import ResetSpec
from zoo.spec.rollout import RolloutSpec
from zoo.spec.schedules import (
    ConstantSchedule,
    ExponentialSchedule,
    GeometricSchedule,
    LinearSchedule,
    Schedule,
)

__all__ = [
    "MAX_EXTENDS_DEPTH",
    "MAX_NESTING",
    "OVERRIDES_SOURCE",
    "PARAMETER_COPIES",
    "PRESET_PREFIX",
    "AbsLossPriority",
    "AbsTdPriority",
    "Adam",
    "AdamW",
    "AlgorithmSpec",
    "Augmentation",
    "AutoTorso",
    "Auxiliary",
    "Budget",
    "CategoricalHead",
    "Component",
    "ConstantSchedule",
    "CrossEntropyTd",
    "DoubleBootstrap",
    "EnvSpec",
    "ExponentialSchedule",
    "FqfHead",
    "GeometricSchedule",
    "Head",
    "HuberTd",
    "IdentityTransform",
    "ImpalaCnnTorso",
    "ImplicitQuantileHead",
    "LinearSchedule",
    "LossSpec",
    "LstmCore",
    "MaxBootstrap",
    "MaxMeanPriority",
    "MinatarCnnTorso",
    "MlpTorso",
    "Model",
    "Munchausen",
    "NatureCnnTorso",
    "NetworkSpec",
    "NoRegularizer",
    "Optimizer",
    "Preset",
    "Problem",
    "QHead",
    "QValueRegularizer",
    "QuantileHead",
    "RAdam",
    "RandomShift",
    "Reference",
    "ReplaySpec",
    "ResetSpec",
    "RmsProp",
    "RolloutSpec",
    "ScaleTransform",
    "Schedule",
    "ScheduleSpec",
    "SequenceSpec",
    "SignedHyperbolicTransform",
    "SoftBootstrap",
    "SpecError",
    "Spr",
    "SquaredTd",
    "algorithm_for",
    "algorithm_names",
    "apply_overrides",
    "axis_paths",
    "catalogue_path",
    "data_dir",
    "describe",
    "is_package_data",
    "is_preset",
    "load_algorithm",
    "load_algorithms_file",
    "load_preset",
    "looks_like_path",
    "network_parameter_lower_bound",
    "package_data_dir",
    "parse_overrides",
    "parse_yaml",
    "physical_memory",
    "preset_bases",
    "preset_names",
    "presets_dir",
    "read_yaml",
    "spec_problems",
    "too_deep",
    "unused_settings",
]
