"""policy.log_std_range: the learner keeps a Gaussian policy's log-std inside [min, max]."""
import json

import gymnasium as gym
import pytest
import torch

from conftest import tiny_config
from hdppo.platform.checkpoint import latest_checkpoint, load_checkpoint
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer


def _pendulum(policy: dict) -> dict:
    cfg = tiny_config(env={"id": "Pendulum-v1"}, train={"eval_episodes": 0})
    cfg["layers"][0]["policy"] = policy
    return cfg


def test_the_learner_projects_the_log_std_into_its_range(tmp_path):
    # Started above the maximum, every optimizer step ends with the log-std inside the range.
    cfg = _pendulum({"hidden": [16], "init_log_std": 0.5, "log_std_range": [-1.0, -0.2]})
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["groups"]["control"]["learners"]["control"]
    log_std = state["policy"]["log_std"]
    assert torch.all(log_std <= -0.2 + 1e-6) and torch.all(log_std >= -1.0 - 1e-6)


def test_without_a_range_the_log_std_is_free(tmp_path):
    cfg = _pendulum({"hidden": [16], "init_log_std": 0.5})
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["groups"]["control"]["learners"]["control"]
    assert torch.all(state["policy"]["log_std"] > -0.2)


@pytest.mark.parametrize("bad", [[-1.0], [0.0, -1.0], [-1.0, -1.0]])
def test_a_bad_range_names_the_field(bad):
    with pytest.raises(Exception, match="log_std_range"):
        validate(_pendulum({"log_std_range": bad}))


# --- ppo.bounds_loss_coeff: keeps a Box policy's mean inside the action bounds -------------------

def test_bounds_loss_is_zero_inside_and_grows_outside():
    from hdppo.policies.ppo_update import bounds_loss

    low, high = [-2.0, 0.0], [2.0, 1.0]                # half-ranges 2 and 0.5
    inside = torch.tensor([[1.9, 0.5], [-2.0, 1.0]])
    assert float(bounds_loss(inside, low, high)) == 0.0
    out = torch.tensor([[3.0, 0.5], [0.0, 1.25]])      # 1 beyond (0.5 half-ranges), 0.25 beyond (0.5)
    assert float(bounds_loss(out, low, high)) == pytest.approx((0.5 ** 2 + 0.5 ** 2) / 2)
    assert float(bounds_loss(torch.tensor([[9.0, 9.0]]), [-float("inf"), 0.0], [float("inf"), 1.0])) == pytest.approx(16 ** 2)


def test_the_bounds_loss_pulls_a_mean_that_left_the_bounds_back(tmp_path, monkeypatch):
    # Pendulum's torque is in [-2, 2]. The actor's output bias starts at 6, three times the
    # bound, so every sampled torque is clipped to 2 whatever the noise: without the bounds
    # loss nothing brings the mean back (the gradient is noise); with it, it comes back inside.
    from hdppo.platform import learner as learner_module

    original = learner_module.make_policy

    def biased(*args, **kwargs):
        policy = original(*args, **kwargs)
        with torch.no_grad():
            policy.actor[-1].bias.fill_(6.0)
        return policy

    monkeypatch.setattr(learner_module, "make_policy", biased)
    mean = {}
    for coeff in (0.0, 10.0):
        cfg = _pendulum({"hidden": [16], "init_log_std": -1.0})
        cfg["layers"][0]["ppo"] = {"minibatch_size": 64, "num_epochs": 4, "bounds_loss_coeff": coeff, "lr": 3e-2}
        cfg["train"]["total_env_steps"] = 2048
        Trainer(validate(cfg), tmp_path / f"run{coeff}", quiet=True).train()
        state = load_checkpoint(latest_checkpoint(tmp_path / f"run{coeff}"))["groups"]["control"]["learners"]["control"]
        policy = original(3, gym.make("Pendulum-v1").action_space, [16], "tanh", -1.0)
        policy.load_state_dict(state["policy"])
        with torch.no_grad():   # normalised observations: about N(0, 1)
            mean[coeff] = float(policy.box_mean(torch.randn(256, 3, generator=torch.Generator().manual_seed(0))).mean())
    assert mean[10.0] < 2.0 < 4.0 < mean[0.0], mean
    # Logged per update (losses/bounds), falling as the mean comes back; absent when off.
    def logged(run):
        rows = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [r["value"] for r in rows if r["tag"] == "losses/bounds"]
    on = logged("run10.0")
    assert on and on[0] > 1.0 and on[-1] < 0.1 * on[0] and logged("run0.0") == []


def test_bounds_loss_with_a_recurrent_policy_is_refused():
    cfg = _pendulum({"encoder": "gru"})
    cfg["layers"][0]["ppo"] = {"bounds_loss_coeff": 0.1}
    with pytest.raises(Exception, match="bounds_loss_coeff"):
        validate(cfg)
