"""Command-following reward of swarm, registered for ``reward.intrinsic_fn``.

The command it interprets (group layer -> drone layer): ``MultiDiscrete([3, 2])``, received as
one-hots ``[lane (3): low, middle, high | formation (2): tight, loose]``. The *lane* is the
altitude band the group crosses the obstacle field in (``LANE_ALTITUDES``, fractions of the
world's height); the *formation* says how the group keeps together: tight (each drone within
``TIGHT_RADIUS`` of the group's centroid) or loose (no two drones of the group closer than
``LOOSE_SPACING``). Reaching the goal and avoiding collisions is the env reward's part; a layer
mixes both (``reward: {env: 1.0, intrinsic: w, intrinsic_fn: swarm_follow_command}``).
"""
from __future__ import annotations

import numpy as np

from ...rewards import register_reward

LANES = ("low", "middle", "high")
FORMATIONS = ("tight", "loose")
LANE_ALTITUDES = np.array([0.25, 0.5, 0.75])   # z / height of each lane's centre
LANE_HALF_WIDTH = 0.1                          # no penalty within this (fraction of height) of the lane's centre
LANE_WEIGHT = 1.0                              # per fraction of height outside the lane, while in the field
TIGHT_RADIUS = 2.5                             # m
LOOSE_SPACING = 2.0                            # m
FORMATION_WEIGHT = 0.1                         # per m outside the formation
COMMAND_SIZE = len(LANES) + len(FORMATIONS)


def _field(info: list[dict], key: str, default: float = 0.0) -> np.ndarray:
    return np.fromiter((i.get(key, default) for i in info), np.float64, len(info))


@register_reward("swarm_follow_command", vectorized=True,
                 info_keys=("altitude", "in_field", "cohesion", "spacing", "reached"))
def follow_command(command: np.ndarray, info: dict | list[dict], **_) -> float | np.ndarray:
    """Drone layer: ``- LANE_WEIGHT * (altitude's distance beyond LANE_HALF_WIDTH from the lane's
    centre)`` while the drone is inside the obstacle band, ``- FORMATION_WEIGHT *`` (tight: metres
    beyond ``TIGHT_RADIUS`` from the group's centroid; loose: metres short of ``LOOSE_SPACING`` to
    the nearest drone of the group). At most 0: a drone that does what it is told loses nothing.

    One drone (``command [5]``, ``info`` its dict) -> float, or B drones (``command [B, 5]``,
    ``info`` a list of B dicts) -> ``[B]`` float32."""
    command = np.asarray(command, np.float32)
    if command.ndim == 1:
        return float(follow_command(command[None], [info])[0])  # type: ignore[list-item]
    if command.shape[1] != COMMAND_SIZE:
        raise ValueError(f"swarm_follow_command: the command has {command.shape[1]} values; it must be the one-hots "
                         f"of MultiDiscrete([3, 2]) ({COMMAND_SIZE} values: lane, formation)")
    info = list(info)  # type: ignore[arg-type]
    lane = np.argmax(command[:, :3], 1)
    tight = np.argmax(command[:, 3:], 1) == 0
    off_lane = np.maximum(np.abs(_field(info, "altitude", 0.5) - LANE_ALTITUDES[lane]) - LANE_HALF_WIDTH, 0.0)
    in_field = _field(info, "in_field")
    coh = _field(info, "cohesion")
    spacing = _field(info, "spacing", np.inf)
    off_form = np.where(tight, np.maximum(coh - TIGHT_RADIUS, 0.0), np.maximum(LOOSE_SPACING - spacing, 0.0))
    gone = _field(info, "reached") > 0        # landed drones have nothing left to follow
    r = -(LANE_WEIGHT * off_lane * in_field + FORMATION_WEIGHT * off_form)
    return np.where(gone, 0.0, r).astype(np.float32)
