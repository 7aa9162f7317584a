"""Every kept checkpoint of job-shop runs, greedily: its mean return on the fixed validation
instances of ``hdppo self-label`` (the score that picks ``best.pt``) and its makespan on a classic
instance (ft06 by default). Shows how far one instance's makespan moves between neighbouring
checkpoints, and what picking a PPO run's checkpoint by the same validation gives, beside a
self-labeled run's ``best.pt``.

    python benchmarks/jobshop_checkpoints.py --runs runs/a,runs/b --instance ft06 --out NAME
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import command_line, machine_line, write_report  # noqa: E402
from machine import machine_info  # noqa: E402

from hdppo.envs.builtin.jobshop import load_instance  # noqa: E402
from hdppo.hierarchies.spec import probe_env  # noqa: E402
from hdppo.platform.checkpoint import list_checkpoints, learner_states, load_checkpoint  # noqa: E402
from hdppo.platform.config import Config, load_config, validate  # noqa: E402
from hdppo.platform.evaluation import evaluate_episodes, frozen_policy  # noqa: E402
from hdppo.platform.self_label import VALID_SEED_BASE, valid_return  # noqa: E402


def on_instance(cfg: Config, name: str) -> Config:
    """``cfg`` with its env playing the classic instance ``name`` every episode."""
    d = cfg.model_dump(mode="json")
    d["env"]["kwargs"] = {k: v for k, v in d["env"]["kwargs"].items() if k not in ("size", "low", "high")}
    d["env"]["kwargs"]["instance"] = name
    return validate(d)


def score_run(run: Path, instance: str, valid: int) -> list[dict]:
    cfg = load_config(run / "config.yaml")
    fixed = on_instance(cfg, instance)
    venv, _, specs = probe_env(cfg, VALID_SEED_BASE, valid)
    spec, rows = specs[0], []
    try:
        for ck in list_checkpoints(run) + [run / "checkpoints" / "best.pt"]:
            if not ck.is_file():
                continue
            states = learner_states(load_checkpoint(ck))
            policy, norm = frozen_policy(cfg, spec, states[spec.name])
            score = valid_return(venv, policy, norm)
            ep = evaluate_episodes(fixed, states, 1, num_envs=1)[0]
            makespan = int(ep.infos["agent_0"]["makespan"])
            rows.append({"checkpoint": ck.name, "valid_return": score, "makespan": makespan})
    finally:
        venv.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="run dirs, comma-separated")
    ap.add_argument("--instance", default="ft06", help="the classic instance (default ft06)")
    ap.add_argument("--valid-instances", type=int, default=64, help="validation instances (default 64, self-label's)")
    ap.add_argument("--out", default="jobshop_checkpoints", help="result stem under benchmarks/results")
    args = ap.parse_args(argv)
    report = {"machine": machine_info(), "command": command_line(argv), "instance": args.instance}
    best_known = load_instance(args.instance).best_known
    lines = [f"# Job-shop checkpoints: validation return and {args.instance}", "", machine_line(report["machine"]), "",
             f"Command: `{report['command']}`", "",
             f"Greedy. Validation: mean return -(makespan - LB0) / p_max over {args.valid_instances} random instances "
             f"(seeds {VALID_SEED_BASE}+, the config's size and durations; higher is better). {args.instance}: "
             f"makespan (best known {best_known}). The checkpoint with the highest validation return of each run "
             "is marked *.", "",
             "| run | checkpoint | validation return | " + args.instance + " makespan | gap % |", "|---|---|---|---|---|"]
    data = {}
    for run in [Path(r) for r in args.runs.split(",")]:
        rows = score_run(run, args.instance, args.valid_instances)
        data[str(run)] = rows
        kept = [r for r in rows if r["checkpoint"] != "best.pt"]
        top = max(kept, key=lambda r: r["valid_return"])["checkpoint"] if kept else None
        for r in rows:
            mark = " *" if r["checkpoint"] == top else ""
            gap = 100.0 * (r["makespan"] - best_known) / best_known
            lines.append(f"| `{run}` | {r['checkpoint']}{mark} | {r['valid_return']:.4f} | {r['makespan']} | {gap:.1f} |")
        print(run, [(r["checkpoint"], round(r["valid_return"], 4), r["makespan"]) for r in rows], flush=True)
    report["runs"] = data
    write_report(args.out, report, "\n".join(lines) + "\n", "jobshop_checkpoints")


if __name__ == "__main__":
    main()
