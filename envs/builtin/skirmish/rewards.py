"""Command-following rewards of skirmish, registered for ``reward.intrinsic_fn``.

The commands they interpret (one-hots, as hdppo hands a command to the layer below):

- an **order** to a unit (squad layer -> control layer): ``MultiDiscrete([S, 3, 2])``, received
  as ``[target enemy squad (S) | posture (3): advance, hold, retreat | formation (2): tight,
  loose]``, S the enemy's squad count; or, with a posture per arm, ``MultiDiscrete([S, 3, 3,
  2])``: ``[target | the melee units' posture | the ranged units' and healers' posture |
  formation]`` (:func:`read_order` reads either);
- an **objective** for a squad (strategy layer -> squad layer): ``MultiDiscrete([S + 1] * S)``,
  one entry per own squad, received whole by every squad: ``S + 1`` choices each, engage enemy
  squad ``j`` (``j < S``) or hold (``S``). A plain ``Discrete(S + 1)`` command works too.

Constants below are the weights; a layer that wants others can wrap these functions in its own
``module:function``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...rewards import register_reward
from ...vector import InfoRows
from .scenarios import MELEE

POSTURES = ("advance", "hold", "retreat")
FORMATIONS = ("tight", "loose")
ORDER_EXTRA = len(POSTURES) + len(FORMATIONS)
SPLIT_ORDER_EXTRA = 2 * len(POSTURES) + len(FORMATIONS)   # a posture for melee, one for the others

DAMAGE_WEIGHT = 0.1     # per hp dealt to the commanded squad (a hit is 9-13 hp: about 1)
MOVE_WEIGHT = 0.3       # per map unit of progress in the commanded posture (a step is about 1 unit)
FORMATION_WEIGHT = 0.1  # per map unit outside the commanded formation
TIGHT_RADIUS = 3.0      # tight: within this distance of the squad's centroid
LOOSE_SPACING = 1.5     # loose: at least this far from the nearest ally
TAKEN_WEIGHT = 0.05     # squad objective: per hp the squad lost
HOLD_DEPTH = 0.5        # squad objective "hold": stay within this fraction of the map from the own edge


def _rows(info, grouped: bool = False) -> InfoRows:
    """``info`` as :class:`~hdppo.envs.vector.InfoRows` (the sampler hands one; a caller's list of
    dicts is wrapped), so that every key is read through ``InfoRows.column``."""
    return info if isinstance(info, InfoRows) else InfoRows(lambda: info, len(info), grouped=grouped)


def read_order(command: np.ndarray, n_squads: int, unit_type: Callable[[], np.ndarray],
               who: str = "skirmish_follow_order") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(target squad, posture, formation)`` ``[B]`` int64 of B orders ``command [B, C]`` (one-hots):
    ``C = S + 5`` (one posture for all) or ``S + 8`` (the melee units' posture, then the others'),
    ``S = n_squads``. ``unit_type()`` gives the units' types ``[B]``, called for the second layout
    only (the reward's hot path reads no type column for the first). ``who`` names the caller in
    the error."""
    S, C = int(n_squads), command.shape[1]
    if C not in (S + ORDER_EXTRA, S + SPLIT_ORDER_EXTRA):
        raise ValueError(f"{who}: the order has {C} values; with {S} enemy squads it must be the one-hots of "
                         f"MultiDiscrete([{S}, 3, 2]) ({S + ORDER_EXTRA} values) or, a posture per arm, "
                         f"MultiDiscrete([{S}, 3, 3, 2]) ({S + SPLIT_ORDER_EXTRA} values)")
    target = np.argmax(command[:, :S], 1)
    posture = np.argmax(command[:, S:S + 3], 1)
    if C == S + SPLIT_ORDER_EXTRA:  # the others' posture where the unit is not melee
        posture = np.where(np.asarray(unit_type()) == MELEE, posture, np.argmax(command[:, S + 3:S + 6], 1))
    formation = np.argmax(command[:, C - len(FORMATIONS):], 1)
    return target, posture, formation


@register_reward("skirmish_follow_order", vectorized=True,
                 info_keys=("dealt_to", "approach", "moved", "retreat", "cohesion", "spacing"))
def follow_order(command: np.ndarray, info: dict | list[dict], **_) -> float | np.ndarray:
    """Control layer: how well a unit carried out its squad's order this step.

    ``DAMAGE_WEIGHT * hp dealt to the target squad`` + ``MOVE_WEIGHT *`` (advance: approach to
    the target squad's centroid; hold: minus the distance moved; retreat: distance moved toward
    the own edge) - ``FORMATION_WEIGHT *`` (tight: distance beyond ``TIGHT_RADIUS`` from the
    squad's centroid; loose: spacing short of ``LOOSE_SPACING``).

    One unit (``command [S + 5]`` or ``[S + 8]``, see :func:`read_order`; ``info`` its dict) -> float,
    or B units (``command [B, C]``, ``info`` a list of B dicts) -> ``[B]`` float32."""
    command = np.asarray(command, np.float32)
    if command.ndim == 1:
        return float(follow_order(command[None], [info])[0])  # type: ignore[list-item]
    units = _rows(info)
    rows = np.arange(len(command))
    # The enemy's squad count: the env's (0 for a unit without an info dict), else, where no info
    # has the key, the one-posture layout's.
    squads = units.column("n_squads", 0)
    S = int(squads.max()) if len(squads) and squads.max() > 0 else command.shape[1] - ORDER_EXTRA
    if S < 1:
        raise ValueError(f"skirmish_follow_order: the order has {command.shape[1]} values; it must be the one-hots "
                         f"of MultiDiscrete([S, 3, 2]) (S + {ORDER_EXTRA} values), S the enemy's squads")
    target, posture, formation = read_order(command, S, lambda: units.column("unit_type", -1))
    dealt = units.column("dealt_to", np.zeros(S))[rows, target]
    approach = units.column("approach", np.zeros(S))[rows, target]
    moved, retreat, cohesion = units.column("moved"), units.column("retreat"), units.column("cohesion")
    # Units that are gone have no spacing to keep.
    spacing = units.column("spacing", LOOSE_SPACING)
    move = np.select([posture == 0, posture == 1], [approach, -moved], retreat)
    off = np.where(formation == 0, np.maximum(cohesion - TIGHT_RADIUS, 0.0), np.maximum(LOOSE_SPACING - spacing, 0.0))
    return (DAMAGE_WEIGHT * dealt + MOVE_WEIGHT * move - FORMATION_WEIGHT * off).astype(np.float32)


@register_reward("skirmish_squad_objective", vectorized=True,
                 info_keys=("dealt", "dealt_to", "approach", "taken", "depth"))
def squad_objective(command: np.ndarray, info: dict | list[dict], **_) -> float | np.ndarray:
    """Squad layer: how well a squad pursued the strategy's objective for it this step.

    Engage enemy squad j: ``DAMAGE_WEIGHT * hp dealt to j + DAMAGE_WEIGHT * approach to j`` summed
    over the squad's units, ``- TAKEN_WEIGHT * hp lost``. Hold: ``DAMAGE_WEIGHT * hp dealt to anyone
    - DAMAGE_WEIGHT * hp lost - FORMATION_WEIGHT * depth beyond HOLD_DEPTH`` summed over the units.

    One squad (``command [C]``, ``info`` its agents' dicts by name) -> float, or B squads
    (``command [B, C]``, ``info`` a list of B such dicts) -> ``[B]`` float32. ``C`` is ``S + 1``
    (a Discrete objective) or ``S * (S + 1)`` (the strategy's MultiDiscrete, one entry per squad:
    the squad's own entry is read)."""
    command = np.asarray(command, np.float32)
    if command.ndim == 1:
        return float(squad_objective(command[None], [info])[0])  # type: ignore[list-item]
    rows = _rows(info, grouped=True)
    B = len(command)
    out = np.zeros(B, np.float32)
    here = rows.present().reshape(B, -1)   # [B, m] the squad's units that were alive before the step
    lanes = here.any(1)
    if not lanes.any():
        return out
    dealt_to = rows.column("dealt_to").reshape(B, here.shape[1], -1)  # [B, m, S]
    S = dealt_to.shape[-1]
    n_obj = S + 1
    c = command
    if command.shape[1] != n_obj:  # the strategy's whole MultiDiscrete: the squad's own entry
        first = here.argmax(1)  # the squad's first unit alive before the step
        squad = rows.column("squad").reshape(B, -1)[np.arange(B), first].astype(np.int64)
        if (command.shape[1] < (squad[lanes] + 1) * n_obj).any():
            raise ValueError(f"skirmish_squad_objective: a command of {command.shape[1]} values; it must be "
                             f"{n_obj} (Discrete(S + 1)) or S own squads times {n_obj}")
        c = command[np.arange(B)[:, None], np.minimum(squad, command.shape[1] // n_obj - 1)[:, None] * n_obj + np.arange(n_obj)]
    obj = c.argmax(1)
    w = here.astype(np.float64)  # sums over the units with an info dict
    taken = (rows.column("taken").reshape(B, -1) * w).sum(1)
    target = np.minimum(obj, S - 1)[:, None, None]
    gain = ((np.take_along_axis(dealt_to, target, 2)[..., 0]
             + np.take_along_axis(rows.column("approach").reshape(B, here.shape[1], -1), target, 2)[..., 0]) * w).sum(1)
    dealt = (rows.column("dealt").reshape(B, -1) * w).sum(1)
    deep = (np.maximum(rows.column("depth").reshape(B, -1) - HOLD_DEPTH, 0.0) * w).sum(1)
    value = np.where(obj < S, DAMAGE_WEIGHT * gain - TAKEN_WEIGHT * taken,
                     DAMAGE_WEIGHT * (dealt - taken) - FORMATION_WEIGHT * deep)
    out[lanes] = value[lanes]
    return out
