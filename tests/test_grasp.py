"""The grasp env (PyBullet, Panda, random_urdfs): loading, the object split, grasping, resets,
Gymnasium's checker, the reward, errors and the configs. Fast: a few short episodes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pybullet")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from hdppo.envs.builtin.grasp import Grasp, split_ids  # noqa: E402
from hdppo.envs.builtin.grasp.env import SPAWN_HALF, TRAY_POS, TRAY_TOP  # noqa: E402
from hdppo.envs.errors import EnvError  # noqa: E402
from hdppo.platform.config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env():
    e = Grasp(objects="train")
    yield e
    e.close()


def test_the_split_is_fixed_disjoint_and_covers_random_urdfs():
    train, held = split_ids("train"), split_ids("heldout")
    assert len(train) == 900 and len(held) == 100
    assert not set(train) & set(held)
    assert set(train) | set(held) == set(range(1000))
    assert held[:3] == [0, 10, 20]


def test_bad_object_arguments_name_the_fix():
    with pytest.raises(EnvError, match="heldout"):
        Grasp(objects="test")
    with pytest.raises(EnvError, match="0-999"):
        Grasp(objects=[5, 1200])
    with pytest.raises(EnvError, match="1 to 5"):
        Grasp(num_objects=0)


def test_arm_loads_and_starts_above_the_tray(env):
    obs, info = env.reset(seed=0)
    assert env._p.getNumJoints(env._robot) == 12
    assert obs.shape == env.observation_space.shape and obs.dtype == np.float32
    ee = obs[:3] + TRAY_POS
    assert abs(ee[0] - 0.55) < 0.08 and abs(ee[1]) < 0.08 and 0.18 < ee[2] < 0.32
    assert obs[6] == 0.0 and obs[5] > 0.9  # gripper open


def test_reset_places_objects_in_the_tray():
    e = Grasp(objects="heldout", num_objects=3)
    try:
        for seed in range(3):
            _, info = e.reset(seed=seed)
            assert all(n % 10 == 0 for n in info["objects"])
            for body in e._bodies:
                pos = np.asarray(e._p.getBasePositionAndOrientation(body)[0])
                assert np.all(np.abs(pos[:2] - TRAY_POS[:2]) <= SPAWN_HALF + 0.04), pos
                assert TRAY_TOP - 0.01 < pos[2] < TRAY_TOP + 0.08, pos
    finally:
        e.close()


def test_the_gripper_closes_on_an_object_and_lifts_it():
    """The scripted pick (above it, down, close, up) on object 851, seed 0."""
    from hdppo.envs.builtin.grasp.scripted import ScriptedPick

    e, pick = Grasp(objects=[851]), ScriptedPick()
    try:
        obs, info = e.reset(seed=0)
        grasped_at = None
        for t in range(40):
            obs, r, term, trunc, info = e.step(pick.act(obs))
            if grasped_at is None and info["grasped"][0]:
                grasped_at = t
                assert 0.05 < obs[5] < 0.95  # the fingers stopped on the object, not at zero
        assert grasped_at is not None and info["grasp_made"] == 1.0 and info["grasped"][0] == 1.0
        assert info["is_success"] == 1.0 and info["height"][0] > 0.08 and r > 0.9
    finally:
        e.close()


def test_phase_teacher_follows_a_scripted_pick():
    """phase_teacher says reach, then grasp once over the object, then lift exactly while the env
    says the object is held; and the hierarchy preset kickstarts its phase layer with it."""
    from hdppo.envs.builtin.grasp.scripted import ScriptedPick, phase_teacher

    e, pick = Grasp(objects=[851]), ScriptedPick()
    try:
        obs, info = e.reset(seed=0)
        phases = [phase_teacher({"agent": obs}, ["agent"])]
        held = [bool(info["grasped"][0])]
        for _ in range(40):
            obs, _, _, _, info = e.step(pick.act(obs))
            phases.append(phase_teacher({"agent": obs}, ["agent"]))
            held.append(bool(info["grasped"][0]))
    finally:
        e.close()
    assert phases[0] == 0 and any(held)
    assert all((ph == 2) == h for ph, h in zip(phases, held))
    first_grasp, first_lift = phases.index(1), phases.index(2)
    assert 0 < first_grasp < first_lift and set(phases[:first_grasp]) == {0}
    cfg = load_config(ROOT / "configs" / "grasp_hierarchy.yaml")
    assert cfg.layers[0].teacher.policy == "hdppo.envs.builtin.grasp.scripted:phase_teacher"


def test_a_simulation_blow_up_restarts_the_world_rather_than_returning_nan(monkeypatch):
    """PyBullet once returned NaN poses on reset in training: reset rebuilds the world and draws
    again; a blow-up mid-episode truncates it on the last sound observation."""
    e = Grasp(max_steps=10)
    real = Grasp._observe
    poisoned = {"n": 1}

    def observe(self):
        obs, q = real(self)
        if poisoned["n"] > 0:
            poisoned["n"] -= 1
            obs = obs.copy()
            obs[7] = np.nan
        return obs, q

    try:
        e.reset(seed=0)
        first_world = e._p
        monkeypatch.setattr(Grasp, "_observe", observe)
        poisoned["n"] = 1
        obs, _ = e.reset(seed=1)
        assert np.isfinite(obs).all() and e._p is not None and e._p is not first_world
        poisoned["n"] = 1
        out, r, term, trunc, info = e.step(np.zeros(5, np.float32))
        assert np.array_equal(out, obs) and r == 0.0 and trunc and not term and info["sim_blowup"] == 1.0
        obs, _ = e.reset()
        assert np.isfinite(obs).all()
        poisoned["n"] = 10   # never sound again: a clear error, not NaN
        with pytest.raises(EnvError, match="non-finite observation"):
            e.reset()
    finally:
        e.close()


def test_open_gripper_far_away_earns_only_the_reach_term(env):
    env.reset(seed=1)
    _, r, term, trunc, info = env.step(np.array([0, 0, 1, 0, -1], np.float32))
    assert not term and not trunc and 0.0 < r <= 0.1 and info["grasped"][0] == 0.0


def test_check_env():
    e = Grasp(max_steps=5)
    check_env(e, skip_render_check=True)
    e.close()


def test_render_is_a_tinyrenderer_image():
    e = Grasp(render_mode="rgb_array", render_size=(64, 48))
    try:
        e.reset(seed=0)
        img = e.render()
        assert img.shape == (48, 64, 3) and img.dtype == np.uint8 and img.std() > 5
    finally:
        e.close()


def test_follow_phase_rewards_each_phase_for_its_own_thing():
    from hdppo.envs.rewards import resolve_reward

    fn = resolve_reward("grasp_follow_phase")
    far = {"dist": np.array([0.3]), "pregrasp_dist": np.array([0.25]), "grasped": np.array([0.0]),
           "lift_progress": np.array([0.0]), "gripper_closed": 0.0}
    above = dict(far, pregrasp_dist=np.array([0.0]), dist=np.array([0.08]))
    held = dict(above, grasped=np.array([1.0]), gripper_closed=1.0, dist=np.array([0.0]), lift_progress=np.array([1.0]))
    reach, grasp, lift = np.eye(3)
    assert fn(command=reach, info=above) > fn(command=reach, info=far) + 0.5
    assert fn(command=grasp, info=held) > fn(command=grasp, info=above) + 1.0
    assert fn(command=lift, info=far) == 0.0 and fn(command=lift, info=held) == pytest.approx(4.0)
    pressed = dict(held, lift_progress=np.array([-0.2]))  # holding it pushed into the tray costs
    assert fn(command=lift, info=pressed) < 0.0 == fn(command=lift, info=dict(held, lift_progress=np.array([0.0])))
    assert fn(command=lift, info=dict(held, lift_progress=np.array([0.25]))) == pytest.approx(1.0)
    # With a target object: the command's second one-hot picks the object.
    two = {k: (np.concatenate([v, [0.0]]) if isinstance(v, np.ndarray) else v) for k, v in held.items()}
    assert fn(command=np.r_[lift, 0.0, 1.0], info=two) == 0.0


@pytest.mark.parametrize("name", ["grasp_hierarchy.yaml", "grasp_flat.yaml"])
def test_configs_load(name):
    from hdppo.platform.config import load_config

    cfg = load_config(ROOT / "configs" / name)
    assert cfg.env.entry_point == "hdppo.envs.builtin.grasp:make"
    assert cfg.layers[-1].name == "effector"
    if name == "grasp_hierarchy.yaml":
        assert cfg.layers[0].action.n == 3 and cfg.layers[-1].reward.intrinsic_fn == "grasp_follow_phase"


def test_grasp_table_gives_each_seed_their_mean_and_judges_the_target_with_its_interval():
    """`--run hierarchy=DIR0,DIR1,DIR2`: a row per run, their mean over seeds with its t-interval,
    and the 70% target met only when that interval stays above it."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import grasp as G

    def run(name, lift, grasp=95):
        def rate(k):
            return {"rate": k / 100, "ci95": [max(0, k - 9) / 100, min(100, k + 9) / 100], "n": 100}
        return {"run_dir": f"runs/{name}", "env_steps": 802_032, "return_mean": 30.0,
                "reach": rate(97), "grasp": rate(grasp), "lift": rate(lift)}

    report = {"machine": {}, "command": "t", "settings": {"episodes": 100},
              "trained": {"hierarchy": [run("s0", 91), run("s1", 65), run("s2", 88)], "flat": [run("f0", 91)]}}
    md = G.render_markdown(report)
    assert "| hierarchy (`configs/grasp_hierarchy.yaml`) | s1 | 802,032 | 97% [88, 100] | 95% [86, 100] | **65% [56, 74]** |" in md
    # (91 + 65 + 88) / 3 = 81.3, sd 14.2, t(2) 4.303: ± 35.3, so the interval reaches below 70%
    assert "| hierarchy | mean of 3 seeds ± 95% t | | 97.0% ± 0.0 | 95.0% ± 0.0 | **81.3% ± 35.3** |" in md
    assert "hierarchy: **not met by a margin** (the mean is above it, its interval reaches below) (mean of 3 seeds 81.3% ± 35.3)" in md
    assert "flat: met (91%)" in md
    report["trained"]["hierarchy"] = [run("s0", 88), run("s1", 90), run("s2", 86)]
    assert "hierarchy: met (mean of 3 seeds 88.0% ± 5.0)" in G.render_markdown(report)
    report["trained"]["hierarchy"] = [run("s0", 60), run("s1", 70)]
    assert "hierarchy: **not met** (mean of 2 seeds 65.0%" in G.render_markdown(report)


def test_phase_teacher_tolerance_widens_the_test_of_being_over_the_object():
    """teacher.kwargs.tolerance: 3 cm to the side of the pre-grasp point is still reach at the
    default 2 cm, and grasp at 4 cm; 5 cm is reach at both."""
    from hdppo.envs.builtin.grasp.env import EE_DIM, OBJ_DIM, PREGRASP_HEIGHT
    from hdppo.envs.builtin.grasp.scripted import phase_of, phase_teacher

    def obs(side):
        o = np.zeros(EE_DIM + OBJ_DIM, np.float32)
        o[EE_DIM:EE_DIM + 3] = [side, 0.0, -PREGRASP_HEIGHT]  # the object relative to the ee
        return o

    assert phase_of(obs(0.0)) == 1 and phase_of(obs(0.03)) == 0
    assert phase_teacher({"a": obs(0.03)}, ["a"], tolerance=0.04) == 1
    assert phase_teacher({"a": obs(0.05)}, ["a"], tolerance=0.04) == 0
    preset = load_config(ROOT / "configs" / "grasp_hierarchy.yaml").layers[0].teacher.kwargs
    assert phase_teacher({"a": obs(0.03)}, ["a"], **preset) == 1  # the preset widens it to 4 cm
