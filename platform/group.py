"""One DPPO group: a pool of rollout workers and one learner per layer of the group.

By default every layer is its own group. One call of :meth:`DPPOGroup.iteration` is one update
of the group's layers. How the samples get there is the group's ``dppo.sync``:

- ``sync``: a barrier. Every worker samples one equal rollout with the newest weights, then each
  learner updates (mode ``central``), or the workers compute gradients on their own shards that
  the learner averages (mode ``dppo``). ``pipeline`` starts the next rollouts before the update.
- ``soft`` / ``async``: no barrier. Every worker always has a rollout chunk in flight; the update
  takes the first chunks to arrive (a full batch for ``soft``, whatever has arrived for
  ``async``), so fast workers contribute more. Staleness is bounded per sample by the learner.

The pool can be resized between updates (:meth:`DPPOGroup.resize`): by ``hdppo scale``, or by
the ``dppo.elastic`` policy on CPU utilization.
"""
from __future__ import annotations

import math
import time
from typing import Any


from hdppo.platform import metrics as M
from hdppo.platform.config import Config
from hdppo.platform.errors import HdppoError, RayStartError
from hdppo.platform.learner import Learner
from hdppo.platform.rollout_worker import RolloutWorker

PLACEMENT_TIMEOUT_S = 120


def group_cpus(total_cpus: float, num_workers: int, worker_cpus: float | None, num_learners: int = 1) -> tuple[float, float]:
    """(per-learner, per-worker) CPUs to declare. Workers and learners alternate in a synchronous
    update, so on a small machine they share cores: declared shares sum to the machine."""
    if worker_cpus is not None:
        return max(min(1.0, (total_cpus - worker_cpus * num_workers) / num_learners), 0.01), worker_cpus
    if total_cpus >= num_workers + num_learners:
        return 1.0, 1.0
    # Floor, not round: shares rounded up can sum to more than the machine and leave an actor
    # unschedulable forever.
    share = math.floor(1000 * total_cpus / (num_workers + num_learners)) / 1000
    return share, share


class DPPOGroup:
    def __init__(self, cfg: Config, layers: list[str], backend: Any, service: Any, dims: dict[str, dict],
                 num_workers: int, total_cpus: float, env_step_budget: int | None = None):
        self.cfg = cfg
        self.layers = list(layers)
        self.name = "+".join(layers)
        self.first = cfg.layer(layers[0])
        self.backend = backend
        self.num_workers = num_workers
        learner_cpus, worker_cpus = group_cpus(total_cpus, num_workers, self.first.dppo.worker_cpus, len(layers))
        self.learners = {name: backend.make(Learner, cfg, name, dims[name]["obs_dim"], dims[name]["action_space"],
                                            service, backend.name, dims[name].get("critic_dim"), env_step_budget,
                                            num_cpus=learner_cpus) for name in layers}
        self._worker_args = (service, worker_cpus)
        self.workers = [self._make_worker(i) for i in range(num_workers)]
        self.generation = [0] * num_workers  # bumped when a worker is replaced
        self.replaced = 0
        self._next: list[Any] | None = None  # pipelined sample calls already in flight
        self._inflight: dict[int, tuple[int, Any]] = {}  # streaming: worker -> (generation, call)
        self._arrived: list[tuple[int, int, Any]] = []   # streaming: finished, not yet used
        self._updates = 0
        self._meter = None
        if self.first.dppo.elastic is not None:
            from hdppo.platform.elastic import CpuMeter

            self._meter = CpuMeter()
            self._util: list[float] = []
        # Learners too: each publishes its first weights while it starts, and a worker that samples
        # before that would act with its own random initialisation.
        pings = [backend.call(w, "ping") for w in self.workers] + [backend.call(h, "counters") for h in self.learners.values()]
        if not backend.wait_all(pings, timeout=PLACEMENT_TIMEOUT_S):
            raise RayStartError(
                f"group {self.name!r}: {num_workers} rollout workers x {worker_cpus} CPUs plus {len(layers)} learner(s) "
                f"({learner_cpus} CPUs each) could not all be placed within {PLACEMENT_TIMEOUT_S}s on a cluster with "
                f"{total_cpus} CPUs. Lower layers[].dppo.num_workers or dppo.worker_cpus, or add nodes.")
        backend.get(pings)  # re-raises an actor's construction error (a broken env, say)
        self.env_steps = float(self.counters()["env_steps"])

    def _make_worker(self, index: int) -> Any:
        service, cpus = self._worker_args
        return self.backend.make(RolloutWorker, self.cfg, self.layers, index, self.num_workers, service, num_cpus=cpus)

    def _replace(self, i: int, cause: BaseException) -> None:
        """A fresh worker i; its calls already in flight (pipelined or streaming) are re-issued."""
        self.backend.kill(self.workers[i])
        self.workers[i] = self._make_worker(i)
        self.generation[i] += 1
        self.replaced += 1
        if self._next is not None:  # the pipelined call went to the dead worker
            self._next[i] = self.backend.call(self.workers[i], "sample")
        if i in self._inflight:
            self._inflight[i] = (self.generation[i], self.backend.call(self.workers[i], "sample"))
        print(f"[hdppo] group {self.name!r}: worker {i} failed ({type(cause).__name__}: "
              f"{str(cause).splitlines()[0] if str(cause) else ''}); replaced, its rollout dropped", flush=True)

    def _survivors(self, results: list[Any], sources: list[tuple[int, int]]) -> list[Any]:
        """Keep the rollouts that arrived; replace each worker whose rollout failed (its actor
        died, or its env raised). A failed rollout is dropped whole, so nothing counts twice.
        ``sources`` says which worker (and which incarnation of it) made each result, so a
        worker already replaced is not replaced again. A user error (hdppo's own, e.g. NaN
        from the env) is not retried: it stops the run."""
        kept = []
        for r, (i, gen) in zip(results, sources):
            if not isinstance(r, BaseException):
                kept.append(r)
                continue
            cause = getattr(r, "cause", None) or r
            if isinstance(cause, HdppoError):
                raise cause
            if i < len(self.workers) and gen == self.generation[i]:
                self._replace(i, cause)
        if not kept and not self.first.dppo.streaming:
            raise RuntimeError(f"group {self.name!r}: every worker failed in the same iteration")
        return kept

    def _update_with_failover(self, pending: list[Any], sources: list[tuple[int, int]]) -> dict[str, dict[str, float]] | None:
        """The update on ``pending``; if some rollouts failed, on the others. None when a
        streaming group had only failed chunks in hand (it then collects more)."""
        try:
            # The common case: rollouts go from the workers to the learners by reference,
            # never through this process.
            return self._update_central(pending)
        except Exception as exc:  # noqa: BLE001 - sorted out below: a failed worker, or not
            results = self.backend.outcomes(pending)
            if not any(isinstance(r, BaseException) for r in results):
                raise exc
            kept = self._survivors(results, sources)
            return self._update_central(kept) if kept else None

    def _update_central(self, rollouts: list[Any]) -> dict[str, dict[str, float]]:
        b = self.backend
        futures = {name: b.call(learner, "update_central", *rollouts) for name, learner in self.learners.items()}
        return {name: b.get(f) for name, f in futures.items()}

    def _stream(self) -> tuple[list[Any], list[tuple[int, int]]]:
        """Sync soft/async: the first chunks to arrive, from any workers. Every worker is given
        its next chunk as soon as one arrives, so collecting never waits on the update."""
        b, d = self.backend, self.first.dppo
        for i, w in enumerate(self.workers):
            if i not in self._inflight:
                self._inflight[i] = (self.generation[i], b.call(w, "sample"))
        need = len(self.workers) * d.chunks_per_worker if d.sync == "soft" else 1
        while len(self._arrived) < need:
            order = list(self._inflight)
            for j in b.ready([self._inflight[i][1] for i in order]):
                i = order[j]
                gen, ref = self._inflight.pop(i)
                self._arrived.append((i, gen, ref))
                self._inflight[i] = (self.generation[i], b.call(self.workers[i], "sample"))
        take = len(self._arrived) if d.sync == "async" else need
        used, self._arrived = self._arrived[:take], self._arrived[take:]
        return [ref for _, _, ref in used], [(i, gen) for i, gen, _ in used]

    def _pipeline(self, pending: list[Any]) -> list[Any]:
        """Wait for ``pending``; as each worker's rollout arrives, start its next one. The next
        batch is collected while the learners update on this one, and a worker that finishes
        first does not sit idle until the slowest one is done (its next rollout acts with the
        same weights either way: the update on this batch has not happened yet)."""
        b = self.backend
        nxt: list[Any] = [None] * len(pending)
        waiting = list(range(len(pending)))
        while waiting:
            for j in sorted(b.ready([pending[i] for i in waiting]), reverse=True):
                i = waiting.pop(j)
                nxt[i] = b.call(self.workers[i], "sample")
        return nxt

    def iteration(self) -> dict[str, dict[str, float]]:
        """One update of every layer of the group; metrics per layer."""
        t0 = time.perf_counter()
        b = self.backend
        if self.first.dppo.streaming:
            out = None
            failed_before = self.replaced
            while out is None:  # an async update may hold one chunk, and that one may have failed
                if self.replaced - failed_before > 3 * len(self.workers):
                    raise RuntimeError(f"group {self.name!r}: workers keep failing ({self.replaced - failed_before} "
                                       "replaced without one good chunk); see the errors above")
                pending, sources = self._stream()
                sample_s = time.perf_counter() - t0
                out = self._update_with_failover(pending, sources)
            out[self.layers[0]][M.PERF_WORKERS_REPLACED] = float(self.replaced)
        elif self.first.dppo.mode == "central":
            pending = self._next or [b.call(w, "sample") for w in self.workers]
            sources = [(i, self.generation[i]) for i in range(len(pending))]
            if self.first.dppo.pipeline:
                self._next = self._pipeline(pending)
            else:
                b.wait_all(pending)
            sample_s = time.perf_counter() - t0
            out = self._update_with_failover(pending, sources)
            assert out is not None  # a sync group raises when every rollout failed
            out[self.layers[0]][M.PERF_WORKERS_REPLACED] = float(self.replaced)
        else:
            stats = b.get([b.call(w, "sample_stats_only") for w in self.workers])
            sample_s = time.perf_counter() - t0
            out = {name: self._dppo_update(name, [s[name] for s in stats]) for name in self.layers}
        wall = time.perf_counter() - t0
        env_steps = out[self.layers[0]]["_env_steps"]
        steps, self.env_steps = env_steps - self.env_steps, env_steps
        for metrics in out.values():
            metrics[M.PERF_SAMPLE_S] = sample_s
            metrics[M.PERF_UPDATE_S] = wall - sample_s
            metrics[M.PERF_ENV_STEPS_PER_S] = steps / wall
            metrics[M.PERF_NUM_WORKERS] = float(len(self.workers))
        self._updates += 1
        if self._meter is not None:
            self._elastic(out[self.layers[0]])
        return out

    # -- elastic pool --------------------------------------------------------------------------
    def _elastic(self, metrics: dict[str, float]) -> None:
        """Every ``elastic.every`` updates, resize by the policy on mean CPU utilization."""
        from hdppo.platform.elastic import decide_workers

        e = self.first.dppo.elastic
        self._util.append(self._meter())  # type: ignore[misc]
        metrics[M.PERF_CPU_UTIL] = self._util[-1]
        if self._updates % e.every:  # type: ignore[union-attr]
            return
        util = sum(self._util) / len(self._util)
        self._util = []
        n = decide_workers(len(self.workers), util, e, self.backend.free_cpus(), self._worker_args[1])  # type: ignore[arg-type]
        if n != len(self.workers):
            print(f"[hdppo] group {self.name!r}: CPU utilization {util:.0%} -> {n} workers (was {len(self.workers)})",
                  flush=True)
            self.resize(n)

    def resize(self, num_workers: int) -> int:
        """Grow or shrink the pool between updates; returns the new size.

        Removed workers' unfinished rollouts are dropped (never counted); the rest of the pool
        takes the new share of a batch. A new worker is only started where Ray has a free
        slot for it, so a resize never leaves an actor waiting for CPUs.
        """
        b, cpus = self.backend, self._worker_args[1]
        num_workers = max(1, int(num_workers))
        grow = num_workers - len(self.workers)
        if grow > 0 and b.name == "ray":
            fit = int(b.free_cpus() // cpus)
            if fit < grow:
                print(f"[hdppo] group {self.name!r}: {num_workers} workers asked, room for {len(self.workers) + fit} "
                      f"({b.free_cpus():g} free CPUs, {cpus:g} per worker)", flush=True)
                num_workers = len(self.workers) + fit
        if num_workers == len(self.workers):
            return num_workers
        while len(self.workers) > num_workers:
            i = len(self.workers) - 1
            b.kill(self.workers.pop())
            self.generation.pop()
            self._inflight.pop(i, None)
            self._arrived = [a for a in self._arrived if a[0] != i]
            if self._next is not None:
                self._next.pop()
        self.num_workers = num_workers
        # Calls to one actor run in order: the resize lands before any sample issued after it.
        for w in self.workers:
            b.call(w, "resize", num_workers)
        while len(self.workers) < num_workers:
            self.workers.append(self._make_worker(len(self.workers)))
            self.generation.append(0)
            if self._next is not None:
                self._next.append(b.call(self.workers[-1], "sample"))
        return num_workers

    def _dppo_update(self, layer: str, stats: list) -> dict[str, float]:
        """Epochs x minibatches of (workers' gradients -> learner's averaged step).

        Object references flow straight from one call to the next (the learner's new weights
        into the workers' next gradient calls, their gradients into the learner), so the driver
        does not wait on each step; it synchronises once per epoch, and only for the KL stop.
        """
        b, p, learner = self.backend, self.cfg.layer(layer).ppo, self.learners[layer]
        start = b.get(b.call(learner, "begin_dppo", *stats))
        n = sum(s.num_samples for s in stats)
        k = max(1, round(n / p.minibatch_size))
        weights: Any = start["weights"][0]
        for epoch in range(p.num_epochs):
            for mb in range(k):
                grads = [b.call(w, "gradient", weights, epoch, mb, k, start["adv_mean"], start["adv_std"],
                                start["entropy_coeff"], layer) for w in self.workers]
                weights = b.call(learner, "apply_gradients", *grads)
            if p.target_kl is not None and b.get(b.call(learner, "epoch_kl", k)) > p.target_kl:
                break
        return b.get(b.call(learner, "end_dppo"))

    def get_state(self) -> dict[str, Any]:
        b = self.backend
        return {"learners": {name: b.get(b.call(h, "get_state")) for name, h in self.learners.items()},
                "workers": b.get([b.call(w, "get_state") for w in self.workers])}

    def set_state(self, state: dict[str, Any]) -> None:
        b = self.backend
        for name, h in self.learners.items():
            b.get(b.call(h, "set_state", state["learners"][name]))
        for w, ws in zip(self.workers, state["workers"]):
            b.get(b.call(w, "set_state", ws))
        self.env_steps = float(self.counters()["env_steps"])

    def counters(self) -> dict[str, int]:
        return self.backend.get(self.backend.call(self.learners[self.layers[0]], "counters"))

    def shutdown(self) -> None:
        for h in [*self.learners.values(), *self.workers]:
            self.backend.kill(h)
