"""RGB frames of a swarm, drawn with numpy: ``[H, W, 3]`` uint8, two views one above the other.

Top: the field seen from above (x right, y up); bottom: from the side (x right, z up).
Obstacles are grey (cylinders darker), moving ones orange; each flying drone's goal pad is a ring
and the drone a disc, both in its group's colour; a drone is red while in contact and carries a
white dot once it collided. Drones that reached their goal (and their pads) are not drawn. ``SCALE`` pixels per metre; the built-in world
gives even frame sizes (as H.264 wants).
"""
from __future__ import annotations

import numpy as np

from .core import Swarm

SCALE = 16
GAP = 4
_BACKGROUND = (232, 236, 240)
_STATIC = (130, 130, 130)
_CYLINDER = (90, 90, 90)
_MOVING = (230, 140, 40)
_CONTACT = (220, 30, 30)
_GROUPS = ((40, 90, 200), (140, 60, 180), (20, 150, 160), (200, 160, 20))


def _disc(img: np.ndarray, cx: float, cy: float, r: float, colour, ring: float = 0.0) -> None:
    h, w = img.shape[:2]
    x0, x1 = max(int(cx - r), 0), min(int(cx + r) + 2, w)
    y0, y1 = max(int(cy - r), 0), min(int(cy + r) + 2, h)
    if x0 >= x1 or y0 >= y1:
        return
    yy, xx = np.mgrid[y0:y1, x0:x1]
    d2 = (xx + 0.5 - cx) ** 2 + (yy + 0.5 - cy) ** 2
    inside = d2 <= r * r
    if ring:
        inside &= d2 >= (r - ring) ** 2
    img[y0:y1, x0:x1][inside] = colour


def _rect(img: np.ndarray, x0: float, x1: float, y0: float, y1: float, colour) -> None:
    h, w = img.shape[:2]
    a, b = max(int(x0), 0), min(int(x1) + 1, w)
    c, d = max(int(y0), 0), min(int(y1) + 1, h)
    if a < b and c < d:
        img[c:d, a:b] = colour


def frame(swarm: Swarm, copy: int = 0, scale: int = SCALE) -> np.ndarray:
    """Copy ``copy`` as ``[(W + H) * scale + GAP, L * scale, 3]`` uint8 (world L x W x H)."""
    s = swarm
    L, W, H = s.sc.world
    wp, hp_top, hp_side = int(round(L * scale)), int(round(W * scale)), int(round(H * scale))
    img = np.empty((hp_top + GAP + hp_side, wp, 3), np.uint8)
    img[:] = _BACKGROUND
    img[hp_top:hp_top + GAP] = 60
    views = ((1, 0, hp_top), (2, hp_top + GAP, hp_side))    # (vertical axis, top row, height)
    r_d = max(s.ph.drone_radius * scale * 1.4, 3.0)
    for axis, top, height in views:
        flip = lambda v: top + height - v * scale  # noqa: E731,B023 - world axes grow upward, rows downward
        for i in np.flatnonzero(s.active[copy]):   # each flying drone's pad, in its group's colour
            c = s.goal[copy, i]
            _disc(img, c[0] * scale, flip(c[axis]), s.sc.goal_radius * scale, _GROUPS[int(s.group[i]) % 4], ring=2.0)
        for m in range(s.M):
            c, rad = s.oc[copy, m], s.orad[copy, m] * scale
            colour = _MOVING if s.moving[m] else (_CYLINDER if s.is_cyl[m] else _STATIC)
            if s.is_cyl[m] and axis == 2:   # a cylinder from the side: a full-height bar
                _rect(img, c[0] * scale - rad, c[0] * scale + rad, top, top + height - 1, colour)
            else:
                _disc(img, c[0] * scale, flip(c[axis]), rad, colour)
        for i in np.flatnonzero(s.active[copy]):
            p = s.pos[copy, i]
            touching = bool(s.contact[copy, i].any())
            _disc(img, p[0] * scale, flip(p[axis]), r_d, _CONTACT if touching else _GROUPS[int(s.group[i]) % 4])
            if s.collided[copy, i]:
                _disc(img, p[0] * scale, flip(p[axis]), max(r_d * 0.35, 1.0), (255, 255, 255))
    return img
