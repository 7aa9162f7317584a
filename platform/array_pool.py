"""Destination arrays of large, repeated copies, reused once nothing else holds them.

Writing a new array of tens of MB page-faults on every 4 KB of it: battle_v4's harvest of 12k
observation rows of 845 values took ~13 ms into a new array against ~3 ms into memory already
touched, and a learner's concatenation of two such rollouts ~19 against ~11 ms (its cast to
bfloat16 ~28 against ~14). A pool keeps, per key, up to ``keep`` arrays made by earlier calls and
hands one out again only once its reference count is the pool's alone: an array still held by a
consumer (a batch a learner is training on, a view being serialised by Ray, a tensor made by
``torch.from_numpy``: each keeps a reference to it) is never written over.
"""
from __future__ import annotations

import sys

import numpy as np

REUSE_MIN_BYTES = 1 << 20  # below this a new array costs less than the pool's bookkeeping
REUSE_KEEP = 2             # arrays kept per key: one a consumer still holds, one to write into


class ArrayPool:
    """``take(key, rows, tail, dtype)``: an array ``[rows, *tail]`` to write into, a view of the
    leading rows of a kept one that is free and large enough, else of a new one (kept when the pool
    has room for it, or in place of a free one too small)."""

    def __init__(self, keep: int = REUSE_KEEP):
        self.keep = keep
        self.arrays: dict[str, list[np.ndarray]] = {}

    def take(self, key: str, rows: int, tail: tuple[int, ...], dtype: np.dtype | type,
             capacity: int | None = None) -> np.ndarray:
        """``capacity`` (>= ``rows``): the rows of a new array, for callers whose row counts vary
        up to a known bound (a sampler's harvest)."""
        pool = self.arrays.setdefault(key, [])
        dtype = np.dtype(dtype)
        # 2: the list's reference and getrefcount's argument: nothing else holds it
        free = [i for i in range(len(pool)) if sys.getrefcount(pool[i]) == 2]
        fit = next((i for i in free if pool[i].shape[0] >= rows and pool[i].shape[1:] == tuple(tail)
                    and pool[i].dtype == dtype), None)
        if fit is not None:
            return pool[fit][:rows]
        dest = np.empty((max(rows, capacity or 0), *tail), dtype)
        if free:  # a free one that does not fit (the rows grew, or the shape changed): replace it
            pool[free[0]] = dest
        elif len(pool) < self.keep:
            pool.append(dest)
        return dest[:rows]


def reusable(nbytes: int) -> bool:
    """Whether a copy of ``nbytes`` is worth a pooled destination (see REUSE_MIN_BYTES)."""
    return nbytes >= REUSE_MIN_BYTES
