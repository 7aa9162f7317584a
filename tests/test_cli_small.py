"""The CLI's small courtesies, each found by a newcomer's first hour: --version, a pipe closed early,
did-you-mean for presets and layer names, a run dir that does not exist, check-env taking a preset
by name, and checker warnings without terminal colour codes."""
import subprocess
import sys
import warnings

import pytest

from hdppo.envs.check import _env_warnings
from hdppo.platform.cli import main


def _err(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, " ".join(captured.err.split()), captured.out


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exit_:
        assert exit_.code == 0
    assert capsys.readouterr().out.startswith("hdppo ")


def test_output_into_a_pipe_closed_early_is_not_an_error():
    """`hdppo schema | head`: the reader leaves after the first bytes. The pipe is made 4 KB so that
    the schema (~55 KB) is still being written when it closes, every time."""
    import fcntl
    import os

    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ
    proc = subprocess.Popen([sys.executable, "-m", "hdppo.platform.cli", "schema"], stdout=w, stderr=subprocess.PIPE,
                            text=True)
    os.close(w)
    assert os.read(r, 1) == b"{"
    os.close(r)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_misspelt_names_get_a_suggestion(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, err, _ = _err(capsys, ["train", "defualt"])
    assert code == 2 and "no preset is named 'defualt' (did you mean 'default'?)" in err
    code, err, _ = _err(capsys, ["train", "default", "--set", "layers.contrl.ppo.lr=0.1"])
    assert code == 2 and "(did you mean 'control'?)" in err and "or a name: strategy, control" in err
    code, err, _ = _err(capsys, ["eval", "runs/nope"])
    assert code == 2 and "run dir runs/nope does not exist" in err
    assert not (tmp_path / "runs").exists()


def test_check_env_takes_a_preset_by_name(capsys):
    code, _, out = _err(capsys, ["check-env", "default", "--steps", "20"])
    assert code == 0 and "corridor" in out and "parallel_api_test: passed" in out


def test_checker_warnings_lose_their_terminal_colours():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("\x1b[33mWARN: the observation is not float32\x1b[0m")
        warnings.warn("WARN: plain")
    assert _env_warnings(caught) == {"WARN: the observation is not float32": 1, "WARN: plain": 1}


def test_the_done_line_says_when_the_last_batch_passed_the_budget(capsys, tmp_path):
    import yaml

    from conftest import tiny_config

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config(train={"total_env_steps": 300, "eval_episodes": 0})))
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "done: 512 env steps (train.total_env_steps 300, passed by the last update's whole batch)" in out
    cfg.write_text(yaml.safe_dump(tiny_config(train={"total_env_steps": 512, "eval_episodes": 0})))
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "b")]) == 0
    assert "done: 512 env steps in" in capsys.readouterr().out


def test_a_group_whose_update_outgrows_its_budget_share_is_told_once(capsys, tmp_path, monkeypatch):
    """The groups share train.total_env_steps; an upper layer's batch counts decisions (period env
    steps apart), so one update can take several shares and the run ends on it: said once per group."""
    from conftest import ROOT

    monkeypatch.chdir(tmp_path)
    assert main(["train", str(ROOT / "configs" / "corridor_hierarchy.yaml"), "--set", "ray.backend=local",
                 "--set", "train.total_env_steps=600", "--set", "train.eval_episodes=0", "--run-dir", "r"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("one update took") == 2, out
    for group in ("strategy", "control"):
        assert f"group {group!r}: one update took" in out
    assert "more than its share of train.total_env_steps (300 of 600, shared by 2 groups)" in out
    assert "the other groups get what is left" in out
    assert main(["train", str(ROOT / "configs" / "corridor_hierarchy.yaml"), "--set", "ray.backend=local",
                 "--set", "train.total_env_steps=6000", "--set", "train.eval_episodes=0", "--run-dir", "r2"]) == 0
    assert "one update took" not in capsys.readouterr().out
    # One group: there are no other groups to be left anything; the run overshoots its budget.
    assert main(["train", str(ROOT / "configs" / "corridor_hierarchy.yaml"), "--set", "ray.backend=local",
                 "--set", "train.total_env_steps=600", "--set", "train.eval_episodes=0", "--set",
                 "groups=[{layers: [strategy, control]}]", "--run-dir", "r3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("one update took") == 1 and "more than train.total_env_steps (600)" in out, out
    assert "other groups" not in out and "samples more env steps than asked" in out


def test_every_layer_of_a_group_charts_its_workers_replaced(capsys, tmp_path, monkeypatch):
    """The group's workers serve all its layers; perf/workers_replaced was written for the first only."""
    import json

    from conftest import ROOT

    monkeypatch.chdir(tmp_path)
    assert main(["train", str(ROOT / "configs" / "corridor_hierarchy.yaml"), "--set", "ray.backend=local",
                 "--set", "train.total_env_steps=2048", "--set", "train.eval_episodes=0",
                 "--set", "groups=[{layers: [strategy, control]}]", "--run-dir", "r"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert {r["layer"] for r in rows if r["tag"] == "perf/workers_replaced"} == {"strategy", "control"}


def test_a_repository_config_path_run_elsewhere_points_at_the_installed_preset(tmp_path, monkeypatch):
    """`hdppo train configs/X.yaml` outside the repository (the README runs from its root) named
    no way out but the list of presets; it now names the preset that is that file."""
    from hdppo.platform.errors import ConfigError
    from hdppo.platform.presets import resolve_config_path

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"the preset 'skirmish_flat' is that file, installed: `hdppo train skirmish_flat`"):
        resolve_config_path("configs/skirmish_flat.yaml")
