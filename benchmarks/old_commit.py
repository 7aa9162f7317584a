"""Run hdppo as it was at an older commit, beside the current tree, in the same benchmark run.

``old_tree(commit)`` unpacks the commit with ``git archive`` into a temporary folder (the
repository, its index and its work tree are left alone) and lays out an import root beside it,
``<tmp>/importroot/hdppo/{platform,envs,policies,hierarchies}``, of symlinks to the unpacked
folders. ``hdppo`` is a PEP 420 namespace that the editable install maps onto the current tree
with a meta-path finder appended *after* Python's own path finder, so a ``PYTHONPATH`` that starts
with that import root wins: ``hdppo.platform`` and the rest resolve to the old code, in the
driver and in the Ray workers it starts (they inherit the environment). ``hdppo_train`` runs
``hdppo train`` in a subprocess either way (old tree or current), and checks which copy the
subprocess imported.

Usage:  python benchmarks/old_commit.py COMMIT      (prints the files hdppo resolves to)
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Iterator

import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("platform", "envs", "policies", "hierarchies")

# Prints the files that hdppo's packages resolved to, then runs the CLI with the other arguments.
# (hdppo.platform is a namespace: its __path__ lists both trees, the old one first, so a module
# file is what tells which copy is in use.)
_PROBE = ("import json, hdppo.platform.cli, hdppo.envs, hdppo.policies, hdppo.hierarchies; "
          "print('HDPPO_FILES ' + json.dumps([m.__file__ for m in (hdppo.platform.cli, hdppo.envs, "
          "hdppo.policies, hdppo.hierarchies)]), file=__import__('sys').stderr, flush=True)")
_BOOT = _PROBE + """
import sys
from hdppo.platform.cli import main
sys.exit(main(sys.argv[1:]))
"""


@contextlib.contextmanager
def old_tree(commit: str) -> Iterator[Path]:
    """A temporary checkout of ``commit``; yields its import root (the ``PYTHONPATH`` entry)."""
    with tempfile.TemporaryDirectory(prefix=f"hdppo_{commit[:10]}_") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(src, filter="data")
        root = Path(tmp) / "importroot"
        (root / "hdppo").mkdir(parents=True)
        for pkg in PACKAGES:
            if (src / pkg).is_dir():
                (root / "hdppo" / pkg).symlink_to(src / pkg, target_is_directory=True)
        yield root


def run_child(code: str, import_root: Path | None, file_key: str, what: str, timeout_s: float) -> dict:
    """``code`` in a fresh interpreter with ``import_root`` (an old tree, :func:`old_tree`) first on
    ``PYTHONPATH``, or the current tree without one; the code prints one line ``RESULT <json>``
    whose ``file_key`` names the module file it ran, which must lie in the tree asked for.
    Returns the parsed dict; raises with the output's tail when the child fails."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if import_root is not None:
        env["PYTHONPATH"] = str(import_root)
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd="/", capture_output=True, text=True,
                          timeout=timeout_s)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}")
    out = json.loads(line[len("RESULT "):])
    if (import_root is not None) != out[file_key].startswith(str(import_root or "\0")):
        raise RuntimeError(f"{what}: expected the {'old' if import_root else 'current'} tree, ran {out[file_key]}")
    return out


def hdppo_train(config: dict, run_dir: Path, import_root: Path | None = None,
                overrides: list[str] | None = None, timeout_s: float = 3600.0,
                extra_paths: tuple[Path, ...] = (), extra_env: dict[str, str] | None = None) -> dict:
    """``hdppo train`` on ``config`` in a subprocess, with the old tree at ``import_root`` if given.
    ``extra_paths`` go on ``PYTHONPATH`` after it (e.g. a folder with a ``sitecustomize``), and
    ``extra_env`` into the subprocess' environment (Ray's local workers inherit both).

    Returns the subprocess' wall time and where ``hdppo.platform`` resolved; raises with the
    tail of its output when it fails, or when the copy imported is not the one asked for.
    """
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir.parent / f"{run_dir.name}.yaml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    boot = run_dir.parent / "_hdppo_boot.py"
    boot.write_text(_BOOT)
    env = dict(os.environ, **(extra_env or {}))
    env.pop("PYTHONPATH", None)
    paths = ([str(import_root)] if import_root is not None else []) + [str(p) for p in extra_paths]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    cmd = [sys.executable, str(boot), "train", str(cfg_path), "--run-dir", str(run_dir)]
    for o in overrides or []:
        cmd += ["--set", o]
    # cwd: the run dir's parent, so neither tree's root lands on sys.path by accident.
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=run_dir.parent, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall = time.perf_counter() - t0
    tail = (proc.stdout + proc.stderr)[-3000:]
    if proc.returncode != 0:
        raise RuntimeError(f"hdppo train exited {proc.returncode}: ...{tail}")
    files = _check_files(proc.stderr, import_root)
    return {"wall_s_incl_setup": round(wall, 1), "hdppo_files": files, "command": cmd}


def _check_files(stderr: str, import_root: Path | None) -> list[str]:
    files = next((json.loads(line.split(" ", 1)[1]) for line in stderr.splitlines()
                  if line.startswith("HDPPO_FILES ")), None)
    root = (import_root / "hdppo").resolve() if import_root is not None else REPO
    want = [root / pkg for pkg in ("platform", "envs", "policies", "hierarchies")]
    if not files or any(not Path(f).resolve().is_relative_to(w.resolve()) for f, w in zip(files, want)):
        raise RuntimeError(f"hdppo resolved to {files}, expected files under {root}")
    return files


def resolved_files(import_root: Path | None) -> list[str]:
    """The files of hdppo's packages in a fresh interpreter with this import root (checked)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if import_root is not None:
        env["PYTHONPATH"] = str(import_root)
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=tempfile.gettempdir(), env=env,
                         check=True, capture_output=True, text=True)
    return _check_files(out.stderr, import_root)


if __name__ == "__main__":
    with old_tree(sys.argv[1] if len(sys.argv) > 1 else "HEAD") as root:
        print(json.dumps({"old": resolved_files(root), "current": resolved_files(None)}, indent=2))
