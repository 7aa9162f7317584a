"""Scenarios: the two SMT2020 fabs as distributed, and scaled-down fabs cut from them.

| scenario | fab | tool groups | route | tools | releases | initial WIP | horizon |
|---|---|---|---|---|---|---|---|
| ``hvlm`` | HVLM (2 products) | all 106 | full (583 / 343 steps) | as the file (1443) | order.txt | WIP.txt (2255 lots) | ``days`` (default 30) |
| ``lvhm`` | LVHM (10 products) | all 106 | full (242-583 steps) | as the file (1313) | order.txt | WIP.txt (2156 lots) | ``days`` (default 30) |
| ``hvlm_mini`` | HVLM | the 8 busiest of the first 150 steps, plus a batching and a setup group | those steps at those groups | ``ceil(0.1 * n)`` | order.txt's mix, rate set for 90% utilization at the busiest group | generated along the route | 7 days |
| ``lvhm_mini`` | LVHM | as hvlm_mini | as hvlm_mini | as hvlm_mini | as hvlm_mini | generated | 7 days |

A scaled-down fab keeps the data's processing times, batch sizes, setups, breakdowns and PMs of
the groups it keeps, and the order mix and priorities; its due dates are ``release +
due_factor * raw processing time`` of its (shorter) route. Build your own with :class:`Scenario`.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

import numpy as np

from ...errors import EnvError
from .data import Route, load_fab
from .sim import Model


@dataclass(frozen=True)
class Scenario:
    fab: str = "HVLM"
    days: float = 30.0
    mini: bool = False
    route_steps: int = 150        # mini: the first steps of each route to cut from
    n_groups: int = 8             # mini: the busiest groups kept (plus a batching and a setup group)
    tool_scale: float = 0.1       # mini: tools = ceil(tool_scale * n)
    utilization: float = 0.9      # mini: the busiest kept group's expected utilization (releases scaled to it)
    due_factor: float = 2.0       # mini: due date allowance over the raw processing time
    wip_factor: float = 1.5       # mini: initial WIP = release rate * raw processing time * wip_factor
    due_scale: float = 1.0        # full fabs: the files' due allowances scaled by this


SCENARIOS: dict[str, Scenario] = {
    "hvlm": Scenario("HVLM"),
    "lvhm": Scenario("LVHM"),
    "hvlm_mini": Scenario("HVLM", days=7.0, mini=True),
    "lvhm_mini": Scenario("LVHM", days=7.0, mini=True),
}


def get_scenario(scenario: str | Scenario, days: float | None = None) -> Scenario:
    if isinstance(scenario, Scenario):
        sc = scenario
    elif scenario in SCENARIOS:
        sc = SCENARIOS[scenario]
    else:
        close = difflib.get_close_matches(str(scenario).lower(), list(SCENARIOS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise EnvError(f"fab scenario {scenario!r} is unknown; use one of {sorted(SCENARIOS)} "
                       "(hvlm/lvhm: the SMT2020 fabs in full; *_mini: scaled down for tests and training), "
                       f"or pass a hdppo.envs.builtin.fab.Scenario.{hint}")
    if days is not None:
        if isinstance(days, bool) or not isinstance(days, (int, float)) or not days > 0:
            raise EnvError(f"fab days={days!r}: the horizon must be a positive number of days (e.g. days: 7).")
        sc = replace(sc, days=float(days))
    return sc


def _subset(r: Route, keep: np.ndarray) -> Route:
    idx = np.flatnonzero(keep)
    pos = -np.ones(len(r), np.int64)
    pos[idx] = np.arange(len(idx))
    # Rework goes back to the first kept step at or after the original target.
    to = np.array([pos[np.searchsorted(idx, t)] if t >= 0 and np.searchsorted(idx, t) < len(idx) else -1
                   for t in r.rework_to[idx]], np.int64)
    to = np.where(to > np.arange(len(idx)), -1, to)
    kw = {f: getattr(r, f)[idx] for f in ("group", "ptime", "pspread", "per", "part_interval", "batch_interval",
                                         "batch_min", "batch_max", "setup_time", "sample", "rework_p", "step_id")}
    return Route(part=r.part, setup=[r.setup[i] for i in idx], rework_to=to, **kw)


def build_model(scenario: str | Scenario = "hvlm_mini", days: float | None = None, data_dir=None,
                rng_seed: int = 0) -> Model:
    """The :class:`Model` the simulator runs for a scenario."""
    sc = get_scenario(scenario, days)
    data = load_fab(sc.fab, data_dir)
    horizon = sc.days * 1440.0
    if not sc.mini:
        used = np.unique(np.concatenate([r.group for r in data.routes]))
        return Model(data, data.routes, data.tools.copy(), [dict(o) for o in data.orders], list(data.wip), horizon,
                     used, sc.due_scale)
    full = Model(data, data.routes, data.tools.copy(), [dict(o) for o in data.orders], [], horizon,
                 np.arange(len(data.groups)))
    util = full.utilization()
    head = np.zeros(len(data.groups), bool)
    for r in data.routes:
        head[r.group[:sc.route_steps]] = True
    head &= ~full.delay
    cand = np.flatnonzero(head)
    keep = set(cand[np.argsort(-util[cand])][:sc.n_groups].tolist())
    setup_groups = {int(r.group[k]) for r in data.routes for k in range(min(len(r), sc.route_steps)) if r.setup[k]}
    batch_groups = [g for g in cand if data.batching[g]]
    if batch_groups and not keep & set(batch_groups):
        keep.add(int(max(batch_groups, key=lambda g: util[g])))
    if setup_groups and not keep & setup_groups:
        keep.add(int(max(setup_groups, key=lambda g: util[g])))
    kept = np.zeros(len(data.groups), bool)
    kept[list(keep)] = True
    routes = []
    for r in data.routes:
        mask = np.zeros(len(r), bool)
        mask[:sc.route_steps] = True
        routes.append(_subset(r, mask & kept[r.group]))
    tools = np.where(kept, np.ceil(sc.tool_scale * data.tools), 0).astype(np.int64)
    orders = [dict(o) for o in data.orders]
    probe = Model(data, routes, np.maximum(tools, 1), orders, [], horizon, np.flatnonzero(kept))
    u = probe.utilization()[kept].max()
    scale = sc.utilization / u
    for o in orders:
        o["interval"] = o["interval"] / scale
    raw = [float(probe.remaining[k][0]) for k in range(len(routes))]
    for o in orders:
        o["due_offset"] = sc.due_factor * raw[o["part"]]
    # Initial WIP: lots spread evenly along each route, as many as Little's law gives at the
    # raw time times wip_factor; due dates drawn around their remaining allowance.
    rng = np.random.default_rng(rng_seed)
    wip = []
    for o in orders:
        n = int(round(raw[o["part"]] * sc.wip_factor / o["interval"] * o["per_release"]))
        for j in range(n):
            s = int(rng.integers(0, len(routes[o["part"]])))
            rem = float(probe.remaining[o["part"]][s])
            due = sc.due_factor * rem + rng.uniform(-0.5, 0.5) * (sc.due_factor - 1.0) * raw[o["part"]]
            wip.append(dict(part=o["part"], priority=o["priority"], pieces=o["pieces"], step=s, due=due))
    m = Model(data, routes, tools, orders, wip, horizon, np.flatnonzero(kept))
    return m


def describe(model: Model) -> dict:
    """Counts of a model: groups used, tools, route steps, orders, initial WIP."""
    return {"groups": int(len(model.used_groups)), "tools": int(model.tools[model.used_groups].sum()),
            "route_steps": [len(r) for r in model.routes], "orders": len(model.orders), "wip": len(model.wip),
            "batching_groups": int(model.data.batching[model.used_groups].sum()),
            "max_utilization": float(model.utilization()[model.used_groups].max())}
