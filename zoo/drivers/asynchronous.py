"""The asynchronous driver: an actor thread on its own device feeding a learner on others.

Sebulba's split (Hessel et al. 2021, "Podracer architectures for scalable reinforcement
learning", https://arxiv.org/abs/2104.06272; as cleanba and Acme's distributed agents): the
**actor thread** steps its envpool batch and acts on the *actor device* with the newest
parameters the learner has published; the **learner** (the thread that runs the driver) inserts
the actor's steps into the replay on the *learner device(s)*, runs every due update there
(data-parallel over several learner devices, :class:`zoo.learner.DataParallelLearner`) and
publishes the parameters each finished update produced. Neither waits for the other's
computations: the actor's forward pass and the environments run while an update runs.

Guarantees (what the synchronous drivers give, kept within stated bounds):

- **Replay ratio.** The learner consumes the actor's vector steps in order and applies the
  update-credit rule to them exactly as the synchronous drivers do
  (:class:`zoo.learn.UpdateCredit`), so updates per *consumed* transition are exact. Between
  the two sides sits a bounded queue of ``queue_steps`` vector steps, which is the rate
  limiter (Reverb's ``SampleToInsertRatio`` with an error buffer): a faster actor blocks when
  the queue is full, a faster learner blocks when it is empty. Updates done therefore trail
  ``(transitions produced − min_size) / update_period`` by at most :attr:`AsyncDriver.tolerance`
  updates at every moment (the queue, the step in the actor's hands, the step being consumed,
  and the updates in flight); the run's log records the largest gap measured
  (``async_ratio_gap``).
- **Parameter lag.** The learner dispatches update ``u + 1`` only once update ``u + 1 − k`` has
  finished and its parameters are published, and the actor takes the newest published
  parameters before every act, so the actor acts with parameters at most ``k = max_lag``
  updates behind the learner's count (default 1, as the synchronous drivers: the actors act
  with the network as it was before the update in flight). The log records the largest lag
  seen at an act (``async_max_lag``, which depends on when the actor acts) and the most updates
  the learner had dispatched beyond its published parameters (``async_max_unpublished``: the
  lag an act at that moment would have; it reaches ``k`` whenever a vector step credits ``k``
  updates or more, whatever the timing).
- **Replay semantics.** Only the learner touches the replay (insert, sample, priority
  write-back, sealing), in the order of the steps, so prioritised and sequence replay keep
  their semantics; the actor's pending step carries its recurrent state as on the host driver.
- **Failure.** An exception in the actor thread stops the run with that exception, in the
  learner; a stop (budget, signal, ``stop_at_return``) stops the actor before the driver
  returns, so events (evaluation, checkpoints) always see one consistent learner and replay.

**Not deterministic**: which parameters an act uses depends on timing, so two runs from one
seed differ (the synchronous drivers are bit-for-bit reproducible and stay the default). The
transitions' order, the credit rule, ε (a function of transitions produced) and the learner's
sampling keys are the same as the host driver's.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from zoo.jit import async_jit
from zoo.learn import learner_report
from zoo.learner import DataParallelLearner

if TYPE_CHECKING:  # pragma: no cover
    from zoo.drivers.protocol import CarryLike, LoopLike, TrainerLike

__all__ = ["AsyncDriver", "Placement", "request_cpu_devices"]

_jit_report = jax.jit(learner_report)
#: seconds a blocked side waits before looking whether the run stopped
_POLL = 0.05


def request_cpu_devices(count: int) -> bool:
    """Ask JAX for ``count`` virtual CPU devices, so that acting and learning each get one
    on a CPU host (XLA:CPU runs one device's computations one at a time).

    Possible only before JAX has initialised its backends (a process that has already run a
    JAX operation keeps its devices), and left alone when ``XLA_FLAGS`` already sets
    ``--xla_force_host_platform_device_count``. Harmless on an accelerator host (only the CPU
    backend is affected). Returns whether the request took effect.
    """
    import os

    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return False
    if int(jax.config.jax_num_cpu_devices) >= count:
        return False
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # backends already initialised
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the asynchronous driver acts and learns.

    Attributes:
      actor: the device the actor's forward pass runs on.
      learner: the devices the update runs on (data-parallel over several); the replay lives
        on the first.
    """

    actor: Any
    learner: tuple[Any, ...]

    @classmethod
    def choose(cls, actor: str | None = None, learner: str | None = None) -> Placement:
        """The placement of ``--actor-devices`` / ``--learner-devices`` (``None``: defaults).

        Devices are named by their index in ``jax.local_devices()`` (``"1,2"``), or ``cpu``
        for the host's CPU on an accelerator machine. Defaults: on an accelerator host with one
        device, the actor on the CPU and the learner on the device; with several, the actor on
        device 0 and the learner on the rest; on a CPU host, the actor on device 0 and the
        learner on the others (one device: both share it).

        Raises:
          ValueError: a name that is no local device, more than one actor device, or an actor
            device among the learner's.
        """
        local = jax.local_devices()
        accelerator = local[0].platform != "cpu"
        if actor is None:
            actor_device = jax.devices("cpu")[0] if accelerator and len(local) == 1 else local[0]
        else:
            named = _parse_devices(actor, "--actor-devices", local)
            if len(named) != 1:
                raise ValueError(
                    f"--actor-devices names {len(named)} devices; the actor thread acts on one "
                    "(give one index)"
                )
            actor_device = named[0]
        if learner is None:
            rest = [d for d in local if d != actor_device]
            learner_devices = tuple(rest) if rest else (actor_device,)
        else:
            learner_devices = tuple(_parse_devices(learner, "--learner-devices", local))
            if actor_device in learner_devices and len(learner_devices) > 1:
                raise ValueError(
                    f"--learner-devices includes the actor's device {actor_device}: with "
                    "several learner devices, give the actor one of its own"
                )
        return cls(actor=actor_device, learner=learner_devices)

    @property
    def shared(self) -> bool:
        """Whether acting and learning share one device (nothing then runs side by side)."""
        return self.learner == (self.actor,)

    def describe(self) -> str:
        """One line for the run's output."""
        learner = ", ".join(str(d) for d in self.learner)
        return f"actor on {self.actor}, learner on {learner}"


def _parse_devices(text: str, flag: str, local: list[Any]) -> list[Any]:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if part == "cpu":
            out.append(jax.devices("cpu")[0])
            continue
        if not part.isdigit() or int(part) >= len(local):
            names = ", ".join(f"{i} ({d})" for i, d in enumerate(local))
            raise ValueError(f"{flag}: {part!r} is not a local device; this host has {names}")
        out.append(local[int(part)])
    if len(set(out)) != len(out):
        raise ValueError(f"{flag} names a device twice: {text!r}")
    return out


@dataclasses.dataclass
class _Shared:
    """What the two sides read of each other (plain Python values, under the GIL)."""

    produced: int  # transitions the actor has stepped
    dispatched: int  # updates the learner has dispatched
    params: Any = None  # the newest published online network (computed)
    params_updates: int = 0  # the update count of ``params``
    report: Any = None  # ``[updates, loss]`` of ``params``' learner state (host array)
    stop: bool = False
    error: BaseException | None = None
    max_lag: int = 0  # the largest lag seen at an act
    max_unpublished: int = 0  # the most updates dispatched beyond the published parameters
    max_gap: float = 0.0  # the largest replay-ratio gap seen, in updates


class AsyncDriver:
    """Runs an actor thread beside the learner (see the module docstring).

    Args:
      loop: the loop whose parts it composes. Where to act and learn is ``loop.placement``
        (a :class:`Placement`; default :meth:`Placement.choose`), the lag bound
        ``loop.max_lag`` (default 1) and the queue ``loop.queue_steps`` (default: one
        update's worth of vector steps, at least 2), as :class:`zoo.loop.Loop` sets them.

    Attributes:
      max_lag: ``k``, the most updates the actor's parameters may trail the learner's.
      queue_steps: vector steps the actor may run ahead of the learner.
      tolerance: the bound, in updates, on how far the updates dispatched may trail the
        transitions produced (see the module docstring).
    """

    name = "async"

    def __init__(self, loop: LoopLike):
        self.loop = loop
        self.placement = loop.placement or Placement.choose()
        self.max_lag = int(loop.max_lag)
        if self.max_lag < 1:
            raise ValueError(f"max_lag must be at least 1, got {self.max_lag}")
        # transitions of the run per vector step (P × N over P processes, zoo.runs.distributed)
        n, period = loop.step_transitions, loop.credit.transitions_per_update
        self.queue_steps = int(loop.queue_steps or max(2, math.ceil(period / n)))
        # the queue, the step in the actor's hands and the one being consumed (each n
        # transitions), and the credit below one update that the rule carries over
        self.tolerance = (self.queue_steps + 2) * n / period + 1
        self.act = async_jit(self._act)
        self.insert = async_jit(loop.insert, donate_argnums=(1,))
        self.sample = async_jit(loop.learn_step.sample, donate_argnums=(0,))
        learner = loop.learner
        # a learner over processes assembles its global arrays itself (not traceable): its
        # state is global, the rest of the learn carry this process's
        self._processes = learner.num_processes > 1
        self.update = async_jit(loop.learn_step.update) if learner.traceable else (
            loop.learn_step.update
        )  # fmt: skip
        self._mesh = learner.mesh if isinstance(learner, DataParallelLearner) else None
        self.shared: _Shared | None = None
        self.total = 0

    # ----------------------------------------------------------------------- placement

    def _to_learner(self, tree: Any) -> Any:
        """``tree``'s arrays committed to the learner's first device (the replay's)."""
        return jax.device_put(tree, self.placement.learner[0])

    def _replicated(self, tree: Any) -> Any:
        """``tree`` where the update reads it: replicated over the learner's mesh (over
        processes, the update's inputs besides its state are this process's)."""
        if self._mesh is None or self._processes:
            return self._to_learner(tree)
        return jax.device_put(tree, self._shardings()[1])

    def _shardings(self) -> tuple[Any, Any]:
        """``(split, replicated)`` shardings over the learner's mesh."""
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        mesh = self._mesh
        return NamedSharding(mesh, P(mesh.axis_names[0])), NamedSharding(mesh, P())

    # Only what crosses devices is moved (each ``device_put`` costs the learner's thread time
    # per leaf, measured at 28% of it on CartPole): on one learner device nothing is; over a
    # mesh, the batch is split and the sample's info replicated in one call, and the update's
    # priorities come back to the replay's device.

    def _sample(self, replay_state: Any, deferred: Any, key: jax.Array, updates: Any) -> Any:
        if self._mesh is not None:
            deferred = self._to_learner(deferred)
        return self.sample(replay_state, deferred, key, updates)

    def _update(self, learner_state: Any, batch: Any, info: Any, sums: Any, count: Any) -> Any:
        if self._mesh is not None and not self._processes:
            split, replicated = self._shardings()
            batch, info = jax.device_put((batch, info), (split, replicated))
        return self.update(learner_state, batch, info, sums, count)

    # ---------------------------------------------------------------------------- actor

    def _act(self, ts: Any, key: jax.Array, core: Any, actor: Any, env_steps: Any) -> Any:
        return self.loop.actor.act(actor, key, core, env_steps, ts)

    def _gap(self, shared: _Shared) -> None:
        credit = self.loop.credit
        expected = max(shared.produced - credit.min_size, 0) / credit.transitions_per_update
        shared.max_gap = max(shared.max_gap, expected - shared.dispatched)

    def _actor_loop(
        self, shared: _Shared, steps: queue.Queue, pending: Any, actions: Any, key: Any, core: Any
    ) -> None:
        """The actor thread: step, act with the newest parameters, hand the step over."""
        env, n, device = self.loop.env, self.loop.step_transitions, self.placement.actor
        learner = self.placement.learner[0]
        params, params_updates = None, None
        try:
            while not shared.stop and shared.produced < self.total:
                ts = env.step(np.asarray(actions))
                shared.produced += n
                self._gap(shared)
                # the learner publishes update u before it dispatches u + k: read its count
                # first, then the newest parameters, which are at most k behind that count
                dispatched = shared.dispatched
                if shared.params_updates != params_updates:
                    params_updates = shared.params_updates
                    params = jax.device_put(shared.params, device)
                shared.max_lag = max(shared.max_lag, dispatched - params_updates)
                produced = np.asarray(shared.produced, np.int32)
                key, core, next_pending, actions = self.act(ts, key, core, params, produced)
                # the step moves to the replay's device here, off the learner's thread
                item = (jax.device_put(pending, learner), ts)
                while not shared.stop:
                    try:
                        steps.put(item, timeout=_POLL)
                        break
                    except queue.Full:
                        continue
                pending = next_pending
        except BaseException as e:
            shared.error = e

    # -------------------------------------------------------------------------- learner

    def _publish(self, shared: _Shared, learned: tuple[Any, Any]) -> None:
        """Publish an update's acting network (its online one, or its target where the spec
        acts with it) for the actor, once it is computed."""
        learner_state, loss = learned
        learner_state = self.loop.learner.unreplicate(learner_state)  # this process's copy
        acting = self.loop.learner.acting(learner_state)
        jax.block_until_ready(acting)
        shared.params = acting
        shared.report = np.asarray(_jit_report(learner_state.updates, loss))
        shared.params_updates = int(shared.report[0])

    def _place(self, carry: CarryLike) -> CarryLike:
        """The learner's state and the replay on the learner's devices."""
        learning = carry.learning()
        learning = learning._replace(
            learner=learning.learner if self._processes else self._replicated(learning.learner),
            key=self._to_learner(learning.key),
            deferred=self._to_learner(learning.deferred),
            metric_sums=self._replicated(learning.metric_sums),
            metric_count=self._replicated(learning.metric_count),
            last_loss=self._replicated(learning.last_loss),
        )
        return carry.with_learning(
            learning,
            replay=self._to_learner(carry.replay),
            env_steps=self._to_learner(carry.env_steps),
            credit=self._to_learner(carry.credit),
        )

    def run(
        self, carry: CarryLike, actions: Any, trainer: TrainerLike, interrupted: list[bool]
    ) -> CarryLike:
        """Train with an actor thread until the budget, a stop or a signal."""
        credit_rule, n = self.loop.credit, self.loop.step_transitions
        self.total = trainer.settings.total_env_steps
        carry = self._place(carry)
        env_steps, credit = int(carry.env_steps), float(carry.credit)
        shared = _Shared(produced=env_steps, dispatched=int(carry.learner.updates))
        self.shared = shared
        self._publish(shared, (carry.learner, carry.last_loss))
        # the actor's own key, folded from the run's: the learner's sampling keys stay the
        # host driver's
        actor = self.placement.actor
        key = jax.device_put(jax.random.fold_in(carry.key, 0x5EB), actor)
        steps: queue.Queue = queue.Queue(maxsize=self.queue_steps)
        args = (shared, steps, jax.device_put(carry.pending, actor), actions, key)
        thread = threading.Thread(
            target=self._actor_loop,
            args=(*args, jax.device_put(carry.core, actor)),
            name="zoo-actor",
            daemon=True,
        )
        in_flight: list[tuple[Any, Any]] = []
        thread.start()
        try:
            while trainer.env_steps < self.total:
                pending, ts = self._next_step(shared, steps)
                replay, env_steps_arr, credit_arr = self.insert(
                    ts, carry.replay, pending, carry.env_steps, carry.credit
                )
                carry = dataclasses.replace(
                    carry, replay=replay, env_steps=env_steps_arr, credit=credit_arr
                )
                env_steps += n
                credit = credit_rule.earn(env_steps, credit)
                while credit_rule.due(credit):
                    # the lag bound: update u + 1 waits for update u + 1 - k to finish
                    if len(in_flight) >= self.max_lag:
                        self._publish(shared, in_flight.pop(0))
                    carry = self._learn(carry)
                    credit = credit_rule.spend(credit)
                    shared.dispatched += 1
                    in_flight.append((carry.learner, carry.last_loss))
                    shared.max_unpublished = max(shared.max_unpublished, len(in_flight))
                # publish what has finished without waiting (the actor acts with the newest)
                while in_flight and in_flight[0][0].updates.is_ready():
                    self._publish(shared, in_flight.pop(0))
                self._gap(shared)
                trainer.account([ts], shared.report)
                done = trainer.env_steps >= self.total
                if done or interrupted or trainer.env_steps >= trainer.next_event:
                    carry, stop = trainer.events(carry, interrupted)
                    if stop:
                        break
        finally:
            shared.stop = True
            thread.join()
        return carry

    @staticmethod
    def _next_step(shared: _Shared, steps: queue.Queue) -> tuple[Any, Any]:
        """The actor's next step; the actor's exception if it failed."""
        while True:
            if shared.error is not None:
                raise shared.error
            try:
                return steps.get(timeout=_POLL)
            except queue.Empty:
                continue

    def _learn(self, carry: CarryLike) -> CarryLike:
        """One learn step on the learner's devices, dispatched without waiting for it."""
        learning, replay = self.loop.learn_step.learn(
            carry.learning(), carry.replay, sample=self._sample, update=self._update,
            report=_jit_report,
        )  # fmt: skip
        return carry.with_learning(
            learning, replay=replay, credit=self.loop.credit.spend(carry.credit)
        )

    def stats(self) -> dict[str, float]:
        """The largest parameter lag (seen at an act, and dispatched beyond the published
        parameters) and replay-ratio gap measured so far, and the bounds they are held to
        (recorded in the run's log)."""
        if self.shared is None:
            return {}
        return {
            "async_max_lag": float(self.shared.max_lag),
            "async_max_lag_bound": float(self.max_lag),
            "async_max_unpublished": float(self.shared.max_unpublished),
            "async_ratio_gap": float(self.shared.max_gap),
            "async_ratio_tolerance": float(self.tolerance),
        }
