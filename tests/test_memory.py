"""Memory a user can plan on: the planned peak, its refusal, and (slow) the measured peak of a
real Atari run with the preset's 1M replay through a checkpoint and a resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from disk import disk_bytes, holes_supported

from zoo.runs.memory import RUN_OVERHEAD, SAFETY, MemoryPlan

GIB = 2**30


@pytest.mark.unit
def test_plan_peak_and_fit():
    # 1M Atari transitions: one 84×84 frame plus action, reward and four flags per slot
    replay = 1_000_000 * (84 * 84 + 4 + 4 + 4)
    memory = MemoryPlan(replay, 1_000_000, available=24 * GIB)
    assert memory.peak == replay + RUN_OVERHEAD
    assert memory.fits
    small = MemoryPlan(replay, 1_000_000, available=6 * GIB)
    assert not small.fits
    # room = 0.9 · 6 GiB − 1.5 GiB = 3.9 GiB at 7,068 bytes per transition → 592,472 → 590,000
    per = replay / 1_000_000
    expected = int((SAFETY * 6 * GIB - RUN_OVERHEAD) / per)
    assert expected == 592_472
    assert small.capacity_that_fits() == 590_000
    message = small.refusal("dqn_adam_mse on Breakout-v5")
    assert "--set replay.capacity=590000" in message
    assert "8.1 GiB" in message and "6.0 GiB is available" in message


@pytest.mark.unit
def test_plan_when_nothing_fits_or_memory_unknown():
    assert MemoryPlan(10 * GIB, 1000, available=GIB).capacity_that_fits() == 0
    assert (
        "free memory or use a machine with more"
        in MemoryPlan(10 * GIB, 1000, available=GIB).refusal()
    )
    unknown = MemoryPlan(10 * GIB, 1000, available=None)
    unknown.available = None
    assert unknown.fits and unknown.capacity_that_fits() == 1000


def _peak_gib(argv: list[str], cwd: Path) -> tuple[int, float, str]:
    """Run a child; its exit code, its own peak resident memory (``ru_maxrss``) and output."""
    log = cwd / f"log-{len(list(cwd.iterdir()))}.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 2**20, log.read_text()


@pytest.mark.process
@pytest.mark.xdist_group("atari_replay")  # ~7.7 GiB: one at a time
def test_atari_preset_with_1m_replay_stays_within_replay_plus_overhead(tmp_path: Path):
    """``zoo train dqn_adam_mse --env Breakout-v5`` with its 1M replay: learning, a checkpoint
    with the replay, evaluation, and a resume from that checkpoint each peak at most at the
    replay's bytes + 1.5 GiB (issue: a 2,000-step run peaked at 13.8 GiB, a checkpoint killed
    it at 22 GiB)."""
    import zoo
    from zoo.envs import make
    from zoo.runs.assemble import replay_for_env

    spec = zoo.spec.algorithm_for(zoo.spec.load_preset("dqn_adam_mse"))
    assert spec.replay.capacity == 1_000_000
    with make("Breakout-v5", num_envs=1, seed=0) as env:
        replay_bytes = replay_for_env(spec, env).nbytes()
    bound = (replay_bytes + RUN_OVERHEAD) / GIB

    zoo_cli = [sys.executable, "-m", "zoo.cli"]
    # evaluation plays random actions (ε = 1), so that its game ends within the step cap
    common = [
        "--eval-episodes", "1", "--eval-max-steps", "5000", "--eval-every", "100000",
        "--set", "schedule.eval_epsilon=1.0",
    ]  # fmt: skip
    # min_size lowered so that the learner runs (the preset's 20,000 would take minutes to
    # reach); the replay keeps the preset's capacity of 1M
    fresh = [
        *zoo_cli, "train", "dqn_adam_mse", "--env", "Breakout-v5", "--steps", "800",
        "--checkpoint-every", "400", "--set", "replay.min_size=200", "--run-dir", "run", *common,
    ]  # fmt: skip
    code, peak_fresh, out = _peak_gib(fresh, tmp_path)
    assert code == 0, out
    checkpoint = tmp_path / "run" / "checkpoints" / "800"
    assert checkpoint.is_dir()
    if holes_supported(tmp_path):
        # the replay's unfilled 999,200 slots are holes: the checkpoint takes the disk of 800
        # transitions and the networks (measured 101 MiB), not the replay's 6.6 GiB
        assert disk_bytes(checkpoint) < GIB / 4, disk_bytes(checkpoint)
    code, peak_resume, out = _peak_gib(
        [*zoo_cli, "train", "--resume", "run", "--steps", "1200"], tmp_path
    )
    assert code == 0, out
    assert "1,200 env steps" in out
    print(
        f"replay {replay_bytes / GIB:.2f} GiB; peak fresh {peak_fresh:.2f} GiB, "
        f"resume {peak_resume:.2f} GiB; bound {bound:.2f} GiB"
    )
    assert peak_fresh <= bound, f"fresh run peaked at {peak_fresh:.2f} GiB > {bound:.2f} GiB"
    assert peak_resume <= bound, f"resume peaked at {peak_resume:.2f} GiB > {bound:.2f} GiB"


@pytest.mark.skipif(
    (MemoryPlan(0, 1).available or 0) > 30 * GIB, reason="R2D2's 4M replay fits on this machine"
)
@pytest.mark.compiled
def test_r2d2_preset_that_cannot_fit_is_refused_before_anything_starts(tmp_path: Path, capsys):
    """``zoo reproduce r2d2`` names the preset's 4M-transition replay (~28 GiB), not the
    same-named catalogue entry's 1M, and the override that fits; nothing is written."""
    from zoo import cli

    code = cli.main(
        [
            "reproduce", "r2d2", "--games", "Pong", "--frames", "400000",
            "--run-dir", str(tmp_path / "out"), "--set", "replay.min_size=20000",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "its replay of 4,000,000 transitions is 26.71 GiB" in err
    fit = int(err.split("--set replay.capacity=")[1].split()[0])
    assert 0 < fit < 4_000_000
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.yaml"))


@pytest.mark.unit
def test_plan_counts_the_update_working_memory():
    # btr's measured working memory (3 GiB) beside a 1M Atari replay on a 12 GiB machine
    replay = 1_000_000 * (84 * 84 + 4 + 4 + 4)
    memory = MemoryPlan(replay, 1_000_000, available=12 * GIB, workspace_bytes=3 * GIB)
    assert memory.peak == replay + 3 * GIB + RUN_OVERHEAD
    assert memory.rest == 3 * GIB + RUN_OVERHEAD
    assert not memory.fits
    # room = 0.9 · 12 GiB − 1.5 GiB − 3 GiB = 6.3 GiB at 7,068 bytes per transition → 957,070
    assert int((SAFETY * 12 * GIB - RUN_OVERHEAD - 3 * GIB) / (replay / 1_000_000)) == 957_070
    assert memory.capacity_that_fits() == 950_000
    message = memory.refusal()
    assert "4.5 GiB for the rest of the run, 3.0 GiB of it the update's working memory" in message
    assert "--set replay.capacity=950000" in message
    # when not even an empty replay fits beside the update, the batch is what to lower
    huge = MemoryPlan(GIB, 1000, available=4 * GIB, workspace_bytes=4 * GIB)
    assert huge.capacity_that_fits() == 0
    assert "lower replay.batch_size" in huge.refusal()


_COMPILES: list[str] = []
_LISTENING: list[bool] = []


def _count_compiles(name: str, seconds: float, **kwargs: object) -> None:
    if _LISTENING and "backend_compile" in name:
        _COMPILES.append(name)


@pytest.mark.compiled
def test_compile_update_measures_the_update_and_its_first_call_reuses_it():
    """The host driver compiles the update before the replay exists and reports the compiled
    program's working memory: what an independent compilation of the same update on real
    arrays reports; the run's first update then compiles nothing; it grows with the batch."""
    import equinox as eqx
    import jax

    import zoo
    from zoo.envs import make
    from zoo.learner import Learner
    from zoo.loop import Loop
    from zoo.replay import build_replay

    jax.monitoring.register_event_duration_secs_listener(_count_compiles)
    env = make("CartPole-v1", num_envs=1, seed=0)
    base = zoo.spec.algorithm_for(zoo.load_preset("dqn_cartpole"))
    workspaces = []
    try:
        for batch_size in (64, 512):
            spec = zoo.load_algorithm(
                base,
                overrides={
                    "replay.capacity": 1000,
                    "replay.min_size": batch_size,
                    "replay.batch_size": batch_size,
                    "network.hidden": [256, 256],
                },
            )
            net = zoo.build_network(
                spec, observation_shape=env.observation_shape, num_actions=env.num_actions,
                key=jax.random.PRNGKey(0),
            )  # fmt: skip
            replay = build_replay(
                spec, num_envs=1, observation_shape=env.observation_shape,
                observation_dtype=env.observation_dtype,
            )  # fmt: skip
            learner = Learner(spec)
            loop = Loop(spec, env, learner, replay)
            state, key = learner.init(net, jax.random.PRNGKey(1)), jax.random.PRNGKey(2)
            workspace = loop.host.compile_update(state, key)

            carry = loop.init(state, key)
            _, _, batch, info = loop.host.sample(carry.replay, carry.deferred, carry.key)
            args = (carry.learner, batch, info, carry.metric_sums, carry.metric_count)
            _COMPILES.clear()
            _LISTENING.append(True)
            out = loop.host.update(*args)
            jax.block_until_ready(out)
            _LISTENING.clear()
            assert _COMPILES == []  # the first real update ran the program compiled above
            independent = eqx.filter_jit(loop.learn_step.update).lower(*args).compile().compiled
            assert workspace == independent.memory_analysis().temp_size_in_bytes > 0
            workspaces.append(workspace)
    finally:
        _LISTENING.clear()
        env.close()
    # 8× the batch: the activations the gradient keeps grow with it (the parameters' do not)
    assert workspaces[1] > 4 * workspaces[0]


@pytest.mark.skipif(
    (MemoryPlan(0, 1).available or 0) > 70 * GIB, reason="an 80 GiB update fits on this machine"
)
@pytest.mark.run
def test_an_update_that_cannot_fit_is_refused_and_leaves_no_run(tmp_path: Path, capsys):
    """A batch of 2^20 through two 4096-wide layers needs ~80 GiB of working memory: the run is
    refused once its update is compiled, before the replay is allocated, naming the working
    memory and the batch; the directory is left as it was, free for the corrected run."""
    from zoo import cli
    from zoo.runs import rundir

    out = tmp_path / "run"
    code = cli.main(
        [
            "train", "dqn_cartpole", "--loop", "host", "--steps", "1100000",
            "--run-dir", str(out), "--set", "replay.batch_size=1048576",
            "--set", "replay.min_size=1048576", "--set", "replay.capacity=1100000",
            "--set", "network.hidden=[4096,4096]",
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    working = float(err.split(" GiB of it the update's working memory")[0].rsplit(", ", 1)[1])
    # two [2^20, 4096] float32 activations are 16 GiB each; the gradient keeps them
    assert working > 32
    assert "lower replay.batch_size" in err
    assert rundir.classify(out) in ("absent", "empty", "interrupted_creation")
    assert not (out / "run.yaml").exists() and not (out / "history.jsonl").exists()


@pytest.mark.run
def test_a_run_lays_out_one_blueprint_and_checks_its_memory_once(tmp_path: Path, monkeypatch):
    """A new run is laid out once (before its directory is written) and that blueprint is the
    one built; its memory is checked once, with the update's working memory measured (the host
    driver compiles it from shapes); a resume lays out its own blueprint and checks it once;
    ``plan_memory`` reports the same bytes the run was checked with."""
    from tiny import tiny_overrides

    import zoo
    from zoo.runs import assemble

    laid_out: list[assemble.Blueprint] = []
    checked: list[tuple[assemble.Blueprint, int]] = []
    real_blueprint, real_check = assemble.blueprint, assemble.Blueprint.check

    def blueprint(*args, **kwargs):
        laid_out.append(real_blueprint(*args, **kwargs))
        return laid_out[-1]

    def check(self, workspace_bytes: int = 0) -> None:
        checked.append((self, workspace_bytes))
        real_check(self, workspace_bytes)

    monkeypatch.setattr(assemble, "blueprint", blueprint)
    monkeypatch.setattr(assemble.Blueprint, "check", check)
    run, quick = tmp_path / "run", tiny_overrides("dqn_cartpole")
    options = dict(overrides=quick, eval_episodes=1, checkpoint_every=400, progress=False)
    zoo.train("dqn_cartpole", total_env_steps=800, run_dir=run, loop="host", **options)
    assert len(laid_out) == 1 and len(checked) == 1
    ((new, workspace),) = checked
    assert new is laid_out[0] and workspace > 0
    zoo.train(resume=run, total_env_steps=1200, progress=False)
    assert len(laid_out) == 2 and len(checked) == 2 and checked[1][0] is laid_out[1]
    assert laid_out[1].data_bytes == new.data_bytes > 0
    planned = assemble.plan_memory("dqn_cartpole", overrides=quick)
    assert (planned.replay_bytes, planned.network_bytes) == (new.data_bytes, new.network_bytes)
