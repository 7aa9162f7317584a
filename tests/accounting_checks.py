"""Checks on a group's sample ledger (``diagnostics.accounting``), from the samples' ids alone.

The ids (``Batch.ids``: worker incarnation, env copy, env step, lane) let a test say what the
counters cannot: that no env step was trained twice, and that every env step a worker took and
reported is either trained or counted as dropped (stale, or its rollout failed). Steps a worker
took in a rollout that never came back (its actor was killed mid-rollout, or the run ended) are
unknown to anyone; those are always the last steps of a copy, so "no gap before the last known
step of each copy" is what can be checked, and is.
"""
from __future__ import annotations

import numpy as np

from hdppo.platform.batch import ID_COPY, ID_LANE, ID_STEP, ID_WORKER
from hdppo.platform.messages import Accounting


def assert_accounted(acc: Accounting, every_step: bool = True) -> dict[str, np.ndarray]:
    """Assert that the ledger ``acc`` is sound; return its ids by fate and by worker.

    - every sample has an id (none is -1);
    - no id appears twice: nothing trained twice, nothing both trained and dropped;
    - with ``every_step`` (each lane decides at every env step, as in a flat env): for every
      worker incarnation, copy and lane, the known steps are exactly 0..last, so no rollout
      between two known ones vanished uncounted.
    """
    parts = {"trained": acc.trained, "stale": acc.stale, "failed": acc.failed}
    for fate, ids in parts.items():
        assert ids.ndim == 2 and ids.shape[1] == 4, (fate, ids.shape)
        assert (ids >= 0).all(), f"{fate}: {(ids < 0).any(axis=1).sum()} samples without an id"
    every = np.concatenate(list(parts.values()))
    uniq, counts = np.unique(every, axis=0, return_counts=True)
    dup = uniq[counts > 1]
    assert not len(dup), (f"{len(dup)} ids seen more than once (trained twice, or trained and dropped), "
                          f"e.g. {dup[:3].tolist()}: " + ", ".join(
                              f"{fate} {int((ids == dup[0]).all(axis=1).sum())}x" for fate, ids in parts.items()))
    if every_step and len(uniq):
        key = uniq[:, [ID_WORKER, ID_COPY, ID_LANE]]
        keys, which = np.unique(key, axis=0, return_inverse=True)
        which = which.reshape(-1)
        last = np.full(len(keys), -1, np.int64)
        np.maximum.at(last, which, uniq[:, ID_STEP])
        seen = np.bincount(which, minlength=len(keys))
        gaps = np.flatnonzero(seen != last + 1)
        assert not len(gaps), "steps never accounted for: " + "; ".join(
            f"worker {w} copy {c} lane {lane}: {last[g] + 1 - seen[g]} of steps 0..{last[g]} missing"
            for g in gaps[:3] for w, c, lane in [keys[g]])
    return parts | {"workers": np.unique(every[:, ID_WORKER])}
