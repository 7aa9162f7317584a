"""Terrain for the hexapod: heightfields generated per episode, harder with ``difficulty``.

Each generator returns elevations in metres on a square grid (``[cells, cells]``, row = y,
column = x, as MuJoCo's ``hfield_data`` is laid out) around a flat spawn platform at the
centre, in the spirit of legged_gym's terrain curriculum (Rudin et al. 2021):

| kind | what | at difficulty 0 | at difficulty 1 |
|---|---|---|---|
| ``flat`` | a plane | 0 | 0 |
| ``gravel`` | uniform random bumps on a 0.1 m grid, lightly smoothed | +-1 cm | +-5 cm |
| ``slopes`` | a pyramid (up or down) from the platform | slope 0.05 | slope 0.35 (19 deg) |
| ``steps`` | stairs (up or down) of 0.3 m treads around the platform | 1 cm risers | 7 cm risers |
| ``mixed`` | one of the four above, drawn per episode | | |
"""
from __future__ import annotations

from typing import Callable

import numpy as np

PLATFORM = 0.5   # half-width of the flat square the robot spawns on (m)


def _grid(cells: int, half: float) -> tuple[np.ndarray, np.ndarray]:
    axis = np.linspace(-half, half, cells)
    return np.meshgrid(axis, axis)  # x varies along columns, y along rows


def _ring(cells: int, half: float) -> np.ndarray:
    """Chebyshev distance from the platform's edge (0 on the platform)."""
    x, y = _grid(cells, half)
    return np.maximum(np.maximum(np.abs(x), np.abs(y)) - PLATFORM, 0.0)


def flat(rng: np.random.Generator, difficulty: float, cells: int, half: float) -> np.ndarray:
    return np.zeros((cells, cells))


def gravel(rng: np.random.Generator, difficulty: float, cells: int, half: float) -> np.ndarray:
    amp = 0.01 + 0.04 * difficulty
    h = rng.uniform(-amp, amp, (cells, cells))
    h = 0.5 * h + 0.125 * (np.roll(h, 1, 0) + np.roll(h, -1, 0) + np.roll(h, 1, 1) + np.roll(h, -1, 1))
    h *= amp / max(np.abs(h).max(), 1e-9)
    h[_ring(cells, half) == 0.0] = 0.0
    return h + amp   # keep elevations >= 0 (MuJoCo's heightfield starts at 0)


def slopes(rng: np.random.Generator, difficulty: float, cells: int, half: float) -> np.ndarray:
    slope = 0.05 + 0.30 * difficulty
    h = slope * _ring(cells, half)
    h = np.minimum(h, 0.8)
    if rng.random() < 0.5:   # a pit instead of a hill
        h = h.max() - h
    return h + rng.uniform(0, 0.004, (cells, cells))


def steps(rng: np.random.Generator, difficulty: float, cells: int, half: float) -> np.ndarray:
    riser = 0.01 + 0.06 * difficulty
    h = riser * np.ceil(_ring(cells, half) / 0.3)
    h = np.minimum(h, 0.8)
    if rng.random() < 0.5:
        h = h.max() - h
    return h


GENERATORS: dict[str, Callable[..., np.ndarray]] = {"flat": flat, "gravel": gravel, "slopes": slopes, "steps": steps}
KINDS = tuple(GENERATORS) + ("mixed",)


def generate(kind: str, rng: np.random.Generator, difficulty: float, cells: int, half: float) -> tuple[str, np.ndarray]:
    """(the kind drawn, elevations ``[cells, cells]`` in metres, all >= 0)."""
    if kind == "mixed":
        kind = str(rng.choice(list(GENERATORS)))
    return kind, GENERATORS[kind](rng, float(np.clip(difficulty, 0.0, 1.0)), cells, half)


class HeightMap:
    """Elevations with bilinear lookup at world (x, y) points."""

    def __init__(self, heights: np.ndarray, half: float):
        self.h, self.half = heights, half
        self.cells = heights.shape[0]
        self.step = 2 * half / (self.cells - 1)

    def __call__(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        u = np.clip((np.asarray(x) + self.half) / self.step, 0, self.cells - 1.000001)
        v = np.clip((np.asarray(y) + self.half) / self.step, 0, self.cells - 1.000001)
        c, r = u.astype(int), v.astype(int)
        fu, fv = u - c, v - r
        h = self.h
        return ((1 - fv) * ((1 - fu) * h[r, c] + fu * h[r, c + 1]) + fv * ((1 - fu) * h[r + 1, c] + fu * h[r + 1, c + 1]))
