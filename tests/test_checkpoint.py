"""Checkpoints hold the whole state, are written atomically, and resume exactly."""
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.platform.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from hdppo.platform.config import validate
from hdppo.platform.errors import CheckpointError
from hdppo.platform.trainer import Trainer


def test_resume_restores_identical_weights_optimizer_and_counters(tmp_path):
    cfg = validate(tiny_config())
    first = Trainer(cfg, tmp_path / "run", quiet=True)
    summary = first.train()
    assert summary["env_steps"] == 512 and summary["updates"] == 2
    saved = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    group_state = saved["groups"]["control"]
    group_state = {"learner": group_state["learners"]["control"], "workers": group_state["workers"]}

    longer = validate(tiny_config(train={"total_env_steps": 1024}))
    second = Trainer(longer, tmp_path / "run", resume=True, quiet=True)
    second.setup()
    now = second.groups[0].get_state()
    now = {"learner": now["learners"]["control"], "workers": now["workers"]}
    for k, v in group_state["learner"]["policy"].items():
        assert torch.equal(now["learner"]["policy"][k], v)
    # The optimizer's whole state: every parameter's step and Adam moments, not just the first step.
    opt_now, opt_saved = now["learner"]["optimizer"], group_state["learner"]["optimizer"]
    assert opt_now["param_groups"] == opt_saved["param_groups"]
    assert opt_now["state"].keys() == opt_saved["state"].keys()
    assert len(opt_saved["state"]) == len(opt_saved["param_groups"][0]["params"])  # every parameter has an entry
    for i, saved_entry in opt_saved["state"].items():
        assert saved_entry.keys() == opt_now["state"][i].keys() >= {"step", "exp_avg", "exp_avg_sq"}, i
        for key, value in saved_entry.items():
            assert torch.equal(torch.as_tensor(opt_now["state"][i][key]), torch.as_tensor(value)), (i, key)
        assert saved_entry["exp_avg_sq"].abs().sum() > 0, i  # trained: the moments are not the zeros of a fresh Adam
    for key in ("version", "env_steps", "updates", "obs_stats", "reward_stats", "rng"):
        assert now["learner"][key] == group_state["learner"][key]
    assert [w["reward"]["control"]["stats"] for w in now["workers"]] == \
        [w["reward"]["control"]["stats"] for w in group_state["workers"]]
    second.metrics.close()


def test_resume_continues_counting(tmp_path):
    Trainer(validate(tiny_config()), tmp_path / "run", quiet=True).train()
    summary = Trainer(validate(tiny_config(train={"total_env_steps": 1024})), tmp_path / "run",
                      resume=True, quiet=True).train()
    assert summary["env_steps"] == 1024 and summary["updates"] == 4
    assert latest_checkpoint(tmp_path / "run").name == "ckpt_0000004.pt"


def test_a_resume_drops_what_was_logged_after_its_checkpoint(tmp_path):
    """A run killed between two checkpoints had logged updates the resume trained again: they were
    appended a second time, two values at one step, in metrics.jsonl and in TensorBoard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from hdppo.platform import metrics as M

    run = tmp_path / "run"
    cfg = tiny_config(train={"total_env_steps": 1536, "checkpoint_every": 2, "eval_every": 2})
    Trainer(validate(cfg), run, quiet=True).train()                    # updates 1-6, checkpoints 2, 4, 6
    latest_checkpoint(run).unlink()  # killed after update 6 was logged, before its checkpoint: back to 4
    before = M.read_jsonl(run / "metrics.jsonl")
    assert max(r["step"] for r in before if r["tag"] == M.LOSS_POLICY) == 1536
    evals = [(r["step"], r["value"]) for r in before if r["tag"] == M.EVAL_RETURN_MEAN]
    Trainer(validate(cfg), run, resume=True, quiet=True).train()
    rows = M.read_jsonl(run / "metrics.jsonl")
    for tag in (M.LOSS_POLICY, M.CHART_EPISODIC_RETURN, M.PERF_ENV_STEPS_PER_S):
        steps = [r["step"] for r in rows if r["tag"] == tag]
        assert steps == sorted(set(steps)) and steps[-1] == 1536, (tag, steps)
    # The evaluation at update 4, after its checkpoint, is kept; update 6's was redone.
    again = [(r["step"], r["value"]) for r in rows if r["tag"] == M.EVAL_RETURN_MEAN]
    assert [s for s, _ in again] == [512, 1024, 1536, 1536] and again[:2] == evals[:2], again  # (+ the final one)
    acc = EventAccumulator(str(run / "tb" / "control")).Reload()
    for tag in (M.LOSS_POLICY, M.EVAL_RETURN_MEAN):
        tb = [e.step for e in acc.Scalars(tag)]
        assert tb == [s for s in (r["step"] for r in rows if r["tag"] == tag)], (tag, tb)


def test_existing_run_dir_needs_resume_and_resume_needs_a_checkpoint(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("x")
    with pytest.raises(CheckpointError, match="already exists. Pass --resume"):
        Trainer(validate(tiny_config()), tmp_path / "run", quiet=True).train()
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        Trainer(validate(tiny_config()), tmp_path / "empty", resume=True, quiet=True).train()


def test_atomic_save_leaves_no_temporary_and_keeps_the_last_three(tmp_path):
    for i in range(5):
        save_checkpoint(tmp_path, i, {"w": torch.ones(2) * i})
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["ckpt_0000002.pt", "ckpt_0000003.pt", "ckpt_0000004.pt"]
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.suffix == ".tmp"]


def test_checkpoints_are_as_readable_as_the_runs_other_files(tmp_path):
    """They were 0600 (mkstemp's mode): a teammate or an eval service under another uid could read
    config.yaml and metrics.jsonl but not the checkpoints."""
    import os

    from hdppo.platform.checkpoint import save_best

    other = tmp_path / "config.yaml"
    other.write_text("x")
    save_checkpoint(tmp_path, 1, {"w": torch.ones(2)})
    save_best(tmp_path, {"w": torch.ones(2)}, {"score": 1.0})
    want = other.stat().st_mode & 0o777
    assert want & 0o044, oct(want)  # the test runs under a umask that lets others read
    for p in (tmp_path / "checkpoints").iterdir():
        assert p.stat().st_mode & 0o777 == want, (p.name, oct(p.stat().st_mode))


def test_failed_write_keeps_the_previous_checkpoint(tmp_path):
    save_checkpoint(tmp_path, 1, {"w": torch.zeros(1)})

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        save_checkpoint(tmp_path, 2, {"w": Unpicklable()})
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["ckpt_0000001.pt"]


def test_loading_never_unpickles_arbitrary_objects(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "checkpoints" / "ckpt_0000001.pt"
    path.parent.mkdir()
    torch.save({"x": Evil()}, path, pickle_module=pickle)
    with pytest.raises(CheckpointError, match="cannot be loaded safely"):
        load_checkpoint(path)
    path.write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match="move it out of checkpoints/ to resume from the one before"):
        load_checkpoint(path)
    mine = tmp_path / "my_config.yaml"   # not a checkpoint hdppo wrote: never advised away
    mine.write_text("name: mine\n")
    with pytest.raises(CheckpointError, match="not an hdppo checkpoint: point at a run dir") as exc:
        load_checkpoint(mine)
    assert "move it" not in str(exc.value) and "delete" not in str(exc.value)


def test_a_killed_driver_continues_with_resume(tmp_path):
    """SIGKILL `hdppo train` mid-run: the last checkpoint is whole, and `--resume` finishes the run
    from it, counting on from its env steps."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from conftest import ROOT

    cfg = tiny_config(train={"total_env_steps": 10_000_000, "checkpoint_every": 1, "eval_episodes": 0, "seed": 3})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "hdppo.platform.cli", "train", str(path), "--run-dir", str(run)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while len(list_checkpoints(run)) < 2 and time.time() < deadline:
            time.sleep(0.2)
        assert len(list_checkpoints(run)) >= 2, "no checkpoints written"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    last = load_checkpoint(latest_checkpoint(run))  # whole: written to a temporary file, then renamed
    steps = last["groups"]["control"]["learners"]["control"]["env_steps"]
    assert steps > 0
    out = subprocess.run(cmd + ["--resume", "--set", f"train.total_env_steps={steps + 1024}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    import json

    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == steps + 1024


def test_one_trainer_per_run_dir(tmp_path):
    """A second trainer of a run dir being trained is refused (it would write and prune the first's
    checkpoints); the lock goes with the first trainer, and a crash leaves no stale lock."""
    from hdppo.platform.trainer import LOCK_FILE, lock_run_dir, unlock_run_dir

    held = lock_run_dir(tmp_path)
    with pytest.raises(CheckpointError, match=f"is being trained now \\(pid {os.getpid()} on "):
        lock_run_dir(tmp_path)
    unlock_run_dir(held)
    unlock_run_dir(lock_run_dir(tmp_path))   # free again
    assert (tmp_path / LOCK_FILE).is_file()
    # A trainer process that dies holding the lock: the OS releases it.
    code = f"from hdppo.platform.trainer import lock_run_dir; lock_run_dir(__import__('pathlib').Path({str(tmp_path)!r})); import os; os._exit(9)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    unlock_run_dir(lock_run_dir(tmp_path))


def _assert_same_state(a, b, where="state"):
    """Equal trees of tensors (values, dtype and strides), arrays and plain values."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_same_state(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_state(x, y, f"{where}/{i}")
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b) and a.dtype == b.dtype, where
    else:
        assert a == b, where


def test_a_learner_snapshot_is_its_state_at_that_version_whatever_it_did_since(tmp_path):
    """What a stop that abandons an update checkpoints (Learner.state_snapshot): the state as it
    was after the last update the trainer logged, though the learner has changed in place since."""
    import copy

    from hdppo.platform.tensor_buffers import restore_tensors

    trainer = Trainer(validate(tiny_config()), tmp_path / "run", quiet=True)
    trainer.setup()
    group = trainer.groups[0]
    learner = group.learners["control"]
    learner._keeps_snapshots = True  # as on Ray (in-process nothing runs beside an update to need it)
    learner._keep_snapshot()
    v0, before = learner.version, copy.deepcopy(learner.get_state())
    group.iteration()
    v1, after = learner.version, learner.get_state()
    assert v1 == v0 + 1
    # Serialised as Ray does (pickle 5, arrays out of band) and turned back into tensors.
    old = restore_tensors(pickle.loads(pickle.dumps(learner.state_snapshot(v0), protocol=5)))
    _assert_same_state(before, old)
    _assert_same_state(after, restore_tensors(learner.state_snapshot(v1)))
    _assert_same_state(after, restore_tensors(learner.state_snapshot()))  # None: the latest
    assert not torch.equal(old["policy"][next(iter(old["policy"]))], after["policy"][next(iter(old["policy"]))])
    with pytest.raises(RuntimeError, match="no state snapshot of version 99"):
        learner.state_snapshot(99)
    trainer.metrics.close()


def test_on_ray_the_checkpoint_is_the_learners_state_after_the_last_update(tmp_path, ray_session):
    """On Ray each checkpoint comes from the learner's kept copy (Learner.state_snapshot): it
    loads with the safe unpickler (tensors, not the arrays they travel as) and is the state the
    learner holds after the run's last update. The second update starts before the first is
    logged and checkpointed (Trainer._may_start_early): the first checkpoint and the first
    update's metrics are still the first update's."""
    from hdppo.platform.metrics import PERF_ENV_STEPS_PER_S

    cfg = validate(tiny_config(ray={"backend": "ray", "num_cpus": 2}))
    run = tmp_path / "run"
    trainer = Trainer(cfg, run, quiet=True)
    try:
        summary = trainer.train()
        saved = load_checkpoint(latest_checkpoint(run))["groups"]["control"]["learners"]["control"]
        now = trainer.groups[0].get_state()["learners"]["control"]
    finally:
        trainer.shutdown()
    assert summary["updates"] == saved["updates"] == 2
    _assert_same_state(now, saved)
    assert trainer.started_early == 1
    first = load_checkpoint(run / "checkpoints" / "ckpt_0000001.pt")["groups"]["control"]["learners"]["control"]
    assert (first["updates"], first["version"], first["env_steps"]) == (1, 1, 256)
    assert any(not torch.equal(first["policy"][k], saved["policy"][k]) for k in saved["policy"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sorted(r["step"] for r in rows if r["tag"] == PERF_ENV_STEPS_PER_S) == [256, 512]


def test_resume_with_changed_settings_says_what_changed_and_keeps_the_config_it_had(tmp_path, capsys):
    """A resume may change hyperparameters (--set); config.yaml then holds the new ones, so the one
    the run had so far is kept beside it and the change is printed; an unchanged resume keeps nothing."""
    import yaml

    from hdppo.platform.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config()))
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--run-dir", str(run)]) == 0
    capsys.readouterr()
    files = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".hdppo.lock"}
    assert main(["train", str(run / "config.yaml"), "--run-dir", str(run), "--resume"]) == 0
    assert not list(run.glob("config.before-resume-*.yaml"))
    # A finished run resumed on the same budget: said as such, not as an update that passed the budget,
    # and nothing written (an evaluation was appended each time, summary.json's last_return lost).
    out = " ".join(capsys.readouterr().out.split())
    assert "nothing to train:" in out and "train.total_env_steps is 512" in out and "passed by" not in out
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".hdppo.lock"} == files
    assert main(["train", str(run / "config.yaml"), "--run-dir", str(run), "--resume",
                 "--set", "train.total_env_steps=256"]) == 0   # a budget below what was done: config.yaml kept
    assert not list(run.glob("config.before-resume-*.yaml"))
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".hdppo.lock"} == files
    capsys.readouterr()
    assert main(["train", str(run / "config.yaml"), "--run-dir", str(run), "--resume",
                 "--set", "layers.0.ppo.gamma=0.5", "--set", "train.total_env_steps=1024"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "resuming with a changed config: layers[0].ppo.gamma 0.99 -> 0.5; train.total_env_steps 512 -> 1024" in out
    assert "follow the new total from here: their progress jumps to 50% of what it was" in out, out
    kept = yaml.safe_load((run / "config.before-resume-1.yaml").read_text())
    assert kept["layers"][0]["ppo"]["gamma"] == 0.99
    assert yaml.safe_load((run / "config.yaml").read_text())["layers"][0]["ppo"]["gamma"] == 0.5
