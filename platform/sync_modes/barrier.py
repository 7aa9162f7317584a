"""``sync``: a barrier. Every worker samples one equal rollout with the newest weights; the
update starts when the last one has arrived."""
from __future__ import annotations

from typing import Any

from .base import Source, SyncMode, register


@register("sync")
class Barrier(SyncMode):
    def collect(self, group: Any) -> tuple[list[Any], list[Source]]:
        calls = [group.sample(i) for i in range(len(group.workers))]
        refs = [c.ref for c in calls]
        group.backend.wait_all(refs)
        return refs, [c.source for c in calls]
