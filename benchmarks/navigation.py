"""Goal-reaching on AntNavigate: the two-layer hierarchy against flat PPO at the same env steps.

Takes finished runs: the hierarchy (``configs/ant_navigate.yaml``), the run that pre-trained its
walk skill (``configs/ant_navigate_walk.yaml``, ``--pretrain``; its env steps count towards the
hierarchy's), and flat PPO (``configs/ant_navigate_flat.yaml``) trained for the hierarchy's env
steps in all. Evaluates the hierarchy and the flat policy deterministically on ``--episodes``
episodes, counts arrivals (an episode return above
``hdppo.envs.builtin.ant_navigate.SUCCESS_RETURN``), and plots both learning curves against the
env steps taken by all of a run's groups together (the pre-training first).

Usage:
    python benchmarks/navigation.py --hierarchy runs/ant_navigate --pretrain runs/ant_navigate_walk \
        --flat runs/ant_navigate_flat [--episodes 100] [--target 0.8]

Writes benchmarks/results/navigation.{json,md,png}. Anything in an existing navigation.md from
the line ``<!-- history -->`` on (earlier presets and attempts) is kept below the new table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from learning import evaluate_run, smooth  # noqa: E402
from machine import machine_info  # noqa: E402

RETURN_TAG = "charts/episodic_return"
HISTORY_MARK = "<!-- history -->"


def total_steps_curve(run_dir: Path, offset: int = 0) -> list[tuple[int, float]]:
    """(env steps of all groups together + ``offset``, episodic return) after each update of the
    run's first trained layer (any layer's episodic return is the env's).

    Each layer's records carry its own group's env steps; the total at a moment is the sum of
    every group's latest count (a shared group counts once)."""
    from hdppo.platform.config import load_config

    cfg = load_config(run_dir / "config.yaml")
    heads = [g[0] for g in cfg.layer_groups()]
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    rows.sort(key=lambda r: r["time"])
    latest = {name: 0 for name in heads}
    curve = []
    for r in rows:
        # Every row of an update carries that update's env steps: take them from whichever row
        # comes first (the return is logged before perf/env_steps_per_s within an update).
        if r["layer"] in latest:
            latest[r["layer"]] = max(latest[r["layer"]], r["step"])
        if r["layer"] == heads[0] and r["tag"] == RETURN_TAG:
            curve.append((offset + sum(latest.values()), r["value"]))
    return curve


def _summary(run_dir: Path) -> dict:
    """summary.json, or (a run whose final evaluation did not finish) the same figures from
    metrics.jsonl: the env steps of all groups and the first-to-last update time."""
    path = run_dir / "summary.json"
    if path.is_file():
        return json.loads(path.read_text())
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    updates = [r for r in rows if r["tag"] == "perf/env_steps_per_s"]
    last = {}
    for r in updates:
        last[r["layer"]] = max(last.get(r["layer"], 0), r["step"])
    return {"env_steps": int(sum(last.values())), "wall_s": updates[-1]["time"] - updates[0]["time"],
            "note": "no summary.json; figures from metrics.jsonl"}


def measure(run_dir: Path, episodes: int, pretrain: Path | None = None) -> dict:
    from hdppo.envs.builtin.ant_navigate import SUCCESS_RETURN

    ev = evaluate_run(run_dir, episodes)
    summary = _summary(run_dir)
    successes = sum(r > SUCCESS_RETURN for r in ev["returns"])
    out = {"run_dir": str(run_dir), "config": ev["cfg"].name, "checkpoint": ev["checkpoint"],
           "env_steps": summary["env_steps"], "wall_s": round(summary["wall_s"], 1), "episodes": len(ev["returns"]),
           "success_rate": successes / len(ev["returns"]), "return_mean": sum(ev["returns"]) / len(ev["returns"]),
           "curve": total_steps_curve(run_dir)}
    if pretrain is not None:
        pre = _summary(pretrain)
        out["pretrain"] = {"run_dir": str(pretrain), "env_steps": pre["env_steps"], "wall_s": round(pre["wall_s"], 1)}
        out["curve"] = total_steps_curve(pretrain) + total_steps_curve(run_dir, offset=pre["env_steps"])
        out["env_steps"] += pre["env_steps"]
        out["wall_s"] = round(out["wall_s"] + pre["wall_s"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hierarchy", required=True, type=Path)
    p.add_argument("--pretrain", type=Path, default=None, help="run dir of the walk skill's pre-training")
    p.add_argument("--flat", required=True, type=Path)
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--target", type=float, default=0.8)
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    runs = {"hierarchy": measure(args.hierarchy, args.episodes, args.pretrain), "flat": measure(args.flat, args.episodes)}
    args.results.mkdir(parents=True, exist_ok=True)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, r in runs.items():
        if r["curve"]:
            xs, ys = zip(*r["curve"])
            ax.plot(xs, smooth(list(ys), max(1, len(ys) // 20)),
                    label=f"{name}: {100 * r['success_rate']:.0f}% success ({r['episodes']} eval episodes)")
    pre = runs["hierarchy"].get("pretrain")
    if pre:
        ax.axvline(pre["env_steps"], color="gray", linestyle=":", label="walk skill pre-trained; navigator from here")
    ax.set_xlabel("env steps (all groups)")
    ax.set_ylabel("episodic return (smoothed)")
    ax.set_title("AntNavigate: two-layer hierarchy vs flat PPO")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.results / "navigation.png", dpi=120)

    machine = machine_info()
    report = {"target_success_rate": args.target, "machine": machine,
              "runs": {k: {kk: vv for kk, vv in v.items() if kk != "curve"} for k, v in runs.items()}}
    (args.results / "navigation.json").write_text(json.dumps(report, indent=2))
    h, f = runs["hierarchy"], runs["flat"]
    met = "met" if h["success_rate"] >= args.target else "NOT met"
    md = (f"# AntNavigate: goal-reaching success\n\n"
          f"Measured {machine.get('timestamp_utc', '')} on {machine.get('cpu_model', '?')}, "
          f"{machine.get('cpu_count', '?')} CPUs.\n\n"
          f"| run | env steps | wall s | success rate ({h['episodes']} eval episodes) | mean return |\n|---|---:|---:|---:|---:|\n"
          f"| hierarchy (`{h['config']}`) | {h['env_steps']:,} | {h['wall_s']:,} | {100 * h['success_rate']:.0f}% | {h['return_mean']:.2f} |\n"
          f"| flat PPO (`{f['config']}`) | {f['env_steps']:,} | {f['wall_s']:,} | {100 * f['success_rate']:.0f}% | {f['return_mean']:.2f} |\n\n"
          + (f"The hierarchy's env steps: {pre['env_steps']:,} pre-training the walk skill (`{pre['run_dir']}`, "
             f"{pre['wall_s']:,} s) plus {h['env_steps'] - pre['env_steps']:,} training the navigator with that "
             "skill frozen.\n\n" if pre else "")
          + f"Target: hierarchy success >= {100 * args.target:.0f}% within 10M env steps: **{met}** at "
          f"{h['env_steps']:,} env steps.\n\n![curves](navigation.png)\n")
    out = args.results / "navigation.md"
    old = out.read_text() if out.is_file() else ""
    history = old[old.index(HISTORY_MARK):] if HISTORY_MARK in old else ""
    out.write_text(md + ("\n" + history if history else ""))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
