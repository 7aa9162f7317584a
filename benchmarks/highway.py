"""Driving with highway-env: highway-fast-v0 flat PPO, the roundabout hierarchy, and how the env's
throughput grows with processes.

- **highway**: trains ``configs/highway.yaml`` (highway-fast-v0 by config alone, 2 rollout
  workers) for ``--env-steps`` and runs the last checkpoint for ``--episodes`` deterministic
  episodes: mean return, crash rate (``info["crashed"]`` at the last step), episode length.
  Target (the maintainer's reference, issue 13): mean return >= 25 with <= 10% crashes within
  1e5 env steps.
- **highway_kickstart**: ``configs/highway_kickstart.yaml``, the same PPO kickstarted from the
  scripted gap-keeping driver (its weight falling to 0 over the first half of the run); the same
  evaluation. ``--run highway_kickstart=DIR1,DIR2`` evaluates several seeds, each a row, and their
  mean with its 95% t-interval.
- **highway_ttc**: ``configs/highway_ttc.yaml``, the flat preset with highway-env's
  TimeToCollision grid beside the Kinematics view; the same evaluation.
- **highway_shield**: ``configs/highway_shield.yaml``, the time-to-collision preset behind a
  safety shield that masks the meta-actions its gap prediction finds unsafe
  (:func:`hdppo.envs.builtin.driving.safe_actions`); the same evaluation. The scripted rows
  ``faster_shield`` and ``random_shield`` drive behind the same shield without learning.
- **roundabout**: trains ``configs/highway_roundabout_hierarchy.yaml`` (tactic layer over the
  meta-actions) and reports success (exited without a crash), crash and timeout rates
  (:mod:`hdppo.envs.builtin.driving` writes them into info).
- **scripted**: no-learning baselines on both envs, ``idle`` (always IDLE: keep lane and speed)
  and ``random`` meta-actions, over the same number of episodes and seeds; on highway-fast-v0
  also the gap-keeping driver (:func:`hdppo.envs.builtin.driving.gap_keeping_action`, which reads
  the simulator) at its default and at shorter gaps, to show what return a driver gets at
  what crash rate, and ``lookahead``, an oracle that tries each meta-action on a copy of the
  simulator, follows the gap-keeping driver for 3 more decisions and takes the best (a crash
  counts -10): what a driver that sees the future reaches (about 0.7 s a decision, so it plays
  ``--lookahead-episodes``, default 20).
- **throughput**: random-action env steps/s of highway-fast-v0 with 1 and 2 processes
  (``raw_env_limit.run_per_core``; this VM has 2 cores, shared with other runs), and the
  training run's own env steps/s (hdppo with 2 workers).

Usage::

    python benchmarks/highway.py                                  # everything, 1e5 env steps for highway
    python benchmarks/highway.py --run highway=runs/h --run roundabout=runs/r   # evaluate given runs
    python benchmarks/highway.py --only throughput --seconds 30

Results: ``benchmarks/results/highway.{json,md}`` with the machine they ran on.
"""
from __future__ import annotations

import argparse
import json
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

from hdppo.envs.builtin.driving import FASTER, IDLE, LANE_LEFT, LANE_RIGHT, SLOWER  # noqa: E402

CONFIGS = {"highway": "highway.yaml", "highway_kickstart": "highway_kickstart.yaml", "highway_ttc": "highway_ttc.yaml",
           "highway_shield": "highway_shield.yaml", "roundabout": "highway_roundabout_hierarchy.yaml"}
FLAT = ("highway", "highway_kickstart", "highway_ttc", "highway_shield")  # highway-fast-v0: return and crashes
ENV_ID = "highway_env:highway-fast-v0"
TARGET_RETURN, TARGET_CRASH = 25.0, 0.10


def rate(vals: list[float]) -> dict:
    k, n = int(round(sum(vals))), len(vals)
    return {"rate": k / n if n else 0.0, "k": k, "ci95": wilson(k, n)}


def train(name: str, env_steps: int, run_dir: Path, overrides: list[str]) -> None:
    train_preset(ROOT / "configs" / CONFIGS[name], env_steps, run_dir, overrides, quick=False)


def training_rate(run_dir: Path) -> float | None:
    """The run's mean ``perf/env_steps_per_s`` over its updates (bottom layer)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    vals = [r["value"] for r in recs if r["tag"] == "perf/env_steps_per_s"]
    return round(float(np.mean(vals)), 1) if vals else None


def evaluate_run(name: str, run_dir: Path, episodes: int, seed: int, within: int | None = None) -> dict:
    """The run's last checkpoint (or, with ``within``, its last one trained on at most that many
    env steps: the target counts 1e5, and a run of 512-step updates ends at 100,352) over
    ``episodes`` deterministic episodes."""
    from hdppo.platform.checkpoint import learner_states, list_checkpoints, load_checkpoint, sampled_env_steps
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import evaluate_episodes

    cfg = load_config(run_dir / "config.yaml")
    last, state = None, {}
    for path in reversed(list_checkpoints(run_dir)):
        state = load_checkpoint(path)
        if within is None or sampled_env_steps(state) <= within:
            last = path
            break
    if last is None:
        raise RuntimeError(f"{run_dir}: no checkpoint" + (f" within {within:,} env steps" if within else ""))
    steps = sampled_env_steps(state)
    t0 = time.perf_counter()
    eps = evaluate_episodes(cfg, learner_states(state), episodes, seed=seed, num_envs=4)
    infos = [next(iter(e.infos.values())) for e in eps]
    rets = [e.ret for e in eps]
    out: dict[str, Any] = {"run_dir": str(run_dir), "checkpoint": last.name, "env_steps": steps, "episodes": len(eps),
                           "return_mean": float(np.mean(rets)), "return_std": float(np.std(rets)),
                           "length_mean": float(np.mean([e.length for e in eps])), "eval_wall_s": time.perf_counter() - t0,
                           "train_env_steps_per_s": training_rate(run_dir)}
    if name in FLAT:
        out["crash"] = rate([float(bool(i.get("crashed", False))) for i in infos])
    else:
        for key in ("is_success", "crash", "timeout"):
            out[key] = rate([float(i.get(key, 0.0)) for i in infos])
    return out


SCRIPTED = ("idle", "random")   # always IDLE (keep lane and speed); uniformly random meta-actions
# The gap-keeping driver (straight roads only): its default, and shorter headways and times to collision.
GAP_DRIVERS = {"gap": {}, "gap_0.6s": {"headway": 0.6, "ttc": 3.0},
               "gap_0.5s": {"headway": 0.5, "ttc": 2.0, "rear_headway": 0.3},
               "gap_escape": {"escape": True}}
# Behind the preset's safety shield (configs/highway_shield.yaml): always the first allowed of
# FASTER, IDLE, LANE_LEFT, LANE_RIGHT, SLOWER; or uniformly among the allowed. What the shield
# gives without learning.
SHIELDED = {"faster_shield": (FASTER, IDLE, LANE_LEFT, LANE_RIGHT, SLOWER), "random_shield": None}
LOOKAHEAD_DEPTH, LOOKAHEAD_CRASH = 3, -10.0  # the oracle: decisions it looks ahead, what a crash counts
SCRIPTED_ENVS = {"highway": "highway-fast-v0", "roundabout": "roundabout-v1"}


def scripted_policies(env_id: str) -> tuple[str, ...]:
    return SCRIPTED + ((*GAP_DRIVERS, *SHIELDED, "lookahead") if env_id.startswith("highway") else ())


def shield_options() -> dict:
    """The shield settings of ``configs/highway_shield.yaml`` (the scripted rows use the preset's)."""
    from hdppo.platform.config import load_config

    return load_config(ROOT / "configs" / CONFIGS["highway_shield"]).env.kwargs["shield"]


def lookahead_action(env: Any, depth: int = LOOKAHEAD_DEPTH) -> int:
    """The meta-action whose rollout on a copy of the simulator (that action, then the
    gap-keeping driver for ``depth`` decisions) earns the most discounted reward, a crash
    counting :data:`LOOKAHEAD_CRASH`. Other vehicles are deterministic (IDM and MOBIL), so the
    copy sees the future the real env will have, as long as the ego does the same."""
    import copy

    from hdppo.envs.builtin.driving import gap_keeping_action

    sim0 = env.unwrapped
    best, best_action = -np.inf, 1
    for action in range(sim0.action_space.n):
        sim, a, total = copy.deepcopy(sim0), action, 0.0
        for k in range(depth + 1):
            _, r, term, trunc, info = sim.step(a)
            total += float(r) * 0.95 ** k
            if info.get("crashed"):
                total += LOOKAHEAD_CRASH
                break
            if term or trunc:
                break
            a = gap_keeping_action(sim)
        if total > best:
            best, best_action = total, action
    return best_action


def scripted_run(env_id: str, policy: str, episodes: int, seed: int) -> dict:
    """A no-learning baseline over ``episodes`` episodes (seeds ``seed``, ``seed + 1``, ...): the
    env through :mod:`hdppo.envs.builtin.driving` (its outcome in info), the meta-action chosen by
    ``policy``: ``idle`` always IDLE, ``random`` uniformly at random, ``gap*`` the gap-keeping
    driver with :data:`GAP_DRIVERS`' settings, ``lookahead`` :func:`lookahead_action`,
    ``*_shield`` a choice among the actions the preset's safety shield allows (:data:`SHIELDED`)."""
    from hdppo.envs.builtin.driving import gap_keeping_action, make

    env = make(env_id=env_id, shield=shield_options() if policy in SHIELDED else False)
    rng = np.random.default_rng(seed)
    idle = 1  # DiscreteMetaAction: 0 LANE_LEFT, 1 IDLE, 2 LANE_RIGHT, 3 FASTER, 4 SLOWER
    rets, lens, ends = [], [], []
    speeds, right = [], []  # per decision: the ego's speed, and whether it is in (or bound for) the rightmost lane
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            done, ret, n, info = False, 0.0, 0, {}
            while not done:
                if policy in SHIELDED:
                    allowed = np.flatnonzero(obs["action_mask"])
                    order = SHIELDED[policy]
                    a = int(rng.choice(allowed)) if order is None else next(x for x in order if x in allowed)
                elif policy == "lookahead":
                    a = lookahead_action(env)
                elif policy in GAP_DRIVERS:
                    a = gap_keeping_action(env, **GAP_DRIVERS[policy])
                else:
                    a = idle if policy == "idle" else int(rng.integers(env.action_space.n))
                obs, r, te, tr, info = env.step(a)
                ret, n, done = ret + float(r), n + 1, te or tr
                ego = env.unwrapped.vehicle
                speeds.append(float(ego.speed))
                right.append(float(ego.target_lane_index[2] == len(env.unwrapped.road.network.all_side_lanes(ego.lane_index)) - 1))
            rets.append(ret)
            lens.append(n)
            ends.append(info)
    finally:
        env.close()
    out = {"env_id": env_id, "policy": policy, "episodes": episodes, "return_mean": float(np.mean(rets)),
           "return_std": float(np.std(rets)), "length_mean": float(np.mean(lens)),
           "speed_mean": float(np.mean(speeds)), "right_lane_share": float(np.mean(right))}
    for key in ("crash", "is_success", "timeout"):
        out[key] = rate([float(i.get(key, 0.0)) for i in ends])
    return out


def throughput(seconds: float) -> list[dict]:
    from raw_env_limit import raw_env_steps_per_s

    rows = []
    for procs in (1, 2):
        rows.append(raw_env_steps_per_s(ENV_ID, seconds=seconds, procs=procs))
    base = rows[0]["steps_per_s"]
    for r in rows:
        r["speedup"] = round(r["steps_per_s"] / base, 2) if base else None
    return rows


def pct(r: dict) -> str:
    return f"{100 * r['rate']:.0f}% [{100 * r['ci95'][0]:.0f}, {100 * r['ci95'][1]:.0f}]"


def render_markdown(report: dict) -> str:
    m = report["machine"]
    lines = ["# Driving with highway-env (benchmarks/highway.py)", "", f"Command: `{report['command']}`", "",
             f"Machine: {m.get('cpu_model')}, {m.get('cpu_count')} CPUs, load average {m.get('load_avg_1_5_15')}, "
             f"{m.get('timestamp_utc', '')}; other sessions' runs shared it.", ""]
    flat = [(name, report["trained"][name]) for name in FLAT if name in report["trained"]]
    if flat:
        lines += ["## highway-fast-v0, flat PPO (`configs/highway.yaml`; kickstarted: `configs/highway_kickstart.yaml`)", "",
                  "| config | run | env steps trained | episodes | mean return | crashes | mean length | training env steps/s |",
                  "|---|---|---|---|---|---|---|---|"]
        verdicts = []
        for name, runs in flat:
            runs = runs if isinstance(runs, list) else [runs]
            for h in runs:
                if "error" in h:
                    lines.append(f"| {name} | {h.get('run_dir', '')} | error: {h['error']} | | | | | |")
                    continue
                lines.append(f"| {name} | {Path(h['run_dir']).name} | {h['env_steps']:,} | {h['episodes']} | "
                             f"{h['return_mean']:.1f} ± {h['return_std']:.1f} | {pct(h['crash'])} | {h['length_mean']:.1f} | "
                             f"{h['train_env_steps_per_s']} |")
            ok = [h for h in runs if "error" not in h]
            if len(ok) > 1:
                ret, crash = stat([h["return_mean"] for h in ok]), stat([100 * h["crash"]["rate"] for h in ok])
                lines.append(f"| {name} | mean of {len(ok)} seeds ± 95% t | | | **{ret['mean']:.1f} ± {ret['ci95']:.1f}** | "
                             f"**{crash['mean']:.0f}% ± {crash['ci95']:.0f}** | | |")
            if ok:
                mean_ret = float(np.mean([h["return_mean"] for h in ok]))
                mean_crash = float(np.mean([h["crash"]["rate"] for h in ok]))
                met = mean_ret >= TARGET_RETURN and mean_crash <= TARGET_CRASH and max(h["env_steps"] for h in ok) <= 100_000
                verdicts.append(f"{name}: {'met' if met else '**not met**'}")
        lines += ["", f"Target: mean return >= {TARGET_RETURN:.0f} with <= {100 * TARGET_CRASH:.0f}% crashes within 1e5 "
                  f"env steps: {'; '.join(verdicts)}."]
    rr = report["trained"].get("roundabout")
    if rr:
        lines += ["", "## roundabout-v1, tactic layer over meta-actions (`configs/highway_roundabout_hierarchy.yaml`)", "",
                  "| env steps trained | episodes | success | crash | timeout | mean return |", "|---|---|---|---|---|---|"]
        for r in rr if isinstance(rr, list) else [rr]:
            if "error" in r:
                lines.append(f"| error: {r['error']} | | | | | |")
            else:
                lines.append(f"| {r['env_steps']:,} | {r['episodes']} | {pct(r['is_success'])} | {pct(r['crash'])} | "
                             f"{pct(r['timeout'])} | {r['return_mean']:.2f} |")
    if report.get("scripted"):
        lines += ["", "## Scripted baselines (no learning; the same env through `hdppo.envs.builtin.driving`)", "",
                  "| env | policy | episodes | mean return | crashes | success (roundabout: exited) | timeout | mean length "
                  "| mean speed (m/s) | in the rightmost lane |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for t in report["scripted"]:
            speed = f"{t['speed_mean']:.1f}" if "speed_mean" in t else "-"
            right = f"{100 * t['right_lane_share']:.0f}%" if "right_lane_share" in t else "-"
            lines.append(f"| {t['env_id']} | {t['policy']} | {t['episodes']} | {t['return_mean']:.2f} ± {t['return_std']:.2f} | "
                         f"{pct(t['crash'])} | {pct(t['is_success']) if 'roundabout' in t['env_id'] else '-'} | "
                         f"{pct(t['timeout']) if 'roundabout' in t['env_id'] else '-'} | {t['length_mean']:.1f} | {speed} | {right} |")
        lines += ["", "Mean speed and the rightmost-lane share are over every decision of every episode: with the "
                  "collision term 0, a step pays (0.4 s + 0.1 l + 1) / 1.5, s the speed mapped from [20, 30] m/s to "
                  "[0, 1], l 1 in the rightmost lane (0.5 in the middle one), so they say where a return comes from."]
    if report.get("throughput"):
        lines += ["", "## Throughput of highway-fast-v0 (random actions, no learning)", "",
                  "| processes | env steps/s | per process | vs 1 process |", "|---|---|---|---|"]
        for t in report["throughput"]:
            lines.append(f"| {t['procs']} | {t['steps_per_s']} | {t['per_proc']} | {t['speedup']}x |")
        lines += ["", f"{m.get('cpu_count')} cores, shared with other runs: the figures are what this VM gave at the time."]
    for note in report.get("notes", []):
        lines += ["", note]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=None, help="comma list of: highway, highway_kickstart, highway_ttc, highway_shield, roundabout, scripted, throughput")
    p.add_argument("--run", action="append", default=[], metavar="NAME=DIR[,DIR...]",
                   help="evaluate these run dirs (one per seed) instead of training NAME")
    p.add_argument("--env-steps", type=int, default=100_000, help="training env steps per config")
    p.add_argument("--episodes", type=int, default=50, help="deterministic evaluation episodes per policy")
    p.add_argument("--seconds", type=float, default=20.0, help="throughput: seconds per process count")
    p.add_argument("--seed", type=int, default=777)
    p.add_argument("--within", type=int, default=None, metavar="ENV_STEPS",
                   help="evaluate each run's last checkpoint trained on at most ENV_STEPS env steps (default: its last)")
    p.add_argument("--policies", default=None, help="scripted: comma list of policies to run (default all)")
    p.add_argument("--lookahead-episodes", type=int, default=20, help="scripted: episodes of the (slow) lookahead oracle")
    p.add_argument("--set", action="append", default=[], dest="overrides")
    p.add_argument("--runs-dir", default=str(ROOT / "runs" / "bench_highway"))
    p.add_argument("--out", default=None, help="output stem (default benchmarks/results/highway)")
    p.add_argument("--note", action="append", default=[])
    args = p.parse_args(argv)
    parts = args.only.split(",") if args.only else [*CONFIGS, "scripted", "throughput"]
    given = dict(r.split("=", 1) for r in args.run)
    out = Path(args.out) if args.out else HERE / "results" / "highway"
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine_info(), "command": "python benchmarks/highway.py " + " ".join(argv or sys.argv[1:]),
                              "settings": vars(args), "notes": args.note, "trained": {}}

    def save() -> None:
        save_files(out, report, render_markdown(report))

    for name in CONFIGS:
        if name not in parts:
            continue
        dirs = [Path(d) for d in given[name].split(",")] if name in given else [Path(args.runs_dir) / name]
        rows = []
        for run_dir in dirs:
            try:
                if name not in given:
                    train(name, args.env_steps, run_dir, args.overrides)
                rows.append(evaluate_run(name, run_dir, args.episodes, args.seed, args.within))
            except Exception as exc:  # a failed row is reported, the others still run
                rows.append({"run_dir": str(run_dir), "error": f"{type(exc).__name__}: {exc}"})
        report["trained"][name] = rows if len(rows) > 1 else rows[0]
        save()
        print(f"[highway] {name}: {report['trained'][name]}", flush=True)
    if "scripted" in parts:
        chosen = set(args.policies.split(",")) if args.policies else None
        report["scripted"] = [
            scripted_run(env_id, policy, min(args.episodes, args.lookahead_episodes) if policy == "lookahead" else args.episodes,
                         args.seed)
            for env_id in SCRIPTED_ENVS.values() for policy in scripted_policies(env_id) if not chosen or policy in chosen]
        save()
    if "throughput" in parts:
        report["throughput"] = throughput(args.seconds)
        save()
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
