"""Sampling speed of the current tree against an older commit, side by side in one run.

One hdppo ``RolloutWorker`` (inference, normalizers, GAE; no learner) samples a config's layer
in its own process for ``--seconds``, first with the engine of ``--base`` (unpacked by
``old_commit.old_tree``), then with the current tree, and again, ``--rounds`` times: this VM's
speed drifts within minutes, so the figure is the ratio within each round. Rates are env steps
per CPU-second of the sampling process (a busy machine disturbs them less than wall-clock rates)
and per wall second.

Tasks (``--tasks``, comma-separated):

- ``hopper``: Hopper-v5 with ``throughput.py``'s settings (4 env copies per worker, 2 workers);
- ``skirmish_control``, ``skirmish_squad``, ``skirmish_strategy``: one worker of each DPPO group of
  ``configs/skirmish_hierarchy.yaml`` (32 copies, all three layers acting, one recorded);
- ``battle``, ``battle_native``: MAgent2 battle_v4 (map 20) with ``multiagent.py``'s settings (8 env
  copies per worker, 2 workers), through the PettingZoo dict adapter or the engine's arrays
  (``hdppo.envs.builtin.magent_vector``).

Usage:
    python benchmarks/sampling_ab.py --base e7c98a1 [--tasks hopper,skirmish_control] [--rounds 3] [--seconds 8]

Writes benchmarks/results/sampling_ab.{json,md} (``--out`` for another stem).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import command_line, join_md, machine_line, write_report  # noqa: E402
from machine import machine_info  # noqa: E402
from old_commit import old_tree, run_child  # noqa: E402

TASKS = ("hopper", "skirmish_control", "skirmish_squad", "skirmish_strategy", "battle", "battle_native")

# Run in a fresh interpreter per measurement, with PYTHONPATH choosing the tree. Prints one JSON line.
_CHILD = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
import yaml
import hdppo.hierarchies.engine as engine
from common import SamplerStepper
task, seconds = {task!r}, {seconds!r}
if task == "hopper":
    from throughput import hdppo_config_dict
    cfg, layer, workers = hdppo_config_dict("Hopper-v5", "central", 10**9), "control", 2
elif task.startswith("battle"):
    import multiagent as M
    t = M.TASKS["battle_v4"]
    cfg = M.hdppo_task_config("sampling", t, M.settings_for(t, False), 10**9, task == "battle_native")
    layer, workers = "control", 2
else:
    cfg = yaml.safe_load(open({skirmish!r}))
    cfg.pop("description", None)
    layer, workers = task.split("_", 1)[1], 1
cfg["ray"] = {{"backend": "local"}}
s = SamplerStepper(cfg, layer, workers, 1000)
c0, w0, n = time.process_time(), time.perf_counter(), 0
while time.process_time() - c0 < seconds:
    n += s.step()[0]
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
print("RESULT " + json.dumps({{"engine": engine.__file__, "env_steps": n, "per_cpu_s": n / cpu, "per_wall_s": n / wall}}))
"""


def measure(task: str, seconds: float, import_root: Path | None) -> dict:
    code = _CHILD.format(bench=str(HERE), task=task, seconds=seconds,
                         skirmish=str(HERE.parent / "configs" / "skirmish_hierarchy.yaml"))
    # The copy of the engine that ran must be the one asked for (run_child checks).
    return run_child(code, import_root, "engine", f"sampling {task}", 600 + 10 * seconds)


def render(report: dict) -> str:
    lines = [f"# Sampling: the current tree against {report['base']}", "", machine_line(report["machine"]), "",
             f"Command: `{report['command']}`", "",
             f"One RolloutWorker per measurement, in its own process, {report['seconds']} CPU-seconds each; base "
             f"and current alternate, {report['rounds']} rounds. Env steps per CPU-second of the sampling process "
             "(per wall second in brackets).", "",
             "| task | round | base | current | current / base |", "|---|---:|---:|---:|---:|"]
    for task, res in report["results"].items():
        for k, (b, c) in enumerate(zip(res["base"], res["current"])):
            lines.append(f"| {task} | {k + 1} | {b['per_cpu_s']:,.0f} ({b['per_wall_s']:,.0f}) | "
                         f"{c['per_cpu_s']:,.0f} ({c['per_wall_s']:,.0f}) | {c['per_cpu_s'] / b['per_cpu_s']:.3f} |")
    lines += ["", "| task | median ratio (CPU-s) | rounds |", "|---|---:|---|"]
    for task, res in report["results"].items():
        lines.append(f"| {task} | **{res['median_ratio']:.3f}** | {', '.join(f'{r:.3f}' for r in res['ratios'])} |")
    return join_md(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the commit to compare with (its engine, unpacked)")
    ap.add_argument("--tasks", default="hopper,skirmish_control", help=f"comma-separated: {', '.join(TASKS)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0, help="CPU-seconds of sampling per measurement")
    ap.add_argument("--out", default="sampling_ab")
    args = ap.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        ap.error(f"--tasks: unknown {', '.join(bad)}; choose from {', '.join(TASKS)}")
    report = {"machine": machine_info(), "command": command_line(argv), "base": args.base, "rounds": args.rounds,
              "seconds": args.seconds, "results": {}}
    with old_tree(args.base) as root:
        for task in tasks:
            base, cur = [], []
            for k in range(args.rounds):
                print(f"[sampling_ab] {task} round {k + 1}/{args.rounds}", flush=True)
                base.append(measure(task, args.seconds, root))
                cur.append(measure(task, args.seconds, None))
            ratios = [c["per_cpu_s"] / b["per_cpu_s"] for b, c in zip(base, cur)]
            report["results"][task] = {"base": base, "current": cur, "ratios": ratios,
                                       "median_ratio": statistics.median(ratios)}
    write_report(args.out, report, render(report), "sampling_ab")
    return 0


if __name__ == "__main__":
    sys.exit(main())
