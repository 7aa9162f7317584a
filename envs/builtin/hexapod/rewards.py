"""The hexapod's command-following rewards and observation views for a layered controller.

A velocity command ``(vx, vy, yaw_rate)`` (heading frame) goes from a locomotion layer to the
control layer; a waypoint ``(dx, dy)`` (metres, heading frame) goes from a route layer to the
locomotion layer. Both rewards read the env's per-step ``info`` (an upper layer receives its
member agents' infos by agent name; a Gymnasium env has one, ``agent_0``).
"""
from __future__ import annotations

import numpy as np

from ...rewards import register_reward
from .env import ANG_VEL, CONTACTS, COMMAND_HIGH, FALL_PENALTY, GRAVITY, LIN_VEL, SCAN, tracking

WAYPOINT_HORIZON_S = 2.0   # a waypoint is to be reached in about this long (the route layer's period)
MAX_SPEED = float(COMMAND_HIGH[0])  # the joint mode's fastest command; an env reports its own as info["max_speed"]


def _one(info: dict) -> dict:
    """The env's info from either a bottom layer's (the info itself) or an upper layer's (by agent)."""
    return info if "body_velocity" in info else next(iter(info.values()), {})


@register_reward("hexapod_velocity_tracking", info_keys=("body_velocity", "yaw_rate", "stability_penalty", "fell"))
def velocity_tracking(command: np.ndarray, info: dict, **_) -> float:
    """legged_gym's velocity tracking for the commanded ``(vx, vy, yaw_rate)``: exp-kernel terms
    for planar velocity (1) and yaw rate (0.5), plus the env's stability costs, minus 5 on a fall.
    The same as the env's own reward under ``task='velocity'``, with the command from above."""
    i = _one(info)
    if not i:
        return 0.0
    c = np.asarray(command, np.float64)[:3]
    r = tracking(c, np.asarray(i["body_velocity"]), float(i["yaw_rate"])) + float(i["stability_penalty"])
    return r - (FALL_PENALTY if i["fell"] else 0.0)


def waypoint_velocity(waypoint: np.ndarray, max_speed: float = MAX_SPEED) -> np.ndarray:
    """The planar velocity that reaches ``waypoint`` (heading frame) in WAYPOINT_HORIZON_S, capped at ``max_speed``."""
    w = np.asarray(waypoint, np.float64)[:2]
    n = float(np.linalg.norm(w))
    if n < 1e-6:
        return np.zeros(2)
    return w / n * min(n / WAYPOINT_HORIZON_S, max_speed)


@register_reward("hexapod_waypoint_following", info_keys=("body_velocity", "fell"))
def waypoint_following(command: np.ndarray, info: dict, **_) -> float:
    """Walk toward the commanded waypoint ``(dx, dy)`` (heading frame, read in the current
    heading: the route layer re-plans every WAYPOINT_HORIZON_S): exp(-|v - v_w|^2 / 0.02) with
    v_w from :func:`waypoint_velocity` (capped at the env's fastest command), minus 5 on a fall."""
    i = _one(info)
    if not i:
        return 0.0
    err = np.asarray(i["body_velocity"]) - waypoint_velocity(command, float(i.get("max_speed", MAX_SPEED)))
    return float(np.exp(-float(err @ err) / 0.02)) - (FALL_PENALTY if i["fell"] else 0.0)


def locomotion_view(env_obs: dict, members: list, env=None) -> np.ndarray:
    """Observation view for a locomotion layer: gravity in the body frame, body linear and
    angular velocity, foot contacts and the local height scan (40 values), no joints."""
    obs = np.asarray(env_obs[members[0]], np.float32)
    return np.concatenate([obs[GRAVITY], obs[LIN_VEL], obs[ANG_VEL], obs[CONTACTS], obs[SCAN]])
