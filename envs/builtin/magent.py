"""Scripted players for MAgent2's grid battles (``combined_arms_v6``, ``battle_v4``), for
``env.opponents.policy`` (see :mod:`hdppo.envs.opponents`)::

    env:
      type: pettingzoo
      id: magent2.environments.combined_arms_v6
      kwargs: {map_size: 16, max_cycles: 150}
      opponents: {agents: blue, policy: "hdppo.envs.builtin.magent:attack_nearest",
                  alive: "hdppo.envs.builtin.magent:standing"}

| policy | what each unit does |
|---|---|
| ``attack_nearest`` | attacks the nearest enemy in its attack range (lowest hit points among the nearest); otherwise moves to the free cell of its move range nearest the nearest enemy (the nearest in view, else the nearest on the map), around a unit in the way |

``standing`` is the matching ``env.opponents.alive``: MAgent2 ends a game as soon as one group
(combined arms: one unit type of one side) is wiped out, or at ``max_cycles``, and then marks
every agent terminated; ``standing`` reads the survivors from the grid instead.
``nearest_teacher`` is the same script as a ``teacher.policy`` (kickstarting): a layer of units
that imitates attack-nearest early in training and improves on it by PPO. ``battle_map`` is an
``observation.source`` for the layers above the units: the whole map, ``[H, W, groups]`` of
presence flattened, then each group's live share (MAgent2's own ``state()`` fails on a game's
last step; this does not).

How MAgent2 lays out what the script reads (checked against magent2 0.3.4 in
``tests/test_combined_arms.py``):

| what | layout |
|---|---|
| observation | ``[13, 13, C]`` around the unit, the unit at the centre; cell ``[6 + dy, 6 + dx]`` is the map cell ``(x + dx, y + dy)`` |
| channels | 0 walls; 1, 2 the unit's own group (presence, hit points); then each other group, 2 channels each (3 with ``minimap_mode``), cyclically from the group after its own (for group 2 of 4: groups 3, 0, 1) |
| groups | the agent name prefixes in ``possible_agents`` order (combined arms: redmelee, redranged, bluemelee, blueranged); the first half of the groups is one team, the second half the other |
| actions | ``Discrete(move + attack)``: the move cells of a circle of radius ``r_move`` (the centre, i.e. stay, included), then the attack cells of radius ``r_attack`` (centre excluded), each in row order (dy, then dx). Melee ``Discrete(9)``: r 1 and 1; ranged ``Discrete(25)``: r 2 and 2; battle's ``Discrete(21)``: r 2 and 1.5 |
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ...envs.errors import EnvError

# Discrete size -> (move radius, attack radius), MAgent2's unit configs.
RADII = {9: (1.0, 1.0), 25: (2.0, 2.0), 21: (2.0, 1.5)}


@lru_cache(maxsize=None)
def circle(radius: float, centre: bool) -> tuple[tuple[int, int], ...]:
    """The ``(dx, dy)`` offsets of MAgent2's CircleRange(radius) in action order (row by row)."""
    r = int(np.floor(radius))
    return tuple((dx, dy) for dy in range(-r, r + 1) for dx in range(-r, r + 1)
                 if dx * dx + dy * dy <= radius * radius and (centre or (dx, dy) != (0, 0)))


@lru_cache(maxsize=None)
def action_table(n: int) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """(move offsets, attack offsets) of a ``Discrete(n)`` MAgent2 unit; action ``k`` is move
    ``k`` for ``k < len(move)``, else attack ``k - len(move)``."""
    if n not in RADII:
        raise EnvError(f"magent: a unit with Discrete({n}) actions is not one of MAgent2's known unit types "
                       f"({', '.join(f'Discrete({k})' for k in RADII)}).")
    move_r, attack_r = RADII[n]
    move, attack = circle(move_r, True), circle(attack_r, False)
    assert len(move) + len(attack) == n, (n, len(move), len(attack))
    return move, attack


def group_names(agents: list[str]) -> list[str]:
    """The groups (name prefixes before the last ``_``) in the order agents are listed."""
    return list(dict.fromkeys(a.rsplit("_", 1)[0] for a in agents))


def enemy_channels(group: int, groups: int, per_group: int = 2) -> list[int]:
    """Presence channels of the enemy groups in the view of a unit of ``group``: the first half of
    the groups is one team, the second half the other."""
    others = [(group + k) % groups for k in range(1, groups)]   # MAgent2 lists them cyclically after its own
    team = group < groups // 2
    return [1 + per_group * (1 + others.index(h)) for h in others if (h < groups // 2) != team]


def unit_action(view: np.ndarray, n: int, enemy: list[int], per_group: int, groups: int,
                goal: tuple[int, int] | None) -> int:
    """The attack-nearest action of one unit from its ``[H, W, C]`` view: attack the nearest enemy in
    range (ties: lowest hit points), else step towards the nearest enemy in view, else towards
    ``goal`` (an offset ``(dx, dy)`` on the map, or None: stay)."""
    move, attack = action_table(n)
    cy, cx = view.shape[0] // 2, view.shape[1] // 2
    presence = view[:, :, enemy] > 0                                  # [H, W, enemy groups]
    foe = presence.any(-1)
    hp = np.where(presence, view[:, :, [c + 1 for c in enemy]], np.inf).min(-1)
    best, best_key = None, None
    for k, (dx, dy) in enumerate(attack):
        y, x = cy + dy, cx + dx
        if 0 <= y < view.shape[0] and 0 <= x < view.shape[1] and foe[y, x]:
            key = (dx * dx + dy * dy, hp[y, x], k)
            if best_key is None or key < best_key:
                best, best_key = k, key
    if best is not None:
        return len(move) + best
    if foe.any():
        ys, xs = np.nonzero(foe)
        d2 = (ys - cy) ** 2 + (xs - cx) ** 2
        i = int(np.argmin(d2))
        goal = (int(xs[i] - cx), int(ys[i] - cy))
    if goal is None:
        return move.index((0, 0))
    occupied = view[:, :, 0] > 0
    for g in range(groups):
        occupied |= view[:, :, 1 + per_group * g] > 0
    occupied[cy, cx] = False
    gx, gy = goal
    # The free cell nearest the goal, even one no nearer than here (around a friend in the way).
    best, best_key = move.index((0, 0)), None
    for k, (dx, dy) in enumerate(move):
        y, x = cy + dy, cx + dx
        if (dx, dy) == (0, 0) or not (0 <= y < view.shape[0] and 0 <= x < view.shape[1]) or occupied[y, x]:
            continue
        key = ((gx - dx) ** 2 + (gy - dy) ** 2, dx * dx + dy * dy)
        if best_key is None or key < best_key:
            best, best_key = k, key
    return best


def _positions(raw: Any) -> dict[str, tuple[int, int]] | None:
    """Map positions of every live unit by agent name, from a MAgent2 parallel env (None if not one)."""
    grid, handles, names = getattr(raw, "env", None), getattr(raw, "handles", None), getattr(raw, "possible_agents", None)
    if grid is None or handles is None or names is None or not hasattr(grid, "get_pos"):
        return None
    out = {}
    for h in handles:
        for i, p in zip(grid.get_agent_id(h), grid.get_pos(h)):
            out[names[int(i)]] = (int(p[0]), int(p[1]))
    return out


def attack_nearest(observations: dict[str, Any], env: Any, rng: np.random.Generator) -> dict[str, int]:
    """``env.opponents.policy``: every acting unit attacks or approaches its nearest enemy (see the
    module docstring). ``env``: the hdppo adapter of a MAgent2 parallel env."""
    raw = getattr(env, "env", env)
    agents = list(getattr(raw, "possible_agents", None) or env.possible_agents)
    groups = group_names(agents)
    per_group = 3 if getattr(raw, "minimap_mode", False) else 2
    pos = _positions(raw)
    out = {}
    for agent, view in observations.items():
        view = np.asarray(view)
        g = groups.index(agent.rsplit("_", 1)[0])
        enemy = enemy_channels(g, len(groups), per_group)
        goal = None
        if pos is not None and agent in pos:
            team = g < len(groups) // 2
            me = pos[agent]
            foes = [p for a, p in pos.items() if (groups.index(a.rsplit("_", 1)[0]) < len(groups) // 2) != team]
            if foes:
                d = [(p[0] - me[0]) ** 2 + (p[1] - me[1]) ** 2 for p in foes]
                far = foes[int(np.argmin(d))]
                goal = (far[0] - me[0], far[1] - me[1])
        out[agent] = unit_action(view, int(env.action_space(agent).n), enemy, per_group, len(groups), goal)
    return out


def nearest_teacher(raw_obs: dict[str, Any], members: list[str], env: Any) -> int:
    """``teacher.policy`` (kickstarting) for a layer of units: the attack-nearest action of the
    lane's unit, as the scripted team would play it. ``env``: the copy hdppo steps (the adapter
    of a MAgent2 parallel env, with or without ``env.opponents``)."""
    agent = members[0]
    return int(attack_nearest({agent: raw_obs[agent]}, env, np.random.default_rng(0))[agent])


def standing(env: Any) -> list[str]:
    """``env.opponents.alive``: the units still on the map after a step. MAgent2 ends a game when a
    group is wiped out and then terminates every agent, survivors included; its grid has already
    removed the dead, so the ids it still lists are the survivors."""
    raw = getattr(env, "env", env)
    grid, names = raw.env, raw.possible_agents
    return [names[int(i)] for h in raw.handles for i in grid.get_agent_id(h)]


def battle_map(env_obs: dict[str, Any], members: list[str], env: Any) -> np.ndarray:
    """``observation.source`` for the layers above the units: the whole map, ``[H, W, groups]``
    flattened (each group's presence; row ``y``, column ``x``), then each group's live units as a
    share of its size at the start. The same for every lane (``members`` unused: a squad layer
    tells its lanes apart by ``agent_id``). MAgent2's own ``state()`` fails once a group is wiped
    out (the game's last step), which this view does not."""
    raw = getattr(env, "env", env)
    grid = raw.env
    size = int(raw.map_size)
    handles = list(raw.handles)
    out = np.zeros((size, size, len(handles)), np.float32)
    counts = np.zeros(len(handles), np.float32)
    start = _group_sizes(tuple(raw.possible_agents))
    for g, h in enumerate(handles):
        n = grid.get_num(h)
        if n:
            pos = grid.get_pos(h)
            out[pos[:, 1], pos[:, 0], g] = 1.0
            counts[g] = n / max(start[g], 1)
    return np.concatenate([out.reshape(-1), counts])


@lru_cache(maxsize=None)
def _group_sizes(agents: tuple[str, ...]) -> list[int]:
    names = group_names(list(agents))
    return [sum(a.rsplit("_", 1)[0] == n for a in agents) for n in names]
