"""The mechanism that ``soft`` and ``async`` share: no barrier. Every worker always has a rollout
chunk in flight and is given its next one as soon as one arrives, so collecting never waits on
the update; an update takes chunks in the order they arrive, from any workers (faster workers
contribute more: dynamic batching). Staleness is bounded per sample by the learner."""
from __future__ import annotations

from typing import Any

from .base import Call, Source, SyncMode


class Streaming(SyncMode):
    streaming = True
    min_lag = 1
    barrier = False

    def __init__(self) -> None:
        self._inflight: dict[int, Call] = {}  # worker index -> its chunk in flight
        self._arrived: list[Call] = []        # finished, not used yet

    def needed(self, group: Any) -> int:
        """Chunks an update waits for."""
        raise NotImplementedError

    def taken(self, group: Any, arrived: int) -> int:
        """Chunks an update takes, of the ``arrived`` ones in hand."""
        raise NotImplementedError

    def collect(self, group: Any) -> tuple[list[Any], list[Source]]:
        for i in range(len(group.workers)):
            if i not in self._inflight:
                self._inflight[i] = group.sample(i)
        need = self.needed(group)
        while len(self._arrived) < need:
            order = list(self._inflight)
            for j in group.backend.ready([self._inflight[i].ref for i in order]):
                i = order[j]
                self._arrived.append(self._inflight.pop(i))
                self._inflight[i] = group.sample(i)
        take = self.taken(group, len(self._arrived))
        used, self._arrived = self._arrived[:take], self._arrived[take:]
        return [c.ref for c in used], [c.source for c in used]

    def on_worker_failure(self, group: Any, index: int, cause: BaseException) -> None:
        if index in self._inflight:
            self._inflight[index] = group.sample(index)

    def on_resize(self, group: Any, num_workers: int) -> None:
        """Removed workers' chunks stay in hand, arrived or not: a finished one outlives its actor
        and is used as any other; one still in flight fails with its actor and is dropped as any
        failed call is (no sample it collected counts)."""
        for i in [i for i in self._inflight if i >= num_workers]:
            self._arrived.append(self._inflight.pop(i))
