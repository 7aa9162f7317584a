"""The learner's flat optimizer step (policies/flat_params.py) against torch's per-parameter one."""
from __future__ import annotations

import copy

import gymnasium as gym
import pytest
import torch

from hdppo.policies.flat_params import FlatParameters, clip_grad_norm_
from hdppo.policies.networks import ActorCritic


def _pair(seed: int = 0):
    torch.manual_seed(seed)
    ref = ActorCritic(7, gym.spaces.Box(-1, 1, (3,)), hidden=(16, 16))
    flat_policy = copy.deepcopy(ref)
    ref_params, params = list(ref.parameters()), list(flat_policy.parameters())
    flat = FlatParameters(params)
    ref_opt = torch.optim.Adam(ref_params, lr=1e-2, eps=1e-5, fused=True)
    opt = torch.optim.Adam([flat.param], lr=1e-2, eps=1e-5, fused=True)
    return ref, ref_params, ref_opt, flat_policy, params, flat, opt


def _grads(params, scale: float, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(p.shape, generator=g) for p in params]


def _ref_step(ref_params, ref_opt, grads, max_norm):
    for p, g in zip(ref_params, grads):
        p.grad = g.clone()
    norm = float(torch.nn.utils.clip_grad_norm_(ref_params, max_norm))
    ref_opt.step()
    return norm


def _flat_step(flat, opt, grads, max_norm):
    grad = flat.gather(grads)
    norm = float(clip_grad_norm_(grad, max_norm))
    flat.param.grad = grad
    opt.step()
    return norm


def test_flat_steps_match_per_parameter_adam_with_clipping():
    ref, ref_params, ref_opt, policy, params, flat, opt = _pair()
    start = [p.detach().clone() for p in params]
    # Small gradients (no clipping) and large ones (clipped to 0.5), alternating.
    for step, scale in enumerate([0.01, 10.0, 0.02, 5.0, 0.01, 20.0]):
        grads = _grads(params, scale, step)
        n_ref = _ref_step(ref_params, ref_opt, grads, 0.5)
        n_flat = _flat_step(flat, opt, grads, 0.5)
        assert n_flat == pytest.approx(n_ref, rel=1e-5)
    moved = sum(float((a.detach() - b).abs().sum()) for a, b in zip(params, start))
    assert moved > 0.1  # the steps did change the weights
    for (name, a), b in zip(policy.named_parameters(), ref_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    flat.check()  # still views of the buffer after the optimizer's steps


def test_optimizer_state_round_trips_in_the_per_parameter_layout():
    ref, ref_params, ref_opt, policy, params, flat, opt = _pair(1)
    for step in range(3):
        grads = _grads(params, 1.0, step)
        _ref_step(ref_params, ref_opt, grads, 0.5)
        _flat_step(flat, opt, grads, 0.5)
    per = flat.per_parameter_state(opt.state_dict())
    want = ref_opt.state_dict()
    assert per["param_groups"] == want["param_groups"]
    assert sorted(per["state"]) == sorted(want["state"]) == list(range(len(params)))
    for i in want["state"]:
        assert sorted(per["state"][i]) == sorted(want["state"][i])
        for key, value in want["state"][i].items():
            torch.testing.assert_close(per["state"][i][key], value, rtol=1e-5, atol=1e-7, msg=f"{i} {key}")
    # A per-parameter state (an old checkpoint's) loaded into a fresh flat optimizer continues
    # exactly as the per-parameter optimizer does.
    policy2 = copy.deepcopy(policy)
    params2 = list(policy2.parameters())
    flat2 = FlatParameters(params2)
    opt2 = torch.optim.Adam([flat2.param], lr=1e-2, eps=1e-5, fused=True)
    opt2.load_state_dict(flat2.flat_state(copy.deepcopy(want)))
    for step in range(3, 6):
        grads = _grads(params, 1.0, step)
        _ref_step(ref_params, ref_opt, grads, 0.5)
        _flat_step(flat2, opt2, grads, 0.5)
    for a, b in zip(params2, ref_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_fresh_optimizer_state_round_trips_empty():
    *_, flat, opt = _pair()
    per = flat.per_parameter_state(opt.state_dict())
    assert per["state"] == {}
    assert flat.flat_state(per)["state"] == {}


def test_gather_reads_a_strided_gradient_in_its_logical_order():
    conv = torch.nn.Conv2d(4, 8, 3)
    params = list(conv.parameters())
    flat = FlatParameters(params)
    g = torch.randn(8, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    assert not g.is_contiguous()
    out = flat.gather([g, torch.zeros(8)])
    torch.testing.assert_close(flat.split(out)[0], g)


def test_load_state_dict_writes_into_the_buffer_and_a_replaced_storage_is_caught():
    *_, policy, params, flat, opt = _pair()
    state = {k: torch.full_like(v, 0.25) for k, v in policy.state_dict().items()}
    policy.load_state_dict(state)
    flat.check()
    assert torch.all(flat.param == 0.25)
    params[2].data = params[2].data.clone()
    with pytest.raises(RuntimeError, match="no longer lives in the flat buffer"):
        flat.check()


def test_a_checkpoint_of_another_network_is_refused_with_the_counts():
    *_, flat, opt = _pair()
    state = {"state": {}, "param_groups": [dict(opt.state_dict()["param_groups"][0], params=[0, 1])]}
    with pytest.raises(ValueError, match="optimizer state of 2 parameters"):
        flat.flat_state(state)
