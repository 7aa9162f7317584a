"""One DPPO group: a learner and its pool of rollout workers, for one layer.

One call of :meth:`DPPOGroup.iteration` is one synchronous update: every worker samples with
the newest weights, then the learner updates (mode ``central``), or the workers compute
gradients on their own shards that the learner averages (mode ``dppo``).
"""
from __future__ import annotations

import math
import time
from typing import Any

import gymnasium as gym
import numpy as np

from hdppo.platform import metrics as M
from hdppo.platform.config import Config
from hdppo.platform.errors import RayStartError
from hdppo.platform.learner import Learner
from hdppo.platform.rollout_worker import RolloutWorker


PLACEMENT_TIMEOUT_S = 120


def group_cpus(total_cpus: float, num_workers: int, worker_cpus: float | None) -> tuple[float, float]:
    """(learner, per-worker) CPUs to declare. Workers and learner alternate in a synchronous
    update, so on a small machine they share cores: declared shares sum to the machine."""
    if worker_cpus is not None:
        return min(1.0, max(total_cpus - worker_cpus * num_workers, 0.01)), worker_cpus
    if total_cpus >= num_workers + 1:
        return 1.0, 1.0
    # Floor, not round: shares rounded up can sum to more than the machine and leave an actor
    # unschedulable forever.
    share = math.floor(1000 * total_cpus / (num_workers + 1)) / 1000
    return share, share


class DPPOGroup:
    def __init__(self, cfg: Config, layer_index: int, backend: Any, service: Any, obs_dim: int,
                 action_space: gym.Space, num_workers: int, total_cpus: float):
        self.cfg = cfg
        self.layer = cfg.layers[layer_index]
        self.backend = backend
        self.num_workers = num_workers
        learner_cpus, worker_cpus = group_cpus(total_cpus, num_workers, self.layer.dppo.worker_cpus)
        self.learner = backend.make(Learner, cfg, layer_index, obs_dim, action_space, service, backend.name,
                                    num_cpus=learner_cpus)
        self.workers = [backend.make(RolloutWorker, cfg, layer_index, i, num_workers, service,
                                     num_cpus=worker_cpus) for i in range(num_workers)]
        pings = [backend.call(w, "ping") for w in self.workers]
        if not backend.wait_all(pings, timeout=PLACEMENT_TIMEOUT_S):
            raise RayStartError(
                f"layer {self.layer.name!r}: {num_workers} rollout workers x {worker_cpus} CPUs plus a learner "
                f"({learner_cpus} CPUs) could not all be placed within {PLACEMENT_TIMEOUT_S}s on a cluster with "
                f"{total_cpus} CPUs. Lower layers[].dppo.num_workers or dppo.worker_cpus, or add nodes.")
        backend.get(pings)  # re-raises an actor's construction error (a broken env, say)
        self._last_env_steps = float(self.counters()["env_steps"])

    def iteration(self) -> dict[str, float]:
        t0 = time.perf_counter()
        if self.layer.dppo.mode == "central":
            rollouts = [self.backend.call(w, "sample") for w in self.workers]
            self.backend.wait_all(rollouts)
            sample_s = time.perf_counter() - t0
            out = self.backend.get(self.backend.call(self.learner, "update_central", *rollouts))
        else:
            stats = self.backend.get([self.backend.call(w, "sample_stats_only") for w in self.workers])
            sample_s = time.perf_counter() - t0
            out = self._dppo_update(stats)
        wall = time.perf_counter() - t0
        steps = out["_env_steps"] - self._last_env_steps
        self._last_env_steps = out["_env_steps"]
        out[M.PERF_SAMPLE_S] = sample_s
        out[M.PERF_UPDATE_S] = wall - sample_s
        out[M.PERF_ENV_STEPS_PER_S] = steps / wall
        return out

    def _dppo_update(self, stats: list) -> dict[str, float]:
        """Epochs x minibatches of (workers' gradients -> learner's averaged step).

        Object references flow straight from one call to the next (the learner's new weights
        into the workers' next gradient calls, their gradients into the learner), so the driver
        does not wait on each step; it synchronises once per epoch, and only for the KL stop.
        """
        b, p = self.backend, self.layer.ppo
        start = b.get(b.call(self.learner, "begin_dppo", *stats))
        n = sum(s.env_steps for s in stats)
        k = max(1, round(n / p.minibatch_size))
        weights: Any = start["weights"][0]
        for epoch in range(p.num_epochs):
            for mb in range(k):
                grads = [b.call(w, "gradient", weights, epoch, mb, k, start["adv_mean"], start["adv_std"],
                                start["entropy_coeff"]) for w in self.workers]
                weights = b.call(self.learner, "apply_gradients", *grads)
            if p.target_kl is not None and b.get(b.call(self.learner, "epoch_kl", k)) > p.target_kl:
                break
        return b.get(b.call(self.learner, "end_dppo"))

    def get_state(self) -> dict[str, Any]:
        b = self.backend
        return {"learner": b.get(b.call(self.learner, "get_state")),
                "workers": b.get([b.call(w, "get_state") for w in self.workers])}

    def set_state(self, state: dict[str, Any]) -> None:
        b = self.backend
        b.get(b.call(self.learner, "set_state", state["learner"]))
        self._last_env_steps = float(state["learner"]["env_steps"])
        for w, ws in zip(self.workers, state["workers"]):
            b.get(b.call(w, "set_state", ws))

    def counters(self) -> dict[str, int]:
        return self.backend.get(self.backend.call(self.learner, "counters"))

    def shutdown(self) -> None:
        for h in [self.learner, *self.workers]:
            self.backend.kill(h)

