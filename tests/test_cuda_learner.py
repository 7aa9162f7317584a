"""learner.device: cuda on a real GPU. Skipped where torch sees none (CI, the 2-core VMs); run on
a GPU machine, e.g. ``pytest tests/test_cuda_learner.py``.

What the CPU-only tests in test_learner_device.py cannot show: that an update on the GPU computes
what the CPU update computes (MLP, recurrent and CNN policies, masked and continuous actions),
that every sync mode, mode ``dppo`` and a three-layer hierarchy train with CUDA learners, and that
checkpoints and published weights are CPU tensors a CPU learner resumes from."""
import dataclasses

import numpy as np
import pytest
import torch

from conftest import ROOT, tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.batch import Rollout
from hdppo.platform.checkpoint import latest_checkpoint, load_checkpoint
from hdppo.platform.config import load_config, validate
from hdppo.platform.learner import Learner
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.rollout_worker import RolloutWorker
from hdppo.platform.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")


def _cfg(env: dict | None = None, policy: dict | None = None, **over):
    layer = {"name": "control", "policy": policy or {}, "ppo": {"minibatch_size": 64, "num_epochs": 3},
             "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512}}
    return validate(tiny_config(**({"env": env} if env else {}), layers=[layer], **over))


CASES = {
    "mlp-discrete": (None, None),
    "mlp-box": ({"id": "Pendulum-v1"}, None),
    "gru": ({"entry_point": "scripted_envs:remember_bit"}, {"encoder": "gru", "gru_hidden": 16, "seq_len": 8}),
    "cnn": ({"entry_point": "scripted_envs:lit_side"}, {"encoder": "cnn", "cnn_channels": [4, 4], "cnn_features": 16}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_cuda_update_computes_what_the_cpu_update_computes(case):
    """The same rollouts, the same start weights and minibatch order: after one update (3 epochs)
    the CUDA learner's published weights equal the CPU learner's to float32 reduction-order noise."""
    env, policy = CASES[case]
    cfg = _cfg(env, policy)
    svc = ParameterService()
    workers = [RolloutWorker(cfg, ["control"], i, 2, svc) for i in range(2)]
    spec = workers[0].specs[0]
    learners = {d: Learner(cfg, 0, spec.obs_dim, spec.action_space, ParameterService(), device=d, encoder=spec.encoder)
                for d in ("cpu", "cuda")}
    learners["cuda"].policy.load_state_dict(learners["cpu"].policy.state_dict())
    assert next(learners["cuda"].policy.parameters()).device.type == "cuda"
    rollouts = [w.sample()["control"] for w in workers]
    results = {d: l.update_central(*[Rollout(dataclasses.replace(r.batch), r.stats) for r in rollouts])
               for d, l in learners.items()}
    cpu, cuda = (learners[d].weights() for d in ("cpu", "cuda"))
    assert all(t.device.type == "cpu" for t in cuda.values())  # published to CPU workers as CPU tensors
    for name, w in cpu.items():
        torch.testing.assert_close(cuda[name], w, rtol=1e-3, atol=2e-4, msg=lambda m: f"{case} {name}: {m}")
    start = Learner(cfg, 0, spec.obs_dim, spec.action_space, ParameterService(), encoder=spec.encoder).weights()
    assert max(float((cpu[n] - start[n]).abs().max()) for n in cpu) > 1e-3  # the update did move the weights
    for key in (M.LOSS_POLICY, M.LOSS_VALUE):
        assert results["cuda"].metrics[key] == pytest.approx(results["cpu"].metrics[key], rel=1e-3, abs=1e-4), key


@pytest.mark.parametrize("sync,mode", [("sync", "central"), ("pipeline", "central"), ("soft", "central"),
                                       ("async", "central"), ("sync", "dppo")])
def test_cuda_learners_train_in_every_sync_mode_and_a_cpu_learner_resumes(tmp_path, sync, mode):
    over = {"learner": {"device": "cuda"}}
    cfg = tiny_config(train={"total_env_steps": 1024, "checkpoint_every": 1, "eval_episodes": 1})
    cfg["layers"][0] |= over
    cfg["layers"][0]["dppo"] |= {"sync": sync, "mode": mode}
    trainer = Trainer(validate(cfg), tmp_path / "run", quiet=True)
    summary = trainer.train()
    assert summary["env_steps"] >= 1024 and trainer.groups[0].devices == {"control": "cuda"}
    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))["groups"]["control"]["learners"]["control"]
    tensors = list(state["policy"].values()) + [v for s in state["optimizer"]["state"].values() for v in s.values()
                                                if torch.is_tensor(v)]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    cfg["layers"][0]["learner"] = {"device": "cpu"}
    cfg["train"]["total_env_steps"] = 2048
    resumed = Trainer(validate(cfg), tmp_path / "run", quiet=True, resume=True).train()
    assert resumed["env_steps"] >= 2048


def test_a_cnn_policy_learns_on_a_cuda_learner(tmp_path):
    """The CPU test's task (test_encoders.test_cnn_policy_learns_to_read_an_image), its learner on the GPU."""
    cfg = tiny_config(env={"entry_point": "scripted_envs:lit_side"},
                      layers=[{"name": "control", "policy": {"encoder": "cnn", "cnn_channels": [8, 8], "cnn_features": 32,
                                                             "hidden": [32]},
                               "ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 1e-3},
                               "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512},
                               "learner": {"device": "cuda"}}],
                      train={"total_env_steps": 10_000, "checkpoint_every": 100, "eval_episodes": 4})
    summary = Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 17  # max 20; random play about 10


def test_a_three_layer_hierarchy_trains_with_every_group_on_the_gpu(tmp_path):
    cfg = load_config(ROOT / "configs" / "rooms_three_layers.yaml",
                      ["ray.backend=local", "train.total_env_steps=2048", "train.eval_episodes=1"]).model_dump(mode="json")
    for layer in cfg["layers"]:
        layer["learner"] = {"device": "cuda"}
    for group in cfg.get("groups") or []:
        group.pop("learner", None)
    trainer = Trainer(validate(cfg), tmp_path / "run", quiet=True)
    assert trainer.train()["env_steps"] >= 2048
    assert set(d for g in trainer.groups for d in g.devices.values()) == {"cuda"}


def test_bf16_on_cuda_is_close_to_float32_and_trains(tmp_path):
    """learner.precision bf16 on a CUDA learner: the same autocast as on CPU (output layers and loss
    in float32), its gradient within a cosine of 0.99 of float32's, and a CNN policy still learns."""
    from hdppo.platform.batch import advantage_moments

    env, policy = CASES["cnn"]
    cfg = _cfg(env, policy)
    svc = ParameterService()
    worker = RolloutWorker(cfg, ["control"], 0, 1, svc)
    spec = worker.specs[0]
    learner = Learner(cfg, 0, spec.obs_dim, spec.action_space, svc, device="cuda", encoder=spec.encoder)
    rollout = worker.sample()["control"]
    mean, std = advantage_moments([rollout.stats])
    exact = torch.cat([g.reshape(-1) for g in learner.gradient(rollout.batch, mean, std, 0.01)])
    learner.precision = "bf16"
    mixed = torch.cat([g.reshape(-1) for g in learner.gradient(rollout.batch, mean, std, 0.01)])
    assert mixed.dtype == torch.float32 and not torch.equal(exact, mixed)
    assert float(exact @ mixed / (exact.norm() * mixed.norm())) > 0.99
    trained = tiny_config(env={"entry_point": "scripted_envs:lit_side"},
                          layers=[{"name": "control", "policy": {"encoder": "cnn", "cnn_channels": [8, 8],
                                                                 "cnn_features": 32, "hidden": [32]},
                                   "ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 1e-3},
                                   "learner": {"device": "cuda", "precision": "bf16"},
                                   "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512}}],
                          train={"total_env_steps": 10_000, "checkpoint_every": 100, "eval_episodes": 4})
    summary = Trainer(validate(trained), tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 17
