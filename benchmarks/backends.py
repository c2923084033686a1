"""The environment backends side by side: throughput, and what each plays under one protocol.

    python benchmarks/backends.py                       # envpool and ALE on Breakout-v5
    python benchmarks/backends.py --envs 1 2 8 32 --seconds 5 --repeats 3
    python benchmarks/backends.py --games 100 --game Pong-v5
    python benchmarks/backends.py --game CartPole-v1 --protocol classic \
        --backends envpool gymnasium gymnax --games 0       # classic control, gymnax in-program

1. **Throughput**: env steps/s (and frames/s: × frame skip) of :func:`zoo.envs.make`'s host
   ``step`` with ``N`` environments and uniformly random actions, for each backend, the
   backends interleaved within each repeat so that both see the same machine; the median of the
   repeats is printed. This is what a run's environment side costs, zoo's own ``finish_timestep``
   included; the learner is not involved. For gymnax a further column times its step *inside
   the program* (a jitted ``lax.scan`` of 1,000 steps of :meth:`VectorEnv.xla`'s step, random
   actions drawn in the program), as the compiled driver runs it.
2. **Random play**: ``--games`` whole evaluation games (unclipped returns, the protocol's
   evaluation settings) of a uniformly random policy on each backend, seeded alike: mean
   return and length with their standard errors. The backends differ in the no-op starts'
   distribution and in the last frame of a game (``Protocol.backend_differences``), so equal
   means within a few standard errors is what parity at the protocol's settings looks like.

A benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

import zoo.envs as ze

#: The backends compared unless ``--backends`` says otherwise (the first is the ratio's base).
BACKENDS = ("envpool", "ale")


def steps_per_second(
    backend: str, game: str, protocol: str, num_envs: int, seconds: float, seed: int
) -> float:
    """Env steps/s (all environments) of random play for about ``seconds`` after a warm-up."""
    with ze.make(game, protocol=protocol, num_envs=num_envs, seed=seed, backend=backend) as env:
        rng = np.random.default_rng(seed)
        env.reset()
        for _ in range(20):  # warm-up: threads started, first frames decoded
            env.step(rng.integers(0, env.num_actions, num_envs).astype(np.int32))
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            env.step(rng.integers(0, env.num_actions, num_envs).astype(np.int32))
            steps += num_envs
        return steps / (time.perf_counter() - start)


def in_program_steps_per_second(
    game: str, protocol: str, num_envs: int, seconds: float, seed: int
) -> float:
    """gymnax: env steps/s of 1,000-step ``lax.scan`` programs of the XLA step, random actions."""
    import jax

    with ze.make(game, protocol=protocol, num_envs=num_envs, seed=seed, backend="gymnax") as env:
        env.reset()
        handle, _, _, step = env.xla()
        k = env.num_actions

        def body(carry, _):
            handle, key = carry
            key, sub = jax.random.split(key)
            actions = jax.random.randint(sub, (num_envs,), 0, k)
            handle, timestep = step(handle, actions)
            return (handle, key), timestep.reward

        run = jax.jit(lambda c: jax.lax.scan(body, c, None, length=1_000))
        carry = (handle, jax.random.PRNGKey(seed))
        carry, rewards = run(carry)  # compile
        rewards.block_until_ready()
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            carry, rewards = run(carry)
            rewards.block_until_ready()
            steps += 1_000 * num_envs
        return steps / (time.perf_counter() - start)


def random_games(backend: str, game: str, protocol: str, games: int, seed: int) -> dict:
    """``games`` evaluation games of a uniformly random policy (ε = 1)."""
    result = ze.evaluate(
        lambda obs: np.zeros(len(obs), np.int32),
        game,
        protocol,
        episodes=games,
        seed=seed,
        num_envs=min(games, 8),
        epsilon=1.0,
        backend=backend,  # type: ignore[arg-type]
    )
    returns, lengths = np.asarray(result["returns"]), np.asarray(result["lengths"])
    sem = lambda x: float(x.std(ddof=1) / math.sqrt(len(x)))  # noqa: E731
    return {
        "return": float(returns.mean()),
        "return_sem": sem(returns),
        "length": float(lengths.mean()),
        "length_sem": sem(lengths),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="Breakout-v5")
    parser.add_argument("--protocol", default="nature_2015")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS))
    parser.add_argument("--envs", type=int, nargs="*", default=[1, 2, 8, 32], help="none: skip")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--games", type=int, default=50, help="random-play games per backend")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    backends, base = tuple(args.backends), args.backends[0]
    skip = ze.get_protocol(args.protocol).frame_skip
    program = "gymnax" in backends

    if args.envs:
        print(f"## Throughput: {args.game}, {args.protocol}, random actions, host step")
        print(f"median of {args.repeats} repeats of {args.seconds:g} s, backends interleaved\n")
        unit = "steps/s (frames/s)" if skip > 1 else "steps/s"
        columns = [f"{b} {unit}" for b in backends] + (["gymnax in-program"] if program else [])
        ratios = [f"{b} / {base}" for b in backends[1:]]
        print("| envs | " + " | ".join(columns + ratios) + " |")
        print("|---:|" + "---:|" * (len(columns) + len(ratios)))
    for n in args.envs:
        rates: dict[str, list[float]] = {b: [] for b in columns}
        for repeat in range(args.repeats):
            order = backends if repeat % 2 == 0 else backends[::-1]
            for backend in order:
                rates[f"{backend} {unit}"].append(
                    steps_per_second(backend, args.game, args.protocol, n, args.seconds, args.seed)
                )
            if program:
                rate = in_program_steps_per_second(
                    args.game, args.protocol, n, args.seconds, args.seed
                )
                rates["gymnax in-program"].append(rate)
        median = {c: statistics.median(r) for c, r in rates.items()}
        cells = [
            f"{median[c]:,.0f}" + (f" ({median[c] * skip:,.0f})" if skip > 1 else "")
            for c in columns
        ]
        cells += [f"{median[f'{b} {unit}'] / median[f'{base} {unit}']:.2f}" for b in backends[1:]]
        print(f"| {n} | " + " | ".join(cells) + " |")

    if args.games:
        print(f"\n## Random play: {args.games} evaluation games per backend, seed {args.seed}\n")
        print("| backend | mean return ± s.e. | mean length ± s.e. (agent steps) |")
        print("|---|---:|---:|")
        for backend in backends:
            r = random_games(backend, args.game, args.protocol, args.games, args.seed)
            print(
                f"| {backend} | {r['return']:.2f} ± {r['return_sem']:.2f} | "
                f"{r['length']:.1f} ± {r['length_sem']:.1f} |"
            )


if __name__ == "__main__":
    main()
