"""Corridor: agents on a line must reach a goal that only the global state reveals.

The smallest task that needs a hierarchy: each agent sees its own position but not which end
holds the goal; ``state()`` shows the goal. A strategy layer that reads ``state()`` and commands
"left" or "right" every few steps, over a control layer that learns to follow commands, solves
it; a flat policy on the agents' observations reaches the goal half the time at best.

| | |
|---|---|
| agents | ``walker_0`` ... ``walker_{n-1}`` (``num_agents``, default 1) |
| observation (each) | Box(0, 1, (length,)): one-hot of the agent's position |
| action (each) | Discrete(3): 0 left, 1 stay, 2 right |
| state() | Box(0, 1, (2 + n * length,)): one-hot goal side, then each agent's position one-hot |
| reward (each) | +1 on reaching the goal (the agent is then done), -0.01 per step otherwise |
| start | every walker in the middle cell (``length // 2``); the goal at the left or right end, drawn from the seed |
| info (each) | ``moved``: the cell change this step (-1, 0, +1; 0 against a wall) |
| episode | ends when every agent is done, truncated after ``max_steps`` |
| arguments | ``num_agents=1``, ``length=9``, ``max_steps=24``, ``render_mode=None`` (or ``"rgb_array"``) |
| render | ``rgb_array``: one row of ``CELL``-pixel cells per walker, the goal cell green, a walker a blue square (grey once done) |

``follow_command`` (registered as ``corridor_follow``) is the intrinsic reward for the control
layer: 1 for a step in the commanded direction (command 0 = left, 1 = right, read from ``moved``),
else 0.
"""
from __future__ import annotations

import functools

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from ..rewards import register_reward

LEFT, STAY, RIGHT = 0, 1, 2


class CorridorEnv(ParallelEnv):
    metadata = {"name": "corridor_v0", "render_modes": ["rgb_array"], "render_fps": 4}
    CELL = 32  # pixels per cell side: even, so that a frame needs no padding for H.264

    def __init__(self, num_agents: int = 1, length: int = 9, max_steps: int = 24, render_mode: str | None = None):
        if length < 3 or num_agents < 1:
            raise ValueError("corridor needs length >= 3 and num_agents >= 1")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"corridor renders only render_mode='rgb_array', not {render_mode!r}")
        self.render_mode = render_mode
        self.length, self.max_steps = length, max_steps
        self.possible_agents = [f"walker_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        self._state_space = spaces.Box(0.0, 1.0, (2 + num_agents * length,), np.float32)

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (self.length,), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(3)

    @property
    def state_space(self):
        return self._state_space

    def _obs(self, agent):
        o = np.zeros(self.length, np.float32)
        o[self.pos[agent]] = 1.0
        return o

    def state(self):
        s = np.zeros(self._state_space.shape, np.float32)
        s[self.goal_side] = 1.0
        for i, a in enumerate(self.possible_agents):
            if a in self.pos:
                s[2 + i * self.length + self.pos[a]] = 1.0
        return s

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.goal_side = int(self._rng.integers(2))  # 0: left end, 1: right end
        self.goal = 0 if self.goal_side == 0 else self.length - 1
        self.pos = {a: self.length // 2 for a in self.agents}
        self.t = 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs, rew, term, trunc, info = {}, {}, {}, {}, {}
        for a in self.agents:
            move = {LEFT: -1, STAY: 0, RIGHT: 1}[int(actions[a])]
            new = int(np.clip(self.pos[a] + move, 0, self.length - 1))
            info[a] = {"moved": new - self.pos[a]}
            self.pos[a] = new
            reached = new == self.goal
            rew[a] = 1.0 if reached else -0.01
            term[a] = reached
            trunc[a] = self.t >= self.max_steps and not reached
            obs[a] = self._obs(a)
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, info

    def render(self) -> np.ndarray | None:
        """``[num_agents * CELL, length * CELL, 3]`` uint8: a row per walker (None without render_mode)."""
        if self.render_mode is None:
            gymnasium.logger.warn("corridor: render() without render_mode; make it with render_mode='rgb_array'.")
            return None
        c, n = self.CELL, len(self.possible_agents)
        img = np.full((n * c, self.length * c, 3), 240, np.uint8)
        if hasattr(self, "goal"):
            img[:, self.goal * c:(self.goal + 1) * c] = (150, 220, 150)
        img[::c], img[:, ::c] = 170, 170  # cell borders
        inset = c // 5
        for i, a in enumerate(self.possible_agents):
            if a in getattr(self, "pos", {}):
                x = self.pos[a] * c
                colour = (40, 90, 200) if a in self.agents else (130, 130, 130)
                img[i * c + inset:(i + 1) * c - inset, x + inset:x + c - inset] = colour
        return img


def parallel_env(**kwargs) -> CorridorEnv:
    return CorridorEnv(**kwargs)


@register_reward("corridor_follow", vectorized=True, layer="bottom", commands=2, info_keys=("moved",))
def follow_command(command: np.ndarray, info: dict | list[dict], **_) -> float | np.ndarray:
    """1 for a step in the commanded direction (one-hot command: [left, right]), else 0.

    One agent (``command [2]``, ``info`` its dict) -> float, or B agents at once
    (``command [B, 2]``, ``info`` a list of B dicts) -> ``[B]`` float32."""
    command = np.asarray(command)
    if command.ndim == 1:
        want = -1 if int(np.argmax(command)) == 0 else 1
        return 1.0 if info.get("moved", 0) == want else 0.0  # type: ignore[union-attr]
    want = np.where(np.argmax(command, axis=1) == 0, -1, 1)
    moved = np.fromiter((i.get("moved", 0) for i in info), np.int64, len(info))
    return (moved == want).astype(np.float32)
