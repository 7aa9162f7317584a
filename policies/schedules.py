"""Hyperparameter schedules as pure functions of training progress in [0, 1]."""
from __future__ import annotations


def linear(start: float, end: float, progress: float) -> float:
    """Linear interpolation from ``start`` (progress 0) to ``end`` (progress >= 1)."""
    p = min(max(progress, 0.0), 1.0)
    return start + (end - start) * p
