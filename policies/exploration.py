"""Exploration bonuses: count-based and RND.

Count-based: states hashed with SimHash (Tang et al. 2017, "#Exploration", arXiv:1611.04717):
sign(A s) for a fixed Gaussian A, the same on every worker (seeded by the layer), counted per
worker; bonus = coeff / sqrt(n(s)).
"""
from __future__ import annotations

import zlib

import numpy as np
import torch
from torch import nn

from hdppo.policies.networks import mlp
from hdppo.policies.normalizers import RunningStats


class CountBonus:
    def __init__(self, obs_dim: int, bits: int, layer: str):
        rng = np.random.default_rng(zlib.crc32(layer.encode()))
        self.projection = rng.normal(size=(obs_dim, bits))
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


class RND(nn.Module):
    """Random network distillation (Burda et al. 2018, arXiv:1810.12894).

    ``target`` is a fixed random network, the same on every worker and the learner (seeded by
    the layer name, so it never travels); ``predictor`` is trained by the layer's learner to
    match it. The prediction error is high on rarely seen states: that is the bonus. Inputs are
    the layer's normalised observations, clipped to +-5 as in the paper.
    """

    def __init__(self, obs_dim: int, hidden: list[int], out: int, layer: str):
        super().__init__()
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(zlib.crc32(layer.encode()))
        self.target = mlp(obs_dim, hidden, out, "relu", 1.0)
        torch.random.set_rng_state(gen_state)
        self.target.requires_grad_(False)
        self.predictor = mlp(obs_dim, hidden, out, "relu", 1.0)

    def error(self, obs: torch.Tensor) -> torch.Tensor:
        """Per-sample squared prediction error ``[B]``."""
        x = obs.clamp(-5.0, 5.0)
        return (self.predictor(x) - self.target(x)).pow(2).mean(-1)


class RNDBonus:
    """A worker's RND bonus: the prediction error divided by its running std (the intrinsic
    reward's own normalization, kept per worker), times the coefficient."""

    def __init__(self, rnd: RND):
        self.rnd = rnd
        self.stats = RunningStats(())

    def __call__(self, obs: np.ndarray, coeff: float) -> np.ndarray:
        with torch.inference_mode():
            err = self.rnd.error(torch.as_tensor(obs)).numpy().astype(np.float64)
        self.stats.update(err)
        return (coeff * err / self.stats.std()).astype(np.float32)
