"""Count-based bonus: states hashed with SimHash (Tang et al. 2017, "#Exploration",
arXiv:1611.04717): sign(A s) for a fixed Gaussian A, the same on every worker (seeded by the
layer), counted per worker; bonus = coeff / sqrt(n(s)). No learner side.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from .registry import Bonus, register_bonus


@register_bonus("count")
class CountBonus(Bonus):
    """Reads ``spec.hash_bits`` (bits per state code)."""

    def __init__(self, spec: Any, obs_dim: int, layer: str):
        super().__init__(spec, obs_dim, layer)
        rng = np.random.default_rng(zlib.crc32(layer.encode()))
        self.projection = rng.normal(size=(obs_dim, spec.hash_bits))
        self.counts: dict[bytes, int] = {}

    def keys(self, obs: np.ndarray) -> list[bytes]:
        """SimHash codes ``[B]`` of normalized observations ``[B, obs_dim]``."""
        return [row.tobytes() for row in np.packbits(obs @ self.projection > 0, axis=1)]

    def __call__(self, obs: np.ndarray, coeff: float) -> np.ndarray:
        """Count the states and return their bonuses ``[B]``."""
        out = np.empty(len(obs), np.float32)
        for i, key in enumerate(self.keys(obs)):
            n = self.counts.get(key, 0) + 1
            self.counts[key] = n
            out[i] = coeff / np.sqrt(n)
        return out
