"""Scripted players of rising strength, for either team, vectorised over copies and units.

Each is a function ``policy(battle, team, rng) -> [N, n]`` int64: the Discrete actions of
``team``'s units (in unit order) for the battle's current state, legal under its masks. They
read the whole battle (a scripted player knows where every enemy is, as SMAC's built-in AI
does), so a target out of sight is still found.

- ``random``: a uniformly random legal action (no-op and moves included).
- ``nearest``: attack the nearest enemy in range; else walk toward the nearest enemy. Healers
  heal the nearest hurt ally in range, else walk toward the nearest hurt ally (or the nearest
  ally).
- ``focus_kite``: every unit attacks the lowest-hp enemy in its range, and walks toward the
  team's prey, the enemy that is weakest counting distance (``hp + 10 * its mean distance
  from the team + its distance from the unit``), so that fire converges on one target; ranged
  units and healers step away from an enemy melee unit that is about to reach them unless they
  can shoot (kiting), and ranged units hold still while reloading when a target is in range;
  healers heal the ally with the lowest hp fraction in range, else walk toward the most hurt
  ally, staying behind their team.

:func:`play` runs two of them against each other over many games at once (the benchmark's
scripted table and the strength test).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .core import ATTACK0, DIRECTIONS, MOVE0, NOOP, Battle, RewardWeights
from .scenarios import MELEE, RANGED, Scenario, get_scenario

Policy = Callable[[Battle, int, np.random.Generator], np.ndarray]

# focus_kite: an enemy melee unit this close (centre to centre) is about to strike.
KITE_DISTANCE = 2.5
# focus_kite: how many hp one map unit of distance is worth when choosing whom to walk to: the
# enemy's mean distance from the team's units, and its distance from the unit itself.
HP_PER_TEAM_DISTANCE = 10.0
HP_PER_OWN_DISTANCE = 1.0


def _team(battle: Battle, team: int) -> slice:
    return slice(team * battle.n, (team + 1) * battle.n)


def random_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random legal action per unit."""
    mask = battle.mask[:, _team(battle, team)]
    return np.argmax(rng.random(mask.shape) * mask, -1)


def _walk(battle: Battle, sl: slice, vec: np.ndarray) -> np.ndarray:
    """The legal move closest in direction to ``vec [N, n, 2]`` (no-op where ``vec`` is 0 or no
    move goes within 90 degrees of it)."""
    moves = battle.mask[:, sl, MOVE0:ATTACK0]                               # [N, n, 8]
    score = np.where(moves, vec @ DIRECTIONS.T, -np.inf)
    best = np.argmax(score, -1)
    good = np.take_along_axis(score, best[..., None], -1)[..., 0] > 1e-9
    return np.where(good, MOVE0 + best, NOOP)


def _first(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(any legal, index of the first legal) along the last axis."""
    return mask.any(-1), np.argmax(mask, -1)


def _toward(battle: Battle, sl: slice, target: np.ndarray, has: np.ndarray) -> np.ndarray:
    """Vectors from ``sl``'s units to units ``target [N, n]`` (0 where ``has`` is False)."""
    nidx = np.arange(battle.N)[:, None]
    vec = np.stack([battle.x[nidx, target] - battle.x[:, sl], battle.y[nidx, target] - battle.y[:, sl]], -1)
    return vec * has[..., None]


def nearest_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """Attack the nearest enemy in range, else walk to the nearest enemy; healers heal the nearest
    hurt ally in range, else walk toward the nearest hurt ally (or the nearest ally)."""
    b, sl = battle, _team(battle, team)
    mask = b.mask[:, sl]
    Ke = b.Ke
    can_att, att = _first(mask[..., ATTACK0:ATTACK0 + Ke])                 # slots are sorted by distance
    can_heal, heal = _first(mask[..., ATTACK0 + Ke:])
    dist = b.dist[:, sl]                                                    # [N, n, U]
    alive = b.alive
    enemy = (b.team != team)[None, None, :]
    d_enemy = np.where(enemy & alive[:, None, :], dist, np.inf)
    foe = np.argmin(d_enemy, -1)
    has_foe = np.isfinite(np.min(d_enemy, -1))
    ally = (b.team == team)[None, None, :] & alive[:, None, :] & ~np.eye(b.U, dtype=bool)[sl][None]
    hurt = ally & (b.hp < b.hp_max)[:, None, :]
    d_hurt = np.where(hurt, dist, np.inf)
    d_ally = np.where(ally, dist, np.inf)
    any_hurt = np.isfinite(d_hurt.min(-1))
    friend = np.where(any_hurt, np.argmin(d_hurt, -1), np.argmin(d_ally, -1))
    has_friend = np.isfinite(d_ally.min(-1))
    healer = b.can_heal[sl][None, :]
    walk_to = np.where(healer, friend, foe)
    has = np.where(healer, has_friend, has_foe)
    move = _walk(b, sl, _toward(b, sl, walk_to, has))
    out = np.where(can_att, ATTACK0 + att, move)
    return np.where(healer & can_heal, ATTACK0 + Ke + heal, out)


def focus_kite_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """Focus fire on the weakest reachable enemy, kite enemy melee with ranged units and healers,
    heal the most hurt ally (see the module docstring)."""
    b, sl = battle, _team(battle, team)
    mask = b.mask[:, sl]
    N, Ke = b.N, b.Ke
    nidx = np.arange(N)[:, None, None]
    hp_ext = np.append(b.hp, np.full((N, 1), np.inf), 1)                    # the empty slot: never chosen
    frac_ext = np.append(b.hp / b.hp_max, np.full((N, 1), np.inf), 1)
    cand = b.cand[:, sl]                                                    # [N, n, 2, K]
    # Attack: the lowest-hp enemy among the legal targets.
    att_mask = mask[..., ATTACK0:ATTACK0 + Ke]
    att_hp = np.where(att_mask, hp_ext[nidx, cand[:, :, 0, :Ke]], np.inf)
    can_att, att = att_mask.any(-1), np.argmin(att_hp, -1)
    # Heal: the ally with the lowest hp fraction among the legal ones.
    heal_mask = mask[..., ATTACK0 + Ke:]
    heal_frac = np.where(heal_mask, frac_ext[nidx, cand[:, :, 1, : b.Ka]], np.inf)
    can_heal, heal = heal_mask.any(-1), np.argmin(heal_frac, -1)

    dist = b.dist[:, sl]                                                    # [N, n, U]
    alive = b.alive[:, None, :]
    enemy = (b.team != team)[None, None, :] & alive
    # Whom to walk to: the team's prey, the weakest enemy counting its distance from the team
    # (so that everyone converges on one), then from the unit.
    live = b.alive[:, sl]
    team_d = (dist * live[..., None]).sum(1, keepdims=True) / np.maximum(live.sum(1), 1)[:, None, None]
    score = np.where(enemy, b.hp[:, None, :] + HP_PER_TEAM_DISTANCE * team_d + HP_PER_OWN_DISTANCE * dist, np.inf)
    prey = np.argmin(score, -1)
    has_prey = np.isfinite(score.min(-1))
    vec = _toward(b, sl, prey, has_prey)
    # Kiting: away from the nearest enemy melee unit within KITE_DISTANCE (ranged units and healers).
    d_melee = np.where(enemy & (b.utype == MELEE)[None, None, :], dist, np.inf)
    brute = np.argmin(d_melee, -1)
    threatened = d_melee.min(-1) <= KITE_DISTANCE
    fragile = (b.utype[sl] != MELEE)[None, :]
    away = -_toward(b, sl, brute, threatened)
    # Ranged units reloading with an enemy in range hold their ground (no walking into melee).
    d_enemy = np.where(enemy, dist, np.inf).min(-1)
    ranged = (b.utype[sl] == RANGED)[None, :]
    holding = ranged & (d_enemy <= b.attack_range[sl][None, :])
    # Healers walk toward the most hurt ally, or trail their team's centroid.
    ally = (b.team == team)[None, None, :] & alive & ~np.eye(b.U, dtype=bool)[sl][None]
    frac = np.where(ally & (b.hp < b.hp_max)[:, None, :], (b.hp / b.hp_max)[:, None, :], np.inf)
    patient = np.argmin(frac, -1)
    any_hurt = np.isfinite(frac.min(-1))
    w = b.alive[:, sl][..., None]
    pos = b.pos[:, sl]
    centre = (pos * w).sum(1, keepdims=True) / np.maximum(w.sum(1, keepdims=True), 1)
    to_centre = centre - pos
    healer = b.can_heal[sl][None, :]
    heal_vec = np.where(any_hurt[..., None], _toward(b, sl, patient, any_hurt), to_centre)
    vec = np.where(healer[..., None], heal_vec, vec)
    vec = np.where((fragile & threatened)[..., None], away, vec)
    move = np.where(holding & ~threatened, NOOP, _walk(b, sl, vec))
    out = np.where(can_att, ATTACK0 + att, move)
    return np.where(healer & can_heal, ATTACK0 + Ke + heal, out)


OPPONENTS: dict[str, Policy] = {
    "random": random_policy,
    "nearest": nearest_policy,
    "focus_kite": focus_kite_policy,
}


def get_policy(name: str) -> Policy:
    try:
        return OPPONENTS[name]
    except KeyError:
        raise ValueError(f"skirmish: unknown scripted player {name!r}; known: {', '.join(OPPONENTS)}") from None


def play(red: str, blue: str, scenario: str | Scenario = "8v8_mixed", games: int = 50, seed: int = 0,
         **battle_kwargs) -> dict[str, float]:
    """``games`` games of scripted ``red`` against scripted ``blue``, all at once; red's view:
    ``{"games", "win", "loss", "draw", "win_rate", "mean_steps", "kills", "losses"}`` (counts,
    then means per game)."""
    rng = np.random.default_rng(seed)
    b = Battle(get_scenario(scenario), games, rng=rng, rewards=RewardWeights(), **battle_kwargs)
    b.reset()
    fr, fb = get_policy(red), get_policy(blue)
    running = np.ones(games, bool)
    outcome = np.zeros(games, np.int64)
    steps = np.zeros(games, np.int64)
    kills = np.zeros(games, np.int64)
    losses = np.zeros(games, np.int64)
    while running.any():
        actions = np.concatenate([fr(b, 0, rng), fb(b, 1, rng)], 1)
        res = b.step(actions)
        done = res.ended & running
        outcome[done] = res.outcome[done, 0]
        steps[done] = b.t[done]
        kills[done], losses[done] = b.kills[done, 0], b.losses[done, 0]
        running &= ~res.ended
        if done.any():  # finished games step on with nobody alive; only their first end counts
            b.alive[done] = False
            b.observe(np.flatnonzero(done))
    win, loss = int((outcome > 0).sum()), int((outcome < 0).sum())
    return {"games": games, "win": win, "loss": loss, "draw": games - win - loss, "win_rate": win / games,
            "mean_steps": float(steps.mean()), "kills": float(kills.mean()), "losses": float(losses.mean())}
