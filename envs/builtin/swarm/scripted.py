"""Scripted pilots for swarm, the classical baselines a learned policy is measured against.

Each takes a :class:`.core.Swarm` and returns actions ``[N, n, 3]`` for every drone of every
copy (entries of drones not in the field are ignored by the env); :func:`fly` runs one over
episodes and counts how many drones reached their goal and how many collided.

- ``straight``: fly at full speed straight at the goal pad (no avoidance: what collisions the
  field causes by itself);
- ``potential_field``: the goal attracts (a desired velocity toward the pad, slowing within
  3 m), obstacles within 1.5 m of clearance and other drones within 1.2 m repel, quadratically
  in the gap (Khatib 1986's artificial potential field, as a velocity command); the acceleration
  asked for tracks that velocity. It reads the simulator's exact geometry, every obstacle, not
  only the 4 nearest the observation holds;
- ``observed_field``: the same field computed from each drone's observation alone (4 nearest
  drones, 4 nearest obstacles, goal offset, velocity): proof that the observation a policy gets
  is enough to fly the field without collisions. :func:`field_teacher` hands it to a drone layer
  as a kickstarting teacher (``teacher.policy``).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .core import OWN_FEATURES, Swarm


def straight(s: Swarm) -> np.ndarray:
    v_des = (s.goal - s.pos)
    v_des *= (s.ph.speed_max / np.maximum(np.linalg.norm(v_des, axis=-1, keepdims=True), 1e-9))
    return np.clip((v_des - s.vel) * 1.5, -1.0, 1.0)


def potential_field(s: Swarm, gain: float = 9.0, obstacle_margin: float = 1.5, drone_margin: float = 1.2) -> np.ndarray:
    att = s.goal - s.pos
    d = np.linalg.norm(att, axis=-1, keepdims=True)
    v_des = att / np.maximum(d, 1e-9) * np.minimum(d, s.ph.speed_max)
    if s.M:
        u, _, clear = s._obstacle_geometry(s.pos, s.oc, s.orad)
        w = np.clip((obstacle_margin - clear) / obstacle_margin, 0.0, None) ** 2
        v_des = v_des - gain * (u * w[..., None]).sum(2)
    dp = s.pos[:, :, None] - s.pos[:, None]
    dd = np.linalg.norm(dp, axis=-1)
    ok = s.active[:, None] & s.active[:, :, None] & ~np.eye(s.n, dtype=bool)
    wd = np.where(ok, np.clip((drone_margin - dd) / drone_margin, 0.0, None) ** 2, 0.0)
    v_des = v_des + gain * (dp / np.maximum(dd, 1e-9)[..., None] * wd[..., None]).sum(2)
    return np.clip((v_des - s.vel) * 1.5, -1.0, 1.0)


def field_action(obs: np.ndarray, k_neighbors: int = 4, k_obstacles: int = 4, gain: float = 9.0,
                 obstacle_margin: float = 1.5, drone_margin: float = 1.2, scale: float = 30.0,
                 speed_max: float = 3.0, sense_range: float = 6.0) -> np.ndarray:
    """``potential_field`` from observations ``[..., D]`` alone (goal offset and velocity, the
    Kn nearest drones and Ko nearest obstacles; the layout in the package docstring): the
    acceleration ``[..., 3]`` in [-1, 1] it asks for. ``scale`` is the world's largest side
    (30 m in every scenario), the other defaults :class:`.core.Physics`'."""
    o = np.asarray(obs, dtype=np.float64)
    lead = o.shape[:-1]
    goal, dist, vel = o[..., 0:3] * scale, o[..., 3:4] * scale, o[..., 4:7] * speed_max
    v_des = goal / np.maximum(dist, 1e-9) * np.minimum(dist, speed_max)
    f = OWN_FEATURES
    nb = o[..., f:f + 8 * k_neighbors].reshape(*lead, k_neighbors, 8)
    ob = o[..., f + 8 * k_neighbors:f + 8 * (k_neighbors + k_obstacles)].reshape(*lead, k_obstacles, 8)
    toward = ob[..., 1:4]                       # direction to the surface times its distance / range
    u = toward / np.maximum(np.linalg.norm(toward, axis=-1, keepdims=True), 1e-9)
    w = np.clip((obstacle_margin - ob[..., 4] * sense_range) / obstacle_margin, 0.0, None) ** 2 * ob[..., 0]
    v_des = v_des - gain * (u * w[..., None]).sum(-2)
    offset, d = nb[..., 1:4] * sense_range, nb[..., 7] * sense_range     # neighbour j relative to this drone
    wd = np.clip((drone_margin - d) / drone_margin, 0.0, None) ** 2 * nb[..., 0]
    v_des = v_des - gain * (offset / np.maximum(d, 1e-9)[..., None] * wd[..., None]).sum(-2)
    return np.clip((v_des - vel) * 1.5, -1.0, 1.0)


def observed_field(s: Swarm, gain: float = 9.0, obstacle_margin: float = 1.5, drone_margin: float = 1.2) -> np.ndarray:
    """``potential_field`` computed from each drone's observation alone (:func:`field_action`),
    as a policy sees it: what a learned policy could do with what it is given."""
    return field_action(s.obs, s.k_nb, s.k_ob, gain, obstacle_margin, drone_margin, s.scale,
                        s.ph.speed_max, s.ph.sense_range)


def field_teacher(raw_obs: dict, members: list[str], env: Any = None, **kwargs: Any) -> np.ndarray:
    """``teacher.policy`` for a drone layer (kickstarting, Schmitt et al. 2018): the
    observed-field pilot's action for the lane's drone, from its own observation; ``kwargs`` as
    :func:`field_action`'s (the defaults fit the built-in scenarios and observation)."""
    return field_action(raw_obs[members[0]], **kwargs).astype(np.float32)


PILOTS: dict[str, Callable[[Swarm], np.ndarray]] = {"straight": straight, "potential_field": potential_field,
                                                   "observed_field": observed_field}


def fly(pilot: str, scenario: str, episodes: int = 100, copies: int = 20, seed: int = 0, **env_kwargs: Any) -> dict:
    """``episodes`` episodes of ``pilot`` on ``scenario`` (``copies`` fields at a time, the same
    number of episodes each): drones, reached, collided, and their shares. ``env_kwargs`` go to
    the env as a config's ``env.kwargs`` would (e.g. ``crash_on_collision=True``)."""
    from .env import make_vector

    if pilot not in PILOTS:
        raise ValueError(f"swarm: unknown pilot {pilot!r}; choose one of {', '.join(PILOTS)}")
    copies = max(1, min(copies, episodes))
    quota = np.array([episodes // copies + (i < episodes % copies) for i in range(copies)])
    vec = make_vector(copies, seed=seed, scenario=scenario, **env_kwargs)
    vec.reset()
    s = vec.swarm
    done = np.zeros(copies, np.int64)
    drones = reached = collided = 0
    steps: list[int] = []
    shortest: list[float] = []
    while (done < quota).any():
        res = vec.step(PILOTS[pilot](s))
        for i in np.flatnonzero(res.episode_end):
            if done[i] >= quota[i]:
                continue
            info = next(iter(res.infos[i].values()))
            drones += s.n
            reached += round(info["reach_rate"] * s.n)
            collided += round(info["collision_rate"] * s.n)
            steps.append(info["episode_steps"])
            shortest.append(info["assignment_shortest"])
            done[i] += 1
    return {"episodes": int(quota.sum()), "drones": drones, "reached": reached, "collided": collided,
            "reach_share": reached / drones, "collision_rate": collided / drones, "mean_steps": float(np.mean(steps)),
            "steps": steps, "assignment_shortest": float(np.mean(shortest))}
