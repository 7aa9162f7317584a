"""Training through Ray, the CLI, and what lands in the run dir."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer

HDPPO = [sys.executable, "-m", "hdppo.platform.cli"]


def run_cli(*args, cwd=ROOT, timeout=300):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([*HDPPO, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.learning
@pytest.mark.parametrize("mode", ["central", "dppo"])
def test_cartpole_through_ray_reaches_threshold(ray_session, tmp_path, mode):
    cfg = validate(tiny_config(
        layers=[{"ppo": {"minibatch_size": 256, "num_epochs": 5},
                 "dppo": {"mode": mode, "num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 2048}}],
        train={"total_env_steps": 40_000, "checkpoint_every": 5, "eval_episodes": 10, "seed": 0},
        ray={"backend": "ray"}))
    trainer = Trainer(cfg, tmp_path / mode, quiet=True)
    try:
        summary = trainer.train()
    finally:
        trainer.shutdown()
    assert summary["eval_return_mean"] >= 200, summary  # random play scores about 20

    rows = M.read_jsonl(tmp_path / mode / "metrics.jsonl")
    tags = {r["tag"] for r in rows}
    assert set(M.REQUIRED_TAGS) <= tags
    assert {r["layer"] for r in rows} == {"control"}
    assert list((tmp_path / mode / "tb" / "control").glob("events.out.tfevents.*"))
    assert (tmp_path / mode / "config.yaml").is_file()
    assert json.loads((tmp_path / mode / "summary.json").read_text())["env_steps"] >= 40_000


def test_tensorboard_run_has_the_scalars_and_hyperparameters(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    Trainer(validate(tiny_config()), tmp_path / "run", quiet=True).train()
    acc = EventAccumulator(str(tmp_path / "run" / "tb" / "control"))
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    assert {M.LOSS_POLICY, M.LOSS_APPROX_KL, M.PERF_ENV_STEPS_PER_S, M.CHART_ENTROPY_COEFF} <= scalars
    assert any("hyperparameters" in t for t in acc.Tags()["tensors"])


def test_cli_train_eval_and_schema(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(tiny_config()))  # JSON is YAML
    out = run_cli("train", str(cfg), "--run-dir", str(tmp_path / "run"), "--set", "train.total_env_steps=256")
    assert out.returncode == 0, out.stderr
    assert "tensorboard --logdir" in out.stdout and "[hdppo] steps" in out.stdout  # plain lines without a TTY
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # The training loop, and what the user waited for: the start (Ray, the env probe) and the evaluation too.
    assert 0 < summary["wall_s"] < summary["total_s"]
    assert f"s of training ({summary['total_s']:.0f}s with start-up and evaluation)" in out.stdout
    ev = run_cli("eval", str(tmp_path / "run"), "--episodes", "3", "--json")
    assert ev.returncode == 0, ev.stderr
    result = json.loads(ev.stdout)
    assert result["episodes"] == 3 and result["return_mean"] > 0
    schema = run_cli("schema")
    assert json.loads(schema.stdout)["title"] == "Config"


@pytest.mark.parametrize("args,match", [
    (["train", "missing.yaml"], "does not exist"),
    (["train", "configs/cartpole.yaml", "--set", "env.id=NoSuchEnv-v9", "--set", "ray.backend=local"], "not registered"),
    (["train", "configs/cartpole.yaml", "--set", "layers.0.ppo.clip=3"], "layers[0].ppo.clip"),
    (["train", "configs/default.yaml", "--address", "127.0.0.1:1"], "nothing answers at Ray address"),
    (["eval", "/nonexistent"], "run dir /nonexistent does not exist"),
    (["eval", "/"], "/ is not an hdppo run dir (no config.yaml)"),
])
def test_cli_errors_are_one_paragraph_non_zero_and_leave_nothing(tmp_path, args, match):
    run_dir = tmp_path / "run"
    if args[0] == "train":
        args = [*args, "--run-dir", str(run_dir)]
    out = run_cli(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert match in " ".join(out.stderr.split()), out.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_nan_env_fails_cleanly_with_no_run_dir_left(tmp_path, backend):
    """The env module sits in the working folder, as a user's would; in Ray it fails in a worker."""
    cfg = tmp_path / "c.yaml"
    data = tiny_config(env={"entry_point": "scripted_envs:countdown", "kwargs": {"bad": "nan_obs"}},
                       ray={"backend": backend})
    cfg.write_text(json.dumps(data))
    out = run_cli("train", str(cfg), "--run-dir", str(tmp_path / "run"), cwd=ROOT / "tests")
    assert out.returncode == 2 and "non-finite observation" in " ".join(out.stderr.split()) and "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_plain_progress_line_stops_at_100_percent_when_the_last_rollout_passes_the_total():
    from hdppo.platform.progress import progress_line

    assert progress_line(512, 1000, 50.0, "9.2") == "[hdppo] steps 512/1,000 (51%)  50 steps/s  return 9.2  eta 10s"
    # Whole rollouts: 1,024 steps done of 600 asked, shown as they are, with nothing left to wait for.
    assert progress_line(1024, 600, 30.0, "11.0") == "[hdppo] steps 1,024/600 (100%)  30 steps/s  return 11.0  eta 0s"
    assert progress_line(0, 600, 0.0, "-").endswith("(0%)  0 steps/s  return -  eta -")


def test_each_layers_hyperparameter_table_names_it_by_its_own_index(tmp_path):
    """The TEXT tab's table of the second layer said layers[0].name | control; --set names it layers.1."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from hdppo.platform.config import load_config

    cfg = load_config(ROOT / "configs" / "corridor_hierarchy.yaml",
                      ["ray.backend=local", "train.total_env_steps=1024", "train.eval_episodes=0"])
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    acc = EventAccumulator(str(tmp_path / "run" / "tb" / "control"))
    acc.Reload()
    tag = next(t for t in acc.Tags()["tensors"] if "hyperparameters" in t)
    text = acc.Tensors(tag)[0].tensor_proto.string_val[0].decode()
    assert "| layers[1].name | control |" in text and "| train.total_env_steps | 1024 |" in text
    assert "layers[0]." not in text
