"""Latency: an env whose step waits, as a robot, a remote simulator or a game server does.

| | |
|---|---|
| observation | Box(-1, 1, (4,)) |
| action | Discrete(2) |
| reward | 1 when the action matches the sign of the first observation, else 0 |
| episode | truncated after ``max_steps`` (default 100) |
| arguments | ``step_ms=20`` (the wait per step), ``max_steps=100`` |

Stepping costs almost no CPU, so throughput is bound by the wait: the case where adding
workers beyond the core count still pays (``benchmarks/scaling.py``).

``step_ms`` may be a list: rollout worker ``i`` then waits ``step_ms[i % len(step_ms)]`` per
step (read from ``HDPPO_WORKER_INDEX``), a pool whose workers run at different speeds, as
machines of different generations or simulators under different load do
(``benchmarks/dynamic_batching.py``).
"""
from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np

from ..loading import WORKER_INDEX_VAR


class LatencyEnv(gym.Env):
    metadata = {"name": "latency_v0", "render_modes": []}

    def __init__(self, step_ms: float | list[float] = 20.0, max_steps: int = 100):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        if isinstance(step_ms, (list, tuple)):
            step_ms = step_ms[int(os.environ.get(WORKER_INDEX_VAR, 0)) % len(step_ms)]
        self.step_s, self.max_steps = float(step_ms) / 1000.0, max_steps

    def _obs(self) -> np.ndarray:
        self.obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self.obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        time.sleep(self.step_s)
        reward = float(int(action) == int(self.obs[0] > 0))
        self.t += 1
        return self._obs(), reward, False, self.t >= self.max_steps, {}


def make(**kwargs) -> LatencyEnv:
    return LatencyEnv(**kwargs)
