"""The AntNavigate benchmark scripts on tiny two-stage runs: the pre-training's steps count
towards the hierarchy's, and the walk-skill probe drives a skill from a run dir."""
import sys
from pathlib import Path

import numpy as np

from hdppo.platform.config import load_config
from hdppo.platform.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_pretraining_steps_count_and_the_skill_probe_runs(tmp_path):
    from navigation import total_steps_curve
    from walk_skill import held_commands, load_walk, scripted_navigation

    small = ["ray.backend=local", "train.total_env_steps=2000", "train.eval_episodes=0"]
    walk = load_config(ROOT / "configs" / "ant_navigate_walk.yaml", small + ["layers.walk.dppo.train_batch_size=512"])
    Trainer(walk, tmp_path / "walk", quiet=True).train()
    nav = load_config(ROOT / "configs" / "ant_navigate.yaml",
                      small + ["layers.navigate.dppo.train_batch_size=64", f"layers.walk.schedule.checkpoint={tmp_path / 'walk'}"])
    Trainer(nav, tmp_path / "nav", quiet=True).train()

    first, second = total_steps_curve(tmp_path / "walk"), total_steps_curve(tmp_path / "nav", offset=10**6)
    assert first and second and all(s >= 10**6 for s, _ in second) and all(s < 10**6 for s, _ in first)

    policy, norm = load_walk(tmp_path / "walk")
    held = held_commands(policy, norm, steps=5)
    assert len(held) == 8 and all(np.isfinite(r["along_speed"]) and 1 <= r["steps"] <= 5 for r in held)
    scripted = scripted_navigation(policy, norm, episodes=1, period=10)
    assert scripted["episodes"] == 1 and scripted["fell"] + scripted["timed_out"] + round(scripted["success_rate"]) == 1
