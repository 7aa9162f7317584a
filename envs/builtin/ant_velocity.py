"""AntVelocity: MuJoCo's Ant must walk at a commanded planar velocity, the skill the ``walk``
layer of ``configs/ant_navigate.yaml`` needs, as a flat task to pre-train it on.

| | |
|---|---|
| observation | Ant-v5's without contact forces (27) followed by the command (2): Box(29), the walk layer's observation in the hierarchy, in the same order |
| action | Ant-v5's, Box(-1, 1, (8,)) |
| command | a planar velocity drawn uniformly from [-max_speed, max_speed]^2, held ``hold`` steps |
| reward | ``hdppo.hierarchies.intrinsic.ant_heading_speed`` (healthy bonus + speed along the command, up to its speed, - half the speed across it) |
| episode | terminates when the Ant is unhealthy; truncated after ``max_steps`` |
| arguments | ``hold=50``, ``max_speed=1.0``, ``max_steps=1000`` |

Pre-train with ``configs/ant_velocity.yaml``, then start the hierarchy's walk layer from that
run (``schedule: {checkpoint: RUN_DIR}``): the observation layout is the same.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from hdppo.hierarchies.intrinsic import ant_heading_speed


class AntVelocity(gym.Env):
    metadata = {"name": "ant_velocity_v0", "render_modes": []}

    def __init__(self, hold: int = 50, max_speed: float = 1.0, max_steps: int = 1000):
        self.ant = gym.make("Ant-v5", max_episode_steps=None, include_cfrc_ext_in_observation=False).unwrapped
        n = self.ant.observation_space.shape[0]
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (n + 2,), np.float64)
        self.action_space = self.ant.action_space
        self.hold, self.max_speed, self.max_steps = hold, max_speed, max_steps
        self.command = np.zeros(2)

    def _new_command(self) -> None:
        self.command = self.np_random.uniform(-self.max_speed, self.max_speed, 2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        obs, info = self.ant.reset(seed=int(self.np_random.integers(2**31)))
        self.t = 0
        self._new_command()
        return np.concatenate([obs, self.command]), info

    def step(self, action):
        obs, _, unhealthy, _, info = self.ant.step(action)
        reward = ant_heading_speed(self.command, info)
        self.t += 1
        if self.t % self.hold == 0:
            self._new_command()
        return np.concatenate([obs, self.command]), reward, bool(unhealthy), self.t >= self.max_steps, info

    def close(self):
        self.ant.close()


def make(**kwargs) -> AntVelocity:
    return AntVelocity(**kwargs)
