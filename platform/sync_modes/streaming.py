"""The mechanism that ``soft`` and ``async`` share: no barrier. Every worker always has rollout
chunks queued (``dppo.chunks_in_flight`` of them on Ray, by default a whole rollout's) and is given
its next one as soon as one arrives, so collecting goes on while the driver waits on an update; an
update takes chunks in the order they arrive, from any workers (faster workers contribute more:
dynamic batching). Staleness is bounded per sample by the learner.

Why more than one chunk in flight: the driver blocks on the learner's update, and issues no call
meanwhile. With one chunk queued, a worker whose chunk ends before the update does sits idle
until it returns (MinAtar, one worker of 8 copies: chunks of 32 steps, ~30 ms, against a 130 ms
update; 5.4k env steps/s with one chunk queued, 5.7k with two, 7.6k with four, against pipeline's
7.9k). A worker runs its queued calls one after the other, each adopting the newest weights as it
starts."""
from __future__ import annotations

from typing import Any

from .base import Call, Source, SyncMode


class Streaming(SyncMode):
    streaming = True
    min_lag = 1
    barrier = False

    def __init__(self) -> None:
        self._inflight: dict[int, list[Call]] = {}  # worker index -> its chunks in flight, oldest first
        self._arrived: list[Call] = []              # finished, not used yet

    def needed(self, group: Any) -> int:
        """Chunks an update waits for."""
        raise NotImplementedError

    def taken(self, group: Any, arrived: int) -> int:
        """Chunks an update takes, of the ``arrived`` ones in hand."""
        raise NotImplementedError

    @staticmethod
    def depth(group: Any) -> int:
        """Chunks kept in flight per worker: ``chunks_in_flight`` (default ``chunks_per_worker``,
        a whole rollout) where calls run concurrently with the driver (Ray); 1 in one process,
        where a call has finished when it returns, so a second would only be collected early,
        with the same weights."""
        if not getattr(group.backend, "concurrent", True):
            return 1
        return group.dppo.chunks_in_flight or group.dppo.chunks_per_worker

    def _top_up(self, group: Any, i: int) -> None:
        calls = self._inflight.setdefault(i, [])
        while len(calls) < self.depth(group):
            calls.append(group.sample(i))

    def collect(self, group: Any) -> tuple[list[Any], list[Source]]:
        for i in range(len(group.workers)):
            self._top_up(group, i)
        need = self.needed(group)
        while len(self._arrived) < need:
            order = [(i, c) for i, calls in self._inflight.items() for c in calls]
            done = [order[j] for j in group.backend.ready([c.ref for _, c in order])]
            for i, c in done:
                self._inflight[i] = [x for x in self._inflight[i] if x is not c]
                self._arrived.append(c)
            for i in dict.fromkeys(i for i, _ in done):
                self._top_up(group, i)
        take = self.taken(group, len(self._arrived))
        used, self._arrived = self._arrived[:take], self._arrived[take:]
        return [c.ref for c in used], [c.source for c in used]

    def on_worker_failure(self, group: Any, index: int, cause: BaseException) -> None:
        """Every call queued on the dead worker is lost with it: queue as many on the new one."""
        if index in self._inflight:
            self._inflight[index] = []
            self._top_up(group, index)

    def on_resize(self, group: Any, num_workers: int) -> None:
        """Removed workers' chunks stay in hand, arrived or not: a finished one outlives its actor
        and is used as any other; one still in flight fails with its actor and is dropped as any
        failed call is (no sample it collected counts)."""
        for i in [i for i in self._inflight if i >= num_workers]:
            self._arrived.extend(self._inflight.pop(i))
