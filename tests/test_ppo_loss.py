import math

import pytest
import torch

from hdppo.policies.ppo_loss import clipped_policy_loss, clipped_value_loss, explained_variance, ppo_loss


def test_clipped_objective_by_hand():
    old = torch.zeros(4)
    # ratios 1.5, 0.5, 1.1, 0.7 ; advantages +1, +1, -1, -1 ; clip 0.2
    logp = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.7]))
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    loss, clipfrac, kl = clipped_policy_loss(logp, old, adv, 0.2)
    # min(r*A, clip(r)*A): 1.2, 0.5, -1.1, -0.8  -> mean 0.05 ; loss is the negative
    assert loss.item() == pytest.approx(-(1.2 + 0.5 - 1.1 - 0.8) / 4)
    assert clipfrac.item() == pytest.approx(0.75)  # 1.5, 0.5 and 0.7 are outside [0.8, 1.2]
    expected_kl = sum((r - 1) - math.log(r) for r in (1.5, 0.5, 1.1, 0.7)) / 4
    assert kl.item() == pytest.approx(expected_kl, rel=1e-5)


def test_clipping_stops_the_gradient_beyond_the_trust_region():
    logp = torch.log(torch.tensor([1.5])).requires_grad_()
    loss, _, _ = clipped_policy_loss(logp, torch.zeros(1), torch.tensor([1.0]), 0.2)
    loss.backward()
    assert logp.grad.item() == 0.0


def test_value_clipping_takes_the_pessimistic_error():
    old = torch.tensor([0.0, 0.0])
    values = torch.tensor([1.0, 0.1])
    returns = torch.tensor([1.0, 1.0])
    # first: unclipped err 0, clipped value 0.2 -> err 0.64 ; second: both 0.81
    got = clipped_value_loss(values, old, returns, clip=0.2)
    assert got.item() == pytest.approx(0.5 * (0.64 + 0.81) / 2)
    assert clipped_value_loss(values, old, returns, clip=None).item() == pytest.approx(0.5 * (0 + 0.81) / 2)


def test_total_loss_combines_terms():
    z = torch.zeros(3)
    terms = ppo_loss(z, z, torch.ones(3), torch.ones(3), z, torch.zeros(3), torch.full((3,), 2.0),
                     clip=0.2, value_clip=None, vf_coeff=0.5, entropy_coeff=0.01)
    assert terms.policy.item() == pytest.approx(-1.0)
    assert terms.value.item() == pytest.approx(0.5)
    assert terms.total.item() == pytest.approx(-1.0 + 0.5 * 0.5 - 0.01 * 2.0)


def test_explained_variance():
    y = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(y, y) == pytest.approx(1.0)
    assert explained_variance(torch.zeros(3) + 2.0, y) == pytest.approx(0.0)
    assert math.isnan(explained_variance(y, torch.ones(3)))


def test_explained_variance_from_worker_sums_matches_direct():
    import numpy as np

    from hdppo.platform.batch import RolloutStats, explained_variance_of

    rng = np.random.default_rng(0)
    ret, val = rng.normal(size=100), rng.normal(size=100)
    parts = []
    for sl in (slice(0, 30), slice(30, 100)):
        r, res = ret[sl], ret[sl] - val[sl]
        parts.append(RolloutStats(0, 0, len(r), 0.0, ret_sum=r.sum(), ret_sumsq=(r**2).sum(),
                                  res_sum=res.sum(), res_sumsq=(res**2).sum()))
    direct = explained_variance(torch.as_tensor(val), torch.as_tensor(ret))
    assert explained_variance_of(parts) == pytest.approx(direct, rel=1e-6)


def test_decoupled_objective_clips_around_the_proximal_policy_and_reweights():
    """Decoupled PPO: the ratio is to the proximal policy and the surrogate is scaled by
    proximal / behaviour; with the proximal policy equal to the behaviour it is plain PPO."""
    logp = torch.tensor([-1.0, -0.5, -2.0], requires_grad=True)
    behaviour = torch.tensor([-1.5, -0.2, -2.0])
    prox = torch.tensor([-1.1, -0.45, -1.7])
    adv = torch.tensor([1.0, -2.0, 0.5])
    loss, clipfrac, _ = clipped_policy_loss(logp, prox, adv, 0.2, is_weight=(prox - behaviour).exp())
    r = (logp - prox).exp()
    by_hand = -((prox - behaviour).exp() * torch.min(r * adv, r.clamp(0.8, 1.2) * adv)).mean()
    torch.testing.assert_close(loss, by_hand)
    assert float(clipfrac) == pytest.approx(1 / 3)   # -1.7 -> -2.0 only: ratio 0.74
    plain, _, _ = clipped_policy_loss(logp, behaviour, adv, 0.2)
    same, _, _ = clipped_policy_loss(logp, behaviour, adv, 0.2, is_weight=torch.ones(3))
    torch.testing.assert_close(plain, same)
