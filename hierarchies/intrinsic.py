"""Intrinsic (command-following) rewards, by name or ``module:function``.

Each is called every env step for each agent of a layer as
``fn(command=..., obs=..., next_obs=..., action=..., info=...) -> float``, where ``command`` is
the command from the layer above as the agent receives it (a one-hot for a discrete command,
the goal vector for a Box command) and ``obs``/``next_obs``/``info`` are the agent's raw env
observation before and after the step and its info dict.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

IntrinsicFn = Callable[..., float]


def corridor_follow(command: np.ndarray, info: dict, **_) -> float:
    from hdppo.envs.builtin.corridor import follow_command

    return follow_command(command, info)


def ant_velocity_tracking(command: np.ndarray, info: dict, **_) -> float:
    """exp(-|v - v_cmd|^2) for a commanded planar velocity against the torso's
    ``info['x_velocity'], info['y_velocity']`` (Gymnasium's Ant puts them there). A wide kernel
    (1 (m/s)^2) so that a body standing still still feels which way is better."""
    v = np.array([info.get("x_velocity", 0.0), info.get("y_velocity", 0.0)])
    target = np.asarray(command, dtype=np.float64)[:2]
    return float(np.exp(-np.sum((v - target) ** 2)))


def ant_heading_frame_direction(command: np.ndarray, next_obs: np.ndarray, info: dict, **_) -> float:
    """Walk the way the command points, the command read in the Ant's heading frame (what
    ``ant_navigate.egocentric`` shows the walking layer): Ant-v5's own reward with "forward"
    turned to the command. A healthy bonus of 1, plus the speed along the command's direction
    (its length is ignored), plus Ant's control cost (``info['reward_ctrl']``, <= 0)."""
    from hdppo.envs.builtin.ant_navigate import QUAT, to_heading_frame, yaw

    c = np.asarray(command, dtype=np.float64)[:2]
    norm = float(np.linalg.norm(c))
    v = np.array([info.get("x_velocity", 0.0), info.get("y_velocity", 0.0)])
    local = to_heading_frame(v, yaw(np.asarray(next_obs)[QUAT]))
    along = float(local @ c) / norm if norm > 1e-6 else 0.0
    return 1.0 + along + float(info.get("reward_ctrl", 0.0))


NAMED: dict[str, IntrinsicFn] = {"corridor_follow": corridor_follow, "ant_velocity_tracking": ant_velocity_tracking,
                                 "ant_heading_frame_direction": ant_heading_frame_direction}


def resolve(name: str) -> IntrinsicFn:
    if name in NAMED:
        return NAMED[name]
    from hdppo.platform.errors import ConfigError

    if ":" not in name:
        raise ConfigError(f"intrinsic_fn {name!r} is not a named reward ({', '.join(NAMED)}) nor 'module:function'.")
    from hdppo.envs.loading import resolve_entry_point

    return resolve_entry_point(name)
