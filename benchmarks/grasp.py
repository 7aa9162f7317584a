"""Grasping unseen objects: lift success on the held-out objects, hierarchy vs flat PPO.

Trains ``configs/grasp_hierarchy.yaml`` (a phase layer over an end-effector layer, each its own
DPPO group) and ``configs/grasp_flat.yaml`` (flat PPO) for the same env steps (all groups
together) on the training objects, then runs each run's last checkpoint for ``--episodes``
deterministic episodes on the held-out objects (every tenth of pybullet_data's random_urdfs,
never seen in training) and reports, per phase, the share of episodes that got there: reach
(the ee within 3 cm of the pre-grasp point), grasp (both fingers on the object, gripper
closed), lift (held ``lift_height`` = 8 cm up: success), with Wilson 95% intervals. A scripted
pick (move above, descend, close, raise: the env's privileged observation used by hand) runs
on the same episodes, as a reference for what the objects allow.

Usage::

    python benchmarks/grasp.py                       # train both (100k env steps each), evaluate
    python benchmarks/grasp.py --run hierarchy=runs/x --run flat=runs/y   # evaluate given runs
    python benchmarks/grasp.py --only hierarchy --run hierarchy=runs/s0,runs/s1,runs/s2   # seeds and their mean
    python benchmarks/grasp.py --quick               # smoke: tiny budgets, a few episodes

Results: ``benchmarks/results/grasp.{json,md}`` with the machine they ran on.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from common import save_files, stat, train_preset, wilson  # noqa: E402
from machine import machine_info  # noqa: E402

CONFIGS = {"hierarchy": "grasp_hierarchy.yaml", "flat": "grasp_flat.yaml"}
PHASE_KEYS = {"reach": "reached", "grasp": "grasp_made", "lift": "is_success"}
TARGET = 0.70


def phase_table(flags: dict[str, list[float]]) -> dict[str, Any]:
    n = len(next(iter(flags.values())))
    out: dict[str, Any] = {"episodes": n}
    for phase, vals in flags.items():
        k = int(round(sum(vals)))
        out[phase] = {"rate": k / n if n else 0.0, "k": k, "ci95": list(wilson(k, n))}
    return out


def train(name: str, env_steps: int, run_dir: Path, overrides: list[str]) -> dict:
    return train_preset(ROOT / "configs" / CONFIGS[name], env_steps, run_dir, overrides, quick=False)


def heldout_config(cfg):
    from hdppo.platform.config import validate

    data = cfg.model_dump(mode="json")
    data["env"]["kwargs"] = dict(data["env"].get("kwargs") or {}, objects="heldout")
    return validate(data)


def evaluate_run(run_dir: Path, episodes: int, seed: int) -> dict:
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint, sampled_env_steps
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import evaluate_episodes

    cfg = load_config(run_dir / "config.yaml")
    last = latest_checkpoint(run_dir)
    if last is None:
        raise RuntimeError(f"{run_dir}: no checkpoint")
    state = load_checkpoint(last)
    steps = sampled_env_steps(state)
    t0 = time.perf_counter()
    eps = evaluate_episodes(heldout_config(cfg), learner_states(state), episodes, seed=seed, num_envs=8)
    flags = {phase: [] for phase in PHASE_KEYS}
    for ep in eps:
        info = next(iter(ep.infos.values()))
        for phase, key in PHASE_KEYS.items():
            flags[phase].append(float(info[key]))
    return {"run_dir": str(run_dir), "checkpoint": last.name, "env_steps": steps,
            "return_mean": float(np.mean([e.ret for e in eps])), "eval_wall_s": time.perf_counter() - t0,
            **phase_table(flags)}


def evaluate_scripted(episodes: int, seed: int) -> dict:
    from hdppo.envs.builtin.grasp import Grasp
    from hdppo.envs.builtin.grasp.scripted import ScriptedPick

    env, pick = Grasp(objects="heldout"), ScriptedPick()
    flags = {phase: [] for phase in PHASE_KEYS}
    t0 = time.perf_counter()
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        pick.reset()
        for _ in range(env.max_steps):
            obs, _, term, trunc, info = env.step(pick.act(obs))
            if term or trunc:
                break
        for phase, key in PHASE_KEYS.items():
            flags[phase].append(float(info[key]))
    env.close()
    return {"wall_s": time.perf_counter() - t0, "env_steps_per_s": episodes * env.max_steps / (time.perf_counter() - t0),
            **phase_table(flags)}


def pct(entry: dict, phase: str) -> str:
    r = entry[phase]
    return f"{100 * r['rate']:.0f}% [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}]"


def verdict(runs: list[dict]) -> str:
    """The target judged on one run's lift rate, or on the mean over seeds: met only when the
    95% t-interval over the seeds stays at or above it (a mean within noise of it is no margin)."""
    rates = [e["lift"]["rate"] for e in runs]
    if len(rates) == 1:
        return f"{'met' if rates[0] >= TARGET else '**not met**'} ({100 * rates[0]:.0f}%)"
    s = stat([100 * r for r in rates])
    if s["mean"] - s["ci95"] >= 100 * TARGET:
        word = "met"
    elif s["mean"] >= 100 * TARGET:
        word = "**not met by a margin** (the mean is above it, its interval reaches below)"
    else:
        word = "**not met**"
    return f"{word} (mean of {len(rates)} seeds {s['mean']:.1f}% ± {s['ci95']:.1f})"


def render_markdown(report: dict) -> str:
    m = report["machine"]
    lines = ["# Grasping held-out objects (benchmarks/grasp.py)", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {m.get('cpu_model')}, {m.get('cpu_count')} CPUs, {m.get('timestamp_utc', '')}; other runs shared it.", "",
             f"Held-out objects (every tenth of random_urdfs), {report['settings']['episodes']} deterministic episodes "
             "each, one object on the tray; share of episodes reaching each phase, Wilson 95% interval; with "
             "several runs of a config, their mean over seeds ± the 95% t-interval.", "",
             "| policy | run | env steps trained | reach | grasp | lift (success) | mean return |",
             "|---|---|---|---|---|---|---|"]
    verdicts = []
    for name, entries in report["trained"].items():
        for e in entries:
            run = Path(e["run_dir"]).name if "run_dir" in e else "-"
            if "error" in e:
                lines.append(f"| {name} | {run} | error: {e['error']} | | | | |")
                continue
            lines.append(f"| {name} (`configs/{CONFIGS[name]}`) | {run} | {e['env_steps']:,} | {pct(e, 'reach')} | "
                         f"{pct(e, 'grasp')} | **{pct(e, 'lift')}** | {e['return_mean']:.1f} |")
        ok = [e for e in entries if "error" not in e]
        if len(ok) > 1:
            cells = []
            for phase in PHASE_KEYS:
                s = stat([100 * e[phase]["rate"] for e in ok])
                cells.append(f"{s['mean']:.1f}% ± {s['ci95']:.1f}")
            lines.append(f"| {name} | mean of {len(ok)} seeds ± 95% t | | {cells[0]} | {cells[1]} | **{cells[2]}** | "
                         f"{np.mean([e['return_mean'] for e in ok]):.1f} |")
        if ok:
            verdicts.append(f"{name}: {verdict(ok)}")
    if "scripted" in report:
        s = report["scripted"]
        lines.append(f"| scripted pick (reference, privileged) | - | - | {pct(s, 'reach')} | {pct(s, 'grasp')} | {pct(s, 'lift')} | - |")
    if verdicts:
        lines += ["", f"Target: lift success >= {100 * TARGET:.0f}% on held-out objects: {'; '.join(verdicts)}."]
    for note in report.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, a few episodes")
    p.add_argument("--episodes", type=int, default=None, help="held-out episodes per policy (default 100; --quick 4)")
    p.add_argument("--env-steps", type=int, default=None, help="training env steps per config (default 100,000)")
    p.add_argument("--run", action="append", default=[], metavar="NAME=DIR[,DIR...]",
                   help="evaluate these run dirs (seeds of one config: a row each and their mean) instead of training NAME")
    p.add_argument("--only", default=None, help="comma list of: hierarchy, flat, scripted")
    p.add_argument("--set", action="append", default=[], dest="overrides", help="config override for training")
    p.add_argument("--runs-dir", default=str(ROOT / "runs" / "bench_grasp"))
    p.add_argument("--seed", type=int, default=12345, help="evaluation seed (object draws and placements)")
    p.add_argument("--out", default=None, help="output stem (default benchmarks/results/grasp[_quick])")
    p.add_argument("--note", action="append", default=[])
    args = p.parse_args(argv)
    episodes = args.episodes or (4 if args.quick else 100)
    env_steps = args.env_steps or (1_000 if args.quick else 100_000)
    parts = args.only.split(",") if args.only else [*CONFIGS, "scripted"]
    overrides = (["ray.backend=local", "train.checkpoint_every=1"] if args.quick else []) + args.overrides
    given = dict(r.split("=", 1) for r in args.run)
    out = Path(args.out) if args.out else HERE / "results" / ("grasp_quick" if args.quick else "grasp")
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine_info(), "command": "python benchmarks/grasp.py " + " ".join(argv or sys.argv[1:]),
                              "settings": {"episodes": episodes, "env_steps": env_steps, "overrides": overrides,
                                           "seed": args.seed}, "notes": args.note, "trained": {}}

    def save() -> None:
        save_files(out, report, render_markdown(report))

    for name in CONFIGS:
        if name not in parts:
            continue
        dirs = [Path(d) for d in given[name].split(",")] if name in given else [Path(args.runs_dir) / name]
        report["trained"][name] = []
        for run_dir in dirs:
            entry: dict[str, Any] = {"run_dir": str(run_dir)}
            try:
                if name not in given:
                    t0 = time.perf_counter()
                    train(name, env_steps, run_dir, overrides)
                    entry["train_wall_s"] = time.perf_counter() - t0
                entry |= evaluate_run(run_dir, episodes, args.seed)
            except Exception as exc:  # a failed row is reported, the others still run
                entry["error"] = f"{type(exc).__name__}: {exc}"
            report["trained"][name].append(entry)
            save()
            print(f"[grasp] {name}: {entry}", flush=True)
    if "scripted" in parts:
        report["scripted"] = evaluate_scripted(episodes, args.seed)
        save()
        print(f"[grasp] scripted: {report['scripted']}", flush=True)
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
