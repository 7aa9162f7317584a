"""The loss on one minibatch and its gradient: shared by the learner (mode ``central``) and the
rollout workers (mode ``dppo``), so that both modes compute exactly the same thing."""
from __future__ import annotations

from concurrent.futures import Future

import torch

from . import mlp_gradients
from .networks import ActorCritic, precision_context
from .ppo_loss import (LossTerms, clipped_value_loss, decoupled_center, loss_weight, normalize_advantages, ppo_loss,
                       teacher_nll)


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


def minibatch_gradients(policy: ActorCritic, mb, adv_mean: float, adv_std: float, params: list[torch.Tensor], *,
                        pool=None, precision: str = "fp32", autograd: bool = False,
                        **loss) -> tuple[LossTerms, list[torch.Tensor]]:
    """:func:`minibatch_loss`'s terms and the gradient of their total with respect to ``params``
    (every parameter of ``policy``, in its order).

    A plain MLP actor-critic gets the gradient written out (:mod:`policies.mlp_gradients`: the
    same numbers, a third of the operator calls), unless ``autograd``. Otherwise autograd; then,
    with ``pool`` (an executor of one thread) and a policy whose critic shares no parameter with
    its actor, the critic's forward and backward run on the pool's thread while the actor's run
    on this one: two autograd graphs at once, the heavy operators releasing the GIL. The gradient
    is the same; the terms too (the value loss counted in ``total`` for the record, its gradient
    taken on the other thread)."""
    if not autograd and mlp_gradients.supported(
            policy, chunks=loss.get("chunks"), teacher_coeff=loss.get("teacher_coeff", 0.0),
            has_teacher=bool(mb.teacher.shape[-1]), bounds_coeff=loss.get("bounds_coeff", 0.0),
            replay=loss.get("replay"), precision=precision):
        return mlp_gradients.ppo_gradients(policy, mb, adv_mean, adv_std, params, clip=loss["clip"],
                                           value_clip=loss["value_clip"], vf_coeff=loss["vf_coeff"],
                                           entropy_coeff=loss["entropy_coeff"], normalize=loss.get("normalize", True),
                                           precision=precision)
    critic = _separate_critic(policy) if pool is not None and loss.get("chunks") is None else None
    if critic is None:
        terms = minibatch_loss(policy, mb, adv_mean, adv_std, precision=precision, **loss)
        return terms, gradients(policy, terms.total, params)
    values = Future()  # set by the other thread after its forward pass, before its backward
    future = pool.submit(_critic_gradients, policy, mb, critic, precision, loss["value_clip"], loss["vf_coeff"], values)
    try:
        with precision_context(precision, mb.obs.device.type):
            terms = _minibatch_loss(policy, mb, adv_mean, adv_std, values=values.result, **loss)
        critic_ids = {id(c) for c in critic}
        actor = [p for p in params if id(p) not in critic_ids]
        by_param = dict(zip(map(id, actor), gradients(policy, terms.total, actor)))
    finally:
        critic_grads = future.result()  # never leave the other thread running on this minibatch
    by_param.update(zip(map(id, critic), critic_grads))
    return terms, [by_param[id(p)] for p in params]


def _separate_critic(policy) -> list[torch.Tensor] | None:
    """The critic's parameters when they are disjoint from the rest of ``policy``, else None."""
    critic = getattr(policy, "critic", None)
    if not isinstance(critic, torch.nn.Module) or getattr(policy, "recurrent", False):
        return None
    mine = {id(p) for p in critic.parameters()}
    rest = [p for name, p in policy.named_parameters() if not name.startswith("critic.")]
    return list(critic.parameters()) if mine and not any(id(p) in mine for p in rest) else None


def _critic_gradients(policy, mb, critic: list[torch.Tensor], precision: str, value_clip: float | None,
                      vf_coeff: float, ready: Future) -> list[torch.Tensor]:
    """d (vf_coeff * value loss) / d critic on the calling thread (autocast is per thread, so the
    precision is entered here); the values, detached, go to ``ready`` as soon as they exist."""
    try:
        with precision_context(precision, mb.obs.device.type):
            values = policy.value(mb.obs, mb.critic_obs)
    except BaseException as e:
        ready.set_exception(e)
        raise
    ready.set_result(values.detach())
    vl = clipped_value_loss(values, mb.values, mb.returns, value_clip, loss_weight(mb.weights))
    return gradients(policy, vf_coeff * vl, critic)


def _minibatch_loss(policy: ActorCritic, mb, adv_mean: float, adv_std: float, *, clip: float,
                    value_clip: float | None, vf_coeff: float, entropy_coeff: float, normalize: bool,
                    chunks: tuple | None, teacher_coeff: float, bounds_coeff: float,
                    replay: tuple | None, values=None) -> LossTerms:
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
        # ``values``: a callable giving them computed elsewhere, detached (minibatch_gradients).
        values = policy.value(mb.obs, mb.critic_obs) if values is None else values()
    adv = normalize_advantages(mb.advantages, adv_mean, adv_std) if normalize else mb.advantages
    weight = loss_weight(mb.weights)
    old_logp, is_weight = decoupled_center(mb.logp, mb.prox_logp)
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
