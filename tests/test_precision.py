"""learner.precision 'bf16': the update's forward passes under bfloat16 autocast, the output layer
and the loss in float32; close to the float32 gradient, and a CNN policy still learns with it."""
import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_config
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import mlp, precision_context, run_mlp


def _lit_side(precision: str, **dppo) -> dict:
    return tiny_config(
        env={"entry_point": "scripted_envs:lit_side"},
        layers=[{"name": "control", "policy": {"encoder": "cnn", "cnn_channels": [8, 8], "cnn_features": 32, "hidden": [32]},
                 "ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 1e-3},
                 "learner": {"precision": precision},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512, **dppo}}],
        train={"total_env_steps": 10_000, "checkpoint_every": 100, "eval_episodes": 4})


def test_output_layer_stays_float32_under_autocast():
    torch.manual_seed(0)
    seq = mlp(6, [16, 16], 3, "tanh", 1.0)
    x = torch.randn(32, 6)
    with precision_context("bf16", "cpu"):
        out = run_mlp(seq, x)
        hidden = run_mlp(seq[:-1], x)  # two Linear+Tanh pairs, the last Linear of the slice in float32
    assert out.dtype == torch.float32
    # The hidden layers ran in bfloat16 (their output differs from float32's), the output layer in
    # float32 on them: exactly F.linear of the bfloat16 features in float32.
    h_bf16 = torch.tanh(F.linear(torch.tanh(F.linear(x.bfloat16(), seq[0].weight.bfloat16(), seq[0].bias.bfloat16())),
                                 seq[2].weight.bfloat16(), seq[2].bias.bfloat16()))
    torch.testing.assert_close(out, F.linear(h_bf16.float(), seq[4].weight, seq[4].bias), rtol=0, atol=0)
    assert not torch.equal(out, run_mlp(seq, x))
    torch.testing.assert_close(out, run_mlp(seq, x), rtol=0.05, atol=0.02)
    assert hidden.dtype == torch.float32
    with pytest.raises(ValueError, match="unknown precision 'fp16'"):
        precision_context("fp16", "cpu")


def test_bf16_gradient_is_close_to_float32():
    from hdppo.platform.batch import advantage_moments
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService
    from hdppo.platform.rollout_worker import RolloutWorker

    cfg = validate(_lit_side("fp32"))
    svc = ParameterService()
    worker = RolloutWorker(cfg, ["control"], 0, 1, svc)
    spec = worker.specs[0]
    learner = Learner(cfg, 0, spec.obs_dim, spec.action_space, svc, encoder=spec.encoder)
    rollout = worker.sample()["control"]
    mean, std = advantage_moments([rollout.stats])
    exact = learner.gradient(rollout.batch, mean, std, 0.01)
    learner.precision = "bf16"
    mixed = learner.gradient(rollout.batch, mean, std, 0.01)
    assert all(g.dtype == torch.float32 for g in mixed)
    a, b = torch.cat([g.reshape(-1) for g in exact]), torch.cat([g.reshape(-1) for g in mixed])
    assert not torch.equal(a, b)  # bfloat16 did run
    cosine = float(a @ b / (a.norm() * b.norm()))
    assert cosine > 0.99, cosine
    assert abs(float(b.norm() / a.norm()) - 1) < 0.05


@pytest.mark.parametrize("critic_thread", [False, True])
def test_cnn_policy_learns_with_bf16(tmp_path, critic_thread):
    cfg = _lit_side("bf16", sync="pipeline") if critic_thread else _lit_side("bf16")
    cfg["layers"][0]["learner"]["critic_thread"] = critic_thread
    summary = Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 17  # max 20; random play about 10 (as in test_encoders)


def test_bf16_in_mode_dppo_and_pipeline(tmp_path):
    for i, dppo in enumerate(({"mode": "dppo"}, {"sync": "pipeline"})):
        cfg = _lit_side("bf16", **dppo)
        cfg["train"]["total_env_steps"] = 1024
        summary = Trainer(validate(cfg), tmp_path / f"run{i}", quiet=True).train()
        assert summary["env_steps"] >= 1024


def test_precision_is_validated():
    with pytest.raises(ConfigError, match=r"learner.precision: Input should be 'fp32' or 'bf16'"):
        validate(_lit_side("fp16"))
    gru = tiny_config(layers=[{"name": "control", "policy": {"encoder": "gru"}, "learner": {"precision": "bf16"}}])
    with pytest.raises(ConfigError, match=r"layers\[0\] \(control\): learner.precision 'bf16' is not supported with "
                                          r"policy.encoder 'gru'.*use precision 'fp32'"):
        validate(gru)
    grouped = tiny_config(layers=[{"name": "control", "policy": {"encoder": "gru"}}],
                          groups=[{"layers": ["control"], "learner": {"precision": "bf16"}}])
    with pytest.raises(ConfigError, match="not supported with policy.encoder 'gru'"):
        validate(grouped)
    assert validate(tiny_config()).learner_of("control").precision == "fp32"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("kind", ["mlp_box", "cnn_discrete", "central_critic"])
def test_the_critic_thread_gives_the_same_terms_and_gradient(precision, kind):
    """learner.critic_thread: the critic's forward and backward on another thread, the actor's on
    this one; the gradient and the loss terms are those of the one-thread minibatch."""
    from concurrent.futures import ThreadPoolExecutor

    from hdppo.platform.batch import Batch
    from hdppo.policies.networks import ActorCritic
    from hdppo.policies.ppo_update import minibatch_gradients

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n, critic_dim, encoder = 64, None, None
    if kind == "cnn_discrete":
        space, obs_dim = gym.spaces.Discrete(3), 100
        encoder = {"kind": "cnn", "chw": (4, 5, 5), "channels_last": True, "channels": [8], "features": 16}
        actions = rng.integers(0, 3, (n, 1)).astype(np.float32)
    else:
        space, obs_dim = gym.spaces.Box(-1.0, 1.0, (2,), np.float32), 6
        actions = rng.normal(size=(n, 2)).astype(np.float32)
        critic_dim = 9 if kind == "central_critic" else None
    net = ActorCritic(obs_dim, space, (16, 16), encoder=encoder, critic_dim=critic_dim)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    batch = Batch(f(n, obs_dim), actions, f(n) - 1.0, f(n), f(n), f(n),
                  critic_obs=f(n, critic_dim) if critic_dim else None, weights=rng.uniform(0.5, 1.0, n).astype(np.float32))
    tb = batch.to_torch()
    params = list(net.parameters())
    loss = dict(clip=0.2, value_clip=0.2, vf_coeff=0.5, entropy_coeff=0.01, normalize=True, chunks=None,
                teacher_coeff=0.0, bounds_coeff=0.1, replay=None, precision=precision)
    one, g_one = minibatch_gradients(net, tb, 0.1, 1.2, params, **loss)
    with ThreadPoolExecutor(1) as pool:
        two, g_two = minibatch_gradients(net, tb, 0.1, 1.2, params, pool=pool, **loss)
    for a, b in zip(g_one, g_two):
        torch.testing.assert_close(a, b)
    for name in ("total", "policy", "value", "entropy", "approx_kl", "clipfrac", "bounds"):
        torch.testing.assert_close(getattr(one, name), getattr(two, name), msg=name)
    assert any(float(g.abs().sum()) > 0 for g in g_two[-2:])  # the critic's gradient is there


@pytest.mark.parametrize("kind", ["mlp_discrete", "cnn_discrete", "central_critic"])
def test_bf16_observations_rounded_once_give_the_same_update(kind):
    """Under bf16 the learner rounds the update's observations to bfloat16 once (Learner._bf16_obs)
    instead of in each forward pass: the same weights after an update, bit for bit."""
    from hdppo.platform.batch import Batch, Rollout, RolloutStats
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService

    n, rng = 512, np.random.default_rng(0)
    policy, obs_dim, encoder, critic_dim = {"hidden": [32, 32]}, 40, None, None
    if kind == "cnn_discrete":
        policy = {"encoder": "cnn", "cnn_channels": [8], "cnn_features": 16, "hidden": [16]}
        obs_dim, encoder = 100, {"kind": "cnn", "chw": (4, 5, 5), "channels_last": True, "channels": [8], "features": 16}
    if kind == "central_critic":
        critic_dim = 12
    cfg = validate(tiny_config(layers=[{"name": "control", "policy": policy, "learner": {"precision": "bf16"},
                                        "ppo": {"minibatch_size": 128, "num_epochs": 2}}]))
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    batch = Batch(f(n, obs_dim), rng.integers(0, 3, (n, 1)).astype(np.float32), np.full(n, -np.log(3), np.float32),
                  f(n), f(n), f(n), critic_obs=f(n, critic_dim) if critic_dim else None, versions=np.zeros(n, np.int64))
    stats = RolloutStats(worker=0, version=0, env_steps=n, sample_s=0.0, adv_sum=float(batch.advantages.sum()),
                         adv_sumsq=float((batch.advantages.astype(np.float64) ** 2).sum()))
    weights = []
    for rounded in (True, False):
        torch.manual_seed(0)
        learner = Learner(cfg, 0, obs_dim, gym.spaces.Discrete(3), ParameterService(), critic_dim=critic_dim,
                          encoder=encoder)
        assert learner._bf16_obs  # MLP and CNN policies qualify
        learner._bf16_obs = rounded
        learner.update_central(Rollout(batch, stats))
        weights.append(torch.cat([p.detach().reshape(-1) for p in learner.params]))
    assert torch.equal(weights[0], weights[1])


def test_only_policies_that_read_observations_through_a_dense_or_conv_layer_get_them_rounded():
    from hdppo.policies.networks import ActorCritic

    space = gym.spaces.Discrete(3)
    assert ActorCritic(10, space).bf16_inputs_exact()
    assert not ActorCritic(4 * 3, gym.spaces.Discrete(4), encoder={"kind": "set", "items": 4, "features": 3}).bf16_inputs_exact()
