"""The replay-free data kind (PQN, zoo.rollout): the spec's rules, the store, one learning phase
against an independent implementation, both loop paths, the presets' checked values."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import zoo
from zoo import spec as spec_lib
from zoo.data import build_data as build_replay
from zoo.envs import EpisodeTracker, make
from zoo.learner import Learner
from zoo.loop import Loop
from zoo.replay import StepBatch
from zoo.rollout import RolloutLearnStep, RolloutStore
from zoo.types import TargetBatch

T, N, OBS, ACTIONS = 4, 3, (5,), 2
GAMMA, LAMBDA = 0.9, 0.7

#: A small rollout spec: 4 steps × 3 envs = 12 transitions, 2 epochs of 3 minibatches of 4.
SMALL = {
    "network.torso": {"kind": "mlp", "sizes": []},
    "network.hidden": [8],
    "loss.discount": GAMMA,
    "rollout": {"length": T, "epochs": 2, "minibatches": 3, "td_lambda": LAMBDA},
    "schedule.target_update_period": 6,
    "optimizer.learning_rate": 1e-2,
}


def small_spec(**overrides: Any) -> zoo.AlgorithmSpec:
    return zoo.load_algorithm("pqn", overrides={**SMALL, **overrides})


# ------------------------------------------------------------------------------ the spec


@pytest.mark.parametrize(
    ("override", "field", "fix"),
    [
        ({"replay.kind": "prioritized"}, "replay.kind", "replay.kind: uniform"),
        ({"loss.n_step": 3}, "loss.n_step", "loss.n_step: 1"),
        (
            {"network.core": {"kind": "lstm", "size": 8}, "replay.sequence": {"burn_in": 1}},
            "network.core",
            "network.core: null",
        ),
        ({"schedule.target_update_period": 100}, "schedule.target_update_period", "multiple"),
        (
            {"network.head": "quantile", "loss.td": "huber"},
            "network.head",
            "network.head: q",
        ),
    ],
)
@pytest.mark.unit
def test_spec_refuses_what_a_rollout_cannot_mean(override, field, fix):
    with pytest.raises(zoo.SpecError) as caught:
        zoo.load_algorithm("pqn", overrides=override)
    message = str(caught.value)
    assert field in message and fix in message and "rollout: null" in message


@pytest.mark.unit
def test_spec_accepts_the_compositions_that_mean_something():
    spec = zoo.load_algorithm("munchausen_pqn")
    assert spec.loss.munchausen is not None and spec.rollout is not None
    double = zoo.load_algorithm("pqn", overrides={"loss.bootstrap": "double"})
    assert double.loss.bootstrap.kind == "double"
    lagged = zoo.load_algorithm("pqn", overrides={"schedule.target_update_period": 640})
    assert lagged.schedule.target_update_period == 640
    assert zoo.load_algorithm("dqn").rollout is None  # the neutral element: learn from a replay


# ------------------------------------------------------------------------------ the store


def step_batch(t: int, rng: np.random.Generator, valid=None) -> StepBatch:
    obs = jnp.asarray(np.full((N, *OBS), float(t)), jnp.float32)
    return StepBatch(
        observation=obs,
        action=jnp.asarray(rng.integers(0, ACTIONS, N), jnp.int32),
        reward=jnp.asarray(rng.normal(size=N), jnp.float32),
        terminated=jnp.asarray([t == 1, False, False]),
        truncated=jnp.asarray([False, t == 2, False]),
        first=jnp.zeros((N,), bool),
        valid=jnp.ones((N,), bool) if valid is None else jnp.asarray(valid),
        next_observation=obs + 1.0,
    )


@pytest.mark.compiled
def test_store_layout_seal_and_learning_parts():
    spec = small_spec()
    store = build_replay(spec, num_envs=N, observation_shape=OBS, observation_dtype=jnp.float32)
    assert isinstance(store, RolloutStore)
    state = store.init()
    assert store.nbytes() == sum(x.nbytes for x in jax.tree.leaves(state))
    rng = np.random.default_rng(0)
    for t in range(T):
        state = store.add(state, step_batch(t, rng))
    # slot t holds the observation acted on at step t, slot T the one after the last step
    np.testing.assert_array_equal(np.asarray(state.observation)[:, 0, 0], [0, 1, 2, 3, 4])
    assert int(state.cursor) == T and bool(state.valid.all())
    assert bool(state.terminated[1, 0]) and bool(state.truncated[2, 1])
    assert not bool(store.seal(state).valid.any())  # a resume drops the steps before it
    learn_step, credit = store.learning_parts(Learner(spec), spec, N)
    assert isinstance(learn_step, RolloutLearnStep)
    # one learning phase per rollout, from the first step
    assert credit.max_updates == 1 and credit.period == T * N and credit.min_size == N
    with pytest.raises(ValueError, match="must divide"):
        RolloutStore(
            length=T, num_envs=N, observation_shape=OBS, observation_dtype=jnp.float32,
            rollout=spec.rollout.model_copy(update={"minibatches": 5}),
        )  # fmt: skip


# -------------------------------------------------- one learning phase, independently


def q_lambda_loop(r, v, term, trunc, valid, gamma, lam):
    """PQN's targets by hand: backwards over each env, cut at terminals, truncations and
    invalid next steps; float64."""
    out = np.zeros(r.shape)
    for n in range(r.shape[1]):
        for t in reversed(range(r.shape[0])):
            if term[t, n]:
                out[t, n] = r[t, n]
            elif trunc[t, n] or t == r.shape[0] - 1 or not valid[t + 1, n]:
                out[t, n] = r[t, n] + gamma * v[t, n]
            else:
                out[t, n] = r[t, n] + gamma * ((1 - lam) * v[t, n] + lam * out[t + 1, n])
    return out


@pytest.fixture(scope="module")
def phase():
    """One learning phase of the zoo, and what it was given."""
    spec = small_spec()
    net = zoo.build_network(spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(0))
    learner = Learner(spec)
    store = build_replay(spec, num_envs=N, observation_shape=OBS, observation_dtype=jnp.float32)
    rng = np.random.default_rng(1)
    state = store.init()
    for t in range(T):
        step = step_batch(t, rng, valid=[True, True, t != 3])
        noise = jnp.asarray(rng.normal(size=(N, *OBS)), jnp.float32)
        step = step._replace(observation=step.observation + noise)
        step = step._replace(next_observation=step.observation + 0.5)
        state = store.add(state, step)
    learn_step, _ = store.learning_parts(learner, spec, N)
    learner_state = learner.init(net, jax.random.key(1))
    carry = learn_step.init(learner_state, jax.random.key(2))
    new_carry, emptied = jax.jit(learn_step.learn)(carry, state)
    info = learn_step.sample(state, None, carry.key)[3]  # the order the phase drew
    return net, state, info, new_carry, emptied


@pytest.mark.compiled
def test_learning_phase_equals_an_independent_pqn_update(phase):
    net, state, info, carry, emptied = phase
    obs = np.asarray(state.observation)
    # the targets: the initial network's max Q at each next observation (no target network)
    q = np.asarray(jax.vmap(net)(jnp.asarray(obs.reshape(-1, *OBS))).q_values).reshape(T + 1, N, -1)
    valid = np.asarray(state.valid)
    g = q_lambda_loop(
        np.asarray(state.reward), q[1:].max(-1), np.asarray(state.terminated),
        np.asarray(state.truncated), valid, GAMMA, LAMBDA,
    )  # fmt: skip
    # then epochs × minibatches RAdam steps of ½·mean(mask·(Q(s, a) − G)²), gradients clipped
    opt = optax.chain(optax.clip_by_global_norm(10.0), optax.radam(1e-2))
    params, static = eqx.partition(net, eqx.is_inexact_array)
    opt_state = opt.init(params)
    flat_obs = jnp.asarray(obs[:-1].reshape(T * N, *OBS))
    flat_a = np.asarray(state.action).reshape(-1)
    flat_g, flat_valid = g.reshape(-1), valid.reshape(-1).astype(np.float32)

    def loss(p, idx):
        out = jax.vmap(eqx.combine(p, static))(flat_obs[idx])
        q_sa = jnp.take_along_axis(out.q_values, jnp.asarray(flat_a[idx])[:, None], axis=1)[:, 0]
        return jnp.mean(flat_valid[idx] * 0.5 * (q_sa - flat_g[idx]) ** 2)

    order = np.asarray(info.indices)
    assert order.shape == (2, T * N) and sorted(order[0]) == list(range(T * N))
    losses = []
    for idx in order.reshape(6, 4):
        value, grads = jax.value_and_grad(loss)(params, idx)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        losses.append(float(value))
    got = eqx.filter(carry.learner.online, eqx.is_inexact_array)
    start = eqx.filter(net, eqx.is_inexact_array)
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(start), strict=True)
    moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in pairs)
    assert moved > 1e-2  # six steps of lr 1e-2: the tolerance below is a thousandth of that
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(params), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)
    assert int(carry.learner.updates) == 6 and int(carry.metric_count) == 6
    np.testing.assert_allclose(float(carry.last_loss), losses[-1], rtol=1e-5)
    np.testing.assert_allclose(float(carry.metric_sums[0]), sum(losses), rtol=1e-5)
    # the actors act with the phase's final network; the target was synced at update 6
    for x, y in zip(
        jax.tree.leaves(carry.actor), jax.tree.leaves(carry.learner.online), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for x, y in zip(
        jax.tree.leaves(carry.learner.target), jax.tree.leaves(carry.learner.online), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the store is emptied for the next rollout
    assert int(emptied.cursor) == 0 and not bool(emptied.valid.any())


@pytest.mark.compiled
def test_target_batch_loss_with_a_value_transform():
    """h(G) − Q(s, a) through the head loss; no other forward pass, no reward clip on G."""
    spec = small_spec(**{"loss.value_transform": {"kind": "scale", "factor": 0.1}})
    spec = zoo.load_algorithm(spec, overrides={"loss.reward_clip": 1.0})
    net = zoo.build_network(spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(3))
    obs = jax.random.normal(jax.random.key(4), (4, *OBS))
    action = jnp.array([0, 1, 1, 0])
    target = jnp.array([5.0, -3.0, 12.0, 0.5])
    mask = jnp.array([1.0, 1.0, 0.0, 1.0])
    batch = TargetBatch(obs, action, target, jnp.ones(4), mask)
    loss, aux = zoo.build_loss(spec)(online=net, target=None, batch=batch, key=jax.random.key(5))
    q = np.asarray(jax.vmap(net)(obs).q_values)[np.arange(4), np.asarray(action)]
    want = np.mean(np.asarray(mask) * 0.5 * (0.1 * np.asarray(target) - q) ** 2)
    np.testing.assert_allclose(float(loss), want, rtol=1e-6)
    assert aux.priorities is None


@pytest.mark.compiled
def test_watkins_cuts_the_trace_after_a_non_greedy_action():
    spec = small_spec(**{"rollout.trace": "watkins"})
    net = zoo.build_network(spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(0))
    obs = jax.random.normal(jax.random.key(6), (T + 1, N, *OBS))
    q = np.asarray(jax.vmap(jax.vmap(net))(obs).q_values)
    greedy = q.argmax(-1)
    action = greedy[:T].copy()
    action[2, 0] = 1 - action[2, 0]  # a non-greedy action at step 2 of env 0
    reward = np.asarray(jax.random.normal(jax.random.key(7), (T, N)))
    flags = np.zeros((T, N), bool)
    got = zoo.build_loss(spec).rollout_targets(
        net, net, obs, jnp.asarray(action), jnp.asarray(reward), flags, flags,
        np.ones((T, N), bool), jax.random.key(0),
    )  # fmt: skip
    lam = np.full((T, N), LAMBDA)
    lam[1, 0] = 0.0  # G₁ does not follow the trace into step 2 of env 0
    v = q[1:].max(-1)
    want = np.zeros((T, N))
    for t in reversed(range(T)):
        nxt = want[t + 1] if t + 1 < T else v[t]
        want[t] = reward[t] + GAMMA * ((1 - lam[t]) * v[t] + lam[t] * nxt)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------- both loop paths, a run


def build_loop(spec, num_envs):
    env = make("CartPole-v1", num_envs=num_envs, seed=3)
    net = zoo.build_network(
        spec, observation_shape=env.observation_shape, num_actions=env.num_actions,
        key=jax.random.PRNGKey(0),
    )  # fmt: skip
    replay = build_replay(
        spec, num_envs=num_envs, observation_shape=env.observation_shape,
        observation_dtype=env.observation_dtype,
    )  # fmt: skip
    learner = Learner(spec)
    loop = Loop(spec, env, learner, replay)
    carry = loop.init(learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2))
    return env, loop, carry


@pytest.mark.compiled
def test_host_and_compiled_paths_agree_for_a_rollout_learner():
    spec = small_spec(**{"network.hidden": [16]})
    steps, num_envs = 60, 3
    env, loop, carry = build_loop(spec, num_envs)
    tracker = EpisodeTracker(num_envs)
    carry, actions = loop.first_act(carry, env.reset())
    host_returns = []
    for _ in range(steps):
        ts = env.step(np.asarray(actions))
        carry, actions, _ = loop.step(carry, ts)
        host_returns += [e.episode_return for e in tracker.update(ts)]
    env.close()
    host = carry

    env, loop, carry = build_loop(spec, num_envs)
    tracker = EpisodeTracker(num_envs)
    carry, _ = loop.first_act(carry, env.reset())
    handle, done = env.xla()[0], jnp.zeros((num_envs,), bool)
    compiled_returns = []
    for length in (25, 35):  # a chunk ends in the middle of a rollout
        carry, handle, done, out = loop.chunk(carry, handle, done, length)
        rows = jax.tree.map(np.asarray, out)
        for t in range(length):
            step = jax.tree.map(lambda x, t=t: x[t], rows)
            compiled_returns += [e.episode_return for e in tracker.update(step)]
    env.close()

    assert int(host.learner.updates) == int(carry.learner.updates) == (steps // T) * 6
    assert host_returns == compiled_returns and len(host_returns) > 3
    for a, b in zip(jax.tree.leaves(host.replay), jax.tree.leaves(carry.replay), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    params = lambda c: eqx.filter(c.learner.online, eqx.is_inexact_array)  # noqa: E731
    for x, y in zip(jax.tree.leaves(params(host)), jax.tree.leaves(params(carry)), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)


@pytest.mark.run
def test_pqn_trains_end_to_end(tmp_path):
    """The catalogue entry through zoo.train (host path), a budget of two rollouts."""
    result = zoo.train(
        "pqn",
        env="CartPole-v1",
        total_env_steps=2 * T * N,
        overrides=SMALL,
        num_envs=N,
        run_dir=tmp_path / "run",
        eval_every=2 * T * N,
        eval_episodes=1,
        loop="host",
        progress=False,
    )
    records = list(zoo.runs.metrics.read_jsonl(result.run_dir / "metrics.jsonl"))
    assert records[-1]["updates"] == 2 * 6 and np.isfinite(records[-1]["loss"])
    with pytest.raises(zoo.runs.rundir.RunRefusedError, match="one rollout"):
        zoo.train("pqn", env="CartPole-v1", total_env_steps=T * N - 1, overrides=SMALL,
                  num_envs=N, run_dir=tmp_path / "short", progress=False)  # fmt: skip


# --------------------------------------------------------- the presets' checked values

PURE = "mttga/purejaxql purejaxql/config/alg"

#: preset -> {dotted field path: (purejaxql's value in zoo's units, where it was checked)}
CHECKED = {
    "pqn_cartpole": {
        "network.hidden": ([256, 256], f"{PURE}/pqn_cartpole.yaml HIDDEN_SIZE, NUM_LAYERS"),
        "network.norm": ("layer_norm", f"{PURE}/pqn_cartpole.yaml NORM_TYPE"),
        "loss.value_transform.factor": (0.1, f"{PURE}/pqn_cartpole.yaml REW_SCALE"),
        "rollout.length": (64, f"{PURE}/pqn_cartpole.yaml NUM_STEPS"),
        "rollout.epochs": (4, f"{PURE}/pqn_cartpole.yaml NUM_EPOCHS"),
        "rollout.minibatches": (16, f"{PURE}/pqn_cartpole.yaml NUM_MINIBATCHES"),
        "rollout.td_lambda": (0.95, f"{PURE}/pqn_cartpole.yaml LAMBDA"),
        "optimizer.learning_rate.start": (1e-4, f"{PURE}/pqn_cartpole.yaml LR"),
        "optimizer.learning_rate.steps": (15616, "244 rollouts × 16 × 4 updates"),
        "optimizer.max_grad_norm": (10.0, f"{PURE}/pqn_cartpole.yaml MAX_GRAD_NORM"),
        "schedule.epsilon.end": (0.2, f"{PURE}/pqn_cartpole.yaml EPS_FINISH"),
        "schedule.epsilon.steps": (99942, "0.2 × 244 rollouts × 2048 transitions"),
    },
    "pqn_minatar": {
        "rollout.length": (32, f"{PURE}/pqn_minatar.yaml NUM_STEPS"),
        "rollout.minibatches": (32, f"{PURE}/pqn_minatar.yaml NUM_MINIBATCHES"),
        "rollout.epochs": (2, f"{PURE}/pqn_minatar.yaml NUM_EPOCHS"),
        "rollout.td_lambda": (0.65, f"{PURE}/pqn_minatar.yaml LAMBDA"),
        "optimizer.learning_rate.start": (5e-4, f"{PURE}/pqn_minatar.yaml LR"),
        "optimizer.learning_rate.steps": (156224, "2441 rollouts × 32 × 2 updates"),
        "schedule.epsilon.end": (0.05, f"{PURE}/pqn_minatar.yaml EPS_FINISH"),
        "schedule.epsilon.steps": (999834, "0.1 × 2441 rollouts × 4096 transitions"),
        "schedule.epsilon.begin": (0, "purejaxql decays ε from the first rollout"),
        "network.hidden": ([128], "purejaxql/pqn_minatar.py CNN nn.Dense(128)"),
        "network.torso.padding": ("VALID", "purejaxql/pqn_minatar.py CNN nn.Conv padding"),
    },
    "pqn_atari": {
        "rollout.length": (32, f"{PURE}/pqn_atari.yaml NUM_STEPS"),
        "rollout.minibatches": (32, f"{PURE}/pqn_atari.yaml NUM_MINIBATCHES"),
        "rollout.epochs": (2, f"{PURE}/pqn_atari.yaml NUM_EPOCHS"),
        "rollout.td_lambda": (0.65, f"{PURE}/pqn_atari.yaml LAMBDA"),
        "optimizer.learning_rate.value": (2.5e-4, f"{PURE}/pqn_atari.yaml LR"),
        "optimizer.max_grad_norm": (10.0, f"{PURE}/pqn_atari.yaml MAX_GRAD_NORM"),
        "schedule.epsilon.end": (0.001, f"{PURE}/pqn_atari.yaml EPS_FINISH"),
        "schedule.epsilon.steps": (4999987, "0.1 × 12207 rollouts × 4096 transitions"),
        "network.torso.norm": ("layer_norm", "purejaxql/pqn_atari.py CNN"),
    },
}
NUM_ENVS = {"pqn_cartpole": 32, "pqn_minatar": 128, "pqn_atari": 128}


@pytest.mark.parametrize("name", sorted(CHECKED))
@pytest.mark.unit
def test_pqn_presets_keep_purejaxqls_values(name):
    preset = zoo.load_preset(name)
    algorithm = spec_lib.algorithm_for(preset)
    for path, (value, source) in CHECKED[name].items():
        got = algorithm
        for part in path.split("."):
            got = getattr(got, part)
        assert got == (pytest.approx(value) if isinstance(value, float) else value), (path, source)
    assert preset.env.num_envs == NUM_ENVS[name]
    assert algorithm.optimizer.kind == "radam" and algorithm.loss.td.scale == 0.5
    assert algorithm.schedule.target_update_period == (
        algorithm.rollout.epochs * algorithm.rollout.minibatches
    )
    assert all(v.startswith("[V]") for v in preset.reference.sources.values())
    # each preset's rollout divides into its minibatches at its number of environments
    assert (algorithm.rollout.length * preset.env.num_envs) % algorithm.rollout.minibatches == 0


@pytest.mark.parametrize("save_replay", [True, False])
@pytest.mark.run
def test_resume_in_the_middle_of_a_rollout(tmp_path, save_replay):
    """A checkpoint 1.5 rollouts in: the resumed run learns on the steps after the boundary
    (the sealed or fresh store), and its phases fall where the credit says."""
    run = tmp_path / "run"
    common = dict(overrides=SMALL, num_envs=N, loop="host", progress=False, eval_episodes=1)
    zoo.train(
        "pqn", env="CartPole-v1", total_env_steps=3 * T * N // 2, run_dir=run,
        checkpoint_every=3 * T * N // 2, eval_every=3 * T * N, save_replay=save_replay, **common,
    )  # fmt: skip
    result = zoo.train(resume=run, total_env_steps=3 * T * N, progress=False)
    assert result.env_steps == 3 * T * N and result.updates == 3 * 6
    records = list(zoo.runs.metrics.read_jsonl(run / "metrics.jsonl"))
    assert np.isfinite(records[-1]["loss"])


@pytest.mark.parametrize("composition", ["munchausen", "munchausen_online", "double"])
@pytest.mark.compiled
def test_rollout_targets_compose_with_the_loss_axes(composition):
    """The rollout's targets read the same components as the loss: Munchausen's bonus and soft
    bootstrap from the target network (the bonus from the online one with
    ``loss.munchausen.policy: online``), or the double bootstrap (online selects, target
    evaluates), with a target network that lags (two different networks here)."""
    name = "munchausen_pqn" if composition.startswith("munchausen") else "pqn"
    extra = {
        "munchausen": {},
        "munchausen_online": {"loss.munchausen.policy": "online"},
        "double": {"loss.bootstrap": "double"},
    }[composition]
    spec = zoo.load_algorithm(name, overrides={**SMALL, **extra})
    online = zoo.build_network(
        spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(8)
    )
    target = zoo.build_network(
        spec, observation_shape=OBS, num_actions=ACTIONS, key=jax.random.key(9)
    )
    # wider action gaps, so that the Munchausen clip at −1 binds for some steps
    out = lambda net: net.streams.mlp.layers[-1].weight  # noqa: E731
    target = eqx.tree_at(out, target, out(target) * 6.0)
    if composition == "munchausen_online":
        online = eqx.tree_at(out, online, out(online) * 5.0)
    obs = jax.random.normal(jax.random.key(10), (T + 1, N, *OBS)) * 3
    rng = np.random.default_rng(2)
    action = rng.integers(0, ACTIONS, (T, N))
    reward = rng.normal(size=(T, N))
    term = np.zeros((T, N), bool)
    term[1, 2] = True
    got = zoo.build_loss(spec).rollout_targets(
        online, target, obs, jnp.asarray(action), jnp.asarray(reward, jnp.float32), term,
        np.zeros((T, N), bool), np.ones((T, N), bool), jax.random.key(0),
    )  # fmt: skip
    q_online = np.asarray(jax.vmap(jax.vmap(online))(obs).q_values, np.float64)
    q_target = np.asarray(jax.vmap(jax.vmap(target))(obs).q_values, np.float64)
    if composition.startswith("munchausen"):
        tau, alpha = 0.03, 0.9
        z = q_target / tau
        z_s = (q_online if composition == "munchausen_online" else q_target) / tau
        log_pi = z_s - z_s.max(-1, keepdims=True)
        log_pi = log_pi - np.log(np.exp(log_pi).sum(-1, keepdims=True))
        chosen = np.take_along_axis(log_pi[:-1], action[..., None], -1)[..., 0]
        assert (tau * chosen < -1).any() and (tau * chosen > -1).any()  # both sides of the clip
        reward = reward + alpha * np.clip(tau * chosen, -1.0, 0.0)
        value = tau * (np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1))[1:]
    else:
        pick = q_online[1:].argmax(-1)
        value = np.take_along_axis(q_target[1:], pick[..., None], -1)[..., 0]
    want = q_lambda_loop(reward, value, term, term & False, np.ones((T, N), bool), GAMMA, LAMBDA)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
