"""The skirmish simulator: N copies of one battle, every quantity an array ``[N, U, ...]``.

Units ``0..n-1`` are team 0 (red), ``n..2n-1`` team 1 (blue); both teams are stepped together
from one action array ``[N, U]``. There is no Python loop over units or copies on the step
path: distances are pairwise arrays, targets are picked by sorting masked distances, damage
and healing are summed into their targets with one ``bincount``.

The per-unit Discrete action (the same space for every unit, so that weights can be shared):

- ``0`` no-op (always legal);
- ``1..8`` move one step of the unit's speed toward E, NE, N, NW, W, SW, S, SE (legal when the
  unit stays on the map and out of every obstacle; units pass through each other);
- ``9 .. 9+Ke-1`` attack enemy slot ``k`` of the observation (the k-th nearest visible enemy;
  legal when it is within attack range and the unit's cooldown is over);
- ``9+Ke .. 9+Ke+Ka-1`` heal ally slot ``k`` (healers only; the ally is within heal range and
  hurt, the cooldown is over).

An illegal action (one the mask rules out) is a no-op. Attacks and heals of one step are
simultaneous: damage first (units at hp <= 0 die), then healing of the survivors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..copy_draws import CopyDraws, copy_generators
from .scenarios import HEALER, MAX_OBSTACLES, MAX_SQUADS, MELEE, RANGED, UNIT_RADIUS, UNIT_TYPES, Scenario

NOOP, MOVE0, ATTACK0 = 0, 1, 9
_ANGLES = np.arange(8) * (np.pi / 4)
DIRECTIONS = np.stack([np.cos(_ANGLES), np.sin(_ANGLES)], 1)        # [8, 2]: E, NE, N, NW, W, SW, S, SE
MOVE_VECTORS = np.vstack([np.zeros((1, 2)), DIRECTIONS])           # [9, 2]: by action (0 and non-moves: none)
OWN_FEATURES = 3 + 1 + 1 + 2 + MAX_SQUADS + 1                      # type, hp, cooldown, x, y, squad, time
SLOT_FEATURES = 9                                                  # present, dx, dy, hp, type(3), distance, flag
OBSTACLE_FEATURES = 4                                              # present, dx, dy, radius
UNIT_STATE_FEATURES = 1 + 1 + 1 + 2 + 3 + MAX_SQUADS               # alive, hp, cooldown, x, y, type, squad
# state_summary=True appends, per squad of either team (MAX_SQUADS each, zero-padded): live fraction,
# hp fraction, ready fraction (live units whose cooldown is over), spread (mean distance from the
# centroid); then the distances between centroids, own squad to enemy squad and own to own
# (MAX_SQUADS x MAX_SQUADS each; 1 where either squad is empty). Distances over the map's diagonal.
SQUAD_SUMMARY_FEATURES = 4
STATE_SUMMARY_DIM = 2 * MAX_SQUADS * SQUAD_SUMMARY_FEATURES + 2 * MAX_SQUADS * MAX_SQUADS
FAR = 1.0e6                                                        # where padding obstacles sit


# Nearest-first selection sorts integers that pack a quantised distance above a column index
# (one integer sort is about twice as fast as an argsort of floats on rows this short).
_Q = float(1 << 20)          # distance quantum: 1e-6 map units
_SHIFT = 8                   # low bits: the column (so at most 256 units per team, obstacles per map)
_EMPTY = np.int64(1) << 62   # the key of an empty slot (its low bits are 0: column 0)
_PACKED_FROM = 4096          # values to sort from which the packed sort pays for its extra calls


@dataclass(frozen=True)
class RewardWeights:
    """Team reward per step: ``damage * (dealt / enemy max hp - taken * received / own max hp)
    + kill * (enemy units killed - taken * own units lost) / units per team + win * outcome``
    (outcome +1 won, -1 lost, 0 otherwise, on the last step only)."""

    damage: float = 1.0
    kill: float = 0.5
    win: float = 1.0
    taken: float = 0.5


# state_layout="squads": per squad, two melee, two ranged and one healer slot, in that order.
SQUAD_TYPE_SLOTS = {MELEE: (0, 2), RANGED: (2, 2), HEALER: (4, 1)}   # type -> (first slot, slots)
SQUAD_STATE_SLOTS = sum(count for _, count in SQUAD_TYPE_SLOTS.values())


def state_slots(sc: Scenario, layout: str, state_units: int) -> np.ndarray | None:
    """Where each of a team's units sits in ``state()``: None for ``layout="units"`` (unit order,
    the scenario's); for ``"squads"``, squad ``s``'s units in slots ``5s..5s+4`` by type (melee,
    melee, ranged, ranged, healer), so that a unit's slot means the same squad and type in every
    scenario that fits (8v8 and 10v10 mixed line up: their squads differ by one unit)."""
    if layout == "units":
        return None
    if layout != "squads":
        raise ValueError(f"skirmish: unknown state_layout {layout!r}; use 'units' (the scenario's unit order) "
                         "or 'squads' (by squad and unit type)")
    slots, used = [], {}
    for t, q in zip(sc.units, sc.squads):
        first, count = SQUAD_TYPE_SLOTS[t]
        k = used.get((q, t), 0)
        used[(q, t)] = k + 1
        slot = q * SQUAD_STATE_SLOTS + first + k
        if k >= count or slot >= state_units:
            raise ValueError(f"skirmish: scenario {sc.name!r} does not fit state_layout='squads' (per squad at most "
                             f"2 melee, 2 ranged and 1 healer, and {state_units // SQUAD_STATE_SLOTS} squads); "
                             "use state_layout='units'")
        slots.append(slot)
    return np.asarray(slots, np.int64)


@dataclass
class StepArrays:
    """What one :meth:`Battle.step` did, as arrays (``S`` = squads per team). The per-unit
    accounts (``dealt`` onward) are what command-following rewards are made of."""

    rewards: np.ndarray        # [N, 2] each team's reward
    alive_before: np.ndarray   # [N, U]
    died: np.ndarray           # [N, U] died this step
    ended: np.ndarray          # [N] the episode ended (a team is gone, or the time limit)
    eliminated: np.ndarray     # [N] ended because a team is gone
    outcome: np.ndarray        # [N, 2] +1 won, -1 lost, 0 draw or not over, per team
    dealt: np.ndarray          # [N, U] hp the unit's attack removed
    dealt_to: np.ndarray       # [N, U, S] the same, split by the target's squad
    killed: np.ndarray         # [N, U] the unit's attack hit a unit that died
    taken: np.ndarray          # [N, U] hp the unit lost
    healed: np.ndarray         # [N, U] hp the unit's heal restored (to the ally it healed)
    approach: np.ndarray       # [N, U, S] distance to each enemy squad's centroid, before minus after the move
    retreat: np.ndarray        # [N, U] distance moved toward the own map edge
    cohesion: np.ndarray       # [N, U] distance to the own squad's centroid (before the move) after it
    moved: np.ndarray          # [N, U] distance moved
    spacing: np.ndarray        # [N, U] distance to the nearest live ally in sight after the step (sight if none)
    depth: np.ndarray          # [N, U] distance from the own map edge over the map's width, after the step


class Battle:
    """``num_copies`` battles of ``scenario``; see the module docstring. ``reset()`` before use.

    Positions are kept as separate ``x``, ``y`` arrays ``[N, U]`` (numpy is many times slower on
    arrays whose last axis has length 2). After ``reset``/``step`` the caches describe the
    current state: ``obs [N, U, D]`` float32, ``mask [N, U, A]`` bool, ``cand [N, U, 2, K]`` the
    unit in enemy (0) and ally (1) slot k (``U`` where empty), ``cand_dist`` their distances
    (``FAR`` or more where empty), ``dist [N, U, U]``.
    """

    def __init__(self, scenario: Scenario, num_copies: int = 1, k_enemies: int = 5, k_allies: int = 4,
                 k_obstacles: int = 2, max_steps: int | None = None, rewards: RewardWeights = RewardWeights(),
                 rng: np.random.Generator | None = None, state_layout: str = "units", state_summary: bool = False):
        if min(k_enemies, k_allies, k_obstacles) < 1:
            raise ValueError("skirmish: k_enemies, k_allies and k_obstacles must be >= 1")
        sc = self.scenario = scenario
        self.N, n = num_copies, scenario.n_units
        if n > (1 << _SHIFT) or scenario.obstacles > (1 << _SHIFT):
            raise ValueError(f"skirmish: at most {1 << _SHIFT} units per team")
        self.n, self.U = n, 2 * n
        U = self.U
        self.Ke, self.Ka, self.Ko = k_enemies, k_allies, k_obstacles
        self.K = max(k_enemies, k_allies)
        self.A = ATTACK0 + k_enemies + k_allies
        self.S = scenario.n_squads
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                      or max_steps < 1):
            raise ValueError(f"skirmish: max_steps must be a whole number of steps >= 1 (or left out for the "
                             f"scenario's {scenario.max_steps}), not {max_steps!r}")
        self.max_steps = int(scenario.max_steps if max_steps is None else max_steps)
        self.weights = rewards
        self.rng = rng if rng is not None else np.random.default_rng()
        self._copy_rngs = copy_generators(self.rng, self.N)
        self.width, self.height = float(sc.width), float(sc.height)
        self.obs_dim = OWN_FEATURES + SLOT_FEATURES * (k_enemies + k_allies) + OBSTACLE_FEATURES * k_obstacles
        self.state_units = max(10, n)  # per team, zero-padded: one state size for every built-in scenario
        self.state_dim = 2 * self.state_units * UNIT_STATE_FEATURES + MAX_OBSTACLES * 4 + 1
        self.state_summary = bool(state_summary)
        if self.state_summary:
            if self.S > MAX_SQUADS:
                raise ValueError(f"skirmish: state_summary covers at most {MAX_SQUADS} squads per team; "
                                 f"scenario {sc.name!r} has {self.S}")
            self.state_dim += STATE_SUMMARY_DIM
        self.state_layout = state_layout
        self._state_slot = state_slots(sc, state_layout, self.state_units)

        # -- static per-unit tables -------------------------------------------------------------
        self.team = np.repeat([0, 1], n)
        self.utype = np.tile(np.asarray(sc.units), 2)
        self.squad = np.tile(np.asarray(sc.squads), 2)                   # squad within the team
        self.gsquad = self.squad + self.team * self.S                      # squad index over both teams
        stat = lambda f: np.array([getattr(UNIT_TYPES[t], f) for t in self.utype], np.float64)  # noqa: E731
        self.hp_max, self.speed, self.sight = stat("hp"), stat("speed"), stat("sight")
        self.attack_range, self.damage, self.heal = stat("attack_range"), stat("damage"), stat("heal")
        self.heal_range, self.cooldown = stat("heal_range"), stat("cooldown")
        self.can_attack, self.can_heal = self.damage > 0, self.heal > 0
        self.type_onehot = np.eye(3)[self.utype]
        self.squad_onehot = np.eye(MAX_SQUADS)[self.squad]
        self.team_onehot = np.eye(2)[self.team]                            # [U, 2]
        self.squad_members = np.eye(2 * self.S)[self.gsquad]               # [U, 2S]
        self.team_hp = self.hp_max @ self.team_onehot                      # [2]
        self.base_dir = np.where(self.team == 0, -1.0, 1.0)                # toward the own map edge, along x
        self._depth_sign = -self.base_dir                                  # depth = x (team 0), width - x (team 1)
        self._depth_offset = np.where(self.team == 0, 0.0, self.width)
        self.move_x = MOVE_VECTORS[None, :, 0] * self.speed[:, None]       # [U, 9] by action (0: no move)
        self.move_y = MOVE_VECTORS[None, :, 1] * self.speed[:, None]
        self._uidx = np.arange(U)[None, :]
        self._own_static = np.concatenate([self.type_onehot, np.zeros((U, 4)), self.squad_onehot,
                                           np.zeros((U, 1))], 1).astype(np.float32)  # [U, OWN_FEATURES]
        self.n_obstacles = sc.obstacles
        self.O = max(sc.obstacles, k_obstacles)                            # padded far away beyond the scenario's
        # Candidate columns of each unit: [U, 2, n] the enemy team's units, then its own team's.
        own = (self.team[:, None] * n + np.arange(n)[None, :])
        self._cols = np.stack([(1 - self.team)[:, None] * n + np.arange(n)[None, :], own], 1)
        self._not_self = self._cols != np.arange(U)[:, None, None]
        self._not_me = ~np.eye(n, dtype=bool)                               # [n, n]: a unit and its teammates
        self._cols_base = (np.arange(U * 2) * n).reshape(1, U, 2, 1)
        self._col_index = np.arange(max(n, self.O))                         # the low bits of a key
        self._bases: dict[int, dict[str, np.ndarray]] = {}
        self._row_bases: dict[tuple, np.ndarray] = {}
        self._templates: dict[int, np.ndarray] = {}
        self._signs = np.array([1, -1])
        # Constants of the observation, shaped for broadcasting.
        self._sight3 = self.sight[None, :, None]
        self._inv_sight4 = (1.0 / self.sight)[None, :, None, None]
        self._inv_sight3 = (1.0 / self.sight)[None, :, None]
        self._inv_cooldown = 1.0 / np.maximum(self.cooldown, 1.0)
        self._attack_range_k = self.attack_range[None, :, None]
        self._heal_range_k = self.heal_range[None, :, None]
        self._squad_k = self.squad[None, :, None]
        step_x, step_y = self.move_x[:, 1:], self.move_y[:, 1:]            # [U, 8]
        self._lo_x, self._hi_x = UNIT_RADIUS - step_x, self.width - UNIT_RADIUS - step_x
        self._lo_y, self._hi_y = UNIT_RADIUS - step_y, self.height - UNIT_RADIUS - step_y
        self._step_x2, self._step_y2 = 2.0 * step_x[None, :, None, :], 2.0 * step_y[None, :, None, :]
        self._step_sq = (self.speed ** 2)[None, :, None, None]
        self._max_step = float(self.speed.max()) + 1e-9
        # The enemy squads of each unit, in squad order, and its own, as columns of [N, 2S] arrays.
        self._enemy_squads = (1 - self.team)[:, None] * self.S + np.arange(self.S)[None, :]   # [U, S]
        self._empty_squad = np.append(self.squad, self.S)                  # squad of a target (S: nobody)

        # -- dynamic state ----------------------------------------------------------------------
        N = self.N
        self.x, self.y = np.zeros((N, U)), np.zeros((N, U))
        self.hp = np.zeros((N, U))
        self.cd = np.zeros((N, U))
        self.alive = np.zeros((N, U), bool)
        self.t = np.zeros(N, np.int64)
        self.ox, self.oy = np.full((N, self.O), FAR), np.full((N, self.O), FAR)  # obstacle centres
        self.orad = np.zeros((N, self.O))
        self.kills = np.zeros((N, 2), np.int64)    # enemy units killed this episode, per team
        self.losses = np.zeros((N, 2), np.int64)   # own units lost this episode, per team

    @property
    def pos(self) -> np.ndarray:
        """``[N, U, 2]`` positions (a copy; the state is ``x`` and ``y``)."""
        return np.stack([self.x, self.y], -1)

    def _offsets(self, N: int) -> dict[str, np.ndarray]:
        """Flat-index bases for gathering from ``[N, U, ...]`` arrays with ``take`` (far cheaper
        than ``take_along_axis`` or fancy indexing on arrays this small), cached by N."""
        out = self._bases.get(N)
        if out is None:
            U, nu = self.U, np.arange(N * self.U).reshape(N, self.U)
            unit = (np.arange(N) * U)[:, None, None, None]
            out = {"pair": (nu * U)[:, :, None, None],                         # into [N, U, U]
                   "pair_cols": (nu * U)[:, :, None, None] + self._cols[None],  # [N, U, 2, n] into [N, U, U]
                   "unit": unit,                                              # into [N, U]
                   "unit_cols": unit + self._cols[None],                      # [N, U, 2, n] into [N, U]
                   "obst": (nu * self.O)[:, :, None],                         # into [N, U, O]
                   "obst_unit": (np.arange(N) * self.O)[:, None, None],       # into [N, O]
                   "mask": (nu * self.A),                                     # into [N, U, A]
                   "cand": nu * (2 * self.K),                                 # into [N, U, 2, K] (+ half * K + slot)
                   "move": self._uidx * 9}                                    # into [U, 9]
            self._bases[N] = out
        return out

    # -- episodes ----------------------------------------------------------------------------------
    def reseed(self, seed: int | None) -> np.random.Generator:
        """A new shared stream (for scripted opponents) and per-copy layout streams from ``seed``."""
        self.rng = np.random.default_rng(seed)
        self._copy_rngs = copy_generators(self.rng, self.N)
        return self.rng

    def reset(self, copies: np.ndarray | None = None) -> None:
        """Start new episodes in ``copies`` (all by default) and refresh the observation caches."""
        idx = np.arange(self.N) if copies is None else np.asarray(copies, np.int64)
        m, sc, rng = len(idx), self.scenario, CopyDraws(self._copy_rngs, idx)
        W, H = sc.width, sc.height
        # Spawns: each team's squads side by side near its own edge, melee in front, healers behind.
        front = np.array([0.18, 0.13, 0.09])[self.utype[: self.n]] * W
        anchors = (np.arange(self.S) + 1) / (self.S + 1) * H
        x, y = np.empty((m, self.U)), np.empty((m, self.U))
        for side in (0, 1):
            ys = anchors[None, :] + rng.uniform(-0.08, 0.08, (m, self.S)) * H
            sx = front[None, :] + rng.uniform(-0.8, 0.8, (m, self.n))
            sl = slice(side * self.n, (side + 1) * self.n)
            x[:, sl] = sx if side == 0 else W - sx
            y[:, sl] = ys[:, np.asarray(sc.squads)] + rng.uniform(-2.0, 2.0, (m, self.n))
        lo = UNIT_RADIUS + 0.1
        self.x[idx], self.y[idx] = np.clip(x, lo, W - lo), np.clip(y, lo, H - lo)
        # Obstacles: circles in the middle band, clear of the spawn strips.
        k = sc.obstacles
        ox, oy, r = np.full((m, self.O), FAR), np.full((m, self.O), FAR), np.zeros((m, self.O))
        if k:
            r_max = min(sc.obstacle_radius[1], 0.22 * W - 0.8 - UNIT_RADIUS - 0.2)
            r[:, :k] = rng.uniform(min(sc.obstacle_radius[0], r_max), r_max, (m, k))
            ox[:, :k] = rng.uniform(0.4, 0.6, (m, k)) * W
            oy[:, :k] = rng.uniform(0.15, 0.85, (m, k)) * H
        self.ox[idx], self.oy[idx], self.orad[idx] = ox, oy, r
        self.hp[idx], self.cd[idx], self.alive[idx], self.t[idx] = self.hp_max, 0.0, True, 0
        self.kills[idx], self.losses[idx] = 0, 0
        self.observe(None if copies is None else idx)

    # -- views -------------------------------------------------------------------------------------
    _CACHES = ("obs", "mask", "cand", "cand_dist", "dist")
    # Batch sizes from which the batched forms of two computations pay for their extra numpy calls
    # (class attributes, so that a test can force either form).
    packed_sort_from = _PACKED_FROM          # values to sort: packed integer sort instead of argsort
    sparse_obstacles_from = 2048             # unit-obstacle pairs: blocking checked on the near pairs only

    def observe(self, copies: np.ndarray | None = None) -> None:
        """Recompute the caches (obs, mask, candidates, distances) of ``copies`` (all by default)."""
        if copies is None or not hasattr(self, "obs"):
            out = self._observe(self.x, self.y, self.hp, self.cd, self.alive, self.t, self.ox, self.oy, self.orad)
            for name, new in zip(self._CACHES, out):
                setattr(self, name, new)
            return
        c = copies
        out = self._observe(self.x[c], self.y[c], self.hp[c], self.cd[c], self.alive[c], self.t[c],
                            self.ox[c], self.oy[c], self.orad[c])
        for name, new in zip(self._CACHES, out):
            getattr(self, name)[c] = new

    def _clear(self, orx, ory, od2, od, orad) -> np.ndarray:
        """``[N, U, 8]``: each move keeps clear of every obstacle. Only obstacles within one step
        of a unit can block it; with many copies those few pairs are picked out first."""
        N, U = orx.shape[:2]
        reach = (orad + UNIT_RADIUS)[:, None, :]                             # [N, 1, O]
        if orx.size < self.sparse_obstacles_from:
            gap = od2[..., None] - (orx[..., None] * self._step_x2 + ory[..., None] * self._step_y2) + self._step_sq
            return (gap > (reach * reach)[..., None]).all(2)
        n, u, o = np.nonzero(od < reach + self._max_step)
        clear = np.ones((N * U, 8), bool)
        if len(n):
            gap = od2[n, u, o][:, None] - (orx[n, u, o][:, None] * self._step_x2[0, u, 0]
                                           + ory[n, u, o][:, None] * self._step_y2[0, u, 0]) + self._step_sq[0, u, 0]
            r = reach[n, 0, o][:, None]
            np.logical_and.at(clear, n * U + u, gap > r * r)
        return clear.reshape(N, U, 8)

    def _obs_template(self, N: int) -> np.ndarray:
        """A fresh ``[N, U, D]`` observation array holding the static own features (type, squad)."""
        t = self._templates.get(N)
        if t is None:
            t = self._templates[N] = np.zeros((N, self.U, self.obs_dim), np.float32)
            t[:, :, :OWN_FEATURES] = self._own_static
        return t.copy()

    def _nearest(self, dist: np.ndarray, valid: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ``k`` nearest valid columns of ``dist [..., m]``: (column ``[..., k]`` (0 where empty),
        distance (``FAR`` or more where empty), present)."""
        m = dist.shape[-1]
        if dist.size >= self.packed_sort_from:
            key = np.where(valid, (dist * _Q).astype(np.int64) << _SHIFT | self._col_index[:m], _EMPTY)
            key = np.sort(key, -1)[..., :k]
            if m < k:
                key = np.concatenate([key, np.full((*key.shape[:-1], k - m), _EMPTY)], -1)
            return key & ((1 << _SHIFT) - 1), (key >> _SHIFT) * (1.0 / _Q), key < _EMPTY
        # Few rows: fewer, if slower, numpy calls.
        key = np.where(valid, dist, FAR)
        if m < k:
            key = np.concatenate([key, np.full((*key.shape[:-1], k - m), FAR)], -1)
        order = np.argsort(key, -1, kind="stable")[..., :k]   # ties by column, as the packed sort
        base = self._row_bases.get(key.shape)
        if base is None:
            base = self._row_bases[key.shape] = (np.arange(key.size // key.shape[-1]) * key.shape[-1]).reshape(
                *key.shape[:-1], 1)
        d = key.take(base + order)
        ok = d < FAR
        return (np.where(ok, order, 0) if m < k else order), d, ok

    def _observe(self, x, y, hp, cd, alive, t, ox, oy, orad):
        N, U, K, Ke, Ka = x.shape[0], self.U, self.K, self.Ke, self.Ka
        base = self._offsets(N)
        dx = x[:, None, :] - x[:, :, None]                                   # [N, U, U]: j seen from i
        dy = y[:, None, :] - y[:, :, None]
        dist = np.sqrt(dx * dx + dy * dy)
        # Enemies (half 0) and allies (half 1) of each unit in sight, nearest first.
        d_cols = dist.take(base["pair_cols"])                                # [N, U, 2, n]
        valid = alive.take(base["unit_cols"]) & self._not_self & (d_cols <= self.sight[None, :, None, None])
        col, cdist, ok = self._nearest(d_cols, valid, K)                     # [N, U, 2, K]
        who = self._cols.take(self._cols_base + col)                         # the unit in each slot
        cand = np.where(ok, who, U)
        hp_frac = hp / self.hp_max
        pair = base["pair"] + who
        scale = ok * self._inv_sight4
        typ = self.utype.take(who)
        # Each slot: present, dx, dy (over sight), hp, type one-hot, distance (over sight), flag.
        slots = np.empty((N, U, 2, K, SLOT_FEATURES), np.float32)
        slots[..., 0] = ok
        slots[..., 1] = dx.take(pair) * scale
        slots[..., 2] = dy.take(pair) * scale
        slots[..., 3] = hp_frac.take(base["unit"] + who) * ok
        slots[..., 4] = ok & (typ == 0)
        slots[..., 5] = ok & (typ == 1)
        slots[..., 6] = ok & (typ == 2)
        slots[..., 7] = cdist * scale
        in_range = ok[:, :, 0] & (cdist[:, :, 0] <= self._attack_range_k)  # [N, U, K]
        slots[:, :, 0, :, 8] = in_range
        slots[:, :, 1, :, 8] = ok[:, :, 1] & (self.squad.take(who[:, :, 1]) == self._squad_k)

        # Obstacles: the nearest ones (by surface) whose centre is in sight.
        orx = ox[:, None, :] - x[:, :, None]                                 # [N, U, O]
        ory = oy[:, None, :] - y[:, :, None]
        od2 = orx * orx + ory * ory
        od = np.sqrt(od2)
        o_col, _, o_ok = self._nearest(np.maximum(od - orad[:, None, :], 0.0), od <= self._sight3, self.Ko)
        o_take = base["obst"] + o_col
        o_scale = o_ok * self._inv_sight3
        ofeat = np.empty((N, U, self.Ko, OBSTACLE_FEATURES), np.float32)
        ofeat[..., 0] = o_ok
        ofeat[..., 1] = orx.take(o_take) * o_scale
        ofeat[..., 2] = ory.take(o_take) * o_scale
        ofeat[..., 3] = orad.take(base["obst_unit"] + o_col) * o_scale

        obs = self._obs_template(N)                                          # the static own features in place
        obs[:, :, 3] = hp_frac
        obs[:, :, 4] = cd * self._inv_cooldown
        obs[:, :, 5] = x * (1.0 / self.width)
        obs[:, :, 6] = y * (1.0 / self.height)
        obs[:, :, OWN_FEATURES - 1] = (t * (1.0 / self.max_steps))[:, None]
        e_end = OWN_FEATURES + SLOT_FEATURES * Ke
        a_end = e_end + SLOT_FEATURES * Ka
        obs[:, :, OWN_FEATURES:e_end] = slots[:, :, 0, :Ke].reshape(N, U, -1)
        obs[:, :, e_end:a_end] = slots[:, :, 1, :Ka].reshape(N, U, -1)
        obs[:, :, a_end:] = ofeat.reshape(N, U, -1)

        # Legal actions. A move s from p clears obstacle c (radius r) when
        # |c - p - s|^2 = |c - p|^2 - 2 s.(c - p) + |s|^2 > (r + UNIT_RADIUS)^2.
        xx, yy = x[:, :, None], y[:, :, None]
        inside = (xx >= self._lo_x) & (xx <= self._hi_x) & (yy >= self._lo_y) & (yy <= self._hi_y)   # [N, U, 8]
        clear = self._clear(orx, ory, od2, od, orad)
        ready = alive & (cd <= 0)
        mask = np.empty((N, U, self.A), bool)
        mask[:, :, NOOP] = True
        mask[:, :, MOVE0:ATTACK0] = inside & clear & alive[:, :, None]
        mask[:, :, ATTACK0:ATTACK0 + Ke] = in_range[:, :, :Ke] & (ready & self.can_attack)[:, :, None]
        hurt = hp_frac.take(base["unit"][..., 0] + who[:, :, 1, :Ka]) < 1.0
        heal_ok = ok[:, :, 1, :Ka] & hurt & (cdist[:, :, 1, :Ka] <= self._heal_range_k)
        mask[:, :, ATTACK0 + Ke:] = heal_ok & (ready & self.can_heal)[:, :, None]
        return obs, mask, cand, cdist, dist

    def state(self) -> np.ndarray:
        """``[N, state_dim]`` float32 in [0, 1]: every unit in a fixed order (team 0 then team 1, each
        zero-padded to ``state_units``; with ``state_layout="squads"`` each unit in its squad's slot
        for its type, :func:`state_slots`): alive, hp, cooldown, x, y, type one-hot, squad one-hot; then
        ``MAX_OBSTACLES`` obstacles (present, x, y, radius, over the map's width); then the time."""
        N, n, su = self.N, self.n, self.state_units
        units = np.zeros((N, 2, su, UNIT_STATE_FEATURES), np.float32)
        slots = self._state_slot
        per = units[:, :, :n] if slots is None else np.zeros((N, 2, n, UNIT_STATE_FEATURES), np.float32)
        a = self.alive.reshape(N, 2, n)
        per[..., 0] = a
        per[..., 1] = (self.hp / self.hp_max).reshape(N, 2, n)
        per[..., 2] = (self.cd * self._inv_cooldown).reshape(N, 2, n)
        per[..., 3] = (self.x * (1.0 / self.width)).reshape(N, 2, n)
        per[..., 4] = (self.y * (1.0 / self.height)).reshape(N, 2, n)
        per[..., 5:8] = self.type_onehot.reshape(2, n, 3)
        per[..., 8:] = self.squad_onehot.reshape(2, n, MAX_SQUADS)
        per *= a[..., None]
        if slots is not None:
            units[:, :, slots] = per
        k = self.n_obstacles
        obst = np.zeros((N, MAX_OBSTACLES, 4), np.float32)
        obst[:, :k, 0] = 1.0
        obst[:, :k, 1] = self.ox[:, :k] * (1.0 / self.width)
        obst[:, :k, 2] = self.oy[:, :k] * (1.0 / self.height)
        obst[:, :k, 3] = self.orad[:, :k] * (1.0 / self.width)
        parts = [units.reshape(N, -1), obst.reshape(N, -1), (self.t * (1.0 / self.max_steps))[:, None]]
        if self.state_summary:
            parts.append(self.squad_relations())
        return np.concatenate(parts, 1).astype(np.float32, copy=False)

    def squad_relations(self) -> np.ndarray:
        """``[N, STATE_SUMMARY_DIM]`` in [0, 1]: what ``state_summary`` appends to :meth:`state`
        (see ``STATE_SUMMARY_DIM``): each squad's strength and shape, and how far the squads are
        from each other, which a network reading unit coordinates would otherwise have to work out."""
        N, S = self.N, self.S
        diag = float(np.hypot(self.width, self.height))
        cx, cy, count = self.squad_centroids()                                  # [N, 2S]
        alive = self.alive.astype(np.float64)
        live, hp = self.squad_strength(count)
        ready = (alive * (self.cd <= 0)) @ self.squad_members / np.maximum(count, 1.0)
        gx, gy = cx[:, self.gsquad], cy[:, self.gsquad]                         # each unit's squad centroid
        spread = (alive * np.hypot(self.x - gx, self.y - gy)) @ self.squad_members / np.maximum(count, 1.0) / diag
        per = np.zeros((N, 2, MAX_SQUADS, SQUAD_SUMMARY_FEATURES))
        per[:, :, :S] = np.stack([live, hp, ready, spread], -1).reshape(N, 2, S, SQUAD_SUMMARY_FEATURES)
        there = count > 0
        d = np.hypot(cx[:, :, None] - cx[:, None, :], cy[:, :, None] - cy[:, None, :]) / diag   # [N, 2S, 2S]
        d = np.where(there[:, :, None] & there[:, None, :], np.minimum(d, 1.0), 1.0)
        pairs = np.ones((N, 2, MAX_SQUADS, MAX_SQUADS))
        pairs[:, 0, :S, :S] = d[:, :S, S:]                                        # own squad -> enemy squad
        pairs[:, 1, :S, :S] = d[:, :S, :S]                                        # own squad -> own squad
        return np.concatenate([per.reshape(N, -1), pairs.reshape(N, -1)], 1)

    def squad_strength(self, count: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(``[N, 2S]`` live fraction, hp fraction of full hp) of each squad, team 0's first;
        ``count``: the squads' live counts, if already at hand (:meth:`squad_centroids`)."""
        if count is None:
            count = self.alive.astype(np.float64) @ self.squad_members
        return count / self.squad_members.sum(0), self.hp @ self.squad_members / (self.hp_max @ self.squad_members)

    def squad_centroids(self, alive: np.ndarray | None = None, x: np.ndarray | None = None,
                        y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(``[N, 2S]`` centroid x, centroid y of each squad's live units, ``[N, 2S]`` live count),
        squads of team 0 first; a squad with nobody alive has count 0 and its centroid at (0, 0)."""
        w = (self.alive if alive is None else alive).astype(np.float64)
        count = w @ self.squad_members
        inv = 1.0 / np.maximum(count, 1.0)
        cx = ((self.x if x is None else x) * w) @ self.squad_members * inv
        cy = ((self.y if y is None else y) * w) @ self.squad_members * inv
        return cx, cy, count

    # -- one step ----------------------------------------------------------------------------------
    def step(self, actions: np.ndarray) -> StepArrays:
        """Apply ``actions [N, U]`` (ints) to every copy; the caches then show the new state.
        Copies whose episode ended are left as they are: call :meth:`reset` on them."""
        N, U, Ke, A = self.N, self.U, self.Ke, self.A
        base = self._offsets(N)
        a = np.asarray(actions, np.int64).reshape(N, U)
        a = np.where((a >= 0) & (a < A), a, NOOP)
        a = np.where(self.mask.take(base["mask"] + a), a, NOOP)              # illegal: no-op
        k = a - ATTACK0
        is_att, is_heal = (k >= 0) & (k < Ke), k >= Ke
        acts = is_att | is_heal
        # The slot acted on: enemy slot k, or ally slot k - Ke (half 1).
        at = np.where(is_heal, self.K + k - Ke, np.maximum(k, 0))
        tgt = np.where(acts, self.cand.take(base["cand"] + at), U)           # [N, U]; U: nobody
        # Damage and healing into their targets, one bincount for both (heals after the N*(U+1) damage bins).
        row = np.arange(N)[:, None] * (U + 1)
        flat = row + tgt + is_heal * (N * (U + 1))
        amount = np.where(is_att, self.damage, self.heal) * acts
        into = np.bincount(flat.ravel(), amount.ravel(), 2 * N * (U + 1)).reshape(2, N, U + 1)
        dmg_in, heal_in = into[0, :, :U], into[1, :, :U]
        alive0, hp0, x0, y0 = self.alive, self.hp, self.x, self.y
        hp1 = hp0 - dmg_in
        died = alive0 & (hp1 <= 0)
        alive1 = alive0 & ~died
        hp1 = np.maximum(hp1, 0.0)
        hp2 = np.where(alive1, np.minimum(hp1 + heal_in, self.hp_max), 0.0)
        taken = hp0 - hp1
        # Moves (only legal ones got here, so no one enters an obstacle or leaves the map).
        walking = (a < ATTACK0) & alive1
        move = base["move"] + np.where(walking, a, NOOP)
        x1 = x0 + self.move_x.take(move)
        y1 = y0 + self.move_y.take(move)
        self.cd = np.where(acts, self.cooldown, np.maximum(self.cd - 1.0, 0.0))
        self.x, self.y, self.hp, self.alive = x1, y1, hp2, alive1
        self.t = self.t + 1

        # The team view: rewards and the end of the episode.
        taken_team = taken @ self.team_onehot                                # [N, 2]
        died_team = died @ self.team_onehot
        gone = (alive1 @ self.team_onehot) == 0                              # [N, 2]
        eliminated = gone[:, 0] | gone[:, 1]
        ended = eliminated | (self.t >= self.max_steps)
        outcome = (gone[:, 1].astype(np.int64) - gone[:, 0])[:, None] * self._signs   # +1: team 0 won; both gone: 0
        w = self.weights
        rewards = (w.damage * (taken_team[:, ::-1] / self.team_hp[::-1] - w.taken * taken_team / self.team_hp)
                   + w.kill * (died_team[:, ::-1] - w.taken * died_team) / self.n + w.win * outcome)
        self.kills += died_team[:, ::-1].astype(np.int64)
        self.losses += died_team.astype(np.int64)

        # Per-unit accounts for command-following rewards (see hdppo.envs.builtin.skirmish).
        ratio = np.zeros((N, U + 1))
        np.divide(taken, dmg_in, out=ratio[:, :U], where=dmg_in > 0)
        at_tgt = row + tgt
        dealt = np.where(is_att, self.damage, 0.0) * ratio.take(at_tgt)
        died_ext = np.zeros((N, U + 1), bool)
        died_ext[:, :U] = died
        killed = is_att & died_ext.take(at_tgt)
        dealt_to = (self._empty_squad.take(tgt)[..., None] == np.arange(self.S)) * dealt[..., None]   # [N, U, S]
        got = np.zeros((N, U + 1))
        np.divide(np.where(alive1, hp2 - hp1, 0.0), heal_in, out=got[:, :U], where=heal_in > 0)
        healed = np.where(is_heal, self.heal, 0.0) * got.take(at_tgt)
        cx, cy, count = self.squad_centroids(alive0, x0, y0)                 # [N, 2S]
        ex, ey = cx[:, self._enemy_squads], cy[:, self._enemy_squads]      # [N, U, S]
        before = np.sqrt((x0[..., None] - ex) ** 2 + (y0[..., None] - ey) ** 2)
        after = np.sqrt((x1[..., None] - ex) ** 2 + (y1[..., None] - ey) ** 2)
        approach = (before - after) * (count[:, self._enemy_squads] > 0)
        cohesion = np.sqrt((x1 - cx[:, self.gsquad]) ** 2 + (y1 - cy[:, self.gsquad]) ** 2)
        retreat = (x1 - x0) * self.base_dir
        depth = (x1 * self._depth_sign + self._depth_offset) * (1.0 / self.width)
        self.observe()
        spacing = np.minimum(self.cand_dist[:, :, 1, 0], self.sight)
        return StepArrays(rewards, alive0, died, ended, eliminated, outcome, dealt, dealt_to, killed, taken, healed,
                          approach, retreat, cohesion, (a > NOOP) * walking * self.speed, spacing, depth)
