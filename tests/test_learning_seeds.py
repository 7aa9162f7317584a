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


def test_permutation_test_is_exact_on_small_arms():
    # 3 vs 3, fully separated: of the 20 splits only the observed one and its mirror are as extreme
    assert learning_seeds.permutation_p([10, 11, 12], [1, 2, 3]) == pytest.approx(2 / 20)
    # identical arms: every split is at least as extreme as a zero difference
    assert learning_seeds.permutation_p([5, 5], [5, 5]) == 1.0
    # beyond max_splits it samples splits and stays close to the exact value
    exact = learning_seeds.permutation_p([3, 4, 8, 9, 10], [1, 2, 5, 6, 7])
    assert learning_seeds.permutation_p([3, 4, 8, 9, 10], [1, 2, 5, 6, 7], max_splits=100) == pytest.approx(exact, abs=0.15)


def test_versus_compares_two_arms(tmp_path):
    for name, m in (("a0", 3000.0), ("a1", 3200.0), ("b0", 2000.0), ("b1", 2100.0)):
        (tmp_path / f"learning_{name}.json").write_text(json.dumps(
            {"name": name, "config_name": "ant", "config": {"train": {"seed": 1}}, "env_steps": 1_000_000,
             "return_mean": m, "return_std": 10.0, "episodes": 50}))
    assert learning_seeds.main(["a0", "a1", "--title", "T", "--key", "v", "--results", str(tmp_path),
                                "--versus", "b0", "b1"]) == 0
    report = json.loads((tmp_path / "learning_seeds_v.json").read_text())
    assert report["versus"]["difference"] == pytest.approx(1050.0) and report["versus"]["names"] == ["b0", "b1"]
    assert report["versus"]["permutation_p_two_sided"] == pytest.approx(2 / 6)
    assert "**+1050.0**" in (tmp_path / "learning_seeds_v.md").read_text()
