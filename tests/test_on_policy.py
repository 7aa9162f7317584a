"""In sync mode every rollout is on-policy: before an update, the learner's own log-probabilities
of the batch's actions are the ones the workers sampled them with (a weight refresh that lags a
version, or a worker acting on stale cached weights, would show as ratios away from 1 from the
first minibatch on: high clip fractions and KL with no visible error)."""
import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.platform import learner as learner_module
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer


@pytest.mark.parametrize("env", [{"id": "Pendulum-v1"}, {"id": "CartPole-v1"}], ids=["box", "discrete"])
def test_the_learner_starts_each_update_from_the_sampling_policy(tmp_path, monkeypatch, env):
    seen = []
    update = learner_module.Learner.update_central

    def checked(self, *rollouts, **kw):
        for r in self._mine(rollouts):
            b = r.batch
            with torch.no_grad():
                logp, _ = self.policy.log_prob_entropy(torch.as_tensor(np.asarray(b.obs)),
                                                       torch.as_tensor(np.asarray(b.actions)),
                                                       torch.as_tensor(np.asarray(b.masks)) if b.masks is not None and b.masks.size else None)
            seen.append((float(np.abs(logp.numpy() - np.asarray(b.logp)).max()), r.stats.version, self.version))
        return update(self, *rollouts, **kw)

    monkeypatch.setattr(learner_module.Learner, "update_central", checked)
    layer = {"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 4, "lr": 3e-3},
             "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256}}
    cfg = validate(tiny_config(env=env, layers=[layer], train={"total_env_steps": 2560, "checkpoint_every": 100,
                                                               "eval_episodes": 1}))
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert len(seen) >= 16  # 2 workers' rollouts for each of 8+ updates, with a large lr so weights move
    assert all(version == at for _, version, at in seen), seen
    assert max(d for d, _, _ in seen) < 1e-4, seen
