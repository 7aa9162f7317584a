"""A scripted pick for grasp, from the env's own observation (privileged: it reads object 0's
pose): above the object, down until the fingertips are at its centre or can go no lower, close,
raise. ``benchmarks/grasp.py`` runs it beside the learned policies as a reference for what the
objects allow; ``tests/test_grasp.py`` grasps with it."""
from __future__ import annotations

import numpy as np

from .env import PREGRASP_HEIGHT


class ScriptedPick:
    """``act(obs) -> action``; call :meth:`reset` at each episode's start."""

    def __init__(self, step_size: float = 0.02):
        self.step_size = step_size
        self.reset()

    def reset(self) -> None:
        self.closed_for = -1          # steps since the gripper closed; -1 while open
        self.descending = False
        self.last_z: float | None = None

    def act(self, obs: np.ndarray) -> np.ndarray:
        rel = np.asarray(obs[7:10], dtype=np.float64)   # object 0 relative to the ee
        a = np.zeros(5, np.float32)
        if self.closed_for >= 0:
            self.closed_for += 1
            a[4] = 1.0
            a[2] = 1.0 if self.closed_for > 2 else 0.0   # let the fingers close first
            return a
        if not self.descending:
            aim = rel + [0.0, 0.0, PREGRASP_HEIGHT]
            self.descending = bool(np.linalg.norm(aim) < 0.02)
        else:
            aim = rel
        a[:3] = np.clip(aim / self.step_size, -1.0, 1.0)
        a[4] = -1.0
        stalled = self.descending and self.last_z is not None and abs(rel[2] - self.last_z) < 0.003
        self.last_z = float(rel[2]) if self.descending else None
        if self.descending and (np.linalg.norm(rel) < 0.015 or stalled):
            a[:3], a[4], self.closed_for = 0.0, 1.0, 0
        return a
