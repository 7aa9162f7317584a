"""Goal assignment in swarm: an upper layer's decision handed to the env (``action.to_env``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import ROOT
from hdppo.envs.builtin.swarm import make_vector, parallel_env
from hdppo.envs.builtin.swarm.assignment import (assignment_costs, assignment_teacher, choose, mission_time,
                                                 permutations)
from hdppo.envs.errors import EnvError
from hdppo.envs.vector import InfoRows
from hdppo.hierarchies.engine import Sampler
from hdppo.hierarchies.spec import probe_env
from hdppo.platform.config import load_config, validate
from hdppo.platform.errors import ConfigError
from hdppo.policies.networks import make_policy
from hdppo.policies.normalizers import ObservationNormalizer

PRESET = ROOT / "configs" / "swarm_assignment.yaml"
TEACHER = "hdppo.envs.builtin.swarm.assignment:assignment_teacher"


def test_permutations_start_with_the_identity():
    assert permutations(2).tolist() == [[0, 1], [1, 0]]
    p4 = permutations(4)
    assert p4.shape == (24, 4) and p4[0].tolist() == [0, 1, 2, 3] and len({tuple(r) for r in p4}) == 24


def test_costs_prefer_the_uncrossed_assignment():
    # Two groups of two drones: group 0 starts at y = 12, group 1 at y = 4; region 0 at y = 4,
    # region 1 at y = 12. Sending each group straight ahead (group 0 -> region 1) is shortest.
    pos = np.array([[[1, 12, 5], [1, 12, 5], [1, 4, 5], [1, 4, 5]]], float)
    region = np.array([[[27, 4, 5], [27, 12, 5]]], float)
    costs = assignment_costs(pos, np.ones((1, 4), bool), np.array([0, 0, 1, 1]), region)
    assert costs[0, 1] == pytest.approx(2 * 26.0) and costs[0, 0] == pytest.approx(2 * np.hypot(26, 8))
    assert choose("shortest", costs).tolist() == [1] and choose("longest", costs).tolist() == [0]
    assert choose("fixed", costs).tolist() == [0]
    with pytest.raises(ValueError, match="shortest"):
        choose("nearest-ish", costs)


def test_apply_command_moves_the_goals_observation_and_state():
    vec = make_vector(3, seed=4, scenario="8_medium")
    vec.want_state = True
    first = vec.reset()
    s = vec.swarm
    before_goal = s.goal.copy()
    obs, state = vec.apply_command("mission", np.array([1]), np.array([0]), np.array([[1]]))
    assert s.assignment.tolist() == [[0, 1], [1, 0], [0, 1]]
    # copy 1's groups swapped regions: each drone's goal is its own pad in the other region
    assert np.allclose(s.goal[1], np.clip(s.region[1][[1, 0]][s.group] + s.pads, 0.25, s.world - 0.25))
    assert np.array_equal(s.goal[[0, 2]], before_goal[[0, 2]]) and not np.allclose(s.goal[1], before_goal[1])
    # the observation's goal offset and the state follow; the other copies are untouched
    assert np.allclose(obs[1, :, :3], np.clip((s.goal[1] - s.pos[1]) / s.scale, -1, 1), atol=1e-6)
    assert np.array_equal(obs[[0, 2]], first.obs[[0, 2]]) and not np.array_equal(state[1], first.state[1])
    # progress is measured to the new goal from now on: the swap itself pays nothing
    res = vec.step(np.zeros((3, 8, 3), np.float32))
    assert np.abs(res.infos[1]["drone_0"]["progress"]) < 0.1


def test_apply_command_refuses_what_is_not_one_assignment_per_copy():
    vec = make_vector(2, seed=0, scenario="8_medium")
    vec.reset()
    with pytest.raises(EnvError, match=r"2 groups have 2 assignments.*n: 2, to_env: true"):
        vec.apply_command("mission", np.array([0]), np.array([0]), np.array([[5]]))
    with pytest.raises(EnvError, match=r"one lane for the whole swarm"):
        vec.apply_command("mission", np.array([0, 0]), np.array([0, 1]), np.array([[1], [0]]))
    with pytest.raises(ValueError, match="permutation"):
        vec.swarm.assign(np.array([0]), np.array([[1, 1]]))


def test_episode_metric_says_whether_the_shortest_assignment_was_flown():
    vec = make_vector(4, seed=2, scenario="8_sparse", max_steps=3)
    vec.reset()
    s = vec.swarm
    shortest = assignment_costs(s.pos, s.active, s.group, s.region).argmin(1)
    chosen = np.array([shortest[0], 1 - shortest[1], shortest[2], 1 - shortest[3]])
    vec.apply_command("mission", np.arange(4), np.zeros(4, np.int64), chosen[:, None])
    for _ in range(3):
        res = vec.step(np.zeros((4, 8, 3), np.float32))
    assert res.episode_end.all()
    got = [next(iter(res.infos[i].values()))["assignment_shortest"] for i in range(4)]
    assert got == [1.0, 0.0, 1.0, 0.0]


def test_assignment_teacher_applies_its_rule_per_copy():
    vec = make_vector(6, seed=9, scenario="16_medium")
    vec.reset()
    s = vec.swarm
    costs = assignment_costs(s.pos, s.active, s.group, s.region)
    copies = np.array([5, 0, 3])
    for rule, pick in (("shortest", costs.argmin(1)), ("longest", costs.argmax(1))):
        got = assignment_teacher(env=vec, copies=copies, rule=rule)
        assert got.shape == (3, 1) and got[:, 0].astype(int).tolist() == pick[copies].tolist()
    assert assignment_teacher(env=vec, copies=copies, rule="fixed")[:, 0].tolist() == [0, 0, 0]
    # random: every one of the G! assignments, each about as often, from the env's own stream
    # (seeded: the same env seed draws the same picks).
    picks = np.concatenate([assignment_teacher(env=vec, copies=copies, rule="random")[:, 0] for _ in range(400)])
    assert picks.dtype == np.float32 and (picks == picks.round()).all()
    counts = np.bincount(picks.astype(int), minlength=costs.shape[1])
    assert len(counts) == costs.shape[1] == 24 and counts.min() >= 20 and counts.max() <= 80  # 50 each expected
    again = make_vector(6, seed=9, scenario="16_medium")
    again.reset()
    first = make_vector(6, seed=9, scenario="16_medium")
    first.reset()
    assert (assignment_teacher(env=again, copies=copies, rule="random")
            == assignment_teacher(env=first, copies=copies, rule="random")).all()


def test_mission_time_counts_drones_flying_and_collisions():
    # two lanes of three drones (obs width 2): lane 0 has two flying, one gone; lane 1 one flying
    # with a new collision, one that landed this step (an info, a zero observation), one gone.
    next_obs = np.array([[1, 0, 0.5, 0.5, 0, 0], [0, 1, 0, 0, 0, 0]], np.float32)
    rows = [{"a": {"collision": 0}, "b": {"collision": 0}, "c": {}},
            {"a": {"collision": 1}, "b": {"collision": 0}, "c": {}}]
    info = InfoRows(lambda: rows, 2, grouped=True)
    r = mission_time(info=info, next_obs=next_obs, command=None, obs=None, action=None)
    assert r.tolist() == pytest.approx([-0.02, -0.01 - 2.0])


def test_preset_loads_as_three_groups_with_the_assignment_handed_to_the_env():
    cfg = load_config(PRESET)
    assert [layer.name for layer in cfg.layers] == ["mission", "group", "drone"]
    assert cfg.layer_groups() == [["mission"], ["group"], ["drone"]]
    mission = cfg.layer("mission")
    assert mission.action.to_env and mission.action.n == len(permutations(parallel_env(scenario="8_medium").swarm.G))
    assert mission.reward.intrinsic_fn == "swarm_mission_time" and mission.reward.env == 0.0
    # the mission acts once per episode: every 15 x 10 env steps, the scenario's episode limit
    assert mission.period * cfg.layer("group").period >= parallel_env(scenario="8_medium").swarm.max_steps


def test_to_env_is_for_upper_layers_and_needs_an_env_that_takes_it():
    data = load_config(PRESET).model_dump(mode="json")
    data["layers"][2]["action"]["to_env"] = True
    with pytest.raises(ConfigError, match="to_env is for an upper layer"):
        validate(data)
    # an env without apply_command is refused when the spec is built, by layer and field
    data = load_config(ROOT / "configs" / "corridor_hierarchy.yaml").model_dump(mode="json")
    data["layers"][0]["action"]["to_env"] = True
    with pytest.raises(ConfigError, match=r"layer 'strategy', action.to_env: env .* has no apply_command"):
        probe_env(validate(data), 0)


def test_a_pettingzoo_env_takes_the_decision_one_copy_at_a_time():
    """The same preset on swarm's PettingZoo form (env.type pettingzoo): each copy's decision goes
    to SwarmEnv.apply_command(layer, lane, action), and its drones' observations are replaced
    before the drone layer acts, as with the vector form."""
    data = load_config(PRESET).model_dump(mode="json")
    data["env"] = {"type": "pettingzoo", "entry_point": "hdppo.envs.builtin.swarm:parallel_env",
                   "kwargs": {"scenario": "8_medium"}}
    venv, first, specs = probe_env(validate(data), 5, 3)
    assert venv.takes_commands
    # through the sampler: the mission layer's first decisions are each copy's assignment
    pols = {sp.name: make_policy(sp.obs_dim, sp.action_space, sp.cfg.policy.hidden, sp.cfg.policy.activation,
                                 sp.cfg.policy.init_log_std, sp.critic_dim, sp.encoder) for sp in specs}
    norms = {sp.name: ObservationNormalizer((sp.obs_dim,), enabled=False) for sp in specs}
    with torch.no_grad():  # a mission policy that swaps the regions: not the env's own assignment
        pols["mission"].actor[-1].bias.copy_(torch.tensor([0.0, 20.0]))
    sampler = Sampler(specs, venv, pols, norms, first=first)
    sampler.step()
    chosen = sampler.last_action["mission"][:, 0, 0].astype(int)
    assert chosen.tolist() == [1, 1, 1]
    assert [c.env.swarm.assignment[0].tolist() for c in venv.copies] == permutations(2)[chosen].tolist()
    venv.reset(seed=5)
    swarms = [c.env.swarm for c in venv.copies]
    before = [s.goal.copy() for s in swarms]
    obs, _ = venv.apply_command("mission", np.array([0, 2]), np.array([0, 0]), np.array([[1], [0]]))
    assert [s.assignment[0].tolist() for s in swarms] == [[1, 0], [0, 1], [0, 1]]
    assert not np.allclose(swarms[0].goal, before[0]) and np.allclose(swarms[2].goal, before[2])
    assert np.allclose(obs[0, :, :3], np.clip((swarms[0].goal[0] - swarms[0].pos[0]) / 30.0, -1, 1), atol=1e-6)
    with pytest.raises(EnvError, match="n: 2, to_env: true"):
        venv.apply_command("mission", np.array([1]), np.array([0]), np.array([[7]]))


def test_the_assignment_reaches_the_env_before_the_drones_act():
    """The mission layer (scripted: the longest assignment) decides at the episode's first step;
    the drone layer's input on that same step already holds the goals the decision set."""
    data = load_config(PRESET).model_dump(mode="json")
    data["layers"][0]["teacher"] = {"policy": TEACHER, "kwargs": {"rule": "longest"}, "coeff": 0.0}
    cfg = validate(data)
    venv, first, specs = probe_env(cfg, 3, 4)
    s = venv.swarm
    longest = permutations(s.G)[assignment_costs(s.pos, s.active, s.group, s.region).argmax(1)]
    pols = {sp.name: make_policy(sp.obs_dim, sp.action_space, sp.cfg.policy.hidden, sp.cfg.policy.activation,
                                 sp.cfg.policy.init_log_std, sp.critic_dim, sp.encoder) for sp in specs}
    norms = {sp.name: ObservationNormalizer((sp.obs_dim,), enabled=False) for sp in specs}
    seen = []
    act = pols["drone"].act
    pols["drone"].act = lambda obs, *a, **k: (seen.append(np.array(obs)), act(obs, *a, **k))[1]
    sampler = Sampler(specs, venv, pols, norms, deterministic=True, first=first, scripted=["mission"])
    goals_after_decision = None
    orig = venv.apply_command

    def spy(*args):
        nonlocal goals_after_decision
        out = orig(*args)
        goals_after_decision = (s.goal - s.pos).copy()
        return out

    venv.apply_command = spy
    sampler.step()
    assert np.array_equal(s.assignment, longest)
    drone_in = seen[0].reshape(4, 8, -1)
    assert np.allclose(drone_in[..., :3], np.clip(goals_after_decision / s.scale, -1, 1), atol=1e-6)


def test_sixteen_drone_preset_trains_the_mission_over_the_eight_drone_layers():
    """swarm_assignment_16: 24 assignments for four groups, and group and drone layers frozen with
    the same networks as swarm_assignment's (their weights are loaded from its run)."""
    cfg16, cfg8 = load_config(ROOT / "configs" / "swarm_assignment_16.yaml"), load_config(PRESET)
    assert cfg16.layer("mission").action.n == len(permutations(4)) == 24
    assert cfg16.layer("group").agents.squads == parallel_env(scenario="16_medium").groups
    for name in ("group", "drone"):
        assert cfg16.layer(name).schedule.mode == "frozen"
        for key in ("hidden", "activation", "central_critic", "encoder"):
            assert getattr(cfg16.layer(name).policy, key) == getattr(cfg8.layer(name).policy, key), (name, key)
        assert cfg16.layer(name).observation == cfg8.layer(name).observation
