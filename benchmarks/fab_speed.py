"""Raw speed of the SMT2020 fab simulator: dispatching decisions and simulated days per second.

Two ways of running it, on each scenario:

* ``rule``: the simulator alone with a rule (FIFO) taking every decision (:func:`run_rule`'s
  fast path, no observations), what ``benchmarks/fab.py`` runs for the rules;
* ``rule, crn``: the same with common random numbers (``FabSim(crn=True)``: every draw keyed by
  what it is for), what ``benchmarks/fab.py --crn`` runs;
* ``env``: the Gymnasium env (:class:`FabEnv`), a uniformly random legal slot at each agent
  decision, observations and masks built each step, as hdppo's sampler steps it.

``decisions`` counts every lot (or batch) started; ``agent decisions`` the env steps (the
decisions with two or more legal lots). Rates are per CPU second of this process
(``time.process_time``), which a loaded machine disturbs less than wall time; wall time is
recorded beside them. One process: the figures are per core.

Usage: python benchmarks/fab_speed.py [--scenarios hvlm_mini,hvlm] [--days hvlm_mini=7,hvlm=1]

Writes benchmarks/results/fab_speed.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import save_files  # noqa: E402
from machine import machine_info  # noqa: E402


def run_rule(scenario: str, days: float, seed: int = 0, crn: bool = False) -> dict:
    from hdppo.envs.builtin.fab import FabSim, build_model

    model = build_model(scenario, days=days)
    sim = FabSim(model, seed=seed, crn=crn)
    t0, w0 = time.process_time(), time.perf_counter()
    sim.run("fifo")
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    st = sim.stats
    return {"mode": "rule, crn" if crn else "rule", "scenario": scenario, "days": days, "cpu_s": cpu, "wall_s": wall,
            "decisions": st.decisions, "events": st.events, "decisions_per_s": st.decisions / cpu,
            "events_per_s": st.events / cpu, "sim_days_per_s": days / cpu}


def run_env(scenario: str, days: float, seed: int = 0) -> dict:
    from hdppo.envs.builtin.fab import FabEnv

    env = FabEnv(scenario=scenario, days=days)
    rng = np.random.default_rng(seed)
    t0, w0 = time.process_time(), time.perf_counter()
    obs, _ = env.reset(seed=seed)
    steps, done = 0, False
    while not done:
        obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
        steps += 1
        done = term or trunc
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    st = env.sim.stats
    return {"mode": "env", "scenario": scenario, "days": days, "cpu_s": cpu, "wall_s": wall,
            "decisions": st.decisions, "agent_decisions": steps, "events": st.events,
            "decisions_per_s": st.decisions / cpu, "agent_decisions_per_s": steps / cpu, "sim_days_per_s": days / cpu}


def render(report: dict) -> str:
    lines = ["# SMT2020 fab simulator speed", "",
             f"Machine: {report['machine'].get('cpu_model')}, {report['machine'].get('cpu_count')} CPUs, load average {report['machine'].get('load_avg_1_5_15')} "
             "(shared with other jobs while measured; rates per CPU second of one process).", "",
             "| scenario | mode | simulated days | decisions | env steps (agent decisions) | decisions/s | env steps/s | simulated days/s | CPU s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['scenario']} | {r['mode']} | {r['days']:g} | {r['decisions']} | {r.get('agent_decisions', '-')} | "
                     f"{r['decisions_per_s']:.0f} | {format(r['agent_decisions_per_s'], '.0f') if 'agent_decisions_per_s' in r else '-'} | "
                     f"{r['sim_days_per_s']:.3f} | {r['cpu_s']:.1f} |")
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default="hvlm_mini,hvlm")
    p.add_argument("--days", default="hvlm_mini=7,lvhm_mini=7,hvlm=1,lvhm=1")
    p.add_argument("--out", default=str(HERE / "results" / "fab_speed"))
    args = p.parse_args(argv)
    days = {k: float(v) for k, v in (kv.split("=") for kv in args.days.split(","))}
    rows = []
    for sc in args.scenarios.split(","):
        d = days.get(sc, 1.0)
        for fn in (run_rule, lambda sc, d: run_rule(sc, d, crn=True), run_env):
            rows.append(fn(sc, d))
            print(json.dumps(rows[-1]), flush=True)
    report = {"machine": machine_info(), "rows": rows,
              "command": "python benchmarks/fab_speed.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    out = Path(args.out)
    save_files(out, report, render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
