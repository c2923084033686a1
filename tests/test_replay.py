"""Replay invariants: n-step windows, priorities, ring wrap, frame stacks (against zoo.envs),
sequences, jit/scan, memory.

Every sampled item is checked against an independent Python model of the stream: the histories
are kept in lists and items are recomputed from the formulas of docs/design.md ("n-step
transitions"), not from the replay's code.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo import registry
from zoo.replay import PRIORITY_FLOOR, ReplayKind, StepBatch, build_replay, proportional_sample

pytestmark = pytest.mark.compiled

# --------------------------------------------------------------------------- helpers


def ff_spec(capacity: int, *, n: int = 1, gamma: float = 0.99, kind: str = "uniform", alpha=0.6):
    """A feed-forward spec with the replay fields the tests vary."""
    return zoo.load_algorithm(
        "dqn",
        overrides={
            "replay.kind": kind,
            "replay.capacity": capacity,
            "replay.min_size": 1,
            "replay.batch_size": 1,
            "replay.priority_exponent": alpha,
            "loss.n_step": n,
            "loss.discount": gamma,
            "loss.reward_clip": None,
            "loss.importance_exponent": 0.5 if kind == "prioritized" else 0.0,
        },
    )


def seq_spec(capacity: int, *, burn_in=2, trace=4, period=3, stored_state=True, kind="prioritized"):
    """A recurrent (R2D2) spec with small sequences."""
    return zoo.load_algorithm(
        "r2d2",
        overrides={
            "replay.kind": kind,
            "replay.capacity": capacity,
            "replay.min_size": 1,
            "replay.batch_size": 1,
            "replay.sequence": {
                "burn_in": burn_in,
                "trace_length": trace,
                "period": period,
                "stored_state": stored_state,
            },
            "loss.n_step": 2,
            "loss.importance_exponent": 0.6 if kind == "prioritized" else 0.0,
        },
    )


@dataclass
class Stream:
    """The Python-side history of one env, slot by slot (slot = global vector step)."""

    obs: list[np.ndarray] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    first: list[bool] = field(default_factory=list)
    valid: list[bool] = field(default_factory=list)


def random_streams(
    rng: np.random.Generator, num_envs: int, steps: int, frame_shape=(2,), p_end: float = 0.12
) -> list[Stream]:
    """Streams with the envpool protocol: terminals, truncations, life losses, pseudo-steps.

    Frames encode (env, t). Pseudo-steps carry a garbage reward (99) and action (7) that must
    never reach a target.
    """
    streams = []
    for e in range(num_envs):
        s, pending = Stream(), None
        for t in range(steps):
            frame = np.zeros(frame_shape, np.float32)
            frame.reshape(-1)[:2] = (e, t)
            s.obs.append(frame)
            if t > 0 and pending is not None:  # the auto-reset pseudo-step
                s.first.append(False)
                s.valid.append(False)
                s.action.append(7)
                s.reward.append(99.0)
                s.terminated.append(False)
                s.truncated.append(False)
                next_first, pending = pending == "game_over", None
                continue
            s.first.append(t == 0 or (t > 0 and s.valid[-1] is False and next_first))
            s.valid.append(True)
            s.action.append(int(rng.integers(0, 4)))
            s.reward.append(float(rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0])))
            end = rng.random() < p_end
            term = end and rng.random() < 0.7
            trunc = end and not term
            s.terminated.append(bool(term))
            s.truncated.append(bool(trunc))
            if end:
                pending = "life_loss" if term and rng.random() < 0.4 else "game_over"
        streams.append(s)
    return streams


def step_batch(streams: list[Stream], t: int, stack: int = 1, core_state=None) -> StepBatch:
    """The StepBatch of vector step t (observations stacked as the actor saw them)."""
    if stack > 1:
        obs = np.stack([ref_stack(s, t, stack) for s in streams])
    else:
        obs = np.stack([s.obs[t] for s in streams])
    return StepBatch(
        observation=jnp.asarray(obs),
        action=jnp.asarray([s.action[t] for s in streams], jnp.int32),
        reward=jnp.asarray([s.reward[t] for s in streams], jnp.float32),
        terminated=jnp.asarray([s.terminated[t] for s in streams]),
        truncated=jnp.asarray([s.truncated[t] for s in streams]),
        first=jnp.asarray([s.first[t] for s in streams]),
        valid=jnp.asarray([s.valid[t] for s in streams]),
        core_state=core_state,
    )


def ref_stack(s: Stream, t: int, stack: int) -> np.ndarray:
    """What the actor's stack holds at t (zoo.envs): zeros at an episode's start, then shifted."""
    start = max(u for u in range(t + 1) if s.first[u])
    frames = deque([np.zeros_like(s.obs[t])] * stack, maxlen=stack)
    for u in range(max(start, t - stack + 1), t + 1):
        frames.append(s.obs[u])
    return np.stack(frames)


def ref_window(s: Stream, t: int, n: int, gamma: float) -> tuple[float, float, int]:
    """docs/design.md's n-step reward and discount of the window starting at t, and its length k."""
    ends = [u for u in range(t, t + n) if s.terminated[u] or s.truncated[u]]
    k = min(n, ends[0] - t + 1) if ends else n
    d = [1.0 - float(s.terminated[t + i]) for i in range(k)]
    reward = sum(gamma**j * math.prod(d[:j]) * s.reward[t + j] for j in range(k))
    discount = gamma ** (k - 1) * math.prod(d)
    return reward, discount, k


def ref_eligible(s: Stream, steps: int, capacity: int, stack: int, after: int, period: int = 1):
    """Global start times of eligible items (slots [t-stack+1, t+after] in the ring, t valid)."""
    oldest = max(0, steps - capacity)
    return {
        t
        for t in range(0, steps, period)
        if s.valid[t] and t - stack + 1 >= oldest and t + after <= steps - 1
    }


def global_time(index: int, items_per_env: int, period: int, capacity: int, steps: int):
    """(env, global start time) of a flat item index, given T = steps added."""
    env, slot = divmod(int(index), items_per_env)
    slot *= period
    return env, steps - 1 - (steps - 1 - slot) % capacity


def jitted(replay) -> SimpleNamespace:
    """The replay's functions jitted once per replay (donating the state, as a host loop does)."""
    if not hasattr(replay, "_test_jitted"):
        replay._test_jitted = SimpleNamespace(
            add=jax.jit(replay.add, donate_argnums=0),
            sample=jax.jit(replay.sample, static_argnums=2),
            update=jax.jit(replay.update_priorities, donate_argnums=0),
        )
    return replay._test_jitted


def fill(replay, streams, steps, stack=1, core_fn=None):
    add = jitted(replay).add
    state = replay.init()
    for t in range(steps):
        core = None if core_fn is None else core_fn(t)
        state = add(state, step_batch(streams, t, stack, core))
    return state


# --------------------------------------------------------------------------- n-step windows


@pytest.mark.parametrize(("n", "gamma"), [(1, 0.9), (3, 0.9), (3, 1.0)])
def test_n_step_windows_match_direct_computation(n, gamma):
    num_envs, steps, stack = 2, 60, 1
    streams = random_streams(np.random.default_rng(n), num_envs, steps)
    assert any(s.truncated[t] for s in streams for t in range(steps - n))
    assert any(s.terminated[t] for s in streams for t in range(steps - n))
    replay = build_replay(
        ff_spec(2 * 64, n=n, gamma=gamma),
        num_envs=num_envs,
        observation_shape=(2,),
        observation_dtype=jnp.float32,
    )
    state = fill(replay, streams, steps)
    expected = {
        (e, t)
        for e, s in enumerate(streams)
        for t in ref_eligible(s, steps, replay.capacity_per_env, stack, n)
    }
    assert int(replay.size(state)) == len(expected)
    batch, info = jax.jit(replay.sample, static_argnums=2)(state, jax.random.key(0), 4000)
    batch, info = jax.tree.map(np.asarray, (batch, info))
    seen = set()
    for i in range(4000):
        e, t = int(batch.observation[i, 0]), int(batch.observation[i, 1])
        assert global_time(info.indices[i], replay.items_per_env, 1, 64, steps) == (e, t)
        s = streams[e]
        assert s.valid[t], "a pseudo-step started a transition"
        reward, discount, k = ref_window(s, t, n, gamma)
        assert batch.action[i] == s.action[t]
        np.testing.assert_allclose(batch.reward[i], reward, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(batch.discount[i], discount, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(batch.next_observation[i], s.obs[t + k])
        seen.add((e, t))
    assert seen == expected  # exhaustive: every valid window, nothing else
    np.testing.assert_allclose(batch.probability, 1.0 / len(expected), rtol=1e-6)
    np.testing.assert_array_equal(batch.mask, 1.0)


@pytest.mark.parametrize(("n", "future", "stack"), [(1, 5, 1), (10, 5, 1), (3, 4, 3)])
def test_transitions_carry_the_steps_after_them(n, future, stack):
    """With ``future = K`` (SPR's latent rollout, K = 5 in SPR and BBF): every sampled item
    carries o_{t+1} … o_{t+K} (stacked as the actor saw them), a_t … a_{t+K−1}, and a mask that
    is 1 while no step from t on has ended the episode — against the streams by hand; items need
    max(n, K) written slots after them."""
    num_envs, steps = 2, 80
    streams = random_streams(np.random.default_rng(7), num_envs, steps)
    replay = build_replay(
        ff_spec(2 * 64, n=n, gamma=0.9),
        num_envs=num_envs,
        observation_shape=(stack, 2) if stack > 1 else (2,),
        observation_dtype=jnp.float32,
        stack=stack,
        future=future,
    )
    assert replay.after == max(n, future)
    state = fill(replay, streams, steps, stack)
    expected = {
        (e, t)
        for e, s in enumerate(streams)
        for t in ref_eligible(s, steps, replay.capacity_per_env, stack, max(n, future))
    }
    assert int(replay.size(state)) == len(expected)
    batch, info = jitted(replay).sample(state, jax.random.key(3), 3000)
    batch, info = jax.tree.map(np.asarray, (batch, info))
    ahead = batch.future
    assert ahead.observation.shape[:2] == (3000, future) and ahead.action.shape == (3000, future)
    masked = 0
    for i in range(3000):
        e, t = global_time(info.indices[i], replay.items_per_env, 1, 64, steps)
        s = streams[e]
        ends = [u for u in range(t, t + future) if s.terminated[u] or s.truncated[u]]
        for k in range(1, future + 1):
            inside = not ends or ends[0] >= t + k  # no step t … t+k−1 ended the episode
            assert ahead.mask[i, k - 1] == float(inside), (e, t, k)
            assert ahead.action[i, k - 1] == s.action[t + k - 1]
            if inside:
                want = ref_stack(s, t + k, stack) if stack > 1 else s.obs[t + k]
                np.testing.assert_array_equal(ahead.observation[i, k - 1], want)
            masked += not inside
    assert masked > 0  # episode ends fell inside some items' futures
    # a replay without futures carries none
    plain = build_replay(
        ff_spec(2 * 64, n=n, gamma=0.9),
        num_envs=num_envs,
        observation_shape=(2,),
        observation_dtype=jnp.float32,
    )
    batch, _ = jitted(plain).sample(fill(plain, streams, steps), jax.random.key(3), 8)
    assert batch.future is None


def test_window_ending_early_at_terminal_and_truncation():
    """Hand-built: a terminal and a truncation inside 3-step windows, γ = 0.5."""
    s = Stream()
    # t:        0     1     2      3(pseudo) 4(first) 5     6      7(pseudo) 8     9     10
    rewards = [1.0, 2.0, 4.0, 99.0, 1.0, 1.0, 8.0, 99.0, 1.0, 1.0, 1.0]
    term = [False, False, True, False, False, False, False, False, False, False, False]
    trunc = [False, False, False, False, False, False, True, False, False, False, False]
    valid = [True, True, True, False, True, True, True, False, True, True, True]
    first = [True, False, False, False, True, False, False, False, True, False, False]
    for t in range(11):
        s.obs.append(np.array([0, t], np.float32))
        s.action.append(t)
        s.reward.append(rewards[t])
        s.terminated.append(term[t])
        s.truncated.append(trunc[t])
        s.first.append(first[t])
        s.valid.append(valid[t])
    replay = build_replay(
        ff_spec(16, n=3, gamma=0.5),
        num_envs=1,
        observation_shape=(2,),
        observation_dtype=jnp.float32,
    )
    state = fill(replay, [s], 11)
    batch, _ = jitted(replay).sample(state, jax.random.key(1), 2000)
    got = {
        int(o[1]): (float(r), float(d), int(no[1]))
        for o, r, d, no in zip(
            batch.observation, batch.reward, batch.discount, batch.next_observation, strict=True
        )
    }
    assert got == {
        0: (1 + 0.5 * 2 + 0.25 * 4, 0.0, 3),  # full window ending on the terminal
        1: (2 + 0.5 * 4, 0.0, 3),  # ends early (k = 2) at the terminal
        2: (4.0, 0.0, 3),  # the terminal itself, k = 1
        4: (1 + 0.5 * 1 + 0.25 * 8, 0.25, 7),  # truncation: bootstrap from the final obs
        5: (1 + 0.5 * 8, 0.5, 7),
        6: (8.0, 1.0, 7),
        # 3 and 7 are pseudo-steps; 8+ lack the 3 following slots
    }


# --------------------------------------------------------------------------- priorities


def _chi_square_ok(counts: np.ndarray, probs: np.ndarray, significance: float = 1e-3) -> bool:
    """Pearson's χ² goodness of fit at the given significance level.

    Bins expected to hold fewer than 5 draws are pooled into one, as the test requires.
    """
    expected = probs * counts.sum()
    small = expected < 5
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    stat = float(np.sum((counts - expected) ** 2 / expected))
    dof = len(counts) - 1
    try:
        from scipy.stats import chi2

        critical = float(chi2.ppf(1 - significance, dof))
    except ImportError:  # Wilson–Hilferty, z(0.999) = 3.0902
        critical = dof * (1 - 2 / (9 * dof) + 3.0902 * math.sqrt(2 / (9 * dof))) ** 3
    return stat < critical


def test_prioritized_sampling_follows_priorities():
    alpha, steps = 0.6, 41
    streams = random_streams(np.random.default_rng(0), 1, steps, p_end=0.0)
    replay = build_replay(
        ff_spec(64, kind="prioritized", alpha=alpha),
        num_envs=1,
        observation_shape=(2,),
        observation_dtype=jnp.float32,
    )
    state = fill(replay, streams, steps)
    items = np.arange(steps - 1)  # n = 1: slots 0..39 are eligible
    assert int(replay.size(state)) == len(items)
    fns, draws = jitted(replay), 20_000  # one batch size: one compilation
    # new items enter at the max priority seen so far, initially 1: uniform
    batch, info = fns.sample(state, jax.random.key(0), draws)
    np.testing.assert_allclose(info.probability, 1 / len(items), rtol=1e-6)

    priorities = 0.05 + (items % 7) * 0.4 + (items == 3) * 3.0
    state = fns.update(state, jnp.asarray(items, jnp.int32), jnp.asarray(priorities, jnp.float32))
    target = priorities**alpha / np.sum(priorities**alpha)
    batch, info = fns.sample(state, jax.random.key(1), draws)
    counts = np.bincount(np.asarray(info.indices), minlength=len(items))
    assert counts.shape == (len(items),)  # nothing ineligible drawn
    assert _chi_square_ok(counts, target)  # significance 0.1%
    np.testing.assert_allclose(info.probability, target[np.asarray(info.indices)], rtol=1e-5)
    np.testing.assert_allclose(batch.probability, info.probability)
    assert not _chi_square_ok(counts, np.full(len(items), 1 / len(items)))

    # update_priorities changes the distribution
    priorities[3], priorities[10] = 1e-9, 20.0  # 1e-9 is raised to PRIORITY_FLOOR
    state = fns.update(state, jnp.asarray([3, 10], jnp.int32), jnp.asarray([1e-9, 20.0]))
    clipped = np.maximum(priorities, PRIORITY_FLOOR)
    target2 = clipped**alpha / np.sum(clipped**alpha)
    batch, info = fns.sample(state, jax.random.key(2), draws)
    counts2 = np.bincount(np.asarray(info.indices), minlength=len(items))
    assert _chi_square_ok(counts2, target2)
    assert not _chi_square_ok(counts2, target)
    np.testing.assert_allclose(info.probability, target2[np.asarray(info.indices)], rtol=1e-5)
    assert float(state.max_priority) == pytest.approx(20.0)

    # a new item enters at the max priority seen so far (20): slot 40 was added when the max was
    # 1; add slot 41 (valid) and 42 (a pseudo-step) so that both become eligible
    for valid in (True, False):
        state = fns.add(state, step_batch(streams, 0)._replace(valid=jnp.asarray([valid])))
    weights = np.concatenate([clipped**alpha, [1.0, 20.0**alpha]])
    _, info = fns.sample(state, jax.random.key(3), draws)
    assert int(replay.size(state)) == 42
    hit = np.asarray(info.indices) == 41
    assert hit.any() and np.asarray(info.indices).max() == 41
    np.testing.assert_allclose(
        np.asarray(info.probability)[hit], 20.0**alpha / weights.sum(), rtol=1e-5
    )
    # non-finite priorities do not poison the replay
    state = fns.update(state, jnp.asarray([0, 1]), jnp.asarray([jnp.nan, jnp.inf]))
    assert np.all(np.isfinite(np.asarray(state.weight)))
    _, info = fns.sample(state, jax.random.key(4), draws)
    assert np.all(np.isfinite(np.asarray(info.probability)))


def rank_rule(alpha: float):
    """Rank-based prioritisation (Schaul et al. 2016, the paper's second variant), written for
    the test: ``P(i) ∝ rank(i)^-α`` with rank 1 the highest-priority eligible item."""

    def sample(key, weights, batch_size):
        eligible = weights > 0
        order = jnp.argsort(jnp.where(eligible, -weights, jnp.inf))  # eligible, descending
        rank = (
            jnp.zeros(weights.shape, jnp.int32)
            .at[order]
            .set(jnp.arange(1, weights.size + 1, dtype=jnp.int32))
        )
        return proportional_sample(key, jnp.where(eligible, rank ** (-alpha), 0.0), batch_size)

    return sample


@pytest.fixture
def rank_based_kind():
    """A replay kind registered by user code for one test, removed afterwards."""

    @registry.register("replay", "test_rank_based")
    def rank_based(config) -> ReplayKind:
        """Rank-based prioritised sampling (Schaul et al. 2016)."""
        return ReplayKind(prioritized=True, sample=rank_rule(config.priority_exponent))

    yield "test_rank_based"
    registry.unregister("replay", "test_rank_based")


def test_a_user_replay_kind_is_one_registration(rank_based_kind):
    """A registered kind validates in the spec, draws by its own rule, and makes the loss return
    priorities; unknown kinds are refused with the known ones listed."""
    alpha, steps = 0.7, 41
    overrides = {
        "replay.kind": rank_based_kind,
        "replay.capacity": 64,
        "replay.min_size": 1,
        "replay.batch_size": 1,
        "replay.priority_exponent": alpha,
        "loss.n_step": 1,
        "loss.reward_clip": None,
        "loss.importance_exponent": 0.5,  # refused for a kind that does not sample by priority
    }
    spec = zoo.load_algorithm("dqn", overrides=overrides)
    assert spec.replay.kind == rank_based_kind and zoo.build_loss(spec).prioritized
    replay = build_replay(spec, num_envs=1, observation_shape=(2,), observation_dtype=jnp.float32)
    assert replay.prioritized
    state = fill(replay, random_streams(np.random.default_rng(0), 1, steps, p_end=0.0), steps)
    items = np.arange(steps - 1)
    priorities = 0.05 + (items % 7) * 0.4 + (items == 3) * 3.0 + items * 1e-3  # no ties
    fns, draws = jitted(replay), 20_000
    state = fns.update(state, jnp.asarray(items, jnp.int32), jnp.asarray(priorities, jnp.float32))
    rank = np.empty(len(items))
    rank[np.argsort(-priorities)] = np.arange(1, len(items) + 1)
    target = rank**-alpha / np.sum(rank**-alpha)
    _, info = fns.sample(state, jax.random.key(1), draws)
    counts = np.bincount(np.asarray(info.indices), minlength=len(items))
    assert counts.shape == (len(items),)  # nothing ineligible drawn
    assert _chi_square_ok(counts, target)
    np.testing.assert_allclose(info.probability, target[np.asarray(info.indices)], rtol=1e-5)
    proportional = priorities**alpha / np.sum(priorities**alpha)
    assert not _chi_square_ok(counts, proportional)  # not the built-in rule

    with pytest.raises(zoo.SpecError, match=r"unknown replay kind 'prioritised'.*'prioritized'"):
        zoo.load_algorithm("dqn", overrides={**overrides, "replay.kind": "prioritised"})
    with pytest.raises(zoo.SpecError, match="importance weights correct prioritised sampling"):
        zoo.load_algorithm("dqn", overrides={**overrides, "replay.kind": "uniform"})


def test_uniform_update_priorities_is_a_no_op():
    replay = build_replay(
        ff_spec(8), num_envs=1, observation_shape=(2,), observation_dtype=jnp.float32
    )
    state = replay.init()
    assert state.weight is None
    assert replay.update_priorities(state, jnp.zeros(2, jnp.int32), jnp.ones(2)) is state


# --------------------------------------------------------------------------- ring wrap


def test_ring_wrap_old_items_gone_and_no_window_crosses_the_cursor():
    n, stack, num_envs, steps, cap = 3, 3, 2, 70, 16
    streams = random_streams(np.random.default_rng(5), num_envs, steps, frame_shape=(2, 2))
    replay = build_replay(
        ff_spec(num_envs * cap, n=n, gamma=0.9),
        num_envs=num_envs,
        observation_shape=(stack, 2, 2),
        observation_dtype=jnp.float32,
        stack=stack,
    )
    state = fill(replay, streams, steps, stack=stack)
    assert int(state.cursor) == steps
    batch, info = jitted(replay).sample(state, jax.random.key(0), 3000)
    batch, info = jax.tree.map(np.asarray, (batch, info))
    expected = {
        (e, t) for e, s in enumerate(streams) for t in ref_eligible(s, steps, cap, stack, n)
    }
    assert int(replay.size(state)) == len(expected)
    seen = set()
    for i in range(3000):
        e, t = global_time(info.indices[i], cap, 1, cap, steps)
        s = streams[e]
        assert steps - cap + stack - 1 <= t <= steps - 1 - n  # old items gone, cursor respected
        np.testing.assert_array_equal(batch.observation[i], ref_stack(s, t, stack))
        reward, discount, k = ref_window(s, t, n, 0.9)
        np.testing.assert_array_equal(batch.next_observation[i], ref_stack(s, t + k, stack))
        np.testing.assert_allclose(batch.reward[i], reward, rtol=1e-6)
        np.testing.assert_allclose(batch.discount[i], discount, rtol=1e-6)
        seen.add((e, t))
    assert seen == expected


def test_capacity_too_small_is_a_clear_error():
    with pytest.raises(ValueError, match="n_step \\+ stack"):
        build_replay(
            ff_spec(2 * 6, n=3),
            num_envs=2,
            observation_shape=(4, 8, 8),
            observation_dtype=jnp.uint8,
            stack=4,
        )
    with pytest.raises(ValueError, match="sequences of length 7"):
        build_replay(
            seq_spec(8),
            num_envs=1,
            observation_shape=(2,),
            observation_dtype=jnp.float32,
            core_state=jnp.zeros(3),
        )
    with pytest.raises(ValueError, match="core_state"):
        build_replay(
            seq_spec(60), num_envs=1, observation_shape=(2,), observation_dtype=jnp.float32
        )
    with pytest.raises(ValueError, match="stacked shape"):
        build_replay(
            ff_spec(64),
            num_envs=1,
            observation_shape=(84, 84),
            observation_dtype=jnp.uint8,
            stack=4,
        )


# --------------------------------------------------------------------------- frame stacks


@pytest.mark.parametrize(
    ("game", "protocol", "kwargs"),
    [
        ("Pong-v5", "nature_2015", {"max_episode_steps": 90}),  # truncations (a game: ~900 steps)
        ("Breakout-v5", "nature_2015", {}),  # lost lives (the stack goes on) and game overs
        ("Breakout-v5", "atari_100k", {}),  # lost lives restart the stack
    ],
)
def test_frame_stacks_match_the_env_and_never_cross_an_episode_start(game, protocol, kwargs):
    """Stacks rebuilt from one stored frame per slot equal what the environment returned
    (zoo.envs over envpool: zero-padded at each episode start)."""
    from zoo.envs import make

    num_envs, steps, cap, stack, n = 2, 300, 200, 4, 3
    env = make(game, protocol=protocol, num_envs=num_envs, seed=3, env_kwargs=kwargs)
    assert env.observation_shape == (stack, 84, 84)
    replay = build_replay(
        ff_spec(num_envs * cap, n=n, gamma=0.99),
        num_envs=num_envs,
        observation_shape=(stack, 84, 84),
        observation_dtype=jnp.uint8,
        stack=stack,
    )
    add = jax.jit(replay.add, donate_argnums=0)
    rebuild = jax.jit(replay.observation)
    state = replay.init()
    rng = np.random.default_rng(0)
    ts = env.reset()
    obs, first = ts.observation, ts.first
    valid = np.ones(num_envs, bool)
    history: list[np.ndarray] = []
    firsts, ended, lives_lost = [], [], 0
    for t in range(steps):
        action = rng.integers(0, env.num_actions, num_envs)
        ts = env.step(action)
        state = add(
            state, StepBatch(obs, action, ts.reward, ts.terminated, ts.truncated, first, valid)
        )
        history.append(obs)
        firsts.append(first)
        ended.append(ts.terminated | ts.truncated)
        lives_lost += int(np.sum(ts.terminated & ~ts.game_over))
        valid = ~ts.game_over
        first = ts.first
        obs = ts.observation
        if t == 149:  # before the ring wraps: every slot, from the very first
            slots = np.arange(t + 1)
            for e in range(num_envs):
                got = np.asarray(rebuild(state, jnp.full_like(slots, e), slots))
                np.testing.assert_array_equal(got, np.stack(history)[:, e])
    env.close()
    firsts = np.stack(firsts)
    assert firsts[1:].any(), "no game started mid-run: the test would not test the boundary"
    if game == "Breakout-v5":
        assert lives_lost > 0
    # after the wrap: every slot whose stack context is still in the ring
    times = np.arange(steps - cap + stack - 1, steps)
    for e in range(num_envs):
        got = np.asarray(rebuild(state, jnp.full_like(times, e), jnp.asarray(times % cap)))
        np.testing.assert_array_equal(got, np.stack(history)[times, e])
    # and the sampled transitions: observation and next observation as the env returned them
    batch, info = jax.tree.map(np.asarray, jitted(replay).sample(state, jax.random.key(0), 256))
    for i in range(256):
        e, t = global_time(info.indices[i], cap, 1, cap, steps)
        np.testing.assert_array_equal(batch.observation[i], history[t][e])
        end = [j for j in range(n) if ended[t + j][e]]
        k = end[0] + 1 if end else n
        np.testing.assert_array_equal(batch.next_observation[i], history[t + k][e])


# --------------------------------------------------------------------------- sequences


def _sequence_stream() -> list[Stream]:
    """Env 0: game over at 10, life loss at 20, truncation at 27; env 1: one long game."""
    streams = []
    for e in range(2):
        s = Stream()
        for t in range(40):
            s.obs.append(np.array([e, t], np.float32))
            pseudo = e == 0 and t in (11, 21, 28)
            s.action.append(7 if pseudo else t % 5)
            s.reward.append(99.0 if pseudo else float(t))
            s.terminated.append(e == 0 and t in (10, 20))
            s.truncated.append(e == 0 and t == 27)
            s.first.append(t == 0 or (e == 0 and t in (12, 29)))
            s.valid.append(not pseudo)
        streams.append(s)
    return streams


def _core(t: int):
    """Core states encoding (env, t): a tuple of leaves with leading axis N."""
    base = np.array([[0.0], [1000.0]], np.float32) + t
    return (jnp.asarray(np.repeat(base, 3, 1)), jnp.asarray(-np.repeat(base, 2, 1)))


def test_sequences_slicing_state_and_episode_padding():
    burn_in, trace, period, cap, steps = 2, 4, 3, 30, 36  # wraps: slots before t = 6 are gone
    length = burn_in + trace + 1
    streams = _sequence_stream()
    replay = build_replay(
        seq_spec(2 * cap, burn_in=burn_in, trace=trace, period=period),
        num_envs=2,
        observation_shape=(2,),
        observation_dtype=jnp.float32,
        core_state=(jnp.zeros(3), jnp.zeros(2)),
    )
    assert replay.capacity_per_env == cap and replay.items_per_env == cap // period
    state = fill(replay, streams, steps, core_fn=_core)
    expected = {
        (e, t)
        for e, s in enumerate(streams)
        for t in ref_eligible(s, steps, cap, 1, length - 1, period)
    }
    assert int(replay.size(state)) == len(expected)
    batch, info = jax.jit(replay.sample, static_argnums=2)(state, jax.random.key(0), 2000)
    assert batch.observation.shape == (2000, length, 2)  # burn-in + trace + 1 steps
    batch, info = jax.tree.map(np.asarray, (batch, info))
    items: dict[tuple[int, int], int] = {}
    for i in range(2000):
        e, t = global_time(info.indices[i], replay.items_per_env, period, cap, steps)
        assert t % period == 0
        items.setdefault((e, t), i)
        # stored core state: the actor's state at the item's first slot
        np.testing.assert_array_equal(batch.core_state[0][i], 1000.0 * e + t)
        np.testing.assert_array_equal(batch.core_state[1][i], -(1000.0 * e + t))
        s = streams[e]
        new_game = False
        for m in range(length):
            u = t + m
            new_game = new_game or (m > 0 and s.first[u])
            live = s.valid[u] and not new_game
            assert batch.mask[i, m] == float(live)
            assert batch.reward[i, m] == (s.reward[u] if live else 0.0)
            assert batch.discount[i, m] == (1.0 - s.terminated[u] if live else 0.0)
            assert batch.action[i, m] == (s.action[u] if live else 0)
            np.testing.assert_array_equal(batch.observation[i, m], 0 if new_game else s.obs[u])
    assert set(items) == expected

    def row(t: int, field_name: str):
        return getattr(batch, field_name)[items[(0, t)]].tolist()

    # game over at 10: the pseudo-step 11 keeps the final observation, the new game is padding
    assert row(6, "mask") == [1, 1, 1, 1, 1, 0, 0]
    assert row(6, "discount") == [1, 1, 1, 1, 0, 0, 0]
    assert row(6, "observation")[5] == [0, 11] and row(6, "observation")[6] == [0, 0]
    # life loss at 20: only the pseudo-step 21 is masked, the game (and the LSTM) goes on
    assert row(18, "mask") == [1, 1, 1, 0, 1, 1, 1]
    assert row(18, "discount") == [1, 1, 0, 0, 1, 1, 1]
    assert row(18, "reward") == [18, 19, 20, 0, 22, 23, 24]
    # truncation at 27: discount 1 at the truncated step, pseudo-step 28 and the new game masked
    assert row(24, "mask") == [1, 1, 1, 1, 0, 0, 0]
    assert row(24, "discount") == [1, 1, 1, 1, 0, 0, 0]
    assert row(24, "observation")[4] == [0, 28]
    # env 1 has no episode end: every step live
    assert batch.mask[items[(1, 21)]].tolist() == [1] * length

    # priorities are per sequence item
    target = replay.items_per_env + 21 // period  # env 1, item at t = 21
    state = jitted(replay).update(state, jnp.asarray([target]), jnp.asarray([1e4]))
    _, info = jitted(replay).sample(state, jax.random.key(1), 200)
    assert np.mean(np.asarray(info.indices) == target) > 0.9


def test_sequences_without_stored_state_and_with_frame_stacks():
    streams = random_streams(np.random.default_rng(2), 1, 50, frame_shape=(2, 2))
    replay = build_replay(
        seq_spec(30, stored_state=False, kind="uniform"),
        num_envs=1,
        observation_shape=(2, 2, 2),
        observation_dtype=jnp.float32,
        stack=2,
        core_state=(jnp.zeros(3),),  # ignored: the spec does not store states
    )
    state = fill(replay, streams, 50, stack=2)
    assert state.core_state is None
    batch, info = jax.tree.map(np.asarray, jitted(replay).sample(state, jax.random.key(0), 64))
    assert batch.core_state is None
    assert batch.observation.shape == (64, 7, 2, 2, 2)
    for i in range(64):
        _, t = global_time(info.indices[i], replay.items_per_env, 3, 30, 50)
        np.testing.assert_array_equal(batch.observation[i, 0], ref_stack(streams[0], t, 2))


# --------------------------------------------------------------------------- jit and scan


def test_jit_without_retracing_and_inside_scan():
    replay = build_replay(
        ff_spec(2 * 32, n=3, kind="prioritized"),
        num_envs=2,
        observation_shape=(2, 3),
        observation_dtype=jnp.uint8,
        stack=2,
    )
    traces = {"add": 0, "sample": 0, "update": 0}

    def counted(name, fn):
        def wrapper(*args):
            traces[name] += 1
            return fn(*args)

        return wrapper

    add = jax.jit(counted("add", replay.add), donate_argnums=0)
    sample = jax.jit(counted("sample", replay.sample), static_argnums=2)
    update = jax.jit(counted("update", replay.update_priorities), donate_argnums=0)
    streams = random_streams(np.random.default_rng(0), 2, 12, frame_shape=(3,))
    for s in streams:
        s.obs = [o.astype(np.uint8) for o in s.obs]
    state = replay.init()
    for t in range(12):
        state = add(state, step_batch(streams, t, stack=2))
    for i in range(3):
        batch, info = sample(state, jax.random.key(i), 8)
        state = update(state, info.indices, jnp.abs(batch.reward) + 0.1)
    assert traces == {"add": 1, "sample": 1, "update": 1}

    # a compiled loop: 100 adds in lax.scan (state in the carry), then one sample
    def body(state, t):
        obs = jnp.stack([jnp.full((2, 3), t, jnp.uint8), jnp.full((2, 3), t + 100, jnp.uint8)])
        step = StepBatch(
            observation=obs,
            action=jnp.full((2,), t % 4, jnp.int32),
            reward=jnp.ones((2,)),
            terminated=jnp.full((2,), t % 10 == 9),
            truncated=jnp.zeros((2,), bool),
            first=jnp.full((2,), (t % 10 == 1) | (t == 0)),
            valid=jnp.full((2,), (t % 10 != 0) | (t == 0)),
        )
        return replay.add(state, step), None

    @jax.jit
    def run(state, key):
        state, _ = jax.lax.scan(body, state, jnp.arange(100))
        return state, replay.sample(state, key, 16)

    state, (batch, info) = run(replay.init(), jax.random.key(0))
    assert int(state.cursor) == 100
    t = np.asarray(batch.observation[:, -1, 0]).astype(int) % 100
    assert np.all((t >= 100 - 32 + 1) & (t <= 100 - 1 - 3)) and np.all(t % 10 != 0)
    assert np.all(np.asarray(batch.probability) > 0)


# --------------------------------------------------------------------------- memory


def test_nbytes_is_exact():
    configs = [
        (
            ff_spec(2 * 20, n=3),
            2,
            dict(observation_shape=(4, 6, 5), stack=4, observation_dtype=jnp.uint8),
        ),
        (
            ff_spec(3 * 10, kind="prioritized"),
            3,
            dict(observation_shape=(4,), observation_dtype=jnp.float32),
        ),
        (
            seq_spec(2 * 30),
            2,
            dict(
                observation_shape=(3,),
                observation_dtype=jnp.float32,
                core_state=(jnp.zeros(8), jnp.zeros((2, 8), jnp.bfloat16)),
            ),
        ),
    ]
    for spec, num_envs, kwargs in configs:
        replay = build_replay(spec, num_envs=num_envs, **kwargs)
        state = replay.init()
        assert replay.nbytes() == sum(x.nbytes for x in jax.tree.leaves(state))


def test_atari_memory_estimate_without_allocating():
    """1M transitions of 84×84 frames: one frame per slot (~7.06 GB) plus small fields."""
    replay = build_replay(
        ff_spec(1_000_000, n=3, kind="prioritized"),
        num_envs=8,
        observation_shape=(4, 84, 84),
        observation_dtype=jnp.uint8,
        stack=4,
    )
    slots = 1_000_000
    per_slot = 84 * 84 + 4 + 4 + 4 * 1 + 4  # frame, action, reward, 4 flags, weight
    assert replay.nbytes() == slots * per_slot + 4 + 4  # + cursor and max priority
    assert 7.05e9 < replay.nbytes() < 7.1e9
    # R2D2: one LSTM(512) state per 40-slot item adds ~0.1 GB
    r2d2 = build_replay(
        zoo.load_algorithm("r2d2"),
        num_envs=8,
        observation_shape=(4, 84, 84),
        observation_dtype=jnp.uint8,
        stack=4,
        core_state=(jnp.zeros(512), jnp.zeros(512)),
    )
    assert r2d2.nbytes() == 1_000_000 * (per_slot - 4) + 25_000 * (4 + 2 * 512 * 4) + 8


# --------------------------------------------------------------------------- the loss contract


def test_batches_feed_the_loss_and_priorities_come_back():
    """Sampled Transition / SequenceBatch go through zoo.build_loss; priorities write back."""
    key = jax.random.key(0)
    small = {"replay.min_size": 8, "replay.batch_size": 8, "network.torso": "mlp"}
    ff = zoo.load_algorithm(
        "prioritized_ddqn",
        overrides={**small, "replay.capacity": 128, "loss.n_step": 3, "loss.reward_clip": None},
    )
    rec = zoo.load_algorithm(
        "r2d2",
        overrides={
            **small,
            "replay.capacity": 120,
            "replay.sequence": {"burn_in": 2, "trace_length": 6, "period": 3},
            "network.core": {"kind": "lstm", "size": 8},
            "network.hidden": [8],
        },
    )
    streams = random_streams(np.random.default_rng(0), 2, 50)
    for spec in (ff, rec):
        net = zoo.build_network(spec, observation_shape=(2,), num_actions=4, key=key)
        template = net.initial_state() if spec.recurrent else None
        replay = build_replay(
            spec,
            num_envs=2,
            observation_shape=(2,),
            observation_dtype=jnp.float32,
            core_state=template,
        )
        core = None
        if template is not None:
            core = jax.tree.map(lambda x: jnp.broadcast_to(x, (2, *x.shape)), template)
        state = replay.init()
        for t in range(50):
            state = jitted(replay).add(state, step_batch(streams, t, core_state=core))
        batch, info = jitted(replay).sample(state, key, 8)
        loss_fn = jax.jit(
            lambda f, n, b, k: f(online=n, target=n, batch=b, key=k), static_argnums=0
        )
        loss, aux = loss_fn(zoo.build_loss(spec), net, batch, key)
        assert np.isfinite(float(loss)) and aux.priorities.shape == (8,)
        state = jitted(replay).update(state, info.indices, aux.priorities)
        indices = np.asarray(info.indices)
        once = np.array([np.sum(indices == i) == 1 for i in indices])  # duplicates: one wins
        weight = np.asarray(state.weight).reshape(-1)[indices]
        alpha = spec.replay.priority_exponent
        expected = np.maximum(np.asarray(aux.priorities), PRIORITY_FLOOR) ** alpha
        np.testing.assert_allclose(weight[once], expected[once], rtol=1e-5)


def test_seal_keeps_windows_from_crossing_a_resume_boundary():
    """After a resume the env restarts mid-episode: no item may bootstrap across that seam."""
    import zoo as _zoo
    from zoo.replay import StepBatch as _Step
    from zoo.replay import build_replay as _build

    spec = _zoo.load_algorithm(
        "dqn",
        overrides={
            "loss.n_step": 3,
            "loss.reward_clip": None,
            "replay.capacity": 64,
            "replay.min_size": 32,
        },
    )
    replay = _build(spec, num_envs=1, observation_shape=(1,), observation_dtype=jnp.float32)
    add = jax.jit(replay.add)
    state = replay.init()

    def step(value: float, first: bool) -> _Step:
        return _Step(
            observation=jnp.full((1, 1), value),
            action=jnp.zeros((1,), jnp.int32),
            reward=jnp.ones((1,)),
            terminated=jnp.zeros((1,), bool),
            truncated=jnp.zeros((1,), bool),
            first=jnp.full((1,), first),
            valid=jnp.ones((1,), bool),
        )

    for t in range(10):  # an episode cut at t = 9 by a resume
        state = add(state, step(float(t), t == 0))
    state = replay.seal(state)
    for t in range(10):  # the new episode after the resume: observations 100, 101, ...
        state = add(state, step(100.0 + t, t == 0))
    eligible = np.asarray(replay.eligible(state)).reshape(-1)[:20]
    # windows of 3 from slots 0..6 end at slot 9 at the latest; 7, 8, 9 would reach the seam
    assert eligible[:7].all() and not eligible[7:10].any()
    batch, _ = jax.jit(lambda s, k: replay.sample(s, k, 512))(state, jax.random.PRNGKey(0))
    obs = np.asarray(batch.observation)[:, 0]
    nxt = np.asarray(batch.next_observation)[:, 0]
    assert np.all((obs < 100) == (nxt < 100))  # no bootstrap from the other episode


def test_deferred_priorities_skip_items_overwritten_since_the_sample():
    """The loop writes an update's priorities just before the next sample, after more adds:
    items whose slot was overwritten in between keep the priority they entered with."""
    cap, alpha = 8, 0.6
    streams = random_streams(np.random.default_rng(1), 1, 30, p_end=0.0)
    replay = build_replay(
        ff_spec(cap, kind="prioritized", alpha=alpha),
        num_envs=1,
        observation_shape=(2,),
        observation_dtype=jnp.float32,
    )
    state = fill(replay, streams, 12)  # cursor 12: slots hold steps 4..11, slot s = step % 8
    sampled_at = jnp.asarray(int(state.cursor), jnp.int32)  # the adds below donate `state`
    assert int(sampled_at) == 12
    state = replay.update_priorities(state, jnp.asarray([0, 1], jnp.int32), jnp.asarray([2.0, 2.0]))
    before = np.asarray(state.weight).copy()
    # two adds overwrite slots 4 and 5 (steps 12 and 13); they enter at the max priority, 2
    state = fill_more(replay, state, streams, 12, 14)
    entered = np.asarray(state.weight)[0, 4]
    assert entered == pytest.approx(2.0**alpha)
    # priorities of items 3, 4, 5, 6 sampled at cursor 12: 4 and 5 now hold new steps
    idx = jnp.asarray([3, 4, 5, 6], jnp.int32)
    out = replay.update_priorities(state, idx, jnp.full((4,), 5.0), sampled_at)
    w = np.asarray(out.weight)[0]
    assert w[3] == pytest.approx(5.0**alpha) and w[6] == pytest.approx(5.0**alpha)
    assert w[4] == pytest.approx(entered) and w[5] == pytest.approx(entered)
    np.testing.assert_array_equal(w[[0, 1, 2, 7]], before[0, [0, 1, 2, 7]])
    # without `sampled_at` (no adds in between) every write lands
    out = replay.update_priorities(state, idx, jnp.full((4,), 5.0))
    np.testing.assert_allclose(np.asarray(out.weight)[0, 3:7], 5.0**alpha, rtol=1e-6)


def fill_more(replay, state, streams, start, stop):
    add = jitted(replay).add
    for t in range(start, stop):
        state = add(state, step_batch(streams, t))
    return state


@pytest.mark.parametrize("repeat", [False, True])
def test_stacks_before_an_episode_start_hold_zeros_or_its_first_frame(repeat):
    """Hand-worked: one env, frame value = slot + 1, an episode starting at slot 2. The stack
    of slot 3 is ``[0, 0, 3, 4]`` (dqn_zoo and Dopamine pad with zeros) or, with the protocol's
    ``game_start_stack: repeat``, ``[3, 3, 3, 4]`` (envpool's and gymnasium's FrameStack)."""
    from zoo.replay import stacked_frames

    frames = jnp.arange(1, 9, dtype=jnp.uint8).reshape(1, 8, 1, 1)
    first = jnp.zeros((1, 8), bool).at[0, 2].set(True)
    got = [
        np.asarray(
            stacked_frames(frames, first, jnp.array(0), jnp.array(slot), 4, repeat=repeat)
        ).ravel()
        for slot in (2, 3, 5, 6)
    ]
    pad = [3, 3, 3] if repeat else [0, 0, 0]
    expected = [[*pad, 3], [*pad[:2], 3, 4], [3, 4, 5, 6], [4, 5, 6, 7]]
    assert [g.tolist() for g in got] == expected
