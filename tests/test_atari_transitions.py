"""Atari through a run's own pieces: what the replay stores is what the environment emitted.

The Atari counterpart of ``tests/test_minatar.py``. For every Atari protocol, Breakout (frequent
lost lives and game overs under random play; an episode cap makes truncations too) is built
through ``zoo.envs.make`` with the protocol's own settings and stepped through the loop's own
insertion, on the host path (:meth:`zoo.loop.Loop.step`) and on the compiled path
(:meth:`zoo.loop.Loop.chunk`), into a small replay that wraps twice. The stream is recorded
independently: a second envpool pool with the same seed, driven through envpool's raw gymnasium
API with the actions the loop took, and turned into the protocol's transitions by a plain-Python
model of its rules (a lost life from a drop in ``info["lives"]``: terminal in training where the
protocol says so, the stack restarted where it says so; stacks zero-padded before an episode's
first frame, as dqn_zoo and Dopamine pad, or filled with that frame where the protocol repeats
it, as envpool's own stack does; ``valid``/``first`` flags of the replay's slots).
Then every stored slot and every eligible sampled n-step transition (stack, action, reward,
discount, next stack) is compared with that model.
"""

from __future__ import annotations

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import zoo
from zoo.envs import get_protocol, make
from zoo.learner import Learner
from zoo.loop import Loop
from zoo.runs.assemble import replay_for_env

pytestmark = pytest.mark.compiled

GAME = "Breakout-v5"
SEED = 11
NUM_ENVS = 2
STEPS = 480  # vector steps: the ring of 256 slots per env wraps, keeping the last 256
CAPACITY = 256  # per env
CHUNK = 160  # steps between reads of the replay's actions (at most CAPACITY)
CAP = 130  # agent steps per game (random Breakout games last ~150-300): truncations too
N_STEP = 3
SAMPLES = 2048  # draws from ~450 eligible items
GAMMA = 0.99
ATARI = [
    "nature_2015",
    "purejaxql_atari",
    "dopamine_2018",
    "machado_2018",
    "atari_100k",
    "r2d2_2019",
]


def small_spec() -> zoo.AlgorithmSpec:
    """DQN with a linear Q-function (cheap to compile), random actions and no update due."""
    return zoo.load_algorithm(
        "dqn",
        overrides={
            "network.torso": {"kind": "mlp", "sizes": []},
            "network.hidden": [],
            "replay.capacity": NUM_ENVS * CAPACITY,
            "replay.min_size": NUM_ENVS * CAPACITY,
            "replay.batch_size": 8,
            "loss.n_step": N_STEP,
            "loss.discount": GAMMA,
            "loss.reward_clip": None,  # the protocol clips at insertion
            "schedule.epsilon": 1.0,
            "schedule.update_period": 10**9,
        },
    )


def run_loop(protocol: str, path: str):
    """The loop's replay after ``STEPS`` vector steps, and the actions it sent, ``[STEPS, N]``."""
    spec = small_spec()
    env = make(GAME, protocol=protocol, num_envs=NUM_ENVS, seed=SEED, env_kwargs=_caps())
    net = zoo.build_network(
        spec,
        observation_shape=env.observation_shape,
        num_actions=env.num_actions,
        key=jax.random.PRNGKey(0),
    )
    replay = replay_for_env(spec, env)
    learner = Learner(spec)
    loop = Loop(spec, env, learner, replay)
    carry = loop.init(learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2 + SEED))
    carry, actions = loop.first_act(carry, env.reset())
    if path == "compiled":
        handle, done = env.xla()[0], jnp.zeros((NUM_ENVS,), bool)
    sent = []
    for start in range(0, STEPS, CHUNK):
        if path == "host":
            for _ in range(CHUNK):
                carry, actions, _ = loop.step(carry, env.step(np.asarray(actions)))
        else:
            carry, handle, done, _ = loop.chunk(carry, handle, done, CHUNK)
        # slot t holds the action sent in env step t: read them before the ring overwrites them
        slots = np.arange(start, start + CHUNK) % CAPACITY
        sent.append(np.asarray(carry.replay.action)[:, slots].T)
    assert int(carry.env_steps) == STEPS * NUM_ENVS and int(carry.learner.updates) == 0
    state = jax.tree.map(np.asarray, carry.replay)
    env.close()
    return replay, state, np.concatenate(sent)


def _caps() -> dict[str, int]:
    return {"max_episode_steps": CAP}


def reference_stream(protocol_name: str, actions: np.ndarray) -> dict[str, np.ndarray]:
    """The protocol's transitions from envpool's raw API, per env, by a plain-Python model.

    Returns arrays ``[N, STEPS + 1, ...]`` for the observation side (``observation``, ``first``,
    ``starts``: the slot's ``valid``; ``age``: steps since the stack started) and ``[N, STEPS]``
    for the answers (``reward``, ``terminated``, ``truncated``, ``lost``, ``over``,
    ``truncated_game``), with ``raw`` the envpool stacks for a cross-check.
    """
    import envpool

    protocol = get_protocol(protocol_name)
    kwargs = {**protocol.envpool_kwargs(training=True), **_caps()}
    pool = envpool.make(
        GAME, env_type="gymnasium", num_envs=NUM_ENVS, batch_size=NUM_ENVS, seed=SEED, **kwargs
    )
    n, stack = NUM_ENVS, protocol.stack
    out: dict[str, list] = {k: [] for k in ("observation", "raw", "first", "starts", "age")}
    answers: dict[str, list] = {
        k: [] for k in ("reward", "terminated", "truncated", "lost", "over")
    }
    frames: list[deque] = [deque(maxlen=stack) for _ in range(n)]
    age = np.zeros(n, np.int64)

    def observe(raw_obs, elapsed, lost, over, starts):
        first = (elapsed == 0) | (lost & protocol.life_loss_resets_stack & ~over)
        for e in range(n):
            if first[e]:
                newest = raw_obs[e][-1]
                fill = newest if protocol.game_start_stack == "repeat" else np.zeros_like(newest)
                frames[e].extend([fill] * stack)
                age[e] = 0
            else:
                age[e] += 1
            frames[e].append(raw_obs[e][-1])
        out["observation"].append(np.stack([np.stack(f) for f in frames]))
        out["raw"].append(raw_obs)
        out["first"].append(first)
        out["starts"].append(starts)
        out["age"].append(age.copy())

    raw_obs, info = pool.reset()
    assert np.array_equal(info["env_id"], np.arange(n))
    none = np.zeros(n, bool)
    observe(raw_obs, info["elapsed_step"], none, none, ~none)
    lives, over = info["lives"], none
    for t in range(STEPS):
        raw_obs, reward, term, trunc, info = pool.step(actions[t])
        assert np.array_equal(info["env_id"], np.arange(n))
        lost = ~over & (info["lives"] < lives)  # a step after a game over is its reset
        new_over = term | trunc
        terminated = term | (lost & protocol.life_loss_terminates(training=True))
        if protocol.reward_clip is not None:
            reward = np.clip(reward, -protocol.reward_clip, protocol.reward_clip)
        for key, value in zip(answers, (reward, terminated, trunc, lost, new_over), strict=True):
            answers[key].append(np.asarray(value))
        observe(raw_obs, info["elapsed_step"], lost, new_over, ~new_over)
        lives, over = info["lives"], new_over
    pool.close()
    stream = {k: np.swapaxes(np.stack(v), 0, 1) for k, v in {**out, **answers}.items()}
    stream["actions"] = actions.T
    return stream


def assert_same(actual, expected, what: str) -> None:
    """``np.array_equal`` (fast on these arrays), numpy's report where they differ."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if not np.array_equal(actual, expected):
        np.testing.assert_array_equal(actual, expected, err_msg=what)


def n_step_window(s: dict[str, np.ndarray], e: int, t: int) -> tuple[float, float, int]:
    """docs/design.md's n-step reward and discount of the window starting at t, and its length k."""
    ends = [u for u in range(t, t + N_STEP) if s["terminated"][e, u] or s["truncated"][e, u]]
    k = min(N_STEP, ends[0] - t + 1) if ends else N_STEP
    reward, alive = 0.0, 1.0
    for j in range(k):
        reward += GAMMA**j * alive * float(s["reward"][e, t + j])
        alive *= 1.0 - float(s["terminated"][e, t + j])
    return reward, GAMMA ** (k - 1) * alive, k


_STREAMS: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]] = {}


def stream_for(protocol: str, actions: np.ndarray) -> dict[str, np.ndarray]:
    """The reference stream for these actions (both paths act alike: recorded once)."""
    if protocol in _STREAMS and np.array_equal(_STREAMS[protocol][0], actions):
        return _STREAMS[protocol][1]
    stream = reference_stream(protocol, actions)
    _STREAMS[protocol] = (actions, stream)
    return stream


@pytest.mark.parametrize("path", ["host", "compiled"])
@pytest.mark.parametrize("protocol", ATARI)
def test_atari_replay_matches_the_environment_stream(protocol, path):
    replay, state, actions = run_loop(protocol, path)
    s = stream_for(protocol, actions)
    p = get_protocol(protocol)
    assert replay.stack == p.stack and replay.capacity_per_env == CAPACITY

    # the model's stacks are envpool's wherever the stack is full since its start
    full = s["age"] >= p.stack - 1
    assert_same(s["observation"][full], s["raw"][full], "model vs envpool stacks")
    # and zero-padded where it is not (the first steps of a game, or of a life under atari_100k),
    # or, where the protocol repeats the first frame, envpool's own stacks there too
    if p.stack > 1 and p.game_start_stack == "repeat":
        assert (~full).any() and not p.life_loss_resets_stack
        assert_same(s["observation"], s["raw"], "repeated first frames vs envpool's stacks")
    elif p.stack > 1:
        assert (~full).any() and not s["observation"][~full][:, 0].any()

    # what the ring holds: global steps T - C .. T - 1 (T = STEPS), slot t % C
    times = np.arange(STEPS - CAPACITY, STEPS)
    slots = times % CAPACITY
    ring = slice(STEPS - CAPACITY, STEPS)
    for e in range(NUM_ENVS):
        newest = s["observation"][e, ring][:, -1] if p.stack > 1 else s["observation"][e, ring]
        assert_same(state.frames[e, slots], newest, "frames")
        assert_same(state.action[e, slots], s["actions"][e, ring], "action")
        assert_same(state.reward[e, slots], s["reward"][e, ring], "reward")
        assert_same(state.terminated[e, slots], s["terminated"][e, ring], "terminated")
        assert_same(state.truncated[e, slots], s["truncated"][e, ring], "truncated")
        assert_same(state.first[e, slots], s["first"][e, ring], "first")
        assert_same(state.valid[e, slots], s["starts"][e, ring], "valid")
        # stacks rebuilt from one frame per slot, where the stack's slots are all in the ring
        inside = times[p.stack - 1 :]
        rebuilt = jax.jit(replay.observation)(
            state, jnp.full(inside.shape, e), jnp.asarray(inside % CAPACITY)
        )
        assert_same(rebuilt, s["observation"][e, inside], "rebuilt stacks")

    # the ring saw every kind of boundary
    tail = {k: s[k][:, ring] for k in ("lost", "over", "truncated", "first", "starts")}
    assert (tail["over"] & ~tail["truncated"]).sum() >= 1, "no game over in the ring"
    assert tail["truncated"].sum() >= 1, "no truncation in the ring"
    lost = tail["lost"] & ~tail["over"]
    assert lost.sum() >= 3, "no lost life in the ring"
    terminal_lives = state.terminated[:, slots][lost]
    assert terminal_lives.all() if p.life_loss_terminal else not terminal_lives.any()
    # after a lost life the game goes on: the next observation starts a transition
    after_loss = np.roll(lost, 1, axis=1)[:, 1:]
    assert s["starts"][:, ring][:, 1:][after_loss].all()
    # a life's first observation restarts the stack under atari_100k only
    life_starts = s["first"][:, 1:][:, ring] & s["lost"][:, ring] & ~s["over"][:, ring]
    assert life_starts.any() == p.life_loss_resets_stack

    # eligible items: valid first slot, its stack and its n-step window inside the ring
    expected = np.zeros((NUM_ENVS, CAPACITY), bool)
    for t in range(STEPS - CAPACITY + p.stack - 1, STEPS - N_STEP):
        expected[:, t % CAPACITY] = s["starts"][:, t]
    device_state = jax.tree.map(jnp.asarray, state)
    assert_same(replay.eligible(device_state), expected, "eligible items")

    # sampled transitions: each one against the model
    batch, info = jax.jit(replay.sample, static_argnums=2)(
        device_state, jax.random.PRNGKey(3), SAMPLES
    )
    batch, indices = jax.tree.map(np.asarray, batch), np.asarray(info.indices)
    env_of, slot_of = np.divmod(indices, CAPACITY)
    time_of = slot_of + CAPACITY * ((STEPS - 1 - slot_of) // CAPACITY)
    assert expected[env_of, slot_of].all()
    windows = np.array([n_step_window(s, e, t) for e, t in zip(env_of, time_of, strict=True)])
    k = windows[:, 2].astype(int)
    assert_same(batch.observation, s["observation"][env_of, time_of], "observation")
    assert_same(batch.action, s["actions"][env_of, time_of], "action")
    np.testing.assert_allclose(batch.reward, windows[:, 0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(batch.discount, windows[:, 1], rtol=1e-6, atol=1e-7)
    assert_same(batch.next_observation, s["observation"][env_of, time_of + k], "next")
    # windows ending at a terminal (a lost life too, where it is terminal) have discount 0;
    # those cut by the episode cap bootstrap from the final observation; both were drawn
    last = time_of + k - 1
    terminal_end = s["terminated"][env_of, last]
    truncated_end = s["truncated"][env_of, last] & ~terminal_end
    assert (terminal_end & (k < N_STEP)).any() and (batch.discount[terminal_end] == 0).all()
    assert truncated_end.any() and (batch.discount[truncated_end] > 0).all()
    if p.life_loss_terminal:
        assert (terminal_end & s["lost"][env_of, last] & ~s["over"][env_of, last]).any()
