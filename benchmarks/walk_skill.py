"""Probe a trained AntNavigate walk skill on its own, without the learned navigator.

Two measurements, both deterministic:

* ``held``: each of 8 commands (directions in the Ant's heading frame) held for ``--steps`` env
  steps; the mean speed along the command and the displacement. A skill that only lunges when
  the command changes shows speeds near 0 here.
* ``scripted``: AntNavigate episodes driven by a scripted navigator that points the command at
  the goal (the goal in the heading frame, from ``state()``) every ``--period`` steps: how far
  the skill gets with a navigator that knows nothing of its quirks.

Usage:
    python benchmarks/walk_skill.py RUN_DIR [--episodes 40] [--period 10] [--steps 200]

RUN_DIR is any run with a ``walk`` layer (configs/ant_navigate_walk.yaml, or the hierarchy).
Prints a table and writes benchmarks/results/walk_skill.{json,md} (``--out`` to change the stem).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import machine_info  # noqa: E402

COMMAND_DIM = 2


def load_walk(run_dir: Path, layer: str = "walk"):
    """The layer's policy and observation normalizer from the run's latest checkpoint."""
    import gymnasium as gym

    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config
    from hdppo.policies.networks import ActorCritic
    from hdppo.policies.normalizers import ObservationNormalizer, RunningStats

    cfg = load_config(run_dir / "config.yaml")
    state = learner_states(load_checkpoint(latest_checkpoint(run_dir)))[layer]
    stats = RunningStats.from_state(state["obs_stats"])
    obs_dim = stats.shape[0]
    p = cfg.layer(layer).policy
    policy = ActorCritic(obs_dim, gym.spaces.Box(-1.0, 1.0, (8,), np.float32), p.hidden, p.activation)
    policy.load_state_dict(state["policy"])
    norm = ObservationNormalizer((obs_dim,), cfg.layer(layer).normalization.clip)
    norm.set_published(stats)
    return policy, norm


def _act(policy, norm, obs: np.ndarray, command: np.ndarray) -> np.ndarray:
    from hdppo.envs.builtin.ant_navigate import egocentric

    x = np.concatenate([egocentric({"a": obs}, ["a"]), command]).astype(np.float32)[None]
    action, _, _ = policy.act(torch.from_numpy(norm(x)), deterministic=True)
    return np.clip(action[0], -1.0, 1.0)


def held_commands(policy, norm, steps: int, seed: int = 7) -> list[dict]:
    from hdppo.envs.builtin.ant_navigate import make, to_heading_frame, yaw

    env = make(max_steps=10**9)
    rows = []
    for angle in np.linspace(0.0, 2 * np.pi, 8, endpoint=False):
        obs, _ = env.reset(seed=seed)
        start = env.ant.data.qpos[:2].copy()
        command = np.array([np.cos(angle), np.sin(angle)])
        along, fell = [], False
        for _ in range(steps):
            obs, _, term, _, info = env.step(_act(policy, norm, obs, command))
            v = np.array([info["x_velocity"], info["y_velocity"]])
            along.append(float(to_heading_frame(v, yaw(obs[1:5])) @ command))
            if term:
                fell = not info["is_success"]
                break
        rows.append({"command_deg": round(float(np.degrees(angle))), "steps": len(along),
                     "along_speed": round(float(np.mean(along)), 3), "fell": fell,
                     "displacement_m": round(float(np.linalg.norm(env.ant.data.qpos[:2] - start)), 2)})
    env.close()
    return rows


def scripted_navigation(policy, norm, episodes: int, period: int, seed: int = 1000) -> dict:
    from hdppo.envs.builtin.ant_navigate import make

    env = make()
    outcomes = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        command = np.zeros(COMMAND_DIM)
        t, term, trunc, info = 0, False, False, {}
        while not (term or trunc):
            if t % period == 0:
                local_goal = env.state()[7:9]
                command = local_goal / max(float(np.linalg.norm(local_goal)), 1e-6)
            obs, _, term, trunc, info = env.step(_act(policy, norm, obs, command))
            t += 1
        outcomes.append("reached" if info["is_success"] else ("fell" if term else "timed out"))
    env.close()
    return {"episodes": episodes, "period": period, "success_rate": outcomes.count("reached") / episodes,
            "fell": outcomes.count("fell"), "timed_out": outcomes.count("timed out")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--period", type=int, default=10)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default="walk_skill")
    args = ap.parse_args(argv)
    policy, norm = load_walk(args.run_dir)
    held = held_commands(policy, norm, args.steps)
    scripted = scripted_navigation(policy, norm, args.episodes, args.period)
    machine = machine_info()
    lines = [f"# Walk skill probe: `{args.run_dir}`", "",
             f"Measured {machine.get('timestamp_utc', '')} on {machine.get('cpu_model', '?')}, "
             f"{machine.get('cpu_count', '?')} CPUs. Deterministic actions.", "",
             f"Commands held {args.steps} steps (directions in the Ant's heading frame):", "",
             "| command | steps | speed along it (m/s) | displacement (m) | fell |", "|---:|---:|---:|---:|---|"]
    lines += [f"| {r['command_deg']}° | {r['steps']} | {r['along_speed']:.2f} | {r['displacement_m']:.2f} | "
              f"{'yes' if r['fell'] else 'no'} |" for r in held]
    lines += ["", f"Scripted navigator (command = goal direction, renewed every {args.period} steps), "
              f"{args.episodes} AntNavigate episodes: **{100 * scripted['success_rate']:.0f}%** reached, "
              f"{scripted['timed_out']} timed out, {scripted['fell']} fell.", ""]
    md = "\n".join(lines)
    print(md)
    out = HERE / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.out}.md").write_text(md)
    (out / f"{args.out}.json").write_text(json.dumps({"run_dir": str(args.run_dir), "held": held,
                                                      "scripted": scripted, "machine": machine}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
