"""Running statistics for observation and reward normalization.

Workers never share one mutable normalizer. Each keeps the pool's statistics as last published
plus a *delta*: the statistics of the samples it has seen since. Deltas travel with batches;
the learner merges them (Chan et al.'s parallel update, exact for mean and variance) and
publishes the result with the next weights. Reward normalization is per worker by default:
its return statistics stay on the worker and are never merged (``scope: worker``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RunningStats:
    """Mean and variance of a stream of vectors of shape ``shape``; ``count`` may be fractional."""

    shape: tuple[int, ...] = ()
    mean: np.ndarray = field(default=None)  # type: ignore[assignment]
    var: np.ndarray = field(default=None)  # type: ignore[assignment]
    count: float = 0.0

    def __post_init__(self) -> None:
        if self.mean is None:
            self.mean = np.zeros(self.shape, dtype=np.float64)
        if self.var is None:
            self.var = np.ones(self.shape, dtype=np.float64)

    def update(self, x: np.ndarray) -> None:
        """Add a batch ``[B, *shape]``."""
        x = np.asarray(x, dtype=np.float64).reshape((-1,) + self.shape)
        if x.shape[0] == 0:
            return
        self.merge_moments(*batch_moments(x))

    def merge(self, other: "RunningStats") -> None:
        """Combine with another stream's statistics (Chan, Golub, LeVeque 1979)."""
        self.merge_moments(other.mean, other.var, other.count)

    def merge_moments(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """:meth:`merge` from bare moments: called every env step, so no object is built."""
        if count == 0:
            return
        if self.count == 0:
            self.mean, self.var, self.count = np.array(mean, np.float64), np.array(var, np.float64), count
            return
        total = self.count + count
        delta = mean - self.mean
        self.var = (self.var * self.count + var * count + delta * delta * (self.count * count / total)) / total
        self.mean = self.mean + delta * (count / total)
        self.count = total

    def merged(self, other: "RunningStats") -> "RunningStats":
        out = self.copy()
        out.merge(other)
        return out

    def copy(self) -> "RunningStats":
        return RunningStats(self.shape, self.mean.copy(), self.var.copy(), self.count)

    def std(self, eps: float = 1e-8) -> np.ndarray:
        return np.sqrt(self.var + eps)

    def to_state(self) -> dict:
        """Plain lists and floats: safe for ``torch.load(weights_only=True)`` and for JSON."""
        return {"shape": list(self.shape), "mean": self.mean.tolist(), "var": self.var.tolist(), "count": float(self.count)}

    @classmethod
    def from_state(cls, state: dict) -> "RunningStats":
        shape = tuple(state["shape"])
        return cls(shape, np.asarray(state["mean"], np.float64).reshape(shape),
                   np.asarray(state["var"], np.float64).reshape(shape), float(state["count"]))


def batch_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, variance and count of a float64 batch ``[B, *shape]`` (one row: itself, 0, 1)."""
    if x.shape[0] == 1:
        return x[0], np.zeros_like(x[0]), 1.0
    mean = x.mean(axis=0)
    return mean, ((x - mean) ** 2).mean(axis=0), float(x.shape[0])


class ObservationNormalizer:
    """Normalises with (published pool statistics + this worker's unsent delta), clipped."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, enabled: bool = True):
        self.enabled = enabled
        self.clip = clip
        self.published = RunningStats(shape)
        self.delta = RunningStats(shape)
        self.current = RunningStats(shape)  # published merged with delta, kept up to date
        self._std: np.ndarray | None = None

    def observe(self, obs: np.ndarray) -> None:
        if self.enabled:
            moments = batch_moments(np.asarray(obs, dtype=np.float64).reshape((-1,) + self.delta.shape))
            self.delta.merge_moments(*moments)
            self.current.merge_moments(*moments)
            self._std = None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if not self.enabled:
            return np.asarray(obs, dtype=np.float32)
        if self._std is None:
            self._std = self.current.std()
        out = (obs - self.current.mean) / self._std
        return np.clip(out, -self.clip, self.clip, out=out).astype(np.float32)

    def take_delta(self) -> RunningStats:
        """Hand over the unsent statistics; they are then counted in the published ones."""
        out = self.delta
        self.published = self.current.copy()
        self.delta = RunningStats(out.shape)
        return out

    def set_published(self, stats: RunningStats) -> None:
        self.published = stats.copy()
        self.current = self.published.merged(self.delta)
        self._std = None


class RewardScaler:
    """Scales rewards by the std of the discounted return, as in Engstrom et al. 2020
    ("Implementation Matters", arXiv:2005.12729) and Gymnasium's NormalizeReward.

    One per worker (and layer). ``returns[slot]`` is the running discounted return of one env
    copy, or of one agent lane of a hierarchy layer; slots are allocated as they appear.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, enabled: bool = True):
        self.enabled = enabled
        self.gamma = gamma
        self.clip = clip
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.stats = RunningStats(())
        self.delta = RunningStats(())  # for scope "global": the part not yet merged

    def __call__(self, rewards: np.ndarray, episode_end: np.ndarray) -> np.ndarray:
        return self.scale(np.arange(len(rewards)), rewards, episode_end)

    def scale(self, slots: np.ndarray, rewards: np.ndarray, episode_end: np.ndarray,
              gamma: np.ndarray | float | None = None) -> np.ndarray:
        """Scale ``rewards`` of ``slots``; ``gamma`` per reward (an upper layer's gamma**steps)."""
        if not self.enabled:
            return np.asarray(rewards, dtype=np.float32)
        if len(slots) and slots.max() >= len(self.returns):
            self.returns = np.concatenate([self.returns, np.zeros(slots.max() + 1 - len(self.returns))])
        g = self.gamma if gamma is None else gamma
        self.returns[slots] = self.returns[slots] * g + rewards
        moments = batch_moments(self.returns[slots])
        self.stats.merge_moments(*moments)
        self.delta.merge_moments(*moments)
        self.returns[slots[np.asarray(episode_end, bool)]] = 0.0
        scaled = np.asarray(rewards) / self.stats.std()
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def take_delta(self) -> RunningStats:
        out, self.delta = self.delta, RunningStats(())
        return out

    def set_published(self, stats: RunningStats) -> None:
        """Scope ``global``: adopt the pool's merged return statistics."""
        self.stats = stats.copy()
