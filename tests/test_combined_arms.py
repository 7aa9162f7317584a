"""MAgent2 combined_arms_v6 by config alone: env.opponents (a team played inside the env), the
scripted attack-nearest team, unit types with different action counts sharing one policy, and
the two presets training for a few updates."""
import json

import numpy as np
import pytest

pytest.importorskip("magent2")

from hdppo.envs.builtin import magent
from hdppo.envs.errors import ConfigError, EnvError
from hdppo.envs.vector import make_vector_env
from hdppo.platform.config import load_config, validate

ENV_ID = "magent2.environments.combined_arms_v6"
KW = {"map_size": 16, "max_cycles": 30}
STANDING = "hdppo.envs.builtin.magent:standing"
RED = [f"red{k}_{i}" for k in ("melee", "ranged") for i in range(3)]

CALLS: list[list[str]] = []


def left_and_record(observations, env, rng):
    """A test opponent: records whom it was asked to play; every unit steps left (towards red)."""
    CALLS.append(sorted(observations))
    out = {}
    for a in observations:
        move = magent.action_table(env.action_space(a).n)[0]
        out[a] = move.index((-1, 0))
    return out


def venv_with(policy, n=1, **extra):
    return make_vector_env("pettingzoo", ENV_ID, None, KW, None, n, seed=0,
                           opponents={"agents": "blue", "policy": policy, **extra})


def test_the_scripted_team_acts_and_the_learners_see_only_their_own_agents():
    CALLS.clear()
    venv = venv_with("test_combined_arms:left_and_record", alive=STANDING)
    first = venv.reset(seed=0)
    assert venv.agents == RED and first.obs.shape == (1, 6, 13 * 13 * 9)
    # Melee units have 9 actions, ranged 25: one Discrete(25) space, the melee's extra ones masked.
    assert {venv.action_space(a).n for a in RED} == {25}
    assert first.masks[0, :3].sum(1).tolist() == [9] * 3 and first.masks[0, 3:].sum(1).tolist() == [25] * 3
    grid, blue = venv.copies[0].env.env, venv.copies[0].env.handles[2:]
    stay = np.array([[2, 2, 2, 6, 6, 6]])                # red stays put
    venv.step(stay)                                      # magent2 0.3.4 ignores the first step's actions
    before = np.concatenate([grid.get_pos(h) for h in blue])
    for _ in range(2):
        step = venv.step(stay)
    after = np.concatenate([grid.get_pos(h) for h in blue])
    assert (after[:, 0] - before[:, 0] == -2).all() and (after[:, 1] == before[:, 1]).all()
    blue_names = [f"blue{k}_{i}" for k in ("melee", "ranged") for i in range(3)]
    assert CALLS == [blue_names] * 3  # once per env step, blue only
    infos = step.infos[0]
    assert set(infos) == set(RED)
    assert all(i["learners_alive"] == 6 and i["opponents_alive"] == 6 for i in infos.values())


def test_bad_opponents_fields_give_errors_naming_the_field():
    base = {"name": "x", "env": {"type": "pettingzoo", "id": ENV_ID, "kwargs": KW}}
    for opp, fragment in [({"agents": "blue", "policy": "no_such_module:fn"}, "env.opponents.policy"),
                          ({"agents": "blue", "policy": "attack"}, "env.opponents.policy"),
                          ({"agents": [], "policy": "random"}, "env.opponents.agents"),
                          ({"agents": "blue", "polcy": "random"}, "Did you mean 'policy'")]:
        with pytest.raises(ConfigError, match=fragment.replace(".", r"\.").replace("(", r"\(")):
            validate(base | {"env": base["env"] | {"opponents": opp}})
    with pytest.raises(ConfigError, match="opponents needs a dict-keyed"):
        validate({"name": "x", "env": {"id": "CartPole-v1", "opponents": {"agents": "blue"}}})
    with pytest.raises(EnvError, match=r"env\.opponents\.agents: the prefix 'green' matches no agent"):
        make_vector_env("pettingzoo", ENV_ID, None, KW, None, 1, opponents={"agents": "green", "policy": "random"})
    everyone = RED + [f"blue{k}_{i}" for k in ("melee", "ranged") for i in range(3)]
    with pytest.raises(EnvError, match="matches every agent"):
        make_vector_env("pettingzoo", ENV_ID, None, KW, None, 1, opponents={"agents": everyone, "policy": "random"})


def view_with(enemy_at=(), friend_at=(), group=2, groups=4):
    """A 13x13x9 view of a unit of ``group``: enemies (red melee, group 0) and friends (its own
    team's other group) at ``(dx, dy)`` offsets."""
    v = np.zeros((13, 13, 9), np.float32)
    v[6, 6, 1:3] = 1.0
    others = [(group + k) % groups for k in range(1, groups)]
    for (dx, dy), g in [*((p, 0) for p in enemy_at), *((p, 3 if group == 2 else 2) for p in friend_at)]:
        c = 1 + 2 * (1 + others.index(g))
        v[6 + dy, 6 + dx, c:c + 2] = 1.0
    return v


def test_attack_nearest_attacks_an_enemy_in_range_and_not_a_friend():
    move9, attack9 = magent.action_table(9)
    assert len(move9) == 5 and attack9 == ((0, -1), (-1, 0), (1, 0), (0, 1))
    groups = 4
    melee_enemy = magent.enemy_channels(2, groups)
    # A blue melee unit with an enemy to its right attacks it.
    a = magent.unit_action(view_with(enemy_at=[(1, 0)]), 9, melee_enemy, 2, groups, None)
    assert a == len(move9) + attack9.index((1, 0))
    # Two in range: the nearest; a friend next to it is never attacked.
    move25, attack25 = magent.action_table(25)
    ranged_enemy = magent.enemy_channels(3, groups)
    v = view_with(enemy_at=[(0, 2), (1, -1)], friend_at=[(1, 0)], group=3)
    assert magent.unit_action(v, 25, ranged_enemy, 2, groups, None) == len(move25) + attack25.index((1, -1))
    v = view_with(friend_at=[(1, 0)])
    assert magent.unit_action(v, 9, melee_enemy, 2, groups, None) == move9.index((0, 0))
    # An enemy out of range: a step towards it (not onto the friend in the way).
    v = view_with(enemy_at=[(4, 0)], friend_at=[(1, 0)])
    step = move9[magent.unit_action(v, 9, melee_enemy, 2, groups, None)]
    assert step in ((0, -1), (0, 1))
    v = view_with(enemy_at=[(-4, 1)])
    assert move9[magent.unit_action(v, 9, melee_enemy, 2, groups, None)] == (-1, 0)


def test_nearest_teacher_labels_the_scripted_units_actions_through_the_engine_copies():
    """The kickstarting teacher, called as the engine calls it (the copy's raw observations, one
    unit, the copy behind env.opponents), gives each red unit the action the script gives it."""
    venv = venv_with("random", n=2, alive=STANDING)
    venv.reset(seed=0)
    for i in range(2):
        raw, env = venv.raw_obs(i), venv.copy_env(i)
        script = magent.attack_nearest({a: raw[a] for a in RED if a in raw}, env, np.random.default_rng(0))
        labels = {a: magent.nearest_teacher(raw, [a], env) for a in RED if a in raw}
        assert labels == script and len(labels) == len(RED)
        assert all(0 <= v < env.action_space(a).n for a, v in labels.items())
    venv.close()


def test_attack_nearest_beats_a_random_team_in_the_real_game():
    venv = make_vector_env("pettingzoo", ENV_ID, None, {"map_size": 16, "max_cycles": 60}, None, 1,
                           opponents={"agents": "red", "policy": "hdppo.envs.builtin.magent:attack_nearest",
                                      "alive": STANDING})
    # Here blue learns nothing: it plays at random from the test, the script plays red.
    venv.reset(seed=1)
    rng = np.random.default_rng(0)
    results = []
    while len(results) < 2:
        acts = np.array([[rng.integers(9 if "melee" in a else 25) for a in venv.agents]])
        step = venv.step(acts)
        if step.episode_end[0]:
            info = next(iter(step.infos[0].values()))
            results.append((info["learners_alive"], info["opponents_alive"]))
            assert info["win"] == float(info["learners_alive"] > info["opponents_alive"])
    assert all(red > blue for blue, red in results), results
    # With an alive reading the outcome is charted per episode; without one, no win is claimed.
    assert venv.episode_metrics == ("win", "learners_alive", "opponents_alive")
    plain = venv_with("random")
    plain.reset(seed=0)
    assert plain.episode_metrics == () and "win" not in next(iter(plain.step(np.zeros((1, 6), int)).infos[0].values()))
    venv.close()
    plain.close()


@pytest.mark.parametrize("preset", ["combined_arms_hierarchy", "combined_arms_flat"])
def test_presets_load_and_train_a_few_updates(preset, tmp_path):
    from hdppo.platform.trainer import Trainer

    cfg = load_config(preset, ["ray.backend=local", "train.total_env_steps=128", "train.eval_episodes=1",
                               "train.checkpoint_every=100", "env.kwargs.max_cycles=20"])
    data = cfg.model_dump(mode="json")
    batch = {"strategy": 8, "squad": 16, "control": 96}  # decisions: about 64 env steps an update
    for layer in data["layers"]:
        layer["dppo"].update(train_batch_size=batch[layer["name"]], num_envs_per_worker=2)
        layer["ppo"].update(minibatch_size=batch[layer["name"]] // 2, num_epochs=1)
    for group in data.get("groups") or []:
        group["dppo"].update(num_envs_per_worker=2)
    cfg = validate(data)
    opponents = cfg.env.opponents.model_dump() if cfg.env.opponents is not None else cfg.env.kwargs["opponents"]
    assert opponents["agents"] == "blue" and opponents["policy"] == "random"
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["updates"] >= 2 and np.isfinite(summary["eval_return_mean"])
    # Both presets chart the win rate (the hierarchy's PettingZoo path did not: only the native env's did).
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {"episode/win", "episode/learners_alive"} <= {r["tag"] for r in rows}
