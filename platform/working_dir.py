"""Shipping the user's code (env and reward modules) to every node: ``ray.working_dir``.

On a cluster, a ``module:factory`` entry point must import in rollout workers on other machines.
Ray's ``runtime_env={"working_dir": DIR}`` zips DIR once, and every worker of the job, on any
node, starts inside an unpacked copy with it on ``sys.path``. What a training never needs stays
out of the zip (Ray also honours ``.gitignore`` and ``.rayignore`` files there): run dirs,
virtual environments, version control, caches, and single files over :data:`LARGE_FILE_BYTES`.
The driver imports the same modules from DIR itself (:func:`use_working_dir`).
"""
from __future__ import annotations

import fnmatch
import os
import sys
from pathlib import Path

# Folder names never shipped, wherever they are (gitignore patterns, relative to the working dir).
EXCLUDED_NAMES = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "*.pyc", ".pytest_cache",
                  ".mypy_cache", ".ruff_cache", "*.egg-info", "node_modules", "runs", "checkpoints", ".ipynb_checkpoints")
LARGE_FILE_BYTES = 16 * 2**20


def _literal(rel: Path) -> str:
    """An anchored gitignore pattern for exactly this path (glob characters escaped)."""
    text = rel.as_posix()
    for ch in "\\[]*?":
        text = text.replace(ch, "\\" + ch)
    return "/" + text


def _is_run_dir(names: set[str]) -> bool:
    """An hdppo run dir (or sweep dir) under another name than runs/."""
    return "metrics.jsonl" in names or {"config.yaml", "checkpoints"} <= names or "sweep.json" in names


def excludes(root: str | Path) -> tuple[list[str], list[str]]:
    """The ``excludes`` for ``runtime_env`` and, of them, the large files left out (paths
    relative to ``root``, for telling the user). Virtual environments are found by their
    ``pyvenv.cfg``, run dirs by what hdppo writes in them."""
    root = Path(root)
    patterns, large = list(EXCLUDED_NAMES), []
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        keep = []
        for d in dirs:
            if any(fnmatch.fnmatchcase(d, n) for n in EXCLUDED_NAMES):
                continue
            try:
                inside = set(os.listdir(Path(here) / d))
            except OSError:
                inside = set()
            if "pyvenv.cfg" in inside or _is_run_dir(inside):
                patterns.append(_literal(rel / d))
                continue
            keep.append(d)
        dirs[:] = keep
        for f in files:
            try:
                size = (Path(here) / f).stat().st_size
            except OSError:
                continue
            if size > LARGE_FILE_BYTES:
                large.append(rel / f)
    patterns += [_literal(p) for p in large]
    return patterns, [p.as_posix() for p in large]


def runtime_env(root: str | Path) -> tuple[dict, list[str]]:
    """``{"working_dir": root, "excludes": [...]}`` and the large files it leaves out."""
    patterns, large = excludes(root)
    return {"working_dir": str(root), "excludes": patterns}, large


def use_working_dir(root: str | Path | None) -> None:
    """Let the driver import what the workers get: ``root`` first on ``sys.path``."""
    if root is None:
        return
    path = str(Path(root).resolve())
    if path not in sys.path:
        sys.path.insert(0, path)
