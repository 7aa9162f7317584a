"""swarm results: the share of drones that reach their goal and the collision rate of the
two-layer hierarchy beside flat PPO at the same env steps, and of classical pilots.

What it does, in one run:

1. **scripted pilots** (no learning, :mod:`hdppo.envs.builtin.swarm.scripted`): ``straight``
   (full speed at the goal, no avoidance) and ``potential_field`` (attraction to the goal,
   repulsion from obstacles and drones, reading the simulator's exact geometry), ``--episodes``
   episodes on each of ``--scenarios``;
2. **training**: ``configs/swarm_hierarchy.yaml`` (group -> drone, two DPPO groups) and
   ``configs/swarm_flat.yaml`` (flat PPO, shared weights, central critic) with the same total
   env steps (``--env-steps``; the hierarchy's groups share them), or taken from existing run
   dirs (``--run NAME=DIR``, optionally ``NAME=DIR@CHECKPOINT`` for an earlier checkpoint);
3. **evaluation**: each trained policy flies ``--episodes`` episodes (deterministic actions,
   the training sampler, seeds away from training) with 8 drones (8_medium, where it trained)
   and the same weights with 16 drones (16_medium: observations and state have one size; the
   hierarchy's groups are re-listed from the env). A drone counts as *reached* or *collided*
   from the env's end-of-episode infos (``reach_rate``, ``collision_rate``: shares of the
   field's drones), through :func:`hdppo.platform.evaluation.evaluate_episodes`; shares over
   all drones flown, with 95% Wilson intervals (drones of one episode are not independent: the
   intervals are a guide, not a test).

Targets (issue 11): >= 95% of drones reach their goal with a collision rate < 2%, over 100
evaluation episodes with 8 drones.

Usage:
    python benchmarks/swarm.py                                    # train both presets at their own budgets, evaluate
    python benchmarks/swarm.py --quick                            # smoke: tiny budgets, a few episodes
    python benchmarks/swarm.py --run flat=/tmp/swarm/flat --run hierarchy=/tmp/swarm/hier
    python benchmarks/swarm.py --no-crash --run flat=OLD_RUN           # a run trained without crash_on_collision

Writes benchmarks/results/swarm.{json,md} (``--quick``: swarm_quick.*; ``--out`` to choose another stem).
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

from common import checkpoint_steps, records, save_files, stat, train_preset, wilson  # noqa: E402
from machine import machine_info  # noqa: E402

TARGET_REACH = 0.95
TARGET_COLLISION = 0.02
TRAIN_SCENARIO = "8_medium"
TRANSFER_SCENARIO = "16_medium"
CONFIGS = {  # name -> (preset, what it is)
    "hierarchy": ("swarm_hierarchy.yaml", "group (lane, formation) -> drone, two DPPO groups"),
    "flat": ("swarm_flat.yaml", "flat PPO, one layer, shared weights, central critic"),
    "assignment": ("swarm_assignment.yaml", "mission (goal assignment) -> group -> drone, three DPPO groups"),
    "assignment16": ("swarm_assignment_16.yaml", "mission over 24 assignments, over the assignment run's frozen "
                     "group and drone layers"),
}
# Presets whose frozen layers load another config's run (schedule.checkpoint): trained here, they
# load the run this benchmark has for that config.
FROZEN_FROM = {"assignment16": "assignment"}
# The assignment rules a run's assigning layer (action.to_env) is set beside, on the same group
# and drone layers (hdppo.envs.builtin.swarm.assignment).
MISSION_RULES = ("fixed", "shortest", "longest")
ASSIGNMENT_TEACHER = "hdppo.envs.builtin.swarm.assignment:assignment_teacher"


def shares(episodes: int, drones: int, reached: int, collided: int, steps: float) -> dict:
    return {"episodes": episodes, "drones": drones, "reached": reached, "collided": collided,
            "reach_share": reached / drones if drones else 0.0, "reach_ci95": list(wilson(reached, drones)),
            "collision_rate": collided / drones if drones else 0.0, "collision_ci95": list(wilson(collided, drones)),
            "mean_steps": steps,
            "met": bool(drones and reached / drones >= TARGET_REACH and collided / drones < TARGET_COLLISION)}


def scripted_rows(episodes: int, scenarios: list[str], crash: bool = False) -> list[dict]:
    from hdppo.envs.builtin.swarm.scripted import PILOTS, fly

    rows = []
    for pilot in PILOTS:
        for scenario in scenarios:
            t0 = time.perf_counter()
            r = fly(pilot, scenario, episodes, seed=12345, crash_on_collision=crash)
            rows.append({"pilot": pilot, "scenario": scenario, "wall_s": time.perf_counter() - t0,
                         "assignment_shortest": r["assignment_shortest"], "steps_ci95": stat(r["steps"])["ci95"]}
                        | shares(r["episodes"], r["drones"], r["reached"], r["collided"], r["mean_steps"]))
    return rows


def train(name: str, env_steps: int | None, run_dir: Path, overrides: list[str], quick: bool) -> dict:
    """Train preset ``name`` for ``env_steps`` (all groups together; None: the preset's own) into ``run_dir``."""
    return train_preset(ROOT / "configs" / CONFIGS[name][0], env_steps, run_dir, overrides, quick)


def scenario_config(cfg, scenario: str):
    """The run's config on another scenario: env kwargs, and the group layer's groups re-listed
    from the env (its lanes carry no agent id, so more groups fly with the same weights)."""
    from hdppo.envs.builtin.swarm import parallel_env
    from hdppo.platform.config import validate

    data = cfg.model_dump(mode="json")
    data["env"]["kwargs"] = dict(data["env"].get("kwargs") or {}, scenario=scenario)
    groups = parallel_env(scenario=scenario).groups
    for layer in data["layers"]:
        if isinstance(layer.get("agents"), dict):
            if layer["observation"].get("agent_id"):
                raise ValueError(f"layer {layer['name']}: reads an agent id, so its weights fit only its own groups")
            layer["agents"] = {"squads": groups}
    return validate(data)


def flights_of(episodes, n_drones: int) -> dict:
    """Drones reached / collided from each episode's end-of-episode infos (the env's own), and
    the share of episodes flown with the shortest assignment of regions to groups."""
    reached = collided = 0
    steps, shortest = [], []
    for ep in episodes:
        end = next((i for i in ep.infos.values() if "reach_rate" in i), None)
        if end is None:
            raise RuntimeError("an evaluation episode ended without the env's reach_rate in its infos")
        reached += round(end["reach_rate"] * n_drones)
        collided += round(end["collision_rate"] * n_drones)
        steps.append(end["episode_steps"])
        shortest.append(end.get("assignment_shortest", np.nan))
    return shares(len(episodes), len(episodes) * n_drones, reached, collided, float(np.mean(steps))) | {
        "assignment_shortest": float(np.mean(shortest)), "steps_ci95": stat(steps)["ci95"]}


def assigning_layer(cfg) -> str | None:
    """The layer whose decision assigns the goals (action.to_env), if the run has one."""
    return next((layer.name for layer in cfg.layers if layer.action.to_env), None)


def with_mission_rule(cfg, rule: str):
    """The run's config with its assigning layer given the scripted rule ``rule`` as teacher (to act by it)."""
    from hdppo.platform.config import validate

    data = cfg.model_dump(mode="json")
    layer = next(layer for layer in data["layers"] if layer["name"] == assigning_layer(cfg))
    layer["teacher"] = {"policy": ASSIGNMENT_TEACHER, "kwargs": {"rule": rule}, "coeff": 0.0}
    return validate(data)


def evaluate_checkpoint(cfg, checkpoint: Path, episodes: int, scenario: str, mission_rule: str | None = None) -> dict:
    """``episodes`` deterministic episodes of the checkpoint on ``scenario``; with ``mission_rule``,
    the run's assigning layer acts by that scripted rule instead of its policy."""
    from hdppo.envs.builtin.swarm import SCENARIOS
    from hdppo.platform.checkpoint import learner_states, load_checkpoint
    from hdppo.platform.evaluation import evaluate_episodes

    states = learner_states(load_checkpoint(checkpoint))
    t0 = time.perf_counter()
    cfg = scenario_config(cfg, scenario)
    scripted: list[str] = []
    if mission_rule is not None:
        cfg, scripted = with_mission_rule(cfg, mission_rule), [assigning_layer(cfg)]  # type: ignore[list-item]
    eps = evaluate_episodes(cfg, states, episodes, num_envs=20, scripted=scripted)
    return flights_of(eps, SCENARIOS[scenario].n_drones) | {"scenario": scenario, "checkpoint": checkpoint.name,
                                                             "mission": mission_rule or "learned",
                                                             "wall_s": time.perf_counter() - t0}


def fits(cfg, scenario: str) -> bool:
    """Whether every layer's weights fly ``scenario``: an assigning layer chooses among the
    permutations of its training scenario's groups only."""
    from hdppo.envs.builtin.swarm import SCENARIOS
    from hdppo.envs.builtin.swarm.assignment import permutations

    name = assigning_layer(cfg)
    return name is None or cfg.layer(name).action.n == len(permutations(SCENARIOS[scenario].n_groups))


def training_curves(run_dir: Path, layer: str) -> dict[str, list[tuple[int, float]]]:
    """The bottom layer's return and episode reach/collision rates over env steps, as logged."""
    tags = {"return": "charts/episodic_return", "reach_rate": "episode/reach_rate",
            "collision_rate": "episode/collision_rate"}
    recs = records(run_dir)
    return {k: sorted((r["step"], r["value"]) for r in recs if r["tag"] == t and r["layer"] == layer)
            for k, t in tags.items()}


def pct(rate: float, ci: list[float] | None = None) -> str:
    return f"{100 * rate:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def render_markdown(report: dict) -> str:
    m, s = report["machine"], report["settings"]
    lines = ["# swarm: drones reaching their goal, and collisions", "",
             f"Machine: {m.get('cpu_model')}, {m.get('cpu_count')} CPUs (shared with other sessions; load average "
             f"{m.get('load_avg_1_5_15')}), {m.get('timestamp_utc', '')}. Command: `{report['command']}`.", "",
             f"Targets: >= {TARGET_REACH:.0%} of drones reach their goal and a collision rate < {TARGET_COLLISION:.0%} "
             f"(share of drones that collided at least once), over {s['episodes']} evaluation episodes with 8 drones.", "",
             "A collision " + ("ends the drone's flight (env `crash_on_collision: true`, for every row)." if s.get("crash_on_collision")
                               else "is counted and penalised; the drone flies on."), ""]
    rows = []
    for name, t in report.get("trained", {}).items():
        for e in t.get("evaluations", []):
            what = CONFIGS[t.get("config", name)][1]
            mission = e.get("mission", "learned")
            how = "" if mission == "learned" else f"; assignment scripted: {mission}"
            rows.append((f"{name} ({what}{how}), {t.get('env_steps', 0):,} env steps", e))
    for r in report.get("scripted", []):
        rows.append((f"scripted {r['pilot']}", r))
    if rows:
        lines += ["| policy | scenario | episodes | drones | reached | collision rate | mean episode steps "
                  "| shortest assignment | target met |", "|---|---|---|---|---|---|---|---|---|"]
        for label, e in rows:
            ci = e.get("steps_ci95")
            steps = f"{e['mean_steps']:.1f}" + (f" ± {ci:.1f}" if ci is not None and np.isfinite(ci) else "")
            sh = e.get("assignment_shortest")
            sh_txt = f"{100 * sh:.0f}%" if sh is not None and np.isfinite(sh) else "–"
            lines.append(f"| {label} | {e['scenario']} | {e['episodes']} | {e['drones']} | "
                         f"{pct(e['reach_share'], e['reach_ci95'])} | {pct(e['collision_rate'], e['collision_ci95'])} | "
                         f"{steps} | {sh_txt} | {'yes' if e['met'] else 'no'} |")
    for name, t in report.get("trained", {}).items():
        if "error" in t:
            lines.append(f"\n{name}: failed: `{t['error']}`")
        th = t.get("throughput")
        if th:
            per = ", ".join(f"{layer} {steps:,}" for layer, steps in th.get("layer_env_steps", {}).items())
            lines.append(f"\n{name}: trained {t.get('env_steps', 0):,} env steps in {th['wall_s'] / 60:.1f} min "
                         f"({th['env_steps_per_s']:.0f} env steps/s); env steps each layer's group sampled: {per}.")
    if report.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def throughput(run_dir: Path) -> dict | None:
    per = [r for r in records(run_dir) if r["tag"] == "perf/env_steps_per_s"]
    if len(per) < 2:
        return None
    first = min(per, key=lambda r: r["time"])
    t0 = first["time"] - first["step"] / max(first["value"], 1e-9)
    t1 = max(r["time"] for r in per)
    layer_steps = {layer: int(max(r["step"] for r in per if r["layer"] == layer))
                   for layer in dict.fromkeys(r["layer"] for r in per)}
    steps = sum(layer_steps.values())
    return {"env_steps": steps, "wall_s": t1 - t0, "env_steps_per_s": steps / max(t1 - t0, 1e-9),
            "layer_env_steps": layer_steps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, a few episodes")
    p.add_argument("--episodes", type=int, default=None, help="evaluation episodes per row (default 100; --quick 4)")
    p.add_argument("--env-steps", type=int, default=None, help="training env steps per config, all groups together "
                   "(default: each preset's own train.total_env_steps, flat 500k, hierarchy 1M; --quick 1,000)")
    p.add_argument("--only", default=None, help="comma list of: scripted, hierarchy, flat, assignment, assignment16")
    p.add_argument("--run", action="append", default=[], metavar="NAME=DIR[@CHECKPOINT]",
                   help="evaluate this run dir (its last checkpoint, or the one named) instead of training NAME")
    p.add_argument("--set", action="append", default=[], dest="overrides", help="config override for training")
    p.add_argument("--scenarios", default=f"{TRAIN_SCENARIO},{TRANSFER_SCENARIO}")
    p.add_argument("--runs-dir", default=str(ROOT / "runs" / "bench_swarm"))
    p.add_argument("--out", default=None, help="output stem (default benchmarks/results/swarm[_quick])")
    p.add_argument("--note", action="append", default=[], help="a line for the report's notes")
    p.add_argument("--crash", action=argparse.BooleanOptionalAction, default=True,
                   help="a collision ends the drone's flight (env crash_on_collision, as the presets train): the scripted "
                   "pilots fly so, trained runs must have trained so; --no-crash for runs trained without it")
    args = p.parse_args(argv)
    episodes = args.episodes or (4 if args.quick else 100)
    env_steps = args.env_steps or (1_000 if args.quick else None)  # None: each preset's own budget
    parts = args.only.split(",") if args.only else ["scripted", *CONFIGS]
    unknown = set(parts) - {"scripted", *CONFIGS}
    if unknown:
        p.error(f"--only: unknown {sorted(unknown)}; choose from scripted, {', '.join(CONFIGS)}")
    given = dict(r.split("=", 1) for r in args.run)
    out = Path(args.out) if args.out else HERE / "results" / ("swarm_quick" if args.quick else "swarm")
    out.parent.mkdir(parents=True, exist_ok=True)
    overrides = (["ray.backend=local", "train.checkpoint_every=1"] if args.quick else []) + args.overrides
    report: dict[str, Any] = {"machine": machine_info(),
                              "command": "python benchmarks/swarm.py " + " ".join(sys.argv[1:] if argv is None else argv),
                              "settings": {"quick": args.quick, "episodes": episodes, "env_steps": env_steps,
                                           "overrides": overrides, "crash_on_collision": args.crash},
                              "notes": args.note, "trained": {}}

    def save() -> None:
        save_files(out, report, render_markdown(report))

    scenarios = args.scenarios.split(",")
    if "scripted" in parts:
        report["scripted"] = scripted_rows(episodes, scenarios, args.crash)
        save()
        print(f"[swarm] scripted pilots: {len(report['scripted'])} rows", flush=True)
    from hdppo.platform.checkpoint import latest_checkpoint
    from hdppo.platform.config import load_config

    for name in [n for n in CONFIGS if n in parts]:
        entry: dict[str, Any] = {"preset": CONFIGS[name][0]}
        report["trained"][name] = entry
        try:
            checkpoint = None
            if name in given:
                where, _, ck = given[name].partition("@")
                run_dir = Path(where)
                checkpoint = run_dir / "checkpoints" / ck if ck else None
            else:
                run_dir = Path(args.runs_dir) / name
                extra = []
                if name in FROZEN_FROM:
                    source = report["trained"].get(FROZEN_FROM[name], {}).get("run_dir") or \
                        given.get(FROZEN_FROM[name], "").partition("@")[0]
                    if not source:
                        raise ValueError(f"{name}: its frozen layers load a {FROZEN_FROM[name]!r} run; include "
                                         f"{FROZEN_FROM[name]} in --only or pass --run {FROZEN_FROM[name]}=DIR")
                    preset = load_config(ROOT / "configs" / CONFIGS[name][0])
                    extra = [f"layers.{i}.schedule.checkpoint={source}" for i, layer in enumerate(preset.layers)
                             if layer.schedule.mode == "frozen"]
                t0 = time.perf_counter()
                entry["summary"] = train(name, env_steps, run_dir, overrides + extra, args.quick)
                entry["train_wall_s"] = time.perf_counter() - t0
            entry["run_dir"] = str(run_dir)
            cfg = load_config(run_dir / "config.yaml")
            crash = bool((cfg.env.kwargs or {}).get("crash_on_collision", False))
            if crash != args.crash:
                raise ValueError(f"{run_dir / 'config.yaml'}: env.kwargs.crash_on_collision is {crash}, this report's "
                                 f"is {args.crash}; {'pass --crash' if crash else 'pass --no-crash'} to compare like with like")
            checkpoint = checkpoint or latest_checkpoint(run_dir)
            if checkpoint is None or not checkpoint.exists():
                raise RuntimeError(f"{run_dir}: no checkpoint {checkpoint or ''}")
            entry["env_steps"] = checkpoint_steps(checkpoint)
            entry["throughput"] = throughput(run_dir)
            entry["curves"] = training_curves(run_dir, cfg.layers[-1].name)
            entry["evaluations"] = [evaluate_checkpoint(cfg, checkpoint, episodes, sc) for sc in scenarios
                                    if fits(cfg, sc)]
            if assigning_layer(cfg) is not None:  # the same lower layers under each scripted assignment
                entry["evaluations"] += [evaluate_checkpoint(cfg, checkpoint, episodes, sc, rule)
                                         for sc in scenarios if fits(cfg, sc) for rule in MISSION_RULES]
            e = entry["evaluations"][0]
            print(f"[swarm] {name}: reached {e['reach_share']:.1%}, collisions {e['collision_rate']:.1%} "
                  f"over {e['episodes']} episodes on {e['scenario']}", flush=True)
        except Exception as exc:  # noqa: BLE001 - one failed config is reported, the other still runs
            entry["error"] = f"{type(exc).__name__}: {exc}"
            print(f"[swarm] {name} failed: {entry['error']}", flush=True)
        save()
    save()
    print(render_markdown(report))
    print(f"[swarm] wrote {out}.json and {out}.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
