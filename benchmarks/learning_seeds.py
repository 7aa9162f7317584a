"""A learning result over several seeds: the per-run evaluations of ``learning.py``, side by side.

One seed of PPO on a MuJoCo task says little: Ant-v5 with the same config gave 4181, 1512 and 2276
on three runs of seed 1 (two engines). This reads the ``learning_<name>.json`` files that
``learning.py`` wrote for the given runs, and writes one table: each run's deterministic
evaluation (mean ± std over its episodes), its train seed and commit note, then the mean over runs
with its 95% t-interval, the spread (std over runs, min, max), and the target checked on the mean
over runs, said as met only when the whole interval clears it.

Usage:
    python benchmarks/learning_seeds.py --title "Ant-v5, 3M env steps" --key ant_seeds \\
        --target 2500 ant_seed1_numpy ant_seed2 ant_seed3

Writes benchmarks/results/learning_seeds_<key>.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import command_line, save_files, stat  # noqa: E402
from machine import machine_info  # noqa: E402


def load_runs(names: list[str], results: Path) -> list[dict]:
    runs = []
    for n in names:
        path = results / f"learning_{n}.json"
        if not path.exists():
            raise SystemExit(f"learning_seeds.py: {path} does not exist; evaluate the run first with "
                             f"`python benchmarks/learning.py RUN_DIR --name {n}`.")
        runs.append(json.loads(path.read_text()))
    return runs


def summarise(runs: list[dict], target: float | None) -> dict:
    """Mean over runs of their evaluation means, its 95% t-interval, the spread, the target check."""
    means = [float(r["return_mean"]) for r in runs]
    s = stat(means)
    out = {"runs": len(means), "mean": s["mean"], "ci95": s["ci95"],
           "std_over_runs": statistics.stdev(means) if len(means) > 1 else float("nan"),
           "min": min(means), "max": max(means), "target": target}
    if target is not None:
        lo, hi = s["mean"] - s["ci95"], s["mean"] + s["ci95"]
        out["runs_at_target"] = sum(m >= target for m in means)
        # Met: the interval clears the target. Missed: the interval is below it. Otherwise the
        # runs cannot tell (a result within noise of its target is not a margin).
        if math.isnan(s["ci95"]):
            out["verdict"] = "one run: cannot tell"
        elif lo >= target:
            out["verdict"] = "met"
        elif hi < target:
            out["verdict"] = "missed"
        else:
            out["verdict"] = "within noise of the target: not shown"
        out["mean_at_target"] = s["mean"] >= target
    return out


def markdown(title: str, runs: list[dict], summary: dict, command: str, machine: dict) -> str:
    lines = [f"# {title}: a learning result over {len(runs)} runs", "",
             f"Command: `{command}`", "",
             f"Machine: {machine.get('cpu_model', '?')}, {machine.get('cpu_count', '?')} CPUs; each run's own "
             "figures (and the machine it was evaluated on) are in its `learning_<name>.json`.", "",
             "| run | config | train seed | env steps | deterministic eval (mean ± std over episodes) | episodes |",
             "|---|---|---:|---:|---:|---:|"]
    for r in runs:
        seed = (r.get("config") or {}).get("train", {}).get("seed", "?")
        lines.append(f"| {r['name']} | {r.get('config_name', '?')} | {seed} | {r.get('env_steps', 0):,} | "
                     f"{r['return_mean']:.1f} ± {r['return_std']:.1f} | {r.get('episodes', '?')} |")
    s = summary
    lines += ["", f"Mean over runs: **{s['mean']:.1f} ± {s['ci95']:.1f}** (95% t-interval), std over runs "
              f"{s['std_over_runs']:.1f}, min {s['min']:.1f}, max {s['max']:.1f}."]
    if s.get("target") is not None:
        lines.append(f"Target {s['target']:g}: **{s['verdict']}** (mean over runs "
                     f"{'at or above' if s['mean_at_target'] else 'below'} it; {s['runs_at_target']} of "
                     f"{s['runs']} runs at or above it).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help="learning.py section names (learning_<name>.json)")
    ap.add_argument("--title", required=True)
    ap.add_argument("--key", required=True, help="output stem: learning_seeds_<key>.{json,md}")
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument("--results", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    results = Path(args.results)
    runs = load_runs(args.names, results)
    summary = summarise(runs, args.target)
    machine = machine_info()
    report = {"title": args.title, "runs": [{k: r.get(k) for k in ("name", "run_dir", "config_name", "env_steps",
                                                                   "return_mean", "return_std", "episodes")}
                                            for r in runs],
              "summary": summary, "command": command_line(argv), "machine": machine}
    md = markdown(args.title, runs, summary, command_line(argv), machine)
    save_files(results / f"learning_seeds_{args.key}", report, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
