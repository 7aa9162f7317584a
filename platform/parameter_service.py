"""The global parameter service: for each layer, the newest weights version and normalizer state.

Weights are stored as an object reference inside a one-element list (so that Ray passes the
reference through instead of resolving it): the learner does one ``ray.put`` per version and
every worker fetches that same object, however many workers there are.
"""
from __future__ import annotations

from typing import Any, Optional


class ParameterService:
    def __init__(self) -> None:
        self._records: dict[str, dict[str, Any]] = {}

    def publish(self, layer: str, version: int, weights: list, obs_stats: Optional[dict] = None,
                reward_stats: Optional[dict] = None, progress: float = 0.0, rnd: Optional[list] = None) -> int:
        """Record a new version; ``weights`` is ``[ref]``. Older versions are never re-published."""
        current = self._records.get(layer)
        if current is not None and version < current["version"]:
            raise ValueError(f"layer {layer!r}: version {version} is older than the published {current['version']}")
        self._records[layer] = {"version": version, "weights": weights, "obs_stats": obs_stats,
                                "reward_stats": reward_stats, "progress": progress, "rnd": rnd}
        return version

    def latest(self, layer: str) -> Optional[dict[str, Any]]:
        return self._records.get(layer)

    def versions(self) -> dict[str, int]:
        return {layer: rec["version"] for layer, rec in self._records.items()}
