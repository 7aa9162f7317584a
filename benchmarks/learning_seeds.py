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

With ``--versus NAME ...`` (the runs of another arm, e.g. another engine) it also compares the
two arms: the difference of their means and an exact permutation test of it (every split of the
pooled runs into two groups of those sizes; no distribution assumed, which suits a handful of
runs whose outcomes are skewed).

Writes benchmarks/results/learning_seeds_<key>.{json,md}.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

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


def permutation_p(a: list[float], b: list[float], max_splits: int = 200_000, seed: int = 0) -> float:
    """Two-sided p-value of ``mean(a) - mean(b)`` under exchangeability: the share of the splits of
    the pooled values into groups of ``len(a)`` and ``len(b)`` whose difference is at least as
    large in size. Every split when there are at most ``max_splits``, else that many random ones."""
    pooled = np.asarray(list(a) + list(b), np.float64)
    n, k = len(pooled), len(a)
    observed = abs(float(np.mean(a)) - float(np.mean(b)))
    total = pooled.sum()
    if math.comb(n, k) <= max_splits:
        sums = np.array([pooled[list(c)].sum() for c in itertools.combinations(range(n), k)])
    else:
        rng = np.random.default_rng(seed)
        sums = np.array([pooled[rng.choice(n, k, replace=False)].sum() for _ in range(max_splits)])
    diffs = np.abs(sums / k - (total - sums) / (n - k))
    return float(np.mean(diffs >= observed - 1e-9))


def compare(runs: list[dict], other: list[dict]) -> dict:
    a = [float(r["return_mean"]) for r in runs]
    b = [float(r["return_mean"]) for r in other]
    return {"runs": len(b), "mean": statistics.fmean(b), "std_over_runs": statistics.stdev(b) if len(b) > 1 else float("nan"),
            "difference": statistics.fmean(a) - statistics.fmean(b), "permutation_p_two_sided": permutation_p(a, b)}


def markdown(title: str, runs: list[dict], summary: dict, command: str, machine: dict,
             other: list[dict] | None = None, versus: dict | None = None) -> str:
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
    if other and versus:
        lines += ["", "Against the other arm (`--versus`):", "",
                  "| run | train seed | deterministic eval |", "|---|---:|---:|"]
        for r in other:
            seed = (r.get("config") or {}).get("train", {}).get("seed", "?")
            lines.append(f"| {r['name']} | {seed} | {r['return_mean']:.1f} ± {r['return_std']:.1f} |")
        v = versus
        lines += ["", f"Other arm: mean {v['mean']:.1f} over {v['runs']} runs (std {v['std_over_runs']:.1f}). "
                  f"Difference of the means (this arm minus the other): **{v['difference']:+.1f}**; exact "
                  f"permutation test, two-sided: **p = {v['permutation_p_two_sided']:.3f}**."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="+", help="learning.py section names (learning_<name>.json)")
    ap.add_argument("--title", required=True)
    ap.add_argument("--key", required=True, help="output stem: learning_seeds_<key>.{json,md}")
    ap.add_argument("--target", type=float, default=None)
    ap.add_argument("--results", default=str(HERE / "results"))
    ap.add_argument("--versus", nargs="+", default=None, metavar="NAME", help="another arm's runs, to compare with")
    args = ap.parse_args(argv)
    results = Path(args.results)
    runs = load_runs(args.names, results)
    summary = summarise(runs, args.target)
    other = load_runs(args.versus, results) if args.versus else None
    versus = compare(runs, other) if other else None
    machine = machine_info()
    report = {"title": args.title, "runs": [{k: r.get(k) for k in ("name", "run_dir", "config_name", "env_steps",
                                                                   "return_mean", "return_std", "episodes")}
                                            for r in runs],
              "summary": summary, "command": command_line(argv), "machine": machine}
    if versus:
        report["versus"] = versus | {"names": args.versus}
    md = markdown(args.title, runs, summary, command_line(argv), machine, other, versus)
    save_files(results / f"learning_seeds_{args.key}", report, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
