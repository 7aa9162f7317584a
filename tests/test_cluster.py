"""Joining a real Ray cluster as a user does: `ray start --head` and `ray start --address` as
processes, token authentication (on, as Ray 2.60 starts a head that has a token), an explicit
host:port, and the user's env module shipped to both nodes with --working-dir.

The cluster is the tests' own: its own port, temp dir and HOME (so the token the head reads is
this test's, never the user's ~/.ray/auth_token), stopped by killing its process groups (never
`ray stop`, which would stop every Ray on the machine). Marked `cluster`; `make test-fast` skips it.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from hdppo.platform import ray_auth
from hdppo.platform.cli import main
from hdppo.platform.working_dir import LARGE_FILE_BYTES, excludes, runtime_env

BIN = Path(sys.executable).parent
USER_ENVS = '''
import json, os

import gymnasium as gym


def make(log=None):
    """CartPole; each process that makes one notes its node, this file and what lies beside it."""
    if log:
        import ray

        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        here = os.path.dirname(os.path.abspath(__file__))
        with open(log, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "node": node, "file": os.path.abspath(__file__),
                                "beside": sorted(os.listdir(here))}) + "\\n")
    return gym.make("CartPole-v1")
'''


def _user_dir(root: Path, module: str) -> Path:
    """A project folder as a user has one: their env module, a venv, a run dir, a big file."""
    user = root / "project"
    user.mkdir()
    (user / f"{module}.py").write_text(USER_ENVS)
    (user / "venv_x").mkdir()
    (user / "venv_x" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (user / "runs" / "old").mkdir(parents=True)
    (user / "runs" / "old" / "metrics.jsonl").write_text("{}\n")
    (user / "my_run").mkdir()
    (user / "my_run" / "metrics.jsonl").write_text("{}\n")
    (user / "big.bin").write_bytes(b"\0" * (LARGE_FILE_BYTES + 1))
    return user


def _config(root: Path, module: str, log: Path, **dppo) -> Path:
    data = {"name": "cluster", "env": {"entry_point": f"{module}:make", "kwargs": {"log": str(log)}},
            "layers": [{"name": "control", "policy": {"hidden": [16]}, "ppo": {"num_epochs": 1, "minibatch_size": 128},
                        "dppo": {"num_workers": 3, "num_envs_per_worker": 2, "train_batch_size": 384,
                                 "worker_cpus": 1.0, **dppo}}],
            "train": {"total_env_steps": 768, "checkpoint_every": 100, "eval_episodes": 1}}
    path = root / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ----------------------------------------------------------------------------- without a cluster

def test_working_dir_leaves_out_venvs_run_dirs_caches_and_large_files(tmp_path):
    user = _user_dir(tmp_path, "envs_a")
    (user / ".git").mkdir()
    (user / "sub" / "__pycache__").mkdir(parents=True)
    env, large = runtime_env(user)
    assert env["working_dir"] == str(user) and large == ["big.bin"]
    patterns = env["excludes"]
    for p in ("/venv_x", "/my_run", "/big.bin", ".git", "__pycache__", "runs"):
        assert p in patterns, patterns
    assert not any("envs_a" in p for p in patterns)
    assert excludes(user)[0] == patterns


def test_working_dir_is_validated_naming_the_field(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _config(tmp_path, "envs_b", tmp_path / "log.jsonl")
    assert main(["train", str(cfg), "--working-dir", "no_such_dir", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    # The flag is named (the config file itself is fine), and where a relative path starts.
    assert ("as changed on the command line, is invalid: ray.working_dir (from --working-dir no_such_dir): "
            "no such folder") in " ".join(err.split()) and str(tmp_path) in err.replace("\n", "")
    assert not (tmp_path / "run").exists()
    argv = ["sweep", str(cfg), "--grid", "train.seed=1,2", "--working-dir", "no_such_dir", "--sweep-dir", "sw"]
    assert main(argv) == 2
    assert ("as changed on the command line, is invalid: ray.working_dir (from --working-dir no_such_dir): no such "
            "folder") in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "sw").exists()


def test_working_dir_makes_the_module_importable_for_the_driver(tmp_path, monkeypatch, capsys):
    """The driver's cwd is elsewhere: --working-dir alone puts the user's module on its sys.path."""
    user = _user_dir(tmp_path, "envs_c")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", list(sys.path))
    log = tmp_path / "log.jsonl"
    cfg = _config(tmp_path, "envs_c", log, num_workers=2, worker_cpus=None)
    argv = ["train", str(cfg), "--set", "ray.backend=local", "--set", "train.total_env_steps=384",
            "--run-dir", str(tmp_path / "run")]
    assert main([*argv[:-2], "--run-dir", str(tmp_path / "run0")]) == 2  # without it: not importable
    assert "envs_c" in capsys.readouterr().err
    assert main([*argv, "--working-dir", str(user)]) == 0, capsys.readouterr().err
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["ray"]["working_dir"] == str(user)
    assert {json.loads(x)["file"] for x in log.read_text().splitlines()} == {str(user / "envs_c.py")}


def test_token_sources_follow_rays_order_and_a_set_mode_is_kept(tmp_path, monkeypatch):
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ray_auth.token_source() is None
    assert ray_auth.match_auth_mode("127.0.0.1:1") == "disabled" and "RAY_AUTH_MODE" not in os.environ  # no token
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t0")
    assert ray_auth.token_source() == str(tmp_path / ".ray" / "auth_token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(ray_auth.RayStartError, match="RAY_AUTH_TOKEN_PATH names .*cannot be read"):
        ray_auth.token_source()
    (tmp_path / "tok").write_text("t1")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    assert "RAY_AUTH_TOKEN_PATH" in ray_auth.token_source()
    monkeypatch.setenv("RAY_AUTH_TOKEN", "t2")
    assert ray_auth.token_source() == "the RAY_AUTH_TOKEN environment variable"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice: hdppo never changes it
    assert ray_auth.match_auth_mode("127.0.0.1:1") == "disabled" and os.environ["RAY_AUTH_MODE"] == "disabled"
    msg = str(ray_auth.auth_error("h:1", "disabled", None))
    assert "RAY_AUTH_MODE=disabled is set here" in msg and "ray get-auth-token" in msg


# ----------------------------------------------------------------------------- a real cluster

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayCluster:
    """`ray start --head` plus one `ray start --address` node, each in its own process group."""

    def __init__(self) -> None:
        # Short: Ray's unix sockets live under the temp dir, and a socket path has ~107 bytes.
        self.base = Path(tempfile.mkdtemp(prefix="hc", dir="/tmp"))
        self.home = self.base / "home"
        (self.home / ".ray").mkdir(parents=True)
        (self.home / ".ray" / "auth_token").write_text(secrets.token_hex(32))  # the head turns auth on
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "PYTHONPATH"}
        return {**env, "HOME": str(self.home), **extra}

    def _start(self, name: str, *args: str, **env: str) -> None:
        log = self.base / f"{name}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([str(BIN / "ray"), "start", *args, "--block", "--disable-usage-stats",
                                     "--dashboard-agent-listen-port", str(_free_port())],
                                    stdout=out, stderr=subprocess.STDOUT, env=self.env(**env), start_new_session=True)
        self.procs.append((proc, log))

    def start_head(self) -> None:
        self._start("head", "--head", "--port", str(self.port), "--temp-dir", str(self.base / "t"),
                    "--num-cpus", "2", "--include-dashboard", "false",
                    "--ray-client-server-port", str(_free_port()))

    def start_node(self) -> None:
        # Ray turns token auth on by itself on the head only; another node must be told.
        self._start("node", "--address", self.address, "--num-cpus", "2", RAY_AUTH_MODE="token")

    def wait(self, index: int, timeout: float = 150.0) -> None:
        proc, log = self.procs[index]
        deadline = time.time() + timeout
        while time.time() < deadline:
            if "Ray runtime started" in log.read_text():
                return
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        pytest.fail(f"{log.name}: Ray did not start (rc {proc.poll()}):\n{log.read_text()[-3000:]}")

    def stop(self) -> None:
        for proc, _ in self.procs:
            _killpg(proc.pid, signal.SIGTERM)
        deadline = time.time() + 5
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.time(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        for proc, _ in self.procs:  # what is left of each group (Ray's processes stay in it)
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="module")
def cluster():
    c = RayCluster()
    try:
        c.start_head()
        c.wait(0)
        c.start_node()  # joins while the first test runs
        yield c
    finally:
        c.stop()


def _train(c: RayCluster, cwd: Path, cfg: Path, run: Path, user: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "hdppo"), "train", str(cfg), "--run-dir", str(run), "--address", c.address,
                             "--working-dir", str(user)], cwd=cwd, env=c.env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _paragraph(err: str) -> str:
    """The error paragraph the CLI printed, joined into one line; it must be one paragraph."""
    tail = err[err.index("hdppo train: error:"):].strip()
    assert "\n\n" not in tail, err
    return " ".join(tail.split())


@pytest.mark.cluster
def test_a_missing_or_wrong_token_is_said_so_not_blamed_on_the_address(cluster, tmp_path):
    user = _user_dir(tmp_path, "hc_envs_err")
    cfg = _config(tmp_path, "hc_envs_err", tmp_path / "log.jsonl")
    (tmp_path / "nohome").mkdir()
    missing = _train(cluster, tmp_path, cfg, tmp_path / "run_missing", user, HOME=str(tmp_path / "nohome"))
    wrong = _train(cluster, tmp_path, cfg, tmp_path / "run_wrong", user, RAY_AUTH_TOKEN="wrong")
    results = {}
    for name, proc in (("missing", missing), ("wrong", wrong)):
        out, err = proc.communicate(timeout=150)
        assert proc.returncode == 2, f"{name}: rc {proc.returncode}\n{out}\n{err}"
        assert "InvalidAuthToken" not in err and "gcs_client" not in err, err  # Ray's lines went to the log
        results[name] = _paragraph(err)
        assert not (tmp_path / f"run_{name}").exists()  # a failed start leaves no run dir
    for name, text in results.items():
        assert f"the Ray cluster at '{cluster.address}' uses token authentication" in text, text
        assert "ray get-auth-token" in text and "RAY_AUTH_TOKEN=<token>" in text and "~/.ray/auth_token" in text
        assert "check the address" not in text
        log = Path(text.split("Ray's connection log: ")[1].rstrip("."))
        lines = log.read_text().splitlines()
        # Asked once, not the twenty retries of ray.init.
        assert 1 <= sum("InvalidAuthToken" in ln for ln in lines) <= 3, lines
        log.unlink()
    assert f"no token was found here (RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH are unset and " \
           f"{tmp_path / 'nohome' / '.ray' / 'auth_token'} does not exist)" in results["missing"]
    assert "refused the token from the RAY_AUTH_TOKEN environment variable: it is not the head's token" \
        in results["wrong"]


@pytest.mark.cluster
def test_training_by_host_port_ships_the_working_dir_to_both_nodes(cluster, tmp_path):
    cluster.wait(1)
    user = _user_dir(tmp_path, "hc_envs_ok")
    log = tmp_path / "log.jsonl"
    cfg = _config(tmp_path, "hc_envs_ok", log)
    elsewhere = tmp_path / "elsewhere"  # the module is importable only through --working-dir
    elsewhere.mkdir()
    proc = _train(cluster, elsewhere, cfg, tmp_path / "run", user)  # HOME holds the head's token
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{out}\n{err}"
    assert "InvalidAuthToken" not in err
    assert "not shipped to the nodes, over 16 MiB: big.bin" in err
    # Which cluster it joined, said once (an 'auto' may join whatever Ray runs on the machine).
    assert re.search(rf"joined the Ray cluster at \S+ \(--address {re.escape(cluster.address)}\): 2 node\(s\), 4 CPUs",
                     err), err
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    workers = [r for r in rows if r["pid"] != proc.pid]
    driver = [r for r in rows if r["pid"] == proc.pid]
    assert driver and {r["file"] for r in driver} == {str(user / "hc_envs_ok.py")}
    assert len({r["pid"] for r in workers}) == 3, rows
    assert len({r["node"] for r in workers}) == 2, rows  # 3 workers x 1 CPU do not fit on one 2-CPU node
    for r in workers:  # Ray's unpacked copy, without what a training never needs
        assert "working_dir_files" in r["file"] and not r["file"].startswith(str(user)), r
        assert "hc_envs_ok.py" in r["beside"]
        assert not {"venv_x", "runs", "my_run", "big.bin"} & set(r["beside"]), r
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["ray"]["working_dir"] == str(user) and saved["ray"]["address"] == cluster.address
