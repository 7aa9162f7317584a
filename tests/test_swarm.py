"""The built-in swarm (hdppo.envs.builtin.swarm): dynamics limits, collisions, reaching, moving
obstacles, the official checkers, one observation size for 8 and 16 drones, errors, rendering,
the command-following reward, and its configs."""
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test

from conftest import ROOT, check_copy_draws
from hdppo.envs.builtin.swarm import SCENARIOS, Scenario, Swarm, SwarmEnv, follow_command, make_vector, parallel_env
from hdppo.envs.builtin.swarm.core import GRAVITY, Physics
from hdppo.envs.errors import EnvError
from hdppo.platform.config import load_config

EMPTY = Scenario("empty", 8, spheres=0, cylinders=0, moving=0)


def swarm(scenario=EMPTY, copies: int = 1, seed: int = 0) -> Swarm:
    s = Swarm(scenario, copies, rng=np.random.default_rng(seed))
    s.reset()
    return s


def test_thrust_and_speed_limits():
    s, ph = swarm(), Physics()
    # From rest, full demand on every axis: the thrust is scaled down to its limit, and gravity
    # and drag (zero at rest) account for the rest of the change in velocity.
    s.vel[:] = 0.0
    s.step(np.ones((1, 8, 3)))
    thrust = s.vel / ph.dt + np.array([0.0, 0.0, GRAVITY])
    assert np.allclose(np.linalg.norm(thrust, axis=-1), ph.thrust_max, atol=1e-6)
    # A demand under the limit is met exactly: a hover asks for no acceleration.
    s.reset()
    z0 = s.pos[..., 2].copy()
    s.step(np.zeros((1, 8, 3)))
    assert np.allclose(s.vel, 0.0) and np.allclose(s.pos[..., 2], z0)
    # Full demand for long: the speed never exceeds its limit (the box stops drones at the walls).
    s.reset()
    top = 0.0
    for _ in range(60):
        s.step(np.tile([1.0, 1.0, 0.3], (1, 8, 1)))
        top = max(top, float(np.linalg.norm(s.vel, axis=-1).max()))
        assert (s.pos >= ph.drone_radius - 1e-9).all() and (s.pos <= s.world - ph.drone_radius + 1e-9).all()
    assert ph.speed_max - 0.05 < top <= ph.speed_max + 1e-9


def test_collision_with_a_sphere_and_between_drones():
    sc = Scenario("one_sphere", 8, spheres=1, cylinders=0, moving=0)
    s = swarm(sc)
    s.oc[0, 0], s.orad[0, 0] = [10.0, 8.0, 5.0], 1.0
    s.pos[0, 0], s.vel[0, 0] = [8.6, 8.0, 5.0], [3.0, 0.0, 0.0]     # 0.15 m from its surface, flying at it
    s.pos[0, 1], s.vel[0, 1] = [4.0, 2.0, 2.0], [0.0, 0.0, 0.0]     # two drones 0.6 m apart, closing
    s.pos[0, 2], s.vel[0, 2] = [4.0, 2.6, 2.0], [0.0, -3.0, 0.0]
    for j in range(3, 8):                                           # the rest far apart, at rest
        s.pos[0, j], s.vel[0, j] = [2.0 + 2.5 * j, 14.0, 8.0], 0.0
    s.dist = np.linalg.norm(s.goal - s.pos, axis=-1)    # placed by hand: progress from here
    res = s.step(np.zeros((1, 8, 3)))
    assert res.collision_now[0].tolist()[:3] == [1, 1, 1] and res.collision_now[0, 3:].sum() == 0
    assert s.collided[0, :3].all() and not s.collided[0, 3:].any()
    # Pushed back to the sphere's surface, its speed into it gone; penalised in the reward.
    assert np.linalg.norm(s.pos[0, 0] - s.oc[0, 0]) == pytest.approx(1.0 + s.ph.drone_radius)
    assert s.vel[0, 0, 0] <= 1e-9
    assert res.rewards[0, 0] < -s.w.collision / 2 and res.rewards[0, 5] > -1
    # Staying in contact is not a new collision; the episode's count stays 1.
    res = s.step(np.tile([1.0, 0.0, 0.0], (1, 8, 1)))
    assert res.collision_now[0, 0] == 0 and s.collisions[0, 0] == 1


def test_crash_on_collision_ends_the_drones_flight():
    """With crash_on_collision a collision terminates the drone (it leaves the agents and the
    field, penalised once); without it the same drone flies on."""
    sc = Scenario("one_sphere", 8, spheres=1, cylinders=0, moving=0)
    outcomes = {}
    for crash in (False, True):
        env = parallel_env(scenario=sc, crash_on_collision=crash)
        env.reset(seed=0)
        s = env.swarm
        s.oc[0, 0], s.orad[0, 0] = [10.0, 8.0, 5.0], 1.0
        for j in range(8):                                   # far from each other and the sphere, at rest
            s.pos[0, j], s.vel[0, j] = [2.0 + 2.5 * j, 14.0, 8.0], 0.0
        s.pos[0, 0], s.vel[0, 0] = [8.6, 8.0, 5.0], [3.0, 0.0, 0.0]   # 0.15 m from the surface, flying at it
        s.dist = np.linalg.norm(s.goal - s.pos, axis=-1)
        _, rew, term, trunc, info = env.step({a: np.zeros(3, np.float32) for a in env.agents})
        assert info["drone_0"]["collision"] == 1 and rew["drone_0"] < -s.w.collision / 2
        outcomes[crash] = (term["drone_0"], "drone_0" in env.agents, bool(s.active[0, 0]))
        assert not any(term[a] for a in env.possible_agents[1:]) and not any(trunc.values())
        # The others fly on either way; the crashed drone takes no further part.
        _, rew, _, _, _ = env.step({a: np.zeros(3, np.float32) for a in env.agents})
        assert ("drone_0" in rew) is (not crash)
    assert outcomes[False] == (False, True, True)
    assert outcomes[True] == (True, False, False)
    vec = make_vector(2, seed=0, scenario=sc, crash_on_collision=True)
    assert vec.swarm.crash
    with pytest.raises(EnvError, match="crash_on_collision"):
        make_vector(2, seed=0, crash_on_collision="yes")


def test_field_teacher_is_the_observed_field_pilot_per_drone():
    """The kickstarting teacher, on one drone's observation as the engine hands it over
    (SwarmVector.raw_obs), gives that drone's action of the batched observed_field pilot."""
    from hdppo.envs.builtin.swarm.scripted import field_teacher, observed_field

    vec = make_vector(3, seed=4, scenario="8_dense")
    vec.reset()
    for _ in range(30):   # into the field, among obstacles and neighbours
        vec.step(observed_field(vec.swarm))
    batched = observed_field(vec.swarm)
    assert np.abs(batched).max() > 0.1
    for i in range(3):
        raw = vec.raw_obs(i)
        assert set(raw) == {a for k, a in enumerate(vec.agents) if vec.swarm.active[i, k]} and raw
        for a, o in raw.items():
            got = field_teacher(raw, [a], vec)
            assert got.shape == (3,) and got.dtype == np.float32
            assert np.allclose(got, batched[i, vec.agents.index(a)], atol=1e-5)


def test_proximity_penalty_grows_as_the_gap_closes():
    from hdppo.envs.builtin.swarm import RewardWeights

    sc = Scenario("one_sphere", 8, spheres=1, cylinders=0, moving=0)
    penalties = []
    for gap in (2.0, 0.8, 0.4, 0.1):   # clearance to the sphere's surface, margin 1 m
        s = Swarm(sc, 1, rng=np.random.default_rng(0), weights=RewardWeights(proximity=2.0, margin=1.0))
        s.reset()
        plain = Swarm(sc, 1, rng=np.random.default_rng(0))
        plain.reset()
        for sim in (s, plain):
            sim.oc[0, 0], sim.orad[0, 0] = [10.0, 8.0, 5.0], 1.0
            for j in range(8):                       # far from each other, at rest
                sim.pos[0, j], sim.vel[0, j] = [2.0 + 2.5 * j, 14.0, 8.0], 0.0
            sim.pos[0, 0] = [10.0 - 1.0 - sim.ph.drone_radius - gap, 8.0, 5.0]
            sim.dist = np.linalg.norm(sim.goal - sim.pos, axis=-1)
        hover = np.zeros((1, 8, 3))
        diff = plain.step(hover).rewards[0] - s.step(hover).rewards[0]
        assert diff[1:] == pytest.approx(0.0, abs=1e-9)      # the others are far from everything
        penalties.append(diff[0])
    # Nothing beyond the margin; then 2 * ((1 - gap) / 1)^2, the drone having barely moved.
    assert penalties[0] == pytest.approx(0.0, abs=1e-9)
    assert penalties[1] == pytest.approx(2.0 * 0.2 ** 2, rel=0.1)
    assert penalties[1] < penalties[2] < penalties[3] <= 2.0


def test_proximity_arguments_are_checked():
    with pytest.raises(EnvError, match="proximity_margin"):
        make_vector(2, seed=0, proximity_margin=0.0)


def test_cylinder_spans_the_height():
    sc = Scenario("one_cylinder", 8, spheres=0, cylinders=1, moving=0)
    s = swarm(sc)
    s.oc[0, 0], s.orad[0, 0] = [10.0, 8.0, 0.0], 0.5                # the centre's z does not matter
    s.pos[0, 0], s.vel[0, 0] = [9.4, 8.0, 9.0], [0.0, 0.0, 0.0]    # high up, 0.6 m from its axis
    s.pos[0, 1:, 0] = 2.0                                           # the rest far from it
    res = s.step(np.zeros((1, 8, 3)))
    assert res.collision_now[0, 0] == 1
    assert np.hypot(*(s.pos[0, 0, :2] - s.oc[0, 0, :2])) == pytest.approx(0.5 + s.ph.drone_radius)
    assert s.pos[0, 0, 2] == pytest.approx(9.0)                     # pushed out sideways only


def test_reaching_the_goal_ends_the_drone():
    env = SwarmEnv(scenario=EMPTY)
    env.reset(seed=3)
    s = env.swarm
    s.pos[0, 0] = s.goal[0, 0] - [0.9, 0.0, 0.0]
    s.vel[0, 0] = [3.0, 0.0, 0.0]
    obs, rew, term, trunc, infos = env.step({a: np.zeros(3, np.float32) for a in env.agents})
    assert term["drone_0"] and not any(term[a] for a in env.agents[1:])
    assert infos["drone_0"]["reached"] == 1 and rew["drone_0"] > env.swarm.w.reach / 2
    assert "drone_0" not in env.agents and len(env.agents) == 7


def test_all_reached_ends_the_episode_with_its_rates():
    env = SwarmEnv(scenario=EMPTY)
    env.reset(seed=1)
    s = env.swarm
    s.pos[0] = s.goal[0] - [0.5, 0.0, 0.0]
    s.vel[0] = 0.0
    s.collided[0, :2] = True
    _, _, term, _, infos = env.step({a: np.zeros(3, np.float32) for a in env.agents})
    assert all(term.values()) and env.agents == []
    assert infos["drone_3"]["reach_rate"] == 1.0 and infos["drone_3"]["collision_rate"] == 0.25


def test_moving_obstacles_move_and_bounce():
    sc = Scenario("moving", 8, spheres=1, cylinders=0, moving=2)
    s = swarm(sc)
    start = s.oc.copy()
    for _ in range(5):
        s.step(np.zeros((1, 8, 3)))
    moved = np.linalg.norm(s.oc - start, axis=-1)[0]
    assert moved[0] == 0.0 and np.allclose(moved[1:], 5 * s.ph.dt * sc.moving_speed)
    s.oc[0, 1], s.ovel[0, 1] = [sc.field[1] - 0.01, 8.0, 5.0], [1.0, 0.0, 0.0]   # at the band's end, outward
    s.step(np.zeros((1, 8, 3)))
    s.step(np.zeros((1, 8, 3)))
    assert s.ovel[0, 1, 0] < 0 and s.oc[0, 1, 0] <= sc.field[1]


def test_pettingzoo_checkers():
    parallel_api_test(parallel_env(scenario="8_dense", max_steps=60), num_cycles=80)
    parallel_seed_test(lambda: parallel_env(scenario="8_medium", max_steps=40), num_cycles=40)


def test_eight_and_sixteen_drones_have_one_size():
    small, big = parallel_env(scenario="8_medium"), parallel_env(scenario="16_dense")
    small.reset(seed=0), big.reset(seed=0)
    assert len(small.agents) == 8 and len(big.agents) == 16
    assert small.observation_space("drone_0") == big.observation_space("drone_15")
    assert small.observation_space("drone_0") is small.observation_space("drone_7")   # cached
    assert small.state().shape == big.state().shape == small.state_space.shape
    assert big.groups["group_3"] == [f"drone_{i}" for i in range(12, 16)]


def test_vector_env_matches_the_parallel_env():
    env, vec = parallel_env(scenario="8_medium"), make_vector(1, scenario="8_medium")
    obs, _ = env.reset(seed=5)
    first = vec.reset(seed=5)
    assert np.array_equal(np.stack([obs[a] for a in env.possible_agents]), first.obs[0])
    rng = np.random.default_rng(0)
    for _ in range(20):
        act = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
        obs, rew, *_ = env.step({a: act[i] for i, a in enumerate(env.agents)})
        step = vec.step(act[None])
        assert np.allclose([rew[a] for a in rew], step.rewards[0][: len(rew)])
        assert np.array_equal(np.stack([obs[a] for a in obs]), step.obs[0][: len(obs)])


def test_vector_env_resets_ended_copies_and_reports_the_episode():
    vec = make_vector(3, seed=0, scenario="8_sparse", max_steps=5)
    vec.reset()
    for t in range(5):
        res = vec.step(np.zeros((3, 8, 3), np.float32))
    assert res.episode_end.all() and len(res.episodes) == 3 and res.truncated.all()
    info = res.infos[0]["drone_0"]
    assert set(info) >= {"reach_rate", "collision_rate", "reached", "collided"} and info["episode_steps"] == 5
    assert res.alive.all() and (vec.swarm.t == 0).all()


def test_bad_scenario_names_the_choices():
    with pytest.raises(EnvError) as err:
        parallel_env(scenario="8_thick")
    assert "8_thick" in str(err.value) and all(name in str(err.value) for name in SCENARIOS)
    with pytest.raises(ValueError, match="multiple of group_size"):
        Scenario("odd", 6)


def test_render_shows_the_drones_move():
    env = parallel_env(scenario="8_medium", render_mode="rgb_array")
    env.reset(seed=0)
    a = env.render()
    assert a.shape == (420, 480, 3) and a.dtype == np.uint8
    for _ in range(5):
        env.step({d: np.array([1.0, 0.0, 0.0], np.float32) for d in env.agents})
    assert (env.render() != a).any()


def test_follow_command_reward():
    # lane (low, middle, high) one-hot then formation (tight, loose)
    middle_tight = np.array([0, 1, 0, 1, 0], np.float32)
    ok = {"altitude": 0.5, "in_field": 1, "cohesion": 1.0, "spacing": 1.6, "reached": 0}
    assert follow_command(middle_tight, ok) == 0.0
    assert follow_command(middle_tight, ok | {"altitude": 0.9}) == pytest.approx(-0.3)
    assert follow_command(middle_tight, ok | {"altitude": 0.9, "in_field": 0}) == 0.0
    assert follow_command(middle_tight, ok | {"cohesion": 4.5}) == pytest.approx(-0.2)
    low_loose = np.array([1, 0, 0, 0, 1], np.float32)
    out = follow_command(np.stack([low_loose, middle_tight]), [ok | {"altitude": 0.25, "spacing": 1.0}, ok])
    assert out.shape == (2,) and out[0] == pytest.approx(-0.1) and out[1] == 0.0
    with pytest.raises(ValueError, match="MultiDiscrete"):
        follow_command(np.zeros(4, np.float32), ok)


@pytest.mark.parametrize("preset", ["swarm_flat.yaml", "swarm_hierarchy.yaml"])
def test_configs_load(preset):
    cfg = load_config(ROOT / "configs" / preset)
    assert cfg.env.entry_point == "hdppo.envs.builtin.swarm:make_vector"
    assert cfg.layers[-1].policy.central_critic
    drone = cfg.layers[-1]  # kickstarted from the pilot, its weight kept, with DAgger's replay, on the crashing env
    assert drone.teacher.policy.endswith("scripted:field_teacher") and drone.teacher.coeff_final == drone.teacher.coeff > 0
    assert drone.teacher.replay > 0 and cfg.env.kwargs["crash_on_collision"] is True
    if preset == "swarm_hierarchy.yaml":
        assert [layer.name for layer in cfg.layers] == ["group", "drone"]
        assert cfg.layer_groups() == [["group"], ["drone"]]      # each layer its own DPPO group
        assert cfg.layer("drone").reward.intrinsic_fn == "swarm_follow_command"
        assert cfg.layer("group").agents.squads == SwarmEnv(scenario="8_medium").groups


@pytest.mark.parametrize("preset, layers, steps", [("swarm_hierarchy.yaml", ["group", "drone"], 600),
                                                   ("swarm_assignment.yaml", ["mission", "group", "drone"], 1200)])
def test_a_few_updates_log_reach_and_collisions_per_layer(tmp_path, preset, layers, steps):
    """The hierarchy trains, each layer its own group, and each layer's run charts the episodes'
    reach and collision rates (the env's metadata['episode_metrics'])."""
    from hdppo.platform.config import validate
    from hdppo.platform.trainer import Trainer

    cfg = load_config(ROOT / "configs" / preset, ["ray.backend=local", f"train.total_env_steps={steps}",
                                                  "train.checkpoint_every=1", "train.eval_episodes=0"])
    data = cfg.model_dump(mode="json")
    data["env"]["kwargs"]["max_steps"] = 12
    for layer in data["layers"]:
        layer["dppo"].update(num_workers=1, num_envs_per_worker=4, train_batch_size=128 if layer["period"] == 1 else 16)
        layer["ppo"].update(minibatch_size=64 if layer["period"] == 1 else 16, num_epochs=1)
        layer["policy"]["hidden"] = [16]
    for group in data.get("groups") or []:
        group["dppo"].update(num_workers=1, num_envs_per_worker=4)
    summary = Trainer(validate(data), tmp_path / "run", quiet=True).train()
    assert summary["updates"] >= 2
    logged = (tmp_path / "run" / "metrics.jsonl").read_text()
    for name in layers:
        assert f'"layer": "{name}", "tag": "losses/approx_kl"' in logged, name
        for key in ("reach_rate", "collision_rate", "assignment_shortest"):
            assert f'"layer": "{name}", "tag": "episode/{key}"' in logged, (name, key)


def test_vector_env_draws_its_copies():
    vec = make_vector(2, seed=0, scenario="8_medium")
    vec.reset()
    a, b = vec.render_copy(0), vec.render_copy(1)
    assert a.shape == (420, 480, 3) and a.dtype == np.uint8 and (a != b).any()


def test_scripted_pilots():
    # straight flies into what is in its way; the potential fields, from the exact geometry or
    # from the drones' observations alone, reach their pads without touching anything.
    from hdppo.envs.builtin.swarm.scripted import fly

    runs = {pilot: fly(pilot, "8_medium", episodes=10, copies=10, seed=3)
            for pilot in ("straight", "potential_field", "observed_field")}
    assert runs["straight"]["reach_share"] > 0.9 and runs["straight"]["collision_rate"] > 0.3
    for pilot in ("potential_field", "observed_field"):
        assert runs[pilot]["reach_share"] > 0.9 and runs[pilot]["collision_rate"] < 0.05, (pilot, runs[pilot])
    with pytest.raises(ValueError, match="observed_field"):
        fly("nope", "8_medium", episodes=1)


def test_benchmark_crash_flag_flies_the_pilots_so_and_refuses_unlike_runs(tmp_path, monkeypatch):
    """benchmarks/swarm.py flies with crash_on_collision by default, as the presets train (the
    scripted rows too, recorded in the report's settings), and a run trained without crashes is
    refused by name, not compared."""
    import json
    import sys

    import yaml

    import hdppo.envs.builtin.swarm.scripted as scripted

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import swarm as bench

    calls = []                                                   # scripted_rows imports fly at call time
    real_fly = scripted.fly

    def spy(pilot, scenario, *args, **kwargs):
        calls.append((pilot, scenario, kwargs.get("crash_on_collision")))
        return real_fly(pilot, scenario, *args, **kwargs)

    monkeypatch.setattr(scripted, "fly", spy)
    run = tmp_path / "no_crash"
    run.mkdir()
    data = load_config(ROOT / "configs" / "swarm_flat.yaml").model_dump(mode="json")
    data["env"]["kwargs"]["crash_on_collision"] = False          # the preset trains with crashes
    (run / "config.yaml").write_text(yaml.safe_dump(data))
    out = tmp_path / "report"
    assert bench.main(["--quick", "--only", "scripted,flat", "--run", f"flat={run}",     # --crash is the default
                       "--episodes", "4", "--scenarios", "8_medium", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["settings"]["crash_on_collision"] is True and report["scripted"]
    assert sorted((p, sc) for p, sc, _ in calls) == sorted((p, "8_medium") for p in scripted.PILOTS)
    assert all(crash is True for _, _, crash in calls), calls
    err = report["trained"]["flat"]["error"]
    assert "crash_on_collision is False" in err and "pass --no-crash" in err and str(run) in err


def test_benchmark_sets_the_learned_assignment_beside_the_scripted_rules(tmp_path):
    """benchmarks/swarm.py on a run with an assigning layer: the learned row on 8 drones only
    (its two choices fit two groups), and the same lower layers under each scripted rule; the
    'shortest' rule flies the shortest assignment in every episode, 'longest' in none where the
    two differ."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import swarm as bench

    out = tmp_path / "report"
    assert bench.main(["--quick", "--only", "assignment,assignment16", "--runs-dir", str(tmp_path / "runs"),
                       "--episodes", "4", "--set", "env.kwargs.max_steps=15", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    for name, scenario in (("assignment", "8_medium"), ("assignment16", "16_medium")):
        entry = report["trained"][name]
        assert "error" not in entry, entry.get("error")
        rows = {(e["scenario"], e["mission"]): e for e in entry["evaluations"]}
        assert set(rows) == {(scenario, m) for m in ("learned", "fixed", "shortest", "longest")}
        assert rows[(scenario, "shortest")]["assignment_shortest"] == 1.0
        assert rows[(scenario, "longest")]["assignment_shortest"] == 0.0
    # the 16-drone mission trained over the frozen layers of the assignment run it was given
    cfg16 = load_config(tmp_path / "runs" / "assignment16" / "config.yaml")
    assert cfg16.layer("drone").schedule.checkpoint == str(tmp_path / "runs" / "assignment")
    assert "assignment scripted: shortest" in out.with_suffix(".md").read_text()


def test_imitation_benchmark_bins_the_gap_to_the_pilot(tmp_path):
    """benchmarks/swarm_imitation.py: a briefly trained drone layer differs from the pilot; acting
    by its teacher (the pilot, `--scripted`) it does not differ at all, in every clearance bin."""
    import json
    import sys

    from hdppo.platform.config import validate
    from hdppo.platform.trainer import Trainer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import swarm_imitation as bench

    cfg = load_config(ROOT / "configs" / "swarm_flat.yaml", [
        "ray.backend=local", "train.total_env_steps=600", "train.checkpoint_every=1", "train.eval_episodes=0",
        'layers.0.teacher={policy: "hdppo.envs.builtin.swarm.scripted:field_teacher", coeff: 1.0}'])
    data = cfg.model_dump(mode="json")
    data["env"]["kwargs"]["max_steps"] = 20
    data["layers"][0]["dppo"].update(num_workers=1, num_envs_per_worker=4, train_batch_size=256)
    data["layers"][0]["ppo"].update(minibatch_size=128, num_epochs=1)
    data["layers"][0]["policy"]["hidden"] = [16]
    Trainer(validate(data), tmp_path / "run", quiet=True).train()
    for scripted in (False, True):
        args = ["--run", str(tmp_path / "run"), "--episodes", "4", "--out", str(tmp_path / f"imit{int(scripted)}")]
        assert bench.main(args + (["--scripted"] if scripted else [])) == 0
        r = json.loads((tmp_path / f"imit{int(scripted)}.json").read_text())["result"]
        assert r["episodes"] == 4 and sum(b["share"] for b in r["bins"]) == pytest.approx(1.0)
        errors = [b["mean_abs_error"] for b in r["bins"] if b["steps"]]
        assert errors and (max(errors) < 1e-6 if scripted else max(errors) > 0.01), (scripted, r["bins"])  # float32 rounding
    assert "| nearest obstacle clearance |" in (tmp_path / "imit1.md").read_text()


def test_dagger_benchmark_imitates_the_pilot_and_tables_each_variant(tmp_path):
    """benchmarks/swarm_dagger.py: imitation alone, fresh samples and with a replay, one row each;
    a few rollouts of imitation already fly closer to the pilot than the untrained network."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import swarm_dagger as bench

    out = tmp_path / "dagger"
    assert bench.main(["--env-steps", "30000", "--replay", "0,2000", "--episodes", "8", "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [r["replay"] for r in rows] == [0, 2000] and all(r["env_steps"] >= 30000 for r in rows)
    assert all(0.0 <= r["reach_rate"] <= 1.0 and 0.0 <= r["collision_rate"] <= 1.0 for r in rows)
    untrained = bench.imitate(0, 0, 0.1, 8, 0, "8_medium")   # no rollout: the initial network, same fields
    assert max(r["reach_rate"] for r in rows) > untrained["reach_rate"] + 0.1, (rows, untrained)
    assert "| env steps | replay |" in out.with_suffix(".md").read_text()


def test_each_copy_draws_its_own_field():
    """Copy i's goals, starts and obstacles depend on the seed and i alone, not on the number of
    copies or on when the other copies' episodes end; copy 0 is the PettingZoo env's episode."""
    check_copy_draws(make_vector, parallel_env, "swarm", ("pos", "region", "oc", "orad", "ovel"), "8_medium", 3)
