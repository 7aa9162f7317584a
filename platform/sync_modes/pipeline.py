"""``pipeline``: the barrier of ``sync``, but each worker starts its next rollout as soon as its
current one arrives, so the next batch is collected while the learners update on this one
(its samples are then one version behind; PPO's ratio corrects for that)."""
from __future__ import annotations

from typing import Any

from .base import Call, Source, SyncMode, register


@register("pipeline")
class Pipeline(SyncMode):
    min_lag = 1
    barrier = False

    def __init__(self) -> None:
        self._next: list[Call] | None = None  # the calls already in flight for the next update

    def collect(self, group: Any) -> tuple[list[Any], list[Source]]:
        """Wait for this batch; as each worker's rollout arrives, start its next one. A worker that
        finishes first does not sit idle until the slowest is done (its next rollout acts with the
        same weights either way: the update on this batch has not happened yet)."""
        pending = self._next or [group.sample(i) for i in range(len(group.workers))]
        nxt: list[Call | None] = [None] * len(pending)
        waiting = list(range(len(pending)))
        while waiting:
            for j in sorted(group.backend.ready([pending[i].ref for i in waiting]), reverse=True):
                i = waiting.pop(j)
                nxt[i] = group.sample(i)
        self._next = nxt  # type: ignore[assignment]
        return [c.ref for c in pending], [c.source for c in pending]

    def on_worker_failure(self, group: Any, index: int, cause: BaseException) -> None:
        if self._next is not None and index < len(self._next):  # that call went to the dead worker
            self._next[index] = group.sample(index)

    def on_resize(self, group: Any, num_workers: int) -> None:
        if self._next is None:
            return
        del self._next[num_workers:]
        while len(self._next) < num_workers:
            self._next.append(group.sample(len(self._next)))
