"""Driving with highway-env: highway-fast-v0 by config alone through hdppo's loader, the
roundabout adapter (outcome in info, the tactic-following reward), errors and configs. Fast:
a few env steps each."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("highway_env")

from hdppo.envs.errors import EnvError  # noqa: E402
from hdppo.envs.loading import make_gym_env  # noqa: E402
from hdppo.platform.config import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_highway_config_makes_and_steps_the_env_through_the_loader():
    cfg = load_config(ROOT / "configs" / "highway.yaml")
    assert cfg.env.id == "highway_env:highway-fast-v0" and cfg.layers[0].dppo.num_workers == 2
    env = make_gym_env(cfg.env.id, cfg.env.entry_point, cfg.env.kwargs, cfg.env.max_episode_steps)
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.shape == (5, 5) and env.action_space.n == 5
        for _ in range(3):
            obs, r, term, trunc, info = env.step(1)  # IDLE
            assert env.observation_space.contains(obs) and 0.0 <= r <= 1.0 and "crashed" in info
    finally:
        env.close()


def test_the_time_to_collision_preset_gives_the_policy_both_views_flattened():
    """configs/highway_ttc.yaml: a Tuple of Kinematics (5 x 5) and TimeToCollision (3 x 3 x 10),
    which hdppo's sampler flattens into one input of 115 values, the TTC grid after the vehicles."""
    from hdppo.envs.vector import GymnasiumCopies

    cfg = load_config(ROOT / "configs" / "highway_ttc.yaml")
    make = lambda: make_gym_env(cfg.env.id, cfg.env.entry_point, cfg.env.kwargs, cfg.env.max_episode_steps)  # noqa: E731
    env = make()
    try:
        space = env.observation_space
        assert [s.shape for s in space.spaces] == [(5, 5), (3, 3, 10)]
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    pool = GymnasiumCopies(make, 1, name="highway_ttc")
    try:
        first = pool.reset(seed=0)
        assert pool.obs_dim == 115 and first.obs.shape == (1, 1, 115)
        np.testing.assert_allclose(first.obs[0, 0, 25:], np.asarray(obs[1], np.float32).ravel())
    finally:
        pool.close()


def test_a_misspelt_highway_id_names_the_right_one():
    with pytest.raises(EnvError, match="highway-fast-v0"):
        make_gym_env("highway_env:highway-fastt-v0")


def test_roundabout_config_and_adapter_report_the_outcome():
    cfg = load_config(ROOT / "configs" / "highway_roundabout_hierarchy.yaml")
    assert [layer.name for layer in cfg.layers] == ["tactic", "drive"]
    assert cfg.layers[0].action.n == 4 and cfg.layers[1].reward.intrinsic_fn == "driving_follow_tactic"
    env = make_gym_env(None, cfg.env.entry_point, cfg.env.kwargs)
    try:
        _, info = env.reset(seed=0)
        assert env.metadata["name"].startswith("driving_")
        for key in ("lane", "on_ring", "exited", "crash", "is_success", "timeout"):
            assert key in info
        done = False
        for _ in range(12):  # IDLE at 8 m/s: the ego enters the ring and leaves by its exit in 11 s
            _, _, term, trunc, info = env.step(1)
            if term or trunc:
                done = True
                break
        assert done
        assert info["is_success"] + info["crash"] + info["timeout"] == 1.0
    finally:
        env.close()


def test_exit_reward_is_paid_once_on_reaching_the_exit():
    """Same seed, same IDLE driving: the returns differ by exit_reward exactly when the ego exits,
    and it is paid on the step ``exited`` turns 1, not again."""
    from hdppo.envs.builtin.driving import make

    def drive(seed, exit_reward):
        env = make(exit_reward=exit_reward)
        try:
            env.reset(seed=seed)
            rewards, exited = [], []
            for _ in range(12):
                _, r, term, trunc, info = env.step(1)
                rewards.append(r)
                exited.append(info["exited"])
                if term or trunc:
                    break
            return np.array(rewards), np.array(exited)
        finally:
            env.close()

    outcomes = set()
    for seed in (0, 6):   # IDLE crashes on seed 0 and exits, on its last step, on seed 6
        plain, exited = drive(seed, 0.0)
        paid, _ = drive(seed, 10.0)
        first = np.flatnonzero(exited)
        expected = plain.copy()
        if first.size:
            expected[first[0]] += 10.0
        np.testing.assert_allclose(paid, expected)
        outcomes.add(bool(first.size))
    assert outcomes == {True, False}   # the seeds cover an exit and a crash


def test_exit_reward_must_be_finite():
    from hdppo.envs.builtin.driving import make

    with pytest.raises(EnvError, match="exit_reward"):
        make(exit_reward=float("nan"))


def test_unknown_roundabout_id_lists_the_ids():
    from hdppo.envs.builtin.driving import make

    with pytest.raises(EnvError, match="roundabout-v1"):
        make(env_id="roundabot-v1")


def test_follow_tactic_rewards_lane_and_speed():
    from hdppo.envs.rewards import resolve_reward

    fn = resolve_reward("driving_follow_tactic")
    inner_slow, inner_fast, outer_slow, _ = np.eye(4)
    on_inner_slow = {"on_ring": 1.0, "lane": 0, "speed": 8.0, "crash": 0.0}
    assert fn(command=inner_slow, info=on_inner_slow) == pytest.approx(1.0)
    assert fn(command=outer_slow, info=on_inner_slow) == pytest.approx(0.5)   # wrong lane
    assert fn(command=inner_fast, info=on_inner_slow) == pytest.approx(0.75)  # 8 m/s short
    assert fn(command=inner_slow, info=dict(on_inner_slow, crash=1.0)) == pytest.approx(0.0)
    assert fn(command=outer_slow, info=dict(on_inner_slow, on_ring=0.0)) == pytest.approx(1.0)  # off the ring


def test_highway_frames_are_drawn_under_hdppos_headless_settings():
    """hdppo eval --video sets SDL up without a display; highway-env must still draw (under SDL's
    "dummy" driver its viewer turns itself off and every frame is black)."""
    import os
    import subprocess
    import sys

    code = ("from hdppo.platform.video import headless; headless()\n"
            "import gymnasium as gym\n"
            "env = gym.make('highway_env:highway-fast-v0', render_mode='rgb_array'); env.reset(seed=0)\n"
            "img = env.render(); print(img.shape, float(img.std()))\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SDL_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean, timeout=120, check=True)
    shape, std = out.stdout.strip().rsplit(" ", 1)
    assert shape == "(150, 600, 3)" and float(std) > 10.0, out.stdout


def test_scripted_driving_baselines_and_their_table():
    """benchmarks/highway.py's no-learning rows: always IDLE and random meta-actions, with the
    outcome rates the trained rows have; IDLE on the roundabout ends every episode one way."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import highway as H

    rows = [H.scripted_run("roundabout-v1", policy, 2, seed=3) for policy in H.SCRIPTED]
    for r in rows:
        assert r["episodes"] == 2 and 1 <= r["length_mean"] <= 12
        assert r["is_success"]["k"] + r["crash"]["k"] + r["timeout"]["k"] == 2
    md = H.render_markdown({"machine": {}, "command": "test", "trained": {}, "scripted": rows})
    assert "| roundabout-v1 | idle | 2 |" in md and "| roundabout-v1 | random | 2 |" in md
    assert all(0.0 <= r["speed_mean"] <= 40.0 and 0.0 <= r["right_lane_share"] <= 1.0 for r in rows)
    # IDLE keeps its target speed, 25 m/s at the start: it never averages more, and slows behind cars.
    idle = H.scripted_run("highway-fast-v0", "idle", 2, seed=0)
    assert 18.0 <= idle["speed_mean"] <= 25.5 and 0.0 <= idle["right_lane_share"] <= 1.0
    # The gap-keeping driver needs a straight road: highway-fast-v0 only.
    assert H.scripted_policies("roundabout-v1") == H.SCRIPTED and "gap" in H.scripted_policies("highway-fast-v0")


# -- the gap-keeping driver (kickstarting teacher and baseline) ------------------------------------

def _lone_ego(lane_id: int = 1):
    """highway-fast-v0 with the ego alone on the road, in lane ``lane_id`` (0 is the leftmost)."""
    import gymnasium as gym

    env = gym.make("highway-fast-v0")
    env.reset(seed=0)
    sim = env.unwrapped
    ego = sim.vehicle
    ego.lane_index = ego.target_lane_index = ("0", "1", lane_id)
    ego.lane = sim.road.network.get_lane(ego.lane_index)
    ego.position = ego.lane.position(ego.lane.local_coordinates(ego.position)[0], 0.0)
    sim.road.vehicles = [ego]
    return env, sim, ego


def _car(sim, lane_id: int, ahead: float, speed: float):
    from highway_env.vehicle.kinematics import Vehicle

    lane = sim.road.network.get_lane(("0", "1", lane_id))
    s = lane.local_coordinates(sim.vehicle.position)[0] + ahead
    car = Vehicle(sim.road, lane.position(s, 0.0), lane.heading_at(s), speed)
    sim.road.vehicles.append(car)
    return car


def test_gap_keeping_driver_speeds_up_passes_and_brakes():
    from hdppo.envs.builtin.driving import FASTER, LANE_LEFT, LANE_RIGHT, SLOWER, gap_keeping_action

    env, sim, ego = _lone_ego(lane_id=2)
    try:
        assert ego.speed_index < len(ego.target_speeds) - 1
        assert gap_keeping_action(env) == FASTER                       # an empty road, in the right lane
    finally:
        env.close()
    env, sim, ego = _lone_ego(lane_id=1)
    try:
        assert gap_keeping_action(env) == LANE_RIGHT                   # keep right when it is as open
        _car(sim, 1, ahead=15.0, speed=15.0)                           # a slow car close ahead
        assert gap_keeping_action(env) == LANE_RIGHT                   # both sides free: the right one
        _car(sim, 2, ahead=5.0, speed=25.0)                            # the right lane taken beside the ego
        assert gap_keeping_action(env) == LANE_LEFT
        _car(sim, 0, ahead=0.0, speed=25.0)                            # and the left one
        assert gap_keeping_action(env) == SLOWER
    finally:
        env.close()


def test_gap_keeping_driver_escapes_a_leader_slower_than_the_ego_can_drive():
    """At its lowest target speed (20 m/s) the ego closes on a 15 m/s car with no lane that meets
    the headway rules: the default driver brakes, which does nothing at that speed; with
    ``escape`` it squeezes into the next lane, whose car behind keeps a bumper margin."""
    from hdppo.envs.builtin.driving import LANE_LEFT, SLOWER, gap_keeping_action

    env, sim, ego = _lone_ego(lane_id=2)
    try:
        ego.speed = ego.target_speed = float(ego.target_speeds[0])
        ego.speed_index = 0
        _car(sim, 2, ahead=30.0, speed=15.0)                           # the wall: 25 m of gap, closing at 5 m/s
        _car(sim, 1, ahead=-12.0, speed=20.0)                          # 7 m behind in the next lane
        assert gap_keeping_action(env) == SLOWER
        assert gap_keeping_action(env, escape=True) == LANE_LEFT
        _car(sim, 0, ahead=200.0, speed=25.0)                          # a lane two away changes nothing
        assert gap_keeping_action(env, escape=True) == LANE_LEFT
        _car(sim, 1, ahead=3.0, speed=20.0)                            # the next lane taken beside the ego
        assert gap_keeping_action(env, escape=True) == SLOWER          # nothing left to do
    finally:
        env.close()


def test_gap_keeping_driver_drives_highway_fast_without_crashing():
    """Three whole episodes (90 decisions) in traffic: no crash, where always-IDLE crashes in 94%."""
    import gymnasium as gym

    from hdppo.envs.builtin.driving import gap_keeping_action

    env = gym.make("highway-fast-v0")
    try:
        for seed in range(3):
            env.reset(seed=seed)
            ret, done, info = 0.0, False, {}
            while not done:
                _, r, term, trunc, info = env.step(gap_keeping_action(env))
                ret, done = ret + float(r), term or trunc
            assert not info["crashed"] and trunc and ret > 20.0, (seed, ret)
    finally:
        env.close()


def test_gap_teacher_errors_name_what_it_needs():
    import gymnasium as gym

    from hdppo.envs.builtin.driving import gap_keeping_action, gap_teacher

    with pytest.raises(EnvError, match="needs the copy's env"):
        gap_teacher({}, ["agent_0"], None)
    with pytest.raises(EnvError, match="CartPoleEnv is not .* a highway-env env.*highway_env:highway-fast-v0"):
        gap_keeping_action(gym.make("CartPole-v1"))


def test_kickstart_preset_trains_through_the_teacher(tmp_path, monkeypatch):
    """The preset, shrunk: the teacher labels every decision through hdppo's adapter (it finds the
    simulator under the wrappers), and the run charts its loss."""
    import functools
    import json

    from hdppo.envs.builtin import driving
    from hdppo.platform import metrics as M
    from hdppo.platform.trainer import Trainer

    labels = []                                   # ray.backend=local: the engine steps in this process
    real = driving.gap_teacher

    @functools.wraps(real)
    def counting(raw_obs, members, env=None, **kwargs):
        labels.append(real(raw_obs, members, env, **kwargs))
        return labels[-1]

    monkeypatch.setattr(driving, "gap_teacher", counting)

    cfg = load_config(ROOT / "configs" / "highway_kickstart.yaml",
                      ["ray.backend=local", "train.total_env_steps=128", "train.eval_episodes=0",
                       "layers.0.dppo.num_workers=1", "layers.0.dppo.train_batch_size=64", "layers.0.ppo.num_epochs=1"])
    assert cfg.layers[0].teacher.policy == "hdppo.envs.builtin.driving:gap_teacher"
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    teacher = {r["step"]: r["value"] for r in rows if r["tag"] == M.LOSS_TEACHER}
    weighted = {r["step"] for r in rows if r["tag"] == M.CHART_TEACHER_COEFF and r["value"] > 0}
    # Charted at every update the teacher's weight is on (it anneals to 0 over the first half), as a finite NLL.
    assert teacher and set(teacher) == weighted, (teacher, weighted)
    assert all(np.isfinite(v) and v > 0 for v in teacher.values()), teacher
    # One ego vehicle, one decision per env step: the teacher labelled each step sampled, with a meta-action.
    assert len(labels) == summary["env_steps"] and set(labels) <= set(range(5)), (len(labels), summary)


def test_lookahead_oracle_plans_on_a_copy_of_the_simulator():
    """benchmarks/highway.py's oracle row: on an empty road it speeds up; behind a slow car with
    both neighbouring lanes free it changes lane; and its rollouts leave the real env untouched."""
    import sys

    from hdppo.envs.builtin.driving import FASTER, LANE_LEFT, LANE_RIGHT

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import highway as H

    env, sim, ego = _lone_ego(lane_id=2)
    try:
        x, steps = float(ego.position[0]), sim.steps
        assert H.lookahead_action(env) == FASTER
        assert float(ego.position[0]) == x and sim.steps == steps
    finally:
        env.close()
    env, sim, ego = _lone_ego(lane_id=1)
    try:
        _car(sim, 1, ahead=12.0, speed=10.0)
        assert H.lookahead_action(env) in (LANE_LEFT, LANE_RIGHT)
    finally:
        env.close()


def test_highway_table_gives_each_seed_and_their_mean():
    """`--run highway_kickstart=DIR1,DIR2`: a row per run, their mean with its t-interval, and
    the target judged on the mean."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import highway as H

    def run(name, ret, crashes, steps=100_352):
        return {"run_dir": f"runs/{name}", "env_steps": steps, "episodes": 100, "return_mean": ret, "return_std": 5.0,
                "length_mean": 28.0, "train_env_steps_per_s": 30.0, "crash": H.rate([1.0] * crashes + [0.0] * (100 - crashes))}

    md = H.render_markdown({"machine": {}, "command": "t", "trained": {
        "highway": run("flat", 26.0, 5, steps=99_840), "highway_kickstart": [run("k0", 24.0, 20), run("k1", 26.0, 40)]}})
    assert "| highway_kickstart | k0 | 100,352 | 100 | 24.0 ± 5.0 | 20% [" in md
    assert "| highway_kickstart | mean of 2 seeds ± 95% t | | | **25.0 ± 12.7** | **30% ± 127** |" in md
    assert "highway: met; highway_kickstart: **not met**" in md  # 30% crashes on the mean
    md = H.render_markdown({"machine": {}, "command": "t", "trained": {"highway": run("flat", 26.0, 5)}})
    assert "highway: **not met**" in md  # past the 1e5 env-step budget


# -- the safety shield (configs/highway_shield.yaml) -----------------------------------------------

def test_shield_masks_the_moves_that_would_collide_and_always_leaves_one():
    from hdppo.envs.builtin.driving import FASTER, IDLE, LANE_LEFT, LANE_RIGHT, SLOWER, clearance, safe_actions

    env, sim, ego = _lone_ego(lane_id=1)
    try:
        assert safe_actions(env).tolist() == [1, 1, 1, 1, 1]          # an empty road
        _car(sim, 1, ahead=100.0, speed=15.0)                         # a wall, far: nothing to do yet
        assert safe_actions(env).tolist() == [1, 1, 1, 1, 1]
    finally:
        env.close()
    env, sim, ego = _lone_ego(lane_id=1)
    try:
        _car(sim, 1, ahead=30.0, speed=15.0)   # the same wall 30 m ahead: braking to 20 m/s cannot stay behind it
        gaps = [clearance(env, a) for a in range(5)]
        assert gaps[FASTER] < gaps[IDLE] < gaps[SLOWER] < 2.0 < min(gaps[LANE_LEFT], gaps[LANE_RIGHT]), gaps
        assert safe_actions(env).tolist() == [1, 0, 1, 0, 0]
        _car(sim, 2, ahead=-10.0, speed=30.0)  # a fast car 5 m behind in the right lane
        assert safe_actions(env).tolist() == [1, 0, 0, 0, 0]
        _car(sim, 0, ahead=0.0, speed=25.0)    # and one beside on the left: nothing is safe
        mask = safe_actions(env)
        gaps = np.array([clearance(env, a) for a in range(5)])
        assert mask.sum() >= 1 and (gaps < 2.0).all() and set(np.flatnonzero(mask)) == set(np.flatnonzero(gaps == gaps.max()))
    finally:
        env.close()
    env, sim, ego = _lone_ego(lane_id=1)
    try:
        _car(sim, 1, ahead=-8.0, speed=30.0)   # a fast car behind in the ego's own lane brakes for it: no mask
        assert safe_actions(env).tolist() == [1, 1, 1, 1, 1]
    finally:
        env.close()


def test_shield_keeps_always_faster_alive_where_it_crashes_without():
    """Always FASTER (30 m/s into 20 m/s traffic) crashes within seconds on these seeds; behind
    the shield, the same preference (FASTER, else IDLE, a lane change, SLOWER) drives all 30 s."""
    from hdppo.envs.builtin.driving import make

    for seed in (0, 2, 3):
        for shield in (False, {"margin": 2.0}):
            env = make("highway-fast-v0", shield=shield)
            try:
                obs, _ = env.reset(seed=seed)
                done, steps, info = False, 0, {}
                while not done:
                    a = 3 if not shield else next(x for x in (3, 1, 0, 2, 4) if obs["action_mask"][x])
                    obs, _, term, trunc, info = env.step(a)
                    done, steps = term or trunc, steps + 1
                    assert not shield or info["shield_masked"] in (0.0, 1.0, 2.0, 3.0, 4.0)
            finally:
                env.close()
            assert bool(info["crashed"]) == (not shield) and (steps == 30) == bool(shield), (seed, shield, steps)


def test_shield_preset_feeds_the_mask_to_the_policy():
    """configs/highway_shield.yaml: the env through hdppo's loader gives {observation, action_mask};
    the sampler flattens the two views (115 values) and carries the mask apart from them."""
    from hdppo.envs.vector import make_vector_env

    cfg = load_config(ROOT / "configs" / "highway_shield.yaml")
    assert cfg.env.kwargs["shield"] == {"margin": 2.0} and cfg.layers[0].ppo.gamma == 0.95
    make = lambda: make_gym_env(cfg.env.id, cfg.env.entry_point, cfg.env.kwargs, cfg.env.max_episode_steps)  # noqa: E731
    env = make()
    try:
        assert set(env.observation_space.spaces) == {"observation", "action_mask"}
        obs, info = env.reset(seed=0)
        assert obs["action_mask"].shape == (5,) and info["shield_masked"] == 5 - obs["action_mask"].sum()
    finally:
        env.close()
    pool = make_vector_env(cfg.env.type, cfg.env.id, cfg.env.entry_point, cfg.env.kwargs, cfg.env.max_episode_steps, 1)
    try:
        first = pool.reset(seed=0)
        assert pool.obs_dim == 115 and first.obs.shape == (1, 1, 115)
        np.testing.assert_array_equal(first.masks[0, 0], obs["action_mask"])  # same seed, same first state
    finally:
        pool.close()


def test_shield_arguments_are_checked():
    from hdppo.envs.builtin.driving import make

    with pytest.raises(EnvError, match="straight highways.*roundabout-v1"):
        make("roundabout-v1", shield=True)
    with pytest.raises(EnvError, match="margn.*margin"):
        make("highway-fast-v0", shield={"margn": 2.0})
    with pytest.raises(EnvError, match=r"shield.horizon=-1"):
        make("highway-fast-v0", shield={"horizon": -1})


def test_shield_preset_trains_and_the_benchmark_evaluates_the_checkpoint_within_a_budget(tmp_path):
    """The shielded preset, shrunk, trains through hdppo (masks and all); benchmarks/highway.py's
    ``within`` picks the last checkpoint trained on at most that many env steps, not the last."""
    import sys

    from hdppo.platform.trainer import Trainer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import highway as H

    cfg = load_config(ROOT / "configs" / "highway_shield.yaml",
                      ["ray.backend=local", "train.total_env_steps=128", "train.eval_episodes=0", "train.checkpoint_every=1",
                       "layers.0.dppo.num_workers=1", "layers.0.dppo.train_batch_size=64", "layers.0.ppo.num_epochs=1"])
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    last = H.evaluate_run("highway_shield", tmp_path / "run", 1, seed=0)
    early = H.evaluate_run("highway_shield", tmp_path / "run", 1, seed=0, within=100)
    assert last["env_steps"] == 128 and early["env_steps"] == 64 and early["checkpoint"] != last["checkpoint"]
    assert 0.0 <= early["crash"]["rate"] <= 1.0 and early["episodes"] == 1
    with pytest.raises(RuntimeError, match="within 10 env steps"):
        H.evaluate_run("highway_shield", tmp_path / "run", 1, seed=0, within=10)
