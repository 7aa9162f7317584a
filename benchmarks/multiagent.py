"""Multi-agent throughput side by side: raw env limit, hdppo sampling, hdppo vs RLlib (vs the old hdppo).

For MPE ``simple_spread_v3`` (N=3, discrete actions, 25 cycles) and MAgent2 ``battle_v4``
(map 20: 24 agents, 13x13x5 observations) this measures, in one run on one machine:

* ``raw``      -- random actions (masks respected if any), one process per core, no framework
                  (``raw_env_limit.py``): env steps/s and agent steps/s, the ceiling.
* ``sampling`` -- sampling with inference, no learning: one hdppo ``RolloutWorker`` per process,
                  one process per core, ``worker.sample()`` in a loop (``common.py``); agent
                  steps/s as a share of ``raw``. Target: >= 60%.
* ``hdppo``    -- training throughput of ``hdppo train`` (this tree), in a subprocess with its own
                  embedded Ray, whole-iteration env steps/s from its ``metrics.jsonl``.
* ``old``      -- (battle_v4) the same training with the hdppo of commit ``--old-commit``
                  (before issue 9), unpacked to a temp dir and imported in place of this tree
                  (``old_commit.py``). Target: hdppo >= 3x old.
* ``native_sampling``, ``native`` -- (battle_v4) the same sampling and training with the env read
                  from MAgent2's engine arrays (``hdppo.envs.builtin.magent_vector``, env.type
                  vector) instead of the PettingZoo dicts; the share of raw is still against the
                  PettingZoo raw limit, which pays the dicts.
* ``rllib``    -- RLlib PPO, new API stack, one module shared by all agents (``rllib_ppo.py``);
                  battle_v4's observations flattened to vectors for RLlib's MLP encoder.
                  Target (simple_spread_v3): hdppo >= 2.5x RLlib.

All training runs use the same settings: 2 workers x 8 envs, minibatch 512, 5 epochs, MLP
[64, 64] tanh, lr 3e-4, gamma 0.99, lambda 0.95, clip 0.2, entropy 0, one policy shared by all
agents; the train batch counts agent steps (samples): 4000 on simple_spread_v3, 24000 on
battle_v4 (= 1000 env steps of 24 agents; with 4000 each env copy would take ~10 steps per
update). hdppo keeps its default observation and reward normalization on (RLlib has neither).

With ``--train-rounds N`` the hdppo and RLlib training runs alternate N times (hdppo, RLlib,
hdppo, ...): this VM's speed drifts by more than the differences being measured, so the ratio
reported is then the mean of the N within-round ratios, with their range.

Usage:
    python benchmarks/multiagent.py                  # the final measurement (~10-15 min on 2 cores)
    python benchmarks/multiagent.py --quick          # smoke run (about a minute or two)
    python benchmarks/multiagent.py --envs battle_v4 --skip rllib

Writes benchmarks/results/multiagent.{json,md} (``--quick``: multiagent_quick.{json,md}).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import (PPOSettings, add_budget_args, budget, budget_sentence, command_line, errors_section, fmt, fmt_ratio, hdppo_config,  # noqa: E402
                    fold_rounds, hdppo_layer, header, join_md, met, rate, ratio, raw_and_sampling, round_ratios,
                    rounds_note, safe, sampling_steps_per_s, share_cell, throughput_from_metrics, write_report)
from machine import machine_info  # noqa: E402
from raw_env_limit import raw_pettingzoo_steps_per_s  # noqa: E402

OLD_COMMIT = "1b6d235"  # the hdppo of before issue 9
RAY_CPUS = 2
TARGET_SAMPLING_VS_RAW = 0.6
TARGET_VS_RLLIB = 2.5     # simple_spread_v3
TARGET_VS_OLD = 3.0       # battle_v4
PARTS = ("raw", "sampling", "native_sampling", "hdppo", "native", "old", "rllib")


@dataclasses.dataclass(frozen=True)
class Task:
    module: str            # PettingZoo module whose parallel_env() makes the env
    kwargs: dict
    agents: int            # agents at reset
    train_batch: int       # agent steps per update
    flatten_obs: bool      # RLlib needs vector observations
    old: bool              # also train the old commit's hdppo
    target_vs_rllib: float | None
    target_vs_old: float | None
    native: dict | None = None  # an env.type vector section over the same env, where hdppo has one


TASKS = {
    "simple_spread_v3": Task("mpe2.simple_spread_v3", {"N": 3, "continuous_actions": False, "max_cycles": 25},
                             3, 4000, False, False, TARGET_VS_RLLIB, None),
    "battle_v4": Task("magent2.environments.battle_v4", {"map_size": 20}, 24, 24000, True, True, None, TARGET_VS_OLD,
                      {"type": "vector", "entry_point": "hdppo.envs.builtin.magent_vector:make_vector",
                       "kwargs": {"env": "battle_v4", "map_size": 20}}),
}


def settings_for(task: Task, quick: bool, train_batch: int | None = None) -> PPOSettings:
    s = PPOSettings(envs_per_worker=8, train_batch=train_batch or task.train_batch)
    if quick:
        s = dataclasses.replace(s, train_batch=min(s.train_batch, 1024), minibatch=256, epochs=1)
    return s


def hdppo_task_config(name: str, task: Task, s: PPOSettings, total_env_steps: int, native: bool = False) -> dict:
    env = dict(task.native) if native else {"type": "pettingzoo", "id": task.module, "kwargs": dict(task.kwargs)}
    return hdppo_config(f"bench-ma-{name}", env, [hdppo_layer(s)], total_env_steps, ray_cpus=RAY_CPUS)


def env_steps_per_update(task: Task, s: PPOSettings, raw: dict | None) -> float:
    """Env steps one update takes: train batch / live agents per env step (from the raw run when
    it was measured, since agents die: MAgent2), else / agents at reset."""
    per_step = task.agents
    if raw and "error" not in raw and raw.get("env_steps_per_s"):
        per_step = raw["agent_steps_per_s"] / raw["env_steps_per_s"]
    return s.train_batch / per_step


def hdppo_training(name: str, task: Task, s: PPOSettings, iterations: int, warmup: int, tmp: Path,
                   raw: dict | None, import_root: Path | None = None, overrides: list[str] | None = None,
                   native: bool = False, round_: int = 1) -> dict:
    from old_commit import hdppo_train

    total = math.ceil((warmup + iterations + 0.5) * env_steps_per_update(task, s, raw))
    tag = "old" if import_root is not None else ("native" if native else "hdppo")
    run_dir = tmp / (f"{name}-{tag}" + (f"-round{round_}" if round_ > 1 else ""))  # hdppo train never reuses a run dir
    info = hdppo_train(hdppo_task_config(name, task, s, total, native), run_dir, import_root, overrides)
    out = throughput_from_metrics(run_dir / "metrics.jsonl", warmup)
    out.update({"iterations_asked": iterations, "warmup": warmup, "total_env_steps": total,
                "settings": s.as_dict(), **info})
    return out


def sampling_config(task: Task, s: PPOSettings, native: bool = False, overrides: list[str] | None = None) -> dict:
    """The config of one worker of the 2-worker training run (rollouts of the same length), with
    the training runs' --hdppo-set (learner.precision bf16 changes how the workers act)."""
    from hdppo.platform.config import parse_override, set_path

    cfg = hdppo_task_config("sampling", task, s, 10**9, native)
    for text in overrides or []:
        set_path(cfg, *parse_override(text))
    cfg["ray"] = {"backend": "local"}
    return cfg


def sampling(task: Task, s: PPOSettings, seconds: float, native: bool = False, overrides: list[str] | None = None) -> dict:
    cfg = sampling_config(task, s, native, overrides)
    out = sampling_steps_per_s(cfg, "control", seconds, procs=s.num_workers)
    out["seconds"] = seconds
    return out


def summarise(name: str, task: Task, e: dict) -> dict:
    raw, samp, h, old, rl = (e.get(k) for k in ("raw", "sampling", "hdppo", "old", "rllib"))
    share = ratio(rate(samp, "agent_steps_per_s"), rate(raw, "agent_steps_per_s"))
    vs_rllib = ratio(rate(h), rate(rl))
    vs_old = ratio(rate(h), rate(old))
    rounds = e.get("rounds") or {}  # --train-rounds: every round's run of each framework
    per_round = round_ratios(rounds.get("hdppo", []), rounds.get("rllib", []))
    if per_round:
        vs_rllib = sum(per_round) / len(per_round)
    return {
        "hdppo_over_rllib_rounds": per_round,
        "native_sampling_over_raw": ratio(rate(e.get("native_sampling"), "agent_steps_per_s"), rate(raw, "agent_steps_per_s")),
        "native_over_old": ratio(rate(e.get("native")), rate(old)),
        "native_over_hdppo": ratio(rate(e.get("native")), rate(h)),
        "sampling_over_raw": share,
        "sampling_target": TARGET_SAMPLING_VS_RAW,
        "hdppo_over_raw": ratio(rate(h), rate(raw)),
        "old_over_raw": ratio(rate(old), rate(raw)),
        "rllib_over_raw": ratio(rate(rl), rate(raw)),
        "hdppo_over_rllib": vs_rllib,
        "hdppo_over_rllib_target": task.target_vs_rllib,
        "hdppo_over_old": vs_old,
        "hdppo_over_old_target": task.target_vs_old,
    }


def render_markdown(report: dict) -> str:
    st = report["settings"]
    lines = header("Multi-agent throughput: raw env limit, hdppo sampling, hdppo vs RLlib vs the old hdppo", report) + [
        f"Training settings (hdppo, old hdppo and RLlib alike): {st['describe']}; the train batch counts "
        f"agent steps ({', '.join(f'{k}: {v}' for k, v in st['train_batch'].items())}). One policy shared by all "
        f"agents. hdppo runs as `hdppo train` in a subprocess with its own embedded Ray (num_cpus={RAY_CPUS}); "
        f"RLlib on one shared Ray (num_cpus={RAY_CPUS}), new API stack. {budget_sentence(st)} "
        f"Old hdppo: commit `{st['old_commit']}`.",
        "",
        "## Sampling with inference vs the raw env limit (agent steps/s)",
        "",
        "| env | raw env steps/s | raw agent steps/s | sampling agent steps/s | share of raw | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, e in report["results"].items():
        s = e["summary"]
        lines.append(f"| {name} | {fmt(rate(e.get('raw')))} | {fmt(rate(e.get('raw'), 'agent_steps_per_s'))} | "
                     f"{fmt(rate(e.get('sampling'), 'agent_steps_per_s'))} | {share_cell(e.get('sampling'), s['sampling_over_raw'])} | "
                     f">= {100 * TARGET_SAMPLING_VS_RAW:.0f}%: {met(s['sampling_over_raw'], TARGET_SAMPLING_VS_RAW)} |")
    lines += [
        "",
        "## Training throughput (whole-iteration env steps/s: sampling + update + weight sync)",
        "",
        "| env | hdppo | old hdppo | RLlib | hdppo/old | target | hdppo/RLlib | target | hdppo/raw | "
        "sample s/iter | update s/iter |",
        "|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    for name, e in report["results"].items():
        s, h = e["summary"], e.get("hdppo") or {}
        t_old, t_rl = s["hdppo_over_old_target"], s["hdppo_over_rllib_target"]
        lines.append(
            f"| {name} | {fmt(rate(h))} | {fmt(rate(e.get('old')))} | {fmt(rate(e.get('rllib')))} | "
            f"{fmt_ratio(s['hdppo_over_old'])} | {f'>= {t_old}x: ' + met(s['hdppo_over_old'], t_old) if t_old else '-'} | "
            f"{fmt_ratio(s['hdppo_over_rllib'])}{rounds_note(s.get('hdppo_over_rllib_rounds'))} | "
            f"{f'>= {t_rl}x: ' + met(s['hdppo_over_rllib'], t_rl) if t_rl else '-'} | "
            f"{fmt(s['hdppo_over_raw'], pct=True)} | {h.get('sample_s_mean', 'n/a')} | {h.get('update_s_mean', 'n/a')} |")
    natives = {n: e for n, e in report["results"].items() if e.get("native_sampling") or e.get("native")}
    if natives:
        lines += ["", "## The same env read from its engine's arrays (`hdppo.envs.builtin.magent_vector`, env.type vector)",
                  "", "| env | sampling agent steps/s | share of the PettingZoo raw limit | target | training env steps/s | "
                  "over the PettingZoo path | over old hdppo | target |", "|---|---:|---:|---|---:|---:|---:|---|"]
        for name, e in natives.items():
            s, t_old = e["summary"], e["summary"]["hdppo_over_old_target"]
            lines.append(
                f"| {name} | {fmt(rate(e.get('native_sampling'), 'agent_steps_per_s'))} | "
                f"{share_cell(e.get('native_sampling'), s['native_sampling_over_raw'])} | "
                f">= {100 * TARGET_SAMPLING_VS_RAW:.0f}%: {met(s['native_sampling_over_raw'], TARGET_SAMPLING_VS_RAW)} | "
                f"{fmt(rate(e.get('native')))} | {fmt_ratio(s['native_over_hdppo'])} | {fmt_ratio(s['native_over_old'])} | "
                f"{f'>= {t_old}x: ' + met(s['native_over_old'], t_old) if t_old else '-'} |")
    lines += errors_section(report["results"])
    lines += ["", "Notes: RLlib counts the train batch in agent steps too (`count_steps_by='agent_steps'`). "
              "battle_v4 agents die during an episode, so agent steps per env step fall below 24. Actor start-up "
              "and the final checkpoint are outside the timed window.", ""]
    return join_md(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default=",".join(TASKS), help=f"comma-separated, of {', '.join(TASKS)}")
    ap.add_argument("--train-batch", type=int, default=None, help="agent steps per update for every env "
                    "(default: 4000 simple_spread_v3, 24000 battle_v4; --quick: at most 1024)")
    ap.add_argument("--old-commit", default=OLD_COMMIT, help=f"the old hdppo's commit (default {OLD_COMMIT})")
    ap.add_argument("--hdppo-set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra `hdppo train --set` for this tree's runs and its sampling rows (not the old commit's); repeatable")
    ap.add_argument("--write-configs", type=Path, default=None, metavar="DIR",
                    help="only write each env's hdppo config (the training runs', 100k env steps) as "
                    "DIR/multiagent_<env>.yaml, e.g. for training_ab.py, and stop")
    add_budget_args(ap, "multiagent", PARTS, iterations=20, warmup=2, raw_seconds=15.0, sample_seconds=20.0)
    args = ap.parse_args(argv)
    skip, stem = budget(args, "multiagent")
    names = [n.strip() for n in args.envs.split(",") if n.strip()]
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        ap.error(f"unknown env(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
    settings = {n: settings_for(TASKS[n], args.quick, args.train_batch) for n in names}
    if args.write_configs is not None:
        import yaml

        args.write_configs.mkdir(parents=True, exist_ok=True)
        for n in names:
            path = args.write_configs / f"multiagent_{n}.yaml"
            path.write_text(yaml.safe_dump(hdppo_task_config(n, TASKS[n], settings[n], 100_000), sort_keys=False))
            print(f"[multiagent] wrote {path}")
        return 0

    info = machine_info()
    results: dict[str, dict] = {n: {} for n in names}
    with tempfile.TemporaryDirectory(prefix="hdppo_multiagent_") as tmp_s:
        tmp = Path(tmp_s)
        # 1. Everything that is not RLlib, before any Ray of this process exists: raw limit,
        #    sampling, and hdppo (each `hdppo train` starts and stops its own Ray).
        for n in names:
            task, s, e = TASKS[n], settings[n], results[n]
            if "raw" not in skip and "sampling" not in skip:
                ways = {"sampling": lambda: safe("multiagent", f"{n} hdppo sampling", sampling, task, s,
                                                 args.sample_seconds / args.rounds, overrides=args.hdppo_set)}
                if task.native and "native_sampling" not in skip:
                    ways["native_sampling"] = lambda: safe("multiagent", f"{n} hdppo sampling (native env)", sampling,
                                                           task, s, args.sample_seconds / args.rounds, native=True,
                                                           overrides=args.hdppo_set)
                e["raw"], got = raw_and_sampling(
                    lambda: safe("multiagent", f"{n} raw limit", raw_pettingzoo_steps_per_s, task.module, task.kwargs,
                                 seconds=args.raw_seconds / args.rounds, procs=s.num_workers),
                    ways, args.rounds, "agent_steps_per_s")
                e.update(got)
            elif "raw" not in skip:
                e["raw"] = safe("multiagent", f"{n} raw limit", raw_pettingzoo_steps_per_s,
                                task.module, task.kwargs, seconds=args.raw_seconds, procs=s.num_workers)
            elif "sampling" not in skip:
                e["sampling"] = safe("multiagent", f"{n} hdppo sampling", sampling, task, s, args.sample_seconds,
                                     overrides=args.hdppo_set)
            if "hdppo" not in skip:
                e["hdppo"] = safe("multiagent", f"{n} hdppo training", hdppo_training, n, task, s, args.iterations,
                                  args.warmup, tmp, e.get("raw"), overrides=args.hdppo_set)
            if task.native and "native" not in skip:
                e["native"] = safe("multiagent", f"{n} hdppo training (native env)", hdppo_training, n, task, s,
                                   args.iterations, args.warmup, tmp, e.get("raw"), overrides=args.hdppo_set, native=True)
        if "old" not in skip and any(TASKS[n].old for n in names):
            from old_commit import old_tree
            with old_tree(args.old_commit) as root:
                for n in names:
                    if TASKS[n].old:
                        results[n]["old"] = safe("multiagent", f"{n} hdppo @ {args.old_commit} training",
                                                 hdppo_training, n, TASKS[n], settings[n], args.iterations,
                                                 args.warmup, tmp, results[n].get("raw"), import_root=root)
        # 2. RLlib on a Ray of this process, started and stopped per round, so that the next round's
        #    `hdppo train` (its own Ray) runs with none of ours alive.
        rounds = max(1, args.train_rounds) if not {"hdppo", "rllib"} & skip else 1
        runs: dict[str, dict[str, list[dict]]] = {n: {} for n in names}
        for r in range(rounds):
            if r > 0:
                for n in names:
                    e, task, s = results[n], TASKS[n], settings[n]
                    runs[n].setdefault("hdppo", [e.get("hdppo")]).append(safe(
                        "multiagent", f"{n} hdppo training, round {r + 1}", hdppo_training, n, task, s,
                        args.iterations, args.warmup, tmp, e.get("raw"), overrides=args.hdppo_set, round_=r + 1))
            if "rllib" in skip:
                continue
            import ray

            from rllib_ppo import rllib_pettingzoo_steps_per_s
            ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False)
            try:
                for n in names:
                    task = TASKS[n]
                    runs[n].setdefault("rllib", []).append(safe(
                        "multiagent", f"{n} RLlib" + (f", round {r + 1}" if rounds > 1 else ""),
                        rllib_pettingzoo_steps_per_s, task.module, task.kwargs, iterations=args.iterations,
                        warmup=args.warmup, settings=settings[n], flatten_obs=task.flatten_obs))
            finally:
                ray.shutdown()
        fold_rounds(results, runs)

    for n, e in results.items():
        e["summary"] = summarise(n, TASKS[n], e)
    first = next(iter(settings.values()))
    report = {
        "machine": info,
        "command": command_line(argv),
        "settings": {"envs": {n: dataclasses.asdict(TASKS[n]) for n in names}, "quick": args.quick,
                     "iterations": args.iterations, "warmup": args.warmup, "train_rounds": args.train_rounds, "raw_seconds": args.raw_seconds, "rounds": args.rounds,
                     "sample_seconds": args.sample_seconds, "old_commit": args.old_commit, "ray_cpus": RAY_CPUS,
                     "hdppo_set": args.hdppo_set, "skipped": sorted(skip),
                     "ppo": {n: s.as_dict() for n, s in settings.items()},
                     "train_batch": {n: s.train_batch for n, s in settings.items()},
                     "describe": first.describe(batch=False)},
        "targets": {"sampling_over_raw": TARGET_SAMPLING_VS_RAW, "hdppo_over_rllib": TARGET_VS_RLLIB,
                    "hdppo_over_old": TARGET_VS_OLD},
        "results": results,
    }
    write_report(stem, report, render_markdown(report), "multiagent")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
