"""The swarm simulation, batched: ``N`` copies of a field of ``n`` drones and ``M`` obstacles in
one set of numpy arrays (no Python loop over drones or obstacles on the step path).

Each drone is a point mass with a thrust limit: the action ``a`` in ``[-1, 1]^3`` asks for an
acceleration ``accel_max * a`` on top of hovering; the thrust that gives it,
``accel_max * a + g e_z``, is scaled down to at most ``thrust_max`` (per unit mass), so a drone
that climbs hard has less left to turn with. Gravity and linear drag act on it, and its speed is
capped at ``speed_max``; semi-implicit Euler with step ``dt``. The world is a box; a drone
stops at its walls, floor and ceiling (no collision). Obstacles are spheres and vertical
cylinders (floor to ceiling); moving spheres travel at a constant speed and bounce off the
field's bounds. A drone that touches an obstacle is pushed back to its surface and loses its
speed into it; a drone that comes within two body radii of another is in contact with it. Each
new contact is a *collision*, counted and penalised; a drone that collided stays in the air
(``collided`` is kept for the episode), unless the swarm is made with ``crash=True``: then a
collision ends its flight as a real quadrotor's would (it leaves the field, terminated). A
drone within ``goal_radius`` of its own pad in its group's goal region has *reached* it and
lands (it leaves the field and the agents).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..copy_draws import CopyDraws, copy_generators
from .assignment import assignment_costs, permutations
from .scenarios import MAX_DRONES, MAX_OBSTACLES, Scenario

GRAVITY = 9.81
OWN_FEATURES = 11   # of a drone's observation before its neighbour and obstacle slots (8 values each)
SPHERE, CYLINDER = 0, 1


@dataclass(frozen=True)
class Physics:
    """Dynamics limits and geometry (SI units: m, s). ``thrust_max`` is per unit mass (m/s^2)."""

    dt: float = 0.1
    accel_max: float = 5.0          # commanded acceleration at |a| = 1, per axis
    thrust_max: float = 14.0        # |thrust| / mass: about 1.4 g
    drag: float = 0.3               # 1/s, linear
    speed_max: float = 3.0          # m/s
    drone_radius: float = 0.25
    sense_range: float = 6.0        # neighbours and obstacles farther than this are not seen


@dataclass(frozen=True)
class RewardWeights:
    """Per drone and step: ``progress * (distance to goal before - after)
    + reach * (reached this step) - collision * (new collisions this step) - time
    - proximity * sum over obstacles and drones of ((margin - gap) / margin)^2`` for gaps (clearance
    between surfaces) under ``margin`` metres. The proximity term is shaping: a collision alone is
    a rare, sparse signal, and a drone pushed along an obstacle's surface pays it only once; the
    squared gap is what a potential-field pilot steers by."""

    progress: float = 1.0
    reach: float = 10.0
    collision: float = 10.0
    time: float = 0.01
    proximity: float = 0.0
    margin: float = 1.0


@dataclass
class StepArrays:
    """One step of every copy, ``[N, n]`` unless said (before the ended copies are reset)."""

    rewards: np.ndarray        # float64
    active_before: np.ndarray  # bool: in the field before the step (these acted)
    reached_now: np.ndarray    # bool
    collision_now: np.ndarray  # int: new contacts this step (obstacles + drones)
    progress: np.ndarray       # float: distance to goal before - after
    ended: np.ndarray          # [N] bool: every drone reached, or max_steps
    truncated: np.ndarray      # [N] bool: ended by max_steps
    crashed_now: np.ndarray    # bool: left the field by a collision this step (``crash=True`` only)

    @property
    def terminated(self) -> np.ndarray:
        """``[N, n]`` bool: drones whose flight ended this step, at their goal or in a crash."""
        return self.reached_now | self.crashed_now


class Swarm:
    """``num_copies`` fields of one scenario; see the module docstring."""

    def __init__(self, scenario: Scenario, num_copies: int, k_neighbors: int = 4, k_obstacles: int = 4,
                 max_steps: int | None = None, physics: Physics | None = None, weights: RewardWeights | None = None,
                 rng: np.random.Generator | None = None, crash: bool = False):
        self.sc = scenario
        self.crash = crash
        self.N, self.n = num_copies, scenario.n_drones
        self.G = scenario.n_groups
        self.M = scenario.n_obstacles
        self.k_nb, self.k_ob = k_neighbors, k_obstacles
        self.max_steps = max_steps or scenario.max_steps
        self.ph = physics or Physics()
        self.w = weights or RewardWeights()
        self.rng = rng if rng is not None else np.random.default_rng()
        self._copy_rngs = copy_generators(self.rng, self.N)
        self.group = np.arange(self.n) // scenario.group_size
        self.world = np.array(scenario.world, np.float64)
        self.scale = float(np.max(self.world))
        # Obstacle kinds are fixed per scenario: static spheres, cylinders, moving spheres.
        sc = scenario
        self.kind = np.array([SPHERE] * sc.spheres + [CYLINDER] * sc.cylinders + [SPHERE] * sc.moving, np.int64)
        self.moving = np.array([False] * (sc.spheres + sc.cylinders) + [True] * sc.moving)
        self.is_cyl = self.kind == CYLINDER
        self.obs_dim = OWN_FEATURES + 8 * self.k_nb + 8 * self.k_ob
        self.state_dim = MAX_DRONES * 12 + MAX_OBSTACLES * 9 + 1
        N, n, M = self.N, self.n, self.M
        self.pos = np.zeros((N, n, 3))
        self.vel = np.zeros((N, n, 3))
        self.goal = np.zeros((N, n, 3))
        self.active = np.zeros((N, n), bool)
        self.reached = np.zeros((N, n), bool)
        self.collided = np.zeros((N, n), bool)
        self.collisions = np.zeros((N, n), np.int64)
        self.contact = np.zeros((N, n, n + M), bool)     # in contact with drone j / obstacle m at the last step
        self.t = np.zeros(N, np.int64)
        self.oc = np.zeros((N, M, 3))     # obstacle centres (cylinders: z unused)
        self.orad = np.zeros((N, M))
        self.ovel = np.zeros((N, M, 3))
        self.region = np.zeros((N, self.G, 3))
        self.assignment = np.tile(np.arange(self.G), (N, 1))   # [N, G]: the region each group flies to
        self.shortest = self.assignment.copy()                 # [N, G]: the shortest assignment from the start
        # Members of a group: a square pattern (y, z) 1.6 m apart around the group's start, and the
        # same pattern of pads (x, y, z offsets) around the centre of the region it flies to.
        m = np.arange(scenario.group_size)
        side = int(np.ceil(np.sqrt(scenario.group_size)))
        offs = np.stack([m % side - (side - 1) / 2, m // side - (side - 1) / 2], -1) * 1.6
        self.pads = np.concatenate([np.zeros((self.n, 1)), offs[np.arange(self.n) % scenario.group_size]], -1)
        self.obs = np.zeros((N, n, self.obs_dim), np.float32)
        self.dist = np.zeros((N, n))
        self._group_stats: tuple[np.ndarray, np.ndarray] | None = None   # of the current step, made when asked

    # -- episodes ------------------------------------------------------------------------------
    def reseed(self, seed: int | None) -> np.random.Generator:
        """A new shared stream (for random assignments) and per-copy layout streams from ``seed``."""
        self.rng = np.random.default_rng(seed)
        self._copy_rngs = copy_generators(self.rng, self.N)
        return self.rng

    def reset(self, copies: np.ndarray | None = None) -> None:
        idx = np.arange(self.N) if copies is None else np.asarray(copies)
        if len(idx) == 0:
            return
        self._group_stats = None
        sc, rng, k = self.sc, CopyDraws(self._copy_rngs, idx), len(idx)
        L, W, H = sc.world
        # Goal regions on the far side and group start points on the near side, each group in
        # its own cell of a grid over (y, z); starts are assigned to the cells in a random
        # order, so that groups cross each other's paths.
        gy = 2 if self.G >= 2 else 1
        gz = -(-self.G // gy)
        cell = np.stack(np.meshgrid(np.arange(gy), np.arange(gz), indexing="ij"), -1).reshape(-1, 2)[: self.G]
        size = np.array([W / gy, (H - 2.0) / gz])
        centre = (cell + 0.5) * size + np.array([0.0, 1.0])
        jitter = rng.uniform(-0.25, 0.25, (k, self.G, 2)) * size
        region = np.concatenate([np.full((k, self.G, 1), L - sc.goal_margin), centre + jitter], -1)
        self.region[idx] = region
        perm = np.argsort(rng.random((k, self.G)), 1)
        start_c = centre[perm] + rng.uniform(-0.15, 0.15, (k, self.G, 2)) * size
        yz = start_c[:, self.group] + self.pads[:, 1:]
        x = rng.uniform(1.0, 2.0, (k, self.n, 1))
        pos = np.concatenate([x, yz], -1)
        r = self.ph.drone_radius
        pos = np.clip(pos, r, self.world - r)
        self.pos[idx] = pos
        self.vel[idx] = 0.0
        # Each drone's goal is its own pad in its group's region, in the pattern it starts in;
        # group g flies to region g until an upper layer assigns the regions otherwise (assign()).
        self.assignment[idx] = np.arange(self.G)
        self.goal[idx] = np.clip(region[:, self.group] + self.pads, r, self.world - r)
        self.active[idx] = True
        self.reached[idx] = False
        self.collided[idx] = False
        self.collisions[idx] = 0
        self.contact[idx] = False
        self.t[idx] = 0
        # Obstacles in the middle band of the field.
        M = self.M
        if M:
            lo = np.array([sc.field[0], 0.0, 1.0])
            hi = np.array([sc.field[1], W, H - 1.0])
            c = rng.uniform(lo, hi, (k, M, 3))
            rad = np.where(self.is_cyl, rng.uniform(*sc.cylinder_radius, (k, M)), rng.uniform(*sc.sphere_radius, (k, M)))
            rad = np.where(self.moving, sc.moving_radius, rad)
            ang = rng.uniform(0, 2 * np.pi, (k, M))
            v = np.stack([np.cos(ang) * 0.3, np.sin(ang), np.zeros_like(ang)], -1)   # mostly across the drones' path
            v = v / np.linalg.norm(v, axis=-1, keepdims=True) * sc.moving_speed
            self.oc[idx] = c
            self.orad[idx] = rad
            self.ovel[idx] = np.where(self.moving[None, :, None], v, 0.0)
        self.dist[idx] = np.linalg.norm(self.goal[idx] - self.pos[idx], axis=-1)
        # The assignment of regions to groups with the shortest summed distance from the start
        # (for the episode metric assignment_shortest: did an upper layer find it?).
        self.shortest[idx] = permutations(self.G)[assignment_costs(self.pos[idx], self.active[idx], self.group,
                                                                    self.region[idx]).argmin(1)]
        self._observe(idx)

    def assign(self, copies: np.ndarray, regions: np.ndarray) -> None:
        """Send group g of copy ``copies[k]`` to region ``regions[k, g]`` (``regions [k, G]``, each
        row a permutation of the regions): its drones' goals become their pads there. Drones that
        landed keep their outcome; the distance that pays progress is measured to the new goal
        from now on (a reassignment neither pays nor costs progress by itself)."""
        idx = np.asarray(copies, np.int64)
        regions = np.asarray(regions, np.int64).reshape(len(idx), self.G)
        if len(idx) == 0:
            return
        if (np.sort(regions, 1) != np.arange(self.G)).any():
            raise ValueError(f"swarm: each row of an assignment must be a permutation of the {self.G} regions, "
                             f"not {regions.tolist()}")
        r = self.ph.drone_radius
        self.assignment[idx] = regions
        region = np.take_along_axis(self.region[idx], regions[..., None], 1)        # [k, G, 3]
        self.goal[idx] = np.clip(region[:, self.group] + self.pads, r, self.world - r)
        self.dist[idx] = np.linalg.norm(self.goal[idx] - self.pos[idx], axis=-1)
        self._observe(idx)

    # -- geometry ------------------------------------------------------------------------------
    def _obstacle_geometry(self, pos: np.ndarray, oc: np.ndarray, orad: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For drones ``pos [k, n, 3]`` and obstacles ``[k, M]``: the unit vector from the drone
        toward the obstacle's nearest point ``[k, n, M, 3]``, the distance to its surface
        ``[k, n, M]``, and the clearance (surface distance less the drone radius) ``[k, n, M]``."""
        delta = oc[:, None] - pos[:, :, None]
        delta[..., 2] = np.where(self.is_cyl, 0.0, delta[..., 2])  # cylinders: horizontal only
        d = np.linalg.norm(delta, axis=-1)
        u = delta / np.maximum(d, 1e-9)[..., None]
        surf = d - orad[:, None]
        return u, surf, surf - self.ph.drone_radius

    def _observe(self, idx: np.ndarray) -> None:
        """Observations of copies ``idx`` (see the package docstring's table)."""
        ph = self.ph
        pos, vel, act = self.pos[idx], self.vel[idx], self.active[idx]
        k, n = len(idx), self.n
        rel_goal = self.goal[idx] - pos
        dist = np.linalg.norm(rel_goal, axis=-1, keepdims=True)
        own = [rel_goal / self.scale, dist / self.scale, vel / ph.speed_max, pos / self.world,
               np.broadcast_to((self.t[idx] / self.max_steps)[:, None, None], (k, n, 1))]
        parts = own
        # k nearest active neighbours within sensing range.
        if self.k_nb:
            dp = pos[:, None] - pos[:, :, None]                       # [k, i, j, 3]: j relative to i
            dd = np.linalg.norm(dp, axis=-1)
            ok = act[:, None, :] & act[:, :, None] & ~np.eye(n, dtype=bool) & (dd < ph.sense_range)
            key = np.where(ok, dd, np.inf)
            kk = min(self.k_nb, n)
            order = np.argsort(key, -1)[..., :kk]
            present = np.take_along_axis(ok, order, -1)
            rp = np.take_along_axis(dp, order[..., None], 2)
            rv = np.take_along_axis(vel[:, None] - vel[:, :, None], order[..., None], 2)
            dn = np.take_along_axis(dd, order, -1)
            nb = np.concatenate([present[..., None], rp / ph.sense_range, rv / (2 * ph.speed_max),
                                 dn[..., None] / ph.sense_range], -1) * present[..., None]
            if kk < self.k_nb:
                nb = np.concatenate([nb, np.zeros((k, n, self.k_nb - kk, 8))], 2)
            parts.append(nb.reshape(k, n, -1))
        if self.k_ob:
            if self.M:
                u, surf, clear = self._obstacle_geometry(pos, self.oc[idx], self.orad[idx])
                ok = surf < ph.sense_range
                kk = min(self.k_ob, self.M)
                order = np.argsort(np.where(ok, surf, np.inf), -1)[..., :kk]
                present = np.take_along_axis(ok, order, -1)
                su = np.take_along_axis(u, order[..., None], 2)
                ss = np.take_along_axis(surf, order, -1)
                sc_ = np.take_along_axis(clear, order, -1)
                ov = np.take_along_axis(np.broadcast_to(self.ovel[idx][:, None], (k, n, self.M, 3)), order[..., None], 2)
                ob = np.concatenate([present[..., None], su * np.maximum(ss, 0.0)[..., None] / ph.sense_range,
                                     sc_[..., None] / ph.sense_range, ov / ph.speed_max], -1) * present[..., None]
            else:
                kk, ob = 0, np.zeros((k, n, 0, 8))
            if kk < self.k_ob:
                ob = np.concatenate([ob, np.zeros((k, n, self.k_ob - kk, 8))], 2)
            parts.append(ob.reshape(k, n, -1))
        o = np.concatenate(parts, -1)
        self.obs[idx] = np.clip(o, -1.0, 1.0) * act[..., None]

    # -- one step ------------------------------------------------------------------------------
    def step(self, actions: np.ndarray) -> StepArrays:
        """``actions [N, n, 3]`` in [-1, 1] (clipped); entries of drones not in the field are ignored."""
        ph, N, n = self.ph, self.N, self.n
        act_before = self.active.copy()
        a = np.clip(np.nan_to_num(np.asarray(actions, np.float64).reshape(N, n, 3)), -1.0, 1.0)
        thrust = ph.accel_max * a
        thrust[..., 2] += GRAVITY
        tn = np.linalg.norm(thrust, axis=-1, keepdims=True)
        thrust *= np.minimum(1.0, ph.thrust_max / np.maximum(tn, 1e-9))
        acc = thrust - ph.drag * self.vel
        acc[..., 2] -= GRAVITY
        vel = self.vel + acc * ph.dt
        sp = np.linalg.norm(vel, axis=-1, keepdims=True)
        vel *= np.minimum(1.0, ph.speed_max / np.maximum(sp, 1e-9))
        pos = self.pos + vel * ph.dt
        # World bounds: stop at the walls.
        r = ph.drone_radius
        lo, hi = np.full(3, r), self.world - r
        out = (pos < lo) | (pos > hi)
        pos = np.clip(pos, lo, hi)
        vel = np.where(out, 0.0, vel)
        # Moving obstacles, bouncing off the field's bounds.
        if self.moving.any():
            sc = self.sc
            oc = self.oc + self.ovel * ph.dt
            blo = np.array([sc.field[0], 0.0, 1.0])
            bhi = np.array([sc.field[1], sc.world[1], sc.world[2] - 1.0])
            bounce = ((oc < blo) & (self.ovel < 0)) | ((oc > bhi) & (self.ovel > 0))
            self.ovel = np.where(bounce & self.moving[None, :, None], -self.ovel, self.ovel)
            self.oc = np.where(self.moving[None, :, None], np.clip(oc, blo, bhi), self.oc)
        # Obstacles: contact, then push out to the surface and drop the speed into it.
        ob_contact = np.zeros((N, n, self.M), bool)
        if self.M:
            u, _, clear = self._obstacle_geometry(pos, self.oc, self.orad)
            ob_contact = (clear < 0) & act_before[..., None]
            depth = np.where(ob_contact, -clear, 0.0)
            pos = pos - (u * depth[..., None]).sum(2)
            into = np.einsum("knmd,knd->knm", u, vel)
            vel = vel - (u * (np.where(ob_contact, np.maximum(into, 0.0), 0.0))[..., None]).sum(2)
        pos = np.where(act_before[..., None], pos, self.pos)
        vel = np.where(act_before[..., None], vel, 0.0)
        # Drone-drone contact among drones in the field.
        dd = np.linalg.norm(pos[:, None] - pos[:, :, None], axis=-1)
        dr_contact = (dd < 2 * r) & act_before[:, None, :] & act_before[:, :, None] & ~np.eye(n, dtype=bool)
        contact = np.concatenate([dr_contact, ob_contact], -1)
        new = (contact & ~self.contact).sum(-1)
        self.contact = contact
        self.pos, self.vel = pos, vel
        dist = np.linalg.norm(self.goal - pos, axis=-1)
        progress = np.where(act_before, self.dist - dist, 0.0)
        self.dist = dist
        reached_now = act_before & (dist < self.sc.goal_radius)
        self.reached |= reached_now
        self.collided |= new > 0
        self.collisions += new
        # A crash ends the flight; reaching the pad in the same step counts as reaching it.
        crashed_now = act_before & (new > 0) & ~reached_now if self.crash else np.zeros_like(reached_now)
        self.active = act_before & ~reached_now & ~crashed_now
        self.t += 1
        self._group_stats = None
        w = self.w
        rewards = (w.progress * progress + w.reach * reached_now - w.collision * new - w.time) * act_before
        if w.proximity:
            rewards -= w.proximity * self._closeness(pos, dd, act_before) * act_before
        trunc = (self.t >= self.max_steps) & self.active.any(1)
        ended = trunc | ~self.active.any(1)
        self._observe(np.arange(N))
        return StepArrays(rewards, act_before, reached_now, new, progress, ended, trunc, crashed_now)

    def _closeness(self, pos: np.ndarray, dd: np.ndarray, act: np.ndarray) -> np.ndarray:
        """``[N, n]``: sum over obstacles and other flying drones of ``((margin - gap) / margin)^2``
        for surface gaps under ``margin`` (0 at the margin, 1 in contact)."""
        m = self.w.margin
        near = np.zeros(pos.shape[:2])
        if self.M:
            _, _, clear = self._obstacle_geometry(pos, self.oc, self.orad)
            near += (np.clip((m - clear) / m, 0.0, 1.0) ** 2).sum(-1)
        gap = dd - 2 * self.ph.drone_radius
        pair = act[:, None, :] & act[:, :, None] & ~np.eye(self.n, dtype=bool)
        near += np.where(pair, np.clip((m - gap) / m, 0.0, 1.0) ** 2, 0.0).sum(-1)
        return near

    # -- views ---------------------------------------------------------------------------------
    def state(self) -> np.ndarray:
        """``[N, state_dim]`` float32, the same size for every scenario: per drone slot (16),
        position / world, velocity / speed_max, (goal - position) / scale, in the field,
        reached, collided; per obstacle slot (24), present, centre / world, radius / 2,
        velocity / speed_max, cylinder; time / max_steps. Empty slots are zeros."""
        N, n, M = self.N, self.n, self.M
        d = np.zeros((N, MAX_DRONES, 12))
        d[:, :n] = np.concatenate([self.pos / self.world, self.vel / self.ph.speed_max,
                                   (self.goal - self.pos) / self.scale, self.active[..., None],
                                   self.reached[..., None], self.collided[..., None]], -1)
        d[:, :n, :9] *= self.active[..., None]
        o = np.zeros((N, MAX_OBSTACLES, 9))
        if M:
            o[:, :M] = np.concatenate([np.ones((N, M, 1)), self.oc / self.world, self.orad[..., None] / 2.0,
                                       self.ovel / self.ph.speed_max,
                                       np.broadcast_to(self.is_cyl[None, :, None], (N, M, 1))], -1)
        out = np.concatenate([d.reshape(N, -1), o.reshape(N, -1), (self.t / self.max_steps)[:, None]], -1)
        return np.clip(out, -1.0, 1.0).astype(np.float32)

    def group_stats(self) -> tuple[np.ndarray, np.ndarray]:
        """``cohesion [N, n]`` (distance to the centroid of the group's drones in the field) and
        ``spacing [N, n]`` (distance to the nearest other drone of the group in the field; inf
        when alone), for drones in the field (0 and inf for the others)."""
        if self._group_stats is None:
            self._group_stats = self._make_group_stats()
        return self._group_stats

    def _make_group_stats(self) -> tuple[np.ndarray, np.ndarray]:
        n, G = self.n, self.G
        onehot = (self.group[:, None] == np.arange(G)[None]).astype(np.float64)      # [n, G]
        w = self.active[..., None] * onehot[None]                                  # [N, n, G]
        cnt = w.sum(1)                                                             # [N, G]
        cen = np.einsum("kng,knd->kgd", w, self.pos) / np.maximum(cnt, 1)[..., None]
        coh = np.linalg.norm(self.pos - cen[:, self.group], axis=-1) * self.active
        dd = np.linalg.norm(self.pos[:, None] - self.pos[:, :, None], axis=-1)
        same = (self.group[:, None] == self.group[None]) & ~np.eye(n, dtype=bool)
        ok = same[None] & self.active[:, None, :] & self.active[:, :, None]
        spacing = np.where(ok, dd, np.inf).min(-1)
        return coh, spacing
