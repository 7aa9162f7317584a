"""``async``: no barrier (see :mod:`.streaming`); an update takes whatever chunks have arrived,
as soon as one has. (``async`` is a keyword, hence the module's name.)"""
from __future__ import annotations

from typing import Any

from .base import register
from .streaming import Streaming


@register("async")
class Async(Streaming):
    def needed(self, group: Any) -> int:
        return 1

    def taken(self, group: Any, arrived: int) -> int:
        return arrived
