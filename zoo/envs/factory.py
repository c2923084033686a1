"""``zoo.envs.make``: environment ids to a :class:`~zoo.envs.VectorEnv` under a protocol.

Which backend runs an id (``backend="auto"``):

1. envpool's Atari games, by their envpool ids (``"Pong-v5"``). The usual other spellings of the
   same game map to it: ``"Pong"``, ``"PongNoFrameskip-v4"`` and ``"ALE/Pong-v5"`` (the protocol,
   not the spelling, fixes frame skip, sticky actions and the rest). Other gym variants
   (``-ram``, ``Deterministic``, ``-v0``/``-v4``) have different observations or settings and are
   refused with suggestions.
2. envpool's classic control with discrete actions (``CartPole-v1``, ``Acrobot-v1``,
   ``MountainCar-v0``, ...).
3. MinAtar (``"MinAtar/Breakout-v1"``) through gymnasium, when the ``minatar`` package is installed.
4. Any other gymnasium id with a discrete action space, through the gymnasium adapter.

``backend="gymnasium"`` forces the adapter for an id gymnasium knows (e.g. to compare gymnasium's
CartPole with envpool's); ``backend="envpool"`` refuses anything envpool does not run;
``backend="gymnax"`` runs classic control and MinAtar on gymnax's JAX ports (the ``gymnax``
extra), whose step a compiled loop runs inside its program; ``backend="ale"`` runs the same Atari
ids on ALE's own vector environment (ale-py, the ``ale`` extra). Both run the same protocols;
:meth:`~zoo.envs.Protocol.backend_gaps` says where one cannot be expressed on a backend (it is
refused) and :meth:`~zoo.envs.Protocol.backend_differences` what differs (``docs/backends.md``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from zoo.envs.backends import (
    GYMNAX_IDS,
    AleBackend,
    EnvpoolBackend,
    GymnasiumBackend,
    GymnaxBackend,
    gymnax_id,
)
from zoo.envs.core import (
    ProtocolMismatchError,
    UnknownEnvironmentError,
    UnsupportedEnvironmentError,
    VectorEnv,
)
from zoo.envs.protocols import PROTOCOLS, Protocol, Suite, get_protocol

__all__ = [
    "BACKENDS",
    "BackendName",
    "EnvironmentInfo",
    "ProtocolMismatchError",
    "UnknownEnvironmentError",
    "UnsupportedEnvironmentError",
    "make",
    "resolve_env",
]

#: What runs an environment: see the module docstring.
BackendName = Literal["auto", "envpool", "ale", "gymnasium", "gymnax"]
#: Every value of :data:`BackendName`, in the order errors list them.
BACKENDS: tuple[str, ...] = get_args(BackendName)

#: The protocol used when ``make`` is given none.
DEFAULT_PROTOCOL: dict[Suite, str] = {
    "atari": "nature_2015",
    "classic": "classic",
    "minatar": "minatar",
}

_ATARI_ALIAS = re.compile(
    r"^(?:ALE/(?P<ale>\w+)-v5|(?P<nfs>\w+)NoFrameskip-v4|(?P<bare>[A-Z]\w*))$"
)
#: gym's other Atari variants: not the same settings or observations, only suggested.
_GYM_ATARI_VARIANT = re.compile(
    r"^(?:ALE/)?(?P<game>[A-Za-z0-9]+?)(?:-ram)?(?:Deterministic|NoFrameskip)?-v\d+$"
)


@dataclass(frozen=True)
class EnvironmentInfo:
    """Where an id runs: the canonical id, its suite and its backend."""

    env_id: str
    suite: Suite
    backend: Literal["envpool", "ale", "gymnasium", "gymnax"]


def _envpool_suites() -> dict[str, str]:
    """envpool id -> the module of its suite (``envpool.atari``, ``envpool.classic_control``...)."""
    from envpool.registration import registry

    return {name: entry[0] for name, entry in registry.specs.items()}


def _gymnasium_ids() -> list[str]:
    import gymnasium

    return list(gymnasium.registry)


def _register_minatar() -> bool:
    """Register MinAtar's gymnasium ids if the ``minatar`` package is installed."""
    try:
        import gymnasium
        import minatar.gym
    except ImportError:
        return False
    if "MinAtar/Breakout-v1" not in gymnasium.registry:
        minatar.gym.register_envs()
    return True


def _unknown(
    env_id: str, candidates: list[str], suites: Mapping[str, str], why: str = ""
) -> UnknownEnvironmentError:
    close = difflib.get_close_matches(env_id, sorted(set(candidates)), n=5, cutoff=0.6)
    if not close:  # a lowercase or differently-cased id
        lowered = {c.lower(): c for c in candidates}
        close = [lowered[c] for c in difflib.get_close_matches(env_id.lower(), list(lowered), n=5)]
    variant = _GYM_ATARI_VARIANT.match(env_id)  # e.g. PongDeterministic-v4, Pong-ramNoFrameskip-v4
    atari = f"{variant.group('game')}-v5" if variant else None
    if atari and suites.get(atari) == "envpool.atari":
        close = [atari, *(c for c in close if c != atari)]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return UnknownEnvironmentError(
        f"unknown environment {env_id!r}{why}.{hint} Atari games use envpool ids such as "
        "'Pong-v5'; classic control: 'CartPole-v1', 'Acrobot-v1', 'MountainCar-v0'; any "
        "gymnasium id with discrete actions works too."
    )


def _atari_id(env_id: str, suites: Mapping[str, str]) -> str | None:
    """The envpool Atari id for ``env_id`` or one of its unambiguous spellings, else ``None``."""
    if suites.get(env_id) == "envpool.atari":
        return env_id
    match = _ATARI_ALIAS.match(env_id)
    if match is None:
        return None
    game = match.group("ale") or match.group("nfs") or match.group("bare")
    candidate = f"{game}-v5"
    return candidate if suites.get(candidate) == "envpool.atari" else None


def resolve_env(env_id: str, backend: BackendName = "auto") -> EnvironmentInfo:
    """Which backend and suite run ``env_id``, and its canonical id.

    Raises:
      UnknownEnvironmentError: for an id no registry knows, with close matches.
      UnsupportedEnvironmentError: for a known id zoo cannot run, or one the forced backend lacks.
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a string, got {type(env_id).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    suites = _envpool_suites()
    if backend == "ale":
        return _resolve_ale(env_id, suites)
    if backend == "gymnax":
        return _resolve_gymnax(env_id)
    is_minatar = env_id.lower().startswith("minatar/")
    minatar_installed = is_minatar and _register_minatar()
    gym_ids = set(_gymnasium_ids())

    if backend != "gymnasium":
        atari = _atari_id(env_id, suites)
        if atari is not None:
            return EnvironmentInfo(atari, "atari", "envpool")
        if suites.get(env_id) == "envpool.classic_control":
            return EnvironmentInfo(env_id, "classic", "envpool")
        if backend == "envpool":
            if env_id in suites:
                raise UnsupportedEnvironmentError(
                    f"{env_id!r} is in envpool's {suites[env_id]} suite; zoo runs envpool's Atari "
                    "and classic-control suites (use backend='gymnasium' for gymnasium ids)"
                )
            raise _unknown(env_id, list(suites), suites, " in envpool")
    if env_id in gym_ids:
        return EnvironmentInfo(env_id, "minatar" if is_minatar else "classic", "gymnasium")
    if is_minatar and not minatar_installed:
        raise UnsupportedEnvironmentError(
            f"{env_id!r} needs the MinAtar package: pip install 'minatar>=1.0.15'"
        )
    if backend == "auto" and env_id in suites:
        raise UnsupportedEnvironmentError(
            f"{env_id!r} is in envpool's {suites[env_id]} suite, which zoo does not run (it runs "
            "envpool's Atari and classic-control suites and gymnasium ids)"
        )
    if backend == "gymnasium":
        raise _unknown(env_id, list(gym_ids), suites, " in gymnasium's registry")
    raise _unknown(env_id, [*suites, *gym_ids], suites)


def _resolve_ale(env_id: str, suites: Mapping[str, str]) -> EnvironmentInfo:
    """``env_id`` on ALE's vector environment: Atari games only, by the same ids as envpool's."""
    try:
        from zoo.envs.backends import ale_rom

        atari = _atari_id(env_id, suites)
        if atari is not None:
            ale_rom(atari)  # a ROM ale-py ships (all of envpool's games have one)
            return EnvironmentInfo(atari, "atari", "ale")
    except ImportError:
        raise UnsupportedEnvironmentError(
            "backend 'ale' needs ale-py (ALE's vector environment, ale-py>=0.11): "
            "pip install 'zoo-rl[ale]'"
        ) from None
    if env_id in suites or env_id in set(_gymnasium_ids()):
        raise UnsupportedEnvironmentError(
            f"ALE's vector environment runs Atari games only, not {env_id!r}; leave the backend "
            "at auto for it"
        )
    raise _unknown(env_id, [k for k, v in suites.items() if v == "envpool.atari"], suites,
                   " among ALE's Atari games")  # fmt: skip


def _resolve_gymnax(env_id: str) -> EnvironmentInfo:
    """``env_id`` on gymnax: the classic-control and MinAtar environments it ports to JAX."""
    try:
        import gymnax  # noqa: F401
    except ImportError:
        raise UnsupportedEnvironmentError(
            "backend 'gymnax' needs gymnax (JAX-native environments, gymnax>=1.0): "
            "pip install 'zoo-rl[gymnax]'"
        ) from None
    if gymnax_id(env_id) is None:
        raise UnsupportedEnvironmentError(
            f"gymnax runs {', '.join(GYMNAX_IDS)} here, not {env_id!r}; leave the backend at "
            "auto for it"
        )
    suite: Suite = "minatar" if env_id.startswith("MinAtar/") else "classic"
    return EnvironmentInfo(env_id, suite, "gymnax")


def default_protocol(env_id: str) -> str:
    """The protocol an environment gets when none is named (by its suite)."""
    return DEFAULT_PROTOCOL[resolve_env(env_id).suite]


def make(
    env_id: str,
    *,
    protocol: str | Protocol | None = None,
    num_envs: int = 1,
    seed: int = 0,
    training: bool = True,
    backend: BackendName = "auto",
    env_kwargs: Mapping[str, Any] | None = None,
    retiring: bool = False,
) -> VectorEnv:
    """``num_envs`` environments ``env_id`` under ``protocol``, as one :class:`VectorEnv`.

    Args:
      env_id: an envpool Atari id (``"Pong-v5"``, or ``"PongNoFrameskip-v4"``/``"ALE/Pong-v5"``/
        ``"Pong"``), an envpool classic-control id, a MinAtar id, or any gymnasium id with a
        discrete action space.
      protocol: a protocol name or object; default ``nature_2015`` for Atari, ``minatar`` for
        MinAtar, ``classic`` otherwise.
      num_envs: environments stepped together.
      seed: seeds the environments (envpool seeds env ``i`` with ``seed + i``; gymnasium likewise).
      training: the protocol's training settings (a lost life terminal where the protocol says
        so, clipped rewards) or its evaluation settings (unclipped rewards).
      backend: ``"auto"``, or force ``"envpool"``, ``"ale"`` (ALE's vector environment, for
        Atari games), ``"gymnasium"`` or ``"gymnax"`` (JAX-native classic control and MinAtar,
        stepped inside compiled loops).
      env_kwargs: extra keyword arguments of the backend's constructor (``envpool.make``, ALE's
        ``AtariVectorEnv``, ``gymnasium.make``, or gymnax's ``EnvParams`` fields); they
        override the protocol's (e.g. ``{"max_episode_steps": 50}`` on envpool for a quick
        truncation test).
      retiring: environments will be retired (:meth:`VectorEnv.retire`, as an evaluation does
        once one has played its quota): for envpool's Atari games an asynchronous pool then
        steps only the active ones (it has no XLA interface). Other environments step retired
        ones anyway (:attr:`VectorEnv.skips_retired` says which).

    Raises:
      UnknownEnvironmentError: the id is unknown (the message lists close matches).
      UnsupportedEnvironmentError: the environment is known but cannot be run by zoo.
      ProtocolMismatchError: the protocol is for another kind of environment.
    """
    if not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if not isinstance(seed, int) or not 0 <= seed < 2**31 - num_envs:
        raise ValueError(f"seed must be an integer in [0, 2**31 - num_envs), got {seed!r}")
    info = resolve_env(env_id, backend)
    resolved = get_protocol(protocol if protocol is not None else DEFAULT_PROTOCOL[info.suite])
    if resolved.suite != info.suite:
        usable = [p.name for p in PROTOCOLS.values() if p.suite == info.suite]
        raise ProtocolMismatchError(
            f"protocol {resolved.name!r} is for {resolved.suite} environments, but "
            f"{info.env_id!r} is a {info.suite} environment; its protocols: {', '.join(usable)}"
        )
    gaps = resolved.backend_gaps(info.backend)
    if gaps:
        raise UnsupportedEnvironmentError(
            f"protocol {resolved.name!r} cannot be run exactly on the {info.backend} backend: "
            + "; ".join(gaps)
        )
    env_backend: EnvpoolBackend | AleBackend | GymnasiumBackend | GymnaxBackend
    if info.backend in ("envpool", "ale"):
        own = resolved.envpool_kwargs if info.backend == "envpool" else resolved.ale_kwargs
        kwargs = {**own(training, info.env_id), **(env_kwargs or {})}
        if any(kwargs.get(k) for k in ("episodic_life", "zero_discount_on_life_loss",
                                       "life_loss_info")):  # fmt: skip
            raise ValueError(
                f"{info.backend}'s episodic_life and life-loss signals are not used: zoo reads "
                "info['lives'] and applies the protocol's life_loss_terminal and "
                "life_loss_resets_stack itself (choose a protocol that has them)"
            )
        if info.backend == "envpool":
            # An Atari step (emulation, resizing) costs about a millisecond, so the asynchronous
            # pool's dearer step pays where retired games stop; a classic-control step costs
            # microseconds, and there the synchronous pool stepping them all is the faster
            # (docs/performance.md, "The evaluator's tail").
            subsets = retiring and info.suite == "atari"
            env_backend = EnvpoolBackend(
                info.env_id, num_envs=num_envs, seed=seed, kwargs=kwargs, subsets=subsets
            )
        else:
            env_backend = AleBackend(info.env_id, num_envs=num_envs, seed=seed, kwargs=kwargs)
    else:  # gymnasium or gymnax: classic control and MinAtar
        own, made = (
            (resolved.gymnax_kwargs, GymnaxBackend)
            if info.backend == "gymnax"
            else (resolved.gymnasium_kwargs, GymnasiumBackend)
        )
        kwargs = {**own(training, info.env_id), **(env_kwargs or {})}
        env_backend = made(
            info.env_id,
            num_envs=num_envs,
            seed=seed,
            kwargs=kwargs,
            channels_last_to_first=info.suite == "minatar",
        )
    return VectorEnv(
        env_backend,
        env_id=info.env_id,
        protocol=resolved,
        training=training,
        num_envs=num_envs,
        seed=seed,
    )
