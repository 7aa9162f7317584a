"""RGB frames of a battle, drawn with numpy: ``[H, W, 3]`` uint8, ``SCALE`` pixels per map unit.

Obstacles are grey discs; units are discs in their team's colour (red, blue), darker for melee,
lighter for ranged, with a white cross for healers; a bar above each unit shows its hp. Units
that are gone are not drawn. Map sizes of the built-in scenarios give even frame sizes (as
H.264 wants).
"""
from __future__ import annotations

import numpy as np

from .core import Battle
from .scenarios import HEALER, MELEE, UNIT_RADIUS

SCALE = 16
_BACKGROUND = (226, 221, 200)
_OBSTACLE = (120, 120, 120)
_TEAM = {0: {MELEE: (170, 30, 30), 1: (235, 90, 80), HEALER: (215, 60, 60)},
         1: {MELEE: (30, 50, 160), 1: (90, 130, 235), HEALER: (60, 90, 205)}}


def _disc(img: np.ndarray, cx: float, cy: float, r: float, colour) -> None:
    h, w = img.shape[:2]
    x0, x1 = max(int(cx - r), 0), min(int(cx + r) + 2, w)
    y0, y1 = max(int(cy - r), 0), min(int(cy + r) + 2, h)
    if x0 >= x1 or y0 >= y1:
        return
    yy, xx = np.mgrid[y0:y1, x0:x1]
    inside = (xx + 0.5 - cx) ** 2 + (yy + 0.5 - cy) ** 2 <= r * r
    img[y0:y1, x0:x1][inside] = colour


def frame(battle: Battle, copy: int = 0, scale: int = SCALE) -> np.ndarray:
    """The battle in copy ``copy`` as ``[height * scale, width * scale, 3]`` uint8 (y up)."""
    b = battle
    h, w = int(round(b.height * scale)), int(round(b.width * scale))
    img = np.empty((h, w, 3), np.uint8)
    img[:] = _BACKGROUND
    flip = lambda y: h - y * scale  # noqa: E731 - map y grows upward, rows downward
    for k in range(b.n_obstacles):
        _disc(img, b.ox[copy, k] * scale, flip(b.oy[copy, k]), b.orad[copy, k] * scale, _OBSTACLE)
    r = max(UNIT_RADIUS * scale * 1.3, 3.0)
    for u in np.flatnonzero(b.alive[copy]):
        cx, cy = b.x[copy, u] * scale, flip(b.y[copy, u])
        _disc(img, cx, cy, r, _TEAM[int(b.team[u])][int(b.utype[u])])
        if b.utype[u] == HEALER:
            arm, t = int(r * 0.7), max(int(r * 0.2), 1)
            ix, iy = int(cx), int(cy)
            img[max(iy - t, 0):iy + t + 1, max(ix - arm, 0):ix + arm + 1] = 255
            img[max(iy - arm, 0):iy + arm + 1, max(ix - t, 0):ix + t + 1] = 255
        # hp bar
        bw, top = int(2 * r), int(cy - r - 5)
        left = int(cx - r)
        if 0 <= top < h - 2:
            x0, x1 = max(left, 0), min(left + bw, w)
            img[top:top + 3, x0:x1] = (40, 40, 40)
            full = left + int(round(bw * b.hp[copy, u] / b.hp_max[u]))
            img[top:top + 3, x0:max(min(full, w), x0)] = (60, 200, 60)
    return img
