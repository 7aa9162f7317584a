"""Typed messages between the driver, the learners and the rollout workers.

Rollouts travel as :class:`hdppo.platform.batch.Rollout`; the others are here. Control data
(counters, versions, the command histogram, the coverage sample) travels in these fields, never
inside a metric dict: ``metrics`` holds only scalars to log, under the names in ``metrics.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np
import torch

from .batch import no_ids


@dataclass
class GradientResult:
    """What a worker sends the learner for one minibatch step in mode ``dppo``."""

    grads: Union[list[torch.Tensor], bytes]  # one tensor per parameter, or compressed (policies.compression)
    num_samples: int                         # samples the gradient was taken over (its averaging weight)
    info: dict[str, float] = field(default_factory=dict)  # loss terms on those samples: policy, value, ...


@dataclass
class Accounting:
    """Which samples an update trained and which it dropped, by id (``[n, 4]`` int64 rows of
    :data:`hdppo.platform.batch.ID_COLUMNS`); reported only with ``diagnostics.accounting``."""

    trained: np.ndarray  # used by the update (down-weighted ones included)
    stale: np.ndarray    # dropped: more than max_lag versions old
    failed: np.ndarray   # dropped: their rollout failed (the env raised), or their worker died during the update

    @staticmethod
    def empty() -> "Accounting":
        return Accounting(no_ids(), no_ids(), no_ids())

    @staticmethod
    def concat(parts: list["Accounting"]) -> "Accounting":
        return Accounting(*(np.concatenate([no_ids()] + [getattr(a, k) for a in parts])
                            for k in ("trained", "stale", "failed")))


@dataclass
class UpdateResult:
    """What a learner reports after an update (``update_central`` or ``end_dppo``)."""

    metrics: dict[str, float]        # scalars to log, under the names in metrics.py
    env_steps: int                   # the learner's env step counter after the update
    version: int                     # the weights version it published
    command_counts: Optional[list[int]] = None  # upper layers: how often each command was chosen
    # The coverage picture's sample: states [K, obs_dim] and the worker index of each [K].
    coverage: Optional[tuple[np.ndarray, np.ndarray]] = None
    accounting: Optional[Accounting] = None  # with diagnostics.accounting: the samples' fate, by id
