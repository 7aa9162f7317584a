"""Scaling: samples/s and speed-up against 1 worker, on a latency-bound env and a CPU-bound one.

* Latency-bound: ``hdppo.envs.builtin.latency`` waits ``--step-ms`` (20 ms) per step, as a robot
  or a remote simulator does; 1, 4, 8, 16, 32 workers, one env each. Ray is started with as many
  logical CPUs as workers + 1, since the workers mostly wait.
* CPU-bound: Hopper-v5 with 1 and 2 workers (4 envs each) on this machine's cores.

Each latency-bound count runs in every ``--modes``: ``sync`` (a barrier per update),
``pipeline`` (the barrier, but the next rollouts run during the update) and ``soft`` (workers
stream chunks and keep collecting during the update; see the README's "Sync modes"). Speed-up is against 1 worker in the same mode.

Samples/s is env steps trained on per second of wall time over the timed updates (sampling,
update and sync included), after one warm-up update, from each run's ``metrics.jsonl``.
Writes benchmarks/results/scaling.{json,md,png}.

Usage: python benchmarks/scaling.py [--workers 1,4,8,16,32] [--modes sync,pipeline,soft] [--iterations 4] [--step-ms 20]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import machine_info  # noqa: E402
from common import throughput_from_metrics  # noqa: E402


def run(env: dict, workers: int, envs: int, steps_per_env: int, iterations: int, tmp: Path, cpus: int,
        sync: str = "sync") -> float:
    import ray

    from hdppo.platform.config import validate
    from hdppo.platform.trainer import Trainer

    batch = workers * envs * steps_per_env
    cfg = validate({
        "name": f"scaling-{workers}", "env": env,
        "layers": [{"ppo": {"minibatch_size": min(512, batch), "num_epochs": 2},
                    "dppo": {"num_workers": workers, "num_envs_per_worker": envs, "train_batch_size": batch,
                             "sync": "sync" if sync == "pipeline" else sync, "pipeline": sync == "pipeline"}}],
        "train": {"total_env_steps": batch * (iterations + 1), "checkpoint_every": 1000, "eval_episodes": 0},
        "ray": {"num_cpus": cpus}})
    if ray.is_initialized():
        ray.shutdown()
    trainer = Trainer(cfg, tmp / f"{cfg.name}-{sync}-{env.get('id') or 'latency'}", quiet=True)
    try:
        trainer.train()
        used = trainer.groups[0].num_workers
    finally:
        trainer.shutdown()
        ray.shutdown()
    assert used == workers, f"asked for {workers} workers, Ray placed {used}"
    # From the end of the warm-up update to the end of the last, as throughput.py measures.
    return throughput_from_metrics(trainer.run_dir / "metrics.jsonl", warmup=1)["env_steps_per_s"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", default="1,4,8,16,32")
    p.add_argument("--modes", default="sync,pipeline,soft")
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--skip-hopper", action="store_true")
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    modes = args.modes.split(",")
    latency_env = {"entry_point": "hdppo.envs.builtin.latency:make", "kwargs": {"step_ms": args.step_ms}}
    out: dict = {"machine": machine_info(), "step_ms": args.step_ms, "latency": {m: {} for m in modes}, "cpu_bound": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            for mode in modes:
                rate = run(latency_env, n, 1, 50, args.iterations, Path(tmp), cpus=n + 1, sync=mode)
                out["latency"][mode][n] = rate
                print(f"[scaling] latency-bound, {mode}, {n:2d} workers: {rate:8.1f} samples/s", flush=True)
        for n in () if args.skip_hopper else (1, 2):
            rate = run({"id": "Hopper-v5"}, n, 4, 500, args.iterations, Path(tmp), cpus=2)
            out["cpu_bound"][n] = rate
            print(f"[scaling] Hopper-v5, {n} workers: {rate:8.1f} samples/s", flush=True)
    lat = out["latency"]
    head = "| workers | " + " | ".join(f"`{m}` samples/s | `{m}` speed-up" for m in modes) + " |"
    rule = "|---:|" + "---:|---:|" * len(modes)
    rows = "\n".join(f"| {n} | " + " | ".join(f"{lat[m][n]:,.1f} | {lat[m][n] / lat[m][counts[0]]:.1f}x" for m in modes) + " |"
                     for n in counts)
    targets = {16: 15, 32: 28}
    verdicts = "\n".join(f"- `{m}`: " + "; ".join(
        f"{n} workers {lat[m][n] / lat[m][counts[0]]:.1f}x (target >= {t}x: "
        f"{'met' if lat[m][n] / lat[m][counts[0]] >= t else 'NOT met'})" for n, t in targets.items() if n in lat[m])
        for m in modes)
    hop = out["cpu_bound"]
    hopper = (f"## CPU-bound: Hopper-v5, 4 envs per worker\n\n| workers | samples/s | speed-up |\n|---:|---:|---:|\n"
              f"| 1 | {hop[1]:,.0f} | 1.0x |\n| 2 | {hop[2]:,.0f} | {hop[2] / hop[1]:.2f}x |\n\n") if hop else ""
    m = out["machine"]
    md = (f"# Scaling\n\nMeasured {m.get('timestamp_utc')} on {m.get('cpu_model')}, {m.get('cpu_count')} CPUs "
          f"(load average at start {m['load_avg_1_5_15'][0]:.1f}).\n\n"
          f"## Latency-bound env ({args.step_ms:g} ms per step, 1 env per worker)\n\n"
          f"{head}\n{rule}\n{rows}\n\n{verdicts}\n\nThe article claims 14x at 16.\n\n{hopper}![scaling](scaling.png)\n")
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "scaling.json").write_text(json.dumps(out, indent=2))
    (args.results / "scaling.md").write_text(md)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = counts
    for mode in modes:
        ax.plot(xs, [lat[mode][n] / lat[mode][counts[0]] for n in xs], "o-", label=f"hdppo sync={mode}, latency-bound env")
    ax.plot(xs, xs, "--", color="grey", label="linear")
    ax.set_xlabel("workers")
    ax.set_ylabel("speed-up vs 1 worker")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.results / "scaling.png", dpi=120)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
