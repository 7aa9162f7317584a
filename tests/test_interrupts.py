"""SIGINT and SIGTERM sent to a real `hdppo train`: it stops within a bound, keeps its logs, writes a
checkpoint, prints the command that resumes it, and that command continues from the saved counters.

The signals go to the process group where a terminal (Ctrl-C) or `timeout` would send them to it,
so Ray's own processes get them too. Envs that hang after their first update make the timing
deterministic: the signal always lands in an update that cannot finish.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import tiny_config
from hdppo.platform.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from hdppo.platform.errors import HdppoError
from hdppo.platform.metrics import read_jsonl
from hdppo.platform.trainer import Trainer, holds_results
from hdppo.platform.config import validate

ENVS = '''
import os
import time
import gymnasium as gym
import numpy as np


class Stalling(gym.Env):
    """Reward 1 a step; once the file ``hang_flag`` exists, each step sleeps an hour; after
    ``nan_after`` steps of this copy, the observation turns NaN."""

    metadata = {"name": "stalling"}

    def __init__(self, hang_flag=None, nan_after=10**9):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.hang_flag, self.nan_after, self.steps, self.t = hang_flag, nan_after, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.steps += 1
        self.t += 1
        while self.hang_flag and os.path.exists(self.hang_flag):
            time.sleep(0.05)
        obs = np.array([np.nan if self.steps > self.nan_after else self.t % 7], np.float32)
        return obs, 1.0, self.t >= 20, False, {}


def stalling(**kwargs):
    return Stalling(**kwargs)
'''
HDPPO = Path(sys.executable).with_name("hdppo")


def _cfg(tmp_path: Path, train: dict | None = None, **over) -> Path:
    (tmp_path / "slow_envs.py").write_text(ENVS)
    data = tiny_config(train={"total_env_steps": 10_000_000, "checkpoint_every": 1000, "eval_episodes": 0,
                              "seed": 3, "log_every_s": 0.1, **(train or {})}, **over)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _start(tmp_path: Path, cfg: Path, *extra: str) -> subprocess.Popen:
    """`hdppo train` in its own process group (as a job in a terminal, or under `timeout`)."""
    return subprocess.Popen([str(HDPPO), "train", str(cfg), "--run-dir", str(tmp_path / "run"), *extra],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _hang(tmp_path: Path) -> dict:
    """An env whose steps stall while ``tmp_path/hang`` exists: made after the first update, it
    holds the next one (its rollouts) for as long as the file is there."""
    return {"entry_point": "slow_envs:stalling", "kwargs": {"hang_flag": str(tmp_path / "hang")}}


def _stall(tmp_path: Path) -> None:
    (tmp_path / "hang").touch()
    time.sleep(1.5)  # an update already past its rollouts (a few ms of SGD here) ends; the next one stalls


def _wait_for_metrics(proc: subprocess.Popen, run: Path, timeout: float = 150.0) -> list[dict]:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").is_file() and (rows := read_jsonl(run / "metrics.jsonl")):
            return rows
        time.sleep(0.2)
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"no metrics within {timeout}s (rc {proc.returncode}):\n{out}\n{err}")


def _finish(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str, str, float]:
    t0 = time.time()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"did not stop within {timeout}s:\n{out}\n{err}")
    return proc.returncode, out, err, time.time() - t0


def _resume_command(out: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("[hdppo] resume: "))
    argv = shlex.split(line.removeprefix("[hdppo] resume: "))
    assert argv[0] == "hdppo" and argv[-1] == "--resume"
    return [str(HDPPO), *argv[1:]]


def _steps(ckpt: Path) -> int:
    return load_checkpoint(ckpt)["groups"]["control"]["learners"]["control"]["env_steps"]


def _assert_stopped(rc: int, out: str, err: str, run: Path, signame: str, code: int) -> int:
    assert rc == code, out + err
    assert "Traceback" not in err and "SIGTERM received" not in err, err
    assert (run / "metrics.jsonl").is_file() and (run / "tb" / "control").is_dir()
    assert any((run / "tb" / "control").iterdir())
    ckpt = latest_checkpoint(run)
    assert ckpt is not None, out + err
    steps = _steps(ckpt)
    assert steps > 0
    assert f"[hdppo] stopped by {signame} at {steps:,}/10,000,000 env steps" in out, out
    assert f"checkpoint {ckpt}" in out
    # The checkpoint is the state after the last update that was logged.
    assert max(r["step"] for r in read_jsonl(run / "metrics.jsonl")) == steps
    return steps


def _resume_and_check(cmd: list[str], cwd: Path, run: Path, steps: int) -> None:
    """The printed command, with a total just past the checkpoint (and, for speed, in-process): one
    more update, counted on from the saved env steps and updates, appended to the same logs."""
    lines_before = len(read_jsonl(run / "metrics.jsonl"))
    updates = load_checkpoint(latest_checkpoint(run))["groups"]["control"]["learners"]["control"]["updates"]
    (cwd / "hang").unlink(missing_ok=True)
    out = subprocess.run([*cmd, "--set", f"train.total_env_steps={steps + 1}", "--set", "ray.backend=local"],
                         cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads((run / "summary.json").read_text())
    last = load_checkpoint(latest_checkpoint(run))["groups"]["control"]["learners"]["control"]
    assert summary["env_steps"] == last["env_steps"] > steps and summary["updates"] == last["updates"] == updates + 1
    rows = read_jsonl(run / "metrics.jsonl")
    new = rows[lines_before:]
    assert new and min(r["step"] for r in new) == max(r["step"] for r in new) == last["env_steps"]


def test_sigterm_to_the_process_group_on_ray_abandons_the_stuck_update_and_resumes(tmp_path):
    """As `timeout` does: SIGTERM to the driver and every process of its group, Ray's included.
    The second update hangs, so it is abandoned after train.stop_timeout_s."""
    cfg = _cfg(tmp_path, env=_hang(tmp_path), ray={"backend": "ray", "num_cpus": 2}, train={"stop_timeout_s": 1.0})
    run = tmp_path / "run"
    proc = _start(tmp_path, cfg)
    _wait_for_metrics(proc, run)
    _stall(tmp_path)
    os.kill(proc.pid, signal.SIGTERM)
    os.killpg(proc.pid, signal.SIGTERM)
    rc, out, err, took = _finish(proc)
    steps = _assert_stopped(rc, out, err, run, "SIGTERM", 143)
    assert "did not finish within train.stop_timeout_s (1s)" in out, out
    assert took < 30, f"{took:.0f}s to stop"
    assert len(list_checkpoints(run)) == 1
    _resume_and_check(_resume_command(out), tmp_path, run, steps)


def test_sigint_to_the_process_group_finishes_the_update_and_resumes(tmp_path):
    """Ctrl-C in a terminal: SIGINT to the whole foreground group. In-process (backend local) the
    update in flight finishes, and the checkpoint is the state after it."""
    cfg = _cfg(tmp_path, env={"id": "CartPole-v1"})
    run = tmp_path / "run"
    proc = _start(tmp_path, cfg, "--set", "train.seed=4")
    _wait_for_metrics(proc, run)
    os.killpg(proc.pid, signal.SIGINT)
    rc, out, err, _ = _finish(proc)
    steps = _assert_stopped(rc, out, err, run, "SIGINT", 130)
    cmd = _resume_command(out)
    assert cmd[1:] == ["train", str(cfg), "--set", "train.seed=4", "--run-dir", str(run), "--resume"]
    _resume_and_check(cmd, tmp_path, run, steps)


def test_a_second_ctrl_c_exits_at_once_and_deletes_nothing(tmp_path):
    cfg = _cfg(tmp_path, env=_hang(tmp_path))  # in-process: the stuck update cannot be abandoned, only left
    run = tmp_path / "run"
    proc = _start(tmp_path, cfg)
    _wait_for_metrics(proc, run)
    _stall(tmp_path)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(1.0)
    assert proc.poll() is None  # still waiting for the update that hangs
    os.kill(proc.pid, signal.SIGINT)
    rc, out, err, took = _finish(proc, timeout=20)
    assert rc == 130 and took < 10
    assert "SIGINT: stopping" in err and "second SIGINT: exiting at once" in err, err
    assert "Traceback" not in err
    assert read_jsonl(run / "metrics.jsonl") and (run / "tb" / "control").is_dir() and (run / "config.yaml").is_file()


def test_a_failure_after_the_first_update_keeps_the_logs(tmp_path):
    """A run dir that holds logs is never deleted, even with no checkpoint to resume from."""
    _cfg(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        cfg = validate(tiny_config(env={"entry_point": "slow_envs:stalling", "kwargs": {"nan_after": 100}},
                                   train={"total_env_steps": 10_000, "checkpoint_every": 1000, "eval_episodes": 0}))
        trainer = Trainer(cfg, tmp_path / "run", quiet=True)
        with pytest.raises(HdppoError, match="non-finite"):
            try:
                trainer.train()
            finally:
                trainer.shutdown()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("slow_envs", None)
    run = tmp_path / "run"
    assert read_jsonl(run / "metrics.jsonl") and latest_checkpoint(run) is None and holds_results(run)


def test_holds_results(tmp_path):
    (tmp_path / "config.yaml").write_text("name: x")
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "tb" / "control").mkdir(parents=True)
    assert not holds_results(tmp_path)  # what a start leaves before any update: removable
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    assert holds_results(tmp_path)


def test_a_signal_while_the_trainer_shuts_down_exits_at_once_saying_the_run_is_kept():
    """A second Ctrl-C soon after the first (its checkpoint written) landed in the actors' and Ray's
    shutdown, after the handlers were gone: a KeyboardInterrupt out of the shutdown, 'interrupted
    before anything was kept' beside a run dir with checkpoints, exit 1 in some tries."""
    code = ("import os, signal, time\n"
            "from hdppo.platform.interrupts import SignalHandlers, StopRequest\n"
            "stop = StopRequest()\nstop.request('stopped by SIGINT', signal.SIGINT)\nstop.finishing = True\n"
            "with SignalHandlers(stop, None):\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(10)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 130 and "SIGINT while shutting down: exiting at once. The run dir is kept" in out.stderr


def test_the_handlers_stay_while_the_trainer_shuts_down(tmp_path, monkeypatch):
    from hdppo.platform import trainer as trainer_module
    from hdppo.platform.interrupts import SignalHandlers

    seen = []
    real = trainer_module.Trainer.shutdown

    def shutdown(self):
        handler = signal.getsignal(signal.SIGINT)
        seen.append((self.stop.finishing, isinstance(getattr(handler, "__self__", None), SignalHandlers)))
        real(self)

    monkeypatch.setattr(trainer_module.Trainer, "shutdown", shutdown)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_config(train={"eval_episodes": 0})))
    trainer_module.train_from_file(str(path), run_dir=str(tmp_path / "run"))
    assert seen == [(True, True)]
    assert not isinstance(getattr(signal.getsignal(signal.SIGINT), "__self__", None), SignalHandlers)  # restored after
