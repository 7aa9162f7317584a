"""The hexapod env: its model, terrain, pushes, contacts, API, errors, configs, and the exported
control layer replayed in MuJoCo."""
import json
import sys
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from hdppo.envs.builtin.hexapod import KINDS, LEG_NAMES, HexapodParams, build_mjcf, make
from hdppo.envs.builtin.hexapod.env import BODY_DIM, CONTACTS, COMMAND, PHASE, STATE_DIM, gait_action
from hdppo.envs.builtin.hexapod.terrain import generate
from hdppo.envs.errors import EnvError

ROOT = Path(__file__).resolve().parents[1]


def _settle(env, steps=25):
    for _ in range(steps):
        out = env.step(np.zeros(18, np.float32))
    return out


def test_model_has_six_actuated_legs_with_limits_and_feet():
    p = HexapodParams()
    m = mujoco.MjModel.from_xml_string(build_mjcf(p))
    assert m.nu == 18 >= 12 and m.njnt == 19  # a free joint + 3 hinges per leg
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in range(m.nu)]
    assert {n.rsplit("_", 1)[0] for n in names} == set(LEG_NAMES) and len(LEG_NAMES) == 6
    assert np.all(m.actuator_ctrllimited) and np.all(m.actuator_forcelimited)
    assert np.allclose(m.actuator_forcerange, [-p.max_torque, p.max_torque])
    feet = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"{leg}_foot") for leg in LEG_NAMES]
    assert min(feet) >= 0 and np.allclose(m.geom_friction[feet, 0], p.foot_friction)
    assert 2.0 < mujoco.mj_getTotalmass(m) < 3.0
    # legs splay symmetrically: left hips at +y, right at -y
    hips = np.array([m.body_pos[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, f"{leg}_coxa")] for leg in LEG_NAMES])
    assert np.all(hips[:3, 1] > 0) and np.all(hips[3:, 1] < 0)


def test_terrain_kinds_are_distinct_and_harder_with_difficulty():
    rng = np.random.default_rng(0)
    maps = {k: generate(k, rng, 0.8, 81, 4.0)[1] for k in KINDS if k != "mixed"}
    assert np.ptp(maps["flat"]) == 0.0
    for a in maps:
        for b in maps:
            if a < b:
                assert not np.allclose(maps[a], maps[b]), (a, b)
    for kind in ("gravel", "slopes", "steps"):
        easy = generate(kind, np.random.default_rng(1), 0.0, 81, 4.0)[1]
        hard = generate(kind, np.random.default_rng(1), 1.0, 81, 4.0)[1]
        assert np.abs(np.diff(hard, axis=1)).max() > np.abs(np.diff(easy, axis=1)).max(), kind
        assert np.all(hard >= 0)
    # steps have flat treads: few distinct heights
    assert len(np.unique(np.round(maps["steps"], 6))) < 40
    # the env writes the heightfield per episode, and the physics stands on it
    env = make(terrain="steps", difficulty=1.0, push_interval_s=0)
    env.reset(seed=0)
    first = env.model.hfield_data.copy()
    _, _, term, _, info = _settle(env)
    assert not term and abs(info["body_height"] - env.stand_height) < 0.03
    # Each reset draws the episode's terrain from the env's seeded generator and writes it, over
    # terrain_zmax, into the model's heightfield (and the height lookup the rewards use).
    def written(e, kind, seed):
        h = generate(kind, np.random.default_rng(seed), e.difficulty, e.params.terrain_cells, e._half)[1]
        return np.clip(h / e.params.terrain_zmax, 0.0, 1.0).ravel()

    def check(e, kind, seed):
        np.testing.assert_allclose(e.model.hfield_data, written(e, kind, seed), atol=1e-6)
        np.testing.assert_allclose(e.heights.h.ravel(), e.model.hfield_data * e.params.terrain_zmax, atol=1e-5)

    check(env, "steps", 0)
    env.reset(seed=2)   # steps are the same stairs every episode but for the coin (up or down): seed 2 flips it
    assert not np.allclose(env.model.hfield_data, first)
    check(env, "steps", 2)
    env2 = make(terrain="gravel", push_interval_s=0)
    env2.reset(seed=0)
    assert not np.allclose(env2.model.hfield_data, first)
    check(env2, "gravel", 0)
    gravel0 = env2.model.hfield_data.copy()
    env2.reset(seed=1)  # gravel: new bumps every episode
    assert not np.allclose(env2.model.hfield_data, gravel0)
    check(env2, "gravel", 1)


def test_push_changes_body_velocity():
    # kick (legged_gym's): the planar velocity jumps by 1 m/s, and the body slides along the push
    env = make(terrain="flat", push_interval_s=0)
    env.reset(seed=0)
    _settle(env)
    x0 = env.data.qpos[0]
    env.push(1.0, direction=0.0)
    assert env.data.qvel[0] > 0.9 and abs(env.data.qvel[1]) < 0.1
    assert env.step(np.zeros(18, np.float32))[4]["pushed"]
    _settle(env, 5)
    assert env.data.qpos[0] - x0 > 0.01
    # force: the same impulse through xfrc_applied over 0.1 s
    env = make(terrain="flat", push_interval_s=0, push_mode="force")
    env.reset(seed=0)
    _settle(env)
    y0 = env.data.qpos[1]
    env.push(1.0, direction=np.pi / 2)
    env.step(np.zeros(18, np.float32))
    assert env.data.xfrc_applied[env._torso, 1] > 0 and env.data.qvel[1] > 0.2
    _settle(env, 10)
    assert np.all(env.data.xfrc_applied == 0.0) and env.data.qpos[1] - y0 > 0.01
    # scheduled pushes: every push_interval_s
    env = make(terrain="flat", push_interval_s=1.0)
    env.reset(seed=0)
    pushed = sum(env.step(np.zeros(18, np.float32))[4]["pushed"] for _ in range(100))  # 4 s
    assert 3 <= pushed <= 4


def test_contacts_when_standing_and_none_in_the_air():
    env = make(terrain="flat", push_interval_s=0)
    obs, _ = env.reset(seed=0)
    obs, _, term, _, info = _settle(env)
    assert not term and np.all(info["contacts"] == 1) and np.all(obs[CONTACTS] == 1)
    env.data.qpos[2] += 0.3
    mujoco.mj_forward(env.model, env.data)
    env._measure()
    assert np.all(env.contacts() == 0)


def test_check_env_and_spaces():
    for kwargs in ({}, {"task": "goal", "command_in_obs": False, "goal_in_obs": True}):
        env = make(**kwargs)
        check_env(env, skip_render_check=True)
        assert env.observation_space is env.observation_space and env.metadata["name"] == "hexapod_v0"
    assert make().observation_space.shape == (BODY_DIM + 3,)
    assert make(task="goal", command_in_obs=False, goal_in_obs=True).observation_space.shape == (BODY_DIM + STATE_DIM,)
    env = make()
    obs, _ = env.reset(seed=3)
    assert np.allclose(obs[COMMAND], env.command) and env.state().shape == (STATE_DIM,)


def _walk_open_loop(command, terrain="flat", seconds=8.0, seed=0):
    """Mean (vx, vy, yaw rate) after the first second of walking the scripted gait at ``command``, and falls."""
    env = make(terrain=terrain, action_mode="gait", difficulty=0.5, push_interval_s=0, max_steps=10**6)
    env.reset(seed=seed)
    got, fell = [], False
    for _ in range(int(seconds / env.dt)):
        _, _, terminated, _, info = env.step(gait_action(command))
        got.append([*info["body_velocity"], info["yaw_rate"]])
        fell = fell or info["fell"]
    return np.mean(got[25:], 0), fell


@pytest.mark.parametrize("terrain", ["flat", "gravel"])
def test_gait_mode_walks_where_it_is_commanded_open_loop(terrain):
    """The tripod gait generator alone, its parameters from the command by the measured gains,
    follows forward, sideways and turning commands on flat ground and gravel without falling; a
    still command stands still."""
    for command in ([0.3, 0.0, 0.0], [-0.25, 0.0, 0.0], [0.0, 0.2, 0.0], [0.0, 0.0, 0.6], [0.2, 0.0, -0.4]):
        v, fell = _walk_open_loop(command, terrain)
        assert not fell
        assert v[:2] == pytest.approx(command[:2], abs=0.07), (terrain, command, v)
        assert v[2] == pytest.approx(command[2], abs=0.15), (terrain, command, v)
    v, _ = _walk_open_loop([0.0, 0.0, 0.0], terrain)
    assert np.abs(v).max() < 0.03


def test_gait_mode_spaces_phase_and_residuals():
    env = make(action_mode="gait")
    check_env(env, skip_render_check=True)
    assert env.action_space.shape == (21,) and env.observation_space.shape == (BODY_DIM + 2 + 3,)
    obs, _ = env.reset(seed=1)
    assert obs[PHASE] == pytest.approx([0.0, 1.0]) and np.allclose(obs[BODY_DIM + 2:], env.command)
    obs, *_ = env.step(np.zeros(21, np.float32))
    assert np.hypot(*obs[PHASE]) == pytest.approx(1.0) and obs[PHASE][0] > 0  # the phase moved on
    assert np.all(np.abs(env.command) <= env.command_high + 1e-6) and env.command_high[0] > 0.25
    # residuals move the joint targets around the gait's, by a quarter of the joint mode's scale
    a = np.zeros(21, np.float32)
    env.reset(seed=1)
    env.step(a)
    base = env.data.ctrl.copy()
    env.reset(seed=1)
    a[3] = 1.0
    env.step(a)
    assert env.data.ctrl[0] - base[0] == pytest.approx(0.25 * 0.5)


def test_bad_arguments_name_the_field_and_choices():
    with pytest.raises(EnvError, match=r"terrain='lava' is not one of 'flat', 'gravel', 'slopes', 'steps', 'mixed'"):
        make(terrain="lava")
    with pytest.raises(EnvError, match="task="):
        make(task="dance")
    with pytest.raises(EnvError, match=r"difficulty=1.5 must lie in \[0, 1\]"):
        make(difficulty=1.5)
    with pytest.raises(EnvError, match="command_in_obs"):
        make(task="goal")
    with pytest.raises(EnvError, match=r"action_mode='torque' is not one of 'joints', 'gait'"):
        make(action_mode="torque")
    with pytest.raises(EnvError, match=r"gait_hz=9 must lie in \(0, 5\]"):
        make(action_mode="gait", gait_hz=9)


def test_curriculum_moves_difficulty():
    env = make(terrain="gravel", difficulty=0.5, curriculum=True, push_interval_s=0, max_steps=5)
    env.reset(seed=0)
    env._episode.update(fell=True)
    env.reset()
    assert env.difficulty == pytest.approx(0.4)
    seen = []
    env = make(terrain="gravel", curriculum=lambda e, last: 0.9 if last else 0.1, push_interval_s=0)
    env.reset(seed=0)
    seen.append(env.difficulty)
    env.reset()
    seen.append(env.difficulty)
    assert seen == [0.1, 0.9]


def test_rewards_registered_and_follow_commands():
    from hdppo.envs.rewards import resolve_reward

    track = resolve_reward("hexapod_velocity_tracking")
    way = resolve_reward("hexapod_waypoint_following")
    info = {"body_velocity": np.array([0.2, 0.0]), "yaw_rate": 0.0, "stability_penalty": 0.0, "fell": False}
    assert track(command=np.array([0.2, 0.0, 0.0]), info=info) > track(command=np.array([-0.2, 0.0, 0.0]), info=info)
    assert way(command=np.array([1.0, 0.0]), info={"agent_0": info}) > way(command=np.array([0.0, 1.0]), info={"agent_0": info})
    assert track(command=np.zeros(3), info={**info, "fell": True}) < 0


def test_configs_load_and_the_walk_skill_fits_the_control_layer():
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.config import load_config

    walk = load_config(ROOT / "configs" / "hexapod_walk.yaml")
    terrain = load_config(ROOT / "configs" / "hexapod_terrain.yaml")
    load_config(ROOT / "configs" / "hexapod_terrain_flat.yaml")
    assert [layer.name for layer in terrain.layers] == ["route", "locomotion", "control"]
    assert terrain.layer_groups() == [["route"], ["locomotion"]]  # control is frozen: the walk skill
    data = terrain.model_dump()
    data["layers"][2]["schedule"] = {"mode": "frozen"}
    from hdppo.platform.config import validate

    _, _, specs = probe_env(validate(data), 0, 1)
    _, _, walk_specs = probe_env(walk, 0, 1)
    assert specs[2].obs_dim == walk_specs[0].obs_dim == BODY_DIM + 2 + 3  # the body, the gait phase, the command
    assert specs[0].every == 50 and specs[1].every == 10


def test_renders_rgb_array():
    env = make(terrain="steps", render_mode="rgb_array")
    env.reset(seed=0)
    try:
        frame = env.render()
    except Exception as exc:  # noqa: BLE001 - no offscreen GL on this machine
        pytest.skip(f"no offscreen rendering: {exc}")
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8 and frame.std() > 5
    env.close()


def test_benchmark_measures_recovery_and_gait():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from hexapod import gait_period, push_recoveries

    t = np.arange(100)
    contacts = np.stack([(t + 3 * k) % 10 < 6 for k in range(6)], 1).astype(float)
    assert gait_period(contacts, 0.04) == pytest.approx(0.4)
    base = {"body_height": 0.1, "tilt": 0.0, "body_velocity": np.zeros(2), "fell": False, "pushed": False,
            "is_success": False}
    infos = [dict(base) for _ in range(80)]
    infos[40]["pushed"] = True
    for k in range(40, 46):
        infos[k] = {**infos[k], "body_velocity": np.array([0.8, 0.0])}
    # Knocked off its velocity only: recovered at once by height and tilt (the target's measure),
    # after 6 steps once the velocity must come back too.
    assert push_recoveries(infos, 0.04) == ([0], 0)
    assert push_recoveries(infos, 0.04, velocity=True) == ([6], 0)
    for k in range(40, 44):
        infos[k] = {**infos[k], "body_height": 0.06}   # 4 cm low: out of the 3 cm bound
    assert push_recoveries(infos, 0.04) == ([4], 0)
    assert push_recoveries(infos, 0.04, velocity=True) == ([6], 0)
    infos[50] = {**infos[50], "fell": True}
    for k in range(46, 80):
        infos[k] = {**infos[k], "tilt": 0.5}
    assert push_recoveries(infos, 0.04) == ([None], 0)
    # Still off balance when the episode ends at the goal 20 steps after the push: censored where the
    # window (3 cycles) is longer than what was left, a failure where it had time, or where it fell.
    arrived = [dict(base) for _ in range(60)]
    arrived[40]["pushed"] = True
    for k in range(40, 60):
        arrived[k] = {**arrived[k], "tilt": 0.5}
    arrived[-1] = {**arrived[-1], "is_success": True}
    assert push_recoveries(arrived, 0.04, window=43) == ([], 1)
    assert push_recoveries(arrived, 0.04, window=15) == ([None], 0)
    arrived[45] = {**arrived[45], "fell": True}
    assert push_recoveries(arrived, 0.04, window=43) == ([None], 0)
    arrived[45] = {**arrived[45], "fell": False}
    arrived[-1] = {**arrived[-1], "is_success": False}  # ended otherwise (time, off the map): a failure
    assert push_recoveries(arrived, 0.04, window=43) == ([None], 0)


@pytest.fixture(scope="module")
def walk_run(tmp_path_factory):
    """configs/hexapod_walk.yaml trained in-process for two tiny updates."""
    from hdppo.platform.config import load_config
    from hdppo.platform.trainer import Trainer

    cfg = load_config(ROOT / "configs" / "hexapod_walk.yaml", [
        "train.total_env_steps=256", "train.eval_episodes=0", "train.checkpoint_every=1", "ray.backend=local",
        "layers.0.dppo.num_envs_per_worker=2", "layers.0.dppo.train_batch_size=128", "layers.0.ppo.minibatch_size=64",
        "env.kwargs.max_steps=64"])
    run_dir = tmp_path_factory.mktemp("hexapod") / "walk"
    Trainer(cfg, run_dir, quiet=True).train()
    return run_dir


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_exported_control_layer_replays_in_mujoco(walk_run, fmt, tmp_path):
    """The exported control layer drives the MuJoCo hexapod: on the states it visits, its actions
    are the in-process policy's, so both drive the same trajectory."""
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.cli import main
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import frozen_normalizer
    from hdppo.policies.networks import ActorCritic

    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime")
        pytest.importorskip("onnxscript")
    out = tmp_path / ("control.pt" if fmt == "torchscript" else "control.onnx")
    assert main(["export", str(walk_run), "--layer", "control", "--format", fmt, "--out", str(out)]) == 0
    layout = json.loads(out.with_name(out.name + ".json").read_text())
    assert layout["inputs"][0]["shape"][1] == BODY_DIM + 2 + 3
    if fmt == "torchscript":
        scripted = torch.jit.load(str(out))

        def exported(obs):
            with torch.no_grad():
                return scripted(torch.from_numpy(obs[None])).numpy()[0]
    else:
        session = ort.InferenceSession(str(out))

        def exported(obs):
            return session.run(["action"], {"obs": obs[None]})[0][0]

    cfg = load_config(walk_run / "config.yaml")
    state = learner_states(load_checkpoint(latest_checkpoint(walk_run)))["control"]
    p = cfg.layer("control").policy
    env = make(**cfg.env.kwargs)
    policy = ActorCritic(env.observation_space.shape[0], env.action_space, p.hidden, p.activation, p.init_log_std)
    policy.load_state_dict(state["policy"])
    norm = frozen_normalizer(cfg, "control", env.observation_space.shape[0], state)

    def in_process(obs):
        a, _, _ = policy.act(torch.from_numpy(norm(obs[None].astype(np.float32))), deterministic=True)
        return policy.head.to_env_array(a)[0]

    trajectories = []
    for act in (exported, in_process):
        env = make(**cfg.env.kwargs)
        obs, _ = env.reset(seed=5)
        qpos = []
        for _ in range(60):
            a = act(obs)
            np.testing.assert_allclose(exported(obs), in_process(obs), rtol=1e-5, atol=1e-5)
            obs, _, term, trunc, _ = env.step(a)
            qpos.append(env.data.qpos.copy())
            if term or trunc:
                break
        trajectories.append(np.array(qpos))
    assert len(trajectories[0]) == len(trajectories[1]) > 10
    np.testing.assert_allclose(trajectories[0], trajectories[1], atol=1e-4)


def test_benchmark_reports_both_recovery_measures(tmp_path):
    """benchmarks/hexapod.py's smoke run of the scripted gait: the table carries the target's
    recovery measure (height and tilt) and the stricter one with velocity, and the verdict names
    both (the smoke run's 4 s episodes hold no push; push_recoveries' own test has the logic)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import hexapod as bench

    assert bench.main(["--scripted", "--quick", "--terrains", "gravel", "--out", str(tmp_path / "hex")]) == 0
    md = (tmp_path / "hex.md").read_text()
    assert "with velocity too [95% CI]" in md and "pushes recovered (height and tilt)" in md
    assert "out of bounds at all" in md and "left the height and tilt bounds at all" in md
