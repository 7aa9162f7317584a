"""Scripts for grasp, from the env's own observation (privileged: they read object 0's pose).

- :class:`ScriptedPick`: above the object, down until the fingertips are at its centre or can go
  no lower, close, raise. ``benchmarks/grasp.py`` runs it beside the learned policies as a
  reference for what the objects allow; ``tests/test_grasp.py`` grasps with it.
- :func:`phase_teacher`: the phase a pick is in (reach, grasp, lift), a ``teacher.policy`` that
  kickstarts the phase layer of ``configs/grasp_hierarchy.yaml``, so that the effector is told
  to lift while it holds something from the start. Without it the trained effector never raised
  what it held (100% grasps, 0% lifts at 400k env steps).
"""
from __future__ import annotations

import numpy as np

from .env import EE_DIM, GRASP_MAX_OPENING, PREGRASP_HEIGHT

# Where object 0's values sit in the observation (see Grasp._observe): the end-effector's part,
# then per object: position relative to the ee (3), orientation (4), half extents (3), height,
# left and right finger contact.
_OPENING, _CLOSED = 5, 6
_REL = slice(EE_DIM, EE_DIM + 3)
_LEFT, _RIGHT = EE_DIM + 11, EE_DIM + 12
ABOVE_TOLERANCE = 0.02   # m: phase_of's default tolerance (horizontally, and above the pre-grasp point)


def phase_of(obs: np.ndarray, tolerance: float = ABOVE_TOLERANCE) -> int:
    """0 reach, 1 grasp, 2 lift (:data:`.env.PHASES`) for object 0, from one observation: lift
    once it is held (both fingers touch it, the gripper closed and shut past its grasp limit,
    the env's own test), grasp once the ee is over it (within ``tolerance`` horizontally) no
    higher than ``tolerance`` above the pre-grasp point, else reach."""
    o = np.asarray(obs, dtype=np.float64).ravel()
    held = o[_LEFT] > 0 and o[_RIGHT] > 0 and o[_CLOSED] > 0.5 and o[_OPENING] < GRASP_MAX_OPENING
    if held:
        return 2
    rel = o[_REL]
    over = np.linalg.norm(rel[:2]) < tolerance and -rel[2] < PREGRASP_HEIGHT + tolerance
    return 1 if over else 0


def phase_teacher(raw_obs: dict, members: list[str], env=None, tolerance: float = ABOVE_TOLERANCE) -> int:
    """``teacher.policy`` for the phase layer: :func:`phase_of` the lane's agent's observation
    (``teacher.kwargs.tolerance`` widens or narrows the test of being over the object)."""
    return phase_of(raw_obs[members[0]], tolerance)


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
        rel = np.asarray(obs[_REL], dtype=np.float64)   # object 0 relative to the ee
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
