"""Gradient compression in mode ``dppo``: bytes on the wire and learning parity over seeds.

Trains the same config (default ``configs/hopper.yaml`` switched to ``dppo.mode: dppo``) for every
scheme and every seed, all in one run, one training after the other, and reports per scheme:

* bytes of gradient messages per update as sent (``perf/grad_bytes_per_update``: what the workers
  sent, pickled as Ray sends it, framing included) and the ratio **raw float32 payload / bytes
  sent**, the raw payload being the same messages at 4 bytes a parameter
  (``perf/grad_fp32_bytes_per_update``), the baseline a reader assumes;
* the deterministic evaluation return of the final weights (``--episodes`` episodes, the same
  evaluation seed for every run): mean over training seeds, the std over seeds and the range, and
  its ratio to the uncompressed mean (target: within ``--target``, 10%), with whether the gap is
  within the seeds' spread;
* training wall time.

Usage:
    python benchmarks/compression.py [--schemes none,q2,sign1] [--seeds 1,2,3] [--steps 300000]
        [--episodes 20] [--set KEY=VALUE ...]

Writes benchmarks/results/compression.{json,md,png}.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from machine import machine_info  # noqa: E402

BYTES_TAG = "perf/grad_bytes_per_update"
FP32_TAG = "perf/grad_fp32_bytes_per_update"
RETURN_TAG = "charts/episodic_return"
# Mode dppo makes one gradient round trip per minibatch: bigger minibatches than the CleanRL
# preset keep the run to minutes (the same for every scheme, so the comparison is fair).
DPPO_OVERRIDES = ["layers.0.dppo.mode=dppo", "layers.0.ppo.minibatch_size=256", "layers.0.dppo.train_batch_size=4096",
                  "layers.0.dppo.num_envs_per_worker=2", "train.checkpoint_every=1000", "train.eval_episodes=0"]


def train_one(config: str, scheme: str, seed: int, steps: int, extra: list[str], run_dir: Path, episodes: int) -> dict:
    from hdppo.platform import metrics as M
    from hdppo.platform.checkpoint import learner_states
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import evaluate
    from hdppo.platform.trainer import Trainer

    cfg = load_config(config, DPPO_OVERRIDES + [f"layers.0.dppo.compression={scheme}", f"train.seed={seed}",
                                                f"train.total_env_steps={steps}"] + extra)
    trainer = Trainer(cfg, run_dir, quiet=True)
    t0 = time.time()
    try:
        summary = trainer.train()
        wall = time.time() - t0
        returns = [float(r) for r in evaluate(cfg, learner_states(trainer.state()), episodes, seed=12345)]
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(run_dir / "metrics.jsonl")
    sent = [r["value"] for r in rows if r["tag"] == BYTES_TAG]
    fp32 = [r["value"] for r in rows if r["tag"] == FP32_TAG]
    curve = [(r["step"], r["value"]) for r in rows if r["tag"] == RETURN_TAG]
    return {"scheme": scheme, "seed": seed, "env_steps": summary["env_steps"], "wall_s": wall,
            "bytes_per_update": statistics.median(sent), "fp32_bytes_per_update": statistics.median(fp32),
            "eval_mean": statistics.fmean(returns), "eval_std": statistics.pstdev(returns), "returns": returns,
            "curve": curve}


def summarise(runs: list[dict], schemes: list[str], target: float) -> list[dict]:
    """One row per scheme: bytes, the ratio to raw float32, the return over seeds."""
    out = []
    for scheme in schemes:
        mine = [r for r in runs if r["scheme"] == scheme]
        if not mine:
            continue
        means = [r["eval_mean"] for r in mine]
        sent = statistics.median(r["bytes_per_update"] for r in mine)
        fp32 = statistics.median(r["fp32_bytes_per_update"] for r in mine)
        out.append({"scheme": scheme, "seeds": [r["seed"] for r in mine], "bytes_per_update": sent,
                    "fp32_bytes_per_update": fp32, "fp32_over_sent": fp32 / sent,
                    "return_mean": statistics.fmean(means), "return_std_over_seeds": statistics.pstdev(means),
                    "return_min": min(means), "return_max": max(means), "per_seed": means,
                    "wall_s_mean": statistics.fmean(r["wall_s"] for r in mine)})
    base = next((row for row in out if row["scheme"] == "none"), None)
    for row in out:
        if base is None or row is base:
            continue
        row["vs_uncompressed"] = row["return_mean"] / base["return_mean"] if base["return_mean"] else float("nan")
        row["parity_met"] = row["return_mean"] >= (1 - target) * base["return_mean"]
        # A gap smaller than either side's spread over seeds is not evidence either way.
        row["gap_within_spread"] = abs(row["return_mean"] - base["return_mean"]) <= max(
            row["return_std_over_seeds"], base["return_std_over_seeds"])
    return out


def plot(path: Path, runs: list[dict], env_id: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from learning import smooth

    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors: dict[str, str] = {}
    for r in runs:
        steps, values = zip(*r["curve"]) if r["curve"] else ((), ())
        first = r["scheme"] not in colors
        color = colors.setdefault(r["scheme"], f"C{len(colors)}")
        ax.plot(steps, smooth(list(values), 10), color=color, alpha=0.8, label=r["scheme"] if first else None)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episodic return (smoothed)")
    ax.set_title(f"hdppo mode dppo, gradient compression, one line per seed: {env_id}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(rows: list[dict], info: dict, config: str, steps: int, episodes: int, target: float, seeds: list[int],
           extra: list[str]) -> str:
    lines = ["# Gradient compression: bytes per update and learning parity over seeds", "",
             f"`python benchmarks/compression.py --steps {steps} --seeds {','.join(map(str, seeds))}`: `{config}` in mode "
             f"`dppo` ({', '.join(f'`{o}`' for o in DPPO_OVERRIDES[1:4] + extra)}), {steps:,} env steps per run, every scheme "
             f"trained with seeds {', '.join(map(str, seeds))} in this one run; deterministic evaluation of each run's "
             f"final weights on {episodes} episodes (same evaluation seed for all).", "",
             f"Measured {info['timestamp_utc']} on {info.get('cpu_model')}, {info.get('cpu_count')} CPUs "
             f"(load average at start {info.get('load_avg_1_5_15', ['?'])[0]:.1f}; a learning comparison, not a "
             "timing one: wall times include whatever else ran).", "",
             "Bytes: the gradient messages of one update as sent (pickled as Ray sends them, framing included), "
             "against the same messages as raw float32 (4 bytes a parameter).", "",
             "| scheme | bytes sent / update | raw fp32 / update | fp32 / sent | return, mean over seeds ± std (min–max) "
             "| per seed | vs uncompressed | wall s (mean) |",
             "|---|---:|---:|---:|---:|---|---:|---:|"]
    for row in rows:
        vs = f"{row['vs_uncompressed']:.0%}" if "vs_uncompressed" in row else "100%"
        lines.append(f"| {row['scheme']} | {row['bytes_per_update']:,.0f} | {row['fp32_bytes_per_update']:,.0f} | "
                     f"{row['fp32_over_sent']:.1f}x | {row['return_mean']:.1f} ± {row['return_std_over_seeds']:.1f} "
                     f"({row['return_min']:.0f}–{row['return_max']:.0f}) | "
                     f"{', '.join(f'{m:.0f}' for m in row['per_seed'])} | {vs} | {row['wall_s_mean']:.0f} |")
    lines.append("")
    for row in rows:
        if "vs_uncompressed" not in row:
            continue
        spread = ("the gap is within the seeds' spread" if row["gap_within_spread"]
                  else "the gap is larger than the seeds' spread")
        lines.append(f"- `{row['scheme']}`: {row['fp32_over_sent']:.1f}x fewer bytes than raw float32; mean return "
                     f"{row['vs_uncompressed']:.0%} of uncompressed, within {target:.0%}: "
                     f"**{'met' if row['parity_met'] else 'NOT met'}** ({spread}).")
    lines += ["", "![curves](compression.png)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "hopper.yaml"))
    p.add_argument("--schemes", default="none,q2,sign1")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--steps", type=int, default=300_000)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--target", type=float, default=0.10, help="allowed relative loss of the mean return")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    schemes = args.schemes.split(",")
    if "none" not in schemes:
        schemes.insert(0, "none")
    seeds = [int(x) for x in args.seeds.split(",")]
    info = machine_info()
    from hdppo.platform.config import load_config

    env_id = load_config(args.config).env.name
    args.results.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="hdppo-compression-"))
    runs: list[dict] = []
    md = ""
    try:
        # Seeds outermost: a run stopped part-way has every scheme at the seeds it finished.
        for seed in seeds:
            for scheme in schemes:
                r = train_one(args.config, scheme, seed, args.steps, args.set, tmp / f"{scheme}_{seed}", args.episodes)
                print(f"[compression] {scheme} seed {seed}: {r['bytes_per_update']:,.0f} B/update sent, "
                      f"{r['fp32_bytes_per_update'] / r['bytes_per_update']:.1f}x under fp32, eval {r['eval_mean']:.1f} ± "
                      f"{r['eval_std']:.1f}, {r['wall_s']:.0f}s", flush=True)
                runs.append(r)
                rows = summarise(runs, schemes, args.target)
                (args.results / "compression.json").write_text(json.dumps(
                    {"machine": info, "config": args.config, "steps": args.steps, "seeds": seeds, "summary": rows,
                     "runs": runs}, indent=1))
                plot(args.results / "compression.png", runs, env_id)
                md = render(rows, info, Path(args.config).name, args.steps, args.episodes, args.target,
                            sorted({r["seed"] for r in runs}), args.set)
                (args.results / "compression.md").write_text(md)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
