"""benchmarks/learning_seeds.py: a target is met over seeds only when the whole interval clears it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import learning_seeds  # noqa: E402


def runs(*means: float) -> list[dict]:
    return [{"name": f"s{i}", "return_mean": m, "return_std": 1.0} for i, m in enumerate(means)]


def test_verdicts_follow_the_interval_not_the_mean():
    assert learning_seeds.summarise(runs(3000, 3100, 2900), 2500)["verdict"] == "met"
    assert learning_seeds.summarise(runs(2000, 2100, 1900), 2500)["verdict"] == "missed"
    noisy = learning_seeds.summarise(runs(1512, 2276, 4181), 2500)
    assert noisy["mean_at_target"] and noisy["verdict"].startswith("within noise")
    assert noisy["runs_at_target"] == 1
    assert noisy["mean"] == pytest.approx((1512 + 2276 + 4181) / 3)
    assert noisy["std_over_runs"] > 1000
    assert learning_seeds.summarise(runs(3000), 2500)["verdict"] == "one run: cannot tell"


def test_writes_the_table_and_names_a_missing_run(tmp_path):
    for i, m in enumerate((2600.0, 2800.0)):
        (tmp_path / f"learning_r{i}.json").write_text(json.dumps(
            {"name": f"r{i}", "config_name": "ant", "config": {"train": {"seed": i}}, "env_steps": 3_000_000,
             "return_mean": m, "return_std": 50.0, "episodes": 50}))
    assert learning_seeds.main(["r0", "r1", "--title", "T", "--key", "k", "--target", "2500",
                                "--results", str(tmp_path)]) == 0
    md = (tmp_path / "learning_seeds_k.md").read_text()
    assert "| r1 | ant | 1 | 3,000,000 | 2800.0 ± 50.0 | 50 |" in md and "Mean over runs: **2700.0" in md
    assert json.loads((tmp_path / "learning_seeds_k.json").read_text())["summary"]["runs"] == 2
    with pytest.raises(SystemExit, match="learning_missing.json does not exist"):
        learning_seeds.main(["missing", "--title", "T", "--key", "k", "--results", str(tmp_path)])
