"""Three layers (strategy -> navigate -> control) on the built-in rooms task, which two layers do not solve."""
import numpy as np
import pytest

from conftest import ROOT
from hdppo.envs.builtin.rooms import E, N, S, W, follow_direction, parallel_env, reach_room
from hdppo.hierarchies.intrinsic import resolve
from hdppo.platform.config import load_config, validate
from hdppo.platform.trainer import Trainer

PRESET = ROOT / "configs" / "rooms_three_layers.yaml"


def three_layers(**over):
    """The preset, in this process, with ``over`` as ``--set`` overrides."""
    return load_config(PRESET, ["ray.backend=local", *[f"{k}={v}" for k, v in over.items()]])


def two_layers(period: int = 1, **over) -> dict:
    """The preset without its middle layer: strategy (state) commands world directions to the same
    control layer, every ``period`` env steps, with the same budget and one shared group."""
    cfg = three_layers(**over).model_dump(mode="json")
    strategy, _, control = cfg["layers"]
    strategy["period"] = period
    strategy["dppo"]["train_batch_size"] = 512 // period        # an update every 512 env steps, as in three layers
    strategy["ppo"]["minibatch_size"] = min(128, 512 // period)
    cfg["layers"] = [strategy, control]
    cfg["groups"] = [{"layers": ["strategy", "control"], "dppo": {"num_workers": 1, "num_envs_per_worker": 8}}]
    return cfg


# -- the env ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"num_agents": 3, "room_rows": 3, "room_cols": 2, "room_size": 3}])
def test_rooms_passes_pettingzoos_checks(kwargs):
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    parallel_api_test(parallel_env(**kwargs), num_cycles=300)
    parallel_seed_test(lambda: parallel_env(**kwargs), num_cycles=100)


def _env(door_v, door_h, cell, heading=0, goal=3):
    env = parallel_env(random_heading=False)
    env.reset(seed=0)
    env.door_v, env.door_h = np.array(door_v), np.array(door_h)
    env._tables()
    env.cell, env.heading, env.goal = [cell], [heading], goal
    return env


def test_walls_let_agents_through_their_doorways_only_and_distances_follow_them():
    # 2 x 2 rooms of 4 x 4: doorway rows 1 (rooms 0|1) and 2 (rooms 2|3), columns 3 (0/2) and 3 (1/3).
    env = _env([[1], [2]], [[3, 3]], cell=0)
    at = lambda r, c: r * 8 + c  # noqa: E731
    assert env.moves[at(0, 3), E] == at(0, 3)           # a wall
    assert env.moves[at(1, 3), E] == at(1, 4)           # the doorway
    assert env.moves[at(1, 4), W] == at(1, 3)           # both ways
    assert env.moves[at(3, 2), S] == at(3, 2) and env.moves[at(3, 3), S] == at(4, 3)
    assert env.moves[at(0, 0), N] == at(0, 0)           # the outer wall
    assert env.dist[1, at(1, 3)] == 1 and env.dist[1, at(0, 3)] == 2
    assert env.dist[3, at(0, 0)] == 10                  # via room 1 (door row 1, then column 7) or room 2
    obs = env._obs(0)
    R, sz = 4, 4
    doors = obs[R + 2 * sz: R + 2 * sz + 4 * (sz + 1)].reshape(4, sz + 1).argmax(1)
    assert obs[:R].argmax() == 0 and doors.tolist() == [sz, 1, 3, sz]  # N: none, E: row 1, S: column 3, W: none
    assert env.state().tolist() == [0, 0, 0, 1, 1, 0, 0, 0]           # goal room 3, the agent in room 0


def test_actions_turn_with_the_heading_and_rewards_and_infos_are_the_envs():
    env = _env([[1], [2]], [[3, 3]], cell=1 * 8 + 3, heading=1)  # facing east: "forward" is east
    _, rew, term, _, info = env.step({"agent_0": 0})
    assert info["agent_0"]["world_move"] == E and env.cell == [1 * 8 + 4]
    assert info["agent_0"]["progress"].tolist() == [-1, 1, -1, 0]  # into room 1, away from 0 and 2; 3 is 6 away either way
    assert rew["agent_0"] == -0.01 and not term["agent_0"]
    env.goal = 1
    env.cell = [1 * 8 + 3]
    _, rew, term, _, _ = env.step({"agent_0": 0})
    assert rew["agent_0"] == 1.0 and term["agent_0"] and env.agents == []


def test_follow_direction_rewards_the_commanded_world_direction_only():
    one_hot = np.eye(4, dtype=np.float32)
    assert follow_direction(one_hot[E], {"world_move": E}) == 1.0
    assert follow_direction(one_hot[E], {"world_move": N}) == 0.0
    assert follow_direction(one_hot[N], {}) == 0.0       # no move (the agent is gone)
    got = follow_direction(one_hot[[N, S, W]], [{"world_move": N}, {"world_move": N}, {"world_move": W}])
    assert got.tolist() == [1.0, 0.0, 1.0] and got.dtype == np.float32


def test_reach_room_sums_the_members_progress_toward_the_commanded_room():
    one_hot = np.eye(4, dtype=np.float32)
    p = lambda *v: {"progress": np.array(v, np.float32)}  # noqa: E731
    squad = {"agent_0": p(-1, 1, 0, 1), "agent_1": p(1, -1, 0, 1), "agent_2": {}}  # agent_2 is gone
    assert reach_room(one_hot[1], squad) == 0.0
    assert reach_room(one_hot[3], squad) == 2.0
    got = reach_room(one_hot[[0, 1]], [{"agent_0": p(-1, 1, 0, 1)}, {"agent_0": p(-1, 1, 0, 1)}])
    assert got.tolist() == [-1.0, 1.0]
    assert resolve("rooms_reach_room").fn is reach_room and resolve("rooms_reach_room").vectorized
    assert resolve("rooms_follow_direction").fn is follow_direction


# -- the hierarchy ------------------------------------------------------------------------------

def test_preset_has_three_layers_and_the_middle_one_is_rewarded_for_following_the_top():
    cfg = three_layers()
    assert [layer.name for layer in cfg.layers] == ["strategy", "navigate", "control"]
    assert cfg.layer("navigate").reward.intrinsic_fn == "rooms_reach_room"
    assert cfg.layer_groups() == [["strategy", "navigate", "control"]]
    validate(two_layers())


def test_the_middle_layers_intrinsic_reward_reaches_its_batches():
    """Sample with the preset's (untrained) policies: navigate's transitions carry progress
    toward strategy's commanded room, exactly as the env's infos report it."""
    from test_hierarchy import _runner

    runner, _ = _runner(three_layers(), ["strategy", "navigate", "control"], num_envs=4)
    # Per env step, strategy's command as navigate saw it and the env's infos of that step.
    seen: list[tuple[np.ndarray, list]] = []
    env_step = runner.venv.step

    def step(actions):
        cmd = runner.commands["strategy"].copy()
        res = env_step(actions)
        seen.append((cmd, [{a: dict(i) for a, i in copy.items()} for copy in res.infos]))
        return res

    runner.venv.step = step
    for _ in range(64):
        runner.step()
    buf = runner.buffers["navigate"]
    T = runner.t
    assert T == 65 and len(seen) == 64 and buf.decided[1:T].all()   # navigate decides every step (period 1)
    int_r = buf.int_r[1:T][buf.decided[1:T]]
    assert np.abs(int_r).sum() > 0 and set(np.unique(int_r)) <= {-1.0, 0.0, 1.0}
    # Row t was decided at step t - 1 and closed when navigate decided again: its intrinsic reward is
    # the progress, as that step's infos report it, toward the room strategy commanded then.
    for t, (cmd, infos) in enumerate(seen, start=1):
        for n in range(runner.N):
            room = int(np.argmax(cmd[n, 0]))
            assert cmd[n, 0].sum() == 1.0, (t, n)                       # a one-hot room every step
            assert buf.int_r[t, n, 0] == infos[n]["agent_0"]["progress"][room], (t, n)
    harvest = runner.harvest()
    assert harvest["navigate"].intrinsic_reward != 0 and harvest["strategy"].intrinsic_reward == 0
    assert harvest["control"].intrinsic_reward > 0   # follow rewards are never negative


@pytest.mark.learning
def test_three_layers_solve_rooms_and_two_layers_do_not(tmp_path):
    """benchmarks/results/three_layers.md records the spread over seeds behind these thresholds."""
    steps = {"train.total_env_steps": 60_000, "train.eval_episodes": 50}
    three = Trainer(three_layers(**steps), tmp_path / "three", quiet=True).train()
    two = Trainer(validate(two_layers(**steps)), tmp_path / "two", quiet=True).train()
    # 0.5: one seed lands anywhere in the spread of seeds (0.55-0.96 on 2026-12-07; see the file above)
    assert three["eval_return_mean"] >= 0.5, three
    assert two["eval_return_mean"] < 0.3, two
