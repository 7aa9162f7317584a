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
        """:meth:`merge` from bare moments, without building an object."""
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


_ONES: dict[int, np.ndarray] = {}


def column_sums(d: np.ndarray) -> np.ndarray:
    """Float64 column sums of ``d [B, D]``. For float32 input one BLAS product (ones @ d): a float64
    reduction over axis 0 casts every value on the way and costs 2-3x as much (192 MAgent2 views
    of 845 values: 200 against 83 us for the two sums of a batch's moments); the product is
    float32, about 1e-7 relative, and callers accumulate it in float64."""
    if d.dtype != np.float32 or d.ndim != 2:
        return np.add.reduce(d, axis=0, dtype=np.float64)
    n = d.shape[0]
    ones = _ONES.get(n)
    if ones is None:  # kept: a sampler sums batches of the same few sizes every step
        if len(_ONES) > 64:
            _ONES.clear()
        ones = _ONES[n] = np.ones(n, np.float32)
    return (ones @ d).astype(np.float64)


class MomentSums:
    """Samples added cheaply, as shifted sums, until they are folded into a :class:`RunningStats`.

    The shift (the first batch's mean) keeps ``sum((x - K)^2) / n - mean^2`` accurate in float64
    even for a feature with a large mean and a small spread. Adding a batch is two reductions and
    two in-place adds, a fraction of a Chan merge; the normalizers add every env step and fold
    now and then (see :func:`stale`)."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.shift: np.ndarray | None = None
        self.sum = np.zeros(shape, np.float64)
        self.sumsq = np.zeros(shape, np.float64)
        self.count = 0

    def add(self, x: np.ndarray) -> None:
        """Add a batch ``[B, *shape]``. The differences stay in the input's dtype (float32
        observations are not copied to float64); the sums accumulate in float64."""
        if self.shift is None:
            self.shift = x.mean(axis=0, dtype=np.float64).astype(x.dtype)
        d = x - self.shift
        self.sum += column_sums(d)
        d *= d
        self.sumsq += column_sums(d)
        self.count += x.shape[0]

    def add_scaled(self, y: np.ndarray, mean: np.ndarray, std: np.ndarray, skip: np.ndarray | None = None) -> None:
        """Add the batch ``x = y * std + mean`` (``y [B, D]`` float32, before any clip) from ``y``'s
        column sums: the normalizer's pass that writes ``y`` then also serves the statistics, where
        :meth:`add` would read ``x`` twice more and write a temporary. With ``c = mean - shift``,
        ``sum(x - shift) = std sum(y) + B c`` and ``sum((x - shift)^2) = std^2 sum(y^2) + 2 std c sum(y) + B c^2``;
        ``y`` is of unit scale, so its float32 sums lose no more than :meth:`add`'s do. ``skip``: rows
        of ``y`` (a few, gathered) that are not samples: their sums are taken off."""
        n = y.shape[0]
        sy = column_sums(y)
        syy = np.einsum("ij,ij->j", y, y).astype(np.float64)  # one read, no temporary
        if skip is not None and len(skip):
            n -= skip.shape[0]
            sy -= column_sums(skip)
            syy -= np.einsum("ij,ij->j", skip, skip).astype(np.float64)
        m64, s64 = mean.astype(np.float64), std.astype(np.float64)
        if self.shift is None:
            self.shift = (m64 + s64 * sy / n).astype(y.dtype)  # the batch's mean, as add() takes it
        c = m64 - self.shift.astype(np.float64)
        self.sum += s64 * sy + n * c
        self.sumsq += s64 * s64 * syy + 2.0 * s64 * c * sy + n * c * c
        self.count += n

    def take(self) -> RunningStats:
        """The moments of everything added since the last take; then empty."""
        out = RunningStats(self.shape)
        if self.count:
            m = self.sum / self.count
            out.mean = self.shift.astype(np.float64) + m  # type: ignore[union-attr]
            out.var = np.maximum(self.sumsq / self.count - m * m, 0.0)
            out.count = float(self.count)
        self.shift, self.count = None, 0
        self.sum = np.zeros(self.shape, np.float64)
        self.sumsq = np.zeros(self.shape, np.float64)
        return out


def stale(pending: int, folded: float) -> bool:
    """Whether ``pending`` samples not yet used could move statistics of ``folded`` samples
    enough to matter: by more than 1/256 of their weight. Early on that is every batch; after a
    million samples, every few thousand, so that the per-step cost of keeping a normalizer
    current does not grow with the run."""
    return pending > 0 and pending * 256 >= folded


# From this many values np.clip's one pass beats maximum-then-minimum's two (192 MAgent2 views
# of 845 values: 20 against 67 us); below it np.clip's slower entry costs more (4 Hopper rows:
# +1.6 us a call).
CLIP_UFUNC_MIN = 4096


class ObservationNormalizer:
    """Normalises with (published pool statistics + this worker's unsent delta), clipped.

    ``observe`` adds samples as :class:`MomentSums`; the mean and std used to normalise are
    recomputed when the samples observed since they were last computed become :func:`stale`.
    The delta handed to the learner is exact: every observed sample, once."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, enabled: bool = True):
        self.enabled = enabled
        self.clip = clip
        self.published = RunningStats(shape)
        self.delta = RunningStats(shape)   # folded part of the unsent statistics
        self._pending = MomentSums(shape)  # the rest, not folded yet
        # Small batches observed but not yet added to _pending. A sampler observes a few rows every
        # env step; adding them one batch at a time costs six numpy calls a step, so they are
        # added together once STASH_VALUES values wait (and whenever the statistics are read).
        # A large batch (192 MAgent2 views) is added at once: its maths outweighs the calls.
        self._stash: list[np.ndarray] = []
        self._stash_values = 0
        self._mean: np.ndarray | None = None
        self._std: np.ndarray | None = None
        self._unused = 0  # samples observed since the mean and std were last computed
        self._counted = 0.0  # samples the mean and std were computed from
        self._base: RunningStats | None = None  # published merged with delta, until either changes

    STASH_VALUES = 4096

    def observe(self, obs: np.ndarray) -> None:
        if self.enabled:
            x = np.asarray(obs).reshape((-1,) + self.delta.shape)
            self._unused += x.shape[0]
            if x.size > self.STASH_VALUES // 8:  # a large batch: no copy, no wait
                self._add_stash()  # keep the order of the samples (the shift is the first batch's mean)
                self._pending.add(x)
                return
            self._stash.append(x.copy())  # a copy: the caller may reuse its array (an env writes resets into it)
            self._stash_values += x.size
            if self._stash_values >= self.STASH_VALUES:
                self._add_stash()

    def _add_stash(self) -> None:
        if self._stash:
            self._pending.add(self._stash[0] if len(self._stash) == 1 else np.concatenate(self._stash))
            self._stash, self._stash_values = [], 0

    def _fold(self) -> None:
        self._add_stash()
        if self._pending.count:
            self.delta.merge(self._pending.take())
            self._base = None

    def _refresh(self) -> None:
        """The mean and std to normalise with: published, delta and pending samples together.
        The pending sums are merged into a copy of their moments, not folded: early in a run this
        happens every few env steps, and a fold and a merged copy cost three times as much."""
        self._add_stash()
        if self._base is None:
            self._base = self.published.merged(self.delta)
        mean, var, n = self._base.mean, self._base.var, self._base.count
        q = self._pending
        if q.count:
            m = q.sum / q.count
            q_mean, q_var = q.shift + m, np.maximum(q.sumsq / q.count - m * m, 0.0)
            total = n + q.count
            if n == 0:
                mean, var = q_mean, q_var
            else:  # RunningStats.merge_moments, written out to keep the base
                d = q_mean - mean
                var = (var * n + q_var * q.count + d * d * (n * q.count / total)) / total
                mean = mean + d * (q.count / total)
            n = total
        # float32, as the observations: float64 statistics would upcast a copy of every batch.
        self._mean, self._std = mean.astype(np.float32), np.sqrt(var + 1e-8).astype(np.float32)
        self._unused, self._counted = 0, n

    @property
    def current(self) -> RunningStats:
        """Published statistics merged with everything observed since."""
        self._fold()
        return self.published.merged(self.delta)

    def __call__(self, obs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``obs`` normalised and clipped, as float32; written into ``out`` (a float32 array of
        its shape, e.g. the rollout buffer's row) when given, which saves the caller a copy."""
        if not self.enabled:
            if out is None:
                return np.asarray(obs, dtype=np.float32)
            np.copyto(out, obs)
            return out
        if self._std is None or stale(self._unused, self._counted):
            self._refresh()
        res = np.subtract(obs, self._mean, out=out)
        res /= self._std  # in place: one temporary at most (the same values as (obs - mean) / std)
        return self._clipped(res)

    def _clipped(self, res: np.ndarray) -> np.ndarray:
        """``res`` clipped to +-clip in place, as float32."""
        if res.size > CLIP_UFUNC_MIN:
            c = np.float32(self.clip)  # a float32 bound: a Python float would make np.clip cast
            return np.clip(res, -c, c, out=res).astype(np.float32, copy=False)
        return np.minimum(np.maximum(res, -self.clip, out=res), self.clip, out=res).astype(np.float32, copy=False)

    def observe_and_normalise(self, obs: np.ndarray, out: np.ndarray | None = None,
                              rows: np.ndarray | None = None) -> np.ndarray:
        """``observe(obs)`` then ``self(obs, out)``: the same statistics and values (up to float32
        rounding in the sums). ``rows`` (bool ``[B]``): observe only those rows, normalise all.
        A wide float32 batch whose statistics need no refresh (most steps after the first few
        thousand samples) is normalised first and its moments taken from the normalised values
        (:meth:`MomentSums.add_scaled`): 5 passes over the batch instead of 7 (192 MAgent2 views
        of 845 values: ~140 against ~210 us)."""
        x = np.asarray(obs)
        d = self.delta.shape
        if (not self.enabled or x.dtype != np.float32 or x.ndim != 2 or x.shape[1:] != d
                or x.size <= self.STASH_VALUES // 8 or self._std is None
                or stale(self._unused + x.shape[0], self._counted)):
            self.observe(obs if rows is None else x[rows])
            return self(obs, out)
        self._add_stash()  # keep the samples' order
        res = np.subtract(x, self._mean, out=out)
        res /= self._std
        self._pending.add_scaled(res, self._mean, self._std, None if rows is None else res[~rows])
        self._unused += x.shape[0] if rows is None else int(np.count_nonzero(rows))
        return self._clipped(res)

    def take_delta(self) -> RunningStats:
        """Hand over the unsent statistics; they are then counted in the published ones."""
        self._fold()
        out = self.delta
        self.published = self.published.merged(out)
        self.delta = RunningStats(out.shape)
        self._base = None
        return out

    def set_published(self, stats: RunningStats) -> None:
        self.published = stats.copy()
        self._base = None
        self._std = None


class RewardScaler:
    """Scales rewards by the std of the discounted return, as in Engstrom et al. 2020
    ("Implementation Matters", arXiv:2005.12729), and starting as Gymnasium's ``NormalizeReward``:
    statistics begin at its prior (mean 0, variance 1, weight 1e-4), are updated with each env
    step's returns before that step's rewards are divided by ``sqrt(var + 1e-8)``, and the result
    is clipped to ``clip`` (CleanRL's ``TransformReward`` after it). One difference, at episode
    ends only: the running return restarts after the step that ends an episode (terminated or
    truncated, as Baselines' ``VecNormalize`` does), where ``NormalizeReward`` zeroes it on that
    step and only on termination.

    One per worker (and layer). ``returns[slot]`` is the running discounted return of one env
    copy, or of one agent lane of a hierarchy layer (lanes flattened).
    """

    PRIOR_COUNT = 1e-4  # Gymnasium's RunningMeanStd(epsilon=1e-4)
    EPS = 1e-8          # NormalizeReward's epsilon, inside the square root

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, enabled: bool = True):
        self.enabled = enabled
        self.gamma = gamma
        self.clip = clip
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self._stats = RunningStats((), count=self.PRIOR_COUNT)
        self.delta = RunningStats(())  # for scope "global": the returns not yet handed over

    @property
    def stats(self) -> RunningStats:
        """Statistics of every return seen, over the prior."""
        return self._stats

    @stats.setter
    def stats(self, value: RunningStats) -> None:
        self._stats = value

    def __call__(self, rewards: np.ndarray, episode_end: np.ndarray) -> np.ndarray:
        """One env step of every slot (a rollout of one row)."""
        r = np.asarray(rewards, np.float64)[None]
        return self.scale_rows(r, self.gamma, np.ones_like(r, bool), np.asarray(episode_end, bool)[None])[0]

    def scale_rows(self, rewards: np.ndarray, gamma: np.ndarray | float, closed: np.ndarray,
                   episode_end: np.ndarray) -> np.ndarray:
        """Scale a whole rollout at once, with the result of scaling it step by step. Every array
        is ``[T, *lanes]``; row order is time order, ``closed`` marks the transitions (entries
        elsewhere are ignored), ``gamma`` is each transition's discount (gamma**steps for an
        upper layer). Row t's rewards are divided by the std of every return up to and including
        row t's: the running statistics of ``NormalizeReward``, computed as cumulative shifted
        sums (exactly the sequence of Chan merges, without a Python merge per row). Returns
        float32 ``[T, *lanes]``, 0 where not closed."""
        closed = np.asarray(closed, bool)
        if not self.enabled:
            return np.where(closed, rewards, 0.0).astype(np.float32)
        T = rewards.shape[0]
        width = int(np.prod(rewards.shape[1:], dtype=np.int64))
        R = np.asarray(rewards, np.float64).reshape(T, width)
        G = np.broadcast_to(np.asarray(gamma, np.float64), rewards.shape).reshape(T, width)
        C = closed.reshape(T, width)
        keep = ~np.asarray(episode_end, bool).reshape(T, width)
        if width > len(self.returns):
            self.returns = np.concatenate([self.returns, np.zeros(width - len(self.returns))])
        rows = np.flatnonzero(C.any(axis=1))
        rets = np.zeros((len(rows), width))
        ret = self.returns[:width].copy()
        if C[rows].all():  # every lane closes on the same rows: two multiply-adds a row
            for k, t in enumerate(rows):
                ret = ret * G[t] + R[t]
                rets[k] = ret
                ret *= keep[t]
        else:
            for k, t in enumerate(rows):
                c = C[t]
                new = ret * G[t] + R[t]
                rets[k] = np.where(c, new, 0.0)
                ret = np.where(c, np.where(keep[t], new, 0.0), ret)
        self.returns[:width] = ret
        std = np.ones(T)
        if len(rows):
            st, Cr = self._stats, C[rows]
            n0, m0, v0 = float(st.count), float(st.mean), float(st.var)
            y = np.where(Cr, rets - m0, 0.0)   # shifted by the old mean: no cancellation in float64
            n = n0 + np.cumsum(Cr.sum(axis=1))
            shift = np.cumsum(y.sum(axis=1)) / n
            var = np.maximum((n0 * v0 + np.cumsum((y * y).sum(axis=1))) / n - shift * shift, 0.0)
            std[rows] = np.sqrt(var + self.EPS)
            self._stats = RunningStats((), np.float64(m0 + shift[-1]), np.float64(var[-1]), float(n[-1]))
            seen = rets[Cr]
            self.delta.merge_moments(*batch_moments(seen))
        scaled = np.clip(R / std[:, None], -self.clip, self.clip)
        return np.where(C, scaled, 0.0).astype(np.float32).reshape(rewards.shape)

    def take_delta(self) -> RunningStats:
        out, self.delta = self.delta, RunningStats(())
        return out

    def set_published(self, stats: RunningStats) -> None:
        """Scope ``global``: adopt the pool's merged return statistics."""
        self.stats = stats.copy()
