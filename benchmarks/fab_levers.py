"""What else a dispatcher or planner can move on the mini fab, beside cr, with common random numbers.

Issue 12 asks for a mean tardiness 15% below the best rule with throughput no lower. This script
asks which of the levers within reach of a dispatcher or a release planner could get there at
all. Each lever runs the simulator's fast path (no env, no policy) on the held-out seeds of
``benchmarks/fab.py`` (``--seed0``, ``--seeds``). Common random numbers give every variant a
seed's same breakdowns and process times. Each row is then paired with cr on the same seed.

The levers:

* other classic rules in place of cr:
  * minimum slack;
  * ATC (apparent tardiness cost, look-ahead ``k`` x 1 day);
  * cr with an SPT tie-break;
  * LWKR (least work remaining), and cr with the late lots first, by least work remaining;
* cr with the next step's queue: shortest-next-queue (lots per working tool of the group the lot
  goes to next, ``w`` per lot) added to the cr key, so that a lot that would feed a starved group
  goes first;
* the furnace's wait for a fuller batch (``batch_wait``, minutes);
* cr with a penalty for lots that need a setup on the idle tools;
* release schedules: x0.8 (or x1.2) of the order rate from a given day on, or up to it;
* CONWIP (constant work in process, Spearman et al. 1990): orders still arrive at the order rate,
  but a lot enters the fab only while the WIP is below a cap (a fraction of the WIP at the start);
  the others wait in a backlog, hot lots first, then by order time, and keep the due date their
  order gave them. Backlogged lots past due at the end are counted with the late lots left.

Usage:
    python benchmarks/fab_levers.py [--seeds 20] [--seed0 10000] [--out fab_levers]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import machine_line, stat, write_report  # noqa: E402
from fab import paired_tardiness, sim_seed  # noqa: E402
from machine import machine_info  # noqa: E402

METRICS = ("mean_tardiness_h", "throughput_lots_per_day", "released", "late_wip_end")
DAY = 1440.0


def _sim_class():
    from hdppo.envs.builtin.fab import FabSim

    class KeyedSim(FabSim):
        """FabSim whose 'cr' picks by ``key_fn(sim, lots)`` instead (a rule the env does not offer)."""

        def __init__(self, *args, key_fn=None, **kwargs):
            self.key_fn = key_fn
            super().__init__(*args, **kwargs)

        def key(self, lots, rule):
            return self.key_fn(self, lots) if self.key_fn is not None and rule == "cr" else super().key(lots, rule)
    return KeyedSim


def _conwip_class(base):
    from collections import deque

    class ConwipSim(base):
        """``base`` with CONWIP release: a lot ordered while the WIP is at ``wip_cap`` waits in a
        backlog until a completion frees a place (see the module docstring)."""

        def __init__(self, *args, wip_cap: float = 1.0, **kwargs):
            self.backlog: dict[int, deque] = {}
            super().__init__(*args, **kwargs)  # pushes the first releases; none runs before the cap is set
            self.wip_cap = wip_cap * self.n_wip  # a fraction of the WIP at the start

        def _release(self, k: int) -> None:
            from hdppo.envs.builtin.fab.sim import RELEASE

            o = self.m.orders[k]
            for _ in range(o["per_release"]):
                self.backlog.setdefault(-o["priority"], deque()).append((k, self.now))
            self._push(self.now + o["interval"] / self.rate, RELEASE, k)
            self._drain()

        def _complete(self, lot: int) -> None:
            super()._complete(lot)
            self._drain()

        def _drain(self) -> None:
            while self.n_wip + 1 <= self.wip_cap and any(self.backlog.values()):
                k, ordered = self.backlog[min(p for p, q in self.backlog.items() if q)].popleft()
                o = self.m.orders[k]
                lot = self._new_lot(o["part"], o["priority"], o["pieces"], ordered + o["due_offset"] * self.m.due_scale,
                                    self.now, 0)
                self.stats.released += 1
                self._to_step(lot)

        def summary(self) -> dict[str, float]:
            out = super().summary()
            waiting = [(k, t) for q in self.backlog.values() for k, t in q]
            late = sum(t + self.m.orders[k]["due_offset"] * self.m.due_scale <= self.now for k, t in waiting)
            out["late_wip_end"] += float(late)
            out["backlog_end"] = float(len(waiting))
            return out
    return ConwipSim


def _group_of(sim, lots) -> int:
    lot = int(lots[0])
    return int(sim.m.L[sim.part[lot]]["group"][sim.step[lot]])


def _next_queue(sim, lots) -> np.ndarray:
    """Lots waiting per working tool at the group of each lot's next step (0 after the last)."""
    out = np.zeros(len(lots))
    for i, lot in enumerate(lots.tolist()):
        groups = sim.m.L[sim.part[lot]]["group"]
        s = sim.step[lot] + 1
        if s < len(groups):
            g = int(groups[s])
            out[i] = len(sim.queues[g]) / max(sim.n_tools[g] - sim.down_g[g], 1)
    return out


def _cr(sim, lots):
    from hdppo.envs.builtin.fab import FabSim

    return FabSim.key(sim, lots, "cr")   # the simulator's own cr key (KeyedSim's would call back here)


KEYS = {
    "minimum slack": lambda sim, lots: sim.due[lots] - sim.now - sim.rem[lots],
    # ATC ranks by weight / p * exp(-slack+ / (k p_mean)); smaller key first, so its negative.
    "ATC (k = 1 day)": lambda sim, lots: -np.exp(-np.maximum(sim.due[lots] - sim.now - sim.rem[lots], 0.0) / DAY)
                                         / np.maximum(sim.spt[lots], 1.0),
    "cr, SPT tie-break": lambda sim, lots: _cr(sim, lots) + 1e-4 * sim.spt[lots],
    "cr + 0.5 if a setup is needed": lambda sim, lots: _cr(sim, lots) + 0.5 * sim.needs_setup(_group_of(sim, lots), lots),
    "cr + 2 if a setup is needed": lambda sim, lots: _cr(sim, lots) + 2.0 * sim.needs_setup(_group_of(sim, lots), lots),
    # Least work remaining first: lots near the end of their route finish inside the horizon.
    "LWKR": lambda sim, lots: sim.rem[lots],
    "cr, the late lots by LWKR": lambda sim, lots: np.where(sim.due[lots] < sim.now, -1e12 + sim.rem[lots], _cr(sim, lots)),
    # Shortest next queue beside cr, at three weights (a lot per tool downstream counts w in cr's units).
    **{f"cr + {w:g} x next queue per tool": (lambda w: lambda sim, lots: _cr(sim, lots) + w * _next_queue(sim, lots))(w)
       for w in (0.5, 1.0, 2.0)},
}


def variants() -> dict[str, dict]:
    """name -> how to run it: ``key`` (a rule), ``batch_wait``, or ``release`` [(from day, rate), ...]."""
    out: dict[str, dict] = {"cr": {}}
    out.update({name: {"key": name} for name in KEYS})
    out.update({f"cr, batch wait {w:g} min (240)": {"batch_wait": w} for w in (0.0, 60.0, 120.0, 480.0)})
    out.update({f"cr, release x0.8 from day {d}": {"release": [(d, 0.8)]} for d in (0, 2, 3, 4, 5)})
    out["cr, release x1.2 to day 3, then x0.8"] = {"release": [(0, 1.2), (3, 0.8)]}
    out.update({f"cr, CONWIP at {c:g} x the starting WIP": {"wip_cap": c} for c in (0.8, 1.0, 1.1, 1.25, 1.5)})
    return out


def run(spec: dict, model, seeds: list[int]) -> list[dict]:
    KeyedSim = _sim_class()
    cls, extra = (_conwip_class(KeyedSim), {"wip_cap": spec["wip_cap"]}) if "wip_cap" in spec else (KeyedSim, {})
    runs = []
    for s in seeds:
        sim = cls(model, seed=sim_seed(s), default_rule="cr", crn=True, key_fn=KEYS.get(spec.get("key")),
                  batch_wait=spec.get("batch_wait", 240.0), **extra)
        for day, rate in spec.get("release", []):
            sim.advance(until=day * DAY)
            sim.rate = rate
        sim.advance()
        runs.append(sim.summary())
    return runs


def render(report: dict) -> str:
    lines = ["# SMT2020 mini fab: the levers beside cr, with common random numbers", "",
             machine_line(report["machine"]), "",
             f"`{report['command']}`: {report['n_seeds']} held-out seeds from {report['seed0']} (those of "
             "`benchmarks/fab.py`), 7 simulated days, the fast simulator with common random numbers; mean ± 95% "
             "t-interval, and each variant's tardiness minus cr's on the same seed.", "",
             "| variant | mean tardiness (h) | throughput (lots/day) | lots released | late lots at the end "
             "| tardiness vs cr, paired (h) | vs cr |",
             "|---|---|---|---|---|---|---|"]
    cr = report["rows"]["cr"]
    for name, r in report["rows"].items():
        p = r["paired_tardiness_diff_h"]
        lines.append(f"| {name} | {r['mean_tardiness_h']['mean']:.2f} ± {r['mean_tardiness_h']['ci95']:.2f} | "
                     f"{r['throughput_lots_per_day']['mean']:.2f} | {r['released']['mean']:.1f} | "
                     f"{r['late_wip_end']['mean']:.1f} | {p['mean']:+.2f} ± {p['ci95'] if p['ci95'] == p['ci95'] else 0:.2f} | "
                     f"{r['mean_tardiness_h']['mean'] / cr['mean_tardiness_h']['mean'] - 1:+.1%} |")
    lines += ["", "Target (issue 12): tardiness 15% below the best rule (cr here) with throughput no lower.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--seed0", type=int, default=10000)
    ap.add_argument("--out", default="fab_levers", help="output stem in benchmarks/results (default fab_levers)")
    args = ap.parse_args(argv)
    from hdppo.envs.builtin.fab import build_model, get_scenario

    model = build_model(get_scenario("hvlm_mini"))
    seeds = list(range(args.seed0, args.seed0 + args.seeds))
    t0 = time.perf_counter()
    runs = {name: run(spec, model, seeds) for name, spec in variants().items()}
    rows = {}
    for name, rs in runs.items():
        rows[name] = {m: stat([r[m] for r in rs]) for m in METRICS}
        rows[name]["paired_tardiness_diff_h"] = paired_tardiness(rs, runs["cr"])
    report = {"machine": machine_info(), "command": "python benchmarks/fab_levers.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), "n_seeds": len(seeds), "seed0": args.seed0, "rows": rows,
        "wall_s": time.perf_counter() - t0}
    write_report(args.out, report, render(report), "fab_levers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
