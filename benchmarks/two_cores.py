"""What this machine's cores give one Atari 100k update: one core, both cores, two runs at once,
or one run's batch split over two XLA host devices.

    python benchmarks/two_cores.py                      # drq_eps on Krull-v5, 7 rounds
    python benchmarks/two_cores.py --preset der --rounds 3

Each setting runs in a fresh process (XLA's flags and a process's cores are fixed when JAX
starts), one after the other, nothing else on the machine: the update of the preset as
``zoo bench atari100k`` runs it (``--replay-capacity`` 100,000), compiled, then timed on one fixed
batch (:func:`atari100k_split.fixed_batch`) in ``--rounds`` rounds of 10 calls; the figure is the
median ms per update. The settings:

- ``pinned``: one process on core 0 with single-threaded Eigen, as ``zoo bench --jobs 2`` runs
  each of its two runs;
- ``pair``: two such processes at once, on core 0 and core 1 (the benchmark's throughput);
- ``lone`` and ``lone, Eigen single``: one process on every core (a lone run of ``zoo bench``),
  with XLA's default threads and with ``--xla_cpu_multi_thread_eigen=false``;
- ``split``: one process with two XLA host devices (``--xla_force_host_platform_device_count=2``),
  the batch split between them and the learner state replicated (``jax.jit`` with shardings:
  XLA sums the two halves' gradients), the data-parallel way to put both cores on one run.

Then the same for a float32 matrix product (two 1536² slices, on one device and on two): the
most two host devices give a computation that splits perfectly. A benchmark, not a test: it
prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

EIGEN_SINGLE = "--xla_cpu_multi_thread_eigen=false"
TWO_DEVICES = "--xla_force_host_platform_device_count=2"

#: name -> (XLA_FLAGS, the cores the process is pinned to or None, its role)
SETTINGS: dict[str, tuple[str, list[int] | None, str]] = {
    "pinned": (EIGEN_SINGLE, [0], "update"),
    "lone": ("", None, "update"),
    "lone, Eigen single": (EIGEN_SINGLE, None, "update"),
    "split": (f"{TWO_DEVICES} {EIGEN_SINGLE}", None, "split"),
    "product": (f"{TWO_DEVICES} {EIGEN_SINGLE}", None, "product"),
}


def _timed(step: Any, state: Any, rounds: int) -> list[float]:
    """ms per call of ``state = step(state)`` in ``rounds`` rounds of 10 calls (after one warm
    call)."""
    import jax

    state = step(state)
    jax.block_until_ready(state)
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(10):
            state = step(state)
        jax.block_until_ready(state)
        out.append((time.perf_counter() - t0) * 100.0)
    return out


def measure_update(preset: str, game: str, capacity: int, rounds: int, split: bool) -> list[float]:
    """ms per update of ``preset`` on a fixed batch shaped as ``game``'s, on one device or (with
    ``split``) with the batch split over the first two devices."""
    import jax
    import numpy as np
    from atari100k_split import fixed_batch, preset_spec
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import zoo
    from zoo.envs import make
    from zoo.learner import Learner

    spec = preset_spec(preset, {"replay.capacity": capacity})
    with make(game, protocol=zoo.load_preset(preset).env.protocol, num_envs=1, seed=0) as env:
        shape, actions = env.observation_shape, env.num_actions
    net = zoo.build_network(
        spec, observation_shape=shape, num_actions=actions, key=jax.random.PRNGKey(0)
    )
    learner = Learner(spec)
    state = learner.init(net, jax.random.PRNGKey(1))
    batch = fixed_batch(spec, shape, actions)
    if split:
        mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
        whole, halves = (
            NamedSharding(mesh, PartitionSpec()),
            NamedSharding(mesh, PartitionSpec("data")),
        )
        state, batch = jax.device_put(state, whole), jax.device_put(batch, halves)
        update = jax.jit(learner.update, in_shardings=(whole, halves), out_shardings=(whole, None))
    else:
        update = jax.jit(learner.update)
    return _timed(lambda s: update(s, batch)[0], state, rounds)


def measure_product(rounds: int) -> dict[str, list[float]]:
    """ms per float32 product of 1536² slices: one slice, two slices on one device, two slices
    split over two devices."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    x = jax.random.normal(jax.random.PRNGKey(0), (2, 1536, 1536))
    product = jax.jit(lambda a: jnp.einsum("bij,bjk->bik", a, a) / 1536.0)
    mesh = Mesh(np.array(jax.devices()[:2]), ("d",))
    inputs = {
        "one slice, one device": x[:1],
        "two slices, one device": x,
        "two slices, two devices": jax.device_put(x, NamedSharding(mesh, PartitionSpec("d"))),
    }
    # each call multiplies the same input (chained products would shrink towards denormals)
    return {name: _timed(lambda _, a=a: product(a), a, rounds) for name, a in inputs.items()}


def _spawn(name: str, args: argparse.Namespace, cores: list[int] | None) -> subprocess.Popen:
    flags, _, _ = SETTINGS[name]
    env = {**os.environ, "XLA_FLAGS": flags}
    command = [sys.executable, str(Path(__file__).resolve()), "--measure", name]
    command += ["--preset", args.preset, "--game", args.game, "--rounds", str(args.rounds)]
    command += ["--replay-capacity", str(args.replay_capacity)]
    if cores is not None:
        command += ["--cores", ",".join(map(str, cores))]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen) -> Any:
    out, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"a measuring process failed (exit {process.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    import statistics

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="drq_eps", help="an Atari 100k preset (drq_eps)")
    parser.add_argument("--game", default="Krull-v5", help="its observations' game (Krull-v5)")
    parser.add_argument("--replay-capacity", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7, help="rounds of 10 timed calls")
    parser.add_argument("--measure", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    parser.add_argument("--cores", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.measure is not None:  # a measuring child: pin, then start JAX
        if args.cores:
            os.sched_setaffinity(0, [int(c) for c in args.cores.split(",")])
        role = SETTINGS[args.measure][2]
        if role == "product":
            figures: Any = measure_product(args.rounds)
        else:
            figures = measure_update(
                args.preset, args.game, args.replay_capacity, args.rounds, role == "split"
            )
        print(json.dumps(figures))
        return 0

    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("two_cores.py needs two cores (this process may use one)")
    median = statistics.median
    rows: list[tuple[str, float, float]] = []  # setting, ms per update per process, updates/s
    for name in ("pinned", "lone", "lone, Eigen single", "split"):
        ms = median(_result(_spawn(name, args, SETTINGS[name][1])))
        rows.append((name, ms, 1000.0 / ms))
    pair = [_spawn("pinned", args, [core]) for core in (0, 1)]
    pair_ms = [median(_result(p)) for p in pair]
    rows.insert(1, ("pair", sum(pair_ms) / 2, sum(1000.0 / ms for ms in pair_ms)))
    base = rows[0][2]
    print(f"{args.preset} update on {args.game}'s observations, median of {args.rounds} rounds\n")
    print("| setting | ms per update (per process) | updates/s in all | ÷ pinned |")
    print("| --- | ---: | ---: | ---: |")
    for name, ms, rate in rows:
        print(f"| {name} | {ms:.1f} | {rate:.1f} | {rate / base:.2f}× |")
    product = {k: median(v) for k, v in _result(_spawn("product", args, None)).items()}
    speedup = product["two slices, one device"] / product["two slices, two devices"]
    listed = ", ".join(f"{k} {v:.1f}" for k, v in product.items())
    print(f"\nfloat32 product of 1536² slices, ms: {listed}: two devices {speedup:.2f}× one")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
