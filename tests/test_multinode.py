"""Training on a two-node Ray cluster (two raylets on this machine), workers on both nodes."""
import json
import os
import subprocess
import sys

from conftest import ROOT


def test_training_spreads_workers_over_two_nodes(tmp_path):
    # A token in HOME, and a cluster (ray.cluster_utils) without authentication: joining it by
    # address must keep the driver's auth mode off (hdppo.platform.ray_auth.match_auth_mode).
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("a-token-this-cluster-does-not-use")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {"HOME": str(tmp_path)}
    # Its own process: the session's embedded Ray must not be the one this test joins.
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "multinode_run.py")], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["env_steps"] >= 3000 and result["workers"] == 3
    assert len(set(result["nodes"])) == 2, result  # 3 workers x 1 CPU cannot fit on one 2-CPU node
