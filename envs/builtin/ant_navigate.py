"""AntNavigate: MuJoCo's Ant (Gymnasium ``Ant-v5``) must walk to a random goal on the floor.

A Gymnasium env (one agent). The Ant's own observation (27 values: joint positions and
velocities, without its x-y position; 105 with ``contact_forces=True``, Ant-v5's default) is
what a low-level controller needs; ``state()`` carries what a navigator needs: the goal
relative to the torso, the torso's planar velocity and heading.

| | |
|---|---|
| observation | Ant-v5's without contact forces, Box(27) (Box(105) with ``contact_forces=True``) |
| action | Ant-v5's, Box(-1, 1, (8,)) |
| state() | Box(9): goal dx, dy (world frame), distance, vx, vy, cos and sin of the heading, goal dx, dy in the torso's heading frame |
| reward | progress toward the goal (previous minus current distance), +10 on arrival |
| episode | terminates on arrival (distance < ``goal_radius``) or when the Ant is unhealthy; truncated after ``max_steps`` |
| info | Ant's (``x_velocity``, ``y_velocity``, ...) and ``is_success`` |
| arguments | ``min_distance=2``, ``max_distance=4``, ``goal_radius=0.5``, ``max_steps=500``, ``goal_in_obs=False``, ``contact_forces=False`` |

``goal_in_obs=True`` appends ``state()`` to the observation (Box(36)), for a flat baseline.

``egocentric`` is an observation view (``module:function``) for a walking layer: the Ant's
observation seen from its own heading (the yaw taken out of the torso's orientation, the planar
velocity turned into the heading frame). Walking in a direction given in that frame is then the
same skill whichever way the Ant faces, so what is learned for one heading serves them all.
Contact forces are left out by default, as Ant-v4 did: the 78 mostly-zero, occasionally huge
values slow PPO's learning of a gait a lot (on Ant-v5 at 3M steps: ~550 with them, ~4200 without).

A return above 8 means the goal was reached: progress alone is at most ``max_distance``.

Command-following rewards for a walking layer commanded with a planar vector (registered names):
``ant_velocity_tracking`` (:func:`velocity_tracking`) and ``ant_heading_frame_direction``
(:func:`heading_frame_direction`).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from ..rewards import register_reward

SUCCESS_BONUS = 10.0
SUCCESS_RETURN = 8.0  # eval returns above this are arrivals (see the table above)
STATE_DIM = 9
# Ant-v5's observation without x-y: z, torso quaternion (w, x, y, z), 8 joint angles, then the
# free joint's linear velocity (world frame), angular velocity (torso frame), 8 joint velocities.
QUAT, LINVEL = slice(1, 5), slice(13, 15)


def yaw(quat: np.ndarray) -> float:
    """Heading (rotation about the vertical) of a (w, x, y, z) quaternion, Z-Y-X convention."""
    w, x, y, z = quat
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def to_heading_frame(v: np.ndarray, heading: float) -> np.ndarray:
    """A planar world-frame vector as seen from a body facing ``heading``."""
    c, s = np.cos(heading), np.sin(heading)
    return np.array([c * v[0] + s * v[1], -s * v[0] + c * v[1]])


def without_yaw(quat: np.ndarray) -> np.ndarray:
    """The torso's tilt alone: the quaternion rotated back about z by its own heading."""
    half = -0.5 * yaw(quat)
    cw, sz = np.cos(half), np.sin(half)  # q_z(-yaw) = (cw, 0, 0, sz)
    w, x, y, z = quat
    return np.array([cw * w - sz * z, cw * x - sz * y, cw * y + sz * x, cw * z + sz * w])


def egocentric(env_obs: dict, members: list, env=None) -> np.ndarray:
    """Observation view for a walking layer (see the module docstring)."""
    obs = np.array(env_obs[members[0]], np.float64)[:27]
    heading = yaw(obs[QUAT])
    obs[LINVEL] = to_heading_frame(obs[LINVEL], heading)
    obs[QUAT] = without_yaw(obs[QUAT])
    return obs.astype(np.float32)


@register_reward("ant_velocity_tracking", info_keys=("x_velocity", "y_velocity"))
def velocity_tracking(command: np.ndarray, info: dict, **_) -> float:
    """exp(-|v - v_cmd|^2) for a commanded planar velocity against the torso's
    ``info['x_velocity'], info['y_velocity']`` (Gymnasium's Ant puts them there). A wide kernel
    (1 (m/s)^2) so that a body standing still still feels which way is better."""
    v = np.array([info.get("x_velocity", 0.0), info.get("y_velocity", 0.0)])
    target = np.asarray(command, dtype=np.float64)[:2]
    return float(np.exp(-np.sum((v - target) ** 2)))


@register_reward("ant_heading_frame_direction", info_keys=("x_velocity", "y_velocity"))
def heading_frame_direction(command: np.ndarray, next_obs: np.ndarray, info: dict, **_) -> float:
    """Walk the way the command points, the command read in the Ant's heading frame (what
    :func:`egocentric` shows the walking layer): Ant-v5's own reward with "forward" turned to
    the command. A healthy bonus of 1, plus the speed along the command's direction (its length
    is ignored), plus Ant's control cost (``info['reward_ctrl']``, <= 0)."""
    c = np.asarray(command, dtype=np.float64)[:2]
    norm = float(np.linalg.norm(c))
    v = np.array([info.get("x_velocity", 0.0), info.get("y_velocity", 0.0)])
    local = to_heading_frame(v, yaw(np.asarray(next_obs)[QUAT]))
    along = float(local @ c) / norm if norm > 1e-6 else 0.0
    return 1.0 + along + float(info.get("reward_ctrl", 0.0))


class AntNavigate(gym.Env):
    metadata = {"name": "ant_navigate_v0", "render_modes": []}

    def __init__(self, min_distance: float = 2.0, max_distance: float = 4.0, goal_radius: float = 0.5,
                 max_steps: int = 500, goal_in_obs: bool = False, contact_forces: bool = False):
        self.ant = gym.make("Ant-v5", max_episode_steps=None, include_cfrc_ext_in_observation=contact_forces).unwrapped
        self.goal_in_obs = goal_in_obs
        inner = self.ant.observation_space
        self.observation_space = inner if not goal_in_obs else gym.spaces.Box(
            -np.inf, np.inf, (inner.shape[0] + STATE_DIM,), np.float64)
        self.action_space = self.ant.action_space
        self.min_distance, self.max_distance = min_distance, max_distance
        self.goal_radius, self.max_steps = goal_radius, max_steps
        self.goal = np.zeros(2)

    def _xy(self) -> np.ndarray:
        return self.ant.data.qpos[:2].copy()

    def state(self) -> np.ndarray:
        d = self.goal - self._xy()
        heading = yaw(self.ant.data.qpos[3:7])
        v = self.ant.data.qvel[:2]
        local = to_heading_frame(d, heading)
        return np.array([d[0], d[1], np.linalg.norm(d), v[0], v[1], np.cos(heading), np.sin(heading),
                         local[0], local[1]], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs, info = self.ant.reset(seed=int(self.np_random.integers(2**31)))
        angle = self.np_random.uniform(0, 2 * np.pi)
        dist = self.np_random.uniform(self.min_distance, self.max_distance)
        self.goal = self._xy() + dist * np.array([np.cos(angle), np.sin(angle)])
        self.prev = float(np.linalg.norm(self.goal - self._xy()))
        self.t = 0
        return self._obs(obs), info

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, self.state()]) if self.goal_in_obs else obs

    def step(self, action):
        obs, _, unhealthy, _, info = self.ant.step(action)
        self.t += 1
        dist = float(np.linalg.norm(self.goal - self._xy()))
        reward = self.prev - dist
        self.prev = dist
        arrived = dist < self.goal_radius
        if arrived:
            reward += SUCCESS_BONUS
        info = {**info, "is_success": arrived}
        return self._obs(obs), float(reward), bool(arrived or unhealthy), self.t >= self.max_steps and not arrived, info

    def close(self):
        self.ant.close()


def make(**kwargs) -> AntNavigate:
    return AntNavigate(**kwargs)
