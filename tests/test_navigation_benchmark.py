"""The AntNavigate benchmark scripts on tiny two-stage runs: the pre-training's steps count
towards the hierarchy's, and the walk-skill probe drives a skill from a run dir."""
import json
import sys
from pathlib import Path

import numpy as np

from hdppo.platform.checkpoint import latest_checkpoint
from hdppo.platform.config import load_config
from hdppo.platform.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_pretraining_steps_count_and_the_skill_probe_runs(tmp_path):
    from common import checkpoint_steps
    from navigation import measure, total_steps_curve
    from walk_skill import held_commands, load_walk, scripted_navigation

    small = ["ray.backend=local", "train.total_env_steps=2000", "train.eval_episodes=0"]
    walk = load_config(ROOT / "configs" / "ant_navigate_walk.yaml", small + ["layers.walk.dppo.train_batch_size=512"])
    walk_run = Trainer(walk, tmp_path / "walk", quiet=True).train()
    nav = load_config(ROOT / "configs" / "ant_navigate.yaml",
                      small + ["layers.navigate.dppo.train_batch_size=64", f"layers.walk.schedule.checkpoint={tmp_path / 'walk'}",
                               "env.kwargs.max_steps=20"])          # a short evaluation episode in measure()
    nav_run = Trainer(nav, tmp_path / "nav", quiet=True).train()

    # Each run's own env steps, from its summary and from its last checkpoint (all groups together).
    pre_steps, nav_steps = walk_run["env_steps"], nav_run["env_steps"]
    assert pre_steps >= 2000 and nav_steps >= 2000
    for run, steps in ((tmp_path / "walk", pre_steps), (tmp_path / "nav", nav_steps)):
        assert checkpoint_steps(latest_checkpoint(run)) == steps
    # The benchmark's own path: the hierarchy's total is the pre-training's steps plus the navigator's,
    # and its curve runs the walk skill's points first, then the navigator's shifted by the pre-training.
    m = measure(tmp_path / "nav", 1, pretrain=tmp_path / "walk")
    assert m["pretrain"]["env_steps"] == pre_steps and m["env_steps"] == pre_steps + nav_steps
    first, second = total_steps_curve(tmp_path / "walk"), total_steps_curve(tmp_path / "nav")
    assert first and second and m["curve"] == first + [(s + pre_steps, r) for s, r in second]
    # A point is placed at the env steps of the update that logged it (not the update before).
    returns = [json.loads(x) for x in (tmp_path / "walk" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [s for s, _ in first] == [r["step"] for r in returns if r["tag"] == "charts/episodic_return"]
    assert all(s <= pre_steps for s, _ in first) and all(pre_steps <= s <= pre_steps + nav_steps for s, _ in m["curve"][len(first):])

    policy, norm = load_walk(tmp_path / "walk")
    held = held_commands(policy, norm, steps=5)
    assert len(held) == 8 and all(np.isfinite(r["along_speed"]) and 1 <= r["steps"] <= 5 for r in held)
    scripted = scripted_navigation(policy, norm, episodes=1, period=10)
    assert scripted["episodes"] == 1 and scripted["fell"] + scripted["timed_out"] + round(scripted["success_rate"]) == 1
