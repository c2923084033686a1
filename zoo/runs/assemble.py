"""Assembling a run: its blueprint from shapes, checked once against memory, then built.

A :class:`Blueprint` is what a run will hold, counted before anything is allocated: the network's
parameters (online, target, optimizer moments; ``jax.eval_shape``), the replay's layout and bytes
(or the rollout store's) and the update's working memory where it can be measured (compiled from
shapes). :func:`plan_memory` reports a blueprint's :class:`~zoo.runs.memory.MemoryPlan`;
:func:`preflight` lays one out for a new run before its directory is written (a layout or an
augmentation that cannot work is refused there); :func:`build` takes that blueprint (or lays out
a resumed run's), checks it against the memory available now (the one memory check of a run:
:meth:`Blueprint.check`) and only then allocates the network, the learner state and the replay.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo import spec as spec_lib
from zoo.augmentation import build_augmentation
from zoo.data import build_data
from zoo.drivers import Placement, make_driver
from zoo.envs import make
from zoo.learner import DataParallelLearner, Learner, learner_for_devices
from zoo.loop import Loop
from zoo.networks import build_network
from zoo.optimizers import check_groups
from zoo.resets import check_parts
from zoo.runs import rundir
from zoo.runs import settings as run_settings
from zoo.runs.create import new_settings
from zoo.runs.errors import RunRefusedError, environment_errors
from zoo.runs.group import ProcessGroup
from zoo.runs.memory import SAFETY, MemoryPlan, available_memory, plan
from zoo.runs.notes import say
from zoo.runs.open import read_settings, recorded_spec
from zoo.runs.settings import RunSettings
from zoo.spec import AlgorithmSpec

__all__ = [
    "Blueprint",
    "Built",
    "blueprint",
    "build",
    "loop_path",
    "plan_memory",
    "preflight",
    "replay_for_env",
]


@dataclass(frozen=True)
class Blueprint:
    """A run's parts from shapes; nothing allocated.

    Attributes:
      spec: the spec this process builds (over several processes, with its replay shard:
        ``replay.capacity / processes``).
      observation_shape, observation_dtype, num_actions: the environment's.
      data: the replay (or rollout store) object; its ``init()`` allocates it.
      core: one environment's zero recurrent state (recurrent specs), else ``None``.
      network_bytes: the learner state's parameters (online, target, two optimizer moments).
    """

    spec: AlgorithmSpec
    observation_shape: tuple[int, ...]
    observation_dtype: Any
    num_actions: int
    data: Any
    core: Any
    network_bytes: int

    @property
    def data_bytes(self) -> int:
        """Exact bytes the replay (or rollout store) allocates."""
        return int(self.data.nbytes())

    def plan(self, workspace_bytes: int = 0, available: int | None = None) -> MemoryPlan:
        """The run's planned peak (:class:`~zoo.runs.memory.MemoryPlan`)."""
        return MemoryPlan(
            self.data_bytes,
            self.spec.replay.capacity,
            available=available,
            network_bytes=self.network_bytes,
            workspace_bytes=workspace_bytes,
        )

    def check(self, workspace_bytes: int = 0) -> None:
        """Refuse the run whose parameters, or whose planned peak (data + the update's working
        memory where measured + overhead, see :mod:`zoo.runs.memory`), do not fit in the memory
        available now.

        Raises:
          RunRefusedError: naming what does not fit and the setting that fixes it.
        """
        available = available_memory()
        if available is None:
            return
        if self.network_bytes > SAFETY * available:
            raise RunRefusedError(
                f"the network's parameters need {_gib(self.network_bytes)} (with the target "
                f"network and the optimizer's state) but only {_gib(available)} of memory is "
                "available; use smaller layers (network.hidden)"
            )
        memory = plan(
            self.data_bytes,
            self.spec.replay.capacity,
            available=available - self.network_bytes,
            workspace_bytes=workspace_bytes,
        )
        if not memory.fits:
            raise RunRefusedError(memory.refusal("this run"))


def blueprint(
    spec: AlgorithmSpec, settings: RunSettings, env: Any, group: ProcessGroup | None = None
) -> Blueprint:
    """The blueprint of a run of ``spec`` with ``settings`` on environments like ``env`` (its
    observation and actions; ``settings.num_envs`` of them). Nothing is allocated.

    Raises:
      RunRefusedError: a network the observations cannot go through, an ``optimizer.groups``
        entry that names no parameter, an augmentation these observations cannot take, or a
        replay layout the capacity cannot hold.
    """
    if group is not None and group.several:
        # each process keeps its shard of the replay: capacity / P transitions
        shard = spec.replay.model_copy(
            update={"capacity": spec.replay.capacity // group.num_processes}
        )
        spec = spec.model_copy(update={"replay": shard})
    shape, dtype = tuple(env.observation_shape), env.observation_dtype
    network = _network_shapes(spec, shape, env.num_actions)
    _check_augmentation(spec, shape, dtype)
    leaves = [x for x in jax.tree.leaves(network) if isinstance(x, jax.ShapeDtypeStruct)]
    one = sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in leaves)
    core = None
    if spec.recurrent:
        core = jax.tree.map(
            lambda x: jnp.zeros(x.shape, x.dtype), eqx.filter_eval_shape(network.initial_state)
        )
    try:
        data = _data(spec, env, settings.num_envs, core)
    except ValueError as e:  # a layout the replay cannot hold (capacity per env too small)
        raise RunRefusedError(str(e)) from None
    return Blueprint(
        spec, shape, dtype, env.num_actions, data, core, one * spec_lib.PARAMETER_COPIES
    )


def preflight(spec: AlgorithmSpec, settings: RunSettings, group: ProcessGroup) -> Blueprint:
    """A new run's blueprint, laid out before its directory is written (one environment is
    opened to read its observation)."""
    with make(
        settings.env, num_envs=1, seed=settings.seed, training=True, **settings.env_args()
    ) as probe:
        return blueprint(spec, settings, probe, group)


def plan_memory(
    algorithm: str | os.PathLike[str] | AlgorithmSpec | None = None,
    env: str | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    total_env_steps: int | None = None,
    protocol: str | None = None,
    num_envs: int | None = None,
    resume: str | os.PathLike[str] | None = None,
) -> MemoryPlan:
    """The planned peak memory of a run, known before it starts (see :mod:`zoo.runs.memory`).

    Either the run :func:`train` would create with these arguments, or (``resume``) the run
    recorded in that directory, with its own spec and settings. Nothing is built, allocated or
    written: the replay and parameters are counted from shapes (one environment is opened to
    read its observation).

    Args:
      algorithm, env, overrides, total_env_steps, protocol, num_envs: as :func:`train` takes them.
      resume: a run directory: plan the run recorded there instead.

    Returns:
      A :class:`zoo.runs.memory.MemoryPlan` (:meth:`Blueprint.plan`) whose ``peak`` counts the
      replay, the parameters (online, target, optimizer moments) and
      :data:`zoo.runs.memory.RUN_OVERHEAD`.

    Raises:
      SpecError, RunRefusedError: as :func:`train` refuses the same run.
    """
    with environment_errors():
        if resume is not None:
            run_path = Path(resume)
            settings = read_settings(run_path)
            created = rundir.creation_record(rundir.read_history(run_path))
            spec = recorded_spec(run_path, created, "plan")
        else:
            if algorithm is None:
                raise RunRefusedError("name an algorithm or preset to plan, or a run directory")
            given = {
                "env": env,
                "protocol": protocol,
                "num_envs": num_envs,
                "total_env_steps": total_env_steps,
            }
            run_settings.check_given(given)
            spec, settings = new_settings(algorithm, overrides, given)
        return preflight(spec, settings, ProcessGroup()).plan()


@dataclass
class Built:
    """A run's parts, allocated: the loop, its first carry and the driver path to run."""

    loop: Loop
    carry: Any
    loop_path: str


def build(
    plan_: Blueprint | None,
    spec: AlgorithmSpec,
    settings: RunSettings,
    env: Any,
    group: ProcessGroup,
) -> Built:
    """Check the blueprint against memory (once), then build the run: learner, loop, network,
    learner state and data, all from ``settings.seed``.

    ``plan_`` is the blueprint of a new run's preflight, or ``None`` (it is laid out here from
    ``env``). Over several processes the networks start identical and the actors and samplers
    draw apart.
    """
    bp = plan_ if plan_ is not None else blueprint(spec, settings, env, group)
    spec = bp.spec
    path = loop_path(settings.loop, env, group)

    def network_fn(key: jax.Array) -> Any:
        return build_network(
            spec, observation_shape=bp.observation_shape, num_actions=bp.num_actions, key=key
        )

    learner = choose_learner(spec, settings, group, network_fn)
    placement = _placement(settings) if settings.loop == "async" else None
    loop = Loop(spec, env, learner, bp.data, bp.core, placement=placement, max_lag=settings.max_lag)
    k_net, k_learner, k_run = jax.random.split(jax.random.PRNGKey(settings.seed), 3)
    if group.several:
        k_run = jax.random.fold_in(k_run, group.process_id)

    def new_learner_state() -> Any:
        return learner.init(network_fn(k_net), k_learner)

    workspace = 0
    if path == "host" and spec.rollout is None and learner.traceable and learner.num_devices == 1:
        # the update compiled from shapes (its first call reuses the compilation), before
        # anything is allocated: its working memory counts in the plan (btr's batch-256
        # update: ~3 GiB)
        shapes = eqx.filter_eval_shape(new_learner_state)
        workspace = make_driver("host", loop).compile_update(shapes, k_run)
    bp.check(workspace)
    return Built(loop, loop.init(new_learner_state(), k_run), path)


def replay_for_env(spec: AlgorithmSpec, env: Any, core_state: Any = None) -> Any:
    """The replay (or rollout store) a run of ``spec`` on the :class:`~zoo.envs.VectorEnv` ``env``
    uses.

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
    return _data(spec, env, env.num_envs, core_state)


def _data(spec: AlgorithmSpec, env: Any, num_envs: int, core_state: Any) -> Any:
    return build_data(
        spec,
        num_envs=num_envs,
        observation_shape=env.observation_shape,
        observation_dtype=env.observation_dtype,
        stack=env.stack,
        core_state=core_state,
        repeat_first_frame=env.game_start_stack == "repeat",
    )


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def _network_shapes(spec: AlgorithmSpec, observation_shape: tuple[int, ...], num_actions: int):
    """The network as shapes (``eqx.filter_eval_shape``: nothing is allocated), checked against
    ``optimizer.groups`` (a refusal names the group)."""
    try:
        shapes = eqx.filter_eval_shape(
            build_network,
            spec,
            observation_shape=observation_shape,
            num_actions=num_actions,
            key=jax.random.PRNGKey(0),
        )
    except ValueError as e:  # a torso that cannot take these observations (an image torso)
        raise RunRefusedError(f"network: {e}") from None
    try:
        check_groups(spec.optimizer, shapes)
        check_parts(spec.resets, shapes)
    except ValueError as e:  # a parameter group or reset part that names no part of the network
        raise RunRefusedError(str(e)) from None
    return shapes


def _check_augmentation(
    spec: AlgorithmSpec, observation_shape: Any, observation_dtype: Any
) -> None:
    """Refuses, before anything is built, an augmentation that cannot take this environment's
    observations (``random_shift`` on vector observations), traced with ``jax.eval_shape`` on
    a batch of their shape instead of failing inside the first update."""

    augment = build_augmentation(spec.augmentation)
    if augment is None:
        return
    batch = jax.ShapeDtypeStruct((spec.replay.batch_size, *observation_shape), observation_dtype)
    try:
        jax.eval_shape(augment, jax.random.PRNGKey(0), batch)
    except (ValueError, TypeError) as e:
        raise RunRefusedError(f"augmentation: {e}") from None


def choose_learner(
    spec: AlgorithmSpec, settings: RunSettings, group: Any, network_fn: Any = None
) -> Any:
    """The run's learner, said in one line where it is not a plain one-device update: over the
    asynchronous driver's learner devices (on every process of a group), over every process's
    devices, or over this host's local devices. ``network_fn``: a fresh draw of the run's
    network (``key -> network``), for the resets of a spec that has them."""

    several = group is not None and group.several
    where = f"process {group.process_id} of {group.num_processes}: " if several else ""
    if settings.loop == "async":
        placement = _placement(settings)
        devices = _across_processes(placement.learner) if several else list(placement.learner)
        learner = (
            DataParallelLearner(spec, devices=devices, network_fn=network_fn)
            if len(devices) > 1
            else Learner(spec, network_fn=network_fn)
        )
        shared = " (one device: acting and learning share it and do not overlap)"
        say(
            f"asynchronous driver: {where}{placement.describe()}"
            + (shared if placement.shared else "")
            + (
                f"; the update runs data-parallel over {len(devices)} devices of "
                f"{group.num_processes} processes"
                if several
                else ""
            )
        )
        return learner
    if several:
        # every process's devices: gradients averaged over all of them
        learner = DataParallelLearner(spec, devices=jax.devices(), network_fn=network_fn)
        say(
            f"{where}the update runs data-parallel over {len(learner.devices)} devices of "
            f"{group.num_processes} processes (zoo.runs.distributed)"
        )
        return learner
    learner = learner_for_devices(spec, network_fn)
    if isinstance(learner, DataParallelLearner):
        say(
            f"the update runs data-parallel over {learner.num_devices} local devices "
            "(zoo.learner.DataParallelLearner); the environments step on the host"
        )
    return learner


def _across_processes(local: tuple[Any, ...]) -> list[Any]:
    """The devices at the indices of ``local`` in ``jax.local_devices()``, on every process
    (each process places its learner alike): the mesh of a learner over processes."""

    indices = [jax.local_devices().index(d) for d in local]
    by_process: dict[int, list[Any]] = {}
    for device in sorted(jax.devices(), key=lambda d: d.id):
        by_process.setdefault(device.process_index, []).append(device)
    return [by_process[p][i] for p in sorted(by_process) for i in indices]


def _placement(settings: RunSettings) -> Any:
    """The asynchronous driver's placement from the run's settings (refused when invalid)."""

    try:
        placement = Placement.choose(settings.actor_devices, settings.learner_devices)
    except ValueError as e:
        raise RunRefusedError(str(e)) from None
    return placement


def loop_path(requested: str, env_obj: Any, group: ProcessGroup) -> str:
    """The loop path to run: ``auto`` picks the compiled path where the env supports it; over
    several processes, the host path (or the asynchronous one, asked for)."""
    if group.several:
        return "async" if requested == "async" else "host"

    # envpool's XLA step is a side-effecting custom call that XLA's SPMD partitioner cannot
    # place: with several devices (a data-parallel update) the environments run on the host.
    several = len(jax.local_devices()) > 1
    if requested == "async":
        return requested
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
        raise RunRefusedError(f"--loop compiled is unavailable here: {why}; use --loop host")
    return requested
