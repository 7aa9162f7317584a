"""Tiny deterministic envs for tests, importable as ``scripted_envs:...`` entry points."""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class CountdownEnv(gym.Env):
    """Observation = [t]; reward 1 each step; terminates at ``terminate_at`` (if set), else the
    TimeLimit truncates. The final observation is distinguishable from the reset one ([0])."""

    metadata = {"name": "countdown"}

    def __init__(self, terminate_at: int | None = None, bad: str | None = None):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at = terminate_at
        self.bad = bad
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([float(self.t)], np.float32)
        reward = 1.0
        if self.bad == "nan_obs" and self.t == 3:
            obs = np.array([np.nan], np.float32)
        if self.bad == "inf_reward" and self.t == 3:
            reward = float("inf")
        if self.bad == "wrong_shape":
            obs = np.zeros(3, np.float32)
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return obs, reward, terminated, False, {}


def countdown(**kwargs):
    return CountdownEnv(**kwargs)


def not_an_env():
    return object()
