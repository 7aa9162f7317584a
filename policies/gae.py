"""Generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438) as pure functions."""
from __future__ import annotations

import numpy as np


def decision_gae(rewards: np.ndarray, values: np.ndarray, gamma: np.ndarray | float, lam: float,
                 decided: np.ndarray, closed: np.ndarray, stop: np.ndarray, terminated: np.ndarray,
                 bootstrap: np.ndarray, last_value: np.ndarray | None = None) -> np.ndarray:
    """GAE(lambda) over rows where lanes decide at different steps (the sampler's buffers).

    Shapes: every array is ``[T, ...]`` (T env steps of lanes ``...``), ``last_value`` is ``[...]``.

    - ``decided[t]``: the lane made a decision at step t (a transition starts in row t);
    - ``closed[t]``: that transition is complete (its reward is in ``rewards[t]``). A decided row
      that is not closed is still open: it contributes only its value, as V(next decision state)
      of the lane's previous transition;
    - ``stop[t]``: the advantage trace stops after this transition (the episode ended, or the
      rollout was cut); its next value is then ``bootstrap[t]``, or 0 where ``terminated[t]``;
    - otherwise the next value is the value of the lane's next decided row, or ``last_value``
      when there is none;
    - ``gamma`` may be per row (an upper layer discounts by gamma**steps of its transition).

    Returns the advantages ``[T, ...]`` (0 on rows that are not closed).
    """
    T = rewards.shape[0]
    lanes = rewards.shape[1:]
    gam = np.broadcast_to(np.asarray(gamma, np.float64), rewards.shape)
    adv = np.zeros(rewards.shape, np.float64)
    rows = np.flatnonzero(decided.reshape(T, -1).any(axis=1))
    if len(rows) and decided[rows].all() and closed[rows].all():
        # Every lane decides on the same rows and every transition is complete (a flat run, or
        # agents that all act every step): the lane's next decision is the next such row, so
        # the deltas are one vectorised expression and the recursion one multiply-add a row.
        val = values[rows]
        nxt = np.empty_like(val)
        nxt[:-1] = val[1:]
        nxt[-1] = 0.0 if last_value is None else last_value
        st = stop[rows]
        nv = np.where(st, np.where(terminated[rows], 0.0, bootstrap[rows]), nxt)
        g = gam[rows]
        delta = rewards[rows] + g * nv - val
        coef = g * lam * ~st
        out = np.empty_like(delta)
        last = np.zeros(lanes)
        for k in range(len(rows) - 1, -1, -1):
            last = delta[k] + coef[k] * last
            out[k] = last
        adv[rows] = out
        return adv
    next_v = np.zeros(lanes) if last_value is None else np.asarray(last_value, np.float64).copy()
    next_a = np.zeros(lanes)
    for t in range(T - 1, -1, -1):
        dec = decided[t]
        if not dec.any():
            continue
        nv = np.where(stop[t], np.where(terminated[t], 0.0, bootstrap[t]), next_v)
        na = np.where(stop[t], 0.0, next_a)
        a_t = np.where(closed[t], rewards[t] + gam[t] * nv - values[t] + gam[t] * lam * na, 0.0)
        adv[t] = a_t
        next_v = np.where(dec, values[t], next_v)
        next_a = np.where(dec, a_t, next_a)
    return adv


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    episode_end: np.ndarray,
    gamma: float | np.ndarray,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) over a dense time-major rollout (every lane decides every step).

    Shapes: every array is ``[T, N]``. ``next_values[t]`` is V(s_{t+1}) for the *true* next
    state: on a truncated step V(final observation); on other steps it is ``values[t+1]``
    (only the last row's and the episode ends' entries are read). ``terminated[t]``: nothing is
    bootstrapped from s_{t+1}; ``episode_end[t]``: the trace stops here either way.

    Returns ``(advantages, returns)``, each ``[T, N]``, with ``returns = advantages + values``.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    ones = np.ones(rewards.shape, bool)
    adv = decision_gae(rewards, values, gamma, lam, ones, ones, np.asarray(episode_end, bool),
                       np.asarray(terminated, bool), np.asarray(next_values, np.float64), next_values[-1])
    return adv.astype(np.float32), (adv + values).astype(np.float32)
