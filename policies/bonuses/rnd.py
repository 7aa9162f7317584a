"""Random network distillation (Burda et al. 2018, arXiv:1810.12894): a bonus with a learner side.

``target`` is a fixed random network, the same on every worker and the learner (seeded by the
layer name, so it never travels); ``predictor`` is trained by the layer's learner to match it
and published with each version. The prediction error is high on rarely seen states: that is
the bonus. Inputs are the layer's normalised observations, clipped to +-5 as in the paper.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch
from torch import nn

from .registry import Bonus, register_bonus
from ..networks import mlp
from ..normalizers import RunningStats


class RND(nn.Module):
    """The target and predictor networks; :meth:`error` is the per-sample prediction error."""

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


@register_bonus("rnd")
class RNDBonus(Bonus):
    """Worker side: the prediction error divided by its running std (the intrinsic reward's own
    normalization, kept per worker), times the coefficient. Learner side: the predictor learns
    the target on each update's observations. Reads ``spec.rnd_hidden``, ``rnd_out``, ``rnd_lr``."""

    learned = True

    def __init__(self, spec: Any, obs_dim: int, layer: str):
        super().__init__(spec, obs_dim, layer)
        self.rnd = RND(obs_dim, spec.rnd_hidden, spec.rnd_out, layer)
        self.stats = RunningStats(())
        self._optimizer: torch.optim.Optimizer | None = None  # the learner's only: workers never train

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        if self._optimizer is None:
            self._optimizer = torch.optim.Adam(self.rnd.predictor.parameters(), lr=self.spec.rnd_lr)
        return self._optimizer

    def __call__(self, obs: np.ndarray, coeff: float) -> np.ndarray:
        with torch.inference_mode():
            err = self.rnd.error(torch.as_tensor(obs)).numpy().astype(np.float64)
        self.stats.update(err)
        return (coeff * err / self.stats.std()).astype(np.float32)

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.rnd.predictor.load_state_dict(state)

    def train(self, obs: torch.Tensor, num_epochs: int, num_minibatches: int, rng: np.random.Generator) -> float:
        """The predictor learns the target on these states (the PPO update's epochs and minibatches)."""
        losses = []
        for _ in range(num_epochs):
            for idx in np.array_split(rng.permutation(len(obs)), num_minibatches):
                loss = self.rnd.error(obs[torch.as_tensor(idx)]).mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                losses.append(float(loss.detach()))
        return float(np.mean(losses))

    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.rnd.predictor.state_dict().items()}

    def checkpoint(self) -> dict[str, Any]:
        return {"rnd": self.rnd.state_dict(), "rnd_optimizer": self.optimizer.state_dict()}

    def restore(self, state: dict[str, Any]) -> None:
        self.rnd.load_state_dict(state["rnd"])
        self.optimizer.load_state_dict(state["rnd_optimizer"])
