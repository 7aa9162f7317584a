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
- ``focus_no_overkill``: ``focus_kite`` whose units also split their fire so that no shot is
  wasted: taken in unit order, each attacker skips an enemy that the attackers before it already
  bring to 0 hp this step and takes the next weakest. Stronger than ``focus_kite`` (56% of 1000
  games against it won, 41% lost), it is beyond the issue's ladder of three, and the micro that
  ``order_teacher(no_overkill=True)`` teaches.

Scripted *commanders* (:data:`COMMANDERS`) give squad orders without learning, carried out by
``focus_kite``'s micro (:func:`follow_order_policy`): ``squad_focus`` sends every squad, tight,
onto the enemy squad with the least hp left; ``healer_first`` onto the one with the most live
healers (then the least hp). They are the baseline a hierarchy's learned squad and strategy
layers are measured against.

:func:`play` runs two of them against each other over many games at once (the benchmark's
scripted table and the strength test). :func:`order_teacher` and :func:`micro_teacher` hand the
micro to a control layer as its kickstarting teacher, under a squad layer and flat.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...teachers import vectorized_teacher
from .core import ATTACK0, DIRECTIONS, MOVE0, NOOP, Battle, RewardWeights
from .rewards import ORDER_EXTRA, TIGHT_RADIUS, read_order  # follow_order walks back within the reward's tight radius
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


_DX, _DY = DIRECTIONS[:, 0], DIRECTIONS[:, 1]


def _walk(battle: Battle, sl: slice, vx: np.ndarray, vy: np.ndarray) -> np.ndarray:
    """The legal move closest in direction to ``(vx, vy) [N, n]`` (no-op where the vector is 0 or
    no legal move goes within 90 degrees of it)."""
    moves = battle.mask[:, sl, MOVE0:ATTACK0]                               # [N, n, 8]
    score = np.where(moves, vx[..., None] * _DX + vy[..., None] * _DY, -np.inf)
    best = np.argmax(score, -1)
    return np.where(score.max(-1) > 1e-9, MOVE0 + best, NOOP)


def _toward(battle: Battle, sl: slice, target: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectors ``(vx, vy)`` from ``sl``'s units to units ``target [N, n]`` (0 where ``has`` is False)."""
    flat = (np.arange(battle.N) * battle.U)[:, None] + target
    return (battle.x.take(flat) - battle.x[:, sl]) * has, (battle.y.take(flat) - battle.y[:, sl]) * has


def _sides(battle: Battle, team: int):
    """(own slice, enemy slice, [N, n, n] distances to the enemy's units, to the own units)."""
    own, other = _team(battle, team), _team(battle, 1 - team)
    return own, other, battle.dist[:, own, other], battle.dist[:, own, own]


def nearest_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """Attack the nearest enemy in range, else walk to the nearest enemy; healers heal the nearest
    hurt ally in range, else walk toward the nearest hurt ally (or the nearest ally)."""
    b = battle
    own, other, d_foe, d_own = _sides(b, team)
    mask = b.mask[:, own]
    Ke = b.Ke
    can_att, att = _first(mask[..., ATTACK0:ATTACK0 + Ke])                 # slots are sorted by distance
    can_heal, heal = _first(mask[..., ATTACK0 + Ke:])
    d_enemy = np.where(b.alive[:, None, other], d_foe, np.inf)
    foe = np.argmin(d_enemy, -1) + other.start
    has_foe = d_enemy.min(-1) < np.inf
    ally = b.alive[:, None, own] & b._not_me
    d_ally = np.where(ally, d_own, np.inf)
    d_hurt = np.where(ally & (b.hp[:, own] < b.hp_max[own])[:, None, :], d_own, np.inf)
    any_hurt = d_hurt.min(-1) < np.inf
    friend = np.where(any_hurt, np.argmin(d_hurt, -1), np.argmin(d_ally, -1)) + own.start
    has_friend = d_ally.min(-1) < np.inf
    healer = b.can_heal[own][None, :]
    move = _walk(b, own, *_toward(b, own, np.where(healer, friend, foe), np.where(healer, has_friend, has_foe)))
    out = np.where(can_att, ATTACK0 + att, move)
    return np.where(healer & can_heal, ATTACK0 + Ke + heal, out)


def _first(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(any legal, index of the first legal) along the last axis."""
    return mask.any(-1), np.argmax(mask, -1)


def focus_kite_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """Focus fire on the weakest reachable enemy, kite enemy melee with ranged units and healers,
    heal the most hurt ally (see the module docstring)."""
    return _focus_kite(battle, team)


def focus_no_overkill_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """``focus_kite`` with its fire split so that no shot goes to an enemy already killed this step."""
    return _focus_kite(battle, team, no_overkill=True)


def _split_fire(b: Battle, own: slice, foes: np.ndarray, legal: np.ndarray, score: np.ndarray,
                att: np.ndarray, firing: np.ndarray) -> np.ndarray:
    """Attack slots ``att [N, n]`` re-chosen so that no shot is wasted: in unit order, each unit
    that fires (``firing``) keeps its preference (``score [N, n, Ke]``, lower first, over the
    legal slots ``legal``) but ranks its targets by the hp they will have after the shots of the
    units before it, and skips those already at 0 (it keeps its choice when every legal target is).
    ``foes [N, n, Ke]``: the unit index behind each slot."""
    rows = np.arange(b.N)
    hp_left = b.hp.copy()
    hp_now = np.take_along_axis(b.hp, foes.reshape(b.N, -1), 1).reshape(foes.shape)   # [N, n, Ke]
    att = att.copy()
    for u, damage in enumerate(b.damage[own]):
        left = hp_left[rows[:, None], foes[:, u]]                                      # [N, Ke]
        alive_after = legal[:, u] & (left > 0)
        pick = np.argmin(np.where(alive_after, score[:, u] - hp_now[:, u] + left, np.inf), -1)
        shoots = firing[:, u] & alive_after.any(-1)
        att[:, u] = np.where(shoots, pick, att[:, u])
        hp_left[rows[shoots], foes[rows[shoots], u, pick[shoots]]] -= damage
    return att


# follow_order: a target outside the ordered squad costs this much hp in the choice of whom to hit.
OFF_TARGET_HP = 1000.0


def follow_order_policy(battle: Battle, team: int, target: np.ndarray, posture: np.ndarray,
                        formation: np.ndarray, no_overkill: bool = False, retreat_fire: bool = False) -> np.ndarray:
    """``focus_kite`` carrying out a squad's orders, per unit ``[N, n]``: attack the lowest-hp enemy in
    range, one of the ``target`` enemy squad first; under posture 0 (advance) walk toward that
    squad's weakest unit (counting distance, as ``focus_kite`` picks its prey), under 1 (hold) stay,
    under 2 (retreat) walk toward the own map edge instead of attacking or healing; under formation 0 (tight)
    walk back to the squad's centroid when farther than ``TIGHT_RADIUS``. Kiting, healing and the
    ranged units' hold while reloading are ``focus_kite``'s. The order layout is
    :mod:`.rewards`' ``skirmish_follow_order``: this is the teacher of a control layer under a
    squad layer (:func:`order_teacher`). ``no_overkill``: ``focus_no_overkill``'s split fire.
    ``retreat_fire``: a fighting withdrawal, where under retreat the ranged units and healers still
    shoot and heal whenever they can (walking back in between) and only the melee units disengage."""
    return _focus_kite(battle, team, (np.asarray(target), np.asarray(posture), np.asarray(formation)), no_overkill,
                       retreat_fire)


def _focus_kite(b: Battle, team: int, order: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                no_overkill: bool = False, retreat_fire: bool = False) -> np.ndarray:
    """``focus_kite``, or with ``order`` = (target squad, posture, formation) ``[N, n]`` each,
    :func:`follow_order_policy`; ``no_overkill``: its fire split by :func:`_split_fire`;
    ``retreat_fire``: ranged units and healers keep firing and healing under retreat."""
    own, other, d_foe, _ = _sides(b, team)
    mask = b.mask[:, own]
    N, U, Ke, Ka = b.N, b.U, b.Ke, b.Ka
    base = (np.arange(N) * U)[:, None, None]
    cand = np.minimum(b.cand[:, own], U - 1)                                 # empty slots are masked out below
    frac = b.hp / b.hp_max
    # Attack: the lowest-hp enemy among the legal targets (the ordered squad's first); heal: the
    # lowest hp fraction.
    att_mask, heal_mask = mask[..., ATTACK0:ATTACK0 + Ke], mask[..., ATTACK0 + Ke:]
    foes = cand[:, :, 0, :Ke]
    att_score = b.hp.take(base + foes)
    if order is not None:
        att_score = att_score + OFF_TARGET_HP * (b.squad[foes] != order[0][..., None])
    att = np.argmin(np.where(att_mask, att_score, np.inf), -1)
    heal = np.argmin(np.where(heal_mask, frac.take(base + cand[:, :, 1, :Ka]), np.inf), -1)
    can_att, can_heal = att_mask.any(-1), heal_mask.any(-1)

    foe_alive = b.alive[:, None, other]                                      # [N, 1, n]
    live = b.alive[:, own]
    # Whom to walk to: the team's prey, the weakest enemy counting its distance from the team
    # (so that everyone converges on one), then from the unit; under orders, within the target
    # squad while it has anyone standing.
    team_d = (d_foe * live[..., None]).sum(1, keepdims=True) / np.maximum(live.sum(1), 1)[:, None, None]
    preyable = foe_alive
    if order is not None:
        in_target = b.squad[other][None, None, :] == order[0][..., None]    # [N, n, n]
        preyable = foe_alive & np.where((foe_alive & in_target).any(-1, keepdims=True), in_target, True)
    score = np.where(preyable, b.hp[:, None, other] + HP_PER_TEAM_DISTANCE * team_d + HP_PER_OWN_DISTANCE * d_foe,
                     np.inf)
    vx, vy = _toward(b, own, np.argmin(score, -1) + other.start, score.min(-1) < np.inf)
    # Kiting: away from the nearest enemy melee unit within KITE_DISTANCE (ranged units and healers).
    d_melee = np.where(foe_alive & (b.utype[other] == MELEE), d_foe, np.inf)
    threatened = d_melee.min(-1) <= KITE_DISTANCE
    ax, ay = _toward(b, own, np.argmin(d_melee, -1) + other.start, threatened)
    fleeing = (b.utype[own] != MELEE) & threatened
    # Ranged units reloading with an enemy in range hold their ground (no walking into melee).
    d_enemy = np.where(foe_alive, d_foe, np.inf).min(-1)
    holding = (b.utype[own] == RANGED) & (d_enemy <= b.attack_range[own]) & ~threatened
    # Healers walk toward the most hurt ally, or trail their team's centroid.
    hurt = np.where(b.alive[:, None, own] & b._not_me & (b.hp[:, own] < b.hp_max[own])[:, None, :],
                    frac[:, None, own], np.inf)
    any_hurt = hurt.min(-1) < np.inf
    px, py = _toward(b, own, np.argmin(hurt, -1) + own.start, any_hurt)
    count = np.maximum(live.sum(1, keepdims=True), 1)
    cx = (b.x[:, own] * live).sum(1, keepdims=True) / count - b.x[:, own]
    cy = (b.y[:, own] * live).sum(1, keepdims=True) / count - b.y[:, own]
    healer = b.can_heal[own][None, :]
    if order is not None:
        _, posture, formation = order
        # Tight: back to the squad's centroid when strayed; retreat: toward the own edge; hold: stay.
        same = (b.squad[own][:, None] == b.squad[own][None, :])[None] & live[:, None, :]     # [N, n, n]
        size = np.maximum(same.sum(-1), 1)
        sx = (same * b.x[:, None, own]).sum(-1) / size - b.x[:, own]
        sy = (same * b.y[:, None, own]).sum(-1) / size - b.y[:, own]
        strayed = (formation == 0) & (np.hypot(sx, sy) > TIGHT_RADIUS)
        vx, vy = np.where(strayed, sx, vx), np.where(strayed, sy, vy)
        holding = holding | ((posture == 1) & ~strayed)
    vx = np.where(fleeing, -ax, np.where(healer, np.where(any_hurt, px, cx), vx))
    vy = np.where(fleeing, -ay, np.where(healer, np.where(any_hurt, py, cy), vy))
    if order is not None:  # retreat: everyone (healers and kiters too) walks to the own edge, no attacks
        retreat = order[1] == 2
        vx, vy = np.where(retreat, b.base_dir[own][None, :], vx), np.where(retreat, 0.0, vy)
        holding, fleeing = holding & ~retreat, fleeing & ~retreat
        # A fighting withdrawal: the ranged units and healers shoot and heal when they can and walk
        # back in between (their cooldowns leave every other step to walking); melee disengages.
        silenced = retreat & (b.utype[own] == MELEE)[None, :] if retreat_fire else retreat
        can_att, can_heal = can_att & ~silenced, can_heal & ~silenced
    if no_overkill:
        att = _split_fire(b, own, foes, att_mask, att_score, att, can_att)
    move = np.where(holding & ~fleeing, NOOP, _walk(b, own, vx, vy))
    out = np.where(can_att, ATTACK0 + att, move)
    return np.where(healer & can_heal, ATTACK0 + Ke + heal, out)


OPPONENTS: dict[str, Policy] = {
    "random": random_policy,
    "nearest": nearest_policy,
    "focus_kite": focus_kite_policy,
    "focus_no_overkill": focus_no_overkill_policy,
}


def _squad_orders(b: Battle, team: int, target: np.ndarray, formation: int) -> np.ndarray:
    """:func:`follow_order_policy` with every own squad ordered to advance on ``target [N, S]``."""
    own = b.squad[_team(b, team)]
    return follow_order_policy(b, team, target[:, own], np.zeros((b.N, b.n), np.int64),
                               np.full((b.N, b.n), formation, np.int64))


def _enemy_squads(b: Battle, team: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per enemy squad ``[N, S]``: live units, summed hp, live healers."""
    other = _team(b, 1 - team)
    members = np.eye(b.S)[b.squad[other]]                                     # [n, S]
    alive = b.alive[:, other].astype(np.float64)
    healers = alive * b.can_heal[other]
    return alive @ members, (b.hp[:, other] * alive) @ members, healers @ members


def squad_focus_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """A scripted commander: every own squad advances, tight, on the enemy squad with the least hp
    left (concentration of force), its units carrying the order out with ``focus_kite``'s micro
    (:func:`follow_order_policy`)."""
    live, hp, _ = _enemy_squads(battle, team)
    target = np.argmin(np.where(live > 0, hp, np.inf), -1)
    return _squad_orders(battle, team, np.repeat(target[:, None], battle.S, 1), 0)


def healer_first_policy(battle: Battle, team: int, rng: np.random.Generator) -> np.ndarray:
    """A scripted commander: as :func:`squad_focus_policy`, but on the enemy squad with the most
    live healers first (the least hp among those): cut the enemy's healing, then focus."""
    live, hp, healers = _enemy_squads(battle, team)
    score = np.where(live > 0, hp - 1e6 * healers, np.inf)
    return _squad_orders(battle, team, np.repeat(np.argmin(score, -1)[:, None], battle.S, 1), 0)


# Commanders: scripted squad orders over focus_kite's micro, the baseline for learned upper layers
# (a hierarchy's squad and strategy layers give the same kind of orders). Usable as players too.
COMMANDERS: dict[str, Policy] = {
    "squad_focus": squad_focus_policy,
    "healer_first": healer_first_policy,
}


def get_policy(name: str) -> Policy:
    try:
        return OPPONENTS[name] if name in OPPONENTS else COMMANDERS[name]
    except KeyError:
        raise ValueError(f"skirmish: unknown scripted player {name!r}; known: "
                         f"{', '.join([*OPPONENTS, *COMMANDERS])}") from None


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


@vectorized_teacher
def order_teacher(env, copies: np.ndarray, members: list[list[int]], command: np.ndarray | None,
                  no_overkill: bool = False, retreat_fire: bool = False, **_) -> np.ndarray:
    """``teacher.policy`` of a control layer under a squad layer (kickstarting): for each unit that
    decided, :func:`follow_order_policy`'s action for the order it received (the one-hots of
    ``MultiDiscrete([S, 3, 2])``, or ``[S, 3, 3, 2]`` with a posture per arm, as
    ``skirmish_follow_order`` reads them: :func:`.rewards.read_order`). ``env``: the batched
    :class:`~.vector.SkirmishVector` (``env.type: vector``); red is team 0. ``no_overkill``
    (``teacher.kwargs``): teach ``focus_no_overkill``'s split fire; ``retreat_fire``: the ranged units and
    healers keep firing and healing under a retreat order (:func:`follow_order_policy`)."""
    b = env.battle
    if command is None:
        raise ValueError(f"skirmish order_teacher: the layer's command has no values; it must be a squad layer's "
                         f"order, the one-hots of MultiDiscrete([{b.S}, 3, 2]) ({b.S + ORDER_EXTRA} values)")
    units = np.fromiter((m[0] for m in members), np.int64, len(members))
    parts = read_order(np.asarray(command), b.S, lambda: b.utype[units], who="skirmish order_teacher")
    order = [np.zeros((b.N, b.n), np.int64) for _ in range(3)]
    for k in range(3):
        order[k][copies, units] = parts[k]
    return follow_order_policy(b, 0, *order, no_overkill=bool(no_overkill), retreat_fire=bool(retreat_fire))[copies, units]


@vectorized_teacher
def micro_teacher(env, copies: np.ndarray, members: list[list[int]], command: np.ndarray | None = None,
                  no_overkill: bool = False, **_) -> np.ndarray:
    """``teacher.policy`` of a control layer with no layer above it (flat MAPPO): ``focus_kite``'s
    action for each unit that decided, no order read, the kickstart :func:`order_teacher` gives a
    control layer under a squad layer, so that a flat baseline starts from the same micro. ``env``:
    the batched :class:`~.vector.SkirmishVector`; red is team 0. ``no_overkill``: ``focus_no_overkill``."""
    b = env.battle
    units = np.fromiter((m[0] for m in members), np.int64, len(members))
    return _focus_kite(b, 0, no_overkill=bool(no_overkill))[copies, units]
