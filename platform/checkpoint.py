"""Checkpoints: the whole training state, written atomically, loaded without unpickling code.

A checkpoint is ``checkpoints/ckpt_<update>.pt``: written to a temporary file in the same
folder, flushed, then renamed, so a crash leaves either the old set or the new file, never half
of one. Loading uses ``torch.load(weights_only=True)``: tensors, numbers, strings, lists and
dicts only, so a checkpoint from elsewhere cannot run code.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from ..policies.networks import upgrade_image_encoders
from .errors import CheckpointError

_NAME = re.compile(r"^ckpt_(\d+)\.pt$")
KEEP = 3


# ``train.eval_every``: the weights that scored best on the periodic evaluation, and what they
# scored. Not named ckpt_*, so never pruned, never taken for the latest, never resumed from.
BEST = "best.pt"
BEST_INFO = "best.json"


def _umask() -> int:
    mask = os.umask(0)   # reading it means setting it: done once, at import, before any thread writes
    os.umask(mask)
    return mask


_UMASK = _umask()


def _write_atomically(final: Path, write: Callable[[Any], None]) -> None:
    """``write(file)`` into a temporary file beside ``final``, flushed, then renamed onto it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{final.stem}_", suffix=".tmp", dir=final.parent)
    try:
        # mkstemp makes the file 0600; a checkpoint is read by whoever reads the run's other files
        # (a teammate, an eval or export service under another uid): the mode open() would give.
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint(run_dir: Path, update: int, state: dict[str, Any]) -> Path:
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"ckpt_{update:07d}.pt"
    _write_atomically(final, lambda fh: torch.save(state, fh))
    for old in list_checkpoints(run_dir)[:-KEEP]:
        old.unlink(missing_ok=True)
    return final


def save_best(run_dir: Path, state: dict[str, Any], info: dict[str, Any]) -> Path:
    """``checkpoints/best.pt`` (the state) and ``checkpoints/best.json`` (``info``: its score,
    update, env steps), each written atomically, the weights first: a crash between the two
    leaves better weights beside the previous, lower score, never a score beside weights that
    did not earn it."""
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    _write_atomically(folder / BEST, lambda fh: torch.save(state, fh))
    _write_atomically(folder / BEST_INFO, lambda fh: fh.write(json.dumps(info, indent=2).encode()))
    return folder / BEST


def best_info(run_dir: Path) -> dict[str, Any] | None:
    """What ``checkpoints/best.pt`` scored (``save_best``'s info), or None where there is none."""
    path = Path(run_dir) / "checkpoints" / BEST_INFO
    if not (path.is_file() and (path.parent / BEST).is_file()):
        return None
    return json.loads(path.read_text())


def policy_checkpoint(run_dir: Path, which: str = "latest") -> Path:
    """The checkpoint whose weights a run is evaluated or exported with: ``latest`` (the last
    one written) or ``best`` (``train.eval_every``'s best). A clear error where there is none."""
    run_dir = Path(run_dir)
    if which == "best":
        path = run_dir / "checkpoints" / BEST
        if not path.is_file():
            raise CheckpointError(f"{run_dir}/checkpoints has no {BEST}: it is written by runs trained with "
                                  "train.eval_every > 0 (an evaluation every N updates, keeping the best weights). "
                                  "Use the latest checkpoint (--checkpoint latest) or train with train.eval_every set.")
        return path
    if which != "latest":
        raise CheckpointError(f"unknown checkpoint {which!r}: use 'latest' or 'best'")
    found = latest_checkpoint(run_dir)
    if found is None:
        raise CheckpointError(f"{run_dir}/checkpoints holds no checkpoint yet; train longer or pick another run.")
    return found


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
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        ours = path.parent.name == "checkpoints" and path.name.startswith("ckpt_")
        raise CheckpointError(f"checkpoint {path} cannot be loaded safely ({type(exc).__name__}: {first}). "
                              + ("It may be truncated (a run stopped while writing it): move it out of checkpoints/ "
                                 "to resume from the one before." if ours else
                                 "It is not an hdppo checkpoint: point at a run dir or at a .pt file in a run's "
                                 "checkpoints/.")) from None


def sampled_env_steps(state: dict[str, Any]) -> int:
    """Env steps a checkpoint's groups had sampled, all groups together (each group's learners
    share one counter: its first learner's)."""
    return int(sum(next(iter(g["learners"].values()))["env_steps"] for g in state["groups"].values()))


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


def layout_mismatch(state: dict[str, Any], layer_groups: list[list[str]], fixed: list[str]) -> str | None:
    """How a loaded checkpoint's layers and DPPO groups differ from a config's (``layer_groups``
    and its ``fixed`` layers), in a few words; None where they are the same."""
    groups = state.get("groups", {})
    saved_layers = list(learner_states(state))
    now_layers = [n for g in layer_groups for n in g] + list(fixed)
    if sorted(saved_layers) != sorted(now_layers):
        return (f"it holds the layers {', '.join(map(repr, saved_layers)) or 'none'}, this config has "
                f"{', '.join(map(repr, now_layers)) or 'none'}")
    now_groups = ["+".join(g) for g in layer_groups]
    saved_fixed = list(state.get("fixed", {}))
    if sorted(groups) != sorted(now_groups) or sorted(saved_fixed) != sorted(fixed):
        return (f"its DPPO groups are {', '.join(map(repr, groups))} (frozen: {', '.join(saved_fixed) or 'none'}), "
                f"this config's are {', '.join(map(repr, now_groups))} (frozen: {', '.join(fixed) or 'none'})")
    return None


def policy_mismatch(saved: dict[str, Any], current: dict[str, list[int]]) -> str | None:
    """How a checkpoint's policy weights (a state dict) differ from a model's parameter shapes
    (``current``: name -> shape), in a few words; None where they fit. Weights saved in an
    earlier layout that loading converts (image encoders' ``linear``) are compared as converted."""
    saved, _ = upgrade_image_encoders(saved)
    saved_shapes = {k: list(getattr(v, "shape", ())) for k, v in saved.items()}
    missing = [k for k in current if k not in saved_shapes]
    extra = [k for k in saved_shapes if k not in current]
    wrong = [k for k in current if k in saved_shapes and saved_shapes[k] != list(current[k])]
    if wrong:
        k = wrong[0]
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        return f"its weights {k} are {saved_shapes[k]} in the checkpoint, {list(current[k])} with this config{more}"
    if missing:
        return (f"this config's network has weights the checkpoint lacks ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''})")
    if extra:
        return (f"the checkpoint holds weights this config's network lacks ({', '.join(extra[:3])}"
                f"{', ...' if len(extra) > 3 else ''})")
    return None
