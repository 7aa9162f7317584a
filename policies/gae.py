"""Generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438) as a pure function."""
from __future__ import annotations

import numpy as np


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    episode_end: np.ndarray,
    gamma: float | np.ndarray,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) over a time-major rollout.

    Shapes: every array is ``[T, N]`` (T steps of N envs or agents).

    - ``values[t]`` is V(s_t); ``next_values[t]`` is V(s_{t+1}) for the *true* next state: on a
      truncated step that is V(final observation), not V(the reset observation that replaced it).
    - ``terminated[t]``: s_{t+1} is terminal, so nothing is bootstrapped from it.
    - ``episode_end[t]``: terminated or truncated; the advantage trace stops here either way.
    - ``gamma`` may be an array ``[T, N]`` (an upper layer of a hierarchy discounts by
      gamma**period per transition).

    Returns ``(advantages, returns)``, each ``[T, N]``, with ``returns = advantages + values``.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    T = rewards.shape[0]
    gamma_arr = np.broadcast_to(np.asarray(gamma, dtype=np.float64), rewards.shape)
    not_term = 1.0 - np.asarray(terminated, dtype=np.float64)
    not_end = 1.0 - np.asarray(episode_end, dtype=np.float64)
    deltas = rewards + gamma_arr * next_values * not_term - values
    adv = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[1:], dtype=np.float64)
    for t in range(T - 1, -1, -1):
        last = deltas[t] + gamma_arr[t] * lam * not_end[t] * last
        adv[t] = last
    returns = adv + values
    return adv.astype(np.float32), returns.astype(np.float32)
