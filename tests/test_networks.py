import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.platform.config import validate
from hdppo.platform.learner import Learner
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import ActorCritic


@pytest.mark.parametrize("space", [gym.spaces.Box(-2.0, 2.0, (3,)), gym.spaces.Discrete(4, start=1),
                                   gym.spaces.MultiDiscrete([3, 2])], ids=["box", "discrete", "multidiscrete"])
def test_act_and_log_prob_agree(space):
    torch.manual_seed(0)
    net = ActorCritic(5, space)
    obs = torch.randn(7, 5)
    a, logp, v = net.act(obs)
    assert a.shape == (7, net.head.dim) and logp.shape == (7,) and v.shape == (7,)
    logp2, ent = net.log_prob_entropy(obs, torch.as_tensor(a))
    np.testing.assert_allclose(logp, logp2.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert (ent > 0).all()
    for env_action in net.head.to_env(a):
        assert space.contains(env_action if not isinstance(env_action, np.ndarray) else env_action.astype(space.dtype))


def test_deterministic_action_is_the_mode():
    net = ActorCritic(2, gym.spaces.Box(-1.0, 1.0, (2,)))
    obs = torch.randn(4, 2)
    a1, _, _ = net.act(obs, deterministic=True)
    a2, _, _ = net.act(obs, deterministic=True)
    np.testing.assert_array_equal(a1, a2)


def test_multidiscrete_env_learns_in_process(tmp_path):
    cfg = validate(tiny_config(env={"entry_point": "scripted_envs:multi_choice"},
                               layers=[{"ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 1e-3},
                                        "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512}}],
                               train={"total_env_steps": 15_000, "checkpoint_every": 100, "eval_episodes": 4}))
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 30  # max 40 (2 per step x 20); random scores about 16.7


def test_entropy_coefficient_decays_linearly_with_env_steps():
    cfg = validate(tiny_config(train={"total_env_steps": 1000}))
    learner = Learner(cfg, 0, 4, gym.spaces.Discrete(2), ParameterService())
    seen = []
    for steps in (0, 500, 1000, 2000):
        learner.env_steps = steps
        seen.append(learner.coefficients()["entropy_coeff"])
    np.testing.assert_allclose(seen, [0.01, 0.0055, 0.001, 0.001])
    cfg = validate(tiny_config(layers=[{"ppo": {"lr_schedule": "linear", "lr": 1e-3, "minibatch_size": 64},
                                        "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256}}],
                               train={"total_env_steps": 1000}))
    learner = Learner(cfg, 0, 4, gym.spaces.Discrete(2), ParameterService())
    learner.env_steps = 250
    assert learner.coefficients()["lr"] == pytest.approx(7.5e-4)


def test_reward_scope_global_merges_and_worker_scope_does_not(tmp_path):
    from hdppo.platform.rollout_worker import RolloutWorker

    for scope in ("worker", "global"):
        cfg = validate(tiny_config(layers=[{"normalization": {"reward_scope": scope}, "ppo": {"minibatch_size": 64},
                                            "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256}}]))
        svc = ParameterService()
        workers = [RolloutWorker(cfg, ["control"], i, 2, svc) for i in range(2)]
        learner = Learner(cfg, 0, 4, gym.spaces.Discrete(2), svc)
        learner.update_central(*[w.sample() for w in workers])
        merged = learner.reward_stats.count
        workers[0].sample()
        if scope == "global":
            assert merged == 256  # both workers' return statistics reached the learner
            assert workers[0].scalers['control'].stats.count == 256 + 128  # adopted the pool's, then its own
        else:
            assert merged == 0
            assert workers[0].scalers['control'].stats.count == pytest.approx(256 + 1e-4)  # its own two rollouts, over Gymnasium's prior
