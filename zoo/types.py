"""Array containers shared by losses, networks, replay and the learner.

All containers are ``NamedTuple``s, so they are JAX pytrees with no registration and can cross
``jit``/``vmap``/``pmap`` boundaries. Optional fields default to ``None``; a ``None`` leaf is an
empty subtree to JAX.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

Array = jax.Array
PyTree = Any


class NetworkOutput(NamedTuple):
    """What a network returns for **one** observation.

    Attributes:
      q_values: ``[A]`` action values (for distributional heads, the mean of the distribution).
      logits: ``[A, N]`` categorical logits, categorical heads only.
      atoms: ``[N]`` the categorical support, categorical heads only.
      quantiles: ``[A, N]`` quantile values, quantile heads only: at the fractions ``taus``, or
        at the midpoints ``(i + 1/2)/N`` where ``taus`` is ``None`` (QR-DQN).
      taus: ``[N]`` the quantile fractions of ``quantiles`` where a head samples them per example
        (IQN, Dabney et al. 2018b) or proposes them (FQF: the midpoints τ̂ of its fractions);
        ``None`` for fixed midpoints.
      fractions: ``[N − 1]`` the interior fractions ``τ_1 … τ_{N−1}`` a fraction proposal network
        proposes (FQF, Yang et al. 2019), differentiable with respect to that network only;
        ``None`` for other heads.
      fraction_quantiles: ``[A, N − 1]`` the quantile values at ``fractions`` (FQF's fraction
        loss reads them under a stop-gradient), in the ``learn`` role only.
    """

    q_values: Array
    logits: Array | None = None
    atoms: Array | None = None
    quantiles: Array | None = None
    taus: Array | None = None
    fractions: Array | None = None
    fraction_quantiles: Array | None = None


class FutureSteps(NamedTuple):
    """The ``K`` steps after a sampled transition, for a loss that predicts them (SPR's latent
    rollout, Schwarzer et al. 2021).

    Attributes:
      observation: ``[B, K, ...]`` the observations ``o_{t+1} … o_{t+K}`` (stacked as the actor
        saw them).
      action: ``[B, K]`` int32 the actions ``a_t … a_{t+K−1}`` that led to them.
      mask: ``[B, K]`` float32, 1 where ``o_{t+k}`` is in the episode of ``o_t`` (no step
        ``t … t+k−1`` ended it), 0 after its end.
    """

    observation: Array
    action: Array
    mask: Array


class Transition(NamedTuple):
    """A batch of (possibly n-step) transitions, batch-major.

    Attributes:
      observation: ``[B, ...]`` observation at ``t-1``.
      action: ``[B]`` int32 action taken at ``t-1``.
      reward: ``[B]`` (n-step) reward, already discounted inside the window (``docs/design.md``,
        "n-step transitions").
      discount: ``[B]`` environment discount of the window (``γ^{k-1}·d_t⋯d_{t+k-1}``); the
        loss multiplies by ``loss.discount`` once more, as the reference does.
      next_observation: ``[B, ...]`` observation the window bootstraps from.
      probability: ``[B]`` the replay's sampling probability of each item.
      mask: ``[B]`` optional, 1 for real transitions and 0 for items to ignore (for example the
        step after an auto-reset); ``None`` means all ones.
      future: the ``K`` steps after each item (:class:`FutureSteps`) where the replay was built
        to keep them; ``None`` otherwise.
    """

    observation: Array
    action: Array
    reward: Array
    discount: Array
    next_observation: Array
    probability: Array
    mask: Array | None = None
    future: FutureSteps | None = None


class SequenceBatch(NamedTuple):
    """A batch of stored sequences for recurrent cores, batch-major.

    ``reward[:, t]`` and ``discount[:, t]`` follow ``action[:, t]`` taken at ``observation[:, t]``.

    Attributes:
      observation: ``[B, T, ...]``.
      action: ``[B, T]`` int32.
      reward: ``[B, T]``.
      discount: ``[B, T]`` environment discounts (0 at a terminal).
      core_state: the recurrent state at each sequence's first step (leading axis ``B``), or
        ``None`` to start from the network's initial state.
      probability: ``[B]`` sampling probability of each sequence.
      mask: ``[B, T]`` optional; 0 marks padding steps. ``None`` means all ones (the reference).
    """

    observation: Array
    action: Array
    reward: Array
    discount: Array
    core_state: PyTree
    probability: Array
    mask: Array | None = None


class TargetBatch(NamedTuple):
    """Items whose targets are computed already: the rollout learner's Q(λ) returns
    (:mod:`zoo.rollout`), leading axis ``B``.

    The loss trains ``Q(s, a)`` towards ``h(target)`` (``h`` the value transform): a complete
    return enters the head loss as a reward with discount 0, so no network is evaluated at a
    next state and no reward is clipped again (the targets were built from clipped rewards).

    Attributes:
      observation: ``[B, ...]`` the observations acted on.
      action: ``[B]`` int the actions taken.
      target: ``[B]`` the targets, in the untransformed value space.
      probability: ``[B]`` the sampling probability (ones: a rollout is learned from whole).
      mask: ``[B]`` zeroes items that are not real transitions (envpool's pseudo-steps).
    """

    observation: Array
    action: Array
    target: Array
    probability: Array
    mask: Array | None = None


class LossAux(NamedTuple):
    """Auxiliary outputs of a loss.

    Attributes:
      priorities: ``[B]`` new replay priorities, or ``None`` when the spec does not prioritise.
      metrics: scalar diagnostics (mean TD error, mean Q, ...).
    """

    priorities: Array | None
    metrics: dict[str, Array]
