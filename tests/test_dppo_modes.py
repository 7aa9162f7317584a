"""Mode ``dppo`` (workers' gradients averaged) computes the same update as mode ``central``."""
import numpy as np
import torch

from conftest import ROOT, tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.backend import LocalBackend
from hdppo.platform.batch import Batch, advantage_moments
from hdppo.platform.config import validate
from hdppo.platform.group import DPPOGroup
from hdppo.platform.learner import Learner
from hdppo.platform.messages import GradientResult
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.rollout_worker import RolloutWorker
from hdppo.policies.ppo_update import average_gradients


def _setup(env=None):
    cfg = validate(tiny_config(**({"env": env} if env else {})))
    svc = ParameterService()
    workers = [RolloutWorker(cfg, ["control"], i, 2, svc) for i in range(2)]
    spec = workers[0].specs[0]  # the layer's sizes, as the worker's sampler sees them
    learner = Learner(cfg, 0, spec.obs_dim, spec.action_space, svc)
    for w in workers:
        w.policies["control"].requires_grad_(True)
    rollouts = [w.sample()["control"] for w in workers]
    return cfg, learner, workers, rollouts


def _assert_same(a, b):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_dppo_gradient_equals_central_gradient_discrete():
    _, learner, workers, rollouts = _setup()
    stats = [r.stats for r in rollouts]
    mean, std = advantage_moments(stats)
    central = learner.gradient(Batch.concat([r.batch for r in rollouts]), mean, std, 0.01)
    parts = [w.gradient(learner.weights(), 0, 0, 1, mean, std, 0.01) for w in workers]
    assert [p.num_samples for p in parts] == [len(r.batch) for r in rollouts]
    _assert_same(average_gradients([p.grads for p in parts], [p.num_samples for p in parts]), central)
    assert any(g.abs().sum() > 0 for g in central)


def test_dppo_gradient_equals_central_gradient_continuous_minibatch():
    _, learner, workers, rollouts = _setup(env={"id": "Pendulum-v1"})
    stats = [r.stats for r in rollouts]
    mean, std = advantage_moments(stats)
    # Minibatch 1 of 4: the union of each worker's piece is the central minibatch.
    parts = [w.gradient(learner.weights(), 2, 1, 4, mean, std, 0.005) for w in workers]
    pieces = []
    for w, r in zip(workers, rollouts):
        perm = np.random.default_rng((w.cfg.train.seed, w.index, w.versions["control"], 2)).permutation(len(r.batch))
        pieces.append(r.batch.take(np.array_split(perm, 4)[1]))
    central = learner.gradient(Batch.concat(pieces), mean, std, 0.005)
    _assert_same(average_gradients([p.grads for p in parts], [p.num_samples for p in parts]), central)


def test_one_dppo_step_equals_one_central_step():
    cfg, learner, workers, rollouts = _setup()
    stats = [r.stats for r in rollouts]
    mean, std = advantage_moments(stats)
    twin = Learner(cfg, 0, workers[0].specs[0].obs_dim, workers[0].specs[0].action_space, ParameterService())
    central = twin.gradient(Batch.concat([r.batch for r in rollouts]), mean, std, 0.01)
    twin._step(central, 3e-4)
    learner.begin_dppo(*stats)
    new = learner.apply_gradients(*[w.gradient(learner.weights(), 0, 0, 1, mean, std, 0.01) for w in workers])
    for k, v in twin.policy.state_dict().items():
        torch.testing.assert_close(new[k], v, rtol=1e-5, atol=1e-6)


def test_both_modes_run_a_full_group_update(monkeypatch):
    calls = []
    real = RolloutWorker.gradient

    def counted(self, *args, **kwargs):
        calls.append(self.index)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RolloutWorker, "gradient", counted)
    for mode in ("central", "dppo"):
        calls.clear()
        cfg = validate(tiny_config(layers=[{"ppo": {"minibatch_size": 64, "num_epochs": 2},
                                            "dppo": {"mode": mode, "num_workers": 2, "num_envs_per_worker": 2,
                                                     "train_batch_size": 256}}]))
        svc = ParameterService()
        dims = {"control": {"obs_dim": 4, "action_space": __import__("gymnasium").spaces.Discrete(2)}}
        group = DPPOGroup(cfg, ["control"], LocalBackend(), svc, dims, 2, 2.0)
        before = svc.latest("control")["weights"][0]
        result = group.iteration()["control"]
        out = result.metrics
        after = svc.latest("control")
        assert after["version"] == 1 and result.version == 1 and result.env_steps == 256
        assert not any(k.startswith("_") for k in out)  # metrics only: control data travels in the fields
        assert out["perf/sgd_steps"] == 2 * 4
        assert any(not torch.equal(before[k], after["weights"][0][k]) for k in before)
        assert np.isfinite(out["losses/policy"]) and out["perf/env_steps_per_s"] > 0
        # Mode dppo really ran on the workers' gradients: 2 workers x 2 epochs x 4 minibatches, and
        # the bytes they sent are logged (by the dppo update alone); mode central asked for none.
        if mode == "dppo":
            assert sorted(calls) == [0] * 8 + [1] * 8 and out[M.PERF_GRAD_BYTES] > 0
        else:
            assert not calls and M.PERF_GRAD_BYTES not in out


def test_quality_aggregation_weights_the_better_worker_more():
    import gymnasium as gym

    from hdppo.platform.batch import RolloutStats
    from hdppo.policies.ppo_update import quality_weights

    def learner(aggregate):
        cfg = validate(tiny_config(layers=[{"dppo": {"mode": "dppo", "aggregate": aggregate, "quality_beta": 1.0}}]))
        return Learner(cfg, 0, 4, gym.spaces.Discrete(2), ParameterService())

    stats = [RolloutStats(worker=i, version=0, env_steps=100, sample_s=0.0, adv_sum=0.0, adv_sumsq=100.0,
                          ret_sum=100.0 * q) for i, q in enumerate([1.0, 3.0])]
    torch.manual_seed(0)
    quality, plain = learner("quality"), learner("samples")
    grads = [[torch.randn_like(p) for p in quality.policy.parameters()] for _ in range(2)]
    for lrn in (quality, plain):
        lrn.begin_dppo(*stats)
        lrn.apply_gradients(*[GradientResult(g, 100, dict.fromkeys(("policy", "value", "entropy", "approx_kl", "clipfrac"), 0.0))
                              for g in grads])
    w = quality_weights([100, 100], [1.0, 3.0], 1.0)
    assert w[1] > 0.8  # the worker with the better returns dominates
    # The quality learner stepped along the quality-weighted mean; the plain one along the plain mean.
    ref = learner("samples")
    ref.begin_dppo(*stats)
    ref._agg_weights = w
    ref.apply_gradients(*[GradientResult(g, 100, dict.fromkeys(("policy", "value", "entropy", "approx_kl", "clipfrac"), 0.0))
                          for g in grads])
    for a, b, c in zip(quality.policy.parameters(), ref.policy.parameters(), plain.policy.parameters()):
        torch.testing.assert_close(a, b)
    assert any(not torch.equal(a, c) for a, c in zip(quality.policy.parameters(), plain.policy.parameters()))


def test_mode_dppo_reports_the_staleness_of_decisions_left_open_by_the_previous_rollout(tmp_path):
    """A hierarchy's decision left open at a rollout's end is closed in the next one, made by the
    weights before: mode central measured that lag from the samples (1), mode dppo, whose samples
    stay on the workers, assumed one version per rollout and said 0. The workers now report their
    samples' oldest and mean version."""
    from hdppo.platform import metrics as M
    from hdppo.platform.config import load_config
    from hdppo.platform.trainer import Trainer

    def staleness(mode: str) -> dict:
        cfg = load_config(ROOT / "configs" / "corridor_hierarchy.yaml",
                          ["ray.backend=local", "train.total_env_steps=6000", "train.eval_episodes=0",
                           f"layers.0.dppo.mode={mode}", f"layers.1.dppo.mode={mode}"])
        Trainer(cfg, tmp_path / mode, quiet=True).train()
        rows = M.read_jsonl(tmp_path / mode / "metrics.jsonl")
        return {(layer, tag): [r["value"] for r in rows if r["layer"] == layer and r["tag"] == tag]
                for layer in ("strategy", "control") for tag in (M.PERF_MAX_STALENESS, M.PERF_MEAN_STALENESS)}

    central, dppo = staleness("central"), staleness("dppo")
    for layer in ("strategy", "control"):
        assert dppo[layer, M.PERF_MAX_STALENESS][1:] == central[layer, M.PERF_MAX_STALENESS][1:]
        assert max(dppo[layer, M.PERF_MAX_STALENESS]) == 1.0
        assert 0.0 < max(dppo[layer, M.PERF_MEAN_STALENESS]) < 0.1
