"""Side-by-side PPO training throughput: raw env limit vs RLlib vs hdppo (central, pipeline, soft, dppo).

For every env (default Hopper-v5 and Ant-v5) this measures, in one run on one machine:

* ``raw``            -- random-action env steps/s, one process per core, no RL framework
                        (``raw_env_limit.py``); the hardware ceiling.
* ``rllib``          -- stock RLlib PPO (``rllib_ppo.py``).
* ``hdppo_central``  -- hdppo, ``dppo.mode: central`` (workers ship batches, learner runs SGD).
* ``hdppo_pipeline`` -- the same with ``dppo.pipeline: true`` (workers sample during the update).
* ``hdppo_soft``     -- the same with ``dppo.sync: soft`` (no barrier: workers stream chunks and
                        never stop collecting; each update takes the first full batch).
* ``hdppo_dppo``     -- hdppo, ``dppo.mode: dppo`` (workers compute gradients, learner averages).

All PPO runs use the same settings: 2 workers x 4 envs, train batch 4000, minibatch 512,
5 epochs, MLP [64, 64] tanh, entropy 0, on one shared Ray (``num_cpus=2``). Throughput is
*whole-iteration* training throughput -- env steps of the timed iterations divided by their
wall time (sampling + update + weight sync), after ``--warmup`` iterations -- for RLlib and
hdppo alike. For hdppo it is taken from ``metrics.jsonl``: the ``time`` stamps of the
``perf/env_steps_per_s`` records, which are written right after each update, so
(step_last - step_warm) / (time_last - time_warm) also covers the logging between updates.

Targets: hdppo >= 1.5x RLlib and >= 50% of the raw limit.

Usage:
    python benchmarks/throughput.py [--envs Hopper-v5,Ant-v5] [--iterations 10] [--quick]

Writes benchmarks/results/throughput.{json,md} (``--quick``: throughput_quick.{json,md}, so
that a smoke run never overwrites real numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import machine_info  # noqa: E402

TRAIN_BATCH = 4000
NUM_WORKERS = 2
ENVS_PER_WORKER = 4
MINIBATCH = 512
EPOCHS = 5
HIDDEN = [64, 64]
RAY_CPUS = 2
TARGET_VS_RLLIB = 1.5
TARGET_VS_RAW = 0.5
# pipeline: mode central with dppo.pipeline on; soft: mode central with dppo.sync soft (workers
# stream chunks and never stop collecting; the learner takes the first full batch)
MODES = ("central", "pipeline", "soft", "dppo")


# ----------------------------------------------------------------------------- hdppo

def hdppo_config_dict(env_id: str, mode: str, total_env_steps: int, seed: int = 0) -> dict:
    return {
        "name": f"bench-{env_id}-{mode}",
        "env": {"id": env_id},
        "layers": [{
            "name": "control",
            "policy": {"hidden": list(HIDDEN), "activation": "tanh"},
            "ppo": {"minibatch_size": MINIBATCH, "num_epochs": EPOCHS, "lr": 3e-4, "lr_schedule": "constant",
                    "gamma": 0.99, "gae_lambda": 0.95, "clip": 0.2, "vf_coeff": 0.5,
                    "entropy_coeff": 0.0, "entropy_coeff_final": 0.0},
            "dppo": {"mode": "dppo" if mode == "dppo" else "central", "pipeline": mode == "pipeline",
                     "sync": "soft" if mode == "soft" else "sync",
                     "num_workers": NUM_WORKERS, "num_envs_per_worker": ENVS_PER_WORKER,
                     "train_batch_size": TRAIN_BATCH},
        }],
        # checkpoint_every larger than the run: only the final checkpoint, after the timed updates.
        "train": {"total_env_steps": total_env_steps, "seed": seed, "checkpoint_every": 1_000_000,
                  "eval_episodes": 1},
    }


def throughput_from_metrics(path: Path, warmup: int) -> dict:
    """Whole-iteration env steps/s after ``warmup`` updates, from a run's metrics.jsonl."""
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    per_update = sorted((r for r in recs if r["tag"] == "perf/env_steps_per_s"), key=lambda r: r["step"])
    by_tag: dict[str, list[float]] = {}
    for r in recs:
        by_tag.setdefault(r["tag"], []).append(r["value"])
    if len(per_update) <= warmup:
        raise RuntimeError(f"{path}: only {len(per_update)} updates logged, need more than warmup={warmup}")
    w = per_update[warmup - 1] if warmup > 0 else None
    last = per_update[-1]
    timed = per_update[warmup:]
    if w is None:  # no warm-up: fall back to the first update's own duration for the start time
        first = timed[0]
        t0 = first["time"] - first["step"] / first["value"]
        s0 = 0
    else:
        t0, s0 = w["time"], w["step"]
    wall = last["time"] - t0
    steps = last["step"] - s0

    def mean_after(tag: str) -> float | None:
        vals = by_tag.get(tag, [])[warmup:]
        return round(statistics.fmean(vals), 4) if vals else None

    return {
        "env_steps_per_s": round(steps / wall, 1),
        "env_steps": int(steps),
        "wall_s": round(wall, 2),
        "updates_timed": len(timed),
        # cross-check: mean of hdppo's own per-update figure (iteration wall only, no logging)
        "perf_env_steps_per_s_mean": round(statistics.fmean(r["value"] for r in timed), 1),
        "sample_s_mean": mean_after("perf/sample_s"),
        "update_s_mean": mean_after("perf/update_s"),
    }


def hdppo_env_steps_per_s(env_id: str, mode: str, iterations: int, warmup: int, tmp: Path) -> dict:
    from hdppo.platform.config import validate
    from hdppo.platform.trainer import Trainer

    total = (warmup + iterations) * TRAIN_BATCH
    cfg = validate(hdppo_config_dict(env_id, mode, total), source=f"throughput.py ({env_id}, {mode})")
    run_dir = tmp / f"{env_id}-{mode}"
    trainer = Trainer(cfg, run_dir, quiet=True)
    t0 = time.perf_counter()
    try:
        summary = trainer.train()
        workers = trainer.groups[0].num_workers  # after Ray capped it at the CPUs it reports
    finally:
        trainer.shutdown()  # also kills the parameter-service actor
    out = throughput_from_metrics(run_dir / "metrics.jsonl", warmup)
    out.update({"env_id": env_id, "mode": mode, "iterations": iterations, "warmup": warmup,
                "num_workers": workers, "total_wall_s_incl_setup_eval": round(time.perf_counter() - t0, 1),
                "summary_env_steps": summary["env_steps"],
                "expected_env_steps": iterations * TRAIN_BATCH})
    return out


# ----------------------------------------------------------------------------- the run

def _safe(what: str, fn, *args, **kwargs) -> dict:
    print(f"[throughput] {what} ...", flush=True)
    t0 = time.perf_counter()
    try:
        res = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - record and carry on with the other measurements
        traceback.print_exc()
        res = {"error": f"{type(exc).__name__}: {exc}"}
    key = "steps_per_s" if "steps_per_s" in res else "env_steps_per_s"
    print(f"[throughput] {what}: {res.get(key, res.get('error'))}  ({time.perf_counter() - t0:.0f}s)", flush=True)
    return res


def _rate(res: dict | None) -> float | None:
    if not res or "error" in res:
        return None
    return res.get("env_steps_per_s", res.get("steps_per_s"))


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def ratios(entry: dict) -> dict:
    raw, rllib = _rate(entry.get("raw")), _rate(entry.get("rllib"))
    out = {}
    for mode in MODES:
        h = _rate(entry.get(f"hdppo_{mode}"))
        vs_rllib, vs_raw = _ratio(h, rllib), _ratio(h, raw)
        out[mode] = {
            "hdppo_over_rllib": vs_rllib,
            "hdppo_over_raw": vs_raw,
            "target_vs_rllib_met": None if vs_rllib is None else vs_rllib >= TARGET_VS_RLLIB,
            "target_vs_raw_met": None if vs_raw is None else vs_raw >= TARGET_VS_RAW,
        }
    out["rllib_over_raw"] = _ratio(rllib, raw)
    return out


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.0f}%" if pct else f"{x:,.0f}"


def _met(flag: bool | None) -> str:
    return "n/a" if flag is None else ("met" if flag else "NOT met")


def render_markdown(report: dict) -> str:
    s, m = report["settings"], report["machine"]
    lines = [
        "# Training throughput: hdppo vs RLlib vs raw env limit",
        "",
        f"{'**Smoke run (`--quick`): numbers are not meaningful.**' if s['quick'] else ''}".strip(),
        "",
        f"Run {m['timestamp_utc']} on `{m['hostname']}`: {m['cpu_model']}, {m['cpu_count']} CPUs "
        f"(load avg at start {', '.join(f'{x:.2f}' for x in (m.get('load_avg_1_5_15') or []))}), "
        f"{m['mem_total_gib']} GiB; Python {m['python']}, torch {m['torch']}, Ray {m['ray']}, "
        f"Gymnasium {m['gymnasium']}, MuJoCo {m['mujoco']}.",
        "",
        f"Settings (all PPO runs): {s['num_workers']} workers x {s['envs_per_worker']} envs, train batch "
        f"{s['train_batch']}, minibatch {s['minibatch']}, {s['epochs']} epochs, MLP {s['hidden']} tanh, "
        f"entropy 0; shared Ray with num_cpus={s['ray_cpus']}; {s['iterations']} timed iterations after "
        f"{s['warmup']} warm-up. Raw limit: {s['raw_seconds']}s, one process per core, random actions.",
        "",
        "Env steps/s are whole-iteration training throughput (sampling + update + weight sync), "
        "the same definition for RLlib and hdppo.",
        "",
        "| env | raw limit | RLlib | " + " | ".join(f"hdppo {m}" for m in MODES) + " | RLlib/raw |",
        "|---|---:|---:|" + "---:|" * len(MODES) + "---:|",
    ]
    for env_id, e in report["results"].items():
        r = e["ratios"]
        lines.append(f"| {env_id} | {_fmt(_rate(e.get('raw')))} | {_fmt(_rate(e.get('rllib')))} | "
                     + "".join(f"{_fmt(_rate(e.get(f'hdppo_{m}')))} | " for m in MODES) +
                     f"{_fmt(r['rllib_over_raw'], pct=True)} |")
    lines += ["", f"Targets: hdppo >= {TARGET_VS_RLLIB}x RLlib, hdppo >= {100 * TARGET_VS_RAW:.0f}% of raw.", "",
              "| env | mode | hdppo/RLlib | target | hdppo/raw | target | sample s/iter | update s/iter |",
              "|---|---|---:|---|---:|---|---:|---:|"]
    for env_id, e in report["results"].items():
        for mode in MODES:
            r, h = e["ratios"][mode], e.get(f"hdppo_{mode}") or {}
            vs_rllib = "n/a" if r["hdppo_over_rllib"] is None else f"{r['hdppo_over_rllib']:.2f}x"
            lines.append(f"| {env_id} | {mode} | {vs_rllib} | {_met(r['target_vs_rllib_met'])} | "
                         f"{_fmt(r['hdppo_over_raw'], pct=True)} | {_met(r['target_vs_raw_met'])} | "
                         f"{h.get('sample_s_mean', 'n/a')} | {h.get('update_s_mean', 'n/a')} |")
    errors = [(env_id, k, v["error"]) for env_id, e in report["results"].items()
              for k, v in e.items() if isinstance(v, dict) and "error" in v]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {env_id} {k}: `{msg}`" for env_id, k, msg in errors]
    lines += ["", "Notes: hdppo keeps its default observation and reward normalization on (RLlib's default "
              "new-stack PPO has neither), so hdppo does slightly more work per step. Setup (actor start) "
              "and the final evaluation are outside the timed window for both frameworks.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="Hopper-v5,Ant-v5", help="comma-separated Gymnasium ids")
    ap.add_argument("--iterations", type=int, default=10, help="timed PPO iterations (default 10)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed PPO iterations first (default 1)")
    ap.add_argument("--raw-seconds", type=float, default=10.0, help="duration of the raw-limit run per env")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: raw,rllib,central,pipeline,soft,dppo")
    ap.add_argument("--quick", action="store_true", help="tiny budgets for a smoke run (1 timed iteration, 2 s raw)")
    ap.add_argument("--out", default=None, help="output stem in benchmarks/results (default throughput, "
                    "or throughput_quick with --quick)")
    args = ap.parse_args(argv)
    if args.quick:
        args.iterations, args.warmup, args.raw_seconds = 1, 1, 2.0
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    stem = args.out or ("throughput_quick" if args.quick else "throughput")

    info = machine_info()
    settings = {"envs": envs, "iterations": args.iterations, "warmup": args.warmup,
                "raw_seconds": args.raw_seconds, "quick": args.quick, "train_batch": TRAIN_BATCH,
                "num_workers": NUM_WORKERS, "envs_per_worker": ENVS_PER_WORKER, "minibatch": MINIBATCH,
                "epochs": EPOCHS, "hidden": HIDDEN, "ray_cpus": RAY_CPUS, "skipped": sorted(skip)}
    results: dict[str, dict] = {e: {} for e in envs}

    # 1. Raw limit first, before Ray exists, so no idle Ray process competes for the cores.
    if "raw" not in skip:
        from raw_env_limit import raw_env_steps_per_s
        for env_id in envs:
            results[env_id]["raw"] = _safe(f"{env_id} raw limit", raw_env_steps_per_s, env_id,
                                           seconds=args.raw_seconds)

    # 2. One shared Ray for RLlib and hdppo.
    import ray
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False)
    try:
        with tempfile.TemporaryDirectory(prefix="hdppo_throughput_") as tmp:
            for env_id in envs:
                if "rllib" not in skip:
                    from rllib_ppo import rllib_env_steps_per_s
                    results[env_id]["rllib"] = _safe(f"{env_id} RLlib", rllib_env_steps_per_s, env_id,
                                                     iterations=args.iterations, warmup=args.warmup)
                for mode in MODES:
                    if mode not in skip:
                        results[env_id][f"hdppo_{mode}"] = _safe(
                            f"{env_id} hdppo {mode}", hdppo_env_steps_per_s, env_id, mode,
                            args.iterations, args.warmup, Path(tmp))
    finally:
        ray.shutdown()

    for entry in results.values():
        entry["ratios"] = ratios(entry)
    report = {"machine": info, "settings": settings, "results": results,
              "targets": {"hdppo_over_rllib": TARGET_VS_RLLIB, "hdppo_over_raw": TARGET_VS_RAW}}

    out_dir = HERE / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    md = render_markdown(report)
    (out_dir / f"{stem}.md").write_text(md)
    print()
    print(md)
    print(f"[throughput] wrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
