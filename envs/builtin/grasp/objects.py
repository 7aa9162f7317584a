"""The objects of grasp: pybullet_data's ``random_urdfs`` (1000 random blobs, ``000`` ... ``999``),
split once and for all into a training set and a held-out set.

The split is fixed by the object's number, not drawn: every tenth object (``000``, ``010``, ...,
``990``) is held out (100 objects), the other 900 are for training. Nothing random, so the same
objects are held out on every machine and in every run; the two sets are disjoint by
construction (``tests/test_grasp.py`` checks it).
"""
from __future__ import annotations

import os
from typing import Iterable, Sequence

from ...errors import EnvError

NUM_OBJECTS = 1000
HELDOUT_EVERY = 10
SPLITS = ("train", "heldout")


def split_ids(split: str) -> list[int]:
    """The object numbers of a split: ``"train"`` (900) or ``"heldout"`` (100)."""
    if split == "train":
        return [i for i in range(NUM_OBJECTS) if i % HELDOUT_EVERY != 0]
    if split == "heldout":
        return [i for i in range(0, NUM_OBJECTS, HELDOUT_EVERY)]
    raise EnvError(f"grasp: objects={split!r} is not a split. Use objects='train' (900 objects, the ones "
                   f"whose number is not a multiple of {HELDOUT_EVERY}), objects='heldout' (the 100 "
                   "multiples of 10: 000, 010, ..., 990), or a list of object numbers 0-999.")


def resolve_objects(objects: str | Sequence[int] | Iterable[int]) -> tuple[str, list[int]]:
    """``(split name, object numbers)`` for the env's ``objects`` argument: a split name or a list
    of numbers (named ``"custom"``); raises :class:`EnvError` saying the fix."""
    if isinstance(objects, str):
        return objects, split_ids(objects)
    try:
        ids = [int(i) for i in objects]
    except (TypeError, ValueError):
        raise EnvError(f"grasp: objects={objects!r}: give 'train', 'heldout' or a list of object numbers 0-999.") from None
    bad = [i for i in ids if not 0 <= i < NUM_OBJECTS]
    if not ids or bad:
        raise EnvError(f"grasp: objects={objects!r}: {'no object numbers' if not ids else f'numbers out of range {bad[:5]}'}. "
                       "Object numbers are 0-999 (pybullet_data/random_urdfs/000 ... 999).")
    return "custom", ids


def urdf_path(data_path: str, number: int) -> str:
    """The URDF file of object ``number`` under pybullet_data's folder."""
    name = f"{number:03d}"
    path = os.path.join(data_path, "random_urdfs", name, f"{name}.urdf")
    if not os.path.exists(path):
        raise EnvError(f"grasp: object file {path} is missing. Reinstall pybullet (its pybullet_data ships "
                       "random_urdfs): pip install --force-reinstall pybullet")
    return path
