"""Training throughput of one config, this tree against an older commit, side by side in one run.

``hdppo train CONFIG`` (with ``--set`` overrides) in a subprocess with its own embedded Ray, first
with the packages of ``--base`` (``old_commit.old_tree``: unpacked by ``git archive``, first on
``PYTHONPATH``, the copy checked), then with this tree, and again, ``--rounds`` times: this VM's
speed drifts within minutes, so the figure is the ratio within each round. The rate is
``common.throughput_from_metrics``': whole-iteration env steps/s after ``--warmup`` updates (the
same definition as ``throughput.py`` and ``multiagent.py``), with the mean and the largest
``perf/update_s`` beside it.

Usage:
    python benchmarks/training_ab.py --base 40b13a6 configs/minatar_breakout.yaml --steps 100000 \\
        --set layers.0.dppo.sync=soft [--set ...] [--new-set ...] [--rounds 3] [--out training_ab]

``--new-set`` overrides this tree's runs only: with ``--base HEAD``, an A/B of a setting the base
does not know (``--new-set ray.cpu_affinity=true``).

Writes benchmarks/results/training_ab.{json,md} (``--out`` for another stem).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import command_line, machine_line, throughput_from_metrics, write_report  # noqa: E402
from machine import machine_info  # noqa: E402
from old_commit import hdppo_train, old_tree  # noqa: E402


def one_run(config: dict, run_dir: Path, import_root: Path | None, overrides: list[str], warmup: int) -> dict:
    hdppo_train(config, run_dir, import_root, overrides)
    out = throughput_from_metrics(run_dir / "metrics.jsonl", warmup)
    updates = [json.loads(x)["value"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()
               if x.strip() and json.loads(x)["tag"] == "perf/update_s"][warmup:]
    return {"env_steps_per_s": out["env_steps_per_s"], "update_s_mean": statistics.mean(updates),
            "update_s_max": max(updates)}


def render(report: dict) -> str:
    lines = [f"# Training throughput: this tree against `{report['base']}`", "", machine_line(report["machine"]), "",
             f"Command: `{report['command']}`", "",
             f"`hdppo train {report['config']}` for {report['steps']:,} env steps, "
             f"{' '.join('`--set ' + o + '`' for o in report['overrides']) or 'no overrides'}"
             f"{''.join(', this tree also `--set ' + o + '`' for o in report.get('new_overrides', []))}; each run in its own "
             f"process with its own embedded Ray, the base and this tree alternated, {report['rounds']} rounds. "
             f"Whole-iteration env steps/s after {report['warmup']} updates; `perf/update_s` mean and largest.", "",
             "| round | base env steps/s | this tree | this / base | base update s (mean, max) | this tree |",
             "|---:|---:|---:|---:|---|---|"]
    for i, (o, n) in enumerate(zip(report["old"], report["new"]), 1):
        lines.append(f"| {i} | {o['env_steps_per_s']:,.0f} | {n['env_steps_per_s']:,.0f} | "
                     f"{n['env_steps_per_s'] / o['env_steps_per_s']:.3f} | {o['update_s_mean']:.3f}, {o['update_s_max']:.3f} | "
                     f"{n['update_s_mean']:.3f}, {n['update_s_max']:.3f} |")
    ratios = [n["env_steps_per_s"] / o["env_steps_per_s"] for o, n in zip(report["old"], report["new"])]
    lines += ["", f"Median ratio this / base: **{statistics.median(ratios):.3f}** "
              f"(rounds {min(ratios):.3f}-{max(ratios):.3f})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--base", required=True, help="the older commit")
    ap.add_argument("--steps", type=int, default=100_000, help="train.total_env_steps of each run")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--new-set", dest="new_overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="an override for this tree's runs only (a setting the base lacks)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5, help="updates left out of the rate")
    ap.add_argument("--out", default="training_ab")
    args = ap.parse_args(argv)
    config = yaml.safe_load(args.config.read_text())
    config.setdefault("train", {}).update(total_env_steps=args.steps, eval_episodes=0)
    report = {"machine": machine_info(), "command": command_line(argv), "base": args.base,
              "config": str(args.config), "steps": args.steps, "overrides": args.overrides,
              "new_overrides": args.new_overrides,
              "rounds": args.rounds, "warmup": args.warmup, "old": [], "new": []}
    with old_tree(args.base) as root, tempfile.TemporaryDirectory(prefix="hdppo_training_ab_") as tmp:
        for r in range(args.rounds):
            for tag, import_root in (("old", root), ("new", None)):
                overrides = args.overrides + (args.new_overrides if tag == "new" else [])
                out = one_run(config, Path(tmp) / f"{tag}{r}" / "run", import_root, overrides, args.warmup)
                report[tag].append(out)
                print(f"[training_ab] round {r + 1} {tag}: {out['env_steps_per_s']:,.0f} env steps/s, update "
                      f"{out['update_s_mean']:.3f} s (max {out['update_s_max']:.3f})", flush=True)
    write_report(args.out, report, render(report), "training_ab")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
