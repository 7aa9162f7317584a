"""Per-agent info dicts and squad summaries: what the layers of a hierarchy read from a step.

:func:`unit_infos` turns one copy's :class:`~.core.StepArrays` into the info dicts the
ParallelEnv returns (and the vector env builds on demand); :func:`squad_summary` and the two
observation views give upper layers a fixed-size picture of the squads.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .core import Battle, StepArrays

SUMMARY_FEATURES = 4  # alive fraction, hp fraction, centroid x, centroid y (over the map size)


def outcome_info(battle: Battle, copy: int, outcome: int) -> dict[str, Any]:
    """The end-of-episode keys, from team 0's side: ``win`` 1/0, ``draw`` 1/0, ``outcome`` +1 won,
    0 draw (time limit, or both sides gone), -1 lost; ``kills``, ``losses`` units; ``episode_steps``."""
    return {"win": int(outcome > 0), "draw": int(outcome == 0), "outcome": int(outcome),
            "kills": int(battle.kills[copy, 0]), "losses": int(battle.losses[copy, 0]),
            "episode_steps": int(battle.t[copy])}


def unit_infos(battle: Battle, res: StepArrays, copy: int, units: list[int], names: list[str]) -> dict[str, dict]:
    """Info dicts of ``units`` (indices, named ``names``) of copy ``copy`` after step ``res``
    (read from ``res`` only, but for the end keys, which read the battle: make those before a reset).

    Every step: ``squad`` (index within the team), ``n_squads``, ``unit_type`` (0 melee, 1 ranged,
    2 healer), ``dealt``, ``dealt_to [S]``,
    ``killed``, ``taken``, ``healed``, ``approach [S]``, ``retreat``, ``cohesion``, ``spacing``
    (distance to the nearest live ally in sight, the sight range when none), ``depth`` (distance
    from the own map edge over the width), ``moved`` (distance moved). On the last step of an
    episode also the keys of :func:`outcome_info`.
    """
    b, c = battle, copy
    squad, utype = b.squad[units].tolist(), b.utype[units].tolist()
    dealt, killed = res.dealt[c, units].tolist(), res.killed[c, units].tolist()
    taken, healed = res.taken[c, units].tolist(), res.healed[c, units].tolist()
    retreat, cohesion = res.retreat[c, units].tolist(), res.cohesion[c, units].tolist()
    spacing, depth, moved = res.spacing[c, units].tolist(), res.depth[c, units].tolist(), res.moved[c, units].tolist()
    dealt_to, approach = res.dealt_to[c], res.approach[c]
    end = outcome_info(b, c, int(res.outcome[c, 0])) if res.ended[c] else None
    out = {}
    for k, (u, name) in enumerate(zip(units, names)):
        info = {"squad": squad[k], "n_squads": b.S, "unit_type": utype[k], "dealt": dealt[k], "dealt_to": dealt_to[u], "killed": killed[k],
                "taken": taken[k], "healed": healed[k], "approach": approach[u], "retreat": retreat[k],
                "cohesion": cohesion[k], "spacing": spacing[k], "depth": depth[k], "moved": moved[k]}
        if end is not None:
            info.update(end)
        out[name] = info
    return out


def squad_summary(battle: Battle) -> np.ndarray:
    """``[N, 2S, 4]`` float32 per squad (team 0's first): live fraction, hp fraction of its full hp,
    centroid x / width, centroid y / height (0, 0 when nobody is alive)."""
    b = battle
    cx, cy, count = b.squad_centroids()
    live, hp = b.squad_strength(count)
    return np.stack([live, hp, cx / b.width, cy / b.height], -1).astype(np.float32)


def team_summary(battle: Battle) -> np.ndarray:
    """``[N, 2, 3]`` float32 per team: live fraction, hp fraction, cooldown-ready fraction of the live units."""
    b = battle
    alive = b.alive.astype(np.float64)
    live = alive @ b.team_onehot
    ready = (alive * (b.cd <= 0)) @ b.team_onehot
    return np.stack([live / b.n, (b.hp @ b.team_onehot) / b.team_hp, ready / np.maximum(live, 1.0)],
                    -1).astype(np.float32)


def _battle_of(env: Any) -> Battle:
    """The battle behind an env a ``module:function`` view receives (hdppo passes its adapter)."""
    inner = getattr(env, "env", env)
    inner = getattr(inner, "unwrapped", inner)
    return inner.battle


def squad_view(env_obs: dict, members: list[str], env: Any) -> np.ndarray:
    """Observation view for a squad layer (``observation.source:
    hdppo.envs.builtin.skirmish:squad_view``): the squad of ``members`` (live fraction, hp
    fraction, centroid), then every enemy squad and every other own squad (live fraction, hp
    fraction, centroid relative to this squad's, over the map size), then the time:
    ``4 * (2S) + 1`` values. Red (team 0) squads only; works with the ParallelEnv."""
    b = _battle_of(env)
    s = int(members[0].rsplit("_", 1)[1]) if members else 0
    squad = int(b.squad[s])
    summ = squad_summary(b)[0]                                              # [2S, 4]
    order = [squad] + [b.S + j for j in range(b.S)] + [j for j in range(b.S) if j != squad]
    out = summ[order].copy()
    out[1:, 2:] -= summ[squad, 2:]
    return np.concatenate([out.reshape(-1), [b.t[0] / b.max_steps]]).astype(np.float32)


def team_view(env_obs: dict, members: list[str], env: Any) -> np.ndarray:
    """Observation view for a strategy layer: every squad's summary (red's first), both teams'
    summaries and the time: ``4 * 2S + 6 + 1`` values. Works with the ParallelEnv; with the
    vector env use ``observation.source: state``."""
    b = _battle_of(env)
    return np.concatenate([squad_summary(b)[0].reshape(-1), team_summary(b)[0].reshape(-1),
                           [b.t[0] / b.max_steps]]).astype(np.float32)
