"""MinAtar Breakout through hdppo's loader: the preset, the env reached by its plugin id, the CNN
policy on its 10x10x4 pixels, and a couple of in-process training updates."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import ROOT
from hdppo.envs.errors import EnvError
from hdppo.envs.loading import load_plugin_envs, make_gym_env
from hdppo.hierarchies.spec import probe_env
from hdppo.platform.config import load_config, validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import make_policy

pytest.importorskip("minatar")

PRESET = ROOT / "configs" / "minatar_breakout.yaml"


def test_preset_loads_with_the_minatar_network():
    cfg = load_config(PRESET)
    pol, d = cfg.layers[0].policy, cfg.layers[0].dppo
    assert cfg.env.id == "MinAtar/Breakout-v1"
    assert (pol.encoder, pol.cnn_channels, pol.cnn_features, pol.hidden) == ("cnn", [16], 128, [])
    assert d.num_workers * d.num_envs_per_worker * 128 == d.train_batch_size  # 8 envs x 128 steps


def test_empty_hidden_only_with_a_cnn():
    with pytest.raises(ConfigError, match="only encoder 'cnn' may have none"):
        validate({"name": "x", "env": {"id": "CartPole-v1"}, "layers": [{"policy": {"hidden": []}}]})


def test_plugin_id_is_reached_through_the_loader():
    # Gymnasium 1.x no longer loads the `gymnasium.envs` entry point MinAtar registers through.
    env = make_gym_env("MinAtar/Breakout-v1")
    assert env.observation_space.shape == (10, 10, 4) and env.action_space == gym.spaces.Discrete(3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (10, 10, 4) and env.observation_space.contains(obs)
    env.close()
    assert load_plugin_envs("MinAtar/Freeway-v1") and not load_plugin_envs("CartPole-v1")
    assert not load_plugin_envs("NoSuchNamespace/Env-v0")
    with pytest.raises(EnvError, match="Did you mean 'MinAtar/Breakout-v1'"):
        make_gym_env("MinAtar/Breakot-v1")


def test_cnn_policy_on_breakout_pixels():
    cfg = load_config(PRESET)
    venv, first, specs = probe_env(cfg, 0, 3)
    try:
        spec = specs[0]
        assert spec.obs_dim == 400 and spec.encoder["chw"] == (4, 10, 10) and spec.encoder["channels_last"]
        pol = cfg.layers[0].policy
        net = make_policy(spec.obs_dim, venv.action_space(venv.agents[0]), pol.hidden, pol.activation,
                          pol.init_log_std, None, spec.encoder)
        obs = torch.as_tensor(first.obs.reshape(3, -1))
        assert obs.shape == (3, 400) and set(np.unique(obs.numpy())) <= {0.0, 1.0}
        logits = net.actor(obs)
        assert logits.shape == (3, 3) and net.value(obs).shape == (3,)
        # The conv reads the image, not the flat vector: moving the paddle changes the logits.
        img = obs[:1].reshape(1, 10, 10, 4).clone()
        img[0, 9, :, 0] = torch.roll(img[0, 9, :, 0], 3)
        assert not torch.allclose(net.actor(img.reshape(1, -1)), logits[:1])
    finally:
        venv.close()


def test_two_updates_in_process(tmp_path):
    cfg = load_config(PRESET, overrides=["layers.0.dppo.train_batch_size=256", "layers.0.dppo.num_envs_per_worker=2",
                                         "layers.0.ppo.minibatch_size=128", "train.total_env_steps=512",
                                         "train.eval_episodes=1", "ray.backend=local"])
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["updates"] == 2 and summary["env_steps"] == 512
    assert np.isfinite(summary["eval_return_mean"])
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("losses/approx_kl") >= 2
