"""The side-by-side benchmark scripts' helpers on tiny budgets (seconds, not measurements).

The envs and baselines come from the optional ``bench`` extra (``pip install -e '.[bench]'``);
the tests that need them skip where it is not installed.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import common  # noqa: E402
import multiagent  # noqa: E402
import throughput  # noqa: E402
from hdppo.platform.config import validate  # noqa: E402


def test_benchmark_configs_validate():
    """Every config the benchmarks train validates against this tree's schema."""
    for name, task in multiagent.TASKS.items():
        s = multiagent.settings_for(task, quick=False)
        validate(multiagent.hdppo_task_config(name, task, s, 10_000))
        # The sampling rows take the training runs' --hdppo-set too (bf16 learners act in bf16).
        sampled = validate(multiagent.sampling_config(task, s, overrides=["layers.0.learner.precision=bf16"]))
        assert sampled.layers[0].learner.precision == "bf16" and sampled.ray.backend == "local"
    for mode in throughput.MODES:
        validate(throughput.hdppo_config_dict("Hopper-v5", mode, 8000))
    for h in throughput.HIERARCHIES:
        cfg = validate(throughput.hdppo_config_dict("Hopper-v5", "central", 8000, hierarchy=h))
        assert [layer.name for layer in cfg.layers] == ["planner", "control"]


def test_multiagent_writes_its_training_configs_for_training_ab(tmp_path):
    """--write-configs: each env's training config as YAML (what training_ab.py takes), nothing run."""
    from hdppo.platform.config import load_config

    assert multiagent.main(["--envs", "simple_spread_v3,battle_v4", "--write-configs", str(tmp_path / "cfg")]) == 0
    for name, task in multiagent.TASKS.items():
        cfg = load_config(tmp_path / "cfg" / f"multiagent_{name}.yaml")
        want = validate(multiagent.hdppo_task_config(name, task, multiagent.settings_for(task, quick=False), 100_000))
        assert cfg.model_dump() == want.model_dump()
    assert sorted(p.name for p in (tmp_path / "cfg").iterdir()) == ["multiagent_battle_v4.yaml",
                                                                   "multiagent_simple_spread_v3.yaml"]


def test_throughput_from_metrics(tmp_path):
    recs = []
    for k in range(1, 5):  # updates of 100 env steps / 300 samples, one per second
        recs += [{"step": 100 * k, "layer": "control", "tag": "perf/env_steps_per_s", "value": 100.0, "time": float(k)},
                 {"step": 100 * k, "layer": "control", "tag": "perf/samples", "value": 300.0, "time": float(k)},
                 {"step": 10 * k, "layer": "planner", "tag": "perf/env_steps_per_s", "value": 1.0, "time": float(k)}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = common.throughput_from_metrics(path, warmup=1, layer="control")
    assert out["env_steps_per_s"] == 100.0 and out["agent_steps_per_s"] == 300.0 and out["updates_timed"] == 3
    assert common.throughput_from_metrics(path, warmup=1)["layer"] == "control"  # the first layer logged


def test_raw_and_sampling_alternate_and_share_per_round():
    """The raw limit and sampling run in turns; each round's share is of the raw round before it."""
    order, raws, samps = [], iter([100.0, 200.0, 150.0]), iter([60.0, 100.0, 90.0])

    def raw():
        order.append("raw")
        return {"steps_per_s": next(raws), "procs": 2, "per_proc": [40.0, 60.0]}

    def samp():
        order.append("sampling")
        return {"env_steps_per_s": next(samps), "procs": 2}

    r, out = common.raw_and_sampling(raw, {"sampling": samp}, 3, "env_steps_per_s")
    s = out["sampling"]
    assert order == ["raw", "sampling"] * 3
    assert r["steps_per_s"] == 150.0 and s["env_steps_per_s"] == pytest.approx(83.3, abs=0.1) and r["rounds"] == 3
    assert s["share_rounds"] == [0.6, 0.5, 0.6]
    assert common.share_cell(s, 0.556) == "56% (rounds 50-60%)"
    r, out = common.raw_and_sampling(lambda: {"error": "boom"}, {"sampling": lambda: {"env_steps_per_s": 1.0}}, 2,
                                     "env_steps_per_s")
    assert r == {"error": "boom"} and out["sampling"]["env_steps_per_s"] == 1.0 and "share_rounds" not in out["sampling"]


def test_engine_equivalence_compares_per_rollout():
    import engine_equivalence as eq
    import numpy as np

    a = {f: np.zeros((6, 2)) for f in eq.FIELDS}
    b = {f: np.zeros((6, 2)) for f in eq.FIELDS}
    b["values"][4, 1] = 0.5  # a difference in the third rollout only
    out = eq.compare(a, b)
    assert [r["max_abs_diff"] for r in out["values"]] == [0.0, 0.0, 0.5]
    assert [r["rows_over_1e-3"] for r in out["values"]] == [0, 0, 1] and out["obs"][2]["rows"] == 2


def test_engine_equivalence_section_5_divergence_and_table():
    import engine_equivalence as eq

    base = {"charts/episodic_return": -100.0, "losses/value": 1.0, "losses/entropy": 2.0, "losses/approx_kl": 0.01}
    other = [dict(base), dict(base, **{"losses/entropy": 2.2}), dict(base, **{"losses/approx_kl": 0.02})]
    # KL is left out of the smooth metrics; entropy 2.2 against 2.0 is 10%
    assert eq.divergence([base] * 3, other) == pytest.approx([0.0, 0.1, 0.0])
    assert eq.divergence([base] * 3, other, ("losses/approx_kl",)) == [0.0, 0.0, 1.0]
    pend = {"updates": 3, "env": {"id": "Pendulum-v1"},
            "arms": [{"arm": "old", "updates": [base] * 3}, {"arm": "new patched", "updates": other}]}
    md = eq.render({"machine": {"timestamp_utc": "t", "cpu_model": "c", "cpu_count": 2}, "command": "x",
                    "old_commit": "abc", "pendulum": pend})
    assert "## 1." not in md and "| new patched | 0 | 0.1 | 0 | 1 | 2.0000 |" in md


def test_markdown_with_missing_and_failed_parts():
    results = {"simple_spread_v3": {"raw": {"env_steps_per_s": 100.0, "agent_steps_per_s": 300.0},
                                    "sampling": {"env_steps_per_s": 70.0, "agent_steps_per_s": 210.0},
                                    "rllib": {"error": "RuntimeError: boom"}},
               "battle_v4": {}}
    for n, e in results.items():
        e["summary"] = multiagent.summarise(n, multiagent.TASKS[n], e)
    assert results["simple_spread_v3"]["summary"]["sampling_over_raw"] == 0.7
    report = {"machine": __import__("machine").machine_info(), "command": "x", "results": results,
              "settings": {"quick": True, "iterations": 1, "warmup": 1, "raw_seconds": 1, "sample_seconds": 1,
                           "old_commit": "abc", "describe": "d", "train_batch": {"battle_v4": 1}}}
    md = multiagent.render_markdown(report)
    assert "| simple_spread_v3 | 100 | 300 | 210 | 70% | >= 60%: met |" in md and "boom" in md


def test_raw_and_sampling_limits_step_simple_spread():
    pytest.importorskip("mpe2")
    task = multiagent.TASKS["simple_spread_v3"]
    raw = multiagent.raw_pettingzoo_steps_per_s(task.module, task.kwargs, seconds=0.5, procs=1)
    assert raw["env_steps_per_s"] > 0
    assert raw["agent_steps_per_s"] == pytest.approx(3 * raw["env_steps_per_s"], rel=1e-3)  # rounded to 0.1
    s = common.PPOSettings(num_workers=1, envs_per_worker=2, train_batch=96, minibatch=32, epochs=1)
    samp = multiagent.sampling(task, s, seconds=0.5)
    assert samp["procs"] == 1 and samp["agent_steps_per_s"] > 0


def test_raw_limit_steps_battle():
    pytest.importorskip("magent2")
    task = multiagent.TASKS["battle_v4"]
    raw = multiagent.raw_pettingzoo_steps_per_s(task.module, task.kwargs, seconds=0.5, procs=1)
    assert 0 < raw["agent_steps_per_s"] <= 24 * raw["env_steps_per_s"]


def test_old_tree_imports_in_place_of_this_tree():
    """The old-commit runner's checkout wins over the editable install (here: HEAD's own tree)."""
    import old_commit

    with old_commit.old_tree("HEAD") as root:
        files = old_commit.resolved_files(root)
    assert all(str(root) in f for f in files)
    assert all(f.startswith(str(ROOT)) for f in old_commit.resolved_files(None))


def test_throughput_markdown_with_missing_parts():
    e = {"raw": {"steps_per_s": 1000.0}, "sampling": {"env_steps_per_s": 850.0}, "sb3": {"env_steps_per_s": 300.0},
         "hdppo_central": {"env_steps_per_s": 700.0}, "hier_frozen": {"env_steps_per_s": 630.0},
         "rllib": {"error": "RuntimeError: no"}}
    e["ratios"] = throughput.ratios(e)
    assert e["ratios"]["hier_frozen_over_flat"] == 0.9 and e["ratios"]["central"]["hdppo_over_sb3"] == 2.333
    report = {"machine": __import__("machine").machine_info(), "command": "x", "results": {"Hopper-v5": e},
              "settings": {"quick": False, "describe": "d", "ray_cpus": 2, "num_workers": 2, "envs_per_worker": 4,
                           "iterations": 1, "warmup": 1, "raw_seconds": 1, "sample_seconds": 1}}
    md = throughput.render_markdown(report)
    assert "| Hopper-v5 | 85% | met | 90% | met |" in md and "RuntimeError: no" in md


def test_throughput_hierarchy_is_divided_by_the_flat_runs_beside_it():
    """The hierarchy's share is of the flat runs trained in alternation with it (hier_flat), not
    of the central column measured minutes earlier; its rounds' range is shown."""
    flat_runs = iter([800.0, 600.0])
    hier_runs = iter([720.0, 570.0])
    flat, out = common.raw_and_sampling(lambda: {"env_steps_per_s": next(flat_runs)},
                                        {"hier_frozen": lambda: {"env_steps_per_s": next(hier_runs)}}, 2, "env_steps_per_s")
    e = {"raw": {"steps_per_s": 1000.0}, "hdppo_central": {"env_steps_per_s": 900.0}, "hier_flat": flat, **out}
    assert flat["env_steps_per_s"] == 700.0 and out["hier_frozen"]["share_rounds"] == [0.9, 0.95]
    e["ratios"] = throughput.ratios(e)
    assert e["ratios"]["hier_frozen_over_flat"] == round(645.0 / 700.0, 3)  # not 645 / 900
    report = {"machine": __import__("machine").machine_info(), "command": "x", "results": {"Hopper-v5": e},
              "settings": {"quick": False, "describe": "d", "ray_cpus": 2, "num_workers": 2, "envs_per_worker": 4,
                           "iterations": 1, "warmup": 1, "raw_seconds": 1, "sample_seconds": 1}}
    assert "| 92% (rounds 90-95%) | met |" in throughput.render_markdown(report)


def test_throughput_trains_the_same_run_twice_in_fresh_folders(tmp_path, monkeypatch):
    """The flat run trains once per round beside the hierarchy: each call needs its own run dir,
    since a Trainer refuses an existing one (the first real --rounds run failed on that)."""
    import hdppo.platform.trainer as trainer_mod

    dirs = []

    class FakeTrainer:
        def __init__(self, cfg, run_dir, quiet=True):
            if run_dir.exists():
                raise RuntimeError(f"run dir {run_dir} already exists")
            run_dir.mkdir(parents=True)
            dirs.append(run_dir)
            self.groups = [type("G", (), {"num_workers": 2})()]

        def train(self):
            return {"env_steps": 8000}

        def shutdown(self):
            pass

    monkeypatch.setattr(trainer_mod, "Trainer", FakeTrainer)
    monkeypatch.setattr(throughput, "throughput_from_metrics", lambda path, warmup, layer=None: {"env_steps_per_s": 1.0})
    for _ in range(2):
        assert throughput.hdppo_env_steps_per_s("Hopper-v5", "central", 1, 1, tmp_path)["env_steps_per_s"] == 1.0
    assert len(set(dirs)) == 2 and all(d.parent.parent == tmp_path for d in dirs)


def test_throughput_sampling_rows_with_more_copies_per_worker():
    """--sampling-copies: the training runs' count is the plain 'sampling' entry, others get
    their own key, ratio to raw and row in the copies table."""
    assert throughput.sampling_key(throughput.SETTINGS.envs_per_worker) == "sampling"
    assert throughput.sampling_key(8) == "sampling_x8"
    cfg = validate(throughput.hdppo_config_dict("Hopper-v5", "central", 8000, settings=dataclasses.replace(
        throughput.SETTINGS, envs_per_worker=8)))
    assert cfg.layers[0].dppo.num_envs_per_worker == 8
    e = {"raw": {"steps_per_s": 1000.0}, "sampling": {"env_steps_per_s": 700.0},
         "sampling_x8": {"env_steps_per_s": 820.0, "envs_per_worker": 8}}
    e["ratios"] = throughput.ratios(e)
    assert e["ratios"]["sampling_over_raw"] == 0.7 and e["ratios"]["sampling_x8_over_raw"] == 0.82
    report = {"machine": __import__("machine").machine_info(), "command": "x", "results": {"Hopper-v5": e},
              "settings": {"quick": False, "describe": "d", "ray_cpus": 2, "num_workers": 2, "envs_per_worker": 4,
                           "iterations": 1, "warmup": 1, "raw_seconds": 1, "sample_seconds": 1}}
    md = throughput.render_markdown(report)
    assert "| Hopper-v5 | 4 | 700 | 70% | NOT met |" in md and "| Hopper-v5 | 8 | 820 | 82% | met |" in md


def test_learner_device_times_an_update_and_writes_its_table(tmp_path):
    import learner_device

    assert learner_device.main(["--hidden", "8x8", "--batch", "64", "--minibatch", "32", "--epochs", "1",
                                "--repeats", "1", "--devices", "cpu", "--results", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "learner_device.json").read_text())
    (r,) = report["results"]
    assert r["device"] == "cpu" and r["sgd_steps"] == 2 and r["median_s"] > 0
    assert "| 8x8 | cpu (1 thread) |" in (tmp_path / "learner_device.md").read_text()
    # The MinAtar CNN, at the preset's update shape unless given.
    assert learner_device.main(["--net", "minatar", "--batch", "64", "--minibatch", "32", "--repeats", "1",
                                "--devices", "cpu", "--results", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "learner_device.json").read_text())
    (r,) = report["results"]
    assert report["settings"]["epochs"] == 4 and r["sgd_steps"] == 8 and r["hidden"] == "cnn16+128"
    assert "MinAtar-sized (10x10x4 screens" in (tmp_path / "learner_device.md").read_text()
    # battle_v4's MLP on 845 inputs, at that benchmark's update shape unless given (5 epochs).
    assert learner_device.main(["--net", "battle", "--hidden", "8x8", "--batch", "64", "--minibatch", "32",
                                "--repeats", "1", "--devices", "cpu", "--results", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "learner_device.json").read_text())
    (r,) = report["results"]
    assert report["settings"]["epochs"] == 5 and r["sgd_steps"] == 10 and r["net"] == "battle"
    assert "battle_v4-sized (845 inputs" in (tmp_path / "learner_device.md").read_text()
    # Both precisions, each row labelled, bf16 compared with fp32 on the same network; --out names the files.
    assert learner_device.main(["--hidden", "8x8", "--batch", "64", "--minibatch", "32", "--epochs", "1",
                                "--repeats", "1", "--devices", "cpu", "--precisions", "fp32,bf16",
                                "--results", str(tmp_path), "--out", "prec"]) == 0
    report = json.loads((tmp_path / "prec.json").read_text())
    assert [r["precision"] for r in report["results"]] == ["fp32", "bf16"]
    md = (tmp_path / "prec.md").read_text()
    assert "| 8x8 | cpu (1 thread) | fp32 |" in md and "| 8x8 | cpu (1 thread) | bf16 |" in md
    fp32_row = next(line for line in md.splitlines() if "| fp32 |" in line)
    bf16_row = next(line for line in md.splitlines() if "| bf16 |" in line)
    assert fp32_row.endswith("| - |") and bf16_row.rstrip(" |").endswith("x")


def test_set_encoder_cost_times_each_attention_depth_and_writes_its_table(tmp_path):
    import set_encoder_cost

    assert set_encoder_cost.main(["--blocks", "0,1", "--act-batch", "2", "--minibatch", "16", "--acts", "2",
                                  "--steps", "1", "--repeats", "1", "--results", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "set_encoder_cost.json").read_text())["rows"]
    assert [r["set_attention"] for r in rows] == [0, 1] and rows[0]["act_vs_none"] == 1.0
    assert rows[1]["params"] > rows[0]["params"] > 0 and all(r["act_ms"] > 0 and r["sgd_step_ms"] > 0 for r in rows)
    assert "| 1 | " in (tmp_path / "set_encoder_cost.md").read_text()


def test_skirmish_benchmark_scripted_table_and_wilson(tmp_path):
    """benchmarks/skirmish.py: the scripted table end to end on a few games, and its intervals."""
    import skirmish

    lo, hi = skirmish.wilson(180, 200)
    assert lo < 0.9 < hi and round(lo, 3) == 0.851 and skirmish.wilson(0, 10)[0] == 0.0
    assert skirmish.spaced(list(range(10)), 4) == [0, 3, 6, 9] and skirmish.spaced([1, 2], 4) == [1, 2]
    assert skirmish.main(["--quick", "--only", "scripted", "--games", "4", "--out", str(tmp_path / "s")]) == 0
    report = json.loads((tmp_path / "s.json").read_text())
    assert len(report["scripted"]) == 4 * 4 + 2 and all(r["games"] == 4 for r in report["scripted"])
    md = (tmp_path / "s.md").read_text()
    assert "| 3v3 | focus_kite | random |" in md and "| 3v3 | squad_focus | focus_kite |" in md
    assert "| 3v3 | focus_no_overkill | focus_kite |" in md
    with pytest.raises(SystemExit):  # an unknown opponent is refused before anything runs
        skirmish.main(["--quick", "--only", "scripted", "--also-against", "nobody", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x.json").exists()


def test_skirmish_benchmark_says_which_layers_learned():
    """A staged run's row names its scripted and frozen layers and counts only trained groups."""
    import skirmish
    from hdppo.platform.config import load_config

    cfg = load_config(ROOT / "configs" / "skirmish_hierarchy.yaml")
    assert skirmish.describe_layers(cfg) == "strategy -> squad -> control, 3 DPPO groups"
    assert skirmish.earlier_env_steps(cfg) == 0
    staged = load_config(ROOT / "configs" / "skirmish_hierarchy.yaml", ["layers.2.schedule.mode=scripted",
                                                                       "layers.0.schedule.mode=frozen"])
    assert skirmish.describe_layers(staged) == "strategy (frozen) -> squad -> control (scripted), 1 DPPO group"


def test_where_time_goes_charges_unowned_time_to_its_callers():
    import where_time_goes as W

    site = str(ROOT / ".venv/lib/python3.11/site-packages")
    env_f = (f"{site}/mpe2/core.py", 1, "step")
    samp_f = (str(ROOT / "hierarchies/engine.py"), 1, "step")
    learn_f = (str(ROOT / "policies/ppo_update.py"), 1, "minibatch_loss")
    np_f = (f"{site}/numpy/_core/fromnumeric.py", 1, "sum")
    builtin = ("~", 0, "<method 'reduce' of 'numpy.ufunc' objects>")
    backward = ("~", 0, "<method 'run_backward'>")
    torch_f = (f"{site}/torch/autograd/__init__.py", 1, "backward")
    assert [W.owner_of(f[0]) for f in (env_f, samp_f, learn_f, np_f, builtin)] == ["env", "sampler", "learner", None, None]
    stats = {  # func: (cc, nc, tottime, cumtime, {caller: (cc, nc, tottime under that caller, cumtime)})
        env_f: (1, 1, 2.0, 3.0, {}), samp_f: (1, 1, 1.0, 2.0, {}), learn_f: (1, 1, 0.5, 4.5, {}),
        np_f: (4, 4, 0.4, 1.2, {env_f: (3, 3, 0.3, 0.9), samp_f: (1, 1, 0.1, 0.3)}),
        builtin: (4, 4, 0.8, 0.8, {np_f: (4, 4, 0.8, 0.8)}),            # two levels below its owners
        torch_f: (1, 1, 1.0, 4.0, {learn_f: (1, 1, 1.0, 4.0)}),
        backward: (1, 1, 3.0, 3.0, {torch_f: (1, 1, 3.0, 3.0)}),
    }
    net = (str(ROOT / "policies/networks.py"), 1, "act")  # the sampler's forward is inference, the learner's is not
    stats[net] = (2, 2, 1.0, 1.0, {samp_f: (1, 1, 0.6, 0.6), learn_f: (1, 1, 0.4, 0.4)})
    sec = W.charge(stats)
    assert sec["policy (inference)"] == pytest.approx(0.6)
    assert sec["env"] == pytest.approx(2.0 + 0.4 * 0.75 + 0.8 * 0.75)
    assert sec["sampler"] == pytest.approx(1.0 + 0.4 * 0.25 + 0.8 * 0.25)
    assert sec["learner"] == pytest.approx(0.5 + 1.0 + 3.0 + 0.4)
    assert sum(sec.values()) == pytest.approx(sum(v[2] for v in stats.values()))  # nothing lost or counted twice


def test_engine_ab_arm_settings_and_refuses_an_existing_run_dir(tmp_path):
    import engine_ab

    cfg = engine_ab.arm_config(7, 1_000_000)
    assert cfg["train"]["seed"] == 7 and cfg["train"]["total_env_steps"] == 1_000_000
    assert cfg["ray"] == {"backend": "local"} and "description" not in cfg
    assert engine_ab.budget_tag(1_000_000) == "1m" and engine_ab.budget_tag(1_500_000) == "1500k"
    env = engine_ab.patched_env(tmp_path)
    assert env["HDPPO_REPLAY_OWN_NOISE"] == "1" and env["HDPPO_REPLAY_OBS_NORMALIZER"].endswith("normalizers.py")
    assert set(engine_ab.patched_env(tmp_path, engine_ab.PATCHES["lateboot"])) == {"HDPPO_REPLAY_OWN_NOISE",
                                                                                   "HDPPO_REPLAY_LATE_BOOT"}
    with pytest.raises(SystemExit, match="exists"):
        engine_ab.main(["--arm", "new", "--seed", "1", "--run-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="--tag"):  # a changed config must not pass for the plain arm
        engine_ab.main(["--arm", "new", "--seed", "1", "--set", "layers.0.ppo.lr=1e-4", "--run-dir", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
    assert engine_ab.run_name("new", 3, 3_000_000) == "ant_ab_new_seed3_3m"
    assert engine_ab.run_name("new", 3, 3_000_000, "lr1e-4") == "ant_ab_new_lr1e-4_seed3_3m"


def test_sampling_ab_runs_the_tree_asked_for_and_renders_its_ratios():
    """sampling_ab: a measurement with the old tree imports it (here HEAD's own), the current one
    this tree; the table shows each round and the median ratio."""
    import old_commit
    import sampling_ab

    with old_commit.old_tree("HEAD") as root:
        old = sampling_ab.measure("hopper", 0.3, root)
    new = sampling_ab.measure("hopper", 0.3, None)
    assert str(root) in old["engine"] and old["engine"] != new["engine"] and new["engine"].startswith(str(ROOT))
    assert old["env_steps"] > 0 and new["per_cpu_s"] > 0
    report = {"machine": __import__("machine").machine_info(), "command": "x", "base": "abc", "rounds": 2,
              "seconds": 1.0, "results": {"hopper": {"base": [old, old], "current": [new, new],
                                                     "ratios": [1.5, 2.5], "median_ratio": 2.0}}}
    md = sampling_ab.render(report)
    assert "| hopper | **2.000** | 1.500, 2.500 |" in md and md.count("| hopper | ") == 3


def test_train_preset_keeps_the_presets_own_budget_unless_given_one(tmp_path):
    """``common.train_preset(config, None, ...)`` trains for the preset's ``train.total_env_steps``
    (what ``benchmarks/swarm.py`` does by default); a number overrides it."""
    import yaml

    from hdppo.platform.config import load_config

    data = load_config(ROOT / "configs" / "swarm_flat.yaml").model_dump(mode="json")
    data["train"]["total_env_steps"] = 600
    preset = tmp_path / "tiny.yaml"
    preset.write_text(yaml.safe_dump(data))
    own = common.train_preset(preset, None, tmp_path / "own", ["ray.backend=local"], quick=True)
    given = common.train_preset(preset, 200, tmp_path / "given", ["ray.backend=local"], quick=True)
    assert 600 <= own["env_steps"] < 1200 and 200 <= given["env_steps"] < 600, (own["env_steps"], given["env_steps"])


def test_skirmish_benchmark_trains_and_evaluates_against_each_opponent(tmp_path):
    """A smoke run of the three-layer row: trained, then evaluated against focus_kite and the
    opponents of --also-against, under the overrides of --eval-set (here: the control layer
    played by its teacher), each named in the report."""
    import skirmish

    out = tmp_path / "r"
    assert skirmish.main(["--quick", "--only", "three_layers", "--runs-dir", str(tmp_path / "runs"), "--games", "4",
                          "--no-scripted", "--also-against", "focus_no_overkill",
                          "--eval-set", "layers.2.schedule.mode=scripted", "--out", str(out)]) == 0
    report = json.loads(out.with_suffix(".json").read_text())
    evals = report["trained"]["three_layers"]["evaluations"]
    assert [(e["scenario"], e["opponent"]) for e in evals] == [
        (skirmish.TRAIN_SCENARIO, "focus_kite"), (skirmish.TRAIN_SCENARIO, "focus_no_overkill"),
        (skirmish.TRANSFER_SCENARIO, "focus_kite")]
    assert all(e["games"] == 4 for e in evals)
    md = out.with_suffix(".md").read_text()
    assert "control (scripted)" in md and "| focus_no_overkill |" in md and "(other opponent)" in md


def test_fab_benchmark_with_common_random_numbers_and_a_given_assignment(tmp_path):
    """benchmarks/fab.py --crn --assignment on a half-day fab: the rules and the given per-group
    map are paired per seed (a map that names no group plays cr, so its difference is exactly 0),
    and a group the fab does not have is refused by name."""
    import fab as fab_bench

    out = tmp_path / "fab"
    fab_bench.main(["--seeds", "2", "--days", "hvlm_mini=0.5", "--crn", "--assignment", "all_cr=",
                    "--assignment", "litho_edd=Litho_FE_98:edd", "--out", str(out)])
    report = json.loads(out.with_suffix(".json").read_text())
    block = report["scenarios"]["hvlm_mini"]
    assert block["crn"] and block["best_rule"] in ("fifo", "spt", "edd", "cr")
    same = block["assignments"]["all_cr"]["paired_tardiness_diff_h"]
    cr_rows = block["rule_runs"]["cr"]
    if block["best_rule"] == "cr":
        assert same["mean"] == pytest.approx(0.0, abs=1e-9)
    assert [r["mean_tardiness_h"] for r in block["assignments"]["all_cr"]["runs"]] == \
        pytest.approx([r["mean_tardiness_h"] for r in cr_rows])
    md = out.with_suffix(".md").read_text()
    assert "common random numbers" in md and "litho_edd (given per-group rules)" in md
    with pytest.raises(SystemExit, match="NoSuchGroup"):
        fab_bench.main(["--seeds", "1", "--days", "hvlm_mini=0.5", "--assignment", "x=NoSuchGroup:edd",
                        "--out", str(tmp_path / "bad")])


def test_fab_benchmark_runs_the_rules_with_setup_avoidance(tmp_path):
    """--setup-avoidance reaches the simulator of every rule (their runs change on a fab with setups)
    and is named in the report."""
    import fab as fab_bench

    reports = {}
    for flag in ([], ["--setup-avoidance"]):
        out = tmp_path / f"fab{len(flag)}"
        fab_bench.main(["--scenarios", "hvlm", "--seeds", "1", "--days", "hvlm=1", "--crn", *flag, "--out", str(out)])
        reports[bool(flag)] = json.loads(out.with_suffix(".json").read_text())["scenarios"]["hvlm"]
        assert reports[bool(flag)]["setup_avoidance"] is bool(flag)
    assert "setup avoidance" in (tmp_path / "fab1.md").read_text()
    assert reports[True]["rule_runs"]["cr"] != reports[False]["rule_runs"]["cr"]


def test_fab_levers_pairs_every_variant_with_cr(tmp_path, monkeypatch):
    """benchmarks/fab_levers.py on 2 seeds: every lever's row, each paired with cr seed by seed
    (its paired difference is its tardiness minus cr's on the same seed; cr's own exactly 0, cr
    replayed on the same seeds the same run by run), and a lever that changes the run (no batch
    wait) a non-zero one."""
    import fab_levers

    from hdppo.envs.builtin.fab import build_model, get_scenario

    per_seed = []                                                # (spec, seeds, runs) as main ran them
    real_run = fab_levers.run

    def spy(spec, model, seeds):
        out = real_run(spec, model, seeds)
        per_seed.append((spec, list(seeds), [r["mean_tardiness_h"] for r in out]))
        return out

    monkeypatch.setattr(fab_levers, "run", spy)
    fab_levers.main(["--seeds", "2", "--out", str(tmp_path / "levers")])
    report = json.loads((tmp_path / "levers.json").read_text())
    rows = report["rows"]
    assert set(rows) == set(fab_levers.variants())
    assert [spec for spec, _, _ in per_seed] == list(fab_levers.variants().values())
    assert all(seeds == [10000, 10001] for _, seeds, _ in per_seed)
    tard = dict(zip(fab_levers.variants(), (t for _, _, t in per_seed)))
    cr_mean = rows["cr"]["mean_tardiness_h"]["mean"]
    for name, row in rows.items():
        paired = row["paired_tardiness_diff_h"]
        assert paired["n"] == 2, name
        assert paired["mean"] == pytest.approx(row["mean_tardiness_h"]["mean"] - cr_mean, abs=1e-9), name
        assert paired == pytest.approx(common.stat([a - b for a, b in zip(tard[name], tard["cr"])]), nan_ok=True), name
    assert rows["cr"]["paired_tardiness_diff_h"]["mean"] == 0.0
    model = build_model(get_scenario("hvlm_mini"))        # cr replayed: the same tardiness seed by seed
    again = [r["mean_tardiness_h"] for r in real_run({}, model, [10000, 10001])]
    assert again == tard["cr"] == [r["mean_tardiness_h"] for r in real_run({}, model, [10000, 10001])]
    assert rows["cr, batch wait 0 min (240)"]["paired_tardiness_diff_h"]["mean"] != 0.0
    assert rows["cr, release x0.8 from day 0"]["released"]["mean"] < rows["cr"]["released"]["mean"]
    assert "| minimum slack |" in (tmp_path / "levers.md").read_text()


def test_fab_levers_conwip_caps_the_wip_and_keeps_the_order_due_dates():
    """The CONWIP lever: with a cap no run reaches it is cr itself; with a tight one the WIP never
    passes the cap once it is under it, lots wait in the backlog, and a lot released late keeps
    the due date of its order (so holding it back cannot hide its lateness)."""
    import fab_levers

    from hdppo.envs.builtin.fab import build_model, get_scenario

    model = build_model(get_scenario("hvlm_mini", days=3))
    cr = fab_levers.run({}, model, [10000])[0]
    loose = fab_levers.run({"wip_cap": 100.0}, model, [10000])[0]
    assert loose["backlog_end"] == 0.0
    assert {k: v for k, v in loose.items() if k != "backlog_end"} == pytest.approx(cr, rel=0, abs=0, nan_ok=True)
    Sim = fab_levers._conwip_class(fab_levers._sim_class())
    sim = Sim(model, seed=fab_levers.sim_seed(10000), default_rule="cr", crn=True, wip_cap=0.8)
    cap, under, ordered = sim.wip_cap, False, {}
    real_new = sim._new_lot

    def new_lot(part, prio, pieces, due, start, step):
        i = real_new(part, prio, pieces, due, start, step)
        ordered[i] = (part, due, start)
        return i

    sim._new_lot = new_lot
    while sim.now < model.horizon:
        assert sim.advance(until=sim.now + 30.0) is None  # no agent groups: the rule takes every decision
        under = under or sim.n_wip <= cap  # the run starts above the cap, at the initial WIP
        assert not under or sim.n_wip <= cap
    summary = sim.summary()
    assert under and summary["backlog_end"] > 0 and summary["released"] < cr["released"]
    offset = {o["part"]: o["due_offset"] * model.due_scale for o in model.orders}
    released = [(part, due, start) for part, due, start in ordered.values() if start > 0]
    assert released and any(due - start < offset[part] - 1.0 for part, due, start in released)


def test_fab_speed_times_the_one_stream_the_keyed_draws_and_the_env(tmp_path):
    import fab_speed

    fab_speed.main(["--scenarios", "hvlm_mini", "--days", "hvlm_mini=0.3", "--out", str(tmp_path / "speed")])
    rows = json.loads((tmp_path / "speed.json").read_text())["rows"]
    assert [r["mode"] for r in rows] == ["rule", "rule, crn", "env"]
    assert all(r["decisions"] > 0 and r["decisions_per_s"] > 0 for r in rows)


def test_learner_device_times_an_older_commit_beside_this_tree(tmp_path):
    """--base: each timing in a fresh interpreter, the old tree first on PYTHONPATH or this one,
    checked by the learner file each ran (old_commit.run_child)."""
    import subprocess

    import learner_device

    head = subprocess.run(["git", "-C", str(Path(learner_device.__file__).parents[1]), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert learner_device.main(["--hidden", "8x8", "--batch", "64", "--minibatch", "32", "--epochs", "1",
                                "--repeats", "1", "--base", head.stdout.strip(), "--rounds", "1",
                                "--results", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "learner_device.json").read_text())
    (ab,) = report["ab"]
    assert len(ab["old_s"]) == len(ab["new_s"]) == len(ab["speedups"]) == 1 and ab["old_s"][0] > 0
    assert "| mlp | 8x8 | fp32 |" in (tmp_path / "learner_device.md").read_text()


def test_training_ab_trains_an_older_commit_beside_this_tree(tmp_path, monkeypatch):
    """Two short `hdppo train` runs (the base is HEAD: the mechanism, not a speed), their rates
    read from the runs' metrics and the table written."""
    import subprocess

    import common
    import training_ab
    import yaml
    from conftest import tiny_config

    head = subprocess.run(["git", "-C", str(Path(training_ab.__file__).parents[1]), "rev-parse", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    monkeypatch.setattr(common, "HERE", tmp_path)  # write_report writes under HERE/results
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config()))  # ray.backend local: no Ray to start in either run
    assert training_ab.main([str(cfg), "--base", head.stdout.strip(), "--steps", "2048", "--rounds", "1",
                             "--warmup", "1", "--out", "ab"]) == 0
    report = json.loads((tmp_path / "results" / "ab.json").read_text())
    assert len(report["old"]) == len(report["new"]) == 1 and report["new"][0]["env_steps_per_s"] > 0
    assert "| 1 |" in (tmp_path / "results" / "ab.md").read_text()


def test_multiagent_training_rounds_alternate_and_average_the_ratios(tmp_path, monkeypatch):
    """--train-rounds: hdppo, RLlib, hdppo, RLlib, ... in that order; the ratio is the mean of the
    rounds' own ratios (not the ratio of mean rates), each round's listed in the table."""
    import ray
    import rllib_ppo

    order = []
    hdppo_rates, rllib_rates = iter([300.0, 200.0, 330.0]), iter([100.0, 50.0, 110.0])

    def fake_hdppo(name, task, s, iterations, warmup, tmp, raw, round_=1, **kw):
        order.append("hdppo")
        run_dir = tmp / f"{name}-hdppo-{round_}"
        run_dir.mkdir()  # each round in a folder of its own: hdppo train refuses an existing one
        return {"env_steps_per_s": next(hdppo_rates), "sample_s_mean": 0.1, "update_s_mean": 0.1}

    def fake_rllib(*a, **kw):
        order.append("rllib")
        return {"env_steps_per_s": next(rllib_rates)}

    monkeypatch.setattr(multiagent, "hdppo_training", fake_hdppo)
    monkeypatch.setattr(rllib_ppo, "rllib_pettingzoo_steps_per_s", fake_rllib)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: None)  # the test session's own Ray stays as it is
    monkeypatch.setattr(ray, "shutdown", lambda *a, **kw: None)
    monkeypatch.setattr(common, "HERE", tmp_path)  # write_report writes under HERE / "results"
    (tmp_path / "results").mkdir()
    assert multiagent.main(["--envs", "simple_spread_v3", "--skip", "raw,sampling,old",
                            "--train-rounds", "3", "--out", "rounds"]) == 0
    report = json.loads((tmp_path / "results" / "rounds.json").read_text())
    md = (tmp_path / "results" / "rounds.md").read_text()
    assert order == ["hdppo", "rllib"] * 3
    e = report["results"]["simple_spread_v3"]
    assert e["summary"]["hdppo_over_rllib_rounds"] == [3.0, 4.0, 3.0]
    assert e["summary"]["hdppo_over_rllib"] == pytest.approx(10 / 3)  # not 830 / 260 = 3.19
    assert e["hdppo"]["rounds"] == [300.0, 200.0, 330.0] and e["rllib"]["env_steps_per_s"] == pytest.approx(260 / 3)
    assert "3.33x (mean of 3 rounds: 3.00x, 4.00x, 3.00x)" in md


def test_throughput_training_rounds_alternate_the_frameworks(tmp_path, monkeypatch):
    """--train-rounds on throughput.py: per round SB3 (before Ray), then RLlib and each hdppo mode on
    a Ray started for the round; each hdppo/baseline ratio the mean of the rounds' own ratios."""
    import ray
    import rllib_ppo
    import sb3_ppo

    order, rates = [], {"sb3": iter([100.0, 80.0]), "rllib": iter([50.0, 40.0]), "pipeline": iter([200.0, 200.0])}
    ray_up = []

    def fake(name):
        def run(*a, **kw):
            order.append(name)
            assert bool(ray_up) == (name != "sb3")  # SB3 with no Ray of ours alive, the others on one
            return {"env_steps_per_s": next(rates[name])}
        return run

    monkeypatch.setattr(sb3_ppo, "sb3_env_steps_per_s", fake("sb3"))
    monkeypatch.setattr(rllib_ppo, "rllib_env_steps_per_s", fake("rllib"))
    monkeypatch.setattr(throughput, "hdppo_env_steps_per_s", lambda env_id, mode, *a, **kw: fake(mode)())
    monkeypatch.setattr(ray, "is_initialized", lambda: bool(ray_up))
    monkeypatch.setattr(ray, "init", lambda *a, **kw: ray_up.append(1))
    monkeypatch.setattr(ray, "shutdown", lambda *a, **kw: ray_up.clear())
    monkeypatch.setattr(common, "HERE", tmp_path)
    (tmp_path / "results").mkdir()
    assert throughput.main(["--envs", "Hopper-v5", "--skip", "raw,sampling,central,soft,dppo,hier_frozen",
                            "--train-rounds", "2", "--out", "rounds"]) == 0
    assert order == ["sb3", "rllib", "pipeline"] * 2
    r = json.loads((tmp_path / "results" / "rounds.json").read_text())["results"]["Hopper-v5"]["ratios"]["pipeline"]
    assert r["hdppo_over_rllib_rounds"] == [4.0, 5.0] and r["hdppo_over_rllib"] == 4.5
    assert r["hdppo_over_sb3_rounds"] == [2.0, 2.5] and r["hdppo_over_sb3"] == 2.25
    assert "4.50x (mean of 2 rounds: 4.00x, 5.00x)" in (tmp_path / "results" / "rounds.md").read_text()


def test_recorded_command_line_is_quoted_for_a_shell():
    """An empty argument (``--sampling-copies ''``) and one with a space survive a copy-paste."""
    line = common.command_line(["--sampling-copies", "", "--hdppo-set", "a=b c"])
    assert line.endswith("--sampling-copies '' --hdppo-set 'a=b c'")


def test_where_time_goes_charges_every_learner_module_to_the_learner():
    """The written-out MLP gradient is the learner's work, as autograd's loss is (it was 'other')."""
    import where_time_goes as W

    for module in ("platform/learner.py", "policies/ppo_update.py", "policies/ppo_loss.py", "policies/mlp_gradients.py"):
        assert W.owner_of(str(ROOT / module)) == "learner", module


def test_fab_benchmark_writes_a_trained_runs_timeline_and_checks_its_arguments_first(tmp_path):
    """--tb writes the first seed's WIP/queue/tardiness timeline of each --policy run beside each
    rule's (it wrote the rules' only); a run folder that is not a fab run, --seeds 0 and a --days for
    a scenario not run are refused by name before any rule runs."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from hdppo.platform.cli import main as hdppo

    import fab as fab_bench

    run = tmp_path / "run"
    assert hdppo(["train", str(ROOT / "configs" / "fab_flat.yaml"), "--run-dir", str(run), "--set", "ray.backend=local",
                  "--set", "env.kwargs.days=0.25", "--set", "train.total_env_steps=256", "--set", "train.eval_episodes=0",
                  "--set", "layers.0.dppo.train_batch_size=128", "--set", "layers.0.ppo.minibatch_size=64",
                  "--set", "layers.0.dppo.num_workers=1", "--set", "train.checkpoint_every=1"]) == 0
    out, tb = tmp_path / "fab", tmp_path / "tb"
    assert fab_bench.main(["--seeds", "2", "--days", "hvlm_mini=0.25", "--policy", f"mine={run}", "--tb", str(tb),
                           "--out", str(out)]) == 0
    acc = EventAccumulator(str(tb / "hvlm_mini" / "mine")).Reload()
    wip = acc.Scalars("fab/wip")
    assert len(wip) >= 5 and wip[-1].step == 6   # hourly over a quarter day
    assert "fab/wip" in EventAccumulator(str(tb / "hvlm_mini" / "cr")).Reload().Tags()["scalars"]
    report = json.loads(out.with_suffix(".json").read_text())
    assert all("history" not in r for r in report["scenarios"]["hvlm_mini"]["verdicts"]["mine"]["runs"])
    for bad, says in ((["--policy", f"js={ROOT / 'configs'}"], "no config.yaml"), (["--seeds", "0"], "at least 1"),
                      (["--days", "hvlm=1"], "not among --scenarios"), (["--days", "2"], "SCENARIO=DAYS")):
        with pytest.raises(SystemExit, match=says):
            fab_bench.main([*bad, "--out", str(tmp_path / "never")])
    assert not (tmp_path / "never.json").exists()
