"""The written-out PPO gradient of a plain MLP actor-critic (policies/mlp_gradients.py) against
autograd on the same loss: every head, masks, stale-sample weights, decoupled PPO, value
clipping, a central critic, both activations; where it does not apply, autograd is used; and an
update through the learner lands on the same weights either way."""
import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.platform.batch import Batch
from hdppo.platform.config import validate
from hdppo.policies import mlp_gradients
from hdppo.policies.networks import ActorCritic, make_policy
from hdppo.policies.ppo_update import gradients, minibatch_gradients, minibatch_loss

LOSS = dict(clip=0.2, vf_coeff=0.5, entropy_coeff=0.01)
TERMS = ("total", "policy", "value", "entropy", "approx_kl", "clipfrac")


def _nvec(space: gym.Space) -> list[int]:
    return [int(space.n)] if isinstance(space, gym.spaces.Discrete) else [int(n) for n in space.nvec]


def _case(space: gym.Space, obs_dim: int, *, critic_dim: int | None = None, masks: bool = False,
          weights: bool = False, decoupled: bool = False, activation: str = "tanh", n: int = 96, seed: int = 0,
          hidden: tuple = (16, 12)):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = ActorCritic(obs_dim, space, hidden, activation, critic_dim=critic_dim, init_log_std=-0.3)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    mask = np.zeros((n, 0), np.float32)
    if isinstance(space, gym.spaces.Box):
        actions = f(n, space.shape[0])
    else:
        actions = np.stack([rng.integers(0, k, n) for k in _nvec(space)], 1).astype(np.float32)
        if masks:  # random legal sets that always hold the action taken
            mask = (rng.random((n, sum(_nvec(space)))) < 0.6).astype(np.float32)
            at = 0
            for i, k in enumerate(_nvec(space)):
                mask[np.arange(n), at + actions[:, i].astype(int)] = 1.0
                at += k
    values = f(n)
    batch = Batch(f(n, obs_dim), actions, f(n) - 1.5, values, f(n), values + f(n), masks=mask,
                  critic_obs=f(n, critic_dim) if critic_dim else None,
                  weights=rng.uniform(0.3, 1.0, n).astype(np.float32) if weights else None)
    tb = batch.to_torch()
    if decoupled:
        tb = dataclasses.replace(tb, prox_logp=tb.logp + 0.2 * torch.from_numpy(f(n)))
    return net, tb


CASES = {
    "discrete": (gym.spaces.Discrete(7), 10, {}),
    "multidiscrete_masked_weighted": (gym.spaces.MultiDiscrete([3, 4, 2]), 8, {"masks": True, "weights": True}),
    "box_decoupled_relu": (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), 11, {"decoupled": True, "activation": "relu"}),
    "central_critic_weighted": (gym.spaces.Discrete(5), 6, {"critic_dim": 13, "weights": True}),
    "box_central_masked_none": (gym.spaces.Box(-2.0, 2.0, (2,), np.float32), 5, {"critic_dim": 4}),
    "linear_discrete": (gym.spaces.Discrete(4), 9, {"hidden": ()}),  # no hidden layer: the output layer alone
    "one_hidden_box": (gym.spaces.Box(-1.0, 1.0, (3,), np.float32), 7, {"hidden": (10,), "weights": True}),
}


@pytest.mark.parametrize("value_clip", [None, 0.2])
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("name", list(CASES))
def test_written_out_gradient_equals_autograd(name, normalize, value_clip):
    space, obs_dim, kw = CASES[name]
    net, tb = _case(space, obs_dim, **kw)
    params = list(net.parameters())
    assert mlp_gradients.supported(net)
    loss = dict(LOSS, value_clip=value_clip, normalize=normalize)
    ref = minibatch_loss(net, tb, 0.1, 1.3, **loss)
    ref_grads = gradients(net, ref.total, params)
    terms, grads = mlp_gradients.ppo_gradients(net, tb, 0.1, 1.3, params, **loss)
    assert len(grads) == len(params)
    for p, a, b in zip(params, ref_grads, grads):
        assert b.shape == p.shape
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    for t in TERMS:
        torch.testing.assert_close(getattr(terms, t), getattr(ref, t).detach(), rtol=1e-5, atol=1e-6, msg=t)
    # Not vacuous: clipping is active on some samples, and every parameter moves.
    assert 0.0 < float(terms.clipfrac) < 1.0
    assert all(float(g.abs().sum()) > 0 for g in grads)


def test_minibatch_gradients_takes_it_and_autograd_on_request():
    net, tb = _case(gym.spaces.Discrete(4), 6)
    params = list(net.parameters())
    loss = dict(LOSS, value_clip=0.2, normalize=True, chunks=None, teacher_coeff=0.0, bounds_coeff=0.0, replay=None)
    calls = []
    real = mlp_gradients.ppo_gradients

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    mlp_gradients.ppo_gradients = spy
    try:
        fast, g_fast = minibatch_gradients(net, tb, 0.0, 1.0, params, **loss)
        assert calls == [1]
        slow, g_slow = minibatch_gradients(net, tb, 0.0, 1.0, params, autograd=True, **loss)
        assert calls == [1]
    finally:
        mlp_gradients.ppo_gradients = real
    for a, b in zip(g_fast, g_slow):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_where_it_does_not_apply_autograd_is_used():
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    disc = gym.spaces.Discrete(3)
    plain = ActorCritic(4, disc, (8,))
    assert mlp_gradients.supported(plain)
    assert mlp_gradients.supported(plain, precision="bf16")
    assert not mlp_gradients.supported(plain, precision="fp16")
    assert not mlp_gradients.supported(plain, chunks=(0, 0))
    assert not mlp_gradients.supported(plain, teacher_coeff=0.5, has_teacher=True)
    assert mlp_gradients.supported(plain, teacher_coeff=0.5, has_teacher=False)  # no labels: the term is off
    assert not mlp_gradients.supported(ActorCritic(4, box, (8,)), bounds_coeff=0.1)
    assert mlp_gradients.supported(ActorCritic(4, disc, (8,)), bounds_coeff=0.1)  # a Box-only loss
    assert not mlp_gradients.supported(ActorCritic(4, disc, (8,), "elu"))
    cnn = {"kind": "cnn", "chw": (2, 5, 5), "channels_last": True, "channels": [4], "features": 8}
    assert not mlp_gradients.supported(ActorCritic(50, disc, (8,), encoder=cnn))
    assert not mlp_gradients.supported(make_policy(4, disc, (8,), encoder={"kind": "gru", "gru_hidden": 8}))
    assert mlp_gradients.mlp_layers(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())) is None  # ends in an activation


def test_learner_update_lands_on_the_same_weights_either_way():
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService
    from hdppo.platform.rollout_worker import RolloutWorker

    weights = []
    for autograd in (False, True):
        cfg = validate(tiny_config(layers=[{"name": "control", "learner": {"autograd": autograd},
                                            "ppo": {"minibatch_size": 64, "num_epochs": 2, "value_clip": 0.2},
                                            "dppo": {"num_workers": 1, "num_envs_per_worker": 2,
                                                     "train_batch_size": 256}}]))
        torch.manual_seed(0)
        svc = ParameterService()
        worker = RolloutWorker(cfg, ["control"], 0, 1, svc)
        spec = worker.specs[0]
        torch.manual_seed(1)
        learner = Learner(cfg, 0, spec.obs_dim, spec.action_space, svc, encoder=spec.encoder)
        learner.policy.load_state_dict(worker.policies["control"].state_dict())
        rollout = worker.sample()["control"]
        before = [p.detach().clone() for p in learner.params]
        learner.update_central(rollout)
        weights.append([p.detach().clone() for p in learner.params])
        assert any(not torch.equal(a, b) for a, b in zip(before, weights[-1]))
    for a, b in zip(*weights):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["discrete", "box_decoupled_relu", "central_critic_weighted"])
def test_bf16_hidden_layers_match_autograd_under_autocast(name):
    """learner.precision 'bf16': the hidden layers' matmuls in bfloat16, as autograd under autocast
    takes them; the two agree to bfloat16's rounding, and both stay near the float32 gradient."""
    space, obs_dim, kw = CASES[name]
    net, tb = _case(space, obs_dim, n=256, **kw)
    params = list(net.parameters())
    loss = dict(LOSS, value_clip=0.2, normalize=True)
    ref = minibatch_loss(net, tb, 0.1, 1.3, precision="bf16", **loss)
    ref_grads = gradients(net, ref.total, params)
    exact = gradients(net, minibatch_loss(net, tb, 0.1, 1.3, **loss).total, params)
    assert mlp_gradients.supported(net, precision="bf16")
    terms, grads = mlp_gradients.ppo_gradients(net, tb, 0.1, 1.3, params, precision="bf16", **loss)
    flat = lambda gs: torch.cat([g.reshape(-1) for g in gs])  # noqa: E731
    for other in (ref_grads, exact):
        a, b = flat(grads), flat(other)
        assert float(torch.nn.functional.cosine_similarity(a, b, dim=0)) > 0.995
        assert abs(float(a.norm() / b.norm()) - 1.0) < 0.03
    assert not torch.equal(flat(grads), flat(exact))  # the bfloat16 matmuls did run
    torch.testing.assert_close(terms.total, ref.total.detach(), rtol=0.02, atol=1e-3)


def test_a_pickled_policy_rebuilds_its_layers_view():
    """A policy sent to another process (pickled) leaves mlp_gradients' view of its layers behind
    and builds one over its own parameters: the same gradient, on the copy's tensors."""
    import pickle

    net, tb = _case(gym.spaces.Discrete(5), 6)
    params = list(net.parameters())
    assert mlp_gradients.supported(net)
    copy = pickle.loads(pickle.dumps(net))
    assert "_mlp_layers" not in copy.__dict__
    copy_params = list(copy.parameters())
    assert mlp_gradients.supported(copy)
    assert all(w is p for (w, _, _), p in zip(copy.__dict__["_mlp_layers"][0], copy_params[0::2]))
    loss = dict(LOSS, value_clip=None, normalize=True)
    _, g = mlp_gradients.ppo_gradients(net, tb, 0.0, 1.0, params, **loss)
    _, g_copy = mlp_gradients.ppo_gradients(copy, tb, 0.0, 1.0, copy_params, **loss)
    for a, b in zip(g, g_copy):
        torch.testing.assert_close(a, b)


def test_the_learners_whole_batch_gradient_takes_the_written_out_path(monkeypatch):
    """Learner.gradient (the workers' agreement diagnostic, every diagnostics.every updates) goes
    the minibatches' way: written out for a plain MLP, equal to autograd's; autograd on request."""
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService

    calls = []
    real = mlp_gradients.ppo_gradients
    monkeypatch.setattr(mlp_gradients, "ppo_gradients", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    rng = np.random.default_rng(3)
    batch = Batch(rng.normal(size=(200, 6)).astype(np.float32), rng.integers(0, 3, (200, 1)).astype(np.float32),
                  np.full(200, -np.log(3), np.float32), *(rng.normal(size=200).astype(np.float32) for _ in range(3)))
    got = {}
    for autograd in (False, True):
        cfg = validate(tiny_config(layers=[{"name": "control", "policy": {"hidden": [16, 16]},
                                            "learner": {"autograd": autograd}}]))
        torch.manual_seed(0)
        learner = Learner(cfg, 0, 6, gym.spaces.Discrete(3), ParameterService())
        del calls[:]
        got[autograd] = learner.gradient(batch, 0.1, 1.2, 0.01)
        assert calls == ([] if autograd else [1])
    for a, b in zip(got[False], got[True]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
