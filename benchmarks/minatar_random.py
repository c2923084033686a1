"""Random play on the five MinAtar games under zoo's ``minatar`` protocol: the anchors of the
``minatar`` suite's normalisation (``zoo/bench/data/minatar_random.csv``).

Each game is made as zoo makes it (``gymnasium.make`` with the protocol's
``gymnasium_kwargs``: sticky actions 0.1, all 6 actions, no episode cap) and played for GAMES whole
games by a policy that picks each action uniformly at random (``numpy.random.default_rng(SEED)``;
the environment is seeded with SEED at its first reset). Prints the CSV rows (mean and sample
standard deviation of the game returns, games, mean game length)::

    python benchmarks/minatar_random.py --games 5000 --seed 0
"""

from __future__ import annotations

import argparse

import numpy as np

GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")


def random_returns(env_id: str, games: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Returns and lengths of ``games`` games of uniform random play on ``env_id``."""
    import gymnasium

    from zoo.envs import get_protocol, resolve_env

    resolve_env(env_id)  # registers MinAtar's gymnasium ids
    env = gymnasium.make(env_id, **get_protocol("minatar").gymnasium_kwargs(training=False))
    rng = np.random.default_rng(seed)
    returns, lengths = np.zeros(games), np.zeros(games, np.int64)
    env.reset(seed=seed)
    for game in range(games):
        if game:
            env.reset()
        done = False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            returns[game] += reward
            lengths[game] += 1
            done = terminated or truncated
    env.close()
    return returns, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("env,random_mean,random_std,games,mean_length")
    for game in GAMES:
        env_id = f"MinAtar/{game}-v1"
        returns, lengths = random_returns(env_id, args.games, args.seed)
        print(
            f"{env_id},{returns.mean():.4f},{returns.std(ddof=1):.4f},{args.games},"
            f"{lengths.mean():.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
