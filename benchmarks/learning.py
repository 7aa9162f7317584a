"""Learning benchmark: how well a finished hdppo run learned, against a target return.

Takes a run dir of a finished ``hdppo train`` (e.g. ``hdppo train configs/hopper.yaml --run-dir
runs/hopper``), and

* evaluates its latest checkpoint deterministically for ``--episodes`` episodes (policy mode,
  frozen observation statistics; the same recipe as ``hdppo eval``),
* reads ``metrics.jsonl`` for the total env steps and the wall time (first to last ``time``
  stamp of the training updates, plus the first update's own duration),
* plots the learning curve (``charts/episodic_return`` vs env steps, raw and smoothed), the
  final evaluation mean (+- std) as a marker and the target as a horizontal line,
* writes ``benchmarks/results/learning_<name>.{png,json}`` and adds or replaces the
  ``<name>`` section of ``benchmarks/results/learning.md``.

Usage:
    python benchmarks/learning.py RUN_DIR --name hopper --target 2500 --episodes 50
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import machine_info  # noqa: E402

RETURN_TAG = "charts/episodic_return"
UPDATE_TAG = "perf/env_steps_per_s"   # one record per update, written right after it
EVAL_TAG = "eval/return_mean"
MD_HEADER = ("# Learning benchmarks\n\nDeterministic evaluation of finished hdppo runs against a target "
             "return; one section per benchmark, produced by `benchmarks/learning.py`.\n")


def evaluate_run(run_dir: Path, episodes: int, seed: int | None = None) -> dict:
    """Deterministic returns of the run's latest checkpoint (as ``hdppo eval`` does it)."""
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import evaluate

    if not (run_dir / "config.yaml").is_file():
        raise SystemExit(f"learning.py: {run_dir} is not an hdppo run dir (no config.yaml)")
    cfg = load_config(run_dir / "config.yaml")
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise SystemExit(f"learning.py: {run_dir}/checkpoints holds no checkpoint")
    layer = cfg.layers[0].name
    states = learner_states(load_checkpoint(ckpt))
    state = states[layer]
    returns = [float(r) for r in evaluate(cfg, states, episodes, seed=seed)]
    return {"cfg": cfg, "layer": layer, "checkpoint": ckpt.name, "learner_env_steps": state.get("env_steps"),
            "returns": returns}


def read_metrics(run_dir: Path, layer: str) -> dict:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"learning.py: {path} does not exist")
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    recs = [r for r in recs if r.get("layer", layer) == layer]
    updates = sorted((r for r in recs if r["tag"] == UPDATE_TAG), key=lambda r: (r["time"], r["step"]))
    curve = sorted(((r["step"], r["value"]) for r in recs if r["tag"] == RETURN_TAG), key=lambda x: x[0])
    evals = [r for r in recs if r["tag"] == EVAL_TAG]
    sample_s = [r["value"] for r in recs if r["tag"] == "perf/sample_s"]
    update_s = [r["value"] for r in recs if r["tag"] == "perf/update_s"]
    times = [r["time"] for r in recs]
    env_steps = max((r["step"] for r in recs), default=0)
    out = {
        "env_steps": int(env_steps),
        "updates": len(updates),
        # As written: first to last time stamp of any record (includes the in-training eval at the end,
        # excludes start-up and the first update, which precede the first record).
        "wall_s_stamps": round(max(times) - min(times), 1) if times else None,
        "curve": curve,
        "train_eval_return_mean": evals[-1]["value"] if evals else None,
    }
    if updates:
        first_update = (sample_s[0] + update_s[0]) if sample_s and update_s else 0.0
        # Training wall time: end of the first update to end of the last, plus the first update itself.
        out["train_wall_s"] = round(updates[-1]["time"] - updates[0]["time"] + first_update, 1)
        out["env_steps_per_s"] = round(out["env_steps"] / out["train_wall_s"], 1) if out["train_wall_s"] else None
        gaps = [b["time"] - a["time"] for a, b in zip(updates, updates[1:])]
        if gaps and max(gaps) > 10 * max(statistics.median(gaps), 1.0):
            out["note"] = (f"largest gap between updates {max(gaps):.0f}s >> median {statistics.median(gaps):.1f}s: "
                           "the run was probably resumed; wall time includes the pause")
    return out


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average (shorter at the start)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot(path: Path, name: str, env_id: str, curve: list, window: int, eval_step: int,
         eval_mean: float, eval_std: float, episodes: int, target: float | None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    if curve:
        steps = [s for s, _ in curve]
        vals = [v for _, v in curve]
        ax.plot(steps, vals, color="tab:blue", alpha=0.25, lw=0.8, label="episodic return (per update)")
        ax.plot(steps, smooth(vals, window), color="tab:blue", lw=1.8, label=f"smoothed ({window} updates)")
    ax.errorbar([eval_step], [eval_mean], yerr=[eval_std], fmt="o", color="tab:red", capsize=4, zorder=5,
                label=f"final deterministic eval ({episodes} ep): {eval_mean:.0f} ± {eval_std:.0f}")
    if target is not None:
        ax.axhline(target, color="tab:green", ls="--", lw=1.2, label=f"target {target:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(f"hdppo learning curve: {name} ({env_id})")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def render_section(r: dict) -> str:
    m = r["machine"]
    met = "n/a (no target)" if r["target"] is None else ("**met**" if r["target_met"] else "**NOT met**")
    lines = [
        f"<!-- learning:{r['name']} -->",
        f"## {r['name']} ({r['env_id']})",
        "",
        f"- Run dir: `{r['run_dir']}` (config `{r['config_name']}`, mode `{r['mode']}`), checkpoint `{r['checkpoint']}`",
        f"- Training: {r['env_steps']:,} env steps, {r['updates']} updates, "
        f"{r['train_wall_s'] if r['train_wall_s'] is not None else 'n/a'} s training wall "
        f"({r['env_steps_per_s'] if r['env_steps_per_s'] is not None else 'n/a'} env steps/s)"
        + (f"; note: {r['metrics_note']}" if r.get("metrics_note") else ""),
        f"- Deterministic eval, {r['episodes']} episodes: **{r['return_mean']:.1f} ± {r['return_std']:.1f}** "
        f"(min {r['return_min']:.1f}, max {r['return_max']:.1f})",
        f"- Target {r['target'] if r['target'] is not None else 'none'}: {met}",
        "- Last smoothed training return: "
        + ("n/a" if r["final_smoothed_return"] is None else f"{r['final_smoothed_return']:.1f}")
        + (f" (trainer's own final eval: {r['train_eval_return_mean']:.1f})"
           if r.get("train_eval_return_mean") is not None else ""),
        f"- Evaluated {m['timestamp_utc']} on `{m['hostname']}` ({m['cpu_model']}, {m['cpu_count']} CPUs, "
        f"Python {m['python']}, torch {m['torch']}, Ray {m['ray']}, Gymnasium {m['gymnasium']}, MuJoCo {m['mujoco']})",
        "",
        f"![{r['name']} learning curve](learning_{r['name']}.png)",
        "",
        f"<!-- /learning:{r['name']} -->",
    ]
    return "\n".join(lines)


def update_markdown(path: Path, name: str, section: str) -> None:
    text = path.read_text() if path.is_file() else MD_HEADER
    pattern = re.compile(rf"<!-- learning:{re.escape(name)} -->.*?<!-- /learning:{re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text if text.endswith("\n") else text + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Evaluate a finished hdppo run against a target return.")
    ap.add_argument("run_dir", help="run dir of a finished `hdppo train`")
    ap.add_argument("--name", default=None, help="benchmark name (file names, md section); default: config name")
    ap.add_argument("--target", type=float, default=None, help="target mean return of the deterministic eval")
    ap.add_argument("--episodes", type=int, default=50, help="deterministic evaluation episodes (default 50)")
    ap.add_argument("--seed", type=int, default=None, help="eval seed (default: train.seed + 999983, as hdppo eval)")
    ap.add_argument("--smooth", type=int, default=10, help="moving-average window in updates (default 10; at most a tenth of the updates)")
    ap.add_argument("--results", default=str(HERE / "results"), help="output folder (default benchmarks/results)")
    args = ap.parse_args(argv)

    run_dir = Path(args.run_dir)
    ev = evaluate_run(run_dir, args.episodes, args.seed)
    cfg, returns = ev["cfg"], ev["returns"]
    name = args.name or cfg.name
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise SystemExit(f"learning.py: --name {name!r} may only use letters, digits, '_', '.', '-'")
    met = read_metrics(run_dir, ev["layer"])
    mean, std = statistics.fmean(returns), statistics.pstdev(returns)
    curve = met["curve"]
    # A short run gets a shorter window, so the smoothed curve does not lag far behind the data.
    window = max(1, min(args.smooth, len(curve) // 10))
    smoothed = smooth([v for _, v in curve], window) if curve else []
    env_id = cfg.env.id or cfg.env.entry_point

    out_dir = Path(args.results)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"learning_{name}.png"
    plot(png, name, env_id, curve, window, met["env_steps"], mean, std, len(returns), args.target)

    result = {
        "name": name, "run_dir": str(run_dir.resolve()), "env_id": env_id, "config_name": cfg.name,
        "mode": cfg.layers[0].dppo.mode, "checkpoint": ev["checkpoint"],
        "episodes": len(returns), "seed": args.seed,
        "return_mean": round(mean, 2), "return_std": round(std, 2),
        "return_min": round(min(returns), 2), "return_max": round(max(returns), 2), "returns": returns,
        "target": args.target, "target_met": None if args.target is None else mean >= args.target,
        "env_steps": met["env_steps"], "learner_env_steps": ev["learner_env_steps"], "updates": met["updates"],
        "train_wall_s": met.get("train_wall_s"), "wall_s_stamps": met["wall_s_stamps"],
        "env_steps_per_s": met.get("env_steps_per_s"), "metrics_note": met.get("note"),
        "train_eval_return_mean": met["train_eval_return_mean"],
        "final_smoothed_return": round(smoothed[-1], 2) if smoothed else None,
        "smooth_window": window,
        "plot": str(png), "config": cfg.model_dump(mode="json"), "machine": machine_info(),
    }
    (out_dir / f"learning_{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    update_markdown(out_dir / "learning.md", name, render_section(result))

    verdict = "n/a" if args.target is None else ("met" if result["target_met"] else "NOT met")
    print(f"[learning] {name} ({env_id}): {met['env_steps']:,} env steps in {result['train_wall_s']} s; "
          f"deterministic eval over {len(returns)} episodes {mean:.1f} ± {std:.1f}; target {args.target}: {verdict}")
    print(f"[learning] wrote {png}, {out_dir / f'learning_{name}.json'}, {out_dir / 'learning.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
