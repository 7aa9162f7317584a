"""Raw speed of the hexapod env: env steps per second on one core, no learning.

Uniformly random actions in the 18 joint targets, one env, each terrain kind at difficulty 0.5
with the default pushes (1.0 m/s every 5 s); an episode ends on a fall or after 500 steps and
is reset (a new heightfield each time). Each env step is ``frame_skip`` (4) MuJoCo steps of
0.01 s plus the observation (contacts, height scan). Rates are per CPU second of this process
(``time.process_time``), which a loaded machine disturbs less than wall time; the wall-time
rate is recorded beside it. The reset rate (heightfield generation included) is measured apart.

Usage: python benchmarks/hexapod_speed.py [--seconds 5] [--terrains flat,gravel,slopes,steps]

Writes benchmarks/results/hexapod_speed.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import command_line, join_md, machine_line, write_report  # noqa: E402
from machine import machine_info  # noqa: E402


def run(terrain: str, seconds: float, seed: int = 0) -> dict:
    from hdppo.envs.builtin.hexapod import make

    env = make(terrain=terrain, difficulty=0.5)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    steps = episodes = falls = 0
    t0, w0 = time.process_time(), time.perf_counter()
    while time.process_time() - t0 < seconds:
        _, _, term, trunc, info = env.step(rng.uniform(-1, 1, 18).astype(np.float32))
        steps += 1
        if term or trunc:
            falls += int(info["fell"])
            episodes += 1
            env.reset()
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    t1 = time.process_time()
    for _ in range(20):
        env.reset()
    reset_ms = (time.process_time() - t1) / 20 * 1e3
    return {"terrain": terrain, "steps": steps, "episodes": episodes, "falls": falls,
            "steps_per_cpu_s": steps / cpu, "steps_per_wall_s": steps / wall,
            "sim_seconds_per_cpu_s": steps * env.dt / cpu, "reset_ms": reset_ms}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--terrains", default="flat,gravel,slopes,steps")
    args = ap.parse_args(argv)
    report = {"machine": machine_info(), "command": command_line(argv), "settings": vars(args), "results": []}
    for terrain in args.terrains.split(","):
        r = run(terrain, args.seconds)
        report["results"].append(r)
        print(f"[hexapod_speed] {terrain}: {r['steps_per_cpu_s']:.0f} steps/CPU-s", flush=True)
    lines = ["# Hexapod env: raw speed (one core, random actions)", "", machine_line(report["machine"]), "",
             f"Command: `{report['command']}`", "",
             "| terrain | env steps / CPU s | env steps / wall s | simulated s / CPU s | reset (ms CPU) |",
             "|---|---|---|---|---|"]
    for r in report["results"]:
        lines.append(f"| {r['terrain']} | {r['steps_per_cpu_s']:.0f} | {r['steps_per_wall_s']:.0f} | "
                     f"{r['sim_seconds_per_cpu_s']:.1f} | {r['reset_ms']:.1f} |")
    lines += ["", "One env step = 4 MuJoCo steps of 0.01 s (25 Hz control); difficulty 0.5; pushes of 1.0 m/s "
              "every 5 s. Wall-time rates depend on the machine's load at the time."]
    write_report("hexapod_speed", report, join_md(lines) + "\n", "hexapod_speed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
