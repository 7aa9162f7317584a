"""Side-by-side flat PPO training throughput: raw env limit vs RLlib vs SB3 vs hdppo (every sync mode),
hdppo sampling with inference, and a two-layer hierarchy with a trivial upper layer.

For every env (default Hopper-v5 and Ant-v5) this measures, in one run on one machine:

* ``raw``            -- random-action env steps/s, one process per core, no RL framework
                        (``raw_env_limit.py``); the hardware ceiling.
* ``sampling``       -- sampling with inference, no learning: one hdppo ``RolloutWorker`` per
                        process, one process per core (``common.py``), as a share of ``raw``, with
                        the training runs' env copies per worker; ``--sampling-copies`` adds rows
                        with other counts (default 8): the sampler's cost per vector step is
                        mostly fixed, so more copies per worker spread it (``sampling_x<N>``).
* ``sb3``            -- Stable-Baselines3 PPO (``sb3_ppo.py``), 8 env copies in one process.
* ``rllib``          -- stock RLlib PPO (``rllib_ppo.py``).
* ``hdppo_central``  -- hdppo, ``dppo.mode: central`` (workers ship batches, learner runs SGD).
* ``hdppo_pipeline`` -- the same with ``dppo.pipeline: true`` (workers sample during the update).
* ``hdppo_soft``     -- the same with ``dppo.sync: soft`` (no barrier: workers stream chunks and
                        never stop collecting; each update takes the first full batch).
* ``hdppo_dppo``     -- hdppo, ``dppo.mode: dppo`` (workers compute gradients, learner averages).
* ``hier_frozen``    -- (``--hier-envs``, default Hopper-v5) two layers: an upper layer with two
                        commands (``action: {type: discrete, n: 2}``, period 10) frozen at its initial
                        weights over the flat run's layer, which observes the command
                        (``observation: {command: true}``; config validation refuses a command the
                        layer below neither sees nor is rewarded for) and is rewarded by the env.
                        As a share of the flat ``central`` run, the two trained in alternation
                        (``--rounds`` pairs: flat, hierarchy, flat, ...; ``hier_flat`` holds those
                        flat runs): measured minutes apart, as before, the VM's drift alone moved
                        the ratio from 79% to 102%. (Not a trained upper layer: in its own
                        group it would sample its own env copies, and in the bottom layer's group its
                        train batch of 4000 decisions would take 40000 env steps per update.)

All PPO runs use the same settings: 2 workers x 4 envs, train batch 4000, minibatch 512,
5 epochs, MLP [64, 64] tanh, entropy 0 (``common.PPOSettings``), on one shared Ray
(``num_cpus=2``). Throughput is *whole-iteration* training throughput -- env steps of the timed
iterations divided by their wall time (sampling + update + weight sync), after ``--warmup``
iterations -- for every framework. For hdppo it is taken from ``metrics.jsonl``: the ``time``
stamps of the ``perf/env_steps_per_s`` records, which are written right after each update, so
(step_last - step_warm) / (time_last - time_warm) also covers the logging between updates.

Targets (issue 9): hdppo >= 2.5x RLlib, >= 2x SB3, >= 65% of raw; sampling >= 80% of raw;
the hierarchy >= 85% of the flat run.

Usage:
    python benchmarks/throughput.py [--envs Hopper-v5,Ant-v5] [--iterations 10] [--quick]

Writes benchmarks/results/throughput.{json,md} (``--quick``: throughput_quick.{json,md}, so
that a smoke run never overwrites real numbers).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import (PPOSettings, add_budget_args, budget, budget_sentence, command_line, errors_section, fmt, fmt_ratio, hdppo_config,  # noqa: E402
                    fold_rounds, hdppo_layer, header, join_md, met, rate, ratio, raw_and_sampling, round_ratios,
                    rounds_note, safe, sampling_steps_per_s, share_cell, throughput_from_metrics, write_report)
from machine import machine_info  # noqa: E402

SETTINGS = PPOSettings()  # 2 workers x 4 envs, batch 4000, minibatch 512, 5 epochs
TRAIN_BATCH = SETTINGS.train_batch
RAY_CPUS = 2
TARGET_VS_RLLIB = 2.5
TARGET_VS_SB3 = 2.0
TARGET_VS_RAW = 0.65
TARGET_SAMPLING_VS_RAW = 0.8
TARGET_HIER_VS_FLAT = 0.85
# pipeline: mode central with dppo.pipeline on; soft: mode central with dppo.sync soft (workers
# stream chunks and never stop collecting; the learner takes the first full batch)
MODES = ("central", "pipeline", "soft", "dppo")
HIERARCHIES = ("frozen",)  # the upper layer keeps its initial weights
PARTS = ("raw", "sampling", "sb3", "rllib", *MODES, *(f"hier_{h}" for h in HIERARCHIES))


# ----------------------------------------------------------------------------- hdppo

def hdppo_config_dict(env_id: str, mode: str, total_env_steps: int, seed: int = 0,
                      hierarchy: str | None = None, settings: PPOSettings = SETTINGS) -> dict:
    """The flat run in ``mode``, or (``hierarchy="frozen"``) the two-layer run over it."""
    control = hdppo_layer(settings, "control", mode)
    layers = [control]
    if hierarchy is not None:
        planner = hdppo_layer(settings, "planner", mode, period=10, action={"type": "discrete", "n": 2},
                              schedule={"mode": "frozen"})
        control["observation"] = {"command": True}
        layers = [planner, control]
    name = f"bench-{env_id}-{mode}" + (f"-hier-{hierarchy}" if hierarchy else "")
    return hdppo_config(name, {"id": env_id}, layers, total_env_steps, seed, eval_episodes=1)


def hdppo_env_steps_per_s(env_id: str, mode: str, iterations: int, warmup: int, tmp: Path,
                          hierarchy: str | None = None) -> dict:
    from hdppo.platform.config import validate
    from hdppo.platform.trainer import Trainer

    total = (warmup + iterations) * TRAIN_BATCH
    cfg = validate(hdppo_config_dict(env_id, mode, total, hierarchy=hierarchy),
                   source=f"throughput.py ({env_id}, {mode}, hierarchy {hierarchy})")
    # A fresh folder per call: the flat run is trained again in each round beside the hierarchy.
    run_dir = Path(tempfile.mkdtemp(prefix=f"{env_id}-{mode}-{hierarchy or 'flat'}-", dir=tmp)) / "run"
    trainer = Trainer(cfg, run_dir, quiet=True)
    t0 = time.perf_counter()
    try:
        summary = trainer.train()
        workers = trainer.groups[0].num_workers  # after Ray capped it at the CPUs it reports
    finally:
        trainer.shutdown()  # also kills the parameter-service actor
    # The bottom layer's records: its env steps are the run's.
    out = throughput_from_metrics(run_dir / "metrics.jsonl", warmup, layer="control")
    out.update({"env_id": env_id, "mode": mode, "hierarchy": hierarchy, "iterations": iterations,
                "warmup": warmup, "num_workers": workers,
                "total_wall_s_incl_setup_eval": round(time.perf_counter() - t0, 1),
                "summary_env_steps": summary["env_steps"], "expected_env_steps": iterations * TRAIN_BATCH})
    return out


def sampling(env_id: str, seconds: float, copies: int = SETTINGS.envs_per_worker) -> dict:
    cfg = hdppo_config_dict(env_id, "central", 10**9, settings=dataclasses.replace(SETTINGS, envs_per_worker=copies))
    cfg["ray"] = {"backend": "local"}
    out = sampling_steps_per_s(cfg, "control", seconds, procs=SETTINGS.num_workers)
    out.update(seconds=seconds, envs_per_worker=copies)
    return out


def sampling_key(copies: int) -> str:
    """The result key of sampling with ``copies`` env copies per worker (the training runs' count: ``sampling``)."""
    return "sampling" if copies == SETTINGS.envs_per_worker else f"sampling_x{copies}"


# ----------------------------------------------------------------------------- the run

def ratios(entry: dict) -> dict:
    raw, rllib, sb3 = rate(entry.get("raw")), rate(entry.get("rllib")), rate(entry.get("sb3"))
    out = {}
    rounds = entry.get("rounds") or {}  # --train-rounds: every round's run of each framework
    for mode in MODES:
        h = rate(entry.get(f"hdppo_{mode}"))
        out[mode] = {"hdppo_over_rllib": ratio(h, rllib), "hdppo_over_sb3": ratio(h, sb3),
                     "hdppo_over_raw": ratio(h, raw)}
        for base in ("rllib", "sb3"):
            per_round = round_ratios(rounds.get(f"hdppo_{mode}", []), rounds.get(base, []))
            out[mode][f"hdppo_over_{base}_rounds"] = per_round
            if per_round:  # the mean of the within-round ratios: the VM drifts between rounds
                out[mode][f"hdppo_over_{base}"] = sum(per_round) / len(per_round)
    # The flat runs trained in alternation with the hierarchies where there are any (older
    # reports: the one central run).
    flat = rate(entry.get("hier_flat")) or rate(entry.get("hdppo_central"))
    for h in HIERARCHIES:
        out[f"hier_{h}_over_flat"] = ratio(rate(entry.get(f"hier_{h}")), flat)
    out["sampling_over_raw"] = ratio(rate(entry.get("sampling")), raw)
    for key in entry:
        if key.startswith("sampling_x"):
            out[f"{key}_over_raw"] = ratio(rate(entry[key]), raw)
    out["rllib_over_raw"] = ratio(rllib, raw)
    out["sb3_over_raw"] = ratio(sb3, raw)
    return out


def render_markdown(report: dict) -> str:
    s = report["settings"]
    lines = header("Training throughput: hdppo vs RLlib vs Stable-Baselines3 vs raw env limit", report) + [
        f"Settings (all PPO runs): {s['describe']}; shared Ray with num_cpus={s['ray_cpus']} (SB3: one process, "
        f"{s['num_workers'] * s['envs_per_worker']} env copies in a DummyVecEnv). {budget_sentence(s)}",
        "",
        "Env steps/s are whole-iteration training throughput (sampling + update + weight sync), "
        "the same definition for every framework.",
        "",
        "| env | raw limit | sampling | SB3 | RLlib | " + " | ".join(f"hdppo {m}" for m in MODES) + " | "
        + " | ".join(f"hierarchy {h}" for h in HIERARCHIES) + " |",
        "|---|---:|---:|---:|---:|" + "---:|" * (len(MODES) + len(HIERARCHIES)),
    ]
    for env_id, e in report["results"].items():
        lines.append(f"| {env_id} | {fmt(rate(e.get('raw')))} | {fmt(rate(e.get('sampling')))} | "
                     f"{fmt(rate(e.get('sb3')))} | {fmt(rate(e.get('rllib')))} | "
                     + "".join(f"{fmt(rate(e.get(f'hdppo_{m}')))} | " for m in MODES)
                     + "".join(f"{fmt(rate(e.get(f'hier_{h}')))} | " for h in HIERARCHIES).rstrip())
    lines += ["", f"Targets: hdppo >= {TARGET_VS_RLLIB}x RLlib, >= {TARGET_VS_SB3}x SB3, >= "
              f"{100 * TARGET_VS_RAW:.0f}% of raw.", "",
              "| env | mode | hdppo/RLlib | target | hdppo/SB3 | target | hdppo/raw | target | sample s/iter | "
              "update s/iter |",
              "|---|---|---:|---|---:|---|---:|---|---:|---:|"]
    for env_id, e in report["results"].items():
        for mode in MODES:
            r, h = e["ratios"][mode], e.get(f"hdppo_{mode}") or {}
            lines.append(f"| {env_id} | {mode} | {fmt_ratio(r['hdppo_over_rllib'])}"
                         f"{rounds_note(r.get('hdppo_over_rllib_rounds'))} | "
                         f"{met(r['hdppo_over_rllib'], TARGET_VS_RLLIB)} | {fmt_ratio(r['hdppo_over_sb3'])}"
                         f"{rounds_note(r.get('hdppo_over_sb3_rounds'))} | "
                         f"{met(r['hdppo_over_sb3'], TARGET_VS_SB3)} | {fmt(r['hdppo_over_raw'], pct=True)} | "
                         f"{met(r['hdppo_over_raw'], TARGET_VS_RAW)} | "
                         f"{h.get('sample_s_mean', 'n/a')} | {h.get('update_s_mean', 'n/a')} |")
    lines += ["", f"Sampling with inference (target >= {100 * TARGET_SAMPLING_VS_RAW:.0f}% of raw) and the "
              f"two-layer hierarchy (target >= {100 * TARGET_HIER_VS_FLAT:.0f}% of the flat `central` run):", "",
              "| env | sampling/raw | target | " + " | ".join(f"hierarchy {h}/flat | target" for h in HIERARCHIES) + " |",
              "|---|---:|---|" + "---:|---|" * len(HIERARCHIES)]
    for env_id, e in report["results"].items():
        r = e["ratios"]
        lines.append(f"| {env_id} | {share_cell(e.get('sampling'), r['sampling_over_raw'])} | "
                     f"{met(r['sampling_over_raw'], TARGET_SAMPLING_VS_RAW)} | "
                     + "".join(f"{share_cell(e.get(f'hier_{h}'), r[f'hier_{h}_over_flat'])} | "
                               f"{met(r[f'hier_{h}_over_flat'], TARGET_HIER_VS_FLAT)} | " for h in HIERARCHIES).rstrip())
    more = [(env_id, k) for env_id, e in report["results"].items() for k in e if k.startswith("sampling_x")]
    if more:
        lines += ["", f"Sampling with more env copies per worker than the training runs' {s['envs_per_worker']} "
                  "(the same rounds, alternating with the raw limit; training was not run with these):", "",
                  "| env | copies per worker | sampling env steps/s | sampling/raw | target |", "|---|---:|---:|---:|---|"]
        for env_id, e in report["results"].items():
            r = e["ratios"]
            lines.append(f"| {env_id} | {s['envs_per_worker']} | {fmt(rate(e.get('sampling')))} | "
                         f"{share_cell(e.get('sampling'), r['sampling_over_raw'])} | {met(r['sampling_over_raw'], TARGET_SAMPLING_VS_RAW)} |")
            for env_k, k in more:
                if env_k == env_id:
                    lines.append(f"| {env_id} | {e[k].get('envs_per_worker', k[10:])} | {fmt(rate(e[k]))} | "
                                 f"{share_cell(e[k], r[f'{k}_over_raw'])} | {met(r[f'{k}_over_raw'], TARGET_SAMPLING_VS_RAW)} |")
    lines += errors_section(report["results"])
    lines += ["", "Notes: hdppo keeps its default observation and reward normalization on (RLlib's default "
              "new-stack PPO and SB3 without VecNormalize have neither), so hdppo does slightly more work per step. "
              "Setup (actor start) and the final evaluation are outside the timed window for every framework. "
              "The hierarchy's upper layer has two commands, acts every 10 env steps and keeps its initial weights; "
              "it is compared with flat `central` runs trained in alternation with it (its rounds), not with the "
              "`hdppo central` column.", ""]
    return join_md(lines)


def raw_and_sampling_runs(env_id: str, args: argparse.Namespace, skip: set[str], copies: list[int],
                          results: dict[str, dict]) -> None:
    """The raw limit and hdppo's sampling of ``env_id``, alternated in ``--rounds``, into ``results``."""
    from raw_env_limit import raw_env_steps_per_s
    if "raw" not in skip and "sampling" not in skip:
        results[env_id]["raw"], out = raw_and_sampling(
            lambda: safe("throughput", f"{env_id} raw limit", raw_env_steps_per_s, env_id,
                         seconds=args.raw_seconds / args.rounds),
            {sampling_key(c): (lambda c=c: safe("throughput", f"{env_id} hdppo sampling ({c} copies per worker)",
                                                sampling, env_id, args.sample_seconds / args.rounds, c))
             for c in copies},
            args.rounds, "env_steps_per_s")
        results[env_id].update(out)
    elif "raw" not in skip:
        results[env_id]["raw"] = safe("throughput", f"{env_id} raw limit", raw_env_steps_per_s, env_id,
                                      seconds=args.raw_seconds)
    elif "sampling" not in skip:
        results[env_id]["sampling"] = safe("throughput", f"{env_id} hdppo sampling", sampling, env_id,
                                           args.sample_seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="Hopper-v5,Ant-v5", help="comma-separated Gymnasium ids")
    ap.add_argument("--hier-envs", default="Hopper-v5", help="envs that also get the two-layer runs (default Hopper-v5)")
    ap.add_argument("--sampling-copies", default="8", help="comma-separated env copies per worker for extra "
                    f"sampling rows beside the training runs' {SETTINGS.envs_per_worker} (default 8; '' for none)")
    add_budget_args(ap, "throughput", PARTS, iterations=10, warmup=1, raw_seconds=10.0, sample_seconds=15.0)
    args = ap.parse_args(argv)
    try:
        copies = sorted({SETTINGS.envs_per_worker, *(int(c) for c in args.sampling_copies.split(",") if c.strip())})
    except ValueError:
        ap.error(f"--sampling-copies takes comma-separated whole numbers, got {args.sampling_copies!r}")
    if copies[0] < 1:
        ap.error(f"--sampling-copies: every count must be at least 1, got {args.sampling_copies!r}")
    skip, stem = budget(args, "throughput")
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    hier_envs = {e.strip() for e in args.hier_envs.split(",") if e.strip()}

    info = machine_info()
    settings = {"envs": envs, "hier_envs": sorted(hier_envs), "iterations": args.iterations, "warmup": args.warmup,
                "raw_seconds": args.raw_seconds, "rounds": args.rounds, "train_rounds": args.train_rounds, "sample_seconds": args.sample_seconds, "quick": args.quick, "sampling_copies": copies,
                **SETTINGS.as_dict(), "describe": SETTINGS.describe(), "ray_cpus": RAY_CPUS,
                "sb3_vec_env": "dummy", "skipped": sorted(skip)}
    results: dict[str, dict] = {e: {} for e in envs}

    # 1. Before Ray exists, so that no idle Ray process competes for the cores: the raw limit,
    #    sampling (its own processes) and SB3 (in this process). With --train-rounds, SB3, RLlib and
    #    the hdppo modes run again per round, Ray started and stopped around each round's RLlib and
    #    hdppo runs; the raw limit, sampling and the hierarchies run in the first round only.
    train_rounds = max(1, args.train_rounds)
    runs: dict[str, dict[str, list[dict]]] = {e: {} for e in envs}
    for r in range(train_rounds):
        suffix = f", round {r + 1}" if train_rounds > 1 else ""
        for env_id in envs:
            if r == 0:
                raw_and_sampling_runs(env_id, args, skip, copies, results)
            if "sb3" not in skip:
                from sb3_ppo import sb3_env_steps_per_s
                runs[env_id].setdefault("sb3", []).append(safe(
                    "throughput", f"{env_id} SB3{suffix}", sb3_env_steps_per_s, env_id,
                    iterations=args.iterations, warmup=args.warmup, settings=SETTINGS))

        # 2. One shared Ray for RLlib and hdppo.
        import ray
        if not ray.is_initialized():
            ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False)
        try:
            with tempfile.TemporaryDirectory(prefix="hdppo_throughput_") as tmp:
                for env_id in envs:
                    if "rllib" not in skip:
                        from rllib_ppo import rllib_env_steps_per_s
                        runs[env_id].setdefault("rllib", []).append(safe(
                            "throughput", f"{env_id} RLlib{suffix}", rllib_env_steps_per_s, env_id,
                            iterations=args.iterations, warmup=args.warmup, settings=SETTINGS))
                    for mode in MODES:
                        if mode not in skip:
                            runs[env_id].setdefault(f"hdppo_{mode}", []).append(safe(
                                "throughput", f"{env_id} hdppo {mode}{suffix}", hdppo_env_steps_per_s, env_id, mode,
                                args.iterations, args.warmup, Path(tmp)))
                    hiers = [h for h in HIERARCHIES if env_id in hier_envs and f"hier_{h}" not in skip]
                    if hiers and r == 0:  # each beside a flat run of its own round, as the raw limit and sampling are
                        results[env_id]["hier_flat"], out = raw_and_sampling(
                            lambda: safe("throughput", f"{env_id} hdppo central (beside the hierarchy)",
                                         hdppo_env_steps_per_s, env_id, "central", args.iterations, args.warmup, Path(tmp)),
                            {f"hier_{h}": (lambda h=h: safe(
                                "throughput", f"{env_id} hdppo hierarchy ({h} upper layer)", hdppo_env_steps_per_s,
                                env_id, "central", args.iterations, args.warmup, Path(tmp), hierarchy=h)) for h in hiers},
                            args.rounds, "env_steps_per_s")
                        results[env_id].update(out)
        finally:
            ray.shutdown()
    fold_rounds(results, runs)

    for entry in results.values():
        entry["ratios"] = ratios(entry)
    report = {"machine": info, "command": command_line(argv), "settings": settings, "results": results,
              "targets": {"hdppo_over_rllib": TARGET_VS_RLLIB, "hdppo_over_sb3": TARGET_VS_SB3,
                          "hdppo_over_raw": TARGET_VS_RAW, "sampling_over_raw": TARGET_SAMPLING_VS_RAW,
                          "hier_over_flat": TARGET_HIER_VS_FLAT}}
    write_report(stem, report, render_markdown(report), "throughput")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
