"""Where the time of a training iteration goes: one process, cProfile, time grouped by owner.

Issue 9 asks, where a throughput target is missed, for "the profile that shows where the time
goes". This runs the benchmarks' training settings in one process (``ray.backend=local``: the
workers sample in turn, then the learner updates, all in this process), profiles ``--iterations``
iterations after one warm-up, and charges every function's own time to an *owner*:

| owner | what |
|---|---|
| env | the simulator and its PettingZoo / Gymnasium wrappers (what the raw env limit also pays) |
| env adapter | ``envs/vector.py``, ``envs/adapters.py``: per-copy env calls turned into arrays |
| sampler | ``hierarchies/engine.py``: masks, buffers, transitions, GAE bookkeeping |
| policy (inference) | ``policies/networks.py`` and the torch ops it runs, called by the sampler |
| normalizers, GAE | ``policies/normalizers.py``, ``policies/gae.py`` |
| learner | ``platform/learner.py``, ``policies/ppo_update.py``, ``policies/ppo_loss.py``, ``policies/mlp_gradients.py``, with the networks' forward, the backward and Adam they call |
| platform | the rest of ``platform/`` (worker, group, metrics, diagnostics) |
| other | anything else |

Time in code that belongs to no owner (numpy, torch, builtins) goes to the owners of its callers,
in proportion to the time spent under each (cProfile's per-caller figures), so a numpy reduction
inside the env counts as env, the same one inside the sampler as sampler.

Usage:
    python benchmarks/where_time_goes.py [--tasks simple_spread_v3,battle_v4,Hopper-v5] [--iterations 2]

Writes benchmarks/results/where_time_goes.{json,md}. cProfile slows Python-heavy code more than
C-heavy code, so shares are indicative; the throughput figures come from throughput.py and
multiagent.py, not from here.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import command_line, join_md, write_report  # noqa: E402
from machine import machine_info  # noqa: E402

OWNERS = ("env", "env adapter", "sampler", "policy (inference)", "normalizers, GAE", "learner", "platform", "other")
ENV_PACKAGES = ("mpe2", "magent2", "pettingzoo", "gymnasium", "mujoco", "pybullet", "minatar", "highway_env")
_HDPPO = {"envs/vector.py": "env adapter", "envs/adapters.py": "env adapter", "envs/opponents.py": "env adapter",
          "hierarchies/engine.py": "sampler", "hierarchies/intrinsic.py": "sampler",
          "policies/normalizers.py": "normalizers, GAE",
          "policies/gae.py": "normalizers, GAE", "platform/learner.py": "learner",
          "policies/ppo_update.py": "learner", "policies/ppo_loss.py": "learner",
          "policies/mlp_gradients.py": "learner"}
_UNOWNED = ("numpy", "torch", "~", "<")
# The networks run for the sampler (inference) and for the learner (forward and backward of the
# loss): their time goes to whoever called them, the sampler's share named inference.
NETWORKS = "policies/networks.py"  # numpy, torch, builtins ('~'), generated code: charged to callers
REPO = HERE.parent


def owner_of(path: str) -> str | None:
    """The owner of a code file (see the module docstring), or None for numpy/torch/builtins."""
    p = path.replace(os.sep, "/")
    if "site-packages/" in p or "dist-packages/" in p:  # first: a venv may live inside the repository
        pkg = p.split("-packages/", 1)[1].split("/", 1)[0]
        if pkg in ENV_PACKAGES:
            return "env"
        if pkg.split(".")[0] in ("numpy", "torch"):
            return None
        return "other"
    if p.startswith(_UNOWNED):
        return None
    try:
        rel = Path(path).resolve().relative_to(REPO).as_posix()
    except (ValueError, OSError):
        return "other"  # the standard library and the rest
    if rel == NETWORKS:
        return None
    if rel in _HDPPO:
        return _HDPPO[rel]
    if rel.startswith("envs/builtin/"):
        return "env"
    return "platform" if rel.startswith("platform/") else "other"


def charge(stats: dict) -> dict[str, float]:
    """Seconds per owner from ``pstats.Stats.stats`` ({func: (cc, nc, tt, ct, callers)}).

    An unowned function's own time is split over its callers by the time spent in it under each,
    recursively (a cycle of unowned functions ends in 'other')."""
    memo: dict = {}

    def split(func, seen: frozenset) -> dict[str, float]:
        """Fractions of ``func``'s time per owner."""
        if func in memo:
            return memo[func]
        own = owner_of(func[0])
        if own is not None:
            out = {own: 1.0}
        else:
            callers = stats[func][4] if func in stats else {}
            weights = {c: v[2] + 1e-12 for c, v in callers.items()}  # tt spent in func under each caller
            total = sum(weights.values())
            out = {}
            if not total or func in seen:
                out = {"other": 1.0}
            else:
                for c, w in weights.items():
                    for o, f in split(c, seen | {func}).items():
                        out[o] = out.get(o, 0.0) + f * w / total
                if func[0].replace(os.sep, "/").endswith(NETWORKS) and "sampler" in out:
                    out["policy (inference)"] = out.get("policy (inference)", 0.0) + out.pop("sampler")
        if not seen:
            memo[func] = out
        return out

    seconds = dict.fromkeys(OWNERS, 0.0)
    for func, (_, _, tt, _, _) in stats.items():
        for o, f in split(func, frozenset()).items():
            seconds[o] += tt * f
    return seconds


def task_config(task: str) -> tuple[dict, str]:
    """The benchmark's training config for ``task`` in one process, and which benchmark it is from."""
    if task in ("Hopper-v5", "Ant-v5"):
        import throughput

        cfg = throughput.hdppo_config_dict(task, "central", 10**9)
        src = "throughput.py"
    else:
        import multiagent

        t = multiagent.TASKS[task]
        cfg = multiagent.hdppo_task_config(task, t, multiagent.settings_for(t, False), 10**9)
        src = "multiagent.py"
    cfg["ray"] = {"backend": "local"}
    cfg["train"]["eval_episodes"] = 0
    return cfg, src


def profile_task(task: str, iterations: int, tmp: Path) -> dict:
    from hdppo.platform.config import validate
    from hdppo.platform.trainer import Trainer

    cfg_dict, src = task_config(task)
    trainer = Trainer(validate(cfg_dict, source=f"where_time_goes.py ({task})"), tmp / task, quiet=True)
    try:
        trainer.setup()
        group = trainer.groups[0]
        warm = group.iteration()  # warm-up: first resets, first forward passes, allocations
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        c0 = time.process_time()
        prof.enable()
        results = [group.iteration() for _ in range(iterations)]
        prof.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        trainer.shutdown()
    st = pstats.Stats(prof)
    seconds = charge(st.stats)  # type: ignore[attr-defined]
    total = sum(seconds.values())
    top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:12]  # type: ignore[attr-defined]
    layer = cfg_dict["layers"][-1]["name"]
    env_steps = results[-1][layer].env_steps - warm[layer].env_steps
    return {"task": task, "from": src, "iterations": iterations, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "profiled_s": round(total, 2), "seconds": {k: round(v, 3) for k, v in seconds.items()},
            "share": {k: round(v / total, 4) if total else None for k, v in seconds.items()},
            "top": [{"function": f"{Path(f[0]).name}:{f[1]}({f[2]})", "owner": owner_of(f[0]) or "(callers)",
                     "tottime_s": round(v[2], 3), "calls": v[1]} for f, v in top],
            "settings": {k: cfg_dict["layers"][0].get(k) for k in ("ppo", "dppo")},
            "env_steps_profiled": env_steps}


def render(report: dict) -> str:
    m = report["machine"]
    lines = ["# Where a training iteration's time goes (cProfile, one process)", "",
             f"Run {m['timestamp_utc']} on {m['cpu_model']}, {m['cpu_count']} CPUs (load average at start "
             f"{', '.join(f'{x:.1f}' for x in m.get('load_avg_1_5_15') or [])}). Command: `{report['command']}`.", "",
             "Each task runs its benchmark's training settings in one process (`ray.backend=local`: both "
             "workers sample in turn, then the learner updates); the iterations after one warm-up are "
             "profiled. Shares are of the profiled time; cProfile inflates Python-heavy code more than "
             "C-heavy code, so they are indicative, and the throughput figures themselves come from "
             "throughput.py and multiagent.py.", ""]
    tasks = report["tasks"]
    lines += ["| owner | " + " | ".join(t["task"] for t in tasks) + " |",
              "|---|" + "---:|" * len(tasks)]
    for o in OWNERS:
        lines.append(f"| {o} | " + " | ".join(
            f"{t['seconds'][o]:.2f} s ({100 * (t['share'][o] or 0):.0f}%)" for t in tasks) + " |")
    lines.append("| **profiled** | " + " | ".join(f"{t['profiled_s']:.2f} s over {t['iterations']} iterations"
                                                 for t in tasks) + " |")
    for t in tasks:
        lines += ["", f"## {t['task']} ({t['from']} settings, {t['env_steps_profiled']:,} env steps profiled in "
                  f"{t['wall_s']:.1f} s): the 12 functions with the most own time", "",
                  "| function | owner | own s | calls |", "|---|---|---:|---:|"]
        lines += [f"| `{r['function']}` | {r['owner']} | {r['tottime_s']:.3f} | {r['calls']:,} |" for r in t["top"]]
    return join_md(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="simple_spread_v3,battle_v4,Hopper-v5")
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--out", default="where_time_goes")
    args = ap.parse_args(argv)
    report = {"machine": machine_info(), "command": command_line(argv), "tasks": []}
    with tempfile.TemporaryDirectory(prefix="hdppo-profile-") as tmp:
        for task in [t.strip() for t in args.tasks.split(",") if t.strip()]:
            print(f"[where_time_goes] {task} ...", flush=True)
            report["tasks"].append(profile_task(task, args.iterations, Path(tmp)))
    write_report(args.out, report, render(report), "where_time_goes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
