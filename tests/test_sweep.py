"""hdppo sweep: grid expansion and validation (no Ray), ranking, and a real sweep on Ray Tune."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.sweep import (check_layer, check_metric, expand_grid, parse_grid, plan_trials, rank, split_values,
                                  sweep, trial_budget, trial_bundles)


def write_config(tmp_path, **over):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(tiny_config(**over)))  # JSON is YAML
    return path


# ----------------------------------------------------------------------------- grid, no Ray

def test_values_split_on_top_level_commas_and_parse_as_yaml():
    assert split_values("1e-4, 3e-4") == ["1e-4", "3e-4"]
    assert split_values("[64,64],[32]") == ["[64,64]", "[32]"]
    grid = parse_grid(["layers.0.ppo.lr=0.001,0.01", "layers.0.policy.hidden=[64,64],[32]", "train.seed=1"])
    assert grid == {"layers.0.ppo.lr": [0.001, 0.01], "layers.0.policy.hidden": [[64, 64], [32]], "train.seed": [1]}


def test_grid_is_the_cartesian_product_first_key_slowest():
    points = expand_grid({"a": [1, 2], "b": ["x", "y", "z"]})
    assert len(points) == 6
    assert points[:3] == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"}]


def test_plan_validates_each_point_and_seeds_each_sample(tmp_path):
    path = write_config(tmp_path)
    base, trials = plan_trials(path, ["layers.control.ppo.lr=1e-4,3e-4", "layers.0.ppo.num_epochs=1,3"], samples=2,
                               overrides=["train.seed=10"])
    assert base.train.seed == 10 and len(trials) == 8
    assert len({t["name"] for t in trials}) == 8
    first = trials[0]
    # YAML 1.1 reads 1e-4 as a string; the params are the validated values.
    assert first["params"] == {"layers.control.ppo.lr": 1e-4, "layers.0.ppo.num_epochs": 1}
    assert first["name"] == "00_lr=0.0001_num_epochs=1_s0"
    assert [t["seed"] for t in trials[:2]] == [10, 11]
    assert [t["config"]["train"]["seed"] for t in trials[:2]] == [10, 11]
    last = validate(trials[-1]["config"])
    assert last.layers[0].ppo.lr == 3e-4 and last.layers[0].ppo.num_epochs == 3


@pytest.mark.parametrize("grid, samples, match", [
    ([], 1, "needs at least one --grid"),
    (["layers.0.ppo.lr"], 1, "expected KEY=V1,V2"),
    (["layers.0.ppo.lrr=1e-4,3e-4"], 1, r"layers\[0\].ppo.lrr: unknown key. Did you mean 'lr'"),
    (["layers.0.ppo.lr=1e-4,-1"], 1, r"--grid point layers.0.ppo.lr=-1 is invalid: layers\[0\].ppo.lr"),
    (["layers.3.ppo.lr=1e-4"], 1, "no list entry '3'"),
    (["layers.0.ppo.lr=1e-4,1e-4"], 1, "a value is repeated"),
    (["layers.0.ppo.lr=1e-4", "layers.0.ppo.lr=3e-4"], 1, "given twice"),
    (["ray.num_cpus=1,2"], 1, "shared by every trial"),
    (["layers.0.ppo.lr=1e-4"], 0, "--samples 0"),
    # point seed 0's second sample is point seed 1's first: one run trained twice, counted as two
    (["train.seed=0,1"], 2, r"trials 01_seed=0_s1 and 02_seed=1_s0 would train the same config \(train.seed 1\)"),
])
def test_bad_grids_are_refused_before_anything_runs(tmp_path, grid, samples, match):
    with pytest.raises(ConfigError, match=match):
        plan_trials(write_config(tmp_path), grid, samples)


def test_metric_and_layer_checks(tmp_path):
    check_metric(M.CHART_EPISODIC_RETURN)
    check_metric(M.EVAL_RETURN_MEAN)
    check_metric("charts/commands/2")
    check_metric("charts/commands/1_2")  # a multidiscrete command: component 1, choice 2
    check_metric(f"{M.DIAG_OBS_DIVERGENCE}/max")
    check_metric(f"{M.PERF_WORKER_SAMPLES}/3")
    check_metric(M.DIAG_GRAD_COSINE)
    # An env's episode metrics (env.episode_metrics), as train.best_by takes them: they were refused.
    check_metric(f"{M.EPISODE_INFO}/win")
    check_metric(f"{M.EVAL_EPISODE_INFO}/makespan_over_lb")
    for bad in (M.IMG_STATE_COVERAGE, M.DIAG_OBS_DIVERGENCE, "charts/commands/x", "charts/commands/1_", "episode/",
                "episode/a/b"):
        with pytest.raises(ConfigError):
            check_metric(bad)
    with pytest.raises(ConfigError, match="Did you mean 'charts/episodic_return'"):
        check_metric("charts/episode_return")
    base, _ = plan_trials(write_config(tmp_path), ["train.seed=1"])
    assert check_layer(base, None) == "control"
    with pytest.raises(ConfigError, match="no such layer; its layers are control"):
        check_layer(base, "strategy")


def test_cli_refuses_bad_input_with_one_paragraph_and_no_sweep_dir(tmp_path):
    path = write_config(tmp_path)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for args, match in [(["--grid", "layers.0.ppo.lrr=1,2"], "Did you mean 'lr'"),
                        (["--grid", "layers.0.ppo.lr=1e-4", "--metric", "charts/nope"], "not a metric hdppo logs"),
                        (["--grid", "layers.0.ppo.lr=1e-4", "--samples", "0"], "--samples 0")]:
        out = subprocess.run([sys.executable, "-m", "hdppo.platform.cli", "sweep", str(path), *args, "--sweep-dir",
                              str(tmp_path / "sweep")], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr and match in " ".join(out.stderr.split()), out.stderr
        assert not (tmp_path / "sweep").exists()


def test_sweep_and_ablate_refuse_a_file_as_their_folder(tmp_path, capsys):
    from hdppo.platform.cli import main

    path = write_config(tmp_path)
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    for args, flag, why in [(["sweep", str(path), "--grid", "layers.0.ppo.lr=1e-4", "--sweep-dir", str(afile)],
                             "--sweep-dir", "is a file, not a folder"),
                            (["sweep", str(path), "--grid", "layers.0.ppo.lr=1e-4", "--sweep-dir", str(afile / "sub")],
                             "--sweep-dir", "the folder cannot be created"),
                            (["ablate", str(path), "--workers", "1", "--out", str(afile)], "--out",
                             "is a file, not a folder")]:
        assert main(args) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"error: {flag} {afile}" in err and why in err and "Traceback" not in err, err
    assert afile.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["afile.txt", "c.yaml"]


def test_sweep_exits_1_when_some_trials_failed(tmp_path, monkeypatch, capsys):
    import hdppo.platform.sweep as sweep_module
    from hdppo.platform.cli import main

    rows = [{"trial": "00_ok", "error": None}, {"trial": "01_bad", "error": "ConfigError: no module"}]
    monkeypatch.setattr(sweep_module, "sweep", lambda *a, **k: (tmp_path / "sweep", "control", rows))
    monkeypatch.setattr(sweep_module, "to_rich", lambda *a, **k: "the table")
    assert main(["sweep", str(write_config(tmp_path)), "--grid", "layers.0.ppo.lr=1e-4,1"]) == 1
    out = capsys.readouterr().out
    assert "the table" in out and "[hdppo] failed: 01_bad: ConfigError: no module" in out
    rows[1]["error"] = None
    assert main(["sweep", str(write_config(tmp_path)), "--grid", "layers.0.ppo.lr=1e-4,1"]) == 0


# ----------------------------------------------------------------------------- resources and ranking

def test_trial_bundles_are_what_the_trainer_declares():
    cfg = validate(tiny_config(layers=[{"dppo": {"num_workers": 4, "train_batch_size": 256},
                                        "ppo": {"minibatch_size": 64}}], ray={"backend": "ray"}))
    assert trial_bundles(cfg, 1.0) == [{"CPU": 0.5}, {"CPU": 0.5}]       # 1 worker (capped) + the learner
    assert trial_bundles(cfg, 8.0) == [{"CPU": 1.0}] * 5                 # 4 workers + the learner, 1 CPU each
    assert sum(b["CPU"] for b in trial_bundles(cfg, 3.0)) <= 3.0
    assert trial_bundles(validate(tiny_config()), 1.5) == []  # local backend: all in the trial's own process
    assert trial_budget(2, 2, None) == (2, 1.0)   # two trials on 2 CPUs: one CPU each, both at once
    assert trial_budget(2, 6, None) == (2, 1.0)
    assert trial_budget(2, 6, 3) == (3, 0.666)
    with pytest.raises(ConfigError, match="--max-concurrent 0"):
        trial_budget(2, 2, 0)


def test_rank_best_first_missing_last():
    rows = [{"trial": "a", "final": 10.0}, {"trial": "b", "final": None}, {"trial": "c", "final": 30.0},
            {"trial": "d", "final": float("nan")}, {"trial": "e", "final": 20.0}]
    assert [(r["trial"], r["rank"]) for r in rank(rows, "max")] == [("c", 1), ("e", 2), ("a", 3), ("b", None), ("d", None)]
    assert [r["trial"] for r in rank(rows, "min")][:3] == ["a", "e", "c"]
    with pytest.raises(ConfigError, match="--mode"):
        rank(rows, "best")


# ----------------------------------------------------------------------------- a real sweep

def test_sweep_runs_trials_concurrently_each_with_its_own_run_dir(ray_session, tmp_path):
    path = write_config(tmp_path, layers=[{"name": "control", "ppo": {"minibatch_size": 128, "num_epochs": 2},
                                           "dppo": {"num_workers": 1, "num_envs_per_worker": 4,
                                                    "train_batch_size": 512}}],
                        train={"total_env_steps": 20480, "checkpoint_every": 100, "eval_episodes": 0, "seed": 0},
                        ray={"backend": "ray"})
    out, layer, rows = sweep(path, ["layers.0.ppo.lr=1e-4,3e-3"], sweep_dir=tmp_path / "sweep")
    assert layer == "control" and len(rows) == 2 and all(r["status"] == "ok" for r in rows), rows

    import yaml

    spans, lrs = [], []
    for r in rows:
        run = out / r["trial"]
        assert list((run / "tb" / "control").glob("events.out.tfevents.*")), r
        recs = M.read_jsonl(run / "metrics.jsonl")
        assert {M.CHART_EPISODIC_RETURN, M.LOSS_POLICY} <= {x["tag"] for x in recs}
        assert r["env_steps"] >= 20480 and (run / "config.yaml").is_file()
        spans.append((min(x["time"] for x in recs), max(x["time"] for x in recs)))
        # The trial trained with its own value: the run's saved config, and the lr it logged.
        lr = yaml.safe_load((run / "config.yaml").read_text())["layers"][0]["ppo"]["lr"]
        assert lr == pytest.approx(r["params"]["layers.0.ppo.lr"]), (r["trial"], lr, r["params"])
        logged = {x["value"] for x in recs if x["tag"] == M.CHART_LR}
        assert logged and max(logged) == pytest.approx(lr), (r["trial"], logged)
        lrs.append(lr)
    assert sorted(lrs) == pytest.approx([1e-4, 3e-3])  # each swept value, once
    # Both trials trained at the same time on 2 CPUs: each placement group held 1 CPU and the
    # trial's learner and worker (0.5 each) were placed inside it, or they could not have started.
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans

    finals = [r["final"] for r in rows]
    assert finals == sorted(finals, reverse=True) and [r["rank"] for r in rows] == [1, 2]
    md = (out / "sweep.md").read_text()
    assert md.index(rows[0]["trial"]) < md.index(rows[1]["trial"]) and "charts/episodic_return" in md
    saved = json.loads((out / "sweep.json").read_text())
    assert [t["trial"] for t in saved["trials"]] == [r["trial"] for r in rows]
    assert saved["trials"][0]["params"] in ({"layers.0.ppo.lr": 1e-4}, {"layers.0.ppo.lr": 3e-3})
    # Each trial's placement group: a CPU-less sliver of this node for the trial's own process,
    # then one bundle per actor, exactly what its Trainer declares (a learner and a worker, 0.5
    # CPU each). The two groups held both CPUs, so the actors could only have run inside them.
    groups = [list(g["bundles"].values()) for g in ray_session.util.placement_group_table().values()
              if any(k.startswith("node:") for k in g["bundles"].get(0, {}))][-2:]
    assert [b[1:] for b in groups] == [[{"CPU": 0.5}, {"CPU": 0.5}]] * 2, groups
    assert (out / "tune").is_dir()  # Tune's own state stays in the sweep dir
    assert not list((out / "tune").rglob("events.out.tfevents.*"))  # no second TensorBoard copy


def test_concurrent_trials_refuse_cpu_affinity(ray_session, tmp_path):
    """ray.cpu_affinity plans one run's cores: concurrent trials would all pin their learners to
    the first core, so the sweep refuses it before any trial starts, naming the field and the fix;
    nothing is written."""
    path = write_config(tmp_path, layers=[{"name": "control", "ppo": {"minibatch_size": 128, "num_epochs": 1},
                                           "dppo": {"num_workers": 1, "num_envs_per_worker": 2,
                                                    "train_batch_size": 256}}],
                        train={"total_env_steps": 512, "checkpoint_every": 100, "eval_episodes": 0, "seed": 0},
                        ray={"backend": "ray", "cpu_affinity": True})
    with pytest.raises(ConfigError, match=r"ray.cpu_affinity .*--max-concurrent 1"):
        sweep(path, ["layers.0.ppo.lr=1e-4,3e-3"], sweep_dir=tmp_path / "sweep")
    assert not (tmp_path / "sweep").exists() or not any((tmp_path / "sweep").iterdir())
