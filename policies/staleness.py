"""How much a sample collected with old weights may still count (sync modes soft and async)."""
from __future__ import annotations

import numpy as np


def staleness_weights(lags: np.ndarray, max_lag: int, rule: str = "drop", decay: float = 0.5) -> np.ndarray:
    """Loss weight of each sample from its lag (how many versions the learner is ahead of the
    weights that chose the action).

    A sample more than ``max_lag`` versions behind gets 0: it is dropped, whatever the rule.
    Within the bound, ``'drop'`` keeps it at full weight and ``'downweight'`` scales it by
    ``decay ** lag``: PPO's ratio corrects a slightly stale sample, but its clipped surrogate
    trusts it less the further the policy has moved.
    """
    lags = np.asarray(lags)
    if (lags < 0).any():
        raise ValueError("a sample cannot be newer than the learner (negative lag)")
    w = np.ones(lags.shape, np.float32) if rule == "drop" else (decay ** lags).astype(np.float32)
    w[lags > max_lag] = 0.0
    return w
