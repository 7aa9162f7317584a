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


def ant_heading_speed(command: np.ndarray, info: dict, **_) -> float:
    """Walk along the commanded planar velocity, shaped like Ant's own reward: a healthy bonus
    of 1, plus the speed along the command's direction up to the commanded speed, minus half the
    speed across it. Linear in the velocity (as Ant's forward reward is), so a body standing
    still is pulled the right way as strongly as one that already walks, where the Gaussian
    kernel of ``ant_velocity_tracking`` flattens out. A command of (near) zero asks to stand."""
    v = np.array([info.get("x_velocity", 0.0), info.get("y_velocity", 0.0)])
    c = np.asarray(command, dtype=np.float64)[:2]
    speed = float(np.linalg.norm(c))
    if speed < 1e-3:
        return float(1.0 - 0.5 * np.linalg.norm(v))
    along = float(v @ c) / speed
    across = float(np.linalg.norm(v - along * c / speed))
    return 1.0 + min(along, speed) - 0.5 * across


NAMED: dict[str, IntrinsicFn] = {"corridor_follow": corridor_follow, "ant_velocity_tracking": ant_velocity_tracking,
                                 "ant_heading_speed": ant_heading_speed}


def resolve(name: str) -> IntrinsicFn:
    if name in NAMED:
        return NAMED[name]
    from hdppo.platform.errors import ConfigError

    if ":" not in name:
        raise ConfigError(f"intrinsic_fn {name!r} is not a named reward ({', '.join(NAMED)}) nor 'module:function'.")
    from hdppo.envs.loading import resolve_entry_point

    return resolve_entry_point(name)
