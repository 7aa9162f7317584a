"""The PPO minibatch gradient of a plain MLP actor-critic, written out by hand.

A PPO learner on CPU makes hundreds of small optimizer steps per update, and on the MLPs most
layers use (64x64, tanh) each step's time is torch's per-operator cost and the autograd engine's,
not the maths: a 512-sample step of battle_v4's 845-input MLP made ~150 operator calls, its
matmuls a third of the time (docs/benchmarks.md). For an actor and a critic that are stacks of
``Linear`` and ``Tanh``/``ReLU`` layers, the loss of :mod:`policies.ppo_loss` has a gradient short
enough to write: the forward pass keeps each layer's input, the loss's derivative with respect to
the logits (or Gaussian mean) and the value is a few elementwise operations, and each layer's
backward pass is two matmuls and an activation's derivative. About a third of the calls, no graph.

The numbers are those of autograd on :func:`policies.ppo_update.minibatch_loss` (to float32
rounding; ``tests/test_mlp_gradients.py`` compares them on every head, with masks, stale-sample
weights, decoupled PPO, value clipping and a central critic). :func:`supported` says when this
applies; anything else (a teacher, the bounds loss, recurrent, image or set encoders) keeps
autograd.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from .networks import _HALF_LOG_2PI, ActorCritic, tanh_
from .ppo_loss import LossTerms, decoupled_center, loss_weight, normalize_advantages, ratio_stats

_ACTS = {nn.Tanh: "tanh", nn.ReLU: "relu"}


def mlp_layers(seq: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor, str | None]] | None:
    """``[(weight, bias, activation after it or None)]`` of a Sequential of Linear layers each
    followed by at most one Tanh or ReLU, ending in a Linear; None for anything else."""
    if not isinstance(seq, nn.Sequential) or not len(seq):
        return None
    out: list[tuple[torch.Tensor, torch.Tensor, str | None]] = []
    for m in seq:
        if type(m) is nn.Linear and m.bias is not None:
            out.append((m.weight, m.bias, None))
        elif type(m) in _ACTS and out and out[-1][2] is None:
            w, b, _ = out[-1]
            out[-1] = (w, b, _ACTS[type(m)])
        else:
            return None
    return out if out[-1][2] is None else None


def forward(layers: list, x: torch.Tensor, bf16: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The MLP's output and each layer's input (``x`` first), for :func:`backward`.

    ``bf16``: the hidden layers' matmuls in bfloat16 as under ``learner.precision: bf16``'s autocast
    (:func:`policies.networks.run_mlp`: bfloat16 inputs and weights, the activation computed in
    float32 and stored in bfloat16), the output layer in float32."""
    inputs = []
    last = len(layers) - 1
    for k, (w, b, act) in enumerate(layers):
        low = bf16 and k < last
        if low:
            x = x.to(torch.bfloat16)
            z = torch.addmm(b.to(torch.bfloat16), x, w.to(torch.bfloat16).t()).float()
        else:
            x = x.float()
            z = torch.addmm(b, x, w.t())
        inputs.append(x)
        if act == "tanh":
            z = tanh_(z)  # in place: z is addmm's fresh output
        elif act == "relu":
            z = torch.relu(z)
        x = z.to(torch.bfloat16) if low else z
    return x, inputs


def backward(layers: list, inputs: list[torch.Tensor], g: torch.Tensor) -> list[torch.Tensor]:
    """``[dW, db, ...]`` (float32) in the layers' order, given ``g`` = d loss / d output; no
    gradient with respect to the MLP's input is formed. A layer whose input :func:`forward`
    stored in bfloat16 takes its two matmuls in bfloat16 too."""
    grads: list[torch.Tensor] = []
    for k in range(len(layers) - 1, -1, -1):
        w, _, _ = layers[k]
        x = inputs[k]
        low = x.dtype == torch.bfloat16
        g_in = g.to(torch.bfloat16) if low else g
        dw = g_in.t().mm(x)
        grads += [g.sum(0), dw.float() if low else dw]   # reversed below: dW before db
        if k == 0:
            break
        g = g_in.mm(w.to(torch.bfloat16)).float() if low else g.mm(w)
        act, a = layers[k - 1][2], inputs[k].float()   # a = act(z): both derivatives read the output
        if act == "tanh":
            g = _times_tanh_derivative(g, a)
        elif act == "relu":
            g = g * (a > 0)
    grads.reverse()
    return grads


def _times_tanh_derivative(g: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``g * (1 - a * a)``, written into ``g`` (fresh from :func:`backward`'s matmul): in numpy for
    float32 CPU tensors, three calls without torch's per-call cost (its ``1.0 - t`` alone goes
    through a Python-level ``__rsub__``)."""
    if (g.device.type == "cpu" and g.dtype == a.dtype == torch.float32 and g.is_contiguous() and a.is_contiguous()
            and not g.requires_grad and not a.requires_grad):
        t = np.square(a.numpy())
        np.subtract(np.float32(1.0), t, out=t)
        gn = g.numpy()
        gn *= t
        return g
    return g * (1.0 - a * a)


def supported(policy: Any, *, chunks: Any = None, teacher_coeff: float = 0.0, has_teacher: bool = False,
              bounds_coeff: float = 0.0, replay: Any = None, precision: str = "fp32") -> bool:
    """Whether :func:`ppo_gradients` computes this minibatch's loss: an :class:`ActorCritic` whose
    actor and critic are plain MLPs, no teacher term, no bounds loss, not recurrent."""
    if type(policy) is not ActorCritic or precision not in ("fp32", "bf16") or chunks is not None or replay is not None:
        return False
    if teacher_coeff > 0.0 and has_teacher:
        return False
    if bounds_coeff > 0.0 and policy.head.kind == "box":
        return False
    actor, critic = _layers(policy)
    return actor is not None and critic is not None


def _layers(policy: ActorCritic) -> tuple:
    """``(mlp_layers(actor), mlp_layers(critic))``, worked out once per policy (the modules never
    change kind; a pickled copy drops it, see ``ActorCritic.__getstate__``)."""
    cached = policy.__dict__.get("_mlp_layers")
    if cached is None:
        cached = policy.__dict__["_mlp_layers"] = (mlp_layers(policy.actor), mlp_layers(policy.critic))
    return cached


def ppo_gradients(policy: ActorCritic, mb, adv_mean: float, adv_std: float, params: list[torch.Tensor], *,
                  clip: float, value_clip: float | None, vf_coeff: float, entropy_coeff: float,
                  normalize: bool = True, precision: str = "fp32") -> tuple[LossTerms, list[torch.Tensor]]:
    """:func:`policies.ppo_update.minibatch_gradients` for a policy :func:`supported` accepts:
    the loss terms (detached) and d total / d ``params`` (every parameter of ``policy``).
    ``precision`` 'bf16': the hidden layers in bfloat16 (:func:`forward`), the loss in float32."""
    bf16 = precision == "bf16"
    actor_layers, critic_layers = _layers(policy)
    B = mb.obs.shape[0]
    weight = loss_weight(mb.weights)
    adv = normalize_advantages(mb.advantages, adv_mean, adv_std) if normalize else mb.advantages
    old_logp, is_weight = decoupled_center(mb.logp, mb.prox_logp)
    # Per-sample factors of the means: mean(w * x) has d/dx_i = w_i / B.
    scale = torch.full_like(adv, 1.0 / B) if weight is None else weight / B

    with torch.no_grad():
        out, a_in = forward(actor_layers, mb.obs, bf16)
        head = policy.head
        if head.kind == "box":
            log_std = policy.log_std
            std = log_std.exp()
            eps = (mb.actions - out) / std                           # [B, dim]
            logp = -0.5 * (eps * eps).sum(-1) - (log_std.sum() + _HALF_LOG_2PI * head.dim)
            entropy = torch.full_like(logp, float(0.5 * head.dim + _HALF_LOG_2PI * head.dim) + float(log_std.sum()))
        else:
            logits = out
            if mb.masks is not None and mb.masks.shape[-1] > 0:
                legal = mb.masks > 0
                logits = torch.where(legal, out, torch.full_like(out, -1e8))
            else:
                legal = None
            norms, probs, logp, entropy = [], [], None, None
            at = 0
            for i, n in enumerate(head.nvec):
                chunk = logits[:, at:at + n]
                at += n
                norm = chunk - chunk.logsumexp(-1, keepdim=True)
                p = norm.exp()
                lp = norm.gather(-1, mb.actions[:, i:i + 1].long()).squeeze(-1)
                ent = -(norm * p).sum(-1)
                norms.append(norm)
                probs.append(p)
                logp, entropy = (lp, ent) if logp is None else (logp + lp, entropy + ent)
        value, c_in = forward(critic_layers, mb.critic_obs if policy.central else mb.obs, bf16)
        value = value.squeeze(-1)

        # Policy term: -mean(w * isw * min(r A, clip(r) A)); d/d logp = -w isw A r [the unclipped branch chosen] / B.
        log_ratio = logp - old_logp
        ratio = log_ratio.exp()
        unclipped = ratio * adv
        clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * adv
        surrogate = torch.minimum(unclipped, clipped)
        pw = scale if is_weight is None else scale * is_weight
        pg = -(pw * surrogate).sum()
        g_logp = -(pw * unclipped) * (unclipped <= clipped)
        # Value term: 0.5 * mean(w * max((v - R)^2, (v_clipped - R)^2)).
        err = value - mb.returns
        if value_clip is None:
            vl = 0.5 * (scale * err * err).sum()
            g_value = vf_coeff * scale * err
        else:
            v_clipped = mb.values + (value - mb.values).clamp(-value_clip, value_clip)
            err_c = v_clipped - mb.returns
            sq, sq_c = err * err, err_c * err_c
            vl = 0.5 * (scale * torch.maximum(sq, sq_c)).sum()
            g_value = vf_coeff * scale * err * (sq >= sq_c)
        ent_mean = (scale * entropy).sum()
        total = pg + vf_coeff * vl - entropy_coeff * ent_mean
        clipfrac, approx_kl = ratio_stats(ratio, log_ratio, clip)

        # d total / d actor output.
        g_ent = -entropy_coeff * scale                                # d total / d entropy_i
        g_log_std = None
        if head.kind == "box":
            # logp = -0.5 |eps|^2 - sum(log_std) - c, eps = (a - mu) / std: d/d mu = eps / std,
            # d/d log_std = eps^2 - 1 per dimension; entropy's d/d log_std is 1 per dimension.
            g_out = g_logp[:, None] * (eps / std)
            g_log_std = (g_logp[:, None] * (eps * eps - 1.0)).sum(0) + g_ent.sum()
        else:
            parts, at = [], 0
            for i, (norm, p) in enumerate(zip(norms, probs)):
                # d logp / d logits = onehot(a) - p; d entropy / d logits = -p (log p + H).
                g = p * (-g_logp[:, None]) - g_ent[:, None] * p * (norm + (-(norm * p).sum(-1, keepdim=True)))
                g.scatter_add_(1, mb.actions[:, i:i + 1].long(), g_logp[:, None])
                parts.append(g)
            g_out = parts[0] if len(parts) == 1 else torch.cat(parts, 1)
            if legal is not None:  # torch.where passes no gradient to a masked logit
                g_out = g_out * legal
        actor_grads = backward(actor_layers, a_in, g_out)
        critic_grads = backward(critic_layers, c_in, g_value[:, None])

    by_id = {}
    for layers, layer_grads in ((actor_layers, actor_grads), (critic_layers, critic_grads)):
        for (w, b, _), gw, gb in zip(layers, layer_grads[0::2], layer_grads[1::2]):
            by_id[id(w)], by_id[id(b)] = gw, gb
    if g_log_std is not None:
        by_id[id(policy.log_std)] = g_log_std
    grads = [by_id[id(p)] if id(p) in by_id else torch.zeros_like(p) for p in params]
    terms = LossTerms(total, pg, vl, ent_mean, approx_kl, clipfrac)
    return terms, grads
