"""Runs: ``zoo.train``, resume, evaluation of a run, and ``zoo.load_policy``.

A run directory holds::

    spec.yaml          the resolved algorithm (after extends and overrides)
    run.yaml           the run's settings (environment, protocol, budget, seed, ...)
    provenance.json    package versions, git commit, hardware, protocol, seed, command line
    metrics.jsonl      training records (env_steps, updates, returns, loss, rates, ...)
    eval.jsonl         evaluation results under the protocol
    tb/                TensorBoard event files
    checkpoints/       Orbax checkpoints of the whole run state (replay included unless opted out)

``--resume DIR`` continues from the newest checkpoint: counters, schedules, RNG, optimizer and
replay continue; open episodes restart (environments cannot be checkpointed) and records logged
after the checkpoint are truncated, so nothing is duplicated and nothing checkpointed is lost.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from zoo import spec as spec_lib
from zoo.spec import AlgorithmSpec, SpecError

__all__ = [
    "RunError",
    "RunResult",
    "RunSettings",
    "evaluate_run",
    "load_policy",
    "replay_for_env",
    "train",
]


class RunError(RuntimeError):
    """A run could not start or continue; the message says why and how to fix it."""


class RunSettings(BaseModel):
    """Everything besides the algorithm that defines a run (saved as ``run.yaml``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    algorithm: str = Field(description="catalogue name, preset name or YAML path it came from")
    preset: str | None = Field(None, description="preset name, if the run came from one")
    env: str = Field(description="environment id")
    protocol: str = Field(description="evaluation protocol")
    num_envs: int = Field(ge=1, description="parallel environments")
    total_env_steps: int = Field(gt=0, description="training budget in transitions")
    seed: int = Field(description="seed of networks, exploration, replay and environments")
    eval_every: int = Field(gt=0, description="transitions between evaluations")
    eval_episodes: int = Field(gt=0, description="games per evaluation")
    eval_max_steps: int | None = Field(None, description="cap on agent steps per evaluation")
    checkpoint_every: int = Field(gt=0, description="transitions between checkpoints")
    log_every: int = Field(gt=0, description="transitions between training records")
    save_replay: bool = Field(True, description="checkpoint the replay contents and priorities")
    stop_at_return: float | None = Field(
        None, description="stop early once an evaluation's mean return reaches this"
    )
    loop: Literal["auto", "host", "compiled"] = Field(
        "auto",
        description="host: envpool's Python API between jitted steps; compiled: lax.scan chunks "
        "with envpool's XLA step (same semantics; ~3x faster on CartPole); auto: compiled "
        "where the environment has envpool's XLA interface",
    )


@dataclass
class RunResult:
    """What a finished (or interrupted) run reports."""

    run_dir: Path
    env_steps: int
    updates: int
    evaluations: list[dict[str, Any]]
    interrupted: bool = False

    @property
    def final_eval(self) -> dict[str, Any] | None:
        return self.evaluations[-1] if self.evaluations else None

    @property
    def best_return(self) -> float | None:
        return max((e["mean_return"] for e in self.evaluations), default=None)


def _provenance(settings: RunSettings, protocol: Any) -> dict[str, Any]:
    import jax

    versions = {}
    for package in (
        "zoo-rl",
        "jax",
        "jaxlib",
        "equinox",
        "optax",
        "rlax",
        "envpool",
        "gymnasium",
        "orbax-checkpoint",
        "pydantic",
        "numpy",
    ):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    commit = None
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            check=False,
            timeout=5,
        )
        if out.returncode == 0:
            commit = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "created": datetime.datetime.now(datetime.UTC).isoformat(),
        "versions": versions,
        "commit": commit,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "devices": [str(d) for d in jax.devices()],
        "protocol": getattr(protocol, "name", str(protocol)),
        # every setting, its source's value and the named differences (docs/protocols.md)
        "protocol_settings": protocol.to_dict() if hasattr(protocol, "to_dict") else None,
        "seed": settings.seed,
        "command": sys.argv,
    }


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _spec_yaml(spec: AlgorithmSpec) -> str:
    data = spec.model_dump(mode="json", serialize_as_any=True)
    return yaml.safe_dump({spec.name or "algorithm": data}, sort_keys=False, allow_unicode=True)


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _check_memory(nbytes: int, spec: AlgorithmSpec) -> None:
    available = _available_memory()
    if available is not None and nbytes > 0.9 * available:
        raise RunError(
            f"the replay needs {nbytes / 2**30:.2f} GiB (replay.capacity={spec.replay.capacity:,} "
            f"transitions) but only {available / 2**30:.2f} GiB of memory is available; lower "
            "replay.capacity (e.g. --set replay.capacity=100000) or free memory"
        )


def _resolve(
    algorithm: str | os.PathLike[str] | AlgorithmSpec, overrides: Mapping[str, Any] | None
) -> tuple[AlgorithmSpec, str | None, dict[str, Any]]:
    """The algorithm spec, the preset name (if any) and the preset's run settings."""
    if isinstance(algorithm, AlgorithmSpec):
        return spec_lib.load_algorithm(algorithm, overrides=overrides), None, {}
    name = str(algorithm)
    if spec_lib.is_preset(name):
        preset = spec_lib.load_preset(name)
        merged = spec_lib.apply_overrides(preset.overrides, overrides)
        resolved = spec_lib.load_algorithm(preset.algorithm, overrides=merged)
        defaults: dict[str, Any] = {
            "protocol": preset.env.protocol,
            "num_envs": preset.env.num_envs,
        }
        if preset.env.id:
            defaults["env"] = preset.env.id
        if preset.budget is not None:
            defaults["total_env_steps"] = preset.budget.agent_steps
        return resolved, preset.name, defaults
    return spec_lib.load_algorithm(name, overrides=overrides), None, {}


def train(
    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None,
    env: str | None = None,
    total_env_steps: int | None = None,
    seed: int = 0,
    *,
    overrides: Mapping[str, Any] | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    num_envs: int | None = None,
    protocol: str | None = None,
    eval_every: int | None = None,
    eval_episodes: int = 10,
    eval_max_steps: int | None = None,
    checkpoint_every: int | None = None,
    log_every: int | None = None,
    save_replay: bool = True,
    stop_at_return: float | None = None,
    loop: str = "auto",
    progress: bool = True,
    on_start: Callable[[Path], None] | None = None,
) -> RunResult:
    """Train an algorithm or preset; what ``zoo train`` does.

    Args:
      algorithm: catalogue name, preset name, YAML path (``file.yaml[:entry]``) or a spec.
        Omitted with ``resume``.
      env: environment id (default: the preset's, else ``CartPole-v1``).
      total_env_steps: budget in transitions (default: the preset's, else 50,000).
      seed: seeds networks, exploration, replay sampling and environments.
      overrides: dotted overrides of the algorithm (``{"loss.n_step": 3}``).
      run_dir: where the run is written (default ``runs/<algorithm>-<env>-s<seed>-<time>``).
      resume: a run directory to continue from its newest checkpoint (``run_dir`` ignored).
      num_envs: parallel environments (default: the preset's, else 1).
      protocol: evaluation protocol (default: the environment's).
      eval_every, eval_episodes, eval_max_steps: evaluation cadence, size and step cap.
      checkpoint_every, log_every: in transitions.
      save_replay: include the replay in checkpoints.
      stop_at_return: stop once an evaluation's mean return reaches this.
      loop: ``"auto"`` (compiled where envpool's XLA interface exists), ``"host"`` or
        ``"compiled"`` (see :mod:`zoo.loop`).
      progress: show the progress line on a terminal.
      on_start: called with the run directory once it exists (tests use it).

    Returns:
      A :class:`RunResult`.

    Raises:
      SpecError: the algorithm or overrides are invalid.
      RunError: the run cannot start (memory, run directory, resume mismatch, non-finite loss).
    """
    with _environment_errors():
        return _train(**locals())


@contextlib.contextmanager
def _environment_errors() -> Iterator[None]:
    """Unknown or mismatched environments and protocols become a :class:`RunError`."""
    from zoo import envs

    try:
        yield
    except (
        envs.UnknownEnvironmentError,
        envs.UnsupportedEnvironmentError,
        envs.ProtocolMismatchError,
        envs.UnknownProtocolError,
    ) as e:
        raise RunError(str(e)) from None


def _train(
    algorithm: Any,
    env: str | None,
    total_env_steps: int | None,
    seed: int,
    *,
    overrides: Mapping[str, Any] | None,
    run_dir: Any,
    resume: Any,
    num_envs: int | None,
    protocol: str | None,
    eval_every: int | None,
    eval_episodes: int,
    eval_max_steps: int | None,
    checkpoint_every: int | None,
    log_every: int | None,
    save_replay: bool,
    stop_at_return: float | None,
    loop: str,
    progress: bool,
    on_start: Callable[[Path], None] | None,
) -> RunResult:
    """:func:`train`'s body (arguments as documented there)."""
    from zoo.envs import get_protocol, make

    if resume is not None:
        run_path = Path(resume)
        if not (run_path / "run.yaml").exists():
            raise RunError(f"cannot resume: {run_path} has no run.yaml (not a zoo run directory)")
        settings = RunSettings.model_validate(yaml.safe_load((run_path / "run.yaml").read_text()))
        spec = spec_lib.load_algorithm(run_path / "spec.yaml")
        if total_env_steps is not None:
            settings = settings.model_copy(update={"total_env_steps": int(total_env_steps)})
    else:
        if algorithm is None:
            raise RunError("name an algorithm or preset to train, or a run directory to resume")
        spec, preset_name, defaults = _resolve(algorithm, overrides)
        env_id = env or defaults.get("env") or "CartPole-v1"
        from zoo.envs import resolve_env

        env_id = resolve_env(env_id).env_id  # unknown ids fail before anything is written
        steps = int(total_env_steps or defaults.get("total_env_steps") or 50_000)
        proto = get_protocol(protocol or defaults.get("protocol") or _default_protocol(env_id))
        settings = RunSettings(
            algorithm=str(algorithm if not isinstance(algorithm, AlgorithmSpec) else spec.name),
            preset=preset_name,
            env=env_id,
            protocol=proto.name,
            num_envs=num_envs or defaults.get("num_envs") or 1,
            total_env_steps=steps,
            seed=seed,
            eval_every=eval_every or max(steps // 10, 1),
            eval_episodes=eval_episodes,
            eval_max_steps=eval_max_steps,
            checkpoint_every=checkpoint_every or max(steps // 5, 1),
            log_every=log_every or max(min(steps // 100, 10_000), 1),
            save_replay=save_replay,
            stop_at_return=stop_at_return,
            loop=loop,
        )
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_path = (
            Path(run_dir)
            if run_dir is not None
            else (Path("runs") / f"{spec.name or 'custom'}-{env_id}-s{seed}-{stamp}")
        )
        _prepare_run_dir(run_path)
        _write_text(run_path / "spec.yaml", _spec_yaml(spec))
        _write_text(
            run_path / "run.yaml",
            yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False),
        )
        proto_obj = get_protocol(settings.protocol)
        _write_text(
            run_path / "provenance.json", json.dumps(_provenance(settings, proto_obj), indent=2)
        )

    if on_start is not None:
        on_start(run_path)
    env_obj = make(
        settings.env,
        protocol=settings.protocol,
        num_envs=settings.num_envs,
        seed=settings.seed,
        training=True,
    )
    try:
        return _run(spec, settings, env_obj, run_path, resume is not None, progress)
    finally:
        env_obj.close()


def _default_protocol(env_id: str) -> str:
    from zoo.envs import default_protocol

    return default_protocol(env_id)


def _prepare_run_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise RunError(f"cannot write the run directory {path}: {e.strerror or e}") from None
    if (path / "checkpoints").exists() and any((path / "checkpoints").iterdir()):
        raise RunError(
            f"{path} already holds a run with checkpoints; use --resume {path} to continue it "
            "or choose another --run-dir"
        )


def _build(spec: AlgorithmSpec, settings: RunSettings, env_obj: Any):
    import jax

    from zoo.learner import Learner
    from zoo.networks import build_network

    key = jax.random.PRNGKey(settings.seed)
    k_net, k_learner, k_run = jax.random.split(key, 3)
    network = build_network(
        spec,
        observation_shape=env_obj.observation_shape,
        num_actions=env_obj.num_actions,
        key=k_net,
    )
    core = network.initial_state() if spec.recurrent else None
    replay = replay_for_env(spec, env_obj, core_state=core)
    _check_memory(replay.nbytes(), spec)
    learner = Learner(spec)
    return network, learner, replay, learner.init(network, k_learner), k_run, core


def replay_for_env(spec: AlgorithmSpec, env: Any, core_state: Any = None) -> Any:
    """The replay a run of ``spec`` on the :class:`~zoo.envs.VectorEnv` ``env`` uses.

    Frame stacking follows the environment's protocol (``env.stack``), never the observation's
    rank: an Atari protocol with ``stack: 4`` stores one 84×84 frame per step and rebuilds the
    stack at sample time, while a MinAtar observation ``[C, 10, 10]`` is ``C`` feature channels
    of *one* step (Young & Tian 2019, https://arxiv.org/abs/1903.03176) and is stored whole.
    Treating those channels as a stack of frames fed the learner the last channel of ``C``
    consecutive steps (for Breakout: the bricks four times, no paddle or ball), so MinAtar did
    not learn.

    Args:
      spec: the algorithm.
      env: the training environments (``num_envs``, observation shape and dtype, ``stack``).
      core_state: one env's initial recurrent state (recurrent specs with stored state).
    """
    from zoo.replay import build_replay

    return build_replay(
        spec,
        num_envs=env.num_envs,
        observation_shape=env.observation_shape,
        observation_dtype=env.observation_dtype,
        stack=env.stack,
        core_state=core_state,
    )


def _run(
    spec: AlgorithmSpec,
    settings: RunSettings,
    env_obj: Any,
    run_path: Path,
    resuming: bool,
    show_progress: bool,
) -> RunResult:
    import equinox as eqx

    from zoo.checkpoint import Checkpointer, CheckpointError
    from zoo.envs import evaluate
    from zoo.loop import Loop, LoopConfig, NonFiniteLossError, Trainer
    from zoo.metrics import MetricsLogger, read_jsonl

    _network, learner, replay, learner_state, run_key, core = _build(spec, settings, env_obj)
    try:
        checkpointer = Checkpointer(run_path / "checkpoints")
    except CheckpointError as e:
        raise RunError(str(e)) from None
    policy_fn = make_policy_fn(spec, env_obj.num_actions)

    def evaluate_now(online: Any, env_steps: int) -> dict[str, Any]:
        import jax

        policy = policy_fn(online, jax.random.PRNGKey(settings.seed + 10_000 + env_steps))
        result = evaluate(
            policy,
            settings.env,
            settings.protocol,
            episodes=settings.eval_episodes,
            seed=settings.seed + 1 + env_steps,
            max_steps=settings.eval_max_steps,
            epsilon=spec.schedule.eval_epsilon,
        )
        record = {"env_steps": env_steps, "protocol": settings.protocol, **result}
        logger.log_eval(record)
        return record

    config = LoopConfig(
        total_env_steps=settings.total_env_steps,
        eval_every=settings.eval_every,
        eval_episodes=settings.eval_episodes,
        eval_max_steps=settings.eval_max_steps,
        checkpoint_every=settings.checkpoint_every,
        log_every=settings.log_every,
        save_replay=settings.save_replay,
        progress=show_progress,
        stop_at_return=settings.stop_at_return,
        loop=_loop_path(settings.loop, env_obj),
    )
    loop = Loop(spec, env_obj, learner, replay, core)
    carry = loop.init(learner_state, run_key)
    resume_from, games = None, 0
    if resuming:
        step = checkpointer.latest_step()
        if step is None:
            raise RunError(f"cannot resume {run_path}: it has no complete checkpoint yet")
        template = loop.checkpoint_state(carry, 0, settings.save_replay)
        try:
            restored, meta = checkpointer.restore(template, step)
        except CheckpointError as e:
            raise RunError(f"cannot resume {run_path}: {e}") from None
        counters = restored["counters"]
        # open episodes restart: seal the replay so that no window crosses the boundary (an
        # opted-out replay starts empty)
        replay_state = replay.seal(restored["replay"]) if "replay" in restored else carry.replay
        carry = eqx.tree_at(
            lambda c: (c.replay, c.key, c.env_steps, c.credit),
            carry,
            (replay_state, restored["key"], counters["env_steps"], counters["credit"]),
        )
        carry = loop.with_learner(carry, restored["learner"])
        games = int(counters["games"])
        resume_from = int(meta["env_steps"])
    logger = MetricsLogger(run_path, resume_from=resume_from)
    trainer = Trainer(loop, config, logger, checkpointer, evaluate_now, games=games)
    try:
        trainer.run(carry)
    except NonFiniteLossError as e:
        raise RunError(str(e)) from None
    except CheckpointError as e:
        raise RunError(str(e)) from None
    except OSError as e:
        import errno

        what = "no space left on the device" if e.errno == errno.ENOSPC else str(e)
        raise RunError(f"writing to {run_path} failed: {what}") from None
    finally:
        logger.close()
        checkpointer.close()
    counters = read_jsonl(run_path / "metrics.jsonl")
    last = counters[-1] if counters else {"env_steps": 0, "updates": 0}
    return RunResult(
        run_dir=run_path,
        env_steps=int(last["env_steps"]),
        updates=int(last["updates"]),
        evaluations=read_jsonl(run_path / "eval.jsonl"),
        interrupted=trainer.stopped_by_signal,
    )


def _loop_path(requested: str, env_obj: Any) -> str:
    """The loop path to run: ``auto`` picks the compiled path where the env supports it."""
    import jax

    # envpool's XLA step is a side-effecting custom call that XLA's SPMD partitioner cannot
    # place: with several devices (a data-parallel update) the environments run on the host.
    several = len(jax.local_devices()) > 1
    if requested == "auto":
        # Measured on this CPU: compiled is ~10x the host path's rate for MLP networks
        # (CartPole), but XLA:CPU runs convolutions inside scan/cond an order of magnitude
        # slower, so image networks learn faster on the host path.
        return "compiled" if env_obj.has_xla and not several and not env_obj.is_image else "host"
    if requested == "compiled" and (several or not env_obj.has_xla):
        why = (
            f"{len(jax.local_devices())} devices (the update is data-parallel)"
            if several
            else f"{env_obj.env_id} has no envpool XLA interface ({env_obj.backend} backend)"
        )
        raise RunError(f"--loop compiled is unavailable here: {why}; use --loop host")
    return requested


def make_policy_fn(spec: AlgorithmSpec, num_actions: int) -> Callable[[Any, Any], Callable]:
    """``policy_fn(online, key) -> policy(observations [N, ...]) -> actions [N]`` (greedy).

    Recurrent policies keep their core state between calls and reset it where a game starts
    (``policy(observations, first=mask)``); ε-greedy is applied by the evaluator.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    from zoo.loop import make_act

    @eqx.filter_jit
    def greedy(online, obs, state, first, key):
        # the actors' acting function with ε = 0: the same core-state reset at game starts
        initial = None
        if spec.recurrent:
            initial = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (obs.shape[0], *x.shape)), online.initial_state()
            )
            state = initial if state is None else state
        act = make_act(num_actions, spec.recurrent, initial)
        actions, _, state = act(online, obs, state, first, key, 0.0)
        return actions, state

    def policy_fn(online: Any, key: Any) -> Callable:
        box = {"state": None, "key": key}

        def policy(observations: Any, first: Any = None) -> np.ndarray:
            obs = jnp.asarray(observations)
            if first is None:
                first = np.zeros(obs.shape[0], bool)
            box["key"], k = jax.random.split(box["key"])
            actions, box["state"] = greedy(online, obs, box["state"], jnp.asarray(first), k)
            return np.asarray(actions)

        return policy

    return policy_fn


def load_policy(run_dir: str | os.PathLike[str], *, step: int | None = None) -> Callable:
    """The trained agent of a run as a callable ``policy(observations [N, ...]) -> actions``.

    Loads the network parameters of the newest (or ``step``) checkpoint; acts greedily.
    """
    import jax

    from zoo.checkpoint import Checkpointer
    from zoo.envs import make
    from zoo.learner import Learner
    from zoo.networks import build_network

    run_path = Path(run_dir)
    if not (run_path / "run.yaml").exists():
        raise RunError(f"{run_path} is not a zoo run directory (no run.yaml)")
    settings = RunSettings.model_validate(yaml.safe_load((run_path / "run.yaml").read_text()))
    spec = spec_lib.load_algorithm(run_path / "spec.yaml")
    with make(settings.env, protocol=settings.protocol, num_envs=1, seed=0, training=False) as env:
        shape, num_actions = env.observation_shape, env.num_actions
    network = build_network(
        spec, observation_shape=shape, num_actions=num_actions, key=jax.random.PRNGKey(0)
    )
    learner_state = Learner(spec).init(network, jax.random.PRNGKey(0))
    checkpointer = Checkpointer(run_path / "checkpoints")
    try:
        restored, _ = _restore_learner(checkpointer, learner_state, step)
    finally:
        checkpointer.close()
    return make_policy_fn(spec, num_actions)(restored.online, jax.random.PRNGKey(0))


def _restore_learner(checkpointer: Any, learner_state: Any, step: int | None):
    """Restore only the learner part of a checkpoint (the replay is not needed to act)."""
    from zoo.checkpoint import CheckpointError

    try:
        restored, meta = checkpointer.restore({"learner": learner_state}, step)
    except CheckpointError as e:
        raise RunError(str(e)) from None
    return restored["learner"], meta


def evaluate_run(
    run_dir: str | os.PathLike[str],
    *,
    episodes: int = 10,
    seed: int = 12345,
    max_steps: int | None = None,
    step: int | None = None,
) -> dict[str, Any]:
    """Evaluate a run's checkpoint under the run's protocol; what ``zoo eval`` does."""
    from zoo.envs import evaluate

    run_path = Path(run_dir)
    policy = load_policy(run_path, step=step)
    settings = RunSettings.model_validate(yaml.safe_load((run_path / "run.yaml").read_text()))
    spec = spec_lib.load_algorithm(run_path / "spec.yaml")
    result = evaluate(
        policy,
        settings.env,
        settings.protocol,
        episodes=episodes,
        seed=seed,
        max_steps=max_steps,
        epsilon=spec.schedule.eval_epsilon,
    )
    return {"run_dir": str(run_path), "protocol": settings.protocol, **result}


__all__ += ["SpecError"]
