"""Rooms: agents in a grid of rooms must reach a goal room that only the global state reveals.

The smallest task here that needs three layers. What each layer needs is split three ways:

- ``state()`` shows the goal room and which room each agent is in, nothing finer: a
  commander's map. A strategy layer that reads it can pick the room to go to next, never the
  way there;
- each agent's own observation shows where it stands in its room, where its room's doorways
  are (their offsets are drawn anew each episode) and its heading, but not the goal;
- an agent's actions move it in its own frame (forward, right, back, left), which its heading
  turns into a world direction (drawn anew each episode, so nothing can be memorised).

The hierarchy that solves it (``configs/rooms_three_layers.yaml``): "strategy" reads
``state()`` and every 8 steps commands a room; "navigate" sees its agents' observations plus
that command, commands a world direction (N/E/S/W) every step and is rewarded for progress
toward the commanded room (``rooms_reach_room``); "control" sees its own observation plus the
direction and is rewarded for moving that way in the world (``rooms_follow_direction``),
which means turning the command through its heading.

Why two layers do not: strategy directly over control (strategy commanding the directions,
at any period) has to steer an agent through a doorway it cannot see, from a room-level map
whose view does not change while the agent crosses the room. Within a room its deterministic
policy is one fixed direction, so the agent walks straight to a wall and through a door only
where its row or column happens to line up with it. The control layer, which does see the
doorway, is a direction follower that knows no goal. Only the middle layer has the local view
and the room to reach at the same time. (The information could be moved, of course: a
strategy layer given the agents' observations besides the state, or a control layer that
takes rooms as commands and learns the whole way there from the goal reward, are other
decompositions, not measured here; ``benchmarks/results/three_layers.md`` has the three-layer
and the strategy-over-control runs.)

| | |
|---|---|
| agents | ``agent_0`` ... ``agent_{n-1}`` (``num_agents``, default 1); all start in one room |
| observation (each) | Box(0, 1, (R + 2S + 4(S+1) + 4,)): one-hot room; one-hot row and column in the room; for each side N, E, S, W of the room, one-hot doorway offset (the last entry: no doorway); one-hot heading |
| action (each) | Discrete(4): 0 forward, 1 right, 2 back, 3 left (of the agent's heading) |
| state() | Box(0, 1, (R * (1 + n),)): one-hot goal room, then each agent's room one-hot (zeros once it is done) |
| reward (each) | +1 on entering the goal room (the agent is then done), -0.01 per step otherwise |
| info (each) | ``world_move``: the world direction it tried (0 N, 1 E, 2 S, 3 W); ``progress``: ``[R]`` shortest-path distance to each room before the step minus after |
| episode | ends when every agent is done, truncated after ``max_steps`` |
| arguments | ``num_agents=1``, ``room_rows=2``, ``room_cols=2``, ``room_size=4`` (S), ``max_steps=32``, ``random_heading=True`` |

R = ``room_rows * room_cols`` rooms of S x S cells, numbered row by row. Each wall between two
neighbouring rooms has one doorway cell. The goal room differs from the start room.

Rewards registered here (:mod:`hdppo.envs.rewards`):

- ``rooms_follow_direction`` (bottom layer): 1 when the agent tried to move in the commanded
  world direction (one-hot N/E/S/W), else 0;
- ``rooms_reach_room`` (a layer above): progress toward the commanded room (one-hot of R),
  summed over the lane's agents: +1 for each step that shortens the way there, -1 for each
  step that lengthens it.
"""
from __future__ import annotations

import functools
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from ..rewards import register_reward

N, E, S, W = 0, 1, 2, 3
_DELTA = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], np.int64)  # row, column per world direction


class RoomsEnv(ParallelEnv):
    metadata = {"name": "rooms_v0", "render_modes": []}

    def __init__(self, num_agents: int = 1, room_rows: int = 2, room_cols: int = 2, room_size: int = 4,
                 max_steps: int = 32, random_heading: bool = True):
        if num_agents < 1 or room_size < 2 or room_rows * room_cols < 2 or min(room_rows, room_cols) < 1:
            raise ValueError("rooms needs num_agents >= 1, room_size >= 2 and at least two rooms")
        self.rr, self.rc, self.size, self.max_steps = room_rows, room_cols, room_size, max_steps
        self.random_heading = random_heading
        self.num_rooms = room_rows * room_cols
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents: list[str] = []
        self._rng = np.random.default_rng()
        sz = room_size
        self._obs_dim = self.num_rooms + 2 * sz + 4 * (sz + 1) + 4
        self._state_space = spaces.Box(0.0, 1.0, (self.num_rooms * (1 + num_agents),), np.float32)

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return spaces.Box(0.0, 1.0, (self._obs_dim,), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(4)

    @property
    def state_space(self):
        return self._state_space

    # -- geometry: per-episode tables over the cells (index row * columns + column) --------------
    def room_of(self, pos: np.ndarray) -> np.ndarray:
        """Room index of cells ``[..., 2]`` (row, column)."""
        return (pos[..., 0] // self.size) * self.rc + pos[..., 1] // self.size

    def _doorways(self) -> np.ndarray:
        """``[R, 4]``: doorway offset on each side N, E, S, W of each room (-1: no doorway)."""
        out = np.full((self.rr, self.rc, 4), -1, np.int64)
        out[1:, :, N], out[:-1, :, S] = self.door_h, self.door_h
        out[:, :-1, E], out[:, 1:, W] = self.door_v, self.door_v
        return out.reshape(self.num_rooms, 4)

    def _tables(self) -> None:
        """The episode's moves ``[cells, 4]``, distances ``[R, cells]`` and observations ``[cells, D - 4]``."""
        sz, H, Wd, R = self.size, self.rr * self.size, self.rc * self.size, self.num_rooms
        rc = np.stack(np.meshgrid(np.arange(H), np.arange(Wd), indexing="ij"), -1).reshape(-1, 2)  # [cells, 2]
        room = self.room_of(rc)
        to = rc[:, None, :] + _DELTA[None]                                          # [cells, 4, 2]
        inside = (to[..., 0] >= 0) & (to[..., 0] < H) & (to[..., 1] >= 0) & (to[..., 1] < Wd)
        # Crossing into another room only through that wall's doorway: the offset along the wall
        # (column for N/S, row for E/W) must equal the side's doorway offset.
        doors = self._doorways()[room]                                              # [cells, 4]
        along = np.stack([rc[:, 1], rc[:, 0], rc[:, 1], rc[:, 0]], 1) % sz
        to_room = self.room_of(np.clip(to, 0, [H - 1, Wd - 1]))
        ok = inside & ((to_room == room[:, None]) | (along == doors))
        self.moves = np.where(ok, to[..., 0] * Wd + to[..., 1], np.arange(len(rc))[:, None])
        # Shortest paths to each room: relax dist <- min(dist, 1 + dist at a neighbour) until stable.
        dist = np.where(room[None, :] == np.arange(R)[:, None], 0, H * Wd)
        while True:
            new = np.minimum(dist, dist[:, self.moves].min(-1) + 1)
            if (new == dist).all():
                break
            dist = new
        self.dist = dist
        obs = np.zeros((len(rc), self._obs_dim - 4), np.float32)
        cells = np.arange(len(rc))
        obs[cells, room] = 1.0
        obs[cells, R + rc[:, 0] % sz] = 1.0
        obs[cells, R + sz + rc[:, 1] % sz] = 1.0
        for side in range(4):
            obs[cells, R + 2 * sz + side * (sz + 1) + np.where(doors[:, side] >= 0, doors[:, side], sz)] = 1.0
        self.cell_obs, self.cell_room = obs, room

    # -- views -----------------------------------------------------------------------------------
    def _obs(self, k: int) -> np.ndarray:
        heading = np.zeros(4, np.float32)
        heading[self.heading[k]] = 1.0
        return np.concatenate([self.cell_obs[self.cell[k]], heading])

    def state(self):
        R = self.num_rooms
        s = np.zeros(self._state_space.shape, np.float32)
        s[self.goal] = 1.0
        for k, a in enumerate(self.possible_agents):
            if a in self.agents:
                s[R * (1 + k) + self.cell_room[self.cell[k]]] = 1.0
        return s

    # -- the API ---------------------------------------------------------------------------------
    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        rng, sz, n = self._rng, self.size, len(self.possible_agents)
        self.agents = list(self.possible_agents)
        self.door_v = rng.integers(sz, size=(self.rr, self.rc - 1))   # doorway row of the wall east of room (i, j)
        self.door_h = rng.integers(sz, size=(self.rr - 1, self.rc))   # doorway column of the wall south of room (i, j)
        self._tables()
        start, self.goal = (int(x) for x in rng.choice(self.num_rooms, 2, replace=False))
        pos = np.array(divmod(start, self.rc)) * sz + rng.integers(sz, size=(n, 2))
        self.cell = (pos[:, 0] * self.rc * sz + pos[:, 1]).tolist()
        self.heading = (rng.integers(4, size=n) if self.random_heading else np.zeros(n, np.int64)).tolist()
        self.t = 0
        return {a: self._obs(k) for k, a in enumerate(self.agents)}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        obs, rew, term, trunc, info = {}, {}, {}, {}, {}
        for k, a in enumerate(self.possible_agents):
            if a not in self.agents:
                continue
            world = (int(actions[a]) + self.heading[k]) % 4
            before = self.cell[k]
            self.cell[k] = after = int(self.moves[before, world])
            info[a] = {"world_move": world, "progress": (self.dist[:, before] - self.dist[:, after]).astype(np.float32)}
            reached = int(self.cell_room[after]) == self.goal
            rew[a] = 1.0 if reached else -0.01
            term[a] = reached
            trunc[a] = self.t >= self.max_steps and not reached
            obs[a] = self._obs(k)
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, info


def parallel_env(**kwargs) -> RoomsEnv:
    return RoomsEnv(**kwargs)


@register_reward("rooms_follow_direction", vectorized=True, layer="bottom", commands=4, info_keys=("world_move",))
def follow_direction(command: np.ndarray, info: dict | list[dict], **_) -> float | np.ndarray:
    """1 where the agent tried to move in the commanded world direction (one-hot N/E/S/W), else 0.

    One agent (``command [4]``, ``info`` its dict) -> float, or B agents (``command [B, 4]``,
    ``info`` a list of B dicts) -> ``[B]`` float32."""
    command = np.asarray(command)
    if command.ndim == 1:
        return float(info.get("world_move", -1) == int(np.argmax(command)))  # type: ignore[union-attr]
    moved = np.fromiter((i.get("world_move", -1) for i in info), np.int64, len(info))
    return (moved == np.argmax(command, axis=1)).astype(np.float32)


@register_reward("rooms_reach_room", vectorized=True, layer="upper", info_keys=("progress",))
def reach_room(command: np.ndarray, info: dict | list[dict], **_) -> float | np.ndarray:
    """Progress toward the commanded room (one-hot of R), summed over the lane's agents: each
    agent's shortest-path distance to that room before the step minus after (agents that are
    gone count 0).

    One lane (``command [R]``, ``info`` its agents' dicts by name) -> float, or B lanes
    (``command [B, R]``, ``info`` a list of B such dicts) -> ``[B]`` float32."""
    command = np.asarray(command)
    if command.ndim == 1:
        return float(reach_room(command[None], [info])[0])  # type: ignore[list-item]
    room = np.argmax(command, axis=1)
    out = np.zeros(len(room), np.float32)
    for b, members in enumerate(info):
        for member in members.values():  # type: ignore[union-attr]
            progress = member.get("progress")
            if progress is not None:
                out[b] += progress[room[b]]
    return out
