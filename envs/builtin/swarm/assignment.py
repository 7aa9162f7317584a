"""Goal assignment in swarm: which group flies to which goal region, decided by an upper layer.

The env draws one goal region per group and, by default, sends group g to region g; its start
cells are shuffled, so that in half the episodes of ``8_medium`` the two groups cross each
other's paths. A layer with ``action: {type: discrete, n: G!, to_env: true}`` (one lane for the
whole swarm, ``agents: all``) chooses the assignment instead: its action ``k`` is the k-th
permutation of the regions in :data:`itertools.permutations` order (:func:`permutations`; 0 is
the default, group g to region g), which the env applies through
:meth:`hdppo.envs.builtin.swarm.env.SwarmVector.apply_command` before the layers below act.

The classical baselines (:func:`assignment_teacher`, ``rule=``): ``fixed`` (the env's default),
``shortest`` (the permutation that minimises the summed distance from each group's centroid to
its region's centre, found by enumeration: G! is 2 or 24 here; the Hungarian method's answer),
``longest`` (the maximum, the worst case) and ``random``.

:func:`mission_time` (registered as ``swarm_mission_time``) rewards an assigning layer for
finishing the mission soon and without collisions: ``- time_weight`` per drone still flying after
each step, ``- collision_weight`` per new collision. Unlike the env reward, it does not pay for
progress, which would pay more for longer routes.
"""
from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np

from ...errors import EnvError
from ...rewards import register_reward
from ...teachers import vectorized_teacher

RULES = ("fixed", "shortest", "longest", "random")
TIME_WEIGHT = 0.01        # per drone flying, per 0.1 s step (the env's own reward_time)
COLLISION_WEIGHT = 2.0    # per new collision: more than a crashed drone saves in time (at most 150 * 0.01)


@functools.lru_cache(maxsize=None)
def permutations(groups: int) -> np.ndarray:
    """``[G!, G]``: row k is the k-th assignment, group g -> region ``row[g]`` (row 0: the identity)."""
    return np.array(list(itertools.permutations(range(groups))), np.int64)


def assignment_costs(pos: np.ndarray, active: np.ndarray, group: np.ndarray, region: np.ndarray) -> np.ndarray:
    """``[k, G!]``: for each copy and assignment, the summed distance from each group's centroid
    (of its drones in the field; ``pos [k, n, 3]``, ``active [k, n]``) to its region's centre
    (``region [k, G, 3]``)."""
    G = region.shape[1]
    onehot = (group[:, None] == np.arange(G)[None]).astype(np.float64)          # [n, G]
    w = active[..., None] * onehot[None]                                        # [k, n, G]
    centroid = np.einsum("kng,knd->kgd", w, pos) / np.maximum(w.sum(1), 1.0)[..., None]
    dist = np.linalg.norm(centroid[:, :, None] - region[:, None], axis=-1)      # [k, G group, G region]
    perms = permutations(G)
    return dist[:, np.arange(G)[None], perms].sum(-1)                           # [k, G!]


def choose(rule: str, costs: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """``[k]`` assignment indices by ``rule`` (one of :data:`RULES`) from ``costs [k, G!]``."""
    if rule == "fixed":
        return np.zeros(len(costs), np.int64)
    if rule == "shortest":
        return costs.argmin(1)
    if rule == "longest":
        return costs.argmax(1)
    if rule == "random":
        return (rng or np.random.default_rng()).integers(0, costs.shape[1], len(costs))
    raise ValueError(f"swarm assignment: unknown rule {rule!r}; choose one of {', '.join(RULES)}")


def assignment_rows(layer: str, chosen: np.ndarray, groups: int, scenario: str) -> np.ndarray:
    """``[k, G]`` region of each group for the assignment indices ``chosen [k]`` a layer decided,
    or a clear error naming the layer when an index is not one of the G! assignments."""
    perms = permutations(groups)
    k = np.asarray(chosen, np.int64).reshape(-1)
    if (k < 0).any() or (k >= len(perms)).any():
        raise EnvError(f"swarm: layer {layer!r} chose assignment(s) {sorted(set(k.tolist()))}, but {groups} groups "
                       f"have {len(perms)} assignments of regions (permutations); set the layer's action to "
                       f"{{type: discrete, n: {len(perms)}, to_env: true}} for scenario {scenario!r}.")
    return perms[k]


@vectorized_teacher
def assignment_teacher(env: Any, copies: np.ndarray, members: Any = None, command: Any = None,
                       rule: str = "shortest", **_: Any) -> np.ndarray:
    """``teacher.policy`` of an assigning layer (for kickstarting, or to act as a scripted
    baseline, ``hdppo eval --scripted``): the assignment index ``[k, 1]`` that ``rule`` picks in
    each of ``copies``, from the drones' positions now."""
    s = env.swarm
    idx = np.asarray(copies, np.int64)
    costs = assignment_costs(s.pos[idx], s.active[idx], s.group, s.region[idx])
    return choose(rule, costs, s.rng)[:, None].astype(np.float32)


@register_reward("swarm_mission_time", vectorized=True, info_keys=("collision",))
def mission_time(info: Any, next_obs: np.ndarray, **_: Any) -> np.ndarray:
    """An assigning layer's reward per env step, for each lane (its member drones side by side):
    ``- TIME_WEIGHT * (drones still flying after the step) - COLLISION_WEIGHT * (new collisions)``.
    A drone still flies while its observation is not all zeros (the env zeroes a drone that
    landed or crashed)."""
    next_obs = np.asarray(next_obs)
    B = next_obs.shape[0]
    present = np.asarray(info.present(), bool).reshape(B, -1)
    flying = np.abs(next_obs.reshape(B, present.shape[1], -1)).sum(-1) > 0
    collisions = np.asarray(info.column("collision", 0.0)).reshape(B, -1)
    # a drone that lands on this step has an info (it flew) but a zero observation afterwards
    return -(TIME_WEIGHT * (flying & present).sum(1) + COLLISION_WEIGHT * (collisions * present).sum(1))
