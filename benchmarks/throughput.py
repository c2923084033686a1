"""Throughput of the zoo's trainer beside the peers', one workload per child process.

    python benchmarks/throughput.py                  # every workload; peers where installed
    python benchmarks/throughput.py --quick          # shorter windows
    python benchmarks/throughput.py --only breakout,cartpole-8 --peers-python /path/bin/python
    python benchmarks/throughput.py --worker zoo:breakout    # one workload, one JSON line

Workloads (the settings of the performance issue's table):

- ``breakout``: DQN on Breakout-v5 (Nature CNN, batch 32, one update per 4 env steps, 1 env).
- ``cartpole-1`` / ``cartpole-8``: DQN on CartPole-v1 (MLP 120-84, batch 128, one update per 10
  transitions, ε = 0.05) with 1 and 8 envs (8 envs: 4 updates every 5 vector steps).
- ``seeds-8``: ``cartpole-8`` for 8 seeds vmapped in one program (64 envs in one pool).
- ``update``: the isolated DQN update (Nature CNN, batch 32, Adam) on a fixed batch.
- ``memory``: a 1M-transition Atari replay filled, resident memory read from ``/proc``.
- ``algorithms``: cost per update (sample from a full 1M-item replay + update) of DQN, C51,
  QR-DQN, IQN, M-IQN, DrQ(ε), M-DQN and the prioritised variants on the Nature CNN, DQN, IQN
  and M-IQN on Beyond the Rainbow's torso (:data:`BTR_TORSO`), FQF on both; R2D2 per learned
  transition (``--rows`` picks rows).
- ``pqn-breakout`` / ``dqn-breakout``, ``pqn-minatar`` / ``dqn-minatar``, ``pqn-cartpole`` /
  ``dqn-cartpole`` (not in the default set; ``--only``): PQN's presets (Gallici et al. 2024:
  128 or 32 environments, no replay) beside DQN's on the same game, each as users run it, with
  each child's peak memory (:data:`PRESETS`).

Each ``zoo`` loop workload runs the real trainer (:func:`zoo.train`, the path ``zoo train``
takes) and reads env steps/s between two training records after the warm-up (replay past
``min_size``, everything compiled), so compile time and the final evaluation are outside the
window. Pieces (env step, act, insert, sample, update) are timed alone in the same process, so
the next bottleneck is visible. Peers (SB3, SBX) run through ``benchmarks/peers.py`` with their
own DQN code. Each workload is a child process; its peak resident memory is the child's
``ru_maxrss``. This is a benchmark, not a test: it prints figures and asserts nothing about time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

CARTPOLE = {
    "network.torso": {"kind": "mlp", "sizes": []},
    "network.hidden": [120, 84],
    "replay.batch_size": 128,
    "replay.capacity": 10_000,
    "replay.min_size": 1_000,
    "schedule.update_period": 10,
    "schedule.epsilon": 0.05,
    "schedule.target_update_period": 50,
}
#: The Atari workload runs with the Atari presets' 1M-transition replay (what users run: a 20k
#: replay hid a 2× peak), checkpoints it and resumes from that checkpoint, so the child's peak
#: memory covers a run's whole life. ``min_size`` is lowered so that the warm-up is short.
BREAKOUT = {"replay.capacity": 1_000_000, "replay.min_size": 1_000}

#: (env id, envs, overrides, warm-up transitions, window transitions, quick window)
LOOPS: dict[str, tuple[str, int, dict[str, Any], int, int, int]] = {
    "breakout": ("Breakout-v5", 1, BREAKOUT, 2_000, 4_000, 2_000),
    "cartpole-1": ("CartPole-v1", 1, CARTPOLE, 20_000, 200_000, 100_000),
    "cartpole-8": ("CartPole-v1", 8, CARTPOLE, 40_000, 400_000, 200_000),
}

#: The same workloads with the asynchronous driver (``--loop async``: an actor thread on its
#: own virtual CPU device beside the learner): name -> the synchronous workload it mirrors.
ASYNC_LOOPS: dict[str, str] = {"breakout-async": "breakout", "cartpole-8-async": "cartpole-8"}

#: Beyond the Rainbow's torso (Clark et al. 2024): IMPALA ×2, adaptive max-pool 6×6, spectral
#: normalisation on the residual convolutions.
BTR_TORSO = {"kind": "impala_cnn", "width": 2, "pool": [6, 6], "spectral_norm": True}

#: The Nature CNN with SAME padding, as Flax's and Haiku's defaults give it (Dopamine, Acme).
SAME_TORSO = {"kind": "nature_cnn", "padding": "SAME"}

#: Rows of the per-update cost table: label -> (catalogue entry, overrides).
ALGORITHMS: dict[str, tuple[str, dict[str, Any]]] = {
    **{
        name: (name, {})
        for name in (
            "dqn",
            "c51",
            "qr_dqn",
            "iqn",
            "m_iqn",
            "drq_eps",
            "mdqn",
            "prioritized_ddqn",
            "prioritized_c51",
            "rainbow",
        )
    },
    "dqn, BTR torso": ("dqn", {"network.torso": BTR_TORSO}),
    "iqn, BTR torso": ("iqn", {"network.torso": BTR_TORSO}),
    "m_iqn, BTR torso": ("m_iqn", {"network.torso": BTR_TORSO}),
    "fqf": ("fqf", {}),
    "fqf, BTR torso": ("fqf", {"network.torso": BTR_TORSO}),
    # Dopamine's and Acme's Nature CNN inherit SAME padding (issue 36): 7,744 features, not 3,136
    "dqn, SAME": ("dqn", {"network.torso": SAME_TORSO}),
    # drq_eps as the preset now builds it: SAME, one hidden layer shared by the dueling streams
    "drq_eps, SAME, shared": (
        "drq_eps",
        {"network.torso": SAME_TORSO, "network.shared_hidden": True},
    ),
    # the same, with the target read as a network of its own: the learner's rule off (two passes
    # at s′ where the target, synced every update, equals the online network)
    "drq_eps, SAME, shared, target kept": (
        "drq_eps",
        {"network.torso": SAME_TORSO, "network.shared_hidden": True},
    ),
    # the Atari 100k presets as users run them (issue 38): DrQ(ε) beside the self-predictive
    # family, each with its own network, auxiliary loss, replay and optimizer
    **{f"{name} preset": (f"preset:{name}", {}) for name in ("drq_eps", "spr", "sr_spr", "bbf")},
}

#: Rows whose learner reads the target network as its own even where it equals the online one.
TARGET_KEPT = {"drq_eps, SAME, shared, target kept"}

#: The rows of the ``algorithms`` workload to run (``--rows``; default every row).
ROWS: list[str] | None = None

#: Items of the replay the ``algorithms`` rows sample from (``--replay-capacity``): 1M, the
#: presets' (about 7 GiB of frames); fewer where the memory is taken, e.g. by runs beside.
CAPACITY = 1_000_000

#: PQN beside DQN, each preset as users run it (its own environments, network, replay or
#: rollout; a DQN replay's warm-up lowered so that learning starts inside the run):
#: name -> (preset, env id, overrides, warm-up transitions, window, quick window). The warm-up
#: covers the first learning phases (a PQN rollout is 32 × 128 transitions on Atari and MinAtar).
PRESETS: dict[str, tuple[str, str, dict[str, Any], int, int, int]] = {
    "pqn-breakout": ("pqn_atari", "Breakout-v5", {}, 8_192, 32_768, 16_384),
    "dqn-breakout": ("dqn_nature", "Breakout-v5", {"replay.min_size": 1_000}, 2_000, 4_000, 2_000),
    "pqn-minatar": ("pqn_minatar", "MinAtar/Breakout-v1", {}, 8_192, 65_536, 32_768),
    "dqn-minatar": ("dqn_minatar", "MinAtar/Breakout-v1", {}, 2_000, 20_000, 10_000),
    "pqn-cartpole": ("pqn_cartpole", "CartPole-v1", {}, 8_192, 131_072, 65_536),
    "dqn-cartpole": ("dqn_cartpole", "CartPole-v1", {}, 2_000, 40_000, 20_000),
}


# ------------------------------------------------------------------------------------------
# Helpers (run inside a worker)


def _median_rate(fn: Callable[[], Any], calls: int, repeats: int) -> float:
    """Median calls per second of ``fn`` (which blocks until its work is done)."""
    fn()
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rates.append(calls / (time.perf_counter() - t0))
    return statistics.median(rates)


def _block(x: Any) -> Any:
    import jax

    return jax.block_until_ready(x)


def _rss() -> dict[str, float]:
    """Resident and peak resident memory of this process in GiB (``/proc/self/status``)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024 / 2**30
    return {"rss_gib": out["VmRSS"], "peak_rss_gib": out["VmHWM"]}


def _train_window(
    env_id: str,
    num_envs: int | None,
    overrides: dict[str, Any],
    warmup: int,
    window: int,
    lifecycle: bool = False,
    algorithm: str = "dqn",
    loop: str | None = None,
) -> dict[str, Any]:
    """Run the real trainer and measure env steps/s over ``window`` transitions.

    With ``lifecycle`` the run also checkpoints its replay (at the end of the warm-up and at
    the end) and is then resumed from that checkpoint for a few more steps, so that the
    child's peak memory covers a run's whole life (allocation, filling, learning, evaluation,
    checkpoints, resume); the checkpoint lands outside the timed window.
    """
    import zoo
    from zoo.runs.metrics import read_jsonl, windowed_rate

    log_every = window // 4
    total = warmup + window
    with tempfile.TemporaryDirectory() as tmp:
        result = zoo.train(
            algorithm,
            env=env_id,
            total_env_steps=total,
            num_envs=num_envs,
            overrides=overrides,
            run_dir=Path(tmp) / "run",
            eval_every=total,
            eval_episodes=1,
            eval_max_steps=100,
            checkpoint_every=warmup if lifecycle else total,
            log_every=log_every,
            save_replay=lifecycle,
            loop=loop,
            progress=False,
        )
        records = read_jsonl(result.run_dir / "metrics.jsonl")
        loop = records[-1].get("loop")
        out: dict[str, Any] = {"loop": loop}
        last = records[-1]
        out.update({k: last[k] for k in last if k.startswith("async_")})
        if lifecycle:
            resumed = zoo.train(
                resume=result.run_dir, total_env_steps=total + log_every, progress=False
            )
            out["resumed_to"] = resumed.env_steps
            out["replay_nbytes"] = _replay_nbytes(env_id, num_envs, overrides)
    rate, updates = windowed_rate(records, warmup)
    out.update(env_steps_per_s=rate, updates_per_s=updates)
    return out


def _replay_nbytes(env_id: str, num_envs: int, overrides: dict[str, Any]) -> int:
    """Bytes the workload's replay allocates (from shapes; nothing is allocated)."""
    import zoo
    from zoo.envs import make
    from zoo.runs.assemble import replay_for_env

    spec = zoo.load_algorithm("dqn", overrides=overrides)
    with make(env_id, num_envs=num_envs, seed=0) as env:
        return replay_for_env(spec, env).nbytes()


def _pieces(env_id: str, num_envs: int, overrides: dict[str, Any], quick: bool) -> dict[str, Any]:
    """Each piece of a host-path step alone (:func:`piece_ms`) and the rates they make."""
    import zoo
    from zoo.envs import make

    spec = zoo.load_algorithm("dqn", overrides=overrides)
    with make(env_id, num_envs=num_envs, seed=0) as env:
        ms = piece_ms(spec, env, quick)
    period = spec.schedule.update_period
    per_vector_step = ms["env"] + ms["act"] + ms["insert"]
    per_update = ms.get("compiled_sample_update", ms["sample"] + ms["update"])
    # serial cost of one vector step: its own pieces + its share of an update
    serial = per_vector_step + (ms["sample"] + ms["update"]) * num_envs / period
    return {
        "ms": ms,
        "serial_env_steps_per_s": num_envs * 1000.0 / serial,
        "update_only_env_steps_per_s": period * 1000.0 / per_update,
    }


def piece_ms(spec: Any, env: Any, quick: bool) -> dict[str, float]:
    """Each piece of a host-path step of ``spec`` on ``env``, timed alone: env step, act, insert,
    sample, update (median ms per call; the replay filled past ``min_size`` first). Where the
    environment is not an image, also ``compiled_sample_update``: one sample and update of the
    compiled path, timed as 200 back to back in one scan."""
    import jax
    import numpy as np

    import zoo
    from zoo.learner import Learner
    from zoo.loop import Loop
    from zoo.runs.assemble import replay_for_env

    net = zoo.build_network(
        spec,
        observation_shape=env.observation_shape,
        num_actions=env.num_actions,
        key=jax.random.PRNGKey(0),
    )
    replay = replay_for_env(spec, env)
    learner = Learner(spec)
    loop = Loop(spec, env, learner, replay)
    carry = loop.init(learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
    ts = env.reset()
    carry, actions = loop.first_act(carry, ts)
    for _ in range(spec.replay.min_size // env.num_envs + 2):  # fill past min_size (no updates)
        ts = env.step(np.asarray(actions))
        replay_state, steps, credit = loop.host.insert(
            ts, carry.replay, carry.pending, carry.env_steps, carry.credit
        )
        key, core, pending, actions, _ = loop.host.act(
            ts, carry.key, carry.core, carry.actor, carry.actor_report, steps
        )
        carry = dataclasses.replace(
            carry, replay=replay_state, env_steps=steps, credit=credit, key=key, core=core,
            pending=pending,
        )  # fmt: skip
    repeats, calls = (3, 20) if quick else (5, 40)
    state = {"carry": carry, "ts": ts}
    action_np = np.asarray(actions)

    def env_step():
        state["ts"] = env.step(action_np)

    def act():
        c = state["carry"]
        out = loop.host.act(state["ts"], c.key, c.core, c.actor, c.actor_report, c.env_steps)
        np.asarray(out[3])

    def insert():
        c = state["carry"]
        replay_state, steps, credit = loop.host.insert(
            state["ts"], c.replay, c.pending, c.env_steps, c.credit
        )
        _block(steps)
        state["carry"] = dataclasses.replace(c, replay=replay_state, env_steps=steps, credit=credit)

    def sample():
        c = state["carry"]
        replay_state, key, batch, info = loop.host.sample(c.replay, c.deferred, c.key)
        _block(batch)
        state["carry"] = dataclasses.replace(c, replay=replay_state, key=key)
        state["batch"] = (batch, info)

    sample()

    def update():
        c = state["carry"]
        batch, info = state["batch"]
        out = loop.host.update(c.learner, batch, info, c.metric_sums, c.metric_count)
        _block(out[0].updates)
        state["carry"] = dataclasses.replace(c, learner=out[0])

    if not env.is_image:
        # the compiled path runs updates back to back without dispatch: time K in one scan
        import equinox as eqx

        k = 200
        dynamic, static = eqx.partition(state["carry"], eqx.is_array)

        @jax.jit
        def learn_k(dynamic):
            def body(d, _):
                c = loop.learn(eqx.combine(d, static))
                return eqx.partition(c, eqx.is_array)[0], None

            return jax.lax.scan(body, dynamic, None, length=k)[0]

        def compiled_updates():
            state["dynamic"] = _block(learn_k(state.get("dynamic", dynamic)))

        compiled_ms = 1000.0 / (k * _median_rate(compiled_updates, 2, repeats))
    else:
        compiled_ms = None
    ms = {
        name: 1000.0 / _median_rate(fn, calls, repeats)
        for name, fn in (
            ("env", env_step),
            ("act", act),
            ("insert", insert),
            ("sample", sample),
            ("update", update),
        )
    }
    if compiled_ms is not None:
        ms["compiled_sample_update"] = compiled_ms
    return ms


# ------------------------------------------------------------------------------------------
# Workers


def isolated_update(quick: bool) -> float:
    """Updates/s of a jitted DQN update alone (Nature CNN, batch 32, Adam, fixed batch)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import zoo
    from zoo.jit import async_jit
    from zoo.learner import Learner

    spec = zoo.load_algorithm("dqn")
    net = zoo.build_network(
        spec, observation_shape=(4, 84, 84), num_actions=4, key=jax.random.PRNGKey(0)
    )
    learner = Learner(spec)
    state = {"s": learner.init(net, jax.random.PRNGKey(1))}
    rng = np.random.default_rng(0)
    batch = zoo.Transition(
        observation=jnp.asarray(rng.integers(0, 255, (32, 4, 84, 84)), jnp.uint8),
        action=jnp.asarray(rng.integers(0, 4, 32), jnp.int32),
        reward=jnp.asarray(rng.normal(size=32), jnp.float32),
        discount=jnp.ones(32, jnp.float32),
        next_observation=jnp.asarray(rng.integers(0, 255, (32, 4, 84, 84)), jnp.uint8),
        probability=jnp.full((32,), 1e-3, jnp.float32),
    )
    update = async_jit(learner.update)  # the jit the loop uses

    def once():
        state["s"], aux = update(state["s"], batch)
        _block(aux.metrics["loss"])

    for _ in range(3):
        once()
    return _median_rate(once, 10 if quick else 20, 3 if quick else 5)


def work_loop(name: str, quick: bool) -> dict[str, Any]:
    if name in ASYNC_LOOPS:
        env_id, num_envs, overrides, warmup, window, quick_window = LOOPS[ASYNC_LOOPS[name]]
        window = quick_window if quick else window
        lifecycle = ASYNC_LOOPS[name] == "breakout"
        return _train_window(
            env_id, num_envs, overrides, warmup, window, lifecycle=lifecycle, loop="async"
        )
    env_id, num_envs, overrides, warmup, window, quick_window = LOOPS[name]
    out = _train_window(
        env_id,
        num_envs,
        overrides,
        warmup,
        quick_window if quick else window,
        lifecycle=name == "breakout",
    )
    out["pieces"] = _pieces(env_id, num_envs, overrides, quick)
    if name == "breakout":
        out["isolated_updates_per_s"] = isolated_update(quick)
    return out


def work_preset(name: str, quick: bool) -> dict[str, Any]:
    preset, env_id, overrides, warmup, window, quick_window = PRESETS[name]
    out = _train_window(
        env_id,
        None,  # the preset's own
        overrides,
        warmup,
        quick_window if quick else window,
        algorithm=f"preset:{preset}",
    )
    return {**out, "preset": preset, "env": env_id}


def work_update(quick: bool) -> dict[str, Any]:
    return {"updates_per_s": isolated_update(quick)}


def work_seeds(quick: bool, seeds: int = 8) -> dict[str, Any]:
    """``cartpole-8`` for ``seeds`` seeds vmapped in one program, against one seed alone."""
    from zoo.seeds import time_vmapped_seeds

    window = 100_000 if quick else 200_000
    many = time_vmapped_seeds("dqn", "CartPole-v1", CARTPOLE, seeds, 8, 40_000, window)
    one = time_vmapped_seeds("dqn", "CartPole-v1", CARTPOLE, 1, 8, 40_000, window)
    return {
        "env_steps_per_s": many["env_steps_per_s"],
        "updates_per_s": many["updates_per_s"],
        "single_env_steps_per_s": one["env_steps_per_s"],
        "seeds": seeds,
    }


def work_memory(quick: bool) -> dict[str, Any]:
    """Fill a 1M-transition Atari replay (84×84 frames, stack 4) and read resident memory."""
    import jax
    import jax.numpy as jnp

    import zoo
    from zoo.replay import StepBatch, build_replay

    capacity = 1_000_000
    spec = zoo.load_algorithm(
        "dqn", overrides={"replay.capacity": capacity, "replay.min_size": 50_000}
    )
    replay = build_replay(
        spec, num_envs=1, observation_shape=(4, 84, 84), observation_dtype=jnp.uint8, stack=4
    )
    before = _rss()

    @jax.jit
    def fill(state):
        def body(t, state):
            frame = jnp.full((1, 4, 84, 84), t % 251, jnp.uint8)
            flags = jnp.zeros((1,), bool)
            step = StepBatch(
                observation=frame,
                action=jnp.zeros((1,), jnp.int32),
                reward=jnp.zeros((1,), jnp.float32),
                terminated=flags,
                truncated=flags,
                first=flags,
                valid=~flags,
                core_state=None,
            )
            return replay.add(state, step)

        return jax.lax.fori_loop(0, capacity, body, state)

    fill = jax.jit(fill.__wrapped__, donate_argnums=0)
    t0 = time.perf_counter()
    state = _block(fill(replay.init()))
    seconds = time.perf_counter() - t0
    after = _rss()
    assert int(state.cursor) == capacity and int(state.frames[0, -1, 0, 0]) == (capacity - 1) % 251
    return {
        "transitions": capacity,
        "replay_nbytes_gib": replay.nbytes() / 2**30,
        "frames_only_gib": capacity * 84 * 84 / 2**30,
        "rss_before_gib": before["rss_gib"],
        "rss_after_gib": after["rss_gib"],
        "peak_rss_gib": after["peak_rss_gib"],
        "replay_resident_gib": after["rss_gib"] - before["rss_gib"],
        "fill_seconds": seconds,
    }


def _row_spec(entry: str, overrides: dict[str, Any]) -> Any:
    """A row's spec: a catalogue entry, or ``preset:NAME``'s algorithm with the preset's own
    overrides under the row's."""
    import zoo

    if entry.startswith("preset:"):
        entry = zoo.spec.algorithm_for(zoo.load_preset(entry))
    return zoo.load_algorithm(entry, overrides=overrides)


def _nbytes(tree: Any) -> int:
    """Bytes of the arrays of a pytree."""
    import jax

    return sum(int(x.nbytes) for x in jax.tree.leaves(tree) if hasattr(x, "nbytes"))


def work_algorithms(quick: bool) -> dict[str, Any]:
    """Cost per update (sample from a full 1M-item Atari replay + update), per algorithm.

    The replay is 1M items (frames all zero, every item eligible: the sampler scans the same
    weights as a filled one); each row times the loop's own sample and update calls.
    """
    import jax
    import jax.numpy as jnp

    import zoo
    from zoo.data import build_data
    from zoo.envs import make
    from zoo.learner import Learner
    from zoo.loop import Loop

    env = make("Breakout-v5", num_envs=1, seed=0)
    rows: dict[str, Any] = {}
    calls, repeats = (5, 3) if quick else (10, 3)
    for name, (entry, extra) in [*ALGORITHMS.items(), ("r2d2", ("r2d2", {}))]:
        if ROWS is not None and name not in ROWS:
            continue
        overrides: dict[str, Any] = {"replay.capacity": CAPACITY, "replay.min_size": 50_000}
        if entry == "r2d2":
            overrides = {}
        spec = _row_spec(entry, {**overrides, **extra})
        net = zoo.build_network(
            spec,
            observation_shape=(1, 84, 84) if spec.recurrent else (4, 84, 84),
            num_actions=4,
            key=jax.random.PRNGKey(0),
        )
        shape = (1, 84, 84) if spec.recurrent else (4, 84, 84)
        replay = build_data(  # with the steps after each item where an auxiliary loss wants them
            spec,
            num_envs=1,
            observation_shape=shape,
            observation_dtype=jnp.uint8,
            stack=shape[0],
            core_state=net.initial_state() if spec.recurrent else None,
        )
        learner = Learner(  # resets draw fresh networks of the same shapes
            spec,
            network_fn=lambda key, spec=spec, shape=shape: zoo.build_network(
                spec, observation_shape=shape, num_actions=4, key=key
            ),
        )
        if name in TARGET_KEPT:
            learner.target_is_online = False
        loop = Loop(spec, env, learner, replay, net.initial_state() if spec.recurrent else None)
        carry = loop.init(learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
        full = carry.replay._replace(
            cursor=jnp.asarray(replay.capacity_per_env, jnp.int32),
            valid=jnp.ones_like(carry.replay.valid),
        )
        state = {"replay": full, "key": carry.key, "learner": carry.learner}

        def sample(loop=loop, carry=carry, state=state):
            r, k, batch, info = loop.host.sample(state["replay"], carry.deferred, state["key"])
            _block(batch)
            state.update(replay=r, key=k, batch=(batch, info))

        def update(loop=loop, carry=carry, state=state):
            batch, info = state["batch"]
            out = loop.host.update(
                state["learner"], batch, info, carry.metric_sums, carry.metric_count
            )
            _block(out[0].updates)
            state["learner"] = out[0]

        sample()
        compiled = loop.host.update.lower(
            state["learner"], *state["batch"], carry.metric_sums, carry.metric_count
        ).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        temp = getattr(compiled.memory_analysis(), "temp_size_in_bytes", 0) or 0
        n = 2 if spec.recurrent else calls
        sample_ms = 1000.0 / _median_rate(sample, n, repeats)
        update_ms = 1000.0 / _median_rate(update, n, 1 if spec.recurrent else repeats)
        learned = spec.replay.batch_size * (
            spec.replay.sequence.trace_length if spec.replay.sequence else 1
        )
        rows[name] = {
            "sample_ms": sample_ms,
            "update_ms": update_ms,
            "per_update_ms": sample_ms + update_ms,
            "learned_transitions": learned,
            "us_per_learned_transition": 1000.0 * (sample_ms + update_ms) / learned,
            "replay_items": replay.num_envs * replay.items_per_env,
            # XLA's own counts for the compiled update: floating-point operations, the working
            # memory of one update, and the learner state (online, target, optimizer moments)
            "update_gflop": float((cost or {}).get("flops", 0.0)) / 1e9,
            "update_temp_mib": temp / 2**20,
            "learner_state_mib": _nbytes(carry.learner) / 2**20,
            "updates_per_step": spec.schedule.updates_per_period / spec.schedule.update_period,
        }
        del carry, state, full
    env.close()
    return rows


WORKERS: dict[str, Callable[[bool], dict[str, Any]]] = {
    **{name: (lambda quick, name=name: work_loop(name, quick)) for name in [*LOOPS, *ASYNC_LOOPS]},
    **{name: (lambda quick, name=name: work_preset(name, quick)) for name in PRESETS},
    "update": work_update,
    "seeds-8": work_seeds,
    "memory": work_memory,
    "algorithms": work_algorithms,
}


# ------------------------------------------------------------------------------------------
# Orchestration


def run_child(argv: list[str], timeout: float) -> tuple[dict[str, Any] | None, float, str]:
    """Run a child; return its last JSON line, its own peak RSS (GiB, from ``wait4``) and the
    tail of its stderr."""
    import threading

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, cwd=HERE.parent)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, _, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = 0  # reaped by wait4
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = None
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            break
    return result, usage.ru_maxrss / 2**20, "\n".join(stderr.strip().splitlines()[-5:])


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "–" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows")
    parser.add_argument("--only", help="comma-separated workloads (default: all)")
    parser.add_argument(
        "--peers-python",
        default=sys.executable,
        help="interpreter with stable-baselines3 / sbx installed (pip install '.[peers]')",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip SB3 and SBX")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json-out", help="also write every result as JSON to this file")
    parser.add_argument(
        "--rows",
        help="semicolon-separated rows of the algorithms workload (default: all), e.g. "
        "'dqn;fqf;fqf, BTR torso'",
    )
    parser.add_argument(
        "--replay-capacity",
        type=int,
        default=1_000_000,
        help="items of the replay the algorithms rows sample from (default 1,000,000)",
    )
    args = parser.parse_args(argv)
    global CAPACITY, ROWS
    CAPACITY = args.replay_capacity
    if args.rows:
        ROWS = [r.strip() for r in args.rows.split(";")]
        unknown = [r for r in ROWS if r not in ALGORITHMS and r != "r2d2"]
        if unknown:
            parser.error(f"unknown rows {unknown}; choose from {', '.join(ALGORITHMS)}, r2d2")

    if args.worker:
        _, name = args.worker.split(":", 1)
        print(json.dumps(WORKERS[name](args.quick)))
        return 0

    names = args.only.split(",") if args.only else [*LOOPS, "seeds-8", "memory", "algorithms"]
    results: dict[str, Any] = {}
    for name in names:
        if name not in WORKERS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKERS)}")
        argv_child = [sys.executable, __file__, "--worker", f"zoo:{name}"]
        if args.quick:
            argv_child.append("--quick")
        if args.rows:
            argv_child += ["--rows", args.rows]
        argv_child += ["--replay-capacity", str(args.replay_capacity)]
        print(f"… zoo {name}", file=sys.stderr, flush=True)
        out, peak, err = run_child(argv_child, timeout=3600)
        results[f"zoo:{name}"] = {"result": out, "peak_rss_gib": peak, "stderr": err}
        if out is None:
            print(f"zoo {name} failed:\n{err}", file=sys.stderr)
        if name in ("breakout", "cartpole-1", "cartpole-8") and not args.no_peers:
            for library in ("sb3", "sbx"):
                argv_peer = [
                    args.peers_python,
                    str(HERE / "peers.py"),
                    "--library",
                    library,
                    "--workload",
                    name,
                ]
                if args.quick:
                    argv_peer.append("--quick")
                print(f"… {library} {name}", file=sys.stderr, flush=True)
                out, peak, err = run_child(argv_peer, timeout=1800)
                results[f"{library}:{name}"] = {"result": out, "peak_rss_gib": peak, "stderr": err}
                if out is None:
                    print(f"{library} {name} unavailable:\n{err}", file=sys.stderr)
    report(results)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2))
    return 0


def report(results: dict[str, Any]) -> None:
    """Print the tables: loops with peers and ratios, pieces, seeds, algorithms, memory."""
    import platform

    def get(key: str) -> dict[str, Any] | None:
        return (results.get(key) or {}).get("result")

    lines = ["| workload | library | env steps/s | updates/s | peak RSS | ours ÷ best peer |"]
    lines.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for name in [*LOOPS, *ASYNC_LOOPS]:
        ours = get(f"zoo:{name}")
        if ours is None:
            continue
        mirrored = ASYNC_LOOPS.get(name, name)
        peers = {lib: get(f"{lib}:{mirrored}") for lib in ("sb3", "sbx")}
        best = max((p["env_steps_per_s"] for p in peers.values() if p), default=None)
        ratio = f"{ours['env_steps_per_s'] / best:.2f}×" if best else "–"
        peak = results[f"zoo:{name}"]["peak_rss_gib"]
        lines.append(
            f"| {name} | zoo ({ours['loop']}) | {_fmt(ours['env_steps_per_s'])} | "
            f"{_fmt(ours['updates_per_s'], ',.1f')} | {peak:.2f} GiB | {ratio} |"
        )
        for lib, p in peers.items():
            if p and name == mirrored:
                peak = results[f"{lib}:{name}"]["peak_rss_gib"]
                lines.append(
                    f"| {name} | {lib} | {_fmt(p['env_steps_per_s'])} | "
                    f"{_fmt(p.get('updates_per_s'), ',.1f')} | {peak:.2f} GiB | |"
                )
    print("\n".join(lines))

    b = get("zoo:breakout")
    if b and b.get("replay_nbytes"):
        from zoo.runs.memory import RUN_OVERHEAD

        replay, peak = b["replay_nbytes"] / 2**30, results["zoo:breakout"]["peak_rss_gib"]
        bound = replay + RUN_OVERHEAD / 2**30
        print(
            f"\nBreakout memory over a whole run (1M replay, learning, evaluation, checkpoints "
            f"with the replay, resume to {b['resumed_to']:,} steps): peak {peak:.2f} GiB, replay "
            f"{replay:.2f} GiB, bound replay + 1.5 GiB = {bound:.2f} GiB "
            f"({'within' if peak <= bound else 'OVER'})"
        )
    if b:
        ceiling = 4 * b["isolated_updates_per_s"]
        print(
            f"\nBreakout: isolated update {b['isolated_updates_per_s']:.1f}/s → ceiling "
            f"{ceiling:.0f} env steps/s; the trainer reached {b['env_steps_per_s']:.0f} "
            f"({b['env_steps_per_s'] / ceiling:.0%} of it)"
        )
        a, sb3 = get("zoo:breakout-async"), get("sb3:breakout")
        if a:
            vs_sb3 = f", {a['env_steps_per_s'] / sb3['env_steps_per_s']:.2f}× SB3's" if sb3 else ""
            print(
                f"  the asynchronous driver reached {a['env_steps_per_s']:.0f} "
                f"({a['env_steps_per_s'] / ceiling:.0%} of the ceiling, "
                f"{a['env_steps_per_s'] / b['env_steps_per_s']:.2f}× the synchronous{vs_sb3}); "
                f"largest lag {a.get('async_max_lag')}, ratio gap {a.get('async_ratio_gap')} "
                f"(tolerance {a.get('async_ratio_tolerance')})"
            )
        for lib in ("sb3", "sbx"):
            peer = get(f"{lib}:breakout")
            if peer and peer.get("isolated_updates_per_s"):
                rate = peer["isolated_updates_per_s"]
                print(
                    f"  {lib}'s own update alone (model.train, batch 32): {rate:.1f}/s; "
                    f"zoo's is {b['isolated_updates_per_s'] / rate:.2f}× that"
                )
    print(
        "\nPieces (ms per call, each alone, host-path calls) and what they imply. The update-only "
        "cap is period / (sample + update); for compiled workloads (vector observations) the "
        "sample + update is timed back to back inside one scan (shown in brackets)."
    )
    print(
        "| workload | env | act | insert | sample | update | serial env steps/s | update-only cap |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in LOOPS:
        r = get(f"zoo:{name}")
        if r is None:
            continue
        p, ms = r["pieces"], r["pieces"]["ms"]
        print(
            f"| {name} | {ms['env']:.3f} | {ms['act']:.3f} | {ms['insert']:.3f} | "
            f"{ms['sample']:.3f} | {ms['update']:.3f}"
            + (f" [{ms['compiled_sample_update']:.3f}]" if "compiled_sample_update" in ms else "")
            + f" | {p['serial_env_steps_per_s']:,.0f} | "
            f"{p['update_only_env_steps_per_s']:,.0f} |"
        )
        if name == "cartpole-8":
            cap = p["update_only_env_steps_per_s"]
            print(
                f"  cartpole-8 reached {r['env_steps_per_s'] / cap:.0%} of its update-only cap "
                f"({cap:,.0f} env steps/s)"
            )
            a = get("zoo:cartpole-8-async")
            if a:
                print(
                    f"  cartpole-8 with the asynchronous driver: {a['env_steps_per_s']:,.0f} "
                    f"env steps/s, {a['env_steps_per_s'] / cap:.0%} of that cap"
                )
    pairs = [n[4:] for n in PRESETS if n.startswith("pqn-") and get(f"zoo:{n}")]
    if pairs:
        print(
            "\nPQN beside DQN, each preset as users run it (env steps/s while learning; peak RSS):"
        )
        print(
            "| env | pqn preset | env steps/s | peak RSS | dqn preset | env steps/s | peak RSS "
            "| ratio |"
        )
        print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |")
        for env in pairs:
            p, d = get(f"zoo:pqn-{env}"), get(f"zoo:dqn-{env}")
            pp = results[f"zoo:pqn-{env}"]["peak_rss_gib"]
            row = (
                f"| {p['env']} | {p['preset']} ({p['loop']}) | {_fmt(p['env_steps_per_s'])} | "
                f"{pp:.2f} GiB"
            )
            if d:
                dp = results[f"zoo:dqn-{env}"]["peak_rss_gib"]
                ratio = p["env_steps_per_s"] / d["env_steps_per_s"]
                row += (
                    f" | {d['preset']} ({d['loop']}) | {_fmt(d['env_steps_per_s'])} | "
                    f"{dp:.2f} GiB | {ratio:.1f}× |"
                )
            print(row)
    s = get("zoo:seeds-8")
    if s:
        print(
            f"\nSeeds: {s['seeds']} seeds vmapped (cartpole-8 each): {s['env_steps_per_s']:,.0f} "
            f"env steps/s in total against {s['single_env_steps_per_s']:,.0f} for one seed the "
            f"same way: {s['env_steps_per_s'] / s['single_env_steps_per_s']:.2f}×"
        )
    a = get("zoo:algorithms")
    if a:
        # the ratios are to DQN's row, or to the first row where --rows leaves DQN out
        first = "dqn" if "dqn" in a else next(iter(a))
        base = a[first]["per_update_ms"]
        print("\nCost per update (sample from a 1M-item replay + update, Breakout; the Nature CNN")
        print("unless the row names the BTR torso):")
        print(
            f"| algorithm | sample ms | update ms | per update ms | ÷ {first} "
            "| µs per learned transition | GFLOP per update | update working MiB "
            "| learner state MiB | updates per step |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, r in a.items():
            print(
                f"| {name} | {r['sample_ms']:.2f} | {r['update_ms']:.1f} | "
                f"{r['per_update_ms']:.1f} | {r['per_update_ms'] / base:.2f}× | "
                f"{r['us_per_learned_transition']:,.0f} | {r.get('update_gflop', 0):.1f} | "
                f"{r.get('update_temp_mib', 0):,.0f} | {r.get('learner_state_mib', 0):,.0f} | "
                f"{r.get('updates_per_step', 0):g} |"
            )
    m = get("zoo:memory")
    if m:
        print(
            f"\nMemory: a {m['transitions']:,}-transition Atari replay filled in "
            f"{m['fill_seconds']:.0f} s: resident {m['replay_resident_gib']:.2f} GiB "
            f"({m['replay_resident_gib'] * 2**30 / 1e9:.2f} GB; allocated "
            f"{m['replay_nbytes_gib']:.2f} GiB, frames alone {m['frames_only_gib']:.2f} GiB); "
            f"process peak {m['peak_rss_gib']:.2f} GiB"
        )
    import jax

    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"jax {jax.__version__} ({jax.devices()[0].platform})"
    )


if __name__ == "__main__":
    sys.exit(main())
