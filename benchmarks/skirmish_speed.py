"""Raw speed of the skirmish env: agent steps per second on one core, no learning.

The red units play uniformly random legal actions (drawn with numpy from the action masks, all
agents at once); the blue army is commanded by the scripted opponent. Two forms of the env:

* ``parallel``: the PettingZoo ParallelEnv (``parallel_env``), one battle, dicts in and out;
* ``batched``: the natively batched env (``make_vector``), ``--copies`` battles in one set of
  arrays, as hdppo's sampler steps it (``env.type: vector``).

Agent steps count the red agents that act (PettingZoo's agents; they die, so fewer than 8 act
per env step on 8v8); unit steps count every live unit of both armies the env simulates. Rates
are per CPU second of this process (``time.process_time``), which a loaded machine disturbs
less than wall time; the wall-time rate is recorded beside it. One process: the figure is per
core.

Usage: python benchmarks/skirmish_speed.py [--seconds 5] [--copies 64] [--scenarios 3v3,8v8_mixed,10v10_mixed]
       [--opponents random,focus_kite]

Writes benchmarks/results/skirmish_speed.{json,md}.
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

from machine import machine_info  # noqa: E402

TARGET = 50_000  # agent steps/s per core on 8v8 (issue 11)


def _numpy_call_us() -> float:
    """Microseconds of CPU per call of a trivial numpy operation: how slow this machine is at
    the small-array calls the env is made of."""
    x = np.zeros(16)
    t = time.process_time()
    for _ in range(100_000):
        x + x  # noqa: B018
    return (time.process_time() - t) / 100_000 * 1e6


def run_parallel(scenario: str, opponent: str, seconds: float, seed: int = 0) -> dict:
    from hdppo.envs.builtin.skirmish import parallel_env

    env = parallel_env(scenario=scenario, opponent=opponent)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    b = env.battle
    steps = agent_steps = unit_steps = episodes = 0
    t0, w0 = time.process_time(), time.perf_counter()
    while time.process_time() - t0 < seconds:
        names = list(obs)
        masks = np.stack([obs[a]["action_mask"] for a in names])
        acts = np.argmax(rng.random(masks.shape) * masks, 1).tolist()
        agent_steps += len(names)
        unit_steps += int(b.alive[0].sum())
        obs, *_ = env.step(dict(zip(names, acts)))
        steps += 1
        if not env.agents:
            obs, _ = env.reset()
            episodes += 1
    return _rates("parallel", scenario, opponent, 1, steps, agent_steps, unit_steps, episodes,
                  time.process_time() - t0, time.perf_counter() - w0)


def run_batched(scenario: str, opponent: str, seconds: float, copies: int, seed: int = 0) -> dict:
    from hdppo.envs.builtin.skirmish import make_vector

    env = make_vector(copies, seed=seed, scenario=scenario, opponent=opponent)
    now = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    b = env.battle
    steps = agent_steps = unit_steps = episodes = 0
    t0, w0 = time.process_time(), time.perf_counter()
    while time.process_time() - t0 < seconds:
        acts = np.argmax(rng.random(now.masks.shape) * now.masks, -1)
        agent_steps += int(now.alive.sum())
        unit_steps += int(b.alive.sum())
        now = env.step(acts)
        steps += copies
        episodes += len(now.episodes)
    return _rates("batched", scenario, opponent, copies, steps, agent_steps, unit_steps, episodes,
                  time.process_time() - t0, time.perf_counter() - w0)


def _rates(form, scenario, opponent, copies, steps, agent_steps, unit_steps, episodes, cpu, wall) -> dict:
    return {"form": form, "scenario": scenario, "opponent": opponent, "copies": copies, "env_steps": steps,
            "agent_steps": agent_steps, "unit_steps": unit_steps, "episodes": episodes, "cpu_s": cpu, "wall_s": wall,
            "agent_steps_per_cpu_s": agent_steps / cpu, "unit_steps_per_cpu_s": unit_steps / cpu,
            "env_steps_per_cpu_s": steps / cpu, "agent_steps_per_wall_s": agent_steps / wall}


def table(runs: list[dict]) -> str:
    head = ("| form | scenario | opponent | copies | agent steps/s | unit steps/s | env steps/s | agent steps/s (wall) |"
            " vs 50k |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
    rows = "\n".join(
        f"| {r['form']} | {r['scenario']} | {r['opponent']} | {r['copies']} | {r['agent_steps_per_cpu_s']:,.0f} | "
        f"{r['unit_steps_per_cpu_s']:,.0f} | {r['env_steps_per_cpu_s']:,.0f} | {r['agent_steps_per_wall_s']:,.0f} | "
        f"{r['agent_steps_per_cpu_s'] / TARGET:.2f}x |" for r in runs)
    return head + rows + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0, help="CPU seconds per measurement")
    p.add_argument("--copies", type=int, default=64, help="battles in the batched env")
    p.add_argument("--scenarios", default="3v3,8v8_mixed,10v10_mixed")
    p.add_argument("--opponents", default="random,focus_kite")
    p.add_argument("--forms", default="parallel,batched")
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    out: dict = {"machine": machine_info(), "numpy_call_us": _numpy_call_us(), "seconds": args.seconds,
                 "copies": args.copies, "target_agent_steps_per_s_8v8": TARGET, "runs": []}
    for scenario in args.scenarios.split(","):
        for opponent in args.opponents.split(","):
            for form in args.forms.split(","):
                r = (run_parallel(scenario, opponent, args.seconds) if form == "parallel"
                     else run_batched(scenario, opponent, args.seconds, args.copies))
                out["runs"].append(r)
                print(f"[skirmish_speed] {form:8s} {scenario:12s} {opponent:10s} "
                      f"{r['agent_steps_per_cpu_s']:10,.0f} agent steps/s  {r['unit_steps_per_cpu_s']:10,.0f} unit steps/s",
                      flush=True)
    m = out["machine"]
    best = max((r for r in out["runs"] if r["scenario"] == "8v8_mixed"), key=lambda r: r["agent_steps_per_cpu_s"],
               default=None)
    verdict = ""
    if best is not None:
        verdict = (f"Best on 8v8 mixed: {best['agent_steps_per_cpu_s']:,.0f} agent steps/s per core ({best['form']}, "
                   f"{best['opponent']} opponent): target {TARGET:,} {'met' if best['agent_steps_per_cpu_s'] >= TARGET else 'missed'}.\n\n")
    md = (f"# skirmish raw speed\n\nMeasured {m.get('timestamp_utc')} on {m.get('cpu_model')}, {m.get('cpu_count')} CPUs "
          f"(load average at start {m['load_avg_1_5_15'][0]:.1f}; a trivial numpy call took "
          f"{out['numpy_call_us']:.2f} us of CPU). One process, {args.seconds:g} CPU seconds per row; rates per CPU "
          f"second. Red: random legal actions; blue: the scripted opponent. `batched` steps {args.copies} battles at "
          "once (`make_vector`, what training uses); `parallel` is the PettingZoo ParallelEnv.\n\n"
          + verdict + table(out["runs"]))
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "skirmish_speed.json").write_text(json.dumps(out, indent=2))
    (args.results / "skirmish_speed.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
