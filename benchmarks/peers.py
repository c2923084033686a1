"""One peer workload of the throughput benchmark: SB3's or SBX's own DQN, timed while learning.

    python benchmarks/peers.py --library sb3 --workload breakout
    python benchmarks/peers.py --library sbx --workload cartpole-8 --quick

Runs ONE (library, workload) pair in this process and prints ONE JSON line on stdout::

    {"library": "sb3", "workload": "breakout", "env_steps_per_s": ..., "updates_per_s": ...,
     "env_steps": ..., "updates": ..., "seconds": ..., "settings": {...}, "versions": {...}}

Everything else (warnings, library chatter) goes to stderr. The caller measures peak memory
(``ru_maxrss`` of this child process); this script imports only what its library needs, though
envpool itself imports JAX, so SB3 runs carry JAX's import too.

The peers are Stable-Baselines3's ``stable_baselines3.DQN`` (PyTorch; Raffin et al. 2021, "Stable-
Baselines3: Reliable Reinforcement Learning Implementations", JMLR 22(268)) and SBX's ``sbx.DQN``
(SB3's JAX port, https://github.com/araffin/sbx), both the DQN of Mnih et al. 2015 ("Human-level
control through deep reinforcement learning", Nature 518). They run their own learning loops
(``collect_rollouts`` → ``train``), replay buffers and networks; this file supplies only the
environments (envpool, through :class:`EnvpoolVecEnv`, so the environment is the one the zoo
trains on) and sets every setting that matters for speed explicitly (:data:`WORKLOADS`).

Timing: ``learn`` runs once past ``learning_starts`` plus a few updates (warm-up: random-action
prefill, the first updates, SBX's JIT compilation), then again with ``reset_num_timesteps=False``
and a callback that records (time, ``num_timesteps``, ``_n_updates``) at the first env step and
stops learning once ``--seconds`` have passed. Rates are the differences over that window. PyTorch
keeps its default thread count (``torch.get_num_threads()``, all cores) unless ``--torch-threads``
says otherwise; the count used is reported in ``versions``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

LIBRARIES = ("sb3", "sbx")

# zoo's ``nature_2015`` training protocol (zoo.envs.protocols: Protocol.envpool_kwargs(True)),
# written out so that SB3 runs need not import zoo (and with it JAX). One difference: the peers
# have no reward clipping of their own (SB3's AtariWrapper would clip), so envpool clips here.
BREAKOUT_ENV = {
    "repeat_action_probability": 0.0,
    "full_action_space": False,
    "noop_max": 30,
    "episodic_life": True,
    "zero_discount_on_life_loss": False,
    "use_fire_reset": False,
    "frame_skip": 4,
    "stack_num": 4,
    "img_height": 84,
    "img_width": 84,
    "gray_scale": True,
    "use_inter_area_resize": True,
    "reward_clip": True,
    "max_episode_steps": 27_000,
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """One row of the performance issue's table, as the peers' DQN settings.

    Attributes:
      env_id: envpool task id.
      num_envs: environments stepped together (one vector step = ``num_envs`` transitions).
      env_kwargs: extra ``envpool.make`` arguments.
      policy: ``"CnnPolicy"`` (Nature CNN) or ``"MlpPolicy"``.
      hidden: hidden layer sizes after the torso (Nature CNN: its 512-unit layer; MLP: the layers).
      dqn: keyword arguments of ``DQN(...)`` shared by SB3 and SBX. ``train_freq`` counts vector
        steps; SB3 and SBX divide ``target_update_interval`` (transitions) by ``num_envs``.
      seconds: default measurement window (``--quick`` halves it).
    """

    env_id: str
    num_envs: int
    env_kwargs: dict[str, Any]
    policy: str
    hidden: tuple[int, ...]
    dqn: dict[str, Any]
    seconds: float


_CARTPOLE_DQN = {
    "learning_rate": 2.5e-4,
    "buffer_size": 10_000,
    "learning_starts": 1_000,
    "batch_size": 128,
    "gamma": 0.99,
    "tau": 1.0,
    "target_update_interval": 500,
    "exploration_fraction": 0.1,
    "exploration_initial_eps": 0.05,
    "exploration_final_eps": 0.05,
    "optimize_memory_usage": False,
}

WORKLOADS: dict[str, Workload] = {
    "breakout": Workload(
        env_id="Breakout-v5",
        num_envs=1,
        env_kwargs=BREAKOUT_ENV,
        policy="CnnPolicy",
        hidden=(512,),
        dqn={
            "learning_rate": 1e-4,
            # 20k transitions (2 × 20k × 28 KiB ≈ 1.1 GiB allocated, touched only as it fills), not
            # DQN's 1M: the window fills a few thousand slots, and the buffer must not dominate
            # the peak memory the caller reports.
            "buffer_size": 20_000,
            "learning_starts": 1_000,
            "batch_size": 32,
            "gamma": 0.99,
            "tau": 1.0,
            "train_freq": 4,
            "gradient_steps": 1,
            "target_update_interval": 1_000,
            # ε fixed at its final value: the greedy forward pass runs on ~95% of steps, as it does
            # for most of training (and ε does not drift with the two learn() calls' progress).
            "exploration_fraction": 0.1,
            "exploration_initial_eps": 0.05,
            "exploration_final_eps": 0.05,
            "optimize_memory_usage": False,
        },
        seconds=30.0,
    ),
    "cartpole-1": Workload(
        env_id="CartPole-v1",
        num_envs=1,
        env_kwargs={},
        policy="MlpPolicy",
        hidden=(120, 84),
        dqn={**_CARTPOLE_DQN, "train_freq": 10, "gradient_steps": 1},
        seconds=20.0,
    ),
    "cartpole-8": Workload(
        env_id="CartPole-v1",
        num_envs=8,
        env_kwargs={},
        policy="MlpPolicy",
        hidden=(120, 84),
        dqn={**_CARTPOLE_DQN, "train_freq": 5, "gradient_steps": 4},
        seconds=20.0,
    ),
}

# Warm-up past learning_starts: this many train() calls (the first compiles SBX's update).
WARMUP_TRAIN_CALLS = 20


class PeerSetupError(RuntimeError):
    """A peer library is missing or cannot run the workload."""


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise PeerSetupError(
            f"cannot import {module!r} ({err}). Install the peers: "
            "pip install torch --index-url https://download.pytorch.org/whl/cpu && "
            "pip install -e '.[peers]' "
            "(see benchmarks/PEERS.md)"
        ) from err


def make_vec_env(workload: Workload, seed: int = 0) -> Any:
    """``workload``'s envpool environments behind SB3's ``VecEnv`` interface."""
    vec_env = _require("stable_baselines3.common.vec_env")
    envpool = _require("envpool")

    class EnvpoolVecEnv(vec_env.VecEnv):
        """An envpool pool (gymnasium API, synchronous) as an SB3 ``VecEnv``.

        SB3 expects same-step autoreset: the step that ends an episode returns the *next*
        episode's first observation, with the final one in ``infos[i]["terminal_observation"]``
        and ``infos[i]["TimeLimit.truncated"]`` for time limits. envpool resets on the following
        step instead (that step ignores its action), so the finished environments are reset here
        at once with envpool's partial ``reset(env_id)``. With ``episodic_life`` envpool's reset
        after a lost life continues the game, as its own autoreset would. ``infos[i]["episode"]``
        carries the return and length, as SB3's ``Monitor`` would.
        """

        def __init__(self) -> None:
            self.pool = envpool.make(
                workload.env_id,
                env_type="gymnasium",
                num_envs=workload.num_envs,
                batch_size=workload.num_envs,
                seed=seed,
                **workload.env_kwargs,
            )
            self._actions = np.zeros(workload.num_envs, np.int32)
            self._returns = np.zeros(workload.num_envs, np.float64)
            self._lengths = np.zeros(workload.num_envs, np.int64)
            self._start = time.perf_counter()
            super().__init__(workload.num_envs, self.pool.observation_space, self.pool.action_space)

        def reset(self) -> np.ndarray:
            obs, info = self.pool.reset()
            self._returns[:] = 0.0
            self._lengths[:] = 0
            return np.asarray(obs)[np.argsort(info["env_id"])]

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = np.asarray(actions, dtype=np.int32).reshape(self.num_envs)

        def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
            obs, reward, terminated, truncated, info = self.pool.step(self._actions)
            order = np.argsort(info["env_id"])
            obs, reward = np.asarray(obs)[order], np.asarray(reward, np.float32)[order]
            terminated, truncated = terminated[order], truncated[order]
            done = terminated | truncated
            self._returns += reward
            self._lengths += 1
            infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
            if done.any():
                ids = np.flatnonzero(done).astype(np.int32)
                now = time.perf_counter() - self._start
                for i in ids:
                    infos[i] = {
                        "terminal_observation": obs[i].copy(),
                        "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                        "episode": {"r": self._returns[i], "l": self._lengths[i], "t": now},
                    }
                self._returns[ids] = 0.0
                self._lengths[ids] = 0
                reset_obs, reset_info = self.pool.reset(ids)
                obs[reset_info["env_id"]] = reset_obs
            return obs, reward, done, infos

        def close(self) -> None:
            self.pool.close()

        def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
            if attr_name == "render_mode":
                return [None] * len(self._indices(indices))
            raise AttributeError(f"EnvpoolVecEnv has no per-env attribute {attr_name!r}")

        def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
            raise AttributeError(f"EnvpoolVecEnv cannot set per-env attribute {attr_name!r}")

        def env_method(self, method_name: str, *args: Any, indices: Any = None, **kw: Any) -> Any:
            raise AttributeError(f"EnvpoolVecEnv cannot call per-env method {method_name!r}")

        def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
            return [False] * len(self._indices(indices))

        def _indices(self, indices: Any) -> Sequence[int]:
            if indices is None:
                return range(self.num_envs)
            return [indices] if isinstance(indices, int) else list(indices)

    return EnvpoolVecEnv()


def _sbx_mlp_policy() -> type:
    """SBX's ``DQNPolicy`` with hidden layers of different sizes (120-84).

    SBX's own ``DQNPolicy`` reads only ``net_arch[0]`` and repeats it (``[120, 84]`` would build
    120-120), so this subclass changes only the Q-network module; the optimizer, the train
    state and SBX's jitted update and action selection are SBX's.
    """
    nn = _require("flax.linen")
    jax = _require("jax")
    policies = _require("sbx.dqn.policies")
    aliases = _require("sbx.common.type_aliases")

    class MlpQNetwork(nn.Module):
        hidden: tuple[int, ...]
        n_actions: int

        @nn.compact
        def __call__(self, x: Any) -> Any:
            x = x.reshape((x.shape[0], -1))
            for size in self.hidden:
                x = nn.relu(nn.Dense(size)(x))
            return nn.Dense(self.n_actions)(x)

    class MlpDQNPolicy(policies.DQNPolicy):
        def __init__(self, *args: Any, net_arch: Sequence[int], **kwargs: Any) -> None:
            super().__init__(*args, net_arch=list(net_arch), **kwargs)
            self.hidden = tuple(int(h) for h in net_arch)

        def build(self, key: Any, lr_schedule: Any) -> Any:
            key, qf_key = jax.random.split(key, 2)
            obs = jax.numpy.asarray(self.observation_space.sample()[None])
            self.qf = MlpQNetwork(hidden=self.hidden, n_actions=int(self.action_space.n))
            params = self.qf.init({"params": qf_key}, obs)
            self.qf_state = aliases.RLTrainState.create(
                apply_fn=self.qf.apply,
                params=params,
                target_params=params,
                tx=self.optimizer_class(learning_rate=lr_schedule(1), **self.optimizer_kwargs),
            )
            self.qf.apply = jax.jit(self.qf.apply)
            return key

    return MlpDQNPolicy


def make_model(library: str, workload: Workload, env: Any, seed: int = 0) -> Any:
    """The peer's own DQN on ``env`` with ``workload``'s settings."""
    if library == "sb3":
        dqn = _require("stable_baselines3").DQN
        policy: Any = workload.policy
        # SB3: net_arch is the MLP after the features extractor (NatureCNN's 512 units for images).
        if workload.policy == "CnnPolicy":
            policy_kwargs: dict[str, Any] = {
                "net_arch": [],
                "features_extractor_kwargs": {"features_dim": workload.hidden[0]},
            }
        else:
            policy_kwargs = {"net_arch": list(workload.hidden)}
        extra: dict[str, Any] = {"max_grad_norm": 10.0}  # SB3's default; SBX does not clip
    elif library == "sbx":
        dqn = _require("sbx").DQN
        if workload.policy == "CnnPolicy":
            # SBX's CnnPolicy: NatureCNN then net_arch[0] units (256 unless set).
            policy, policy_kwargs = "CnnPolicy", {"net_arch": list(workload.hidden)}
        else:
            policy, policy_kwargs = _sbx_mlp_policy(), {"net_arch": list(workload.hidden)}
        extra = {}
    else:
        raise ValueError(f"unknown library {library!r}; choose from {', '.join(LIBRARIES)}")
    return dqn(
        policy,
        env,
        policy_kwargs=policy_kwargs,
        seed=seed,
        verbose=0,
        **workload.dqn,
        **extra,
    )


def _window_callback(seconds: float) -> Any:
    base = _require("stable_baselines3.common.callbacks").BaseCallback

    class Window(base):
        """Records (time, env steps, updates) at the first env step and stops after ``seconds``."""

        def __init__(self) -> None:
            super().__init__()
            self.start: tuple[float, int, int] | None = None
            self.end: tuple[float, int, int] | None = None

        def _on_step(self) -> bool:
            now = time.perf_counter()
            mark = (now, self.model.num_timesteps, self.model._n_updates)
            if self.start is None:
                self.start = mark
                return True
            if now - self.start[0] < seconds:
                return True
            self.end = mark
            return False

    return Window()


def _versions(library: str) -> dict[str, Any]:
    names = ["stable_baselines3", "torch", "envpool", "gymnasium", "numpy"]
    if library == "sbx":
        names += ["sbx-rl", "jax", "jaxlib", "flax", "optax"]
    versions: dict[str, Any] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    torch = sys.modules.get("torch")
    if torch is not None:
        versions["torch_num_threads"] = torch.get_num_threads()
    jax = sys.modules.get("jax")
    if jax is not None:
        versions["jax_backend"] = jax.default_backend()
    return versions


def _isolated_updates(model: Any, batch_size: int, calls: int = 10, repeats: int = 3) -> float:
    """The peer's own update alone: ``model.train(1, batch_size)`` (sample + gradient step),
    median updates/s over ``repeats`` × ``calls``, with no env steps in between."""
    model.train(gradient_steps=1, batch_size=batch_size)
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            model.train(gradient_steps=1, batch_size=batch_size)
        rates.append(calls / (time.perf_counter() - t0))
    return sorted(rates)[len(rates) // 2]


def run(library: str, workload_name: str, seconds: float, seed: int = 0) -> dict[str, Any]:
    """Warm up, then time ``library``'s DQN on ``workload_name`` over ``seconds`` of learning."""
    workload = WORKLOADS[workload_name]
    env = make_vec_env(workload, seed=seed)
    model = make_model(library, workload, env, seed=seed)
    dqn = workload.dqn
    warmup = dqn["learning_starts"] + WARMUP_TRAIN_CALLS * dqn["train_freq"] * workload.num_envs
    t0 = time.perf_counter()
    model.learn(total_timesteps=warmup)
    warmup_seconds = time.perf_counter() - t0
    if model._n_updates == 0:
        raise PeerSetupError(f"{library} made no update during the {warmup}-step warm-up")
    window = _window_callback(seconds)
    model.learn(total_timesteps=10**12, callback=window, reset_num_timesteps=False)
    if window.start is None or window.end is None:
        raise PeerSetupError(f"{library} stopped learning before the {seconds} s window ended")
    (ta, sa, ua), (tb, sb, ub) = window.start, window.end
    env.close()
    elapsed = tb - ta
    isolated = (
        _isolated_updates(model, dqn["batch_size"]) if workload.policy == "CnnPolicy" else None
    )
    return {
        "isolated_updates_per_s": isolated,
        "library": library,
        "workload": workload_name,
        "env_steps_per_s": (sb - sa) / elapsed,
        "updates_per_s": (ub - ua) / elapsed,
        "env_steps": sb - sa,
        "updates": ub - ua,
        "seconds": elapsed,
        "warmup_env_steps": warmup,
        "warmup_seconds": warmup_seconds,
        "settings": {
            "env_id": workload.env_id,
            "num_envs": workload.num_envs,
            "policy": workload.policy,
            "hidden": list(workload.hidden),
            **dqn,
        },
        "versions": _versions(library),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time one peer (SB3 or SBX DQN) on one workload; print one JSON line."
    )
    parser.add_argument("--library", required=True, choices=LIBRARIES)
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    parser.add_argument(
        "--seconds", type=float, default=None, help="measurement window (default per workload)"
    )
    parser.add_argument("--quick", action="store_true", help="halve the measurement window")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch.set_num_threads(N) (default: torch's own, all cores); a diagnostic for a "
        "loaded machine, where torch's thread pool suffers most",
    )
    args = parser.parse_args(argv)
    seconds = WORKLOADS[args.workload].seconds if args.seconds is None else args.seconds
    if not seconds > 0:
        parser.error(f"--seconds must be positive, got {seconds}")
    if args.quick:
        seconds /= 2
    if args.torch_threads is not None:
        if args.torch_threads < 1:
            parser.error(f"--torch-threads must be at least 1, got {args.torch_threads}")
        _require("torch").set_num_threads(args.torch_threads)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            result = run(args.library, args.workload, seconds, seed=args.seed)
    except PeerSetupError as err:
        print(f"peers.py: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
