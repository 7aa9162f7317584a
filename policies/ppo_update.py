"""The loss on one minibatch and its gradient: shared by the learner (mode ``central``) and the
rollout workers (mode ``dppo``), so that both modes compute exactly the same thing."""
from __future__ import annotations

import torch

from .networks import ActorCritic, precision_context
from .ppo_loss import LossTerms, normalize_advantages, ppo_loss, teacher_nll


def minibatch_loss(policy: ActorCritic, mb, adv_mean: float, adv_std: float, *, clip: float,
                   value_clip: float | None, vf_coeff: float, entropy_coeff: float,
                   normalize: bool = True, chunks: tuple | None = None, teacher_coeff: float = 0.0,
                   bounds_coeff: float = 0.0, replay: tuple | None = None, precision: str = "fp32") -> LossTerms:
    """PPO loss on a :class:`~hdppo.platform.batch.TorchBatch` ``mb`` of B samples. A recurrent
    policy takes ``chunks = (index [S, C], valid [S, C])`` (networks.sequence_chunks) into ``mb``:
    each chunk is replayed through the GRU from its first step's stored hidden, and the loss
    covers the valid steps only. With ``teacher_coeff > 0`` and teacher labels in ``mb``
    (kickstarting), ``teacher_coeff`` times their negative log-likelihood joins the total; with
    ``replay = (obs, teacher, masks)`` tensors of past decisions (teacher_replay), ``teacher_coeff``
    times their negative log-likelihood too. ``precision`` 'bf16' runs the forward passes under
    bfloat16 autocast (networks.precision_context); the loss itself is float32 either way."""
    with precision_context(precision, mb.obs.device.type):
        return _minibatch_loss(policy, mb, adv_mean, adv_std, clip=clip, value_clip=value_clip, vf_coeff=vf_coeff,
                               entropy_coeff=entropy_coeff, normalize=normalize, chunks=chunks,
                               teacher_coeff=teacher_coeff, bounds_coeff=bounds_coeff, replay=replay)


def _minibatch_loss(policy: ActorCritic, mb, adv_mean: float, adv_std: float, *, clip: float,
                    value_clip: float | None, vf_coeff: float, entropy_coeff: float, normalize: bool,
                    chunks: tuple | None, teacher_coeff: float, bounds_coeff: float,
                    replay: tuple | None) -> LossTerms:
    if chunks is not None:
        index, valid = chunks
        logp_s, ent_s, v_s = policy.replay(mb.obs[index], mb.hidden[index[:, 0]], mb.first[index], mb.actions[index],
                                           mb.masks[index], mb.critic_obs[index])
        logp, entropy, values = logp_s[valid], ent_s[valid], v_s[valid]
        mb = mb.take(index[valid])
    else:
        # The bounds loss reads the Box mean of the same forward pass (no second actor pass).
        bounded = bounds_coeff > 0.0 and policy.head.kind == "box"
        logp, entropy, *mean = policy.log_prob_entropy(mb.obs, mb.actions, mb.masks, with_mean=bounded)
        values = policy.value(mb.obs, mb.critic_obs)
    adv = normalize_advantages(mb.advantages, adv_mean, adv_std) if normalize else mb.advantages
    # All-ones weights (no stale samples) skip the multiply: the common case costs nothing extra.
    weight = mb.weights if bool((mb.weights != 1).any()) else None
    old_logp, is_weight = mb.logp, None
    if mb.prox_logp is not None:  # decoupled PPO: clip around the update's start, reweight by start / behaviour
        old_logp, is_weight = mb.prox_logp, (mb.prox_logp - mb.logp).exp()
    terms = ppo_loss(logp, old_logp, adv, values, mb.values, mb.returns, entropy, clip=clip,
                     value_clip=value_clip, vf_coeff=vf_coeff, entropy_coeff=entropy_coeff, weight=weight,
                     is_weight=is_weight)
    if teacher_coeff > 0.0 and chunks is None and mb.teacher.shape[-1]:
        t_logp, _ = policy.log_prob_entropy(mb.obs, mb.teacher, mb.masks)
        terms.teacher = teacher_nll(t_logp, weight)
        terms.total = terms.total + teacher_coeff * terms.teacher
        if replay is not None:
            r_logp, _ = policy.log_prob_entropy(replay[0], replay[1], replay[2])
            terms.teacher_replay = teacher_nll(r_logp)
            terms.total = terms.total + teacher_coeff * terms.teacher_replay
    if chunks is None and bounded:
        terms.bounds = bounds_loss(mean[0], policy.head.low, policy.head.high)
        terms.total = terms.total + bounds_coeff * terms.bounds
    return terms


def bounds_loss(mean: torch.Tensor, low, high) -> torch.Tensor:
    """Mean over the batch of the summed squared excess of ``mean [B, dim]`` beyond ``[low, high]``,
    measured in half-ranges (so one coefficient fits every action scale); 0 inside the bounds.
    Unbounded dimensions (infinite bounds) cost nothing."""
    low_t = torch.as_tensor(low, dtype=mean.dtype, device=mean.device)
    high_t = torch.as_tensor(high, dtype=mean.dtype, device=mean.device)
    finite = torch.isfinite(low_t) & torch.isfinite(high_t)
    half = torch.where(finite, (high_t - low_t) / 2, torch.ones_like(high_t)).clamp_min(1e-8)
    over = torch.relu(mean - high_t) + torch.relu(low_t - mean)
    over = torch.where(finite, over / half, torch.zeros_like(over))
    return (over * over).sum(-1).mean()


def gradients(policy: ActorCritic, loss: torch.Tensor, params: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """d loss / d parameters, one tensor per parameter (zeros where a parameter is unused).
    ``params``: ``list(policy.parameters())`` if the caller keeps it (saves walking the modules)."""
    params = list(policy.parameters()) if params is None else params
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g.detach() for p, g in zip(params, grads)]


def average_gradients(grads: list[list[torch.Tensor]], weights: list[float]) -> list[torch.Tensor]:
    """Weighted mean of per-worker gradients; weights are normalised to sum to 1.

    With weights = sample counts, the mean of per-shard mean-loss gradients equals the gradient
    of the mean loss over the union of the shards.
    """
    total = float(sum(weights))
    return [sum(w / total * g[i] for g, w in zip(grads, weights)) for i in range(len(grads[0]))]  # type: ignore[misc]


def quality_weights(counts: list[int], qualities: list[float], beta: float) -> list[float]:
    """Aggregation weights by trajectory quality: ``w_i ∝ n_i · exp(beta · z_i)``.

    ``z_i`` is worker i's quality standardised across the workers of this update (clipped to
    ±3), so the weights do not depend on the reward's scale; ``beta = 0`` (or equal qualities)
    gives plain sample-count weighting. Returned normalised to sum to 1.
    """
    q = torch.tensor(qualities, dtype=torch.float64)
    z = torch.zeros_like(q) if len(q) < 2 or float(q.std()) == 0.0 else ((q - q.mean()) / q.std()).clamp(-3.0, 3.0)
    w = torch.tensor(counts, dtype=torch.float64) * torch.exp(beta * z)
    return (w / w.sum()).tolist()
