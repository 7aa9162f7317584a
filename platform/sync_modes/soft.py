"""``soft``: no barrier (see :mod:`.streaming`); an update waits for a full batch
(``chunks_per_worker`` chunks per worker, from any workers), and workers adopt newer weights
inside a rollout every ``dppo.refresh_every`` steps, each sample keeping the version that chose it."""
from __future__ import annotations

from typing import Any

from .base import register
from .streaming import Streaming


@register("soft")
class Soft(Streaming):
    refresh_in_rollout = True

    def needed(self, group: Any) -> int:
        return len(group.workers) * group.dppo.chunks_per_worker

    def taken(self, group: Any, arrived: int) -> int:
        return self.needed(group)
