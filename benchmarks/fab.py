"""Dispatching rules and trained policies on the SMT2020 fab, on held-out random seeds.

For each scenario, every rule (FIFO, SPT, EDD, critical ratio; hot lots first) runs on
``--seeds`` held-out seeds (from ``--seed0`` = 10000 on; training seeds its env copies near
``10007 * (worker + 1) + 101 * sum(ord(layer names))`` once and draws on from there, and its
own evaluation uses ``train.seed + 999983``). A seed draws the breakdowns, the
PM durations, the processing and transport times (uniform around the data's means) and the
sampling/rework draws. The **best rule** of an instance is the rule with the lowest mean
tardiness over the seeds. A trained run (``--policy NAME=RUN_DIR``, its last checkpoint)
plays the same seeds through hdppo's evaluation sampler (deterministic actions): copy ``i``
of the evaluation env is reset with seed ``seed0 + i``, and the rules run the simulator with
the very seed that env reset gives it. With ``--crn`` (common random numbers: every draw keyed
by what it is for) rule and policy then face the same breakdowns and process times, a paired
comparison; with the default one stream they share the draws only until their first different
decision, and the fast rule path and the env consume the stream in another order, so their
paired differences are loose (``results/fab_one_stream_paths.md``). Figures, each the mean over
seeds with a 95% t-interval:

* mean tardiness (h) of the lots completed within the horizon, tardy fraction;
* mean cycle time (h) of the lots released and completed within the horizon (none on a
  horizon shorter than a cycle: n/a);
* throughput (lots completed per day);
* lots released, and lots still in the fab and past due at the end of the horizon (a policy that
  holds late lots back or releases less near the end looks better on the figures above than it
  is; these show it).

Target (issue 12): a trained policy's mean tardiness >= 15% below the best rule's, with
throughput no lower; the report says met or missed.

Usage:
  python benchmarks/fab.py --scenarios hvlm_mini --seeds 20 --policy flat=/tmp/fab_runs/flat1
  python benchmarks/fab.py --scenarios hvlm --days hvlm=7 --seeds 3       # the full fab (about 5 CPU s a run)
  add --tb DIR to write one evaluated run's WIP/queue/tardiness over time as TensorBoard scalars.

Writes benchmarks/results/fab.{json,md} (``--out`` to change); rows of earlier runs of other
scenarios in that file are kept.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import builtin_run_config, run_main, save_files, stat  # noqa: E402
from machine import machine_info  # noqa: E402

METRICS = ("mean_tardiness_h", "tardy_fraction", "mean_cycle_time_h", "throughput_lots_per_day", "released",
           "late_wip_end")
TARGET = 0.15


def sim_seed(env_seed: int) -> int:
    """The simulator seed that FabEnv.reset(seed=env_seed) draws."""
    from gymnasium.utils import seeding

    rng, _ = seeding.np_random(env_seed)
    return int(rng.integers(2 ** 31))


def without_history(run: dict) -> dict:
    """An env episode's summary without its timeline (an array, kept out of the JSON report)."""
    return {k: v for k, v in run.items() if k != "history"}


def paired_tardiness(runs: list[dict], base: list[dict]) -> dict:
    """Mean tardiness minus ``base``'s on the same seed, run by run, as a mean with its 95% interval."""
    return stat([a["mean_tardiness_h"] - b["mean_tardiness_h"] for a, b in zip(runs, base)])


def run_rules(scenario: str, days: float | None, seeds: list[int], tb: Path | None, **sim) -> dict:
    """Every rule on ``seeds``; ``sim``: the simulator's settings (``crn``, ``setup_avoidance``)."""
    from hdppo.envs.builtin.fab import RULES, FabSim, build_model, get_scenario, log_history

    model = build_model(get_scenario(scenario, days))
    out = {}
    for rule in RULES:
        runs = []
        t0 = time.perf_counter()
        for s in seeds:
            fab = FabSim(model, seed=sim_seed(s), default_rule=rule, **sim)
            fab.run(rule)
            runs.append(fab.summary())
            if tb is not None and s == seeds[0]:
                log_history(np.asarray(fab.stats.history), tb / scenario / rule)
        out[rule] = {"runs": runs, "wall_s": time.perf_counter() - t0,
                     **{m: stat([r[m] for r in runs]) for m in METRICS}}
        print(f"{scenario} {rule}: tardiness {out[rule]['mean_tardiness_h']['mean']:.2f} h, "
              f"throughput {out[rule]['throughput_lots_per_day']['mean']:.2f}/day ({out[rule]['wall_s']:.0f} s)", flush=True)
    return out


def policy_config(run_dir: Path):
    """The config of a fab run folder of ``hdppo train``; anything else is refused by name."""
    return builtin_run_config(run_dir, "--policy", "hdppo.envs.builtin.fab:make_env", "the fab")


def parse_days(text: str, scenarios: list[str]) -> dict[str, float]:
    """``--days`` (``SCENARIO=DAYS,...``), each scenario one of ``scenarios``."""
    out = {}
    for kv in (x.strip() for x in text.split(",") if x.strip()):
        name, eq, value = kv.partition("=")
        try:
            days = float(value) if eq else float("nan")
        except ValueError:
            days = float("nan")
        if not (days > 0):
            raise SystemExit(f"--days {kv!r}: give SCENARIO=DAYS with DAYS > 0, e.g. --days {scenarios[0]}=2")
        if name not in scenarios:
            raise SystemExit(f"--days {kv!r}: {name!r} is not among --scenarios {','.join(scenarios)}; "
                             f"name one of them, e.g. --days {scenarios[0]}={value}")
        out[name] = days
    return out


def run_policy(run_dir: Path, scenario: str, days: float | None, seeds: list[int], tb: Path | None, **sim) -> dict:
    from hdppo.platform.checkpoint import learner_states, load_checkpoint, policy_checkpoint
    from hdppo.platform.config import validate
    from hdppo.platform.evaluation import evaluate_episodes

    cfg = policy_config(run_dir)
    data = cfg.model_dump(mode="json")
    data["env"]["kwargs"] = dict(data["env"].get("kwargs") or {}, scenario=scenario, **sim,
                                 **({"days": days} if days is not None else {}))
    if not sim.get("crn"):   # a run trained against a reference rule keeps it only where the draws are common
        data["env"]["kwargs"].pop("reference_rule", None)
    cfg = validate(data)
    ckpt = policy_checkpoint(run_dir)
    states = learner_states(load_checkpoint(ckpt))
    t0 = time.perf_counter()
    eps = evaluate_episodes(cfg, states, len(seeds), seed=seeds[0], num_envs=len(seeds))
    by_seed = {}
    for e in eps:
        info = next(iter(e.infos.values()))
        by_seed[info["episode"]["sim_seed"]] = info["episode"]
    runs = [by_seed[sim_seed(s)] for s in seeds if sim_seed(s) in by_seed]
    if len(runs) != len(seeds):
        raise SystemExit(f"{run_dir}: the evaluation episodes ran on other seeds than the rules' "
                         f"({len(runs)} of {len(seeds)} matched)")
    if tb is not None:   # the first seed's timeline, beside the rules' (run_rules)
        from hdppo.envs.builtin.fab import log_history

        log_history(runs[0]["history"], tb)
    runs = [without_history(r) for r in runs]
    return {"runs": runs, "checkpoint": str(ckpt), "wall_s": time.perf_counter() - t0,
            **{m: stat([r[m] for r in runs]) for m in METRICS}}


def play_group_rules(scenario: str, days: float | None, seeds: list[int], assign: dict[str, str], **sim) -> dict:
    """A given rule per tool group (cr at the groups it does not name), played on ``seeds``."""
    from hdppo.envs.builtin.fab import FabEnv, group_rule_policy, play

    env = FabEnv(scenario=scenario, days=days, action="rule", **sim)
    names = {env.model.data.groups[g] for g in env.agent_group_ids}
    unknown = sorted(set(assign) - names)
    if unknown:
        raise SystemExit(f"--assignment: {unknown} are not agent tool groups of {scenario}; use some of {sorted(names)}")
    runs = [without_history(play(env, group_rule_policy(assign), seed=s)) for s in seeds]
    return {"runs": runs, **{m: stat([r[m] for r in runs]) for m in METRICS}}


def run_group_rules(scenario: str, days: float | None, seeds: list[int], search_seeds: list[int], **sim) -> dict:
    """A rule per tool group, searched on ``search_seeds`` (disjoint from ``seeds``), then played on
    ``seeds`` through the env (``action='rule'``), which resets each with the rules' sim seed."""
    from hdppo.envs.builtin.fab import search_group_rules

    t0 = time.perf_counter()
    assign, searched = search_group_rules(scenario, search_seeds, days=days, **sim,
                                          log=lambda m: print(f"{scenario} group rules: {m}", flush=True))
    runs = play_group_rules(scenario, days, seeds, assign, **sim)["runs"]
    return {"runs": runs, "assignment": assign, "search_seeds": search_seeds, "search_tardiness_h": searched,
            "wall_s": time.perf_counter() - t0, **{m: stat([r[m] for r in runs]) for m in METRICS}}


def fmt(s: dict, digits: int = 2) -> str:
    if not s or s.get("n", 0) == 0 or s["mean"] != s["mean"]:
        return "n/a"
    ci = f" ± {s['ci95']:.{digits}f}" if s["ci95"] == s["ci95"] else ""
    return f"{s['mean']:.{digits}f}{ci}"


def render(report: dict) -> str:
    lines = ["# SMT2020 fab: dispatching rules and trained policies", "",
             "Mean over held-out seeds ± 95% t-interval. Tardiness: mean over the lots completed within the "
             "horizon (h); cycle time: lots released and completed within the horizon (h); throughput: lots "
             "completed per day; lots released, and lots still in the fab and past due at the end (their "
             "tardiness is in no mean: holding late lots back, or releasing less near the end, shows there). "
             "Testbed: Kopp, Hassoun, Kalir, Mönch, SMT2020, IEEE TSM 33(4), 2020.", ""]
    for sc, block in report["scenarios"].items():
        crn = (", common random numbers" if block.get("crn") else "") + (
            ", setup avoidance (SMT2020's rank_RSETUP)" if block.get("setup_avoidance") else "")
        lines += [f"## {sc} ({block['days']:g} simulated day{'' if block['days'] == 1 else 's'}, {block['n_seeds']} seeds from {block['seed0']}{crn})", "",
                  "| dispatcher | mean tardiness (h) | tardy fraction | mean cycle time (h) | throughput (lots/day) "
                  "| lots released | late lots in the fab at the end |",
                  "|---|---|---|---|---|---|---|"]
        for name, r in block["rows"].items():
            lines.append(f"| {name} | {fmt(r['mean_tardiness_h'])} | {fmt(r['tardy_fraction'])} | "
                         f"{fmt(r['mean_cycle_time_h'], 1)} | {fmt(r['throughput_lots_per_day'])} | "
                         f"{fmt(r.get('released', {}), 1)} | {fmt(r.get('late_wip_end', {}), 1)} |")
        lines.append("")
        lines.append(f"Best rule: **{block['best_rule']}** (the lowest mean tardiness, the issue's objective; "
                     "the throughput beside it is the other half of the target).")
        if not block.get("crn") and (block.get("verdicts") or block.get("assignments")):
            lines.append("One random stream (no `--crn`): two dispatchers on a seed share its draws only until their "
                         "first different decision, so the paired differences below are loose; `--crn` pairs them.")
        if "group_rules" in block:
            g = block["group_rules"]
            lines.append(f"Per-group rules (a rule per tool group, coordinate descent on the mean tardiness of seeds "
                         f"{g['search_seeds'][0]}-{g['search_seeds'][-1]}, none of them evaluated here): "
                         + ", ".join(f"{k} {v}" for k, v in g["assignment"].items() if v != "cr")
                         + (" (cr elsewhere)." if any(v == "cr" for v in g["assignment"].values()) else "."))
        for name, v in block.get("assignments", {}).items():
            given = ", ".join(f"{k} {r}" for k, r in v["assignment"].items())
            lines.append(f"{name}: " + (f"{given} (cr elsewhere)" if given else "cr at every group, through the env")
                         + f"; paired difference to {block['best_rule']} per seed "
                         f"{fmt(v['paired_tardiness_diff_h'])} h.")
        for name, v in block.get("verdicts", {}).items():
            lines.append(f"{name}: tardiness {v['tardiness_change']:+.1%} vs the best rule (target <= -15%; paired "
                         f"difference per seed {fmt(v['paired_tardiness_diff_h'])} h), "
                         f"throughput {v['throughput_change']:+.1%} (target >= 0): **{'met' if v['met'] else 'missed'}**"
                         + (f"; tardiness {v['vs_group_rules']:+.1%} vs the per-group rules." if "vs_group_rules" in v else "."))
        lines.append("")
    lines += [f"Commands: {'; '.join('`' + c + '`' for c in report.get('commands', []))}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default="hvlm_mini",
                   help="comma-separated: hvlm_mini, lvhm_mini (the scaled-down fabs), hvlm, lvhm (default hvlm_mini)")
    p.add_argument("--days", default="", help="per scenario, e.g. hvlm=10 (default: the scenario's)")
    p.add_argument("--seeds", type=int, default=20, help="held-out seeds per dispatcher (default 20)")
    p.add_argument("--seed0", type=int, default=10000, help="the first held-out seed (default 10000)")
    p.add_argument("--policy", action="append", default=[], help="NAME=RUN_DIR (repeatable): a trained run")
    p.add_argument("--group-rules", action="store_true",
                   help="also search a rule per tool group (on --search-seeds seeds from 500) and evaluate it")
    p.add_argument("--search-seeds", type=int, default=10)
    p.add_argument("--assignment", action="append", default=[],
                   help="NAME=GROUP:RULE,GROUP:RULE,... (repeatable): play a given rule per tool group (cr elsewhere), "
                        "e.g. one that an earlier --group-rules search found")
    p.add_argument("--tb", default=None, help="write the first seed's run of each rule and each --policy as TensorBoard "
                                              "scalars here (DIR/SCENARIO/RULE or NAME: WIP, queues, late WIP, tardiness "
                                              "over simulated hours)")
    p.add_argument("--crn", action="store_true",
                   help="common random numbers (FabSim(crn=True)): every dispatcher sees the same breakdowns and "
                        "process times on a seed, so the paired differences measure the dispatching")
    p.add_argument("--setup-avoidance", action="store_true",
                   help="SMT2020's rank_RSETUP at tool groups with setups (FabSim(setup_avoidance=True)): lots that "
                        "need no setup on an idle tool first, after hot lots, then the rule; the full fabs need it "
                        "to keep up with their releases (their implant setups take 60-80 minutes)")
    p.add_argument("--out", default=str(HERE / "results" / "fab"),
                   help="the report's path without suffix (OUT.json, OUT.md; default benchmarks/results/fab)")
    args = p.parse_args(argv)
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    from hdppo.envs.builtin.fab import get_scenario
    from hdppo.platform.checkpoint import policy_checkpoint

    for sc in scenarios:
        get_scenario(sc)   # an unknown name is refused before any rule runs
    days = parse_days(args.days, scenarios)
    if args.seeds < 1:
        raise SystemExit(f"--seeds {args.seeds}: give at least 1 (the intervals need 2 or more)")
    seeds = list(range(args.seed0, args.seed0 + args.seeds))
    for spec in args.policy:   # every run folder checked before the rules take their minutes
        name, eq, run_dir = spec.partition("=")
        if not (eq and name and run_dir):
            raise SystemExit(f"--policy {spec!r}: give NAME=RUN_DIR")
        cfg = policy_config(Path(run_dir))
        policy_checkpoint(Path(run_dir))   # a clear CheckpointError where there is none
        trained_on = (cfg.env.kwargs or {}).get("scenario", "hvlm_mini")
        if any(sc != trained_on for sc in scenarios):
            print(f"fab.py: note: --policy {name} was trained on {trained_on!r}; it is evaluated on "
                  f"{', '.join(scenarios)} as it is (its observation names tool groups by position)", file=sys.stderr)
    out = Path(args.out)
    report = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {"scenarios": {}}
    report["machine"] = machine_info()
    command = "python benchmarks/fab.py " + " ".join(argv if argv is not None else sys.argv[1:])
    report["commands"] = [c for c in report.get("commands", []) if c != command] + [command]
    for sc in scenarios:
        d = days.get(sc)
        sim = {"crn": args.crn, "setup_avoidance": args.setup_avoidance}
        rules = run_rules(sc, d, seeds, Path(args.tb) if args.tb else None, **sim)
        best = min(rules, key=lambda r: rules[r]["mean_tardiness_h"]["mean"])
        rows = {r: {m: v[m] for m in METRICS} for r, v in rules.items()}
        rows[f"best rule ({best})"] = rows[best]
        block = {"days": get_scenario(sc, d).days, "n_seeds": len(seeds), "seed0": args.seed0, "best_rule": best,
                 "crn": bool(args.crn), "setup_avoidance": bool(args.setup_avoidance),
                 "rows": rows, "rule_runs": {r: v["runs"] for r, v in rules.items()}, "verdicts": {}}
        groups = None
        if args.group_rules:
            search = list(range(500, 500 + args.search_seeds))
            if set(search) & set(seeds):
                raise SystemExit(f"--search-seeds: seeds 500-{499 + args.search_seeds} overlap the evaluation seeds "
                                 f"{seeds[0]}-{seeds[-1]}; pick --seed0 above them")
            groups = run_group_rules(sc, d, seeds, search, **sim)
            rows["per-group rules (searched)"] = {m: groups[m] for m in METRICS}
            block["group_rules"] = {k: groups[k] for k in ("assignment", "search_seeds", "search_tardiness_h", "runs")}
        for spec in args.assignment:
            name, _, pairs = spec.partition("=")
            try:
                assign = dict(pair.split(":", 1) for pair in pairs.split(",") if pair)
            except ValueError:
                raise SystemExit(f"--assignment {spec!r}: give NAME=GROUP:RULE,GROUP:RULE,...") from None
            given = play_group_rules(sc, d, seeds, assign, **sim)
            rows[f"{name} (given per-group rules)"] = {m: given[m] for m in METRICS}
            paired = paired_tardiness(given["runs"], rules[best]["runs"])
            block.setdefault("assignments", {})[name] = {"assignment": assign, "paired_tardiness_diff_h": paired,
                                                         "runs": given["runs"]}
            print(f"{sc} {name}: tardiness {given['mean_tardiness_h']['mean']:.2f} h, paired vs {best} "
                  f"{paired['mean']:+.2f} ± {paired['ci95']:.2f} h", flush=True)
        for spec in args.policy:
            name, _, run_dir = spec.partition("=")
            res = run_policy(Path(run_dir), sc, d, seeds, Path(args.tb) / sc / name if args.tb else None, **sim)
            rows[f"{name} (trained)"] = {m: res[m] for m in METRICS}
            bt, bq = rules[best]["mean_tardiness_h"]["mean"], rules[best]["throughput_lots_per_day"]["mean"]
            pt, pq = res["mean_tardiness_h"]["mean"], res["throughput_lots_per_day"]["mean"]
            paired = paired_tardiness(res["runs"], rules[best]["runs"])
            block["verdicts"][name] = {"tardiness_change": pt / bt - 1.0, "throughput_change": pq / bq - 1.0,
                                       "paired_tardiness_diff_h": paired,
                                       "met": bool(pt <= (1 - TARGET) * bt and pq >= bq),
                                       "checkpoint": res["checkpoint"], "runs": res["runs"]}
            if groups is not None:
                block["verdicts"][name]["vs_group_rules"] = pt / groups["mean_tardiness_h"]["mean"] - 1.0
            print(f"{sc} {name}: tardiness {pt:.2f} h vs best rule {bt:.2f} h, throughput {pq:.2f} vs {bq:.2f}", flush=True)
        report["scenarios"][sc] = block
    save_files(out, report, render(report))
    print(render(report))
    print(f"[fab] wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main, "benchmarks/fab.py"))
