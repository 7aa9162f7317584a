"""Self-labeling's maths (:mod:`hdppo.platform.self_label`): pick each instance's best sampled
solution, and the cross-entropy that makes its decisions the policy's most likely ones."""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["best_of_groups", "self_label_nll"]


def best_of_groups(returns: np.ndarray, samples: int) -> np.ndarray:
    """The copy index of the highest return in each run of ``samples`` consecutive copies
    (copy ``g * samples + k`` is sample k of instance g); ties go to the first sample."""
    r = np.asarray(returns, np.float64)
    if r.ndim != 1 or samples < 1 or r.size % samples:
        raise ValueError(f"{r.size} returns do not split into groups of {samples} samples")
    groups = r.reshape(-1, samples)
    return np.arange(groups.shape[0]) * samples + groups.argmax(1)


def self_label_nll(policy, obs: torch.Tensor, actions: torch.Tensor, masks: torch.Tensor | None) -> torch.Tensor:
    """Mean negative log-probability of ``actions`` (the best solutions' decisions) under ``policy``,
    over the masked action distribution: the loss that self-labeling minimises."""
    logp, _ = policy.log_prob_entropy(obs, actions, masks)
    return -logp.mean()
