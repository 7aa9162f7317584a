"""The debugging workflow of the seed articles, as pure functions of what workers report:
how far each worker's data drifts from the pool's, whether the workers' gradients agree, and
where in state space each worker samples.

A worker whose observations or actions diverge from the rest (a different env build, a
sensor out of range, a stuck seed) shows up in ``diag/obs_divergence/<worker>``; gradients
that disagree (mean pairwise cosine near 0 or negative) mean the averaged step is mostly
noise: more samples per worker, or fewer workers, help.
"""
from __future__ import annotations

import numpy as np
import torch

from ..policies.normalizers import RunningStats, column_sums


# Rows a worker's divergence moments are estimated from. A rollout of MAgent2 battle_v4 is ~12k
# rows of 845 values: exact moments of it took a quarter of the worker's sampling time, and 4,096
# rows still 6% of it (2026-12-07), while 1,024 random rows estimate each mean to ~3% of a std,
# far below the shifts the divergence is there to flag (a deviant worker is off by whole stds).
DIAG_MAX_ROWS = 1024


def moments(x: np.ndarray, max_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and variance (float64) of samples ``[B, D]``. Shifted by the first
    sample and kept in the input's dtype, accumulated in float64: no float64 copy of the batch
    (a worker computes this on every rollout). With ``max_rows``, of that many rows drawn without
    replacement: random rather than strided, since a stride that divides the number of lanes
    would pick the same lanes (the same agents of one team) every step. The draw has its own
    fixed seed, so the worker's random stream is left alone."""
    x = np.asarray(x).reshape(len(x), -1)
    if max_rows is not None and len(x) > max_rows:
        x = x[np.sort(np.random.default_rng(len(x)).choice(len(x), max_rows, replace=False))]
    if len(x) == 0:
        return np.zeros(x.shape[1]), np.zeros(x.shape[1])
    d = x - x[0]
    m = column_sums(d) / len(x)
    d *= d
    var = np.maximum(column_sums(d) / len(x) - m * m, 0.0)
    return x[0].astype(np.float64) + m, var


def observation_moments(observed: RunningStats | None, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A rollout's observation moments for the divergence: those of the raw observations that the
    worker's normaliser counted over the rollout (``observed``, its delta: exact, and already
    computed), else those of the batch's observations (:func:`moments`, estimated from
    DIAG_MAX_ROWS rows: on MAgent2 battle_v4 that estimate was 5% of a worker's sampling time,
    2026-12-07). Either is fine for the divergence, which is the same for any per-dimension affine
    map applied to every worker alike (normalising with shared statistics is one); raw moments even
    show a deviant worker better, since its own unsent statistics pull its normalised
    observations back towards zero. All workers of a layer take the same branch (it follows the
    layer's ``normalization.observation``)."""
    if observed is not None and observed.count > 0:
        return observed.mean.reshape(-1).astype(np.float64), observed.var.reshape(-1).astype(np.float64)
    return moments(obs, DIAG_MAX_ROWS)


def pool_moments(means: list[np.ndarray], variances: list[np.ndarray], counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the union of the workers' samples (exact, from their moments)."""
    w = np.asarray(counts, np.float64) / float(sum(counts))
    m = np.stack(means)
    mean = (w[:, None] * m).sum(0)
    var = (w[:, None] * (np.stack(variances) + (m - mean) ** 2)).sum(0)
    return mean, var


def gaussian_divergence(m1: np.ndarray, v1: np.ndarray, m2: np.ndarray, v2: np.ndarray,
                        eps: float | np.ndarray = 1e-6) -> float:
    """Symmetric KL between two diagonal Gaussians, averaged over dimensions; ``eps`` (a number
    or one per dimension) is added to both variances.

    0 when a worker's data looks like the pool's; about 0.5·d² for a mean shifted by d pool
    standard deviations.
    """
    v1, v2 = v1 + eps, v2 + eps
    kl12 = 0.5 * (np.log(v2 / v1) + (v1 + (m1 - m2) ** 2) / v2 - 1.0)
    kl21 = 0.5 * (np.log(v1 / v2) + (v2 + (m1 - m2) ** 2) / v1 - 1.0)
    return float(np.mean(0.5 * (kl12 + kl21))) if m1.size else 0.0


DIVERGENCE_FLOOR = 0.25  # of the pooled variance, added to each worker's and the reference's


def divergences(means: list[np.ndarray], variances: list[np.ndarray]) -> list[float]:
    """Each worker's divergence from the pool, the pool being the element-wise median of the
    workers' moments: a robust reference, so one deviant worker cannot drag it towards itself
    and make the healthy ones look deviant too (the pooled union's moments would)."""
    ms, vs = np.stack(means), np.stack(variances)
    ref_m, ref_v = np.median(ms, 0), np.median(vs, 0)
    # A floor for each dimension's variance: a quarter of the workers' data taken together (the
    # mean of their variances plus the variance of their means). A value most workers never saw (a
    # one-hot cell: the median's variance 0) would otherwise weigh (its mean)² / 1e-6 for the worker
    # that saw it once, as much as a real shift of several dimensions; a worker shifted by d of the
    # pool's standard deviations scores about 0.5·d² / 1.25 = 0.4·d².
    floor = DIVERGENCE_FLOOR * (vs.mean(0) + ms.var(0)) + 1e-6
    return [gaussian_divergence(m, v, ref_m, ref_v, floor) for m, v in zip(means, variances)]


def mean_pairwise_cosine(grads: list[list[torch.Tensor]]) -> float:
    """Mean cosine similarity between every pair of workers' (flattened) gradients; nan for one."""
    if len(grads) < 2:
        return float("nan")
    flat = torch.stack([torch.cat([g.reshape(-1).double() for g in gs]) for gs in grads])
    unit = flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-12)
    sim = unit @ unit.T
    n = len(grads)
    return float((sim.sum() - sim.diagonal().sum()) / (n * (n - 1)))


def embed_2d(points: np.ndarray) -> np.ndarray:
    """PCA to two dimensions (the top two principal components of the centred points).

    On one BLAS thread: the driver draws the coverage image beside the learner and its workers,
    and OpenBLAS's threads, spinning on every core through the SVD, held up the learner's update
    that it fell beside (MinAtar, 1 worker on 2 cores: 0.18-0.30 s against 0.11 s, every
    ``diagnostics.every`` updates; 8,315 env steps/s against 8,851 with the cap, 8,869 without
    the image)."""
    from threadpoolctl import threadpool_limits

    x = np.asarray(points, np.float64)
    x = x - x.mean(0)
    if x.shape[1] < 2:
        x = np.concatenate([x, np.zeros((len(x), 2 - x.shape[1]))], 1)
    with threadpool_limits(limits=1, user_api="blas"):
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        return x @ vt[:2].T


def plotting_classes() -> tuple[type, type]:
    """matplotlib's Figure and Agg canvas, what :func:`coverage_image` draws with (importing them
    is most of the first image's cost; the metrics writer calls this early, on its drawing thread)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    return Figure, FigureCanvasAgg


def coverage_image(points: np.ndarray, workers: np.ndarray, title: str = "") -> np.ndarray:
    """A scatter of the states' 2-D embedding coloured by worker, as an RGB array ``[3, H, W]``
    (what SummaryWriter.add_image takes).

    Drawn on its own Figure and Agg canvas, not through pyplot: no global figure state, so the
    metrics writer can draw it on a thread of its own while training goes on (pyplot's import
    alone took ~0.6 s of the training loop, inside a benchmark's timed window), with fixed
    margins and a fixed legend corner (tight_layout and loc='best' were most of a draw)."""
    Figure, FigureCanvasAgg = plotting_classes()
    xy = embed_2d(points)
    fig = Figure(figsize=(4.5, 4), dpi=80)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.12, top=0.93)
    for w in np.unique(workers):
        sel = workers == w
        ax.scatter(xy[sel, 0], xy[sel, 1], s=6, alpha=0.6, label=f"worker {int(w)}")
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title or "state coverage", fontsize=9)
    if len(np.unique(workers)) <= 10:
        ax.legend(fontsize=6, markerscale=2, loc="upper right")
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].transpose(2, 0, 1).copy()
