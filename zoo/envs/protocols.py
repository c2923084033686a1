"""Evaluation protocols: every environment setting of a published Atari (or other) protocol.

A :class:`Protocol` is a frozen dataclass with *no defaults*: each registered protocol states every
field, so a result records exactly what it was run under (``dataclasses.asdict(protocol)``), and
comparing results across protocols can be refused by name.

Sources (tags as in ``shared/reference/published_hyperparameters.md``: [V] checked in a source
file, [R] recalled from the paper and not checked here):

- ``nature_2015``: Mnih et al. 2015, "Human-level control through deep reinforcement learning",
  https://doi.org/10.1038/nature14236, as implemented by deepmind/dqn_zoo (``gym_atari.py``,
  ``dqn/run_atari.py``) [V]: no sticky actions, minimal action set, 1–30 no-op starts in training
  *and* evaluation, life loss ends training episodes (dqn_zoo: ``zero_discount_on_life_loss``),
  action repeat 4 with a max over the last two frames, 84×84 gray, stack 4, reward clip ±1,
  108,000 frames per episode, evaluation ε = 0.05.
- ``machado_2018``: Machado et al. 2018, "Revisiting the Arcade Learning Environment",
  https://doi.org/10.1613/jair.5699, as configured by google/dopamine's JAX agents [V]: sticky
  actions p = 0.25, full action set of 18, no life-loss signal, no no-op starts, action repeat 4,
  ``max_steps_per_episode = 27000`` (108,000 frames), reward clip ±1, evaluation ε = 0.001.
- ``atari_100k``: the Atari 100k benchmark of Kaiser et al. 2020 ("Model-Based Reinforcement
  Learning for Atari", https://arxiv.org/abs/1903.00374) as used by data-efficient Rainbow (van
  Hasselt et al. 2019, "When to use parametric models in reinforcement learning?",
  https://arxiv.org/abs/1906.05243). Dopamine's ``labs/atari_100k/configs/DER.gin`` [V]: no sticky
  actions, life loss terminal in training, 27,000 steps per episode, evaluation ε = 0.001. Recalled
  [R]: the minimal action set and up to 30 no-op starts (the common setting of the Atari-100k code
  bases, e.g. SPR and CURL); some of them evaluate with ε = 0 instead.
- ``r2d2_2019``: R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
  Reinforcement Learning", https://openreview.net/forum?id=r1lyTjAqYX) [R]: no frame stack (the
  LSTM carries the history), no life-loss terminal, no sticky actions, no reward clipping (the
  value transform h takes its place; acme ``r2d2/config.py`` ``clip_rewards=False`` [V]), action
  repeat 4 with max-pooling, 84×84 gray, 108,000 frames per episode, 30 no-op starts and the
  minimal action set (the common ALE setting of the paper's baselines), greedy evaluation (acme
  ``evaluation_epsilon=0`` [V]).
- ``classic``: classic control (CartPole, Acrobot, MountainCar, ...) and any other gymnasium
  environment: the environment's own dynamics and time limit, no reward clipping, greedy evaluation.
- ``minatar``: MinAtar (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for Thorough and
  Reproducible Reinforcement Learning Experiments", https://arxiv.org/abs/1903.03176) through its
  gymnasium registration: sticky actions 0.1 (MinAtar's default, ``minatar/environment.py`` [V])
  and the full action set of 6 (Revisiting Rainbow's ``minatar_env.py`` uses
  ``minatar.Environment`` with all ``num_actions() = 6`` actions [V]),
  no frame skip or stack, no episode cap, rewards are already 0/1 (no clipping). The paper reports
  training returns and has no evaluation ε; greedy evaluation (ε = 0) is this project's choice.

envpool specifics (measured with envpool 1.2.5, see :mod:`zoo.envs`): envpool always max-pools the
last two of the skipped frames, so every Atari protocol has ``max_pool=True``; envpool's
``noop_max=N`` performs a uniform 1..N no-op frames at reset, and ``noop_max=0`` crashes it, so a
protocol without no-op starts (``noop_max=0``) gets envpool's ``noop_max=1``: one fixed no-op frame
after the ALE reset, which adds no randomness. Rewards are clipped by zoo (``TimeStep.reward``), not
by envpool, so the unclipped reward stays available.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "PROTOCOLS",
    "Protocol",
    "Suite",
    "UnknownProtocolError",
    "get_protocol",
    "protocol_names",
]

#: The environment families a protocol applies to.
Suite = Literal["atari", "classic", "minatar"]


class UnknownProtocolError(ValueError):
    """An evaluation protocol name that is not registered (with the closest names)."""


@dataclass(frozen=True, kw_only=True)
class Protocol:
    """Every environment setting of one published protocol; no field has a default.

    Attributes:
      name: registry name.
      suite: the environments it applies to: ``atari`` (envpool's Atari games), ``minatar``, or
        ``classic`` (classic control and any other gymnasium environment).
      description: one line, with the paper.
      sticky_action_prob: probability that the previous action repeats at each frame (Machado et
        al. 2018); 0 for none.
      full_action_set: all 18 ALE actions instead of the game's minimal set (for MinAtar: all 6).
      noop_max: no-op starts: a uniform 1..``noop_max`` no-op frames after each reset; 0 for none.
      episodic_life_train: a lost life ends the *training* episode (``terminated``); evaluation
        always plays whole games.
      fire_reset: press FIRE after each reset (envpool's ``use_fire_reset``).
      frame_skip: frames per agent step (action repeat); 1 for none.
      max_pool: the observation is the pixel-wise max of the last two skipped frames.
      frame_shape: ``(height, width)`` of each preprocessed frame, or ``None`` for non-pixel suites.
      grayscale: frames are converted to luminance.
      stack: frames stacked along observation axis 0 (1 for no stacking).
      max_episode_frames: a game is truncated after this many *frames* (agent steps × frame skip);
        ``None`` keeps the environment's own time limit.
      reward_clip: the training reward is clipped to ``±reward_clip`` at insertion; ``None`` for no
        clipping. Evaluation returns are always unclipped.
      eval_epsilon: ε of the ε-greedy evaluation policy.
      sources: where each value comes from.
    """

    name: str
    suite: Suite
    description: str
    sticky_action_prob: float
    full_action_set: bool
    noop_max: int
    episodic_life_train: bool
    fire_reset: bool
    frame_skip: int
    max_pool: bool
    frame_shape: tuple[int, int] | None
    grayscale: bool
    stack: int
    max_episode_frames: int | None
    reward_clip: float | None
    eval_epsilon: float
    sources: tuple[str, ...]

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            problems.append(f"sticky_action_prob={self.sticky_action_prob} is not in [0, 1]")
        if not 0.0 <= self.eval_epsilon <= 1.0:
            problems.append(f"eval_epsilon={self.eval_epsilon} is not in [0, 1]")
        if self.noop_max < 0:
            problems.append(f"noop_max={self.noop_max} is negative")
        if self.frame_skip < 1 or self.stack < 1:
            problems.append("frame_skip and stack must be at least 1")
        if self.reward_clip is not None and self.reward_clip <= 0:
            problems.append(f"reward_clip={self.reward_clip} must be positive or None")
        if self.max_episode_frames is not None and self.max_episode_frames % self.frame_skip:
            problems.append(
                f"max_episode_frames={self.max_episode_frames} is not a multiple of "
                f"frame_skip={self.frame_skip}"
            )
        if self.suite == "atari":
            if self.frame_shape is None:
                problems.append("an Atari protocol needs a frame_shape")
            if not self.max_pool:
                problems.append("envpool always max-pools the last two frames: max_pool=True")
        elif (
            self.frame_skip != 1
            or self.stack != 1
            or self.frame_shape is not None
            or self.max_pool
            or self.fire_reset
            or self.noop_max
            or self.episodic_life_train
        ):
            problems.append(
                f"a {self.suite!r} protocol has no frame settings: frame_skip=1, stack=1, "
                "frame_shape=None, max_pool/fire_reset/episodic_life_train False, noop_max=0"
            )
        if problems:
            raise ValueError(f"protocol {self.name!r}: " + "; ".join(problems))

    @property
    def max_episode_steps(self) -> int | None:
        """The episode cap in agent steps (``max_episode_frames // frame_skip``), or ``None``."""
        if self.max_episode_frames is None:
            return None
        return self.max_episode_frames // self.frame_skip

    def episodic_life(self, training: bool) -> bool:
        """Whether a lost life ends the episode: in training, where the protocol says so."""
        return self.episodic_life_train and training

    def training_reward_clip(self, training: bool) -> float | None:
        """The clip of ``TimeStep.reward``: the protocol's in training, none in evaluation."""
        return self.reward_clip if training else None

    def envpool_kwargs(self, training: bool) -> dict[str, Any]:
        """Keyword arguments of ``envpool.make`` for this protocol, every setting explicit.

        Raises:
          ValueError: for a suite that envpool does not run (``minatar``).
        """
        if self.suite == "classic":
            kwargs: dict[str, Any] = {}
            if self.max_episode_steps is not None:
                kwargs["max_episode_steps"] = self.max_episode_steps
            return kwargs
        if self.suite != "atari":
            raise ValueError(f"protocol {self.name!r} ({self.suite}) does not run on envpool")
        assert self.frame_shape is not None  # checked in __post_init__
        return {
            "repeat_action_probability": self.sticky_action_prob,
            "full_action_space": self.full_action_set,
            # envpool: noop_max=N gives 1..N no-op frames; 0 crashes it (see the module docstring).
            "noop_max": max(self.noop_max, 1),
            "episodic_life": self.episodic_life(training),
            "zero_discount_on_life_loss": False,
            "use_fire_reset": self.fire_reset,
            "frame_skip": self.frame_skip,
            "stack_num": self.stack,
            "img_height": self.frame_shape[0],
            "img_width": self.frame_shape[1],
            "gray_scale": self.grayscale,
            "use_inter_area_resize": True,
            "reward_clip": False,  # zoo clips, keeping TimeStep.raw_reward unclipped
            "max_episode_steps": self.max_episode_steps,
        }

    def gymnasium_kwargs(self, training: bool) -> dict[str, Any]:
        """Keyword arguments of ``gymnasium.make`` for this protocol (``training`` is unused)."""
        del training  # no gymnasium suite differs between training and evaluation
        kwargs: dict[str, Any] = {}
        if self.suite == "minatar":
            kwargs["sticky_action_prob"] = self.sticky_action_prob
            kwargs["use_minimal_action_set"] = not self.full_action_set
        elif self.suite == "atari":
            raise ValueError(f"protocol {self.name!r} runs Atari on envpool, not gymnasium")
        if self.max_episode_steps is not None:
            kwargs["max_episode_steps"] = self.max_episode_steps
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain Python values, for run records."""
        return asdict(self)


_DQN_ZOO = "deepmind/dqn_zoo dqn_zoo/gym_atari.py, dqn/run_atari.py [V]"

_PROTOCOLS = (
    Protocol(
        name="nature_2015",
        suite="atari",
        description="Nature DQN (Mnih et al. 2015) as in dqn_zoo: no-op starts, life loss "
        "terminal in training, minimal actions, no sticky actions",
        sticky_action_prob=0.0,
        full_action_set=False,
        noop_max=30,
        episodic_life_train=True,
        fire_reset=False,
        frame_skip=4,
        max_pool=True,
        frame_shape=(84, 84),
        grayscale=True,
        stack=4,
        max_episode_frames=108_000,
        reward_clip=1.0,
        eval_epsilon=0.05,
        sources=("Mnih et al. 2015, https://doi.org/10.1038/nature14236", _DQN_ZOO),
    ),
    Protocol(
        name="machado_2018",
        suite="atari",
        description="Machado et al. 2018 / Dopamine: sticky actions 0.25, full action set, no "
        "life-loss signal, no no-op starts",
        sticky_action_prob=0.25,
        full_action_set=True,
        noop_max=0,
        episodic_life_train=False,
        fire_reset=False,
        frame_skip=4,
        max_pool=True,
        frame_shape=(84, 84),
        grayscale=True,
        stack=4,
        max_episode_frames=108_000,
        reward_clip=1.0,
        eval_epsilon=0.001,
        sources=(
            "Machado et al. 2018, https://doi.org/10.1613/jair.5699",
            "google/dopamine dopamine/jax/agents/dqn/configs/dqn.gin (sticky_actions, "
            "max_steps_per_episode=27000, epsilon_eval=0.001) [V]",
        ),
    ),
    Protocol(
        name="atari_100k",
        suite="atari",
        description="Atari 100k (Kaiser et al. 2020) as run by data-efficient Rainbow (van "
        "Hasselt et al. 2019): no sticky actions, life loss terminal in training",
        sticky_action_prob=0.0,
        full_action_set=False,  # [R] the common Atari-100k setting
        noop_max=30,  # [R] the common Atari-100k setting (SPR, CURL code bases)
        episodic_life_train=True,
        fire_reset=False,
        frame_skip=4,
        max_pool=True,
        frame_shape=(84, 84),
        grayscale=True,
        stack=4,
        max_episode_frames=108_000,
        reward_clip=1.0,
        eval_epsilon=0.001,
        sources=(
            "Kaiser et al. 2020, https://arxiv.org/abs/1903.00374",
            "van Hasselt et al. 2019, https://arxiv.org/abs/1906.05243",
            "google/dopamine dopamine/labs/atari_100k/configs/DER.gin (sticky False, "
            "terminal_on_life_loss True, 27000 steps per episode, epsilon_eval 0.001) [V]",
            "minimal action set and noop_max 30: recalled [R]",
        ),
    ),
    Protocol(
        name="r2d2_2019",
        suite="atari",
        description="R2D2 (Kapturowski et al. 2019): no frame stack, no life-loss terminal, no "
        "sticky actions, no reward clipping",
        sticky_action_prob=0.0,  # [R]
        full_action_set=False,  # [R]
        noop_max=30,  # [R]
        episodic_life_train=False,  # [R]
        fire_reset=False,
        frame_skip=4,
        max_pool=True,
        frame_shape=(84, 84),
        grayscale=True,
        stack=1,  # [R] the LSTM replaces the frame stack
        max_episode_frames=108_000,
        reward_clip=None,  # [V] acme r2d2 clip_rewards=False
        eval_epsilon=0.0,  # [V] acme r2d2 evaluation_epsilon=0
        sources=(
            "Kapturowski et al. 2019, https://openreview.net/forum?id=r1lyTjAqYX (stack, life "
            "loss, sticky actions, no-op starts, action set recalled [R])",
            "google-deepmind/acme acme/agents/jax/r2d2/config.py (clip_rewards False, "
            "evaluation_epsilon 0) [V]",
        ),
    ),
    Protocol(
        name="classic",
        suite="classic",
        description="classic control and other gymnasium environments: the environment's own "
        "time limit, no reward clipping, greedy evaluation",
        sticky_action_prob=0.0,
        full_action_set=False,
        noop_max=0,
        episodic_life_train=False,
        fire_reset=False,
        frame_skip=1,
        max_pool=False,
        frame_shape=None,
        grayscale=False,
        stack=1,
        max_episode_frames=None,
        reward_clip=None,
        eval_epsilon=0.0,
        sources=("the environment's own definition (e.g. CartPole-v1: 500 steps)",),
    ),
    Protocol(
        name="minatar",
        suite="minatar",
        description="MinAtar (Young & Tian 2019) through gymnasium: sticky actions 0.1, full "
        "action set, no frame skip or stack",
        sticky_action_prob=0.1,  # [V] MinAtar's Environment default
        full_action_set=True,  # [V] all 6 actions, as Revisiting Rainbow's minatar_env.py
        noop_max=0,
        episodic_life_train=False,
        fire_reset=False,
        frame_skip=1,
        max_pool=False,
        frame_shape=None,
        grayscale=False,
        stack=1,
        max_episode_frames=None,
        reward_clip=None,
        eval_epsilon=0.0,  # the paper reports training returns; greedy evaluation is our choice
        sources=(
            "Young & Tian 2019, https://arxiv.org/abs/1903.03176",
            "MinAtar 1.0.15 minatar/environment.py (sticky_action_prob=0.1, num_actions 6, "
            "difficulty_ramping True) [V]",
            "JohanSamir/revisiting_rainbow revisiting_rainbow/minatar_env.py "
            "(minatar.Environment(env_name) with its defaults, all num_actions() = 6 actions) [V]; "
            "Configs/*.gin (max_steps_per_episode 1e8: no cap, stack_size 1) [V]",
        ),
    ),
)

#: Registered protocols by name (read-only).
PROTOCOLS: Mapping[str, Protocol] = MappingProxyType({p.name: p for p in _PROTOCOLS})


def protocol_names() -> list[str]:
    """The registered protocol names, sorted."""
    return sorted(PROTOCOLS)


def get_protocol(name: str | Protocol) -> Protocol:
    """The registered protocol ``name`` (a :class:`Protocol` is returned as it is).

    Raises:
      UnknownProtocolError: with the closest registered names.
    """
    if isinstance(name, Protocol):
        return name
    try:
        return PROTOCOLS[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), list(PROTOCOLS), n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownProtocolError(
            f"unknown evaluation protocol {name!r}.{hint} Known: {', '.join(protocol_names())}."
        ) from None
