"""Gradient compression in mode ``dppo``: bytes on the wire and learning parity.

Trains the same config (default ``configs/hopper.yaml`` switched to ``dppo.mode: dppo``) once
per compression scheme, one after the other in one run, same seed, and reports for each:

* bytes of gradient messages per update (``perf/grad_bytes_per_update``, what the workers
  actually sent, measured by the learner) and the ratio to float32;
* the deterministic evaluation return of the final weights (``--episodes`` episodes) and its
  ratio to the uncompressed run's (target: within 10%);
* training wall time.

Usage:
    python benchmarks/compression.py [--schemes none,q2,sign1] [--steps 1000000] [--episodes 20]
        [--set KEY=VALUE ...]

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
RETURN_TAG = "charts/episodic_return"
# Mode dppo makes one gradient round trip per minibatch: bigger minibatches than the CleanRL
# preset keep the run to minutes (the same for every scheme, so the comparison is fair).
DPPO_OVERRIDES = ["layers.0.dppo.mode=dppo", "layers.0.ppo.minibatch_size=256", "layers.0.dppo.train_batch_size=4096",
                  "layers.0.dppo.num_envs_per_worker=2", "train.checkpoint_every=1000", "train.eval_episodes=0"]


def train_one(config: str, scheme: str, steps: int, extra: list[str], run_dir: Path, episodes: int) -> dict:
    from hdppo.platform import metrics as M
    from hdppo.platform.checkpoint import learner_states
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import evaluate
    from hdppo.platform.trainer import Trainer

    cfg = load_config(config, DPPO_OVERRIDES + [f"layers.0.dppo.compression={scheme}",
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
    curve = [(r["step"], r["value"]) for r in rows if r["tag"] == RETURN_TAG]
    return {"scheme": scheme, "env_steps": summary["env_steps"], "wall_s": wall,
            "bytes_per_update": statistics.median(sent), "eval_mean": statistics.fmean(returns),
            "eval_std": statistics.pstdev(returns), "returns": returns, "curve": curve}


def plot(path: Path, results: list[dict], env_id: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sys.path.insert(0, str(HERE))
    from learning import smooth

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        steps, values = zip(*r["curve"]) if r["curve"] else ((), ())
        ax.plot(steps, smooth(list(values), 10), label=f"{r['scheme']} (eval {r['eval_mean']:.0f})")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episodic return (smoothed)")
    ax.set_title(f"hdppo mode dppo, gradient compression: {env_id}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(results: list[dict], info: dict, config: str, steps: int, episodes: int, target: float) -> str:
    base = next(r for r in results if r["scheme"] == "none")
    lines = ["# Gradient compression: bytes per update and learning parity", "",
             f"`python benchmarks/compression.py`: `{config}` in mode `dppo` "
             f"({', '.join(f'`{o}`' for o in DPPO_OVERRIDES[1:4])}), {steps:,} env steps per scheme, same seed, "
             f"deterministic evaluation on {episodes} episodes.", "",
             f"Measured {info['timestamp_utc']} on {info.get('cpu_model')}, {info.get('cpu_count')} CPUs "
             f"(load average at start {info.get('load_avg_1_5_15', ['?'])[0]:.1f}: other runs shared the machine; this is a "
             "learning comparison, not a timing one).", "",
             "| scheme | gradient bytes / update | fewer bytes than fp32 | eval return | vs uncompressed | wall s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        ratio = r["eval_mean"] / base["eval_mean"] if base["eval_mean"] else float("nan")
        lines.append(f"| {r['scheme']}{' (run ' + r['reused_from'] + ')' if r.get('reused_from') else ''} | {r['bytes_per_update']:,.0f} | {base['bytes_per_update'] / r['bytes_per_update']:.1f}x "
                     f"| {r['eval_mean']:.1f} ± {r['eval_std']:.1f} | {ratio:.0%} | {r['wall_s']:.0f} |")
    lines.append("")
    for r in results:
        if r["scheme"] == "none":
            continue
        fewer = base["bytes_per_update"] / r["bytes_per_update"]
        parity = r["eval_mean"] >= (1 - target) * base["eval_mean"]
        lines.append(f"- `{r['scheme']}`: {fewer:.1f}x fewer bytes; return within {target:.0%} of uncompressed: "
                     f"**{'met' if parity else 'NOT met'}**")
    lines += ["", "![curves](compression.png)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "hopper.yaml"))
    p.add_argument("--schemes", default="none,q2,sign1")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--target", type=float, default=0.10, help="allowed relative return loss")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--results", type=Path, default=HERE / "results")
    p.add_argument("--reuse", type=Path, help="a compression.json whose results for the same config and steps are "
                   "kept instead of retraining (e.g. the uncompressed baseline after a quantiser change)")
    p.add_argument("--reuse-schemes", default="none", help="which schemes --reuse keeps (default none)")
    args = p.parse_args(argv)
    schemes = args.schemes.split(",")
    if "none" not in schemes:
        schemes.insert(0, "none")
    info = machine_info()
    from hdppo.platform.config import load_config

    env_id = load_config(args.config).env.name
    args.results.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="hdppo-compression-"))
    results: list[dict] = []
    reused: dict[str, dict] = {}
    if args.reuse:
        old = json.loads(args.reuse.read_text())
        if Path(old["config"]).name != Path(args.config).name or old["steps"] != args.steps:
            raise SystemExit(f"compression.py: --reuse {args.reuse} was measured with {old['config']} at "
                             f"{old['steps']:,} steps, not {args.config} at {args.steps:,}")
        keep = set(args.reuse_schemes.split(","))
        reused = {r["scheme"]: {"reused_from": old["machine"]["timestamp_utc"]} | r for r in old["results"] if r["scheme"] in keep}
    try:
        for scheme in schemes:
            r = reused.get(scheme) or train_one(args.config, scheme, args.steps, args.set, tmp / scheme, args.episodes)
            print(f"[compression] {scheme}: {r['bytes_per_update']:,.0f} B/update, eval {r['eval_mean']:.1f} ± "
                  f"{r['eval_std']:.1f}, {r['wall_s']:.0f}s", flush=True)
            results.append(r)
            # Written after every scheme: a long run stopped part-way still leaves its figures.
            (args.results / "compression.json").write_text(json.dumps(
                {"machine": info, "config": args.config, "steps": args.steps, "results": results}, indent=1))
            plot(args.results / "compression.png", results, env_id)
            md = render(results, info, Path(args.config).name, args.steps, args.episodes, args.target)
            (args.results / "compression.md").write_text(md)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
