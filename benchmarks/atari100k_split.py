"""Where one Atari 100k game-run's wall time goes: environment, acting, replay, augmentation,
updates and evaluation, each timed alone with the preset's own settings.

    python benchmarks/atari100k_split.py                              # drq_eps on Krull-v5
    python benchmarks/atari100k_split.py --preset der --game Boxing-v5
    python benchmarks/atari100k_split.py --run RUNS/drq_eps/Krull-v5/seed0   # its evaluations

In one process, with the preset as ``zoo bench atari100k`` runs it (its network, augmentation,
optimizer and schedule; the ``atari_100k`` protocol; ``--replay-capacity`` items, 100,000 by
default as the benchmark's runs set it), this times each piece of a host-path step alone
(:func:`throughput.piece_ms`: env step, act, insert, sample, update); the update on a fixed batch
with and without the preset's augmentation (``augmentation: null``), in alternation so that the
machine's drift falls on both: the difference is the augmentation's share, which runs inside the
compiled update; the evaluator's agent steps per second (``--eval-envs`` games at once, greedy
with the preset's evaluation ε); and this core's float32 matrix-product rate, against which the
update's floating-point work (XLA's own count) gives the least time its updates could take here.
It multiplies each piece by what one run does: ``--steps`` agent steps of env step, act and
insert, one sample and update per due update (98,400 for DrQ(ε): one per step after
``min_size``), and the evaluations' agent steps — read from ``--run``'s ``eval.jsonl`` where
given, else ``--eval-agent-steps``. Compile time and checkpoints are left out. Pin it as the runs
are pinned (``taskset -c 0`` with ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``). A benchmark,
not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from throughput import piece_ms

import zoo
from zoo.envs import evaluate, make
from zoo.learner import Learner
from zoo.runs.evaluate import make_policy_fn


def preset_spec(preset: str, overrides: dict[str, Any]) -> Any:
    """The algorithm spec of ``preset`` with ``overrides`` applied (as ``zoo bench`` builds it)."""
    return zoo.load_algorithm(zoo.spec.algorithm_for(zoo.load_preset(preset)), overrides=overrides)


def eval_rate(spec: Any, game: str, protocol: str, num_envs: int, vector_steps: int) -> float:
    """Agent steps per second of the evaluator's loop: ``num_envs`` games at once for
    ``vector_steps`` steps, with a freshly initialised network (acting costs the same), timed
    from its first step to its last (the environments' creation and reset, a few seconds per
    evaluation, left out)."""
    import jax

    with make(game, protocol=protocol, num_envs=1, seed=0) as env:
        shape, actions = env.observation_shape, env.num_actions
    net = zoo.build_network(
        spec, observation_shape=shape, num_actions=actions, key=jax.random.PRNGKey(0)
    )
    learner = Learner(spec)
    acting = learner.acting(learner.init(net, jax.random.PRNGKey(1)))
    policy = make_policy_fn(spec, actions)(acting, jax.random.PRNGKey(2))
    marks: list[tuple[float, int]] = []

    def progress(**kw: Any) -> None:
        marks.append((time.perf_counter(), kw["agent_steps"]))

    for _ in range(2):  # the first compiles the policy
        marks.clear()
        evaluate(
            policy,
            game,
            protocol,
            episodes=num_envs,
            seed=3,
            max_steps=vector_steps * num_envs,
            num_envs=num_envs,
            epsilon=spec.schedule.eval_epsilon,
            progress=progress,
        )
    (t0, steps0), (t1, steps1) = marks[1], marks[-1]
    return (steps1 - steps0) / (t1 - t0)


def fixed_batch(spec: Any, shape: tuple[int, ...], actions: int, seed: int = 0) -> Any:
    """One batch of ``spec``'s size of random frames of ``shape`` (uint8), actions, rewards,
    discount 0.99 and uniform probabilities: a fixed input on which to time an update."""
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(seed)
    size = spec.replay.batch_size
    frames = lambda: jnp.asarray(rng.integers(0, 256, (size, *shape)), jnp.uint8)  # noqa: E731
    return zoo.Transition(
        observation=frames(),
        action=jnp.asarray(rng.integers(0, actions, size), jnp.int32),
        reward=jnp.asarray(rng.normal(size=size), jnp.float32),
        discount=jnp.full((size,), 0.99, jnp.float32),
        next_observation=frames(),
        probability=jnp.ones((size,), jnp.float32),
    )


def augmentation_ms(
    spec: Any, bare: Any, shape: tuple[int, ...], actions: int, repeats: int
) -> dict:
    """The update of ``spec`` and of ``bare`` (the same without augmentation) on one fixed batch,
    timed in alternation (``repeats`` rounds of 10 calls each), so that the machine's drift falls
    on both: median ms per update of each."""
    import statistics

    import jax

    batch = fixed_batch(spec, shape, actions)
    compiled = {}
    for name, one in (("augmented", spec), ("bare", bare)):
        net = zoo.build_network(
            one, observation_shape=shape, num_actions=actions, key=jax.random.PRNGKey(0)
        )
        learner = Learner(one)
        state = learner.init(net, jax.random.PRNGKey(1))
        compiled[name] = [jax.jit(learner.update).lower(state, batch).compile(), state]
    cost = compiled["augmented"][0].cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    times: dict[str, list[float]] = {name: [] for name in compiled}
    for _ in range(repeats):
        for name, (update, state) in compiled.items():
            state, aux = update(state, batch)
            jax.block_until_ready(aux.metrics["loss"])
            t0 = time.perf_counter()
            for _ in range(10):
                state, aux = update(state, batch)
            jax.block_until_ready(aux.metrics["loss"])
            times[name].append((time.perf_counter() - t0) * 100.0)
            compiled[name][1] = state
    out = {name: statistics.median(ts) for name, ts in times.items()}
    return {**out, "gflop": float((cost or {}).get("flops", 0.0)) / 1e9}


def gemm_gflops(size: int = 1024, repeats: int = 5) -> float:
    """This core's float32 rate on a ``size``³ matrix product through XLA (GFLOP/s, best of
    ``repeats`` rounds of 10): what the update's convolutions and dense layers could reach."""
    import jax

    a = jax.random.normal(jax.random.PRNGKey(0), (size, size))
    dot = jax.jit(lambda x: x @ x)
    dot(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(10):
            out = dot(a)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - t0) / 10)
    return 2 * size**3 / best / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="drq_eps", help="an Atari 100k preset (drq_eps)")
    parser.add_argument("--game", default="Krull-v5", help="an envpool Atari id (Krull-v5)")
    parser.add_argument("--steps", type=int, default=100_000, help="agent steps of a run")
    parser.add_argument("--replay-capacity", type=int, default=100_000)
    parser.add_argument("--eval-envs", type=int, default=16, help="the runs' eval_envs (16)")
    parser.add_argument(
        "--eval-agent-steps",
        type=int,
        default=166_048,
        help="agent steps of a run's evaluations where --run is not given (default: Krull's "
        "100 games at 50,000 steps)",
    )
    parser.add_argument("--run", type=Path, help="a run directory: its evaluations' agent steps")
    parser.add_argument("--quick", action="store_true", help="fewer timed calls")
    parser.add_argument("--json-out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)

    preset = zoo.load_preset(args.preset)
    protocol = preset.env.protocol
    overrides = {"replay.capacity": args.replay_capacity}
    spec = preset_spec(args.preset, overrides)
    bare = preset_spec(args.preset, {**overrides, "augmentation": None})
    with make(args.game, protocol=protocol, num_envs=1, seed=0) as env:
        ms = piece_ms(spec, env, args.quick)
        shape, actions = env.observation_shape, env.num_actions
    ab = augmentation_ms(spec, bare, shape, actions, 3 if args.quick else 7)
    # the augmentation's share, from the alternating pair; the rest of the loop's update is the
    # update without it
    augmentation = max(ab["augmented"] - ab["bare"], 0.0)
    bare_ms = {"update": ms["update"] - augmentation}
    eval_steps_per_s = eval_rate(spec, args.game, protocol, args.eval_envs, 400)
    gemm = gemm_gflops()

    if args.run is not None:
        lines = (args.run / "eval.jsonl").read_text().splitlines()
        eval_agent_steps = sum(json.loads(line)["agent_steps"] for line in lines if line)
    else:
        eval_agent_steps = args.eval_agent_steps
    sched = spec.schedule
    updates = max(args.steps - spec.replay.min_size, 0) * sched.updates_per_period
    updates //= sched.update_period
    seconds = {
        "environment (env step)": args.steps * ms["env"] / 1000,
        "acting": args.steps * ms["act"] / 1000,
        "replay insert": args.steps * ms["insert"] / 1000,
        "replay sample": updates * ms["sample"] / 1000,
        "update without augmentation": updates * bare_ms["update"] / 1000,
        "augmentation (in the update)": updates * augmentation / 1000,
        "evaluation": eval_agent_steps / eval_steps_per_s,
    }
    total = sum(seconds.values())
    print(f"{args.preset} on {args.game}: {args.steps:,} agent steps, {updates:,} updates, "
          f"{eval_agent_steps:,} evaluation agent steps\n")  # fmt: skip
    print("| piece | ms per call | calls per run | hours per run | share |")
    print("| --- | ---: | ---: | ---: | ---: |")
    per_call = {
        "environment (env step)": (ms["env"], args.steps),
        "acting": (ms["act"], args.steps),
        "replay insert": (ms["insert"], args.steps),
        "replay sample": (ms["sample"], updates),
        "update without augmentation": (bare_ms["update"], updates),
        "augmentation (in the update)": (augmentation, updates),
        "evaluation": (1000 / eval_steps_per_s, eval_agent_steps),
    }
    for name, secs in seconds.items():
        call_ms, calls = per_call[name]
        print(f"| {name} | {call_ms:.2f} | {calls:,} | {secs / 3600:.2f} | {secs / total:.1%} |")
    print(f"| **the run** | | | **{total / 3600:.2f}** | 100% |")
    print(f"\nupdate alone on a fixed batch, in alternation: {ab['augmented']:.1f} ms with the "
          f"augmentation, {ab['bare']:.1f} ms without ({ab['augmented'] / ab['bare']:.3f}×); "
          f"evaluation {eval_steps_per_s:.0f} agent steps/s with {args.eval_envs} games at "
          "once")  # fmt: skip
    floor = updates * ab["gflop"] / gemm / 3600
    achieved = ab["gflop"] / ab["augmented"] * 1e3
    print(
        f"the update: {ab['gflop']:.2f} GFLOP (XLA's count), {achieved:.0f}"
        f" GFLOP/s; this core's float32 matrix product: {gemm:.0f} GFLOP/s, so {updates:,} updates"
        f" take at least {floor:.2f} h here even at that rate"
    )
    if args.json_out:
        figures = {
            "ms": ms,
            "alternating_update_ms": ab,
            "eval_agent_steps_per_s": eval_steps_per_s,
            "gemm_gflops": gemm,
        }
        args.json_out.write_text(json.dumps({**figures, "seconds": seconds}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
