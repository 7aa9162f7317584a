"""Training on a two-node Ray cluster (two raylets on this machine), workers on both nodes."""
import json
import subprocess
import sys

from conftest import ROOT


def test_training_spreads_workers_over_two_nodes():
    # Its own process: the session's embedded Ray must not be the one this test joins.
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "multinode_run.py")], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["env_steps"] >= 3000 and result["workers"] == 3
    assert len(set(result["nodes"])) == 2, result  # 3 workers x 1 CPU cannot fit on one 2-CPU node
