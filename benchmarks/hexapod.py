"""The hexapod per terrain: velocity tracking, falls, goals reached and push recovery.

Takes finished runs and evaluates each deterministically, through hdppo's own sampler (as
``hdppo eval`` builds the policies), on ``--episodes`` 20 s episodes (500 steps) per terrain kind
at ``--difficulty``, the env's pushes on (1.0 m/s every 5 s, as legged_gym pushes). Every env
step's info is recorded, so that per episode:

* **tracking** (walk skill, ``task='velocity'``, the env's own commands): mean |v - v_cmd| (m/s,
  planar, heading frame) and mean |yaw rate - command| over the episode's steps, leaving out the
  first second after each push (push recovery is measured on its own);
* **falls**: share of episodes with a fall (the body on the ground or tilted past 60 degrees);
* **goals** (``task='goal'``: the route hierarchy, the flat baseline): share of episodes that
  reach the goal 2-4 m away (within 0.4 m) inside 20 s;
* **push recovery**: for each push, the steps until the body is back within bounds of where it
  was before the push (its mean over the 1 s before: height over the terrain within 3 cm and tilt
  within 0.1 rad, the issue's "body height and orientation") and stays so for 0.2 s. A stricter
  measure is reported beside it, which also asks the planar velocity back within 0.25 m/s: a
  walker that re-plans after a shove (a route layer picking a new waypoint) changes its velocity
  on purpose, so velocity mixes balance with intent and is not the target's measure. In gait cycles, the
  steps over the episode's measured stride period (median time between two touchdowns of the
  same foot, each after at least 2 steps in the air), or over a 0.5 s reference period where
  the robot took fewer than 3 strides. A push is not recovered when the robot falls, the
  episode ends, or the next push comes first; one whose episode ended at the goal less than 3
  gait cycles (and the hold) after it, unrecovered but standing, is censored: counted apart
  ("+N censored"), in neither the numerator nor the denominator.

Targets (issue 13): falls < 5% of 20 s episodes on rough terrain (``gravel``); >= 90% of pushes
recovered within 3 gait cycles; >= 80% of goals reached on rough terrain.

Usage (from the folder the runs were trained in, so a frozen layer's checkpoint path resolves):
    python benchmarks/hexapod.py --walk runs/hexapod_walk [--terrain runs/hexapod_terrain]
        [--flat runs/hexapod_terrain_flat] [--episodes 100] [--difficulty 0.5]
        [--terrains flat,gravel,slopes,steps] [--copies 4] [--scripted] [--quick]

Writes benchmarks/results/hexapod.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import command_line, join_md, machine_line, write_report, wilson  # noqa: E402
from machine import machine_info  # noqa: E402

REFERENCE_GAIT_S = 0.5
RECOVERY = {"height": 0.03, "tilt": 0.1, "velocity": 0.25, "hold_s": 0.2}
TARGETS = {"falls_rough": 0.05, "push_recovered_3_cycles": 0.90, "goals_rough": 0.80}


# -- one episode's measurements ------------------------------------------------------------------

def gait_period(contacts: np.ndarray, dt: float, air: int = 2) -> float | None:
    """Median time between two touchdowns of the same foot (``contacts`` [T, 6] of 0/1), None
    with fewer than 3 strides in all. A touchdown follows at least ``air`` steps off the ground,
    so that a foot chattering on the spot is not a stride."""
    strides = []
    for foot in contacts.T > 0.5:
        up = np.concatenate([[0], np.cumsum(~foot)])   # steps off the ground so far
        down = [t for t in range(air, len(foot)) if foot[t] and not foot[t - 1] and up[t] - up[t - air] == air]
        strides += list(np.diff(down))
    return float(np.median(strides)) * dt if len(strides) >= 3 else None


def push_recoveries(infos: list[dict], dt: float, window: int | None = None,
                    velocity: bool = False) -> tuple[list[int | None], int]:
    """Steps from each push until recovered (see the module docstring), None if never; and how
    many pushes were censored, left out of that list: not recovered yet when the episode ended
    by reaching its goal, fewer than ``window`` steps after the push (the goal task ends on
    arrival, so a robot that gets there fast would otherwise be charged for the pushes it had no
    time left to recover from). Recovered: height and tilt back within bounds; with
    ``velocity``, the planar velocity too (the stricter measure)."""
    n = len(infos)
    height = np.array([i["body_height"] for i in infos])
    tilt = np.array([i["tilt"] for i in infos])
    vel = np.array([i["body_velocity"] for i in infos])
    fell = np.array([i["fell"] for i in infos])
    pushes = [k for k, i in enumerate(infos) if i["pushed"]]
    before, hold = max(1, int(round(1.0 / dt))), max(1, int(round(RECOVERY["hold_s"] / dt)))
    out: list[int | None] = []
    censored = 0
    arrived = bool(n and infos[-1]["is_success"])
    for j, k in enumerate(pushes):
        end = pushes[j + 1] if j + 1 < len(pushes) else n
        lo = max(0, k - before)
        if k - lo < 2:
            continue   # no "before" to return to
        h0, t0, v0 = height[lo:k].mean(), tilt[lo:k].mean(), vel[lo:k].mean(0)
        ok = (np.abs(height - h0) < RECOVERY["height"]) & (np.abs(tilt - t0) < RECOVERY["tilt"]) & ~fell
        if velocity:
            ok &= np.linalg.norm(vel - v0, axis=1) < RECOVERY["velocity"]
        steps = None
        for s in range(k, end - hold + 1):
            if fell[s]:
                break
            if ok[s:s + hold].all():
                steps = s - k
                break
        if steps is None and window is not None and end == n and arrived and n - k < window and not fell[k:].any():
            censored += 1
            continue
        out.append(steps)
    return out, censored


def episode_metrics(infos: list[dict], dt: float) -> dict:
    pushes = [k for k, i in enumerate(infos) if i["pushed"]]
    calm = np.ones(len(infos), bool)
    for k in pushes:
        calm[k:k + int(round(1.0 / dt))] = False
    track = np.array([i["tracking_error"] for i in infos])
    yaw_err = np.array([abs(i["yaw_rate"] - float(i["command"][2])) for i in infos])
    period = gait_period(np.array([i["contacts"] for i in infos]), dt)
    cycle = period or REFERENCE_GAIT_S
    window = int(np.ceil(3.0 * cycle / dt)) + max(1, int(round(RECOVERY["hold_s"] / dt)))
    rec, censored = push_recoveries(infos, dt, window)
    rec_v, censored_v = push_recoveries(infos, dt, window, velocity=True)
    return {"steps": len(infos), "fell": bool(any(i["fell"] for i in infos)),
            "success": bool(any(i["is_success"] for i in infos)),
            "tracking_error": float(track[calm].mean()) if calm.any() else None,
            "yaw_rate_error": float(yaw_err[calm].mean()) if calm.any() else None,
            "gait_period_s": period, "recovery_steps": rec, "pushes_censored": censored,
            "recovery_cycles": [None if r is None else r * dt / cycle for r in rec],
            "pushes_censored_velocity": censored_v,
            "recovery_cycles_velocity": [None if r is None else r * dt / cycle for r in rec_v],
            "distance": float(np.linalg.norm(infos[-1]["position"] - infos[0]["position"]))}


# -- running a run dir on one terrain ------------------------------------------------------------

def _unwrap(env):
    while hasattr(env, "env") and not hasattr(env, "heights"):
        env = env.env
    return getattr(env, "unwrapped", env)


def evaluate(run_dir: Path, kwargs: dict, episodes: int, seed: int, copies: int) -> list[dict]:
    """``episodes`` deterministic episodes of the run's latest checkpoint with the env kwargs
    changed by ``kwargs``, each episode's per-step infos reduced by :func:`episode_metrics`."""
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config, validate
    from hdppo.platform.evaluation import eval_sampler

    cfg = load_config(run_dir / "config.yaml")
    data = cfg.model_dump()
    data["env"]["kwargs"] = {**data["env"]["kwargs"], **kwargs}
    cfg = validate(data, str(run_dir / "config.yaml"))
    states = learner_states(load_checkpoint(latest_checkpoint(run_dir)))
    n = max(1, min(copies, episodes))
    venv, first, specs = probe_env(cfg, seed, n)
    records: list[list[dict]] = [[] for _ in range(n)]
    envs = []
    for c in range(n):
        env = _unwrap(venv.copy_env(c))
        step = env.step

        def recording(action, _step=step, _rec=records[c]):
            out = _step(action)
            _rec.append(out[4])
            return out

        env.step = recording
        envs.append(env)
    sampler = eval_sampler(cfg, states, venv, first, specs)
    quota = [episodes // n + (1 if i < episodes % n else 0) for i in range(n)]
    done = [0] * n
    out: list[dict] = []
    try:
        while sum(done) < episodes:
            for _, _, c in sampler.step():
                if done[c] < quota[c]:
                    out.append(episode_metrics(records[c], envs[c].dt))
                    done[c] += 1
                records[c].clear()
    finally:
        sampler.close()
    return out


def scripted_command(env) -> np.ndarray:
    """What the scripted controllers ask of the gait: the env's own command (velocity task), or
    pure pursuit of the goal (goal task): turn toward it at up to 0.8 rad/s, walk at up to 0.4 m/s,
    slower while it lies off to the side."""
    if env.task == "velocity":
        return env.command
    dx, dy = env.state()[:2]
    bearing = float(np.arctan2(dy, dx))
    return np.array([0.4 * max(0.0, np.cos(bearing)), 0.0, float(np.clip(2.0 * bearing, -0.8, 0.8))])


def evaluate_scripted(kwargs: dict, episodes: int, seed: int) -> list[dict]:
    """``episodes`` episodes of the open-loop tripod gait (``action_mode='gait'``, parameters from
    :func:`scripted_command` by the env's measured gains, no residuals, no learning): what the
    gait generator alone does, the reference for what the trained layers add."""
    from hdppo.envs.builtin.hexapod import make
    from hdppo.envs.builtin.hexapod.env import gait_action

    env = make(**{"action_mode": "gait", **kwargs})
    out = []
    for i in range(episodes):
        env.reset(seed=seed + i)
        infos, done = [], False
        while not done:
            _, _, terminated, truncated, info = env.step(gait_action(scripted_command(env), env.gait_hz))
            infos.append(info)
            done = terminated or truncated
        out.append(episode_metrics(infos, env.dt))
    env.close()
    return out


def summarize(eps: list[dict]) -> dict:
    n = len(eps)
    falls = sum(e["fell"] for e in eps)
    goals = sum(e["success"] for e in eps)
    rec = [r for e in eps for r in e["recovery_cycles"]]
    rec_steps = [r for e in eps for r in e["recovery_steps"] if r is not None]
    within = sum(1 for r in rec if r is not None and r <= 3.0)
    rec_v = [r for e in eps for r in e["recovery_cycles_velocity"]]
    within_v = sum(1 for r in rec_v if r is not None and r <= 3.0)
    track = [e["tracking_error"] for e in eps if e["tracking_error"] is not None]
    yaw = [e["yaw_rate_error"] for e in eps if e["yaw_rate_error"] is not None]
    periods = [e["gait_period_s"] for e in eps if e["gait_period_s"] is not None]
    return {"episodes": n, "falls": falls / n, "falls_ci95": wilson(falls, n), "goals": goals / n,
            "goals_ci95": wilson(goals, n), "pushes": len(rec), "pushes_censored": sum(e["pushes_censored"] for e in eps), "push_recovered_3_cycles": within / len(rec) if rec else None,
            "push_recovered_3_cycles_ci95": wilson(within, len(rec)),
            "pushes_velocity": len(rec_v), "pushes_censored_velocity": sum(e["pushes_censored_velocity"] for e in eps),
            "push_recovered_3_cycles_velocity": within_v / len(rec_v) if rec_v else None,
            "push_recovered_3_cycles_velocity_ci95": wilson(within_v, len(rec_v)),
            # How many pushes took the body out of the height and tilt bounds at all (not back at once).
            "pushes_out_of_bounds": sum(1 for r in rec if r is None or r > 0) / len(rec) if rec else None,
            "push_recovered_any": sum(r is not None for r in rec) / len(rec) if rec else None,
            "recovery_steps_median": float(np.median(rec_steps)) if rec_steps else None,
            "recovery_cycles_median": float(np.median([r for r in rec if r is not None])) if any(r is not None for r in rec) else None,
            "tracking_error": float(np.mean(track)) if track else None, "yaw_rate_error": float(np.mean(yaw)) if yaw else None,
            "gait_period_s": float(np.median(periods)) if periods else None, "stepping_episodes": len(periods) / n,
            "distance_mean": float(np.mean([e["distance"] for e in eps]))}


def _f(x, pct=False, nd=3):
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if pct else f"{x:.{nd}f}"


def _ci(s, key):
    lo, hi = s[key + "_ci95"]
    return f"{_f(s[key], True)} [{100 * lo:.0f}, {100 * hi:.0f}]"


def table(name: str, res: dict, goal: bool) -> list[str]:
    head = "| terrain | episodes | falls [95% CI] | " + ("goals [95% CI] | " if goal else "tracking error (m/s) | yaw-rate error (rad/s) | ") + \
        "pushes | out of bounds at all | recovered <= 3 cycles [95% CI] | with velocity too [95% CI] | recovered at all | median recovery (steps / cycles) | gait period (s) | stepping episodes | mean distance (m) |"
    lines = [f"### {name}", "", head, "|" + "---|" * (head.count("|") - 1)]
    for terrain, s in res.items():
        mid = f"{_ci(s, 'goals')} | " if goal else f"{_f(s['tracking_error'])} | {_f(s['yaw_rate_error'])} | "
        cens = f" (+{s['pushes_censored']} censored)" if s.get("pushes_censored") else ""
        lines.append(f"| {terrain} | {s['episodes']} | {_ci(s, 'falls')} | {mid}{s['pushes']}{cens} | "
                     f"{_f(s.get('pushes_out_of_bounds'), True)} | "
                     f"{_ci(s, 'push_recovered_3_cycles') if s['pushes'] else 'n/a'} | "
                     f"{_ci(s, 'push_recovered_3_cycles_velocity') if s.get('pushes_velocity') else 'n/a'} | "
                     f"{_f(s['push_recovered_any'], True)} | "
                     f"{_f(s['recovery_steps_median'], nd=0)} / {_f(s['recovery_cycles_median'], nd=2)} | "
                     f"{_f(s['gait_period_s'], nd=2)} | {_f(s['stepping_episodes'], True)} | {_f(s['distance_mean'], nd=2)} |")
    return lines + [""]


def verdicts(results: dict) -> list[str]:
    out = []
    for name, res in results.items():
        rough = res.get("gravel")
        if rough is None:
            continue
        f = rough["falls"]
        out.append(f"- {name}: falls on gravel {_f(f, True)} (target < 5%): {'met' if f < TARGETS['falls_rough'] else 'NOT met'}")
        p = rough["push_recovered_3_cycles"]
        out.append(f"- {name}: pushes recovered (height and tilt) within 3 gait cycles on gravel {_f(p, True)} "
                   f"(target >= 90%): {'n/a' if p is None else ('met' if p >= TARGETS['push_recovered_3_cycles'] else 'NOT met')}; "
                   f"with velocity too {_f(rough.get('push_recovered_3_cycles_velocity'), True)}; "
                   f"{_f(rough.get('pushes_out_of_bounds'), True)} of pushes left the height and tilt bounds at all")
        if name not in ("walk", "scripted gait (velocity)"):
            g = rough["goals"]
            out.append(f"- {name}: goals reached on gravel {_f(g, True)} (target >= 80%): "
                       f"{'met' if g >= TARGETS['goals_rough'] else 'NOT met'}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walk", type=Path, help="a walk-skill run (configs/hexapod_walk.yaml)")
    ap.add_argument("--terrain", type=Path, help="a route hierarchy run (configs/hexapod_terrain.yaml)")
    ap.add_argument("--flat", type=Path, help="a flat baseline run (configs/hexapod_terrain_flat.yaml)")
    ap.add_argument("--scripted", action="store_true", help="also the open-loop tripod gait, untrained: following "
                    "the env's commands (beside --walk) and pure pursuit of the goal (beside --terrain/--flat)")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--difficulty", type=float, default=0.5)
    ap.add_argument("--terrains", default="flat,gravel,slopes,steps")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--quick", action="store_true", help="2 episodes of 100 steps per terrain (a smoke run)")
    ap.add_argument("--out", default="hexapod")
    args = ap.parse_args(argv)
    if not (args.walk or args.terrain or args.flat or args.scripted):
        ap.error("give at least one of --walk, --terrain, --flat, --scripted")
    episodes = 2 if args.quick else args.episodes
    base = {"difficulty": args.difficulty, "curriculum": False}
    if args.quick:
        base["max_steps"] = 100
    runs = [(n, p) for n, p in (("walk", args.walk), ("route hierarchy", args.terrain), ("flat PPO", args.flat)) if p]
    scripted = [("scripted gait (velocity)", {"task": "velocity", "command_in_obs": True}),
                ("scripted gait (pursuit)", {"task": "goal", "command_in_obs": False})] if args.scripted else []
    report = {"machine": machine_info(), "command": command_line(argv), "settings": {**vars(args), "quick": args.quick},
              "recovery_bounds": RECOVERY, "reference_gait_s": REFERENCE_GAIT_S, "targets": TARGETS, "results": {},
              "runs": {n: str(p) for n, p in runs}}
    report["scripted"] = [n for n, _ in scripted]
    walk_kwargs = {"push_velocity": 1.0, "push_interval_s": 5.0, "max_steps": base.get("max_steps", 500)}
    for name, run_dir in runs + scripted:
        report["results"][name] = {}
        for terrain in args.terrains.split(","):
            t = time.time()
            if isinstance(run_dir, dict):
                eps = evaluate_scripted({**walk_kwargs, **run_dir, **base, "terrain": terrain}, episodes, args.seed)
            else:
                eps = evaluate(run_dir, {**base, "terrain": terrain}, episodes, args.seed, args.copies)
            s = summarize(eps)
            report["results"][name][terrain] = s
            print(f"[hexapod] {name} on {terrain}: falls {_f(s['falls'], True)}, goals {_f(s['goals'], True)}, "
                  f"tracking {_f(s['tracking_error'])}, pushes recovered <= 3 cycles {_f(s['push_recovered_3_cycles'], True)} "
                  f"({time.time() - t:.0f}s)", flush=True)
    lines = ["# Hexapod: falls, velocity tracking, goals and push recovery per terrain", "",
             "**Smoke run (`--quick`): numbers are not meaningful.**" if args.quick else "", "",
             machine_line(report["machine"]), "", f"Command: `{report['command']}`", "",
             f"Runs: {', '.join(f'{n}: `{p}`' for n, p in runs)}. {episodes} deterministic episodes of "
             f"{'100' if args.quick else '500'} steps (20 s) per terrain at difficulty {args.difficulty}, pushes of 1.0 m/s "
             "every 5 s. Push recovery bounds: height within 3 cm and tilt within 0.1 rad of the second before the "
             "push, held 0.2 s (the target's measure); 'with velocity too' also asks the planar velocity back within "
             "0.25 m/s (stricter: a walker that re-plans after a push changes its velocity on purpose); gait cycle = the episode's median stride period "
             f"(or {REFERENCE_GAIT_S} s where the robot took fewer than 3 strides).",
             "" if not scripted else "Scripted rows: the env's tripod gait generator alone (`action_mode: gait`), its "
             "amplitudes from the command by the measured gains, no residuals and nothing learned; pursuit turns toward "
             "the goal at up to 0.8 rad/s and walks at up to 0.4 m/s. They are references for what training adds, not "
             "targets' subjects.", ""]
    for name, res in report["results"].items():
        lines += table(name, res, goal=name not in ("walk", "scripted gait (velocity)"))
    lines += ["Targets (issue 13), on rough terrain (gravel):", ""] + verdicts(report["results"])
    write_report(args.out, report, join_md(lines) + "\n", "hexapod")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
