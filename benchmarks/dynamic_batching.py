"""Dynamic batching and pipelining on a pool whose workers run at different speeds.

``hdppo.envs.builtin.latency`` with ``step_ms`` a list: worker ``i`` waits ``step_ms[i]`` per
step (default 5, 5, 5 and 20 ms: one worker four times slower, as an old machine or a loaded
simulator is). The same training (4 workers x 1 env, batch 800, 2 epochs) in each mode:

* ``sync``: a barrier; every worker gives an equal share, so each update waits for the slowest;
* ``pipeline``: the same barrier, but the next rollouts run during the update (lag 1);
* ``soft``: no barrier; chunks from whichever workers are fastest fill the batch (dynamic
  batching), collection never stops (pipelining), weights refreshed inside rollouts;
* ``async``: the learner updates on whatever has arrived.

Throughput is env steps trained on per second of wall time over the timed updates (after a
warm-up), from each run's ``metrics.jsonl``; speed-up is against ``sync`` in the same run.

``soft_1`` and ``async_1`` are those modes with one chunk in flight per worker
(``dppo.chunks_in_flight: 1``, the behaviour before that setting; the default queues a whole
rollout, ``chunks_per_worker`` chunks).

Usage: python benchmarks/dynamic_batching.py [--step-ms 5,5,5,20] [--updates 8] [--modes sync,pipeline,soft,async,soft_1,async_1] [--out NAME]

Writes benchmarks/results/<--out>.{json,md} (default dynamic_batching).
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
from common import command_line, throughput_from_metrics  # noqa: E402

MODES = {"sync": {}, "pipeline": {"pipeline": True}, "soft": {"sync": "soft"}, "async": {"sync": "async"},
         # soft and async as they were before chunks_in_flight (one chunk queued per worker): the comparison
         # that shows what keeping workers busy during the update is worth
         "soft_1": {"sync": "soft", "chunks_in_flight": 1}, "async_1": {"sync": "async", "chunks_in_flight": 1}}


def run(mode: str, step_ms: list[float], batch: int, updates: int, warmup: int, tmp: Path) -> dict:
    import ray

    from hdppo.platform import metrics as M
    from hdppo.platform.config import validate
    from hdppo.platform.trainer import Trainer

    workers = len(step_ms)
    cfg = validate({
        "name": f"dynbatch-{mode}",
        "env": {"entry_point": "hdppo.envs.builtin.latency:make", "kwargs": {"step_ms": step_ms, "max_steps": 100}},
        "layers": [{"ppo": {"minibatch_size": 200, "num_epochs": 2},
                    "dppo": {"num_workers": workers, "num_envs_per_worker": 1, "train_batch_size": batch,
                             "max_lag": 3, **MODES[mode]}}],
        "train": {"total_env_steps": batch * (updates + warmup), "checkpoint_every": 10_000, "eval_episodes": 0},
        "ray": {"num_cpus": workers + 1}})
    if ray.is_initialized():
        ray.shutdown()
    trainer = Trainer(cfg, tmp / cfg.name, quiet=True)
    try:
        trainer.train()
    finally:
        trainer.shutdown()
        ray.shutdown()
    rows = M.read_jsonl(trainer.run_dir / "metrics.jsonl")
    timed = throughput_from_metrics(trainer.run_dir / "metrics.jsonl", warmup)
    share = {}
    for r in rows:
        if r["tag"].startswith(M.PERF_WORKER_SAMPLES + "/"):
            w = int(r["tag"].rsplit("/", 1)[1])
            share[w] = share.get(w, 0.0) + r["value"]
    total = sum(share.values())
    lags = [r["value"] for r in rows if r["tag"] == M.PERF_MAX_STALENESS]
    return {"mode": mode, "steps_per_s": timed["env_steps_per_s"], "updates": warmup + timed["updates_timed"],
            "worker_share": {w: share[w] / total for w in sorted(share)}, "max_staleness": max(lags)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--step-ms", default="5,5,5,20")
    p.add_argument("--batch", type=int, default=800)
    p.add_argument("--updates", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--modes", default="sync,pipeline,soft,async,soft_1,async_1")
    p.add_argument("--out", default="dynamic_batching", help="result file stem in --results")
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    step_ms = [float(x) for x in args.step_ms.split(",")]
    out: dict = {"machine": machine_info(), "step_ms": step_ms, "batch": args.batch, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            r = run(mode, step_ms, args.batch, args.updates, args.warmup, Path(tmp))
            out["runs"].append(r)
            print(f"[dynamic_batching] {mode:8s} {r['steps_per_s']:8.1f} env steps/s  shares "
                  f"{[round(s, 2) for s in r['worker_share'].values()]}", flush=True)
    base = next(r for r in out["runs"] if r["mode"] == "sync")["steps_per_s"]
    ideal = sum(1000.0 / ms for ms in step_ms)
    m = out["machine"]
    rows = "\n".join(f"| `{r['mode']}` | {r['steps_per_s']:,.1f} | {r['steps_per_s'] / base:.2f}x | "
                     f"{' / '.join(f'{s:.0%}' for s in r['worker_share'].values())} | {r['max_staleness']:.0f} |"
                     for r in out["runs"])
    md = (f"# Dynamic batching and pipelining\n\nMeasured {m.get('timestamp_utc')} on {m.get('cpu_model')}, "
          f"{m.get('cpu_count')} CPUs (load average at start {m['load_avg_1_5_15'][0]:.1f}).\n\n"
          f"Command: `{command_line(argv)}`\n\n"
          f"Latency env, {len(step_ms)} workers x 1 env stepping at {', '.join(f'{s:g}' for s in step_ms)} ms; "
          f"batch {args.batch}, {args.updates} timed updates after {args.warmup} warm-up. The pool's raw stepping "
          f"rate (every worker busy all the time) is {ideal:,.0f} steps/s.\n\n"
          "| mode | env steps/s | vs `sync` | share of samples per worker | max staleness |\n|---|---:|---:|---|---:|\n"
          f"{rows}\n")
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{args.out}.json").write_text(json.dumps(out, indent=2))
    (args.results / f"{args.out}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
