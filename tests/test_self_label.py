"""Self-labeling (hdppo self-label): the best of each instance's samples, copies of one seed
replaying one instance, an env that does not replay refused, and a greedy policy that improves."""
import json

import gymnasium as gym
import numpy as np
import pytest
import yaml

from conftest import ROOT, tiny_config
from hdppo.envs.errors import EnvError
from hdppo.envs.vector import make_vector_env
from hdppo.platform.checkpoint import best_info, latest_checkpoint, learner_states, load_checkpoint
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.self_label import SelfLabelSettings, sample_groups, self_label_run
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import make_policy
from hdppo.policies.normalizers import ObservationNormalizer
from hdppo.policies.self_label import best_of_groups

JOBSHOP = {"entry_point": "hdppo.envs.builtin.jobshop:make_env",
           "kwargs": {"size": "5x4", "scheme": "active", "job_order": "mwkr", "observation": "items_lookahead"}}


def test_best_of_groups_takes_each_instances_highest_return_first_on_ties():
    returns = np.array([1.0, 3.0, 2.0, 5.0, 5.0, -1.0])
    assert best_of_groups(returns, 3).tolist() == [1, 3]
    assert best_of_groups(returns, 2).tolist() == [1, 3, 4]
    with pytest.raises(ValueError):
        best_of_groups(returns, 4)


def test_reset_each_replays_a_seed_in_every_copy_it_is_given_to():
    venv = make_vector_env("gymnasium", None, JOBSHOP["entry_point"], JOBSHOP["kwargs"], None, 4)
    try:
        obs = venv.reset_each([7, 7, 8, None]).obs[:, 0]
        assert np.array_equal(obs[0], obs[1]) and not np.array_equal(obs[0], obs[2])
        with pytest.raises(EnvError, match="one seed"):
            venv.reset_each([1, 2])
    finally:
        venv.close()


class Unseeded(gym.Env):
    """Draws its first observation from numpy's global generator: reset(seed) does not replay it."""

    observation_space = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.random.standard_normal(3).astype(np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, True, False, {}


def test_an_env_that_does_not_replay_its_seed_is_refused():
    venv = make_vector_env("gymnasium", None, "test_self_label:Unseeded", {}, None, 4)
    policy = make_policy(3, venv.action_space("agent_0"), (8,), "tanh")
    try:
        with pytest.raises(ConfigError, match="reset\\(seed=s\\) always starts the same episode"):
            sample_groups(venv, policy, ObservationNormalizer((3,), enabled=False), [1, 2], 2)
    finally:
        venv.close()


def _jobshop_run(tmp_path, kwargs=None):
    """A job-shop run after one PPO update of 512 env steps: a policy close to its random start."""
    layer = {"name": "control", "policy": {"encoder": "set", "set_features": 20, "hidden": [32, 32]},
             "ppo": {"minibatch_size": 256, "num_epochs": 1, "gamma": 1.0},
             "dppo": {"num_workers": 1, "num_envs_per_worker": 4, "train_batch_size": 512},
             "normalization": {"observation": False}}
    env = {"entry_point": JOBSHOP["entry_point"], "kwargs": {k: v for k, v in (kwargs or JOBSHOP["kwargs"]).items()
                                                             if v is not None}}
    cfg = tiny_config(env=env, layers=[layer], train={"total_env_steps": 512, "checkpoint_every": 100,
                                                          "eval_episodes": 0})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    Trainer(validate(cfg), tmp_path / "ppo", quiet=True).train()
    return validate(cfg)


def test_sampled_copies_of_one_instance_record_one_episode_each(tmp_path):
    cfg = _jobshop_run(tmp_path)
    state = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "ppo")))["control"]
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.evaluation import frozen_policy

    venv, _, specs = probe_env(cfg, 0, 6)
    policy, norm = frozen_policy(cfg, specs[0], state)
    try:
        greedy = sample_groups(venv, policy, norm, [11, 12], 3, deterministic=True)
        # Greedy copies of one instance build one schedule; two instances, two (generally) different ones.
        assert greedy.returns[0] == greedy.returns[1] == greedy.returns[2]
        assert greedy.returns[3] == greedy.returns[4] == greedy.returns[5]
        # Every copy's rows are one whole episode: as many rows as that episode's decisions, each legal.
        counts = np.bincount(greedy.copy, minlength=6)
        assert counts.min() >= 1 and counts[0] == counts[1] == counts[2]
        taken = greedy.actions[:, 0].astype(int)
        assert greedy.masks[np.arange(len(taken)), taken].all()
    finally:
        venv.close()


def test_self_labeling_improves_the_greedy_policy_and_writes_a_run_dir(tmp_path):
    # One instance (ft06) in every copy: the labels are the best schedules sampled of it, and the
    # greedy policy, which starts far from them, must come to build one as good.
    cfg = _jobshop_run(tmp_path, {**JOBSHOP["kwargs"], "size": None, "instance": "ft06"})
    out = tmp_path / "sl"
    settings = SelfLabelSettings(iterations=30, instances=4, samples=16, lr=1e-2, seed=0, valid_instances=1,
                                 valid_every=10)
    summary = self_label_run(tmp_path / "ppo", out, settings, cfg, log=lambda *_: None)
    hist = summary["history"]
    valid = [h["valid_return"] for h in hist if "valid_return" in h]
    first_labels = hist[1]["best_return"]   # the mean over the 4 groups of their best of 16 samples
    # Returns are -(makespan - LB0) / p_max, p_max = 10 on ft06: 0.1 is one time unit.
    assert valid[-1] >= valid[0] + 0.1 - 1e-9, valid
    assert valid[-1] >= first_labels - 1e-9, (valid, first_labels)
    assert (out / "config.yaml").read_text() == (tmp_path / "ppo" / "config.yaml").read_text()
    assert latest_checkpoint(out) is not None and (out / "checkpoints" / "best.pt").is_file()
    best = best_info(out)   # what `--checkpoint best` readers (hdppo eval, benchmarks/jobshop.py) show
    assert best["best_by"] == "self_label/valid_return" and best["best_mode"] == "max"
    assert best["score"] == pytest.approx(max(valid)) and best["episodes"] == 1
    assert json.loads((out / "self_label.json").read_text())["settings"]["samples"] == 16
    tags = {json.loads(line)["tag"] for line in (out / "metrics.jsonl").read_text().splitlines()}
    assert {"self_label/nll", "self_label/best_return", "self_label/valid_return"} <= tags
    # The run dir holds the new weights: the usual evaluation of it scores the last validation figure.
    from hdppo.platform.evaluation import evaluate

    states = learner_states(load_checkpoint(latest_checkpoint(out)))
    assert evaluate(cfg, states, 1)[0] == pytest.approx(valid[-1])
    # benchmarks/jobshop_checkpoints.py scores every kept checkpoint and best.pt both ways; here the
    # validation instances are ft06 too, whose initial bound is 47 and p_max 10.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import jobshop_checkpoints

    rows = jobshop_checkpoints.score_run(out, "ft06", 2)
    assert [r["checkpoint"] for r in rows][-1] == "best.pt" and len(rows) >= 2
    for r in rows:
        assert r["makespan"] >= 55 and r["makespan"] == round(47 - 10 * r["valid_return"])
    assert rows[-1]["valid_return"] == pytest.approx(best["score"])


def test_hdppo_self_label_refuses_an_existing_folder_and_bad_settings(tmp_path, capsys):
    from hdppo.platform.cli import main

    _jobshop_run(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert main(["self-label", str(tmp_path / "ppo"), "--out", str(taken), "--iterations", "1"]) != 0
    err = capsys.readouterr().err
    assert "--out" in err and "Name a new folder" in err
    assert (taken / "notes.txt").read_text() == "mine"
    assert main(["self-label", str(tmp_path / "ppo"), "--out", str(tmp_path / "new"), "--samples", "1"]) != 0
    assert "--samples must be at least 2" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_hierarchy_is_refused_before_anything_is_read_or_made(tmp_path, capsys):
    from hdppo.platform.cli import main

    run = tmp_path / "hier"
    run.mkdir()
    (run / "config.yaml").write_text((ROOT / "configs" / "default.yaml").read_text())   # two layers, no checkpoint
    assert main(["self-label", str(run), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "2 layer(s)" in err and "single-layer, single-agent" in err
    assert not (tmp_path / "out").exists()
