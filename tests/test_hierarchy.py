"""Hierarchy spec, period alignment, episode ends, multi-agent adapters, frozen layers, learning."""
import numpy as np
import pytest
import torch

from conftest import ROOT, tiny_config
from hdppo.hierarchies.engine import Sampler, Track
from hdppo.hierarchies.spec import probe_env
from hdppo.platform.config import load_config, validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer, RewardScaler

CORRIDOR = {"type": "pettingzoo", "entry_point": "hdppo.envs.builtin.corridor:parallel_env",
            "kwargs": {"num_agents": 1, "length": 9, "max_steps": 24}}


def two_layers(**over):
    layers = [
        {"name": "strategy", "period": 4, "observation": {"source": "state"}, "action": {"type": "discrete", "n": 2},
         "ppo": {"lr": 1e-3, "num_epochs": 4, "minibatch_size": 64},
         "dppo": {"num_workers": 1, "num_envs_per_worker": 8, "train_batch_size": 256}},
        {"name": "control", "reward": {"env": 1.0, "intrinsic": 0.1, "intrinsic_fn": "corridor_follow"},
         "ppo": {"gamma": 0.9, "lr": 1e-3, "num_epochs": 4, "minibatch_size": 128},
         "dppo": {"num_workers": 1, "num_envs_per_worker": 8, "train_batch_size": 512}},
    ]
    return tiny_config(env=CORRIDOR, layers=layers, **over)


# -- spec validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("mutate,match", [
    (lambda c: c["layers"][0].update(period=0), r"layers\[0\].period"),
    (lambda c: c["layers"][1].update(period=2), r"bottom layer acts every env step"),
    (lambda c: c["layers"][0].update(action={"type": "env"}), r"layers\[0\] \(strategy\).action: only the bottom"),
    (lambda c: c["layers"][0].update(action={"type": "discrete"}), r"needs n"),
    (lambda c: c["layers"][0].update(action={"type": "box", "low": [0], "high": [float("inf")]}), r"layers\[0\].action.high\[0\]: Input should be a finite number"),
    (lambda c: c["layers"][1].update(observation={"command": False}, reward={"env": 1.0}), r"cannot take this command"),
    (lambda c: c["layers"][0].update(agents={"squads": {"a": ["walker_0"], "b": ["walker_0"]}}), r"'walker_0' is in two squads"),
    (lambda c: c["layers"][1].update(name="strategy"), r"names must be unique"),
    (lambda c: c["layers"][1].update(schedule={"start_after": {"layer": "nope", "env_steps": 5}}), r"start_after.layer"),
    (lambda c: c.update(groups=[["strategy"], ["strategy", "control"]]), r"is in groups 0 and 1"),
    # Gates that could never open, or gate nothing: they were accepted, and the run ended with the
    # layer untrained ("raise train.total_env_steps") or "the gates wait on each other".
    (lambda c: (c["layers"][0].update(schedule={"start_after": {"layer": "control", "env_steps": 5}}),
                c["layers"][1].update(schedule={"mode": "frozen"})), r"start_after.layer: 'control' is frozen"),
    (lambda c: c["layers"][0].update(schedule={"mode": "frozen", "start_after": {"layer": "control", "env_steps": 5}}),
     r"\(strategy\).schedule.start_after: layer 'strategy' is frozen"),
    (lambda c: (c["layers"][0].update(schedule={"start_after": {"layer": "control", "env_steps": 5}}),
                c.update(groups=[["strategy", "control"]])), r"is in the same DPPO group"),
    (lambda c: c["layers"][1].update(schedule={"mode": "scripted", "checkpoint": "runs/x"}, teacher={"policy": "m:f"}),
     r"schedule.checkpoint: a scripted layer acts by its teacher.policy"),
])
def test_inconsistent_hierarchies_name_layer_and_field(mutate, match):
    cfg = two_layers()
    mutate(cfg)
    with pytest.raises(ConfigError, match=match):
        validate(cfg)


def test_unknown_agent_is_named_against_the_env():
    cfg = validate(two_layers())
    cfg.layers[0].agents = ["walker_9"]
    with pytest.raises(ConfigError, match=r"layer 'strategy', agents: 'walker_9' is not an agent"):
        probe_env(cfg, 0)


def test_an_env_agent_no_layer_controls_is_refused():
    """It played action 0 on every step of the run, and nothing said so."""
    cfg = two_layers()
    cfg["env"] = {**cfg["env"], "kwargs": {**cfg["env"].get("kwargs", {}), "num_agents": 2}}
    cfg = validate(cfg)
    cfg.layers[-1].agents = ["walker_0"]
    with pytest.raises(ConfigError, match=r"layer 'control', agents: 'walker_1' of env .* is in no lane of the bottom "
                                          r"layer, so nothing would choose its actions .* env.opponents"):
        probe_env(cfg, 0)


def test_unknown_bottom_layer_agents_are_named_against_the_env():
    cfg = validate(two_layers())
    cfg.layers[-1].agents = ["walker_9", "nobody"]
    with pytest.raises(ConfigError, match=r"layer 'control', agents: 'walker_9', 'nobody' are not agents of env "
                                          r".*; its agents are walker_0"):
        probe_env(cfg, 0)


# -- period alignment on a scripted env ---------------------------------------------------------

def _runner(cfg, recorded, num_envs=1):
    venv, first, specs = probe_env(cfg, 0, num_envs)
    pols = {s.name: ActorCritic(s.obs_dim, s.action_space) for s in specs}
    norms = {s.name: ObservationNormalizer((s.obs_dim,), enabled=False) for s in specs}
    tracks = {name: Track(cfg.layer(name).ppo.gamma, 0.95, cfg.layer(name).reward.discount == "smdp",
                          RewardScaler(0, cfg.layer(name).ppo.gamma, enabled=False)) for name in recorded}
    return Sampler(specs, venv, pols, norms, tracks, first=first), tracks


def _rows(sampler, layer, copy=0, lane=0):
    """The decided rows of one lane in time order, as dicts (what the buffers hold about them)."""
    buf = sampler.buffers[layer]
    out = []
    for t in range(sampler.t):
        if buf.decided[t, copy, lane]:
            booted = any(((r[:, 0] == t) & (r[:, 1] == copy) & (r[:, 2] == lane)).any() for r in buf.boot_rows)
            out.append({k: getattr(buf, k)[t, copy, lane] for k in ("steps", "R", "gam", "end", "term", "closed")}
                       | {"booted": booted, "open": buf.open_row[copy, lane] == t})
    return out


@pytest.mark.parametrize("discount", ["smdp", "decision"])
def test_upper_layer_transitions_align_to_period_and_sum_rewards(discount):
    # Countdown env: reward 1 per step, truncated at 10 steps; strategy acts every 4 steps.
    cfg = validate(tiny_config(
        env={"type": "gymnasium", "entry_point": "scripted_envs:countdown", "max_episode_steps": 10},
        layers=[{"name": "strategy", "period": 4, "observation": {"source": "env"}, "action": {"type": "discrete", "n": 2},
                 "reward": {"discount": discount}, "ppo": {"gamma": 0.5, "minibatch_size": 4}},
                {"name": "control", "ppo": {"minibatch_size": 4}}]))
    runner, _ = _runner(cfg, ["strategy", "control"])
    for _ in range(10):
        runner.step()
    seq = _rows(runner, "strategy")
    assert [t["steps"] for t in seq] == [4, 4, 2]            # the episode end closes the last one early
    assert [bool(t["end"]) for t in seq] == [False, False, True] and not seq[-1]["term"]  # truncated
    assert seq[-1]["booted"]                                 # bootstrapped from the true final state
    if discount == "smdp":
        assert seq[0]["R"] == pytest.approx(1 + 0.5 + 0.25 + 0.125) and seq[0]["gam"] == pytest.approx(0.5**4)
        assert seq[2]["gam"] == pytest.approx(0.5**2)
    else:
        assert seq[0]["R"] == pytest.approx(4.0) and seq[0]["gam"] == pytest.approx(0.5)
    control = _rows(runner, "control")
    assert len(control) == 10 and all(t["steps"] == 1 for t in control) and control[-1]["end"]
    assert all(t["closed"] for t in seq + control)  # every layer closed at the end


def test_open_transition_carries_into_next_rollout_and_bootstraps():
    cfg = validate(tiny_config(
        env={"type": "gymnasium", "entry_point": "scripted_envs:countdown", "max_episode_steps": 50},
        layers=[{"name": "strategy", "period": 4, "observation": {"source": "env"}, "action": {"type": "discrete", "n": 2},
                 "ppo": {"minibatch_size": 2}}, {"name": "control", "ppo": {"minibatch_size": 2}}]))
    runner, _ = _runner(cfg, ["strategy"])
    for _ in range(6):  # decisions at 0 and 4: one closed, one open
        runner.step()
    buf = runner.buffers["strategy"]
    open_row = int(buf.open_row[0, 0])
    harvest = runner.harvest()["strategy"]
    batch = harvest.batch
    assert len(batch) == 1 and harvest.env_reward == 4
    pending_value = buf.value[0, 0, 0]  # the open transition, now carried over to row 0
    assert open_row == 5 and buf.decided[0, 0, 0] and not buf.closed[0, 0, 0] and buf.steps[0, 0, 0] == 2
    # GAE with the open transition's value as V(next decision state): adv = R + gamma^4 V' - V
    r = sum(0.99**k for k in range(4))
    assert batch.advantages[0] == pytest.approx(r + 0.99**4 * pending_value - batch.values[0], rel=1e-4)
    for _ in range(3):  # it closes at the next decision (episode step 8), with all 4 steps of reward
        runner.step()
    assert runner.buffers["strategy"].closed[0, 0, 0] and runner.buffers["strategy"].steps[0, 0, 0] == 4


def test_flat_rollout_ends_with_a_bootstrap_from_the_next_observation():
    """One layer, no command: the last step of a rollout closes with V(next obs), as flat PPO does."""
    cfg = validate(tiny_config(env={"type": "gymnasium", "entry_point": "scripted_envs:countdown",
                                    "max_episode_steps": 50}, layers=[{"name": "control", "ppo": {"minibatch_size": 2}}]))
    runner, _ = _runner(cfg, ["control"], num_envs=2)
    harvests, _, steps = runner.collect({"control": 10})
    batch = harvests["control"].batch
    assert steps == 10 and len(batch) == 10            # 5 steps x 2 copies, nothing left open
    assert not (runner.buffers["control"].open_row >= 0).any()
    with torch.inference_mode():
        v_next = runner.policies["control"].value(torch.from_numpy(runner.now.obs[:, 0])).numpy()
    last = batch.advantages[-2:]  # time-major: the last step's two copies
    expected = 1.0 + 0.99 * v_next - batch.values[-2:]
    assert last == pytest.approx(expected, rel=1e-4, abs=1e-5)


# -- PettingZoo adapters ------------------------------------------------------------------------

def test_pettingzoo_generated_agents_of_different_sizes_are_refused_clearly():
    """PettingZoo's own generated-agents env creates agents of three types with different sizes."""
    cfg = validate(tiny_config(env={"type": "pettingzoo", "id": "pettingzoo.test.example_envs.generated_agents_parallel_v0"},
                               layers=[{"name": "control", "ppo": {"minibatch_size": 32}}]))
    with pytest.raises(ConfigError, match="layer 'control', agents: the env's agents have different observation sizes"):
        probe_env(cfg, 0)


def test_agents_that_die_mid_episode_close_their_own_lane_only():
    cfg = validate(tiny_config(env={**CORRIDOR, "kwargs": {"num_agents": 3, "length": 3, "max_steps": 30}},
                               layers=[{"name": "control", "ppo": {"minibatch_size": 4}}]))
    runner, _ = _runner(cfg, ["control"])
    buf = runner.buffers["control"]
    partial = False
    for _ in range(200):
        live_before = runner.now.alive[0].copy()
        runner.step()
        live = runner.now.alive[0]
        if live.any() and (live < live_before).any() and not (live > live_before).any():  # someone left, the episode goes on
            partial = True
            for lane in np.flatnonzero(live_before & ~live):
                last = _rows(runner, "control", 0, lane)[-1]
                assert last["end"] and last["term"] and not last["open"]
                assert buf.open_row[0, lane] == -1
            for lane in np.flatnonzero(live):
                assert buf.open_row[0, lane] >= 0
    assert partial
    batch = runner.harvest()["control"].batch
    assert np.isfinite(batch.advantages).all()


def test_turn_based_aec_env_with_action_masks_honours_the_masks():
    """PettingZoo's tic-tac-toe (AEC, not parallelizable, Dict observations with action_mask)."""
    cfg = validate(tiny_config(env={"type": "pettingzoo", "id": "pettingzoo.classic.tictactoe_v3"},
                               layers=[{"name": "control", "ppo": {"minibatch_size": 32}}]))
    probe, _, specs = probe_env(cfg, 0)
    assert specs[0].mask_dim == 9
    runner, _ = _runner(cfg, ["control"])
    for _ in range(40):  # illegal moves would end the game with a penalty and a warning; none may happen
        runner.step()
    batch = runner.harvest()["control"].batch
    chosen = batch.actions[:, 0].astype(int)
    assert (batch.masks[np.arange(len(batch)), chosen] == 1).all()
    # The loss sees the same mask: masked actions have (numerically) zero probability.
    policy = runner.policies["control"]
    logits_mask = torch.as_tensor(batch.masks)
    logp, _ = policy.log_prob_entropy(torch.as_tensor(batch.obs), torch.as_tensor(batch.actions), logits_mask)
    assert torch.isfinite(logp).all()
    illegal = (batch.masks == 0).argmax(1)
    has_illegal = (batch.masks == 0).any(1)
    lp_illegal, _ = policy.log_prob_entropy(torch.as_tensor(batch.obs[has_illegal]),
                                            torch.as_tensor(illegal[has_illegal, None].astype(np.float32)),
                                            logits_mask[has_illegal])
    assert (lp_illegal < -1e6).all()


def test_parameter_sharing_with_agent_ids_and_central_critic():
    cfg = validate(tiny_config(env={**CORRIDOR, "kwargs": {"num_agents": 3}},
                               layers=[{"name": "control", "observation": {"agent_id": True},
                                        "policy": {"central_critic": True}, "ppo": {"minibatch_size": 32}}]))
    probe, _, specs = probe_env(cfg, 0)
    s = specs[0]
    state_dim = 2 + 3 * 9
    # MAPPO's agent-specific global state: state(), then the agent's own input (obs and id).
    assert s.obs_dim == 9 + 3 and s.critic_dim == state_dim + s.obs_dim
    runner, _ = _runner(cfg, ["control"])
    for _ in range(5):
        runner.step()
    batch = runner.harvest()["control"].batch
    assert batch.critic_obs.shape[1] == s.critic_dim
    assert set(np.argmax(batch.obs[:, 9:], 1)) == {0, 1, 2}  # one policy, three agent ids
    np.testing.assert_array_equal(batch.critic_obs[:, state_dim:], batch.obs)
    # So the three agents of one step get three different critic inputs.
    assert len({row.tobytes() for row in batch.critic_obs[:3]}) == 3


def test_a_state_only_central_critic_reads_the_same_input_for_every_agent():
    cfg = validate(tiny_config(env={**CORRIDOR, "kwargs": {"num_agents": 3}},
                               layers=[{"name": "control", "observation": {"agent_id": True},
                                        "policy": {"central_critic": True, "critic_input": "state"},
                                        "ppo": {"minibatch_size": 32}}]))
    _, _, specs = probe_env(cfg, 0)
    assert specs[0].critic_dim == 2 + 3 * 9
    runner, _ = _runner(cfg, ["control"])
    for _ in range(5):
        runner.step()
    batch = runner.harvest()["control"].batch
    assert batch.critic_obs.shape[1] == specs[0].critic_dim
    # Rows go step by step, the three agents (lanes) of a step together (ids: copy, step, lane).
    from hdppo.platform.batch import ID_COPY, ID_LANE, ID_STEP

    assert batch.ids[:3, ID_LANE].tolist() == [0, 1, 2] and len(set(batch.ids[:3, ID_STEP])) == 1
    assert len({row.tobytes() for row in batch.obs[:3]}) == 3  # three agents, three policy inputs
    assert len({row.tobytes() for row in batch.critic_obs[:3]}) == 1  # one critic input: the state
    # And so at every step: one critic input per (copy, step), the state of that step.
    steps = {}
    for key, row in zip(map(tuple, batch.ids[:, [ID_COPY, ID_STEP]]), batch.critic_obs):
        steps.setdefault(key, set()).add(row.tobytes())
    assert len(steps) >= 4 and all(len(rows) == 1 for rows in steps.values()), steps


def test_squads_get_their_own_commands():
    cfg = validate(tiny_config(env={**CORRIDOR, "kwargs": {"num_agents": 4}}, layers=[
        {"name": "squad", "period": 2, "agents": {"squads": {"a": ["walker_0", "walker_1"], "b": ["walker_2", "walker_3"]}},
         "observation": {"source": "env"}, "action": {"type": "discrete", "n": 2}, "ppo": {"minibatch_size": 4}},
        {"name": "control", "ppo": {"minibatch_size": 4}}]))
    probe, _, specs = probe_env(cfg, 0)
    assert specs[0].lanes == ["a", "b"] and specs[0].obs_dim == 2 * 9
    runner, _ = _runner(cfg, ["squad"])
    runner.step()
    cmd = runner.commands["squad"][0]          # [lanes, n]: a one-hot command for each squad
    assert cmd.shape == (2, 2) and (cmd.sum(1) == 1).all()
    # Each walker receives its own squad's command.
    plan = runner.plans[1]
    assert plan.parent_of.tolist() == [0, 0, 1, 1]


# -- training -----------------------------------------------------------------------------------

def test_frozen_layer_stays_bit_identical(tmp_path):
    cfg = two_layers(train={"total_env_steps": 3000, "checkpoint_every": 100, "eval_episodes": 1})
    cfg["layers"][0]["schedule"] = {"mode": "frozen"}
    trainer = Trainer(validate(cfg), tmp_path / "run", quiet=True)
    trainer.setup()
    before = {k: v.clone() for k, v in trainer.fixed["strategy"].policy.state_dict().items()}
    trainer.metrics.close()
    trainer2 = Trainer(validate(cfg), tmp_path / "run2", quiet=True)
    trainer2.train()
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint

    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run2")))
    for k, v in before.items():
        assert torch.equal(states["strategy"]["policy"][k], v)
    assert states["control"]["updates"] > 0 and "strategy" not in {g.name for g in trainer2.groups}


def test_staged_start_waits_for_the_other_layer(tmp_path):
    cfg = two_layers(train={"total_env_steps": 6000, "checkpoint_every": 100, "eval_episodes": 1})
    cfg["layers"][0]["schedule"] = {"start_after": {"layer": "control", "env_steps": 3000}}
    seen = []
    trainer = Trainer(validate(cfg), tmp_path / "run", quiet=True,
                      hooks=[lambda t, layer, step, m: seen.append((layer, t.groups[1].env_steps))])
    trainer.train()
    first_strategy = next(steps for layer, steps in seen if layer == "strategy")
    assert first_strategy >= 3000


def test_a_mean_return_gate_opens_once_and_stays_open():
    """The gate was checked again before every update: a started layer paused whenever the gate
    layer's latest return dipped below the threshold, or its latest update ended no episode (and
    after a resume, whose last metrics are empty)."""
    from types import SimpleNamespace

    from hdppo.platform import metrics as M

    cfg = two_layers()
    cfg["layers"][0]["schedule"] = {"start_after": {"layer": "control", "mean_return": 0.5}}
    cfg = validate(cfg)
    strategy = SimpleNamespace(name="strategy", layers=["strategy"], env_steps=0.0)
    control = SimpleNamespace(name="control", layers=["control"], env_steps=5000.0)
    t = SimpleNamespace(cfg=cfg, last={}, groups=[strategy, control], _opened=set())
    assert not Trainer._started(t, strategy)                       # no return yet
    t.last["control"] = {M.CHART_EPISODIC_RETURN: 0.3}
    assert not Trainer._started(t, strategy)
    t.last["control"] = {M.CHART_EPISODIC_RETURN: 0.9}
    assert Trainer._started(t, strategy)
    for later in ({M.CHART_EPISODIC_RETURN: 0.3}, {M.LOSS_POLICY: 0.0}):   # a dip; an update with no episode
        t.last["control"] = later
        assert Trainer._started(t, strategy)
    resumed = SimpleNamespace(cfg=cfg, last={}, groups=[strategy, control], _opened=set())
    strategy.env_steps = 2048.0                                      # it had trained before the resume
    assert Trainer._started(resumed, strategy)


def test_groups_share_the_env_steps_equally_though_their_updates_differ(tmp_path):
    """strategy's update takes 1,024 env steps (256 decisions every 4 steps), control's 512:
    updating both every iteration would give strategy two thirds of the run."""
    cfg = two_layers(train={"total_env_steps": 8192, "checkpoint_every": 100, "eval_episodes": 1})
    trainer = Trainer(validate(cfg), tmp_path / "run", quiet=True)
    trainer.train()
    steps = {g.layers[0]: g.env_steps for g in trainer.groups}
    assert abs(steps["strategy"] - steps["control"]) <= 1024, steps
    assert 3500 <= steps["control"] <= 4700, steps


def test_budget_rule_keeps_groups_within_one_update():
    from hdppo.platform.budget import groups_to_update, levels

    assert groups_to_update([0, 0], [0, 0]) == [True, True]              # first iteration: all
    assert groups_to_update([1024, 512], [1024, 512]) == [False, True]   # the slow one waits
    assert groups_to_update([1024, 1024], [1024, 512]) == [True, True]
    steps, incs = [0.0, 0.0], [1024.0, 512.0]
    for _ in range(40):   # simulated iterations: the shares stay within one update
        pick = groups_to_update(steps, incs)
        assert any(pick)
        steps = [s + d * p for s, d, p in zip(steps, incs, pick)]
        assert abs(steps[0] - steps[1]) <= 1024
    # a group that starts late is levelled with the others, not left to catch up alone
    lv, off = levels([3000.0, 0.0], [0.0, None])
    assert lv == [3000.0, 3000.0] and off == [0.0, -3000.0]
    assert levels([5000.0, 2000.0], [None, None]) == ([2000.0, 2000.0], [3000.0, 0.0])  # resumed unequal


@pytest.mark.learning
def test_two_layer_task_only_the_hierarchy_solves(tmp_path):
    hier = Trainer(validate(two_layers(train={"total_env_steps": 60_000, "checkpoint_every": 100, "eval_episodes": 20})),
                   tmp_path / "h", quiet=True).train()
    flat = Trainer(validate(tiny_config(env=CORRIDOR, layers=[two_layers()["layers"][1] | {"reward": {"env": 1.0}}],
                                        train={"total_env_steps": 30_000, "checkpoint_every": 100, "eval_episodes": 20})),
                   tmp_path / "f", quiet=True).train()
    assert hier["eval_return_mean"] >= 0.9, hier   # reaches the goal (0.97 at best) every time
    assert flat["eval_return_mean"] < 0.6, flat    # without the goal side it can be right half the time


def test_hierarchy_trains_through_ray_with_a_group_per_layer(ray_session, tmp_path):
    from hdppo.platform import metrics as M

    cfg = validate(two_layers(train={"total_env_steps": 4000, "checkpoint_every": 100, "eval_episodes": 2},
                              ray={"backend": "ray"}))
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        trainer.train()
        assert [g.layers for g in trainer.groups] == [["strategy"], ["control"]]
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    by_layer = {layer: {r["tag"] for r in rows if r["layer"] == layer} for layer in ("strategy", "control")}
    assert "charts/commands/0" in by_layer["strategy"] and M.CHART_REWARD_INTRINSIC in by_layer["control"]
    assert (tmp_path / "run" / "tb" / "strategy").is_dir() and (tmp_path / "run" / "tb" / "control").is_dir()


def test_corridor_preset_loads():
    assert len(load_config(ROOT / "configs" / "corridor_hierarchy.yaml").layers) == 2


def test_ant_navigate_env_passes_the_checker_and_trains_in_two_stages(tmp_path):
    """configs/ant_navigate_walk.yaml trains the walk skill under a frozen random navigator;
    configs/ant_navigate.yaml loads that skill frozen and trains the navigator."""
    from gymnasium.utils.env_checker import check_env

    from hdppo.envs.builtin.ant_navigate import make
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint

    check_env(make(), skip_render_check=True)
    small = ["ray.backend=local", "train.total_env_steps=3000", "train.eval_episodes=1"]
    walk_cfg = load_config(ROOT / "configs" / "ant_navigate_walk.yaml", small + ["layers.walk.dppo.train_batch_size=512"])
    assert walk_cfg.layer_groups() == [["walk"]]
    Trainer(walk_cfg, tmp_path / "walk", quiet=True).train()
    cfg = load_config(ROOT / "configs" / "ant_navigate.yaml",
                      small + ["layers.navigate.dppo.train_batch_size=64", f"layers.walk.schedule.checkpoint={tmp_path / 'walk'}"])
    assert cfg.layer_groups() == [["navigate"]]
    summary = Trainer(cfg, tmp_path / "nav", quiet=True).train()
    assert summary["env_steps"] >= 3000 and np.isfinite(summary["eval_return_mean"])
    skill = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "walk")))["walk"]
    used = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "nav")))
    assert skill["updates"] > 0 and used["navigate"]["updates"] > 0
    for k, v in skill["policy"].items():  # the stage-1 skill, loaded and left untouched
        assert torch.equal(used["walk"]["policy"][k], v)


def test_rllib_multi_agent_env_plugs_in():
    cfg = validate(tiny_config(env={"type": "rllib", "entry_point": "scripted_envs:rllib_two_cartpoles"},
                               layers=[{"name": "control", "ppo": {"minibatch_size": 16}}]))
    runner, recs = _runner(cfg, ["control"])
    episodes = []
    for _ in range(150):
        episodes += runner.step()
    batch = runner.harvest()["control"].batch
    assert len(batch) >= 150 and batch.obs.shape[1] == 4
    assert episodes and all(np.isfinite(r) for r, _, _ in episodes)


def test_count_bonus_decays_with_visits():
    from hdppo.platform.config import ExplorationSpec
    from hdppo.policies.bonuses import make_bonus

    bonus = make_bonus(ExplorationSpec(type="count", hash_bits=16), 3, "control")
    s = np.array([[0.5, -1.0, 2.0]])
    first, second = bonus(s, 0.1)[0], bonus(s, 0.1)[0]
    assert first == pytest.approx(0.1) and second == pytest.approx(0.1 / np.sqrt(2))
    assert bonus(np.array([[-3.0, 2.0, -1.0]]), 0.1)[0] == pytest.approx(0.1)  # a different state


def _control_metrics_with(tmp_path, exploration: dict, steps: int) -> dict[str, list[float]]:
    """Train the corridor hierarchy with an exploration bonus on 'control'; its logged series."""
    from hdppo.platform import metrics as M

    cfg = two_layers(train={"total_env_steps": steps, "checkpoint_every": 100, "eval_episodes": 1})
    cfg["layers"][1]["exploration"] = exploration
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    series: dict[str, list[float]] = {}
    for r in M.read_jsonl(tmp_path / "run" / "metrics.jsonl"):
        if r["layer"] == "control":
            series.setdefault(r["tag"], []).append(r["value"])
    return series


def _closed_rewards(cfg, layer: str, steps: int = 40) -> dict[str, np.ndarray]:
    """A rollout worker of ``layer`` steps its sampler: the reward parts of the transitions closed
    so far (R, the reward recorded for training, before any scaling; and its env, intrinsic and
    bonus parts, kept apart for the charts)."""
    from hdppo.platform.parameter_service import ParameterService
    from hdppo.platform.rollout_worker import RolloutWorker

    sampler = RolloutWorker(cfg, [layer], 0, 1, ParameterService()).sampler
    for _ in range(steps):
        sampler.step()
    buf = sampler.buffers[layer]
    closed = buf.closed[:sampler.t]
    assert closed.sum() > 0
    return {k: getattr(buf, k)[:sampler.t][closed] for k in ("R", "env_r", "int_r", "bonus")}


def test_count_bonus_reaches_the_recorded_reward_and_is_logged(tmp_path):
    from hdppo.platform import metrics as M

    bonus = _control_metrics_with(tmp_path, {"type": "count", "coeff": 0.05}, 2000)[M.CHART_EXPLORATION_BONUS]
    assert bonus and all(0 < b <= 0.05 for b in bonus)
    # The chart reads the bonus part; the reward trained on holds it too: R = env + 0.1 intrinsic + bonus.
    cfg = two_layers()
    cfg["layers"][1]["exploration"] = {"type": "count", "coeff": 0.05}
    parts = _closed_rewards(validate(cfg), "control")
    assert np.all(parts["bonus"] > 0) and np.all(parts["bonus"] <= 0.05 + 1e-6)  # coeff / sqrt(visits), in float32
    np.testing.assert_allclose(parts["R"], parts["env_r"] + 0.1 * parts["int_r"] + parts["bonus"], rtol=0, atol=1e-6)


def test_rnd_predictor_is_trained_by_the_learner_and_the_target_stays_fixed(tmp_path):
    from hdppo.platform import metrics as M
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.policies.bonuses.rnd import RND

    series = _control_metrics_with(tmp_path, {"type": "rnd", "coeff": 0.05}, 6000)
    rnd_loss, bonus = series[M.LOSS_RND], series[M.CHART_EXPLORATION_BONUS]
    # The predictor learns the target: its loss falls below where it started (the states it sees
    # shift as the policy learns, so the series is not monotone).
    assert len(rnd_loss) >= 3 and min(rnd_loss[1:]) < rnd_loss[0], rnd_loss
    assert bonus and all(b > 0 for b in bonus)
    state = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))["control"]["bonus"]["rnd"]
    fresh = RND(11, [64, 64], 32, "control")
    for k, v in fresh.target.state_dict().items():
        assert torch.equal(state[f"target.{k}"], v)   # same target everywhere, never trained
    assert any(not torch.equal(state[f"predictor.{k}"], v) for k, v in fresh.predictor.state_dict().items())


def test_rnd_with_dppo_mode_is_refused():
    cfg = two_layers()
    cfg["layers"][1]["exploration"] = {"type": "rnd"}
    cfg["layers"][1]["dppo"]["mode"] = "dppo"
    with pytest.raises(ConfigError, match="'rnd' needs dppo.mode 'central'"):
        validate(cfg)


def test_turn_based_aec_keeps_waiting_agents_alive_and_ages_their_transitions():
    """Tic-tac-toe: both players stay live while one acts; a waiting player's open transition
    keeps aging, and the final reward reaches the player who moved last as well."""
    cfg = validate(tiny_config(env={"type": "pettingzoo", "id": "pettingzoo.classic.tictactoe_v3"},
                               layers=[{"name": "control", "ppo": {"minibatch_size": 32}}]))
    runner, _ = _runner(cfg, ["control"])
    runner.step()
    assert runner.now.alive[0].sum() == 2 and runner.now.acting[0].sum() == 1
    buf = runner.buffers["control"]
    runner.step()
    assert buf.steps[buf.open_row[0, 0], 0, 0] == 2  # the first player's own move, then the opponent's
    for _ in range(60):
        runner.step()
    ends = buf.closed[: runner.t] & buf.end[: runner.t]
    assert ends.any() and buf.term[: runner.t][ends].all()
    assert (np.abs(buf.env_r[: runner.t][ends]) == 1.0).any()


def test_agents_outside_every_upper_lane_are_refused():
    cfg = validate(tiny_config(env={**CORRIDOR, "kwargs": {"num_agents": 2}}, layers=[
        {"name": "squad", "period": 2, "agents": ["walker_0"], "observation": {"source": "env"},
         "action": {"type": "discrete", "n": 2}, "ppo": {"minibatch_size": 4}},
        {"name": "control", "ppo": {"minibatch_size": 4}}]))
    with pytest.raises(ConfigError, match=r"no lane of layers\[0\] \(squad\) holds \['walker_1'\] \(its lanes: "
                                          r"group: \['walker_0'\]\)\. .* use agents: all"):
        probe_env(cfg, 0)


def test_intrinsic_reward_is_accepted_on_an_upper_layer_and_unknown_names_are_refused():
    cfg = two_layers()
    cfg["layers"][0]["reward"] = {"env": 1.0, "intrinsic": 1.0, "intrinsic_fn": "corridor_follow"}
    assert validate(cfg).layers[0].reward.intrinsic_fn == "corridor_follow"
    cfg["layers"][0]["reward"]["intrinsic_fn"] = "corridor_folow"
    with pytest.raises(ConfigError, match=r"'corridor_folow' is not a registered reward; registered: .*corridor_follow"):
        validate(cfg)


def test_parallelizable_aec_env_goes_through_pettingzoos_conversion():
    from hdppo.envs.adapters import ParallelAdapter, make_multi_agent

    adapter = make_multi_agent("pettingzoo", None, "scripted_envs:corridor_aec", {}, None)
    # aec_to_parallel hands back the parallel env that parallel_to_aec wrapped.
    assert type(adapter) is ParallelAdapter and type(adapter.env).__name__ == "CorridorEnv"
    obs = adapter.reset(seed=0)
    assert set(obs) == {"walker_0", "walker_1"} and adapter.acting == adapter.agents


def test_ant_intrinsic_rewards():
    from hdppo.envs.builtin.ant_navigate import heading_frame_direction as ant_heading_frame_direction
    from hdppo.envs.builtin.ant_navigate import velocity_tracking as ant_velocity_tracking
    from hdppo.hierarchies.intrinsic import resolve

    def info(vx, vy, ctrl=0.0):
        return {"x_velocity": vx, "y_velocity": vy, "reward_ctrl": ctrl}

    assert ant_velocity_tracking(np.array([1.0, 0.0]), info(1.0, 0.0)) == pytest.approx(1.0)
    facing_north = _ant_obs(yaw=np.pi / 2)
    reward = lambda command, vx, vy, ctrl=0.0: ant_heading_frame_direction(  # noqa: E731
        np.array(command), next_obs=facing_north, info=info(vx, vy, ctrl))
    # The command is read in the heading frame: (1, 0) is "ahead", which for this Ant is north.
    assert reward([1.0, 0.0], 0.0, 2.0) == pytest.approx(3.0)        # healthy 1 + 2 m/s ahead
    assert reward([1.0, 0.0], 2.0, 0.0) == pytest.approx(1.0)        # east is its right: nothing
    assert reward([0.0, 1.0], -2.0, 0.0) == pytest.approx(3.0)       # "left" of a north-facing Ant is west
    assert reward([0.0, -0.3], -2.0, 0.0) == pytest.approx(-1.0)     # only the direction counts
    assert reward([1.0, 0.0], 0.0, 0.0, ctrl=-0.25) == pytest.approx(0.75)  # Ant's control cost
    assert resolve("ant_heading_frame_direction").fn is ant_heading_frame_direction


def _ant_obs(yaw: float, tilt: tuple[float, float] = (0.0, 0.0), velocity=(0.0, 0.0)) -> np.ndarray:
    """An Ant-v5 observation (27 values) whose torso faces ``yaw`` after a small roll/pitch ``tilt``."""
    def mul(a, b):
        w1, x1, y1, z1 = a
        w2, x2, y2, z2 = b
        return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                         w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])
    roll, pitch = tilt
    q = mul(np.array([np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)]),
            mul(np.array([np.cos(pitch / 2), 0, np.sin(pitch / 2), 0]), np.array([np.cos(roll / 2), np.sin(roll / 2), 0, 0])))
    obs = np.linspace(-1.0, 1.0, 27)  # joints and the rest: arbitrary, must pass through unchanged
    obs[1:5], obs[13:15] = q, velocity
    return obs


def test_egocentric_view_is_the_same_whichever_way_the_ant_faces():
    from hdppo.envs.builtin.ant_navigate import egocentric, without_yaw, yaw

    tilt = (0.2, -0.1)
    base = egocentric({"agent": _ant_obs(0.0, tilt, velocity=(1.5, 0.5))}, ["agent"])
    for heading in (0.7, np.pi / 2, -2.5):
        c, s = np.cos(heading), np.sin(heading)
        # The same Ant and motion turned by `heading` about the vertical axis.
        turned = _ant_obs(heading, tilt, velocity=(c * 1.5 - s * 0.5, s * 1.5 + c * 0.5))
        assert yaw(turned[1:5]) == pytest.approx(heading)
        np.testing.assert_allclose(egocentric({"agent": turned}, ["agent"]), base, atol=1e-6)
    assert yaw(without_yaw(_ant_obs(2.0, tilt)[1:5])) == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(base[13:15], [1.5, 0.5], atol=1e-6)  # facing east: nothing to turn
    untouched = [i for i in range(27) if i not in range(1, 5) and i not in (13, 14)]
    np.testing.assert_allclose(base[untouched], _ant_obs(0.0)[untouched], atol=1e-6)


def test_ant_navigate_state_gives_the_goal_in_the_heading_frame():
    from hdppo.envs.builtin.ant_navigate import STATE_DIM, make

    env = make()
    env.reset(seed=3)
    env.ant.data.qpos[3:7] = [np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)]  # facing north
    env.goal = env.ant.data.qpos[:2] + np.array([0.0, 3.0])                   # 3 m north
    s = env.state()
    assert s.shape == (STATE_DIM,) and env.observation_space.shape == (27,)
    np.testing.assert_allclose(s[[0, 1, 2, 5, 6, 7, 8]], [0.0, 3.0, 3.0, 0.0, 1.0, 3.0, 0.0], atol=1e-5)
    assert make(goal_in_obs=True).observation_space.shape == (27 + STATE_DIM,)
