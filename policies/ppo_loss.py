"""The PPO objective (Schulman et al. 2017, arXiv:1707.06347) as small pure functions of tensors.

Every function takes 1-D tensors of one minibatch (``[B]``) and returns scalars.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .networks import MASKED_LOGIT


def _mean(x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean over the minibatch, each sample scaled by its loss weight (stale samples count less).

    ``mean(w * x)``, not ``sum(w * x) / sum(w)``: it keeps the mean over a union of shards equal to
    the count-weighted mean of the shards' means, which mode ``dppo`` relies on."""
    return x.mean() if weight is None else (weight * x).mean()


def clipped_policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: float, weight: torch.Tensor | None = None,
    is_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped surrogate loss (to minimise), fraction of clipped ratios, and approximate KL.

    The KL estimate is Schulman's low-variance k3, ``(r - 1) - log r``
    (http://joschu.net/blog/kl-approx.html), as CleanRL logs it. Decoupled PPO (Hilton et al.
    2022, arXiv:2110.00641) passes the proximal policy's log-probabilities as ``old_logp`` and
    ``is_weight`` = proximal / behaviour probability, which scales each sample's surrogate.
    """
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + clip) * adv)
    if is_weight is not None:
        surrogate = is_weight * surrogate
    loss = -_mean(surrogate, weight)
    with torch.no_grad():
        clipfrac, approx_kl = ratio_stats(ratio, log_ratio, clip)
    return loss, clipfrac, approx_kl


def ratio_stats(ratio: torch.Tensor, log_ratio: torch.Tensor, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The fraction of clipped ratios and the k3 estimate of the KL, as :func:`clipped_policy_loss` logs them."""
    return ((ratio - 1.0).abs() > clip).float().mean(), ((ratio - 1.0) - log_ratio).mean()


def loss_weight(weights: torch.Tensor) -> torch.Tensor | None:
    """The per-sample loss weights, or None where all are 1 (no stale samples): the common case
    then skips the multiply."""
    return weights if bool((weights != 1).any()) else None


def decoupled_center(logp: torch.Tensor, prox_logp: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(old_logp, is_weight)`` of :func:`clipped_policy_loss` from the behaviour policy's ``logp``:
    those and None, or with decoupled PPO's proximal ``prox_logp`` the clip centred there and each
    sample reweighted by proximal / behaviour probability."""
    if prox_logp is None:
        return logp, None
    return prox_logp, (prox_logp - logp).exp()


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """0.5 * squared error, pessimistically clipped around the rollout's values when ``clip`` is set.

    Value clipping follows the PPO2 baseline: the new value may move at most ``clip`` from the
    old one, and the larger of the two errors is used.
    """
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * _mean(unclipped, weight)
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    clipped = (clipped_values - returns) ** 2
    return 0.5 * _mean(torch.max(unclipped, clipped), weight)


def normalize_advantages(adv: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """Advantages standardised with statistics given by the caller (whole batch, not minibatch),
    so that a gradient split across workers equals the gradient on the union of their data."""
    return (adv - mean) / (std + 1e-8)


@dataclass
class LossTerms:
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clipfrac: torch.Tensor
    teacher: torch.Tensor | None = None  # the teacher's negative log-likelihood, when a teacher is on
    teacher_replay: torch.Tensor | None = None  # the same on states drawn from the teacher's replay, when it is on
    bounds: torch.Tensor | None = None   # the bounds loss of a Box policy's mean, when it is on


# A teacher's action that the mask makes illegal has log-likelihood about MASKED_LOGIT (-1e8):
# such rows are left out of the term. Every other row counts in full, however
# unlikely the student finds it. A floor on the log-likelihood would zero the gradient of exactly
# the decisions the student gets most wrong: with a Gaussian of std 0.08 in 3 dimensions, an error
# of 0.6 in one of them is already below -20 (the swarm's drones forgot their near-collisions so).
ILLEGAL_TEACHER_LOGP = MASKED_LOGIT / 100  # far below any legal row's, far above a masked one's


def teacher_nll(teacher_logp: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """Kickstarting's term: the mean negative log-likelihood of the teacher's actions.

    Rows whose teacher action is illegal under the mask count as zero (they stay in the mean's
    denominator, as ``_mean`` keeps shard means additive)."""
    legal = teacher_logp > ILLEGAL_TEACHER_LOGP
    return _mean(torch.where(legal, -teacher_logp, torch.zeros_like(teacher_logp)), weight)


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip: float,
    value_clip: float | None,
    vf_coeff: float,
    entropy_coeff: float,
    weight: torch.Tensor | None = None,
    is_weight: torch.Tensor | None = None,
) -> LossTerms:
    """Total loss = policy + vf_coeff * value - entropy_coeff * entropy (all minibatch means,
    each sample scaled by ``weight`` when given; the policy term also by ``is_weight``, decoupled
    PPO's importance ratio, when given)."""
    pg, clipfrac, kl = clipped_policy_loss(logp, old_logp, adv, clip, weight, is_weight)
    vl = clipped_value_loss(values, old_values, returns, value_clip, weight)
    ent = _mean(entropy, weight)
    total = pg + vf_coeff * vl - entropy_coeff * ent
    return LossTerms(total, pg, vl, ent, kl, clipfrac)


def explained_variance(pred: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var[target - pred] / Var[target]; nan when the target is constant."""
    var_y = target.var()
    if var_y.item() == 0:
        return float("nan")
    return float(1.0 - (target - pred).var() / var_y)
