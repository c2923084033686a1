"""ALE's own vector environment (ale-py) as a second Atari backend, against envpool (no mocks).

The semantic tests of tests/test_envs.py (stacks, truncation, lost lives, reward clipping, the
XLA step) run on both backends. Here: the id and keyword mapping, the refusals, and the two
emulators compared frame for frame. ALE's ``preprocessed_env.cpp`` (ale-py 0.12) and envpool's
``atari_env.h`` differ where :meth:`zoo.envs.Protocol.backend_differences` says; with one frame per
step and no randomness the only difference left is envpool's one no-op frame after each game's
reset, and the two then play the same games, pixel for pixel.
"""

from __future__ import annotations

import numpy as np
import pytest

import zoo.envs as ze

pytest.importorskip("ale_py")


@pytest.mark.unit
def test_every_envpool_atari_game_has_an_ale_rom():
    from envpool.registration import registry

    from zoo.envs.backends import ale_rom

    games = [name for name, entry in registry.specs.items() if entry[0] == "envpool.atari"]
    assert len(games) == 104
    roms = {game: ale_rom(game) for game in games}
    assert roms["MsPacman-v5"] == "ms_pacman" and roms["Breakout-v5"] == "breakout"
    assert roms["KungFuMaster-v5"] == "kung_fu_master" and roms["UpNDown-v5"] == "up_n_down"
    assert len(set(roms.values())) == 104  # one ROM per game


@pytest.mark.unit
def test_ale_keywords_per_protocol():
    """ALE draws 0..noop_max−1 no-op frames and caps episodes in frames (module docstring)."""
    a100k = ze.get_protocol("atari_100k").ale_kwargs(True, "Breakout-v5")
    assert a100k == {
        "repeat_action_probability": 0.0,
        "full_action_space": False,
        "noop_max": 117,  # 0..116 frames; envpool: 1..116
        "use_fire_reset": False,
        "frameskip": 4,
        "stack_num": 4,
        "img_height": 84,
        "img_width": 84,
        "grayscale": True,
        "maxpool": True,
        "episodic_life": False,
        "life_loss_info": False,
        "reward_clipping": False,
        "max_num_frames_per_episode": 108_000,
    }
    dopamine = ze.get_protocol("dopamine_2018").ale_kwargs(False, "Pong-v5")
    assert dopamine["noop_max"] == 0  # no no-op start, as Dopamine (envpool: one fixed frame)
    assert ze.get_protocol("nature_2015").ale_kwargs(True)["noop_max"] == 31
    with pytest.raises(ValueError, match="does not run on ALE"):
        ze.get_protocol("classic").ale_kwargs(True)


@pytest.mark.unit
def test_backend_gaps_and_differences():
    purejaxql = ze.get_protocol("purejaxql_atari")
    assert purejaxql.backend_gaps("envpool") == ()
    (gap,) = purejaxql.backend_gaps("ale")
    assert "FIRE" in gap and "envpool" in gap
    assert purejaxql.backend_differences("ale") == ()  # refused, not approximated
    assert ze.get_protocol("classic").backend_gaps("ale")
    nature = ze.get_protocol("nature_2015")
    assert nature.backend_gaps("ale") == () and nature.backend_differences("envpool") == ()
    noops, cap, last = nature.backend_differences("ale")
    assert "0..30 frames" in noops and "1..30" in noops
    assert "terminated" in cap and "grabbing" in last
    assert "no no-op frame" in ze.get_protocol("machado_2018").backend_differences("ale")[0]


@pytest.mark.compiled
def test_ale_refuses_what_it_cannot_run():
    with pytest.raises(ze.UnsupportedEnvironmentError, match="Atari games only"):
        ze.make("CartPole-v1", backend="ale")
    with pytest.raises(ze.UnsupportedEnvironmentError, match="FIRE before the no-op"):
        ze.make("Breakout-v5", protocol="purejaxql_atari", backend="ale")
    with pytest.raises(ze.UnknownEnvironmentError, match="Breakout-v5"):
        ze.make("Breakoutt-v5", backend="ale")
    with pytest.raises(ValueError, match="auto, envpool, ale, gymnasium"):
        ze.make("Breakout-v5", backend="gym")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="life-loss signals are not used"):
        ze.make("Breakout-v5", backend="ale", env_kwargs={"life_loss_info": True})


@pytest.mark.compiled
def test_ale_spellings_and_shapes_match_envpool():
    made = {}
    for backend in ("envpool", "ale"):
        with ze.make("ALE/MsPacman-v5", protocol="atari_100k", num_envs=3, backend=backend) as env:
            timestep = env.reset()
            made[backend] = (
                env.env_id,
                env.observation_shape,
                env.observation_dtype,
                env.num_actions,
                env.max_episode_steps,
                timestep.observation.shape,
                timestep.first.tolist(),
                timestep.valid.tolist(),
            )
    assert made["ale"] == made["envpool"]
    assert made["ale"][:5] == ("MsPacman-v5", (4, 84, 84), np.dtype(np.uint8), 9, 27_000)


def _play(env: ze.VectorEnv, actions: np.ndarray, noop_after_start: bool) -> list[tuple]:
    """(raw reward, game over, newest frame) per agent step of ``actions``; with
    ``noop_after_start`` one NOOP step, not recorded, follows each game's first observation."""
    out = []
    timestep = env.reset()
    for action in actions:
        if noop_after_start and timestep.first[0]:
            env.step(np.zeros(1, np.int32))
        timestep = env.step(np.array([action], np.int32))
        out.append((timestep.raw_reward[0], timestep.game_over[0], timestep.observation[0, -1]))
    return out


@pytest.mark.parametrize(("game", "steps"), [("Breakout-v5", 2_000), ("SpaceInvaders-v5", 2_600)])
@pytest.mark.compiled
def test_one_frame_per_step_the_backends_play_the_same_games(game, steps):
    """Frame skip 1, no sticky actions, no no-op starts (``dopamine_2018`` without its sticky
    actions, evaluation): envpool runs one NOOP frame after each reset (its ``noop_max=1``) and
    ALE none, so ALE is given that NOOP as an extra step at each game start. Then a fixed random
    action sequence gives the same rewards, the same game ends and the same 84×84 frames
    (grayscale, resize) on both, across autoresets, except the frame of a game's last step:
    ALE stops before grabbing it and repeats the step before's (``backend_differences``)."""
    actions = np.random.default_rng(0).integers(0, 4, steps).astype(np.int32)
    played = {}
    for backend, skip in (("envpool", "frame_skip"), ("ale", "frameskip")):
        with ze.make(
            game,
            protocol="dopamine_2018",
            seed=3,
            training=False,
            backend=backend,
            env_kwargs={skip: 1, "repeat_action_probability": 0.0},
        ) as env:
            assert env.protocol.noop_max == 0
            played[backend] = _play(env, actions, noop_after_start=backend == "ale")
    envpool, ale = played["envpool"], played["ale"]
    ends = [t for t, (_, over, _) in enumerate(envpool) if over]
    assert ends and ends[0] < steps - 100  # the next game is played too
    assert sum(r for r, _, _ in envpool) > 0
    for t, ((r0, over0, frame0), (r1, over1, frame1)) in enumerate(zip(envpool, ale, strict=True)):
        assert (r0, over0) == (r1, over1), t
        if over0:
            np.testing.assert_array_equal(frame1, ale[t - 1][2], err_msg=f"step {t}")
        else:
            np.testing.assert_array_equal(frame0, frame1, err_msg=f"step {t}")


@pytest.mark.compiled
def test_zoo_train_refuses_what_ale_cannot_run_before_writing_anything(cli, tmp_path):
    """``--env-backend ale`` is a run setting: a classic-control id or a protocol ALE cannot
    express is refused with the reason (exit 2, no traceback) and no run directory is left."""
    code, _, err = cli("train", "dqn_cartpole", "--env-backend", "ale", "--run-dir", "a",
                       cwd=tmp_path)  # fmt: skip
    assert code == 2 and "Atari games only, not 'CartPole-v1'" in err
    code, _, err = cli("train", "preset:pqn_atari", "--env-backend", "ale", "--steps", "5000",
                       "--run-dir", "b", cwd=tmp_path)  # fmt: skip
    assert code == 2 and "cannot be run exactly on the ale backend" in err and "FIRE" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


@pytest.mark.unit
def test_zoo_show_says_which_backends_run_a_preset_protocol(cli):
    code, out, _ = cli("show", "preset:drq_eps")
    assert code == 0
    assert "backends: envpool (auto), ale (3 differences from envpool" in out
    code, out, _ = cli("show", "preset:pqn_atari")
    assert "backends: envpool (auto); not ale: ALE presses FIRE" in out
