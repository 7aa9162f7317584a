"""How closely a trained swarm drone layer flies like the observed-field pilot, by how near the
nearest obstacle is.

A drone layer kickstarted from ``field_teacher`` (the potential-field pilot computed from the
drone's own observation) was expected to fly like it; it collides far more often. This runs a
run's last checkpoint for ``--episodes`` deterministic episodes (the training sampler, as
``benchmarks/swarm.py`` evaluates) and at every step compares each flying drone's action with
the pilot's action for the same observation, binned by the clearance to the nearest obstacle
(the observation's first obstacle slot, in metres). With ``--scripted`` the drone layer acts by
its teacher instead (``hdppo eval --scripted``): the same table for the pilot itself, whose
error is zero by construction, for its reach and collision rates on the same fields.

Usage:
    python benchmarks/swarm_imitation.py --run runs/swarm_teacher_full/flat --episodes 100

Writes ``benchmarks/results/swarm_imitation.{json,md}`` (``--out`` for another stem).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import save_files  # noqa: E402
from machine import machine_info  # noqa: E402

# Clearance bins (m) of the nearest obstacle surface; the pilot repels within 1.5 m.
BINS = ((0.0, 0.3), (0.3, 0.75), (0.75, 1.5), (1.5, 3.0), (3.0, np.inf))


def nearest_clearance(obs: np.ndarray, k_neighbors: int = 4) -> np.ndarray:
    """Metres from each drone to the nearest sensed obstacle surface (inf where none is sensed),
    from the observation layout of :mod:`hdppo.envs.builtin.swarm` (own features, the Kn
    neighbour slots, then the obstacle slots: present, offset (3), clearance, velocity (3))."""
    from hdppo.envs.builtin.swarm.core import OWN_FEATURES, Physics

    slot = 8
    first = OWN_FEATURES + k_neighbors * slot
    present, clear = obs[:, first], obs[:, first + 4]
    return np.where(present > 0, clear * Physics().sense_range, np.inf)  # the observation scales by the range


def measure(run_dir: Path, episodes: int, seed: int, scripted: bool) -> dict[str, Any]:
    from hdppo.envs.builtin.swarm.scripted import field_action
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import eval_sampler, run_episodes_with_infos

    cfg = load_config(run_dir / "config.yaml")
    last = latest_checkpoint(run_dir)
    if last is None:
        raise SystemExit(f"swarm_imitation: {run_dir} has no checkpoint; pass a run dir that `hdppo train` wrote.")
    layer = cfg.layers[-1].name
    if layer != "drone":
        raise SystemExit(f"swarm_imitation: {run_dir}'s bottom layer is {layer!r}; this compares a swarm drone layer.")
    k_neighbors = int((cfg.env.kwargs or {}).get("k_neighbors", 4))  # the env's default
    states = learner_states(load_checkpoint(last))
    venv, first, specs = probe_env(cfg, seed, min(episodes, 20))
    sampler = eval_sampler(cfg, states, venv, first, specs, scripted=[layer] if scripted else ())
    errors, clearances = [], []
    step_env = venv.step

    def step(actions: np.ndarray):
        # The drones about to act, their observation and the actions the sampler chose for them.
        acting = sampler.now.acting
        obs = sampler.now.obs[acting]
        chosen = np.clip(actions[acting].reshape(len(obs), -1), -1.0, 1.0)  # the env clips to [-1, 1]
        errors.append(np.abs(chosen - field_action(obs, k_neighbors=k_neighbors)).mean(1))
        clearances.append(nearest_clearance(obs, k_neighbors))
        return step_env(actions)

    venv.step = step
    try:
        eps = run_episodes_with_infos(sampler, episodes)
    finally:
        sampler.close()
    err, clear = np.concatenate(errors), np.concatenate(clearances)
    ends = [next(i for i in e.infos.values() if "reach_rate" in i) for e in eps]
    rows = []
    for lo, hi in (*BINS, (np.inf, np.inf)):
        m = ~np.isfinite(clear) if lo == np.inf else (clear >= lo) & (clear < hi)
        rows.append({"clearance_m": [lo, hi], "share": float(m.mean()), "steps": int(m.sum()),
                     "mean_abs_error": float(err[m].mean()) if m.any() else None,
                     "p90_abs_error": float(np.quantile(err[m], 0.9)) if m.any() else None})
    return {"run_dir": str(run_dir), "checkpoint": last.name, "scripted": scripted, "episodes": len(eps),
            "reach_rate": float(np.mean([e["reach_rate"] for e in ends])),
            "collision_rate": float(np.mean([e["collision_rate"] for e in ends])),
            "env_kwargs": dict(cfg.env.kwargs or {}), "bins": rows}


def render_markdown(report: dict) -> str:
    m, r = report["machine"], report["result"]
    lines = ["# swarm: how closely the drone layer flies like the observed-field pilot", "",
             f"Measured {m.get('timestamp_utc', '')} on {m.get('cpu_model', '?')}, {m.get('cpu_count', '?')} CPUs. "
             f"Command: `{report['command']}`.", "",
             f"Run `{r['run_dir']}` ({r['checkpoint']}, env kwargs {r['env_kwargs']}), {r['episodes']} deterministic "
             f"episodes{', the drone layer acting by its teacher' if r['scripted'] else ''}: "
             f"**{r['reach_rate']:.1%} reached, {r['collision_rate']:.1%} collided**.", "",
             "Per drone and step: |action - pilot's action for the same observation|, averaged over the 3 axes "
             "(actions in [-1, 1]), by the clearance to the nearest sensed obstacle.", "",
             "| nearest obstacle clearance | share of drone-steps | mean error | 90th percentile |", "|---|---:|---:|---:|"]
    for b in r["bins"]:
        lo, hi = b["clearance_m"]
        name = "none sensed (> 6 m)" if lo == np.inf else f"{lo:g} - {hi:g} m" if hi != np.inf else f">= {lo:g} m"
        if b["steps"]:
            lines.append(f"| {name} | {b['share']:.1%} | {b['mean_abs_error']:.3f} | {b['p90_abs_error']:.3f} |")
        else:
            lines.append(f"| {name} | 0 | - | - |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a swarm run dir (configs/swarm_flat.yaml or swarm_hierarchy.yaml)")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--scripted", action="store_true", help="the drone layer acts by its teacher (the pilot)")
    p.add_argument("--out", default=str(HERE / "results" / "swarm_imitation"))
    args = p.parse_args(argv)
    report = {"machine": machine_info(), "command": "python benchmarks/swarm_imitation.py " + " ".join(argv or sys.argv[1:]),
              "result": measure(Path(args.run), args.episodes, args.seed, args.scripted)}
    save_files(Path(args.out), report, render_markdown(report))
    print(render_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
