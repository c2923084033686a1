"""Losses composed from the axes of the spec (see :mod:`zoo.losses.compose`).

Importing this package registers the built-in components of the ``td``, ``value_transform``,
``regularizer``, ``priority``, ``bootstrap`` and ``head_loss`` axes.
"""

from zoo.losses import components, heads
from zoo.losses.components import TxPair
from zoo.losses.compose import Loss, build_loss, n_step_targets
from zoo.losses.heads import categorical_project

__all__ = [
    "Loss",
    "TxPair",
    "build_loss",
    "categorical_project",
    "components",
    "heads",
    "n_step_targets",
]
