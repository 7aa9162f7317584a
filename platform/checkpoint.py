"""Checkpoints: the whole training state, written atomically, loaded without unpickling code.

A checkpoint is ``checkpoints/ckpt_<update>.pt``: written to a temporary file in the same
folder, flushed, then renamed, so a crash leaves either the old set or the new file, never half
of one. Loading uses ``torch.load(weights_only=True)``: tensors, numbers, strings, lists and
dicts only, so a checkpoint from elsewhere cannot run code.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError

_NAME = re.compile(r"^ckpt_(\d+)\.pt$")
KEEP = 3


def save_checkpoint(run_dir: Path, update: int, state: dict[str, Any]) -> Path:
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"ckpt_{update:07d}.pt"
    fd, tmp = tempfile.mkstemp(prefix=".ckpt_", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for old in list_checkpoints(run_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure here means the same thing to the user
        raise CheckpointError(f"checkpoint {path} cannot be loaded safely ({type(exc).__name__}: {exc}). "
                              "It may be truncated or not an hdppo checkpoint; delete it to fall back "
                              "to the previous one.") from None


def learner_states(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every layer's learner state in a loaded checkpoint (trained groups and fixed layers)."""
    out: dict[str, dict[str, Any]] = dict(state.get("fixed", {}))
    for key, group in state["groups"].items():
        if "learners" in group:
            out.update(group["learners"])
        else:  # format 1: one single-layer group, keyed by its layer
            out[key] = group["learner"]
    return out


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint file, or the latest checkpoint of a run dir."""
    p = Path(path)
    if p.is_file():
        return p
    found = latest_checkpoint(p)
    if found is None:
        raise CheckpointError(f"{p} is neither a checkpoint file nor a run dir with checkpoints/. "
                              "Give a path like runs/<name> or runs/<name>/checkpoints/ckpt_0000100.pt.")
    return found
