"""Pipelining: workers collect the next batch during the update; staleness stays within max_lag."""
import pytest

from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.trainer import Trainer


def _cfg(**dppo):
    return validate(tiny_config(
        layers=[{"ppo": {"minibatch_size": 256, "num_epochs": 4},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 1024, **dppo}}],
        train={"total_env_steps": 30_000, "checkpoint_every": 100, "eval_episodes": 10, "seed": 2}))


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_pipelined_training_learns_with_staleness_one(tmp_path, backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    cfg = _cfg(pipeline=True)
    cfg.ray.backend = backend
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        summary = trainer.train()
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    lags = [r["value"] for r in rows if r["tag"] == M.PERF_MAX_STALENESS]
    assert lags[0] == 0 and set(lags[1:]) == {1.0}       # every later batch was collected during an update
    assert summary["eval_return_mean"] >= 150, summary     # CartPole still learns (random: about 20)


def test_pipeline_needs_a_lag_of_at_least_one():
    with pytest.raises(ConfigError, match="pipeline needs"):
        _cfg(pipeline=True, max_lag=0)


@pytest.mark.parametrize("decoupled", [False, True])
def test_decoupled_ppo_clips_stale_samples_around_the_update_start(decoupled):
    """With ppo.decoupled, samples from older weights are clipped around the learner's policy at
    the update's start: the first step's ratios are exactly 1 (no KL, nothing clipped), where
    plain PPO measures them against the policy that acted. Fresh samples are not touched."""
    import gymnasium as gym
    import numpy as np

    from hdppo.platform.batch import Batch, Rollout, RolloutStats
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService

    cfg = validate(tiny_config(layers=[{"ppo": {"minibatch_size": 256, "num_epochs": 1, "decoupled": decoupled}}]))
    learner = Learner(cfg, "control", 4, gym.spaces.Discrete(2), ParameterService())
    rng = np.random.default_rng(0)

    def rollout(version: int) -> Rollout:
        n = 256  # one minibatch: its metrics are those of the first step, before the weights move
        batch = Batch(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, (n, 1)).astype(np.float32),
                      np.log(rng.uniform(0.05, 0.95, n)).astype(np.float32),  # a behaviour policy far from the learner's
                      np.zeros(n, np.float32), rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32),
                      versions=np.full(n, version, np.int64))
        return Rollout(batch, RolloutStats(worker=0, version=version, env_steps=n, sample_s=0.0, num_samples=n,
                                           adv_sum=float(batch.advantages.sum()),
                                           adv_sumsq=float((batch.advantages.astype(np.float64) ** 2).sum())))

    fresh = learner.update_central(rollout(learner.version)).metrics
    stale = learner.update_central(rollout(learner.version - 1)).metrics
    assert stale[M.PERF_MAX_STALENESS] == 1.0 and fresh[M.PERF_MAX_STALENESS] == 0.0
    assert fresh[M.LOSS_CLIPFRAC] > 0.3          # fresh samples: plain PPO either way
    if decoupled:
        assert abs(stale[M.LOSS_APPROX_KL]) < 1e-6 and stale[M.LOSS_CLIPFRAC] == 0.0
    else:
        assert stale[M.LOSS_CLIPFRAC] > 0.3


def test_decoupled_ppos_proximal_logp_covers_every_sample_in_order_across_chunks():
    """The proximal log-probabilities are computed in pieces larger than a minibatch
    (learner.PROXIMAL_CHUNK): over a batch of several pieces, each sample's is its own, in order."""
    import gymnasium as gym
    import numpy as np
    import torch

    from hdppo.platform.batch import Batch
    from hdppo.platform.learner import PROXIMAL_CHUNK, Learner
    from hdppo.platform.parameter_service import ParameterService

    cfg = validate(tiny_config(layers=[{"ppo": {"minibatch_size": 64, "decoupled": True}}]))
    learner = Learner(cfg, "control", 4, gym.spaces.Discrete(2), ParameterService())
    rng = np.random.default_rng(1)
    n = 2 * PROXIMAL_CHUNK + 37
    batch = Batch(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, (n, 1)).astype(np.float32),
                  np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32))
    tb = learner._tensors(batch)
    prox = learner._proximal_logp(tb, None)
    with torch.no_grad():
        one_by_one = torch.cat([learner.policy.log_prob_entropy(tb.obs[i:i + 64], tb.actions[i:i + 64],
                                                                tb.masks[i:i + 64])[0] for i in range(0, n, 64)])
    assert prox.shape == (n,)
    torch.testing.assert_close(prox, one_by_one, rtol=0, atol=1e-6)


@pytest.mark.parametrize("decoupled", [False, True])
def test_decoupled_ppo_replays_a_recurrent_layers_chunks(tmp_path, decoupled):
    """A GRU layer's proximal log-probabilities come from replaying its chunks: with one
    minibatch per update, every pipelined (stale) update starts at ratio 1 exactly."""
    cfg = validate(tiny_config(
        layers=[{"policy": {"encoder": "gru", "gru_hidden": 8, "seq_len": 4, "hidden": [8]},
                 # a large lr: each update moves the policy enough that plain PPO sees the lag
                 "ppo": {"minibatch_size": 256, "num_epochs": 1, "decoupled": decoupled, "lr": 0.03},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256, "pipeline": True}}],
        train={"total_env_steps": 1280, "checkpoint_every": 100, "eval_episodes": 1}))
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    by_step: dict = {}
    for r in rows:
        if r["tag"] in (M.PERF_MAX_STALENESS, M.LOSS_APPROX_KL):
            by_step.setdefault(r["step"], {})[r["tag"]] = r["value"]
    stale_kl = [v[M.LOSS_APPROX_KL] for v in by_step.values() if v.get(M.PERF_MAX_STALENESS, 0) >= 1]
    assert len(stale_kl) >= 3
    if decoupled:
        assert max(abs(k) for k in stale_kl) < 1e-6, stale_kl
    else:
        assert max(stale_kl) > 1e-5, stale_kl
