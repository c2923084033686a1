"""Evaluation protocols: every environment setting of a published Atari (or other) protocol.

A :class:`Protocol` is a frozen dataclass with *no defaults*: each registered protocol states every
field, so a result records exactly what it was run under (``dataclasses.asdict(protocol)``), and
comparing results across protocols can be refused by name. Each Atari protocol also carries
:attr:`Protocol.source_settings`: every setting beside the value its source uses and the source
file it was read in, with the remaining differences named (:attr:`Protocol.differences`);
``docs/protocols.md`` is rendered from them (:func:`zoo.envs.protocol_doc.protocols_markdown`).
Tags: [V] checked in a source file, [R] recalled from the paper and not checked here.

- ``nature_2015``: Mnih et al. 2015, "Human-level control through deep reinforcement learning",
  https://doi.org/10.1038/nature14236, as implemented by deepmind/dqn_zoo@f87bb1f
  (``dqn_zoo/gym_atari.py``, ``dqn_zoo/processors.py``, ``dqn_zoo/dqn/run_atari.py``) [V]: no
  sticky actions, minimal action set, 1–30 no-op frames at each game start in training *and*
  evaluation, a lost life gives discount 0 in training while the game and its frame stack go on
  (``zero_discount_on_life_loss``), action repeat 4 with a max over the last two frames, 84×84
  gray, stack 4 zero-padded at a game start, reward clip ±1, 108,000 frames per episode,
  evaluation ε = 0.05.
- ``dopamine_2018``: google/dopamine's Atari settings (Castro et al. 2018, "Dopamine: A Research
  Framework for Deep Reinforcement Learning", https://arxiv.org/abs/1812.06110), which produced
  its baseline curves (``dopamine/discrete_domains/atari_lib.py``, ``run_experiment.py``,
  ``dopamine/jax/agents/dqn/configs/dqn.gin``) [V]: sticky actions p = 0.25 (Machado et al.
  2018) with the game's *minimal* action set (gym's ``NoFrameskip-v0`` and ale_py's
  ``ALE/<game>-v5`` both register ``full_action_space=False``), no life-loss signal, no no-op
  starts, action repeat 4, 27,000 agent steps (108,000 frames) per episode, stack 4 zero-padded
  at a game start, reward clip ±1, evaluation ε = 0.001.
- ``machado_2018``: Machado et al. 2018, "Revisiting the Arcade Learning Environment",
  https://doi.org/10.1613/jair.5699: ``dopamine_2018`` with the *full* action set of 18 that the
  paper recommends [R]. No reference series was produced with it.
- ``atari_100k``: the Atari 100k benchmark of Kaiser et al. 2020 ("Model-Based Reinforcement
  Learning for Atari", https://arxiv.org/abs/1903.00374) as run by google/dopamine's
  ``dopamine/labs/atari_100k`` (``configs/DER.gin``, ``atari_100k_runner.py``,
  ``atari_100k_rainbow_agent.py``) [V]: no sticky actions, minimal action set, 0–29 no-op agent
  steps at each game start (zoo: 1–116 no-op frames), a lost life is terminal in training and
  restarts the agent's frame stack (zero-padded) in training and evaluation while the game goes
  on, 27,000 agent steps per episode, evaluation ε = 0.001.
- ``r2d2_2019``: R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
  Reinforcement Learning", https://openreview.net/forum?id=r1lyTjAqYX) [R]: no frame stack (the
  LSTM carries the history), no life-loss terminal, no sticky actions, no reward clipping (the
  value transform h takes its place; acme ``r2d2/config.py`` ``clip_rewards=False`` [V]), action
  repeat 4 with max-pooling, 84×84 gray, 108,000 frames per episode, 30 no-op starts and the
  minimal action set (the common ALE setting of the paper's baselines), greedy evaluation (acme
  ``evaluation_epsilon=0`` [V]).
- ``purejaxql_atari``: the envpool environment of purejaxql's PQN (Gallici et al. 2024,
  "Simplifying Deep Temporal Difference Learning", https://arxiv.org/abs/2407.04811;
  mttga/purejaxql ``config/alg/pqn_atari.yaml`` on envpool 0.8.4) [V]: ``nature_2015``'s settings
  with envpool's defaults that purejaxql keeps: FIRE after each reset (``use_fire_reset``) and the
  game's first frame in every slot of the stack at a game start. Its life-loss reset step
  (``episodic_life``) is the one named difference.
- ``classic``: classic control (CartPole, Acrobot, MountainCar, ...) and any other gymnasium
  environment: the environment's own dynamics and time limit, no reward clipping, greedy evaluation.
- ``minatar``: MinAtar (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for Thorough and
  Reproducible Reinforcement Learning Experiments", https://arxiv.org/abs/1903.03176) through its
  gymnasium registration: sticky actions 0.1 (MinAtar's default, ``minatar/environment.py`` [V])
  and the full action set of 6 (Revisiting Rainbow's ``minatar_env.py`` uses
  ``minatar.Environment`` with all ``num_actions() = 6`` actions [V]),
  no frame skip or stack, no episode cap, rewards are already 0/1 (no clipping). The paper reports
  training returns and has no evaluation ε; greedy evaluation (ε = 0) is this project's choice.
- ``gymnax_minatar``: MinAtar with the settings of gymnax 0.0.6's JAX ports (RobertTLange/gymnax
  ``gymnax/environments/minatar/*.py``), which purejaxql's PQN trains on [V]: no sticky actions,
  the minimal action set (Asterix 5, Breakout 3, Freeway 3, Space Invaders 4, Seaquest 6) and
  1,000 steps per episode (Freeway 2,500); the games themselves are the MinAtar package's.

envpool specifics (envpool 1.2.5; ``envpool/atari/atari_env.h`` of sail-sg/envpool [V]): envpool
always max-pools the last two of the skipped frames, so every Atari protocol has
``max_pool=True``; ``noop_max=N`` performs a uniform 1..N no-op frames after a game's reset, and
``noop_max=0`` crashes it, so a protocol without no-op starts (``noop_max=0``) gets envpool's
``noop_max=1``: one fixed no-op frame after the ALE reset, which adds no randomness. envpool's
``episodic_life`` is never used: it re-runs the no-op start after every lost life as a step whose
action is dropped; zoo reads ``info["lives"]`` instead and applies the protocol's life-loss rule
itself (:mod:`zoo.envs.core`). Rewards are clipped by zoo (``TimeStep.reward``), not by envpool, so
the unclipped reward stays available.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "ASPECTS",
    "PROTOCOLS",
    "Protocol",
    "SourceSetting",
    "Suite",
    "UnknownProtocolError",
    "get_protocol",
    "protocol_names",
]

#: The environment families a protocol applies to.
Suite = Literal["atari", "classic", "minatar"]

#: Named aspects of an Atari protocol that are not fields (what zoo cannot vary), each compared
#: with the source in :attr:`Protocol.source_settings`.
ASPECTS: Mapping[str, str] = MappingProxyType(
    {
        "frame_preprocessing": "how a frame is grayscaled, pooled and resized",
        "frame_skip_at_life_loss": "whether the action repeat stops at the frame a life is lost",
        "truncation": "what the transition cut by the episode cap bootstraps from",
        "evaluation": "when evaluation happens and what it reports",
    }
)

#: The Protocol fields that an Atari protocol's source settings must all cover.
_ATARI_FIELDS = (
    "sticky_action_prob",
    "full_action_set",
    "noop_max",
    "life_loss_terminal",
    "life_loss_resets_stack",
    "fire_reset",
    "frame_skip",
    "max_pool",
    "frame_shape",
    "grayscale",
    "stack",
    "game_start_stack",
    "max_episode_frames",
    "reward_clip",
    "eval_epsilon",
)


class UnknownProtocolError(ValueError):
    """An evaluation protocol name that is not registered (with the closest names)."""


@dataclass(frozen=True)
class SourceSetting:
    """One setting of a protocol beside the value its source uses.

    Attributes:
      setting: a :class:`Protocol` field, or a named aspect from :data:`ASPECTS`.
      source_value: what the source does, in words, with the source's own names.
      source: where it was read: ``owner/repo path`` (or the paper).
      matches: zoo does the same; False names a remaining difference.
      verified: [V] read in the source file; False: [R] recalled from the paper.
      zoo_value: what zoo does, in words; ``None`` renders the field's value.
    """

    setting: str
    source_value: str
    source: str
    matches: bool = True
    verified: bool = True
    zoo_value: str | None = None


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
      noop_max: no-op starts: a uniform 1..``noop_max`` no-op frames after each game's reset (in
        training and evaluation; not after a lost life); 0 for none.
      life_loss_terminal: in *training*, a drop in ``lives`` ends the transition as terminal
        (``TimeStep.terminated``: discount 0) while the game goes on: no reset, no no-ops, and
        the next observation starts a transition. Evaluation plays whole games either way.
      life_loss_resets_stack: at a lost life the agent starts afresh, in training and
        evaluation: the frame stack restarts zero-padded and ``TimeStep.first`` is set (so a
        recurrent core resets too), as Dopamine's agents do at each life-loss "episode".
      fire_reset: press FIRE after each reset (envpool's ``use_fire_reset``).
      frame_skip: frames per agent step (action repeat); 1 for none.
      max_pool: the observation is the pixel-wise max of the last two skipped frames.
      frame_shape: ``(height, width)`` of each preprocessed frame, or ``None`` for non-pixel suites.
      grayscale: frames are converted to luminance.
      stack: frames stacked along observation axis 0 (1 for no stacking).
      game_start_stack: what the stack holds before a game's first frames (and a life's, with
        ``life_loss_resets_stack``): ``zeros`` (dqn_zoo's and Dopamine's agents) or ``repeat``,
        the episode's first frame in every older slot (envpool's own stack, gymnasium's
        ``FrameStack``).
      max_episode_frames: a game is truncated after this many *frames* (agent steps × frame skip);
        ``None`` keeps the environment's own time limit.
      game_episode_frames: ``(game, frames)`` pairs that replace ``max_episode_frames`` for the
        named games (the game as in the environment id, e.g. ``Freeway`` of
        ``MinAtar/Freeway-v1``); empty for none.
      reward_clip: the training reward is clipped to ``±reward_clip`` at insertion; ``None`` for no
        clipping. Evaluation returns are always unclipped.
      eval_epsilon: ε of the ε-greedy evaluation policy (a preset's ``schedule.eval_epsilon``
        overrides it).
      sources: where the values come from (papers and source trees).
      source_settings: every setting beside its source's value (Atari protocols; empty
        otherwise); those that do not match are :attr:`differences`.
    """

    name: str
    suite: Suite
    description: str
    sticky_action_prob: float
    full_action_set: bool
    noop_max: int
    life_loss_terminal: bool
    life_loss_resets_stack: bool
    fire_reset: bool
    frame_skip: int
    max_pool: bool
    frame_shape: tuple[int, int] | None
    grayscale: bool
    stack: int
    game_start_stack: Literal["zeros", "repeat"]
    max_episode_frames: int | None
    game_episode_frames: tuple[tuple[str, int], ...]
    reward_clip: float | None
    eval_epsilon: float
    sources: tuple[str, ...]
    source_settings: tuple[SourceSetting, ...]

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
        if self.game_start_stack not in ("zeros", "repeat"):
            problems.append(f"game_start_stack={self.game_start_stack!r} is not zeros or repeat")
        for game, frames in self.game_episode_frames:
            if frames < 1 or frames % self.frame_skip:
                problems.append(
                    f"game_episode_frames of {game}: {frames} is not a positive multiple of "
                    f"frame_skip={self.frame_skip}"
                )
        if self.reward_clip is not None and self.reward_clip <= 0:
            problems.append(f"reward_clip={self.reward_clip} must be positive or None")
        if self.max_episode_frames is not None and self.max_episode_frames % self.frame_skip:
            problems.append(
                f"max_episode_frames={self.max_episode_frames} is not a multiple of "
                f"frame_skip={self.frame_skip}"
            )
        names = {f.name for f in fields(self)}
        for entry in self.source_settings:
            if entry.setting not in names and entry.setting not in ASPECTS:
                problems.append(
                    f"source setting {entry.setting!r} is neither a field nor an aspect "
                    f"({', '.join(ASPECTS)})"
                )
            elif entry.setting in ASPECTS and entry.zoo_value is None:
                problems.append(f"source setting {entry.setting!r} is an aspect: give zoo_value")
        if self.suite == "atari":
            if self.frame_shape is None:
                problems.append("an Atari protocol needs a frame_shape")
            if not self.max_pool:
                problems.append("envpool always max-pools the last two frames: max_pool=True")
            covered = {entry.setting for entry in self.source_settings}
            missing = [f for f in (*_ATARI_FIELDS, *ASPECTS) if f not in covered]
            if missing:
                problems.append(f"no source setting for {', '.join(missing)}")
        elif (
            self.frame_skip != 1
            or self.stack != 1
            or self.frame_shape is not None
            or self.max_pool
            or self.fire_reset
            or self.noop_max
            or self.life_loss_terminal
            or self.life_loss_resets_stack
        ):
            problems.append(
                f"a {self.suite!r} protocol has no frame settings: frame_skip=1, stack=1, "
                "frame_shape=None, max_pool/fire_reset/life-loss settings False, noop_max=0"
            )
        if problems:
            raise ValueError(f"protocol {self.name!r}: " + "; ".join(problems))

    @property
    def max_episode_steps(self) -> int | None:
        """The episode cap in agent steps (``max_episode_frames // frame_skip``), or ``None``."""
        if self.max_episode_frames is None:
            return None
        return self.max_episode_frames // self.frame_skip

    def episode_steps_for(self, env_id: str) -> int | None:
        """The episode cap of ``env_id`` in agent steps: its game's entry of
        :attr:`game_episode_frames`, else :attr:`max_episode_steps`."""
        game = env_id.rsplit("/", 1)[-1].split("-", 1)[0].lower()
        for name, frames in self.game_episode_frames:
            if name.lower() == game:
                return frames // self.frame_skip
        return self.max_episode_steps

    @property
    def differences(self) -> tuple[str, ...]:
        """The settings (fields or aspects) where zoo does not do what the source does."""
        return tuple(s.setting for s in self.source_settings if not s.matches)

    def life_loss_terminates(self, training: bool) -> bool:
        """Whether a lost life ends the transition as terminal: in training, where it says so."""
        return self.life_loss_terminal and training

    def training_reward_clip(self, training: bool) -> float | None:
        """The clip of ``TimeStep.reward``: the protocol's in training, none in evaluation."""
        return self.reward_clip if training else None

    def envpool_kwargs(self, training: bool, env_id: str = "") -> dict[str, Any]:
        """Keyword arguments of ``envpool.make`` for this protocol, every setting explicit.

        Training and evaluation use the same envpool settings: life loss and reward clipping are
        applied by :class:`~zoo.envs.VectorEnv` (``training`` is kept for symmetry with
        :meth:`gymnasium_kwargs`).

        Raises:
          ValueError: for a suite that envpool does not run (``minatar``).
        """
        del training  # envpool's episodic_life is never used (see the module docstring)
        cap = self.episode_steps_for(env_id)
        if self.suite == "classic":
            kwargs: dict[str, Any] = {}
            if cap is not None:
                kwargs["max_episode_steps"] = cap
            return kwargs
        if self.suite != "atari":
            raise ValueError(f"protocol {self.name!r} ({self.suite}) does not run on envpool")
        assert self.frame_shape is not None  # checked in __post_init__
        return {
            "repeat_action_probability": self.sticky_action_prob,
            "full_action_space": self.full_action_set,
            # envpool: noop_max=N gives 1..N no-op frames; 0 crashes it (see the module docstring).
            "noop_max": max(self.noop_max, 1),
            "episodic_life": False,  # zoo reads info["lives"] (no pseudo-step after a lost life)
            "zero_discount_on_life_loss": False,
            "use_fire_reset": self.fire_reset,
            "frame_skip": self.frame_skip,
            "stack_num": self.stack,
            "img_height": self.frame_shape[0],
            "img_width": self.frame_shape[1],
            "gray_scale": self.grayscale,
            "use_inter_area_resize": True,
            "reward_clip": False,  # zoo clips, keeping TimeStep.raw_reward unclipped
            "max_episode_steps": cap,
        }

    def ale_kwargs(self, training: bool, env_id: str = "") -> dict[str, Any]:
        """Keyword arguments of ALE's ``AtariVectorEnv`` (ale-py ≥ 0.11) for this protocol.

        The same settings as :meth:`envpool_kwargs` under ALE's names. Two differ in meaning
        (ALE ``src/ale/vector/preprocessed_env.cpp``, 0.12 [V]): ALE draws 0..``noop_max``−1
        no-op frames (envpool 1..``noop_max``), so the protocol's ``noop_max=N`` is ALE's N+1,
        0..N frames, and ``noop_max=0`` is no no-op at all; the episode cap counts frames (the
        no-op frames not included), so it is ``max_episode_steps × frame_skip``.
        :meth:`backend_differences` lists what stays different from envpool.

        Raises:
          ValueError: for a suite other than Atari.
        """
        del training  # the same settings in training and evaluation, as on envpool
        if self.suite != "atari":
            raise ValueError(f"protocol {self.name!r} ({self.suite}) does not run on ALE")
        assert self.frame_shape is not None  # checked in __post_init__
        cap = self.episode_steps_for(env_id)
        kwargs: dict[str, Any] = {
            "repeat_action_probability": self.sticky_action_prob,
            "full_action_space": self.full_action_set,
            "noop_max": self.noop_max + 1 if self.noop_max else 0,
            "use_fire_reset": self.fire_reset,
            "frameskip": self.frame_skip,
            "stack_num": self.stack,
            "img_height": self.frame_shape[0],
            "img_width": self.frame_shape[1],
            "grayscale": self.grayscale,
            "maxpool": self.max_pool,
            "episodic_life": False,  # zoo reads info["lives"], as on envpool
            "life_loss_info": False,
            "reward_clipping": False,  # zoo clips, keeping TimeStep.raw_reward unclipped
        }
        if cap is not None:
            kwargs["max_num_frames_per_episode"] = cap * self.frame_skip
        return kwargs

    def gymnax_kwargs(self, training: bool, env_id: str = "") -> dict[str, Any]:
        """gymnax ``EnvParams`` fields for this protocol: the episode cap where it sets one
        (``max_steps_in_episode``; else gymnax's own, e.g. CartPole-v1's 500).

        Raises:
          ValueError: for an Atari protocol (gymnax runs no Atari games).
        """
        del training  # gymnax's environments do not differ between training and evaluation
        if self.suite == "atari":
            raise ValueError(f"protocol {self.name!r} runs Atari games, which gymnax does not")
        cap = self.episode_steps_for(env_id)
        return {} if cap is None else {"max_steps_in_episode": cap}

    def backend_gaps(self, backend: str) -> tuple[str, ...]:
        """Why ``backend`` cannot run this protocol as it is defined (empty: it can).

        ``envpool`` and ``gymnasium`` run the suites :func:`zoo.envs.resolve_env` sends them;
        ALE's vector environment runs Atari protocols except those that press FIRE after no-op
        starts: ALE presses FIRE first and counts it as one of the no-op frames, envpool
        presses it after them (``purejaxql_atari``), so a game's first frames cannot be the
        protocol's.
        """
        if backend == "gymnax":
            if self.suite == "atari":
                return ("gymnax runs no Atari games",)
            if self.sticky_action_prob or (self.suite == "minatar" and self.full_action_set):
                return (
                    "gymnax's MinAtar ports have no sticky actions and play each game's minimal "
                    "action set (protocol gymnax_minatar has their settings)",
                )
            return ()
        if backend != "ale":
            return ()
        if self.suite != "atari":
            return (f"ALE's vector environment runs Atari games, not the {self.suite} suite",)
        if self.fire_reset and self.noop_max:
            return (
                "ALE presses FIRE before the no-op starts and counts it as one of them "
                "(envpool presses it after 1..noop_max no-op frames): the protocol's game "
                "starts cannot be reproduced; use the envpool backend",
            )
        return ()

    def backend_differences(self, backend: str) -> tuple[str, ...]:
        """What ``backend`` does differently from envpool under this protocol, each in a sentence
        (measured in ``tests/test_envs_ale.py``; ``docs/protocols.md`` has the figures).

        Empty for envpool itself, gymnasium, and where the backend is refused.
        """
        if self.backend_gaps(backend):
            return ()
        if backend == "gymnax":
            if self.suite == "minatar":
                return (
                    "the games are gymnax's JAX ports of MinAtar (purejaxql's), not the MinAtar "
                    "package's",
                )
            return ("the environment is gymnax's JAX port (its own initial-state draws)",)
        if backend != "ale" or self.suite != "atari":
            return ()
        if self.noop_max:
            noops = (
                f"no-op starts of 0..{self.noop_max} frames (ALE noop_max={self.noop_max + 1}), "
                f"where envpool draws 1..{self.noop_max}"
            )
        else:
            noops = (
                "no no-op frame after a game's reset, as the sources without no-op starts "
                "(envpool runs one fixed no-op frame: its noop_max=0 crashes)"
            )
        return (
            noops,
            "a game that ends on the step that reaches the episode cap is terminated, not "
            "truncated (envpool: truncated)",
            "the newest frame of a game's last observation leaves out the screen at the "
            "game's end (ALE stops the frame skip before grabbing it and, at one frame per "
            "step, repeats the step before's frame; envpool grabs it)",
        )

    def gymnasium_kwargs(self, training: bool, env_id: str = "") -> dict[str, Any]:
        """Keyword arguments of ``gymnasium.make`` for this protocol (``training`` is unused);
        ``env_id`` picks its game's episode cap (:meth:`episode_steps_for`)."""
        del training  # no gymnasium suite differs between training and evaluation
        kwargs: dict[str, Any] = {}
        if self.suite == "minatar":
            kwargs["sticky_action_prob"] = self.sticky_action_prob
            kwargs["use_minimal_action_set"] = not self.full_action_set
        elif self.suite == "atari":
            raise ValueError(f"protocol {self.name!r} runs Atari on envpool, not gymnasium")
        cap = self.episode_steps_for(env_id)
        if cap is not None:
            kwargs["max_episode_steps"] = cap
        return kwargs

    def backends_text(self) -> str:
        """Which backends run this protocol, in a line (``zoo show``, ``zoo list``)."""
        gymnax = "" if self.backend_gaps("gymnax") else "; gymnax (its JAX ports)"
        if self.suite == "minatar":
            return "gymnasium (the MinAtar package, auto)" + gymnax
        if self.suite == "classic":
            return (
                "envpool for its classic-control ids (auto), gymnasium for any gymnasium id"
                + gymnax
            )
        gaps = self.backend_gaps("ale")
        if gaps:
            return f"envpool (auto); not ale: {gaps[0]}"
        count = len(self.backend_differences("ale"))
        return f"envpool (auto), ale ({count} differences from envpool: docs/protocols.md)"

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain Python values, with :attr:`differences`, for run records."""
        return {**asdict(self), "differences": list(self.differences)}

    def summary(self) -> str:
        """A few lines for ``zoo show`` and logs: the settings and the named differences."""
        frames = "—" if self.frame_shape is None else "×".join(map(str, self.frame_shape))
        lines = [
            f"protocol {self.name} ({self.suite}): {self.description}",
            f"  sticky_action_prob={self.sticky_action_prob} full_action_set={self.full_action_set}"
            f" noop_max={self.noop_max} life_loss_terminal={self.life_loss_terminal}"
            f" life_loss_resets_stack={self.life_loss_resets_stack}",
            f"  frame_skip={self.frame_skip} frame_shape={frames} stack={self.stack}"
            f" game_start_stack={self.game_start_stack} fire_reset={self.fire_reset}"
            f" max_episode_frames={self.max_episode_frames} reward_clip={self.reward_clip}"
            f" eval_epsilon={self.eval_epsilon}",
        ]
        if self.game_episode_frames:
            caps = ", ".join(f"{game} {frames:,}" for game, frames in self.game_episode_frames)
            lines.append(f"  max_episode_frames by game: {caps}")
        lines.append(f"  backends: {self.backends_text()}")
        if self.differences:
            follows = self.sources[-1].split()[0]
            lines.append(
                f"  the protocol (not a preset) differs from {follows}, the code it follows, in: "
                + ", ".join(self.differences)
                + " (docs/protocols.md)"
            )
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ sources

_DQN_ZOO = "deepmind/dqn_zoo@f87bb1f dqn_zoo/"
_DOPAMINE = "google/dopamine dopamine/"
_ENVPOOL = "sail-sg/envpool envpool/atari/atari_env.h"
_ALL_FRAMES = "all 4 frames are played (envpool)"
_ZERO_PAD_BEFORE = "zeros in the oldest slots: [0, 0, 0, f₀], [0, 0, f₀, f₁], …"
_ENVPOOL_FRAMES = (
    "each frame grayscaled with the ALE palette, max over the last two, cv2 INTER_AREA resize "
    "(envpool use_inter_area_resize)"
)


def _dopamine_frames(atari_lib: str) -> tuple[SourceSetting, ...]:
    """The frame settings of Dopamine's ``AtariPreprocessing`` (baseline and Atari 100k alike)."""
    S = SourceSetting
    return (
        S("fire_reset", "no FIRE at reset", atari_lib),
        S("frame_skip", "4 (AtariPreprocessing frame_skip=4)", atari_lib),
        S("max_pool", "max over the last 2 frames of each repeat", atari_lib),
        S("frame_shape", "84×84 (screen_size 84)", atari_lib),
        S("grayscale", "yes (ale.getScreenGrayscale)", atari_lib),
        S("stack", "4 (NATURE_DQN_STACK_SIZE)", atari_lib),
    )


def _dqn_zoo_settings() -> tuple[SourceSetting, ...]:
    S = SourceSetting
    return (
        S("sticky_action_prob", "0 (repeat_action_probability 0.0)", _DQN_ZOO + "gym_atari.py"),
        S("full_action_set", "minimal set (full_action_space False)", _DQN_ZOO + "gym_atari.py"),
        S(
            "noop_max",
            "uniform 1–30 no-op frames at each game start, training and evaluation "
            "(RandomNoopsEnvironmentWrapper min_noop_steps=1, max_noop_steps=30)",
            _DQN_ZOO + "dqn/run_atari.py, gym_atari.py",
            zoo_value="uniform 1–30 no-op frames at each game start (envpool noop_max=30)",
        ),
        S(
            "life_loss_terminal",
            "discount 0 on the step where lives drop; the game and its frame stack go on "
            "(zero_discount_on_life_loss=True, ZeroDiscountOnLifeLoss)",
            _DQN_ZOO + "dqn/run_atari.py, processors.py",
        ),
        S(
            "life_loss_resets_stack",
            "no: the stack (processors.Deque) is reset only with the agent at a game's start",
            _DQN_ZOO + "processors.py, parts.py (run_loop)",
        ),
        S("fire_reset", "no FIRE at reset", _DQN_ZOO + "gym_atari.py"),
        S("frame_skip", "4 (num_action_repeats)", _DQN_ZOO + "dqn/run_atari.py"),
        S(
            "max_pool",
            "max over the last 2 frames (num_pooled_frames 2)",
            _DQN_ZOO + "processors.py",
        ),
        S(
            "frame_shape",
            "84×84 (environment_height, environment_width)",
            _DQN_ZOO + "dqn/run_atari.py",
        ),
        S("grayscale", "yes (grayscaling=True)", _DQN_ZOO + "processors.py"),
        S("stack", "4 (num_stacked_frames)", _DQN_ZOO + "dqn/run_atari.py"),
        S(
            "game_start_stack",
            "zeros in the newest slots: [f₀, 0, 0, 0], [f₀, f₁, 0, 0], … (Deque, then "
            "trailing_zero_pad)",
            _DQN_ZOO + "processors.py (atari)",
            matches=False,
            zoo_value=_ZERO_PAD_BEFORE,
        ),
        S(
            "frame_preprocessing",
            "max over the last two RGB frames, luminance 0.299R + 0.587G + 0.114B (rgb2y), "
            "PIL bilinear resize",
            _DQN_ZOO + "processors.py (rgb2y, resize)",
            matches=False,
            zoo_value=_ENVPOOL_FRAMES,
        ),
        S(
            "frame_skip_at_life_loss",
            "all 4 frames are played (lives are only compared)",
            _DQN_ZOO + "processors.py",
            zoo_value=_ALL_FRAMES,
        ),
        S(
            "max_episode_frames",
            "108,000 frames (max_frames_per_episode), then the episode is cut",
            _DQN_ZOO + "dqn/run_atari.py, parts.py (run_loop)",
        ),
        S(
            "truncation",
            "the cut transition keeps its discount: bootstraps from the last observation",
            _DQN_ZOO + "parts.py (run_loop relabels the step LAST)",
            zoo_value="truncated: bootstraps from the last observation",
        ),
        S(
            "reward_clip",
            "±1 on the reward summed over the action repeat (max_abs_reward 1)",
            _DQN_ZOO + "dqn/run_atari.py, processors.py",
        ),
        S(
            "eval_epsilon",
            "0.05 (eval_exploration_epsilon; each agent's run_atari.py sets its own, and so do "
            "the presets)",
            _DQN_ZOO + "dqn/run_atari.py",
        ),
        S(
            "evaluation",
            "after each 1M-frame iteration, 500,000 frames of evaluation (num_eval_frames); the "
            "mean return of the games played in them",
            _DQN_ZOO + "dqn/run_atari.py, parts.py (generate_statistics)",
            matches=False,
            zoo_value="--eval-episodes whole games every --eval-every transitions",
        ),
    )


def _dopamine_settings(full_action_set: bool) -> tuple[SourceSetting, ...]:
    S = SourceSetting
    atari_lib = _DOPAMINE + "discrete_domains/atari_lib.py"
    gin = _DOPAMINE + "jax/agents/dqn/configs/dqn.gin"
    runner = _DOPAMINE + "discrete_domains/run_experiment.py"
    actions = S(
        "full_action_set",
        "the game's minimal set: gym's <game>NoFrameskip-v0 (until 2024) and ale_py's "
        "ALE/<game>-v5 (since) both register full_action_space=False",
        atari_lib + " (create_atari_environment); Farama-Foundation/Arcade-Learning-Environment "
        "src/ale/python/registration.py",
    )
    evaluation = S(
        "evaluation",
        "the baseline curves are training returns: the mean return of the games of each "
        "250,000-step iteration (Runner.training_steps)",
        gin + ", " + runner,
        zoo_value="zoo compare reads the training returns of metrics.jsonl for them",
    )
    if full_action_set:
        evaluation = S(
            "evaluation",
            "the paper recommends reporting the mean return of the last episodes of training",
            "Machado et al. 2018, https://doi.org/10.1613/jair.5699",
            verified=False,
            zoo_value="zoo compare reads the training returns of metrics.jsonl",
        )
        actions = S(
            "full_action_set",
            "all 18 actions (the paper's recommendation; Dopamine itself uses the minimal set)",
            "Machado et al. 2018, https://doi.org/10.1613/jair.5699",
            verified=False,
        )
    return (
        S(
            "sticky_action_prob",
            "0.25 (create_atari_environment.sticky_actions = True)",
            gin + ", " + atari_lib,
        ),
        actions,
        S(
            "noop_max",
            "none: Runner._initialize_episode only resets the game",
            runner,
            matches=False,
            zoo_value="one fixed no-op frame after the reset (envpool noop_max=1; 0 crashes it)",
        ),
        S(
            "life_loss_terminal",
            "no (AtariPreprocessing terminal_on_life_loss=False)",
            atari_lib,
        ),
        S("life_loss_resets_stack", "no (no life-loss signal)", atari_lib),
        *_dopamine_frames(atari_lib),
        S(
            "game_start_stack",
            "zeros in the oldest slots: the state is zero-filled at begin_episode and each frame "
            "is rolled in at the end",
            _DOPAMINE + "jax/agents/dqn/dqn_agent.py (_reset_state, _record_observation)",
            zoo_value=_ZERO_PAD_BEFORE,
        ),
        S(
            "frame_preprocessing",
            "each frame grayscaled by the ALE, max over the last two, cv2 INTER_AREA resize",
            atari_lib + " (AtariPreprocessing)",
            zoo_value=_ENVPOOL_FRAMES,
        ),
        S(
            "frame_skip_at_life_loss",
            "all 4 frames are played (no life-loss signal)",
            atari_lib,
            zoo_value=_ALL_FRAMES,
        ),
        S(
            "max_episode_frames",
            "27,000 agent steps = 108,000 frames (Runner.max_steps_per_episode)",
            gin + ", " + runner,
        ),
        S(
            "truncation",
            "the baseline curves' agents stored the cap's last transition as terminal "
            "(end_episode stored terminal=True until commit c443e88, January 2021; since, the "
            "runner passes is_terminal=False)",
            runner + ", " + _DOPAMINE + "jax/agents/dqn/dqn_agent.py (end_episode)",
            matches=False,
            zoo_value="truncated: bootstraps from the last observation",
        ),
        S("reward_clip", "±1 (Runner clip_rewards=True)", runner),
        S("eval_epsilon", "0.001 (JaxDQNAgent.epsilon_eval)", gin),
        evaluation,
    )


def _atari_100k_settings() -> tuple[SourceSetting, ...]:
    S = SourceSetting
    labs = _DOPAMINE + "labs/atari_100k/"
    atari_lib = _DOPAMINE + "discrete_domains/atari_lib.py"
    runner = labs + "atari_100k_runner.py"
    return (
        S(
            "sticky_action_prob",
            "0 (create_atari_environment.sticky_actions = False)",
            labs + "configs/DER.gin",
        ),
        S(
            "full_action_set",
            "the game's minimal set (full_action_space=False in the gym/ale_py registration)",
            atari_lib,
        ),
        S(
            "noop_max",
            "uniform 0–29 agent steps of action 0 (0, 4, …, 116 frames) at each game start, "
            "training and evaluation, not counted as steps (DataEfficientAtariRunner "
            "max_noops=30, _initialize_episode)",
            runner,
            matches=False,
            zoo_value="uniform 1–116 no-op frames at each game start (envpool noop_max=116)",
        ),
        S(
            "life_loss_terminal",
            "terminal on the step where lives drop; the game goes on "
            "(AtariPreprocessing.terminal_on_life_loss = True; the runner resets only at "
            "game_over)",
            labs + "configs/DER.gin, atari_100k_runner.py (_run_parallel)",
        ),
        S(
            "life_loss_resets_stack",
            "yes, in training and evaluation: at each lost life the agent's stack is "
            "zero-filled (reset_one) before the next frame is rolled in",
            runner + " (_run_parallel), atari_100k_rainbow_agent.py (reset_one)",
        ),
        *_dopamine_frames(atari_lib),
        S(
            "game_start_stack",
            "zeros in the oldest slots, at a game start and after each lost life "
            "(reset_all/reset_one, _record_observation rolls frames in)",
            labs + "atari_100k_rainbow_agent.py",
            zoo_value=_ZERO_PAD_BEFORE,
        ),
        S(
            "frame_preprocessing",
            "each frame grayscaled by the ALE, max over the last two, cv2 INTER_AREA resize",
            atari_lib + " (AtariPreprocessing)",
            zoo_value=_ENVPOOL_FRAMES,
        ),
        S(
            "frame_skip_at_life_loss",
            "the action repeat stops at the frame the life is lost (AtariPreprocessing.step "
            "breaks on is_terminal)",
            atari_lib,
            matches=False,
            zoo_value=_ALL_FRAMES,
        ),
        S(
            "max_episode_frames",
            "27,000 agent steps = 108,000 frames (Runner.max_steps_per_episode)",
            labs + "configs/DER.gin",
        ),
        S(
            "truncation",
            "the game ends at the cap as an episode end without a terminal (episode_end; "
            "Dopamine since commit c443e88, January 2021)",
            runner + " (_run_parallel)",
            zoo_value="truncated: bootstraps from the last observation",
        ),
        S(
            "reward_clip",
            "±1 (Runner clip_rewards=True)",
            _DOPAMINE + "discrete_domains/run_experiment.py",
        ),
        S("eval_epsilon", "0.001 (JaxDQNAgent.epsilon_eval)", labs + "configs/DER.gin"),
        S(
            "evaluation",
            "100 whole games after each 10,000-step iteration, one per environment "
            "(num_eval_episodes=100, eval_one_to_one); the last iteration's mean is reported",
            labs + "configs/DER.gin, atari_100k_runner.py (_run_eval_phase)",
            matches=False,
            zoo_value="--eval-episodes whole games every --eval-every transitions (use "
            "--eval-episodes 100)",
        ),
    )


def _r2d2_settings() -> tuple[SourceSetting, ...]:
    S = SourceSetting
    paper = "Kapturowski et al. 2019, https://openreview.net/forum?id=r1lyTjAqYX"
    acme = "google-deepmind/acme acme/agents/jax/r2d2/config.py"
    return (
        S("sticky_action_prob", "0", paper, verified=False),
        S("full_action_set", "the minimal set", paper, verified=False),
        S("noop_max", "up to 30 no-op starts", paper, verified=False),
        S("life_loss_terminal", "no life-loss signal", paper, verified=False),
        S("life_loss_resets_stack", "no", paper, verified=False),
        S("fire_reset", "no FIRE at reset", paper, verified=False),
        S("frame_skip", "4", paper, verified=False),
        S("max_pool", "max over the last 2 frames", paper, verified=False),
        S("frame_shape", "84×84", paper, verified=False),
        S("grayscale", "yes", paper, verified=False),
        S("stack", "1: the LSTM carries the history", paper, verified=False),
        S("game_start_stack", "no stack", paper, verified=False, zoo_value="no stack"),
        S(
            "frame_preprocessing",
            "the standard ALE preprocessing",
            paper,
            verified=False,
            zoo_value=_ENVPOOL_FRAMES,
        ),
        S(
            "frame_skip_at_life_loss",
            "all frames are played",
            paper,
            verified=False,
            zoo_value=_ALL_FRAMES,
        ),
        S("max_episode_frames", "108,000 frames (30 minutes)", paper, verified=False),
        S(
            "truncation",
            "not stated",
            paper,
            verified=False,
            zoo_value="truncated: bootstraps from the last observation",
        ),
        S("reward_clip", "none: the value rescaling h replaces it (clip_rewards=False)", acme),
        S("eval_epsilon", "0 (evaluation_epsilon)", acme),
        S(
            "evaluation",
            "not stated",
            paper,
            verified=False,
            zoo_value="--eval-episodes whole games every --eval-every transitions",
        ),
    )


def _purejaxql_atari_settings() -> tuple[SourceSetting, ...]:
    """purejaxql's PQN Atari environment: envpool 0.8.4 with its config's ENV_KWARGS."""
    S = SourceSetting
    config = "mttga/purejaxql purejaxql/config/alg/pqn_atari.yaml (ENV_KWARGS)"
    make = "mttga/purejaxql purejaxql/pqn_atari.py (make_env: envpool.make(**ENV_KWARGS))"
    envpool = _ENVPOOL + " (0.8.4, pinned in purejaxql's pyproject.toml)"
    return (
        S("sticky_action_prob", "0 (repeat_action_probability 0.)", config),
        S("full_action_set", "minimal set (envpool's full_action_space default False)", make),
        S(
            "noop_max",
            "noop_max 30: 1–30 no-op frames at each reset, one fewer when FIRE follows "
            "(dist_noop_ + 1 − fire_reset_)",
            config + "; " + envpool,
            zoo_value="the same envpool call (noop_max=30 with use_fire_reset)",
        ),
        S(
            "life_loss_terminal",
            "episodic_life True: the step that loses a life is `done`, which purejaxql treats as "
            "terminal; the next step is envpool's reset step (its action dropped), which plays "
            "0–29 no-op frames and FIRE without resetting the game, and purejaxql trains on it",
            config + "; " + envpool + " (Reset with episodic_life_)",
            matches=False,
            zoo_value="discount 0 on the step where lives drop; the game goes on at the next "
            "agent step, with no extra step, no-ops or FIRE",
        ),
        S(
            "life_loss_resets_stack",
            "no: envpool's reset after a lost life pushes one frame (push_all only at a game "
            "reset)",
            envpool + " (Reset: PushStack(push_all, …))",
        ),
        S(
            "fire_reset",
            "FIRE after each reset on games whose minimal set has it (use_fire_reset's default "
            "True, which purejaxql leaves as it is)",
            envpool + " (use_fire_reset)",
        ),
        S("frame_skip", "4 (frame_skip 4)", config),
        S("max_pool", "max over the last 2 frames of each repeat", envpool),
        S("frame_shape", "84×84 (envpool's img_height/img_width defaults)", envpool),
        S("grayscale", "yes (envpool's gray_scale default)", envpool),
        S("stack", "4 (envpool's stack_num default)", envpool),
        S(
            "game_start_stack",
            "the game's first frame in every slot: [f₀, f₀, f₀, f₀], [f₀, f₀, f₀, f₁], … "
            "(PushStack with push_all at a game reset)",
            envpool + " (PushStack)",
            zoo_value="repeat: [f₀, f₀, f₀, f₀], [f₀, f₀, f₀, f₁], …",
        ),
        S("frame_preprocessing", _ENVPOOL_FRAMES, envpool, zoo_value=_ENVPOOL_FRAMES),
        S(
            "frame_skip_at_life_loss",
            "all 4 frames are played (the repeat stops only at a game over)",
            envpool + " (Step)",
            zoo_value=_ALL_FRAMES,
        ),
        S(
            "max_episode_frames",
            "108,000 frames (envpool's max_episode_steps default 27,000 agent steps)",
            envpool,
        ),
        S(
            "truncation",
            "the capped step is `done`, terminal to purejaxql (one done flag)",
            "mttga/purejaxql purejaxql/pqn_atari.py (_compute_targets)",
            zoo_value="truncated (the PQN presets set rollout.truncation: terminal, as purejaxql)",
        ),
        S("reward_clip", "±1 (reward_clip True)", config),
        S(
            "eval_epsilon",
            "0 (EPS_TEST)",
            "mttga/purejaxql purejaxql/config/alg/pqn_atari.yaml",
        ),
        S(
            "evaluation",
            "TEST_ENVS 8 extra environments of the training pool act greedily all along; the "
            "returns of the games they finish are logged",
            "mttga/purejaxql purejaxql/pqn_atari.py",
            matches=False,
            zoo_value="--eval-episodes whole games every --eval-every transitions",
        ),
    )


#: The frame processing every Atari protocol shares (each states the rest itself).
_ATARI_FRAMES: dict[str, Any] = {
    "frame_skip": 4,
    "max_pool": True,
    "frame_shape": (84, 84),
    "grayscale": True,
    "max_episode_frames": 108_000,
    "game_episode_frames": (),
}

#: No Atari processing at all: what the classic and MinAtar protocols share.
_NO_PREPROCESSING: dict[str, Any] = {
    "noop_max": 0,
    "life_loss_terminal": False,
    "life_loss_resets_stack": False,
    "fire_reset": False,
    "frame_skip": 1,
    "max_pool": False,
    "frame_shape": None,
    "grayscale": False,
    "stack": 1,
    "game_start_stack": "zeros",
    "max_episode_frames": None,
    "game_episode_frames": (),
    "reward_clip": None,
}

_DOPAMINE_2018 = Protocol(
    name="dopamine_2018",
    suite="atari",
    description="google/dopamine's Atari settings (Castro et al. 2018), behind its baseline "
    "curves: sticky actions 0.25, minimal action set, no life-loss signal, no no-op starts",
    sticky_action_prob=0.25,
    full_action_set=False,
    noop_max=0,
    life_loss_terminal=False,
    life_loss_resets_stack=False,
    fire_reset=False,
    **_ATARI_FRAMES,
    stack=4,
    game_start_stack="zeros",
    reward_clip=1.0,
    eval_epsilon=0.001,
    sources=(
        "Castro et al. 2018, https://arxiv.org/abs/1812.06110",
        "google/dopamine dopamine/discrete_domains/atari_lib.py, run_experiment.py, "
        "dopamine/jax/agents/dqn/configs/dqn.gin, dopamine/jax/agents/dqn/dqn_agent.py [V]",
    ),
    source_settings=_dopamine_settings(full_action_set=False),
)

_PROTOCOLS = (
    Protocol(
        name="nature_2015",
        suite="atari",
        description="Nature DQN (Mnih et al. 2015) as in dqn_zoo: no-op starts, discount 0 at a "
        "lost life in training, minimal actions, no sticky actions",
        sticky_action_prob=0.0,
        full_action_set=False,
        noop_max=30,
        life_loss_terminal=True,
        life_loss_resets_stack=False,
        fire_reset=False,
        **_ATARI_FRAMES,
        stack=4,
        game_start_stack="zeros",
        reward_clip=1.0,
        eval_epsilon=0.05,
        sources=(
            "Mnih et al. 2015, https://doi.org/10.1038/nature14236",
            "deepmind/dqn_zoo@f87bb1f dqn_zoo/gym_atari.py, processors.py, parts.py, "
            "dqn/run_atari.py [V]",
        ),
        source_settings=_dqn_zoo_settings(),
    ),
    Protocol(
        name="purejaxql_atari",
        suite="atari",
        description="purejaxql's PQN Atari environment (Gallici et al. 2024): envpool 0.8.4 with "
        "FIRE at reset, no-op starts, a lost life terminal, the first frame repeated in the "
        "stack, no sticky actions",
        sticky_action_prob=0.0,
        full_action_set=False,
        noop_max=30,
        life_loss_terminal=True,
        life_loss_resets_stack=False,
        fire_reset=True,
        **_ATARI_FRAMES,
        stack=4,
        game_start_stack="repeat",
        reward_clip=1.0,
        eval_epsilon=0.0,
        sources=(
            "Gallici et al. 2024, https://arxiv.org/abs/2407.04811",
            "mttga/purejaxql purejaxql/config/alg/pqn_atari.yaml, purejaxql/pqn_atari.py; "
            "sail-sg/envpool envpool/atari/atari_env.h (0.8.4) [V]",
        ),
        source_settings=_purejaxql_atari_settings(),
    ),
    _DOPAMINE_2018,
    replace(
        _DOPAMINE_2018,
        name="machado_2018",
        description="Machado et al. 2018's recommendations: dopamine_2018 with the full action "
        "set of 18",
        full_action_set=True,
        sources=(
            "Machado et al. 2018, https://doi.org/10.1613/jair.5699 (sticky actions, full "
            "action set, no life-loss signal [R])",
            "the rest as google/dopamine's implementation (protocol dopamine_2018) [V]",
        ),
        source_settings=_dopamine_settings(full_action_set=True),
    ),
    Protocol(
        name="atari_100k",
        suite="atari",
        description="Atari 100k (Kaiser et al. 2020) as run by Dopamine's data-efficient "
        "runner: no sticky actions, life loss terminal in training, stack restarted per life",
        sticky_action_prob=0.0,
        full_action_set=False,
        noop_max=116,
        life_loss_terminal=True,
        life_loss_resets_stack=True,
        fire_reset=False,
        **_ATARI_FRAMES,
        stack=4,
        game_start_stack="zeros",
        reward_clip=1.0,
        eval_epsilon=0.001,
        sources=(
            "Kaiser et al. 2020, https://arxiv.org/abs/1903.00374",
            "van Hasselt et al. 2019, https://arxiv.org/abs/1906.05243",
            "google/dopamine dopamine/labs/atari_100k/configs/DER.gin, atari_100k_runner.py, "
            "atari_100k_rainbow_agent.py; dopamine/discrete_domains/atari_lib.py [V]",
        ),
        source_settings=_atari_100k_settings(),
    ),
    Protocol(
        name="r2d2_2019",
        suite="atari",
        description="R2D2 (Kapturowski et al. 2019): no frame stack, no life-loss terminal, no "
        "sticky actions, no reward clipping",
        sticky_action_prob=0.0,  # [R]
        full_action_set=False,  # [R]
        noop_max=30,  # [R]
        life_loss_terminal=False,  # [R]
        life_loss_resets_stack=False,
        fire_reset=False,
        **_ATARI_FRAMES,
        stack=1,  # [R] the LSTM replaces the frame stack
        game_start_stack="zeros",  # no stack to fill
        reward_clip=None,  # [V] acme r2d2 clip_rewards=False
        eval_epsilon=0.0,  # [V] acme r2d2 evaluation_epsilon=0
        sources=(
            "Kapturowski et al. 2019, https://openreview.net/forum?id=r1lyTjAqYX (stack, life "
            "loss, sticky actions, no-op starts, action set recalled [R])",
            "google-deepmind/acme acme/agents/jax/r2d2/config.py (clip_rewards False, "
            "evaluation_epsilon 0) [V]",
        ),
        source_settings=_r2d2_settings(),
    ),
    Protocol(
        name="classic",
        suite="classic",
        description="classic control and other gymnasium environments: the environment's own "
        "time limit, no reward clipping, greedy evaluation",
        sticky_action_prob=0.0,
        full_action_set=False,
        **_NO_PREPROCESSING,
        eval_epsilon=0.0,
        sources=("the environment's own definition (e.g. CartPole-v1: 500 steps)",),
        source_settings=(),
    ),
    Protocol(
        name="minatar",
        suite="minatar",
        description="MinAtar (Young & Tian 2019) through gymnasium: sticky actions 0.1, full "
        "action set, no frame skip or stack",
        sticky_action_prob=0.1,  # [V] MinAtar's Environment default
        full_action_set=True,  # [V] all 6 actions, as Revisiting Rainbow's minatar_env.py
        **_NO_PREPROCESSING,
        eval_epsilon=0.0,  # the paper reports training returns; greedy evaluation is our choice
        sources=(
            "Young & Tian 2019, https://arxiv.org/abs/1903.03176",
            "MinAtar 1.0.15 minatar/environment.py (sticky_action_prob=0.1, num_actions 6, "
            "difficulty_ramping True) [V]",
            "JohanSamir/revisiting_rainbow revisiting_rainbow/minatar_env.py "
            "(minatar.Environment(env_name) with its defaults, all num_actions() = 6 actions) [V]; "
            "Configs/*.gin (max_steps_per_episode 1e8: no cap, stack_size 1) [V]",
        ),
        source_settings=(),
    ),
    Protocol(
        name="gymnax_minatar",
        suite="minatar",
        description="MinAtar with gymnax's settings (purejaxql's PQN MinAtar environment): no "
        "sticky actions, the minimal action set, 1,000 steps per episode (Freeway 2,500); the "
        "games are the MinAtar package's, not gymnax's JAX ports",
        sticky_action_prob=0.0,  # [V] gymnax's MinAtar ports have no sticky actions
        full_action_set=False,  # [V] use_minimal_action_set=True (Asterix: 5 actions)
        **{
            **_NO_PREPROCESSING,
            "max_episode_frames": 1_000,  # [V] EnvParams.max_steps_in_episode (frame_skip 1)
            "game_episode_frames": (("Freeway", 2_500),),  # [V] freeway.py
        },
        eval_epsilon=0.0,  # [V] purejaxql pqn_minatar.yaml EPS_TEST 0
        sources=(
            "Lange 2022, gymnax, https://github.com/RobertTLange/gymnax (0.0.6, pinned by "
            "purejaxql): gymnax/environments/minatar/*.py (EnvParams.max_steps_in_episode 1000, "
            "Freeway 2500; use_minimal_action_set=True; no sticky actions) [V]",
            "mttga/purejaxql purejaxql/pqn_minatar.py (gymnax.make(ENV_NAME)) [V]",
        ),
        source_settings=(),
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
