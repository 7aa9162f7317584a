"""One DPPO group: a pool of rollout workers and one learner per layer of the group.

By default every layer is its own group. One call of :meth:`DPPOGroup.iteration` is one update
of the group's layers. How the samples get there is the group's sync mode (``dppo.sync``), a
strategy object from :mod:`hdppo.platform.sync_modes`: ``sync`` (a barrier), ``pipeline`` (the
next rollouts start during the update), ``soft`` / ``async`` (no barrier: chunks streamed from
any workers). The group itself owns what every mode shares: the pool, the learners, the update
(mode ``central``: workers ship rollouts to the learners; mode ``dppo``: workers compute gradients
on their own shards that the learner averages), replacing failed workers, and resizing.

The pool can be resized between updates (:meth:`DPPOGroup.resize`): by ``hdppo scale``, or by
the ``dppo.elastic`` policy on CPU utilization.
"""
from __future__ import annotations

import itertools
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import metrics as M
from .batch import no_ids
from .config import Config, GroupSpec
from .devices import resolve_device
from ..envs.errors import traceback_text, where_raised
from .errors import EnvError, HdppoError, RayStartError
from .learner import Learner
from .tensor_buffers import restore_tensors
from .messages import Accounting, UpdateResult
from .rollout_worker import LOST_IDS, RolloutWorker
from .sync_modes import Call, Source, make_sync_mode, sync_mode_class

PLACEMENT_TIMEOUT_S = 120
RESOURCE_SETTLE_S = 3.0  # how long a resize waits for Ray to see the CPUs of workers that just exited


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


def learner_threads(cfg: Config, layer: str, sync: str) -> int:
    """torch threads for ``layer``'s learner (``learner.num_threads``); 0 means every core of the
    learner's machine, resolved where it runs (:func:`hdppo.platform.learner.thread_count`).

    'auto' gives the cores only to a run's single learner in a mode whose workers wait during
    the update: on 2 cores a battle_v4 update of 24,000 samples leaves one core idle for 2.4 s of
    a 3.1 s iteration. Beside sampling workers (pipeline, soft, async) or other learners (hierarchy
    groups update at the same time on Ray) extra threads would only contend for the cores."""
    setting = cfg.learner_of(layer).num_threads
    if setting != "auto":
        return int(setting)
    learners = sum(len(g) for g in cfg.layer_groups())
    return 0 if learners == 1 and sync_mode_class(sync).min_lag == 0 else 1


def _device_field(cfg: Config, layer: str) -> str:
    """The config path of ``layer``'s learner.device, for errors."""
    for g, group in enumerate(cfg.groups or []):
        if isinstance(group, GroupSpec) and group.learner is not None and layer in group.layers:
            return f"groups[{g}].learner.device"
    i = [x.name for x in cfg.layers].index(layer)
    return f"layers[{i}] ({layer}).learner.device"


def _gpu_note(cfg: Config, devices: dict[str, str]) -> str:
    gpus = sum(cfg.learner_of(n).num_gpus for n, d in devices.items() if d == "cuda")
    return f" (and {gpus:g} GPUs for the CUDA learners: lower learner.num_gpus to share one)" if gpus else ""


class DPPOGroup:
    def __init__(self, cfg: Config, layers: list[str], backend: Any, service: Any, dims: dict[str, dict],
                 num_workers: int, total_cpus: float, env_step_budget: int | None = None):
        self.cfg = cfg
        self.layers = list(layers)
        self.name = "+".join(layers)
        self.dppo = cfg.group_dppo(self.layers)  # the group-level settings, the same in all its layers
        self.backend = backend
        self.num_workers = num_workers
        learner_cpus, worker_cpus = group_cpus(total_cpus, num_workers, self.dppo.worker_cpus, len(layers))
        # learner.device resolved here, once, before any actor starts (workers always act on CPU).
        self.devices = {name: resolve_device(cfg.learner_of(name).device, backend.name, _device_field(cfg, name))
                        for name in layers}
        self.learners = {name: backend.make(Learner, cfg, name, dims[name]["obs_dim"], dims[name]["action_space"],
                                            service, backend.name, dims[name].get("critic_dim"), env_step_budget,
                                            learner_threads(cfg, name, self.dppo.sync), self.devices[name],
                                            dims[name].get("encoder"),
                                            num_cpus=learner_cpus,
                                            num_gpus=cfg.learner_of(name).num_gpus if self.devices[name] == "cuda" else None)
                         for name in layers}
        self._worker_args = (service, worker_cpus)
        # Each incarnation of a worker has its own number, so a result is never mistaken for a
        # later worker's at the same index (after a replacement, or a shrink and a grow); the
        # worker stamps it into its samples' ids.
        self._incarnations = itertools.count()
        self.generation = [next(self._incarnations) for _ in range(num_workers)]
        self.workers = [self._make_worker(i, gen) for i, gen in enumerate(self.generation)]
        # diagnostics.accounting: per layer, the ids of every sample trained or dropped, by fate.
        self._ledger: dict[str, list[Accounting]] | None = (
            {name: [] for name in layers} if cfg.diagnostics.accounting else None)
        self.replaced = 0
        self._last_failure: BaseException | None = None   # the cause of the latest failed call
        self._last_where: str | None = None               # where in the env it was raised (where_raised)
        self._last_traceback: str | None = None           # its whole traceback (the worker's, as Ray sends it)
        # Every failure's whole traceback is appended here (the trainer points it into the run dir):
        # the console shows one line per replaced worker, the file the stack to debug the env with.
        self.failure_log: Path | None = None
        self._closed = False
        self.sync = make_sync_mode(self.dppo.sync)
        self._sample_method = "sample" if self.dppo.mode == "central" else "sample_stats_only"
        self._updates = 0
        self._meter = None
        if self.dppo.elastic is not None:
            from .elastic import CpuMeter

            self._meter = CpuMeter()
            self._util: list[float] = []
            self._told_no_room = False
        # Learners too: each publishes its first weights while it starts, and a worker that samples
        # before that would act with its own random initialisation.
        pings = [backend.call(w, "ping") for w in self.workers] + [backend.call(h, "counters") for h in self.learners.values()]
        if not backend.wait_all(pings, timeout=PLACEMENT_TIMEOUT_S):
            raise RayStartError(
                f"group {self.name!r}: {num_workers} rollout workers x {worker_cpus} CPUs plus {len(layers)} learner(s) "
                f"({learner_cpus} CPUs each) could not all be placed within {PLACEMENT_TIMEOUT_S}s on a cluster with "
                f"{total_cpus} CPUs{_gpu_note(cfg, self.devices)}. Lower layers[].dppo.num_workers or dppo.worker_cpus, "
                "or add nodes.")
        answers = backend.get(pings)  # re-raises an actor's construction error (a broken env, say)
        # Each learner's weights version as of the last update the trainer saw (see snapshot_calls).
        self.versions: dict[str, int] = {name: c["version"] for name, c in zip(self.learners, answers[len(self.workers):])}
        self.env_steps = float(self.counters()["env_steps"])

    def _make_worker(self, index: int, uid: int) -> Any:
        service, cpus = self._worker_args
        return self.backend.make(RolloutWorker, self.cfg, self.layers, index, self.num_workers, service, uid,
                                 num_cpus=cpus)

    def sample(self, index: int) -> Call:
        """Start worker ``index``'s next rollout (sync modes call this): the whole rollouts in mode
        ``central``, only their statistics in mode ``dppo`` (the samples stay on the worker)."""
        return Call(self.backend.call(self.workers[index], self._sample_method), (index, self.generation[index]))

    # -- failover ------------------------------------------------------------------------------
    def _replace(self, i: int, cause: BaseException) -> None:
        """A fresh worker i; the sync mode re-issues its calls that were in flight on the dead one."""
        if self._closed:  # an update abandoned on a stop, still running when the group shut down
            raise RuntimeError(f"group {self.name!r} is shut down") from cause
        self.backend.kill(self.workers[i])
        self.generation[i] = next(self._incarnations)
        self.workers[i] = self._make_worker(i, self.generation[i])
        self.replaced += 1
        self.sync.on_worker_failure(self, i, cause)
        print(f"[hdppo] group {self.name!r}: worker {i} failed ({type(cause).__name__}: "
              f"{str(cause).splitlines()[0] if str(cause) else ''}); replaced, its rollout dropped"
              + self._traceback_note(), flush=True)

    def _traceback_note(self) -> str:
        """Where the replaced worker's traceback is. Before the first update the run dir may yet be
        removed (a start that fails everywhere leaves none), and the error then names its own file."""
        if self.failure_log is None:
            return ""
        if self._updates == 0:
            return (f" (traceback in {self.failure_log}; should the run stop before its first update, in the file "
                    "its error names)")
        return f" (traceback in {self.failure_log})"

    def _current(self, source: Source) -> bool:
        i, gen = source
        return i < len(self.workers) and gen == self.generation[i]

    def _fail(self, source: Source, error: BaseException) -> None:
        """A call of ``source`` failed: a user error (hdppo's own, e.g. NaN from the env) stops the
        run; otherwise (its actor died, or its env raised) the worker is replaced, once."""
        cause = getattr(error, "cause", None) or error
        if isinstance(cause, HdppoError):
            raise cause
        self._last_failure = cause
        self._last_where = where_raised(error)
        self._last_traceback = traceback_text(error)
        self._log_failure(source, self._last_traceback)
        lost = getattr(cause, LOST_IDS, None) or getattr(error, LOST_IDS, None)
        for layer, ids in (lost or {}).items():  # the env steps of a rollout that failed: counted, never trained
            self._record_failed(layer, ids)
        if self._current(source):
            self._replace(source[0], cause)

    def _log_failure(self, source: Source, text: str) -> None:
        if self.failure_log is None:
            return
        try:
            with open(self.failure_log, "a") as f:
                f.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} group {self.name!r}, worker {source[0]} "
                        f"(incarnation {source[1]}), after {self._updates} updates\n{text.rstrip()}\n\n")
        except OSError:  # a full disk must not turn a replaced worker into a failed run
            pass

    def _survivors(self, results: list[Any], sources: list[Source]) -> tuple[list[Any], list[Source]]:
        """Keep the results that arrived; replace each worker whose call failed. A failed rollout is
        dropped whole, so nothing counts twice. ``sources`` says which worker (and which
        incarnation of it) made each result, so a worker already replaced is not replaced again."""
        kept, kept_sources = [], []
        for r, src in zip(results, sources):
            if isinstance(r, BaseException):
                self._fail(src, r)
            else:
                kept.append(r)
                kept_sources.append(src)
        if not kept and not self.sync.streaming:
            raise self._all_failed("every worker failed in the same iteration", self._last_failure)
        return kept, kept_sources

    def _all_failed(self, what: str, error: BaseException | None) -> EnvError:
        """The error that stops a run whose workers all fail (``error``: the last one's cause, as
        :meth:`_fail` kept it): one crashed simulator is replaced, but
        a failure everywhere at once is most likely a bug in the env (or what it is given), which a
        replacement would only repeat."""
        where = f", raised at {self._last_where}" if self._last_where else ""
        last = (f" (the last: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}{where})"
                if error is not None else "")
        err = EnvError(f"group {self.name!r}: {what}{last}. A failure on every worker is most likely a bug in the "
                       f"env {self.cfg.env.id or self.cfg.env.entry_point!r} or in what the config gives it, not a crashed simulator; "
                       "`hdppo check-env` steps the env alone.")
        err.worker_traceback = self._last_traceback  # type: ignore[attr-defined]  # the CLI saves it to a file it names
        return err

    # -- the update ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, UpdateResult]:
        """One update of every layer of the group; its result per layer."""
        t0 = time.perf_counter()
        out = None
        failed_before = self.replaced
        while out is None:  # an update may have had only failed results in hand (async: one chunk)
            if self.replaced - failed_before > 3 * len(self.workers):
                raise self._all_failed(f"workers keep failing ({self.replaced - failed_before} replaced without one "
                                       "good rollout)", self._last_failure)
            pending, sources = self.sync.collect(self)
            sample_s = time.perf_counter() - t0
            out = self._update_central(pending, sources) if self.dppo.mode == "central" else self._update_dppo(pending, sources)
        wall = time.perf_counter() - t0
        env_steps = float(out[self.layers[0]].env_steps)
        steps, self.env_steps = env_steps - self.env_steps, env_steps
        for result in out.values():  # the group's workers serve every layer of it: each layer's run shows it
            result.metrics[M.PERF_WORKERS_REPLACED] = float(self.replaced)
            result.metrics[M.PERF_SAMPLE_S] = sample_s
            result.metrics[M.PERF_UPDATE_S] = wall - sample_s
            result.metrics[M.PERF_ENV_STEPS_PER_S] = steps / wall
            result.metrics[M.PERF_NUM_WORKERS] = float(len(self.workers))
        for layer, result in out.items():
            self.versions[layer] = result.version
            if result.accounting is not None:
                self._record(layer, result.accounting)
            prefix = f"{M.PERF_WORKER_SAMPLES}/"
            if any(k.startswith(prefix) for k in result.metrics):  # a worker that gave nothing (it failed, or
                for i in range(len(self.workers)):                 # sat out a soft batch) charts 0, not a gap
                    result.metrics.setdefault(f"{prefix}{i}", 0.0)
        self._updates += 1
        if self._meter is not None:
            self._elastic(out[self.layers[0]].metrics)
        return out

    # -- accounting (diagnostics.accounting) ---------------------------------------------------
    def _record(self, layer: str, entry: Accounting) -> None:
        if self._ledger is not None:
            self._ledger[layer].append(entry)

    def _record_failed(self, layer: str, ids: np.ndarray) -> None:
        self._record(layer, Accounting(no_ids(), no_ids(), ids))

    def accounting(self, layer: str) -> Accounting:
        """Every sample of ``layer`` that reached this group so far, by fate: trained, dropped as
        stale, or dropped because its rollout failed (ids as in hdppo.platform.batch). Needs
        ``diagnostics.accounting``. Samples in flight on a worker that died (killed, or removed
        by a resize) never reach the group and are in none of them."""
        if self._ledger is None:
            raise ValueError("DPPOGroup.accounting needs diagnostics.accounting: true in the config")
        return Accounting.concat(self._ledger[layer])

    def _central(self, rollouts: list[Any]) -> dict[str, UpdateResult]:
        b = self.backend
        futures = {name: b.call(learner, "update_central", *rollouts) for name, learner in self.learners.items()}
        return {name: b.get(f) for name, f in futures.items()}

    def _update_central(self, pending: list[Any], sources: list[Source]) -> dict[str, UpdateResult] | None:
        """Mode central: the update on ``pending``; if some rollouts failed, on the others. None
        when a streaming group had only failed chunks in hand (it then collects more)."""
        try:
            # The common case: rollouts go from the workers to the learners by reference,
            # never through this process.
            return self._central(pending)
        except Exception as exc:  # noqa: BLE001 - sorted out below: a failed worker, or not
            results = self.backend.outcomes(pending)
            if not any(isinstance(r, BaseException) for r in results):
                raise exc
            kept, _ = self._survivors(results, sources)
            return self._central(kept) if kept else None

    def _update_dppo(self, pending: list[Any], sources: list[Source]) -> dict[str, UpdateResult] | None:
        """Mode dppo: the workers whose statistics arrived compute the gradients, layer by layer.
        A worker that dies during a layer's update is replaced, and that update is undone and
        redone with the others (its samples stay on the dead worker: they never count)."""
        stats, holders = self._survivors(self.backend.outcomes(pending), sources)
        if not stats:
            return None
        return {name: self._dppo_update(name, stats, holders) for name in self.layers}

    def _dppo_update(self, layer: str, stats: list[dict], holders: list[Source]) -> UpdateResult:
        """Epochs x minibatches of (workers' gradients -> learner's averaged step), redone with the
        survivors if a worker fails. ``stats`` and ``holders`` (the workers that hold the samples)
        are pruned in place, so the group's later layers leave out a failed worker too."""
        b, learner = self.backend, self.learners[layer]
        while True:
            live = [j for j, src in enumerate(holders) if self._current(src)]
            for j in set(range(len(holders))) - set(live):  # a dead worker's samples are lost with it
                if stats[j][layer].ids is not None:
                    self._record_failed(layer, stats[j][layer].ids)
            stats[:], holders[:] = [stats[j] for j in live], [holders[j] for j in live]
            if not holders:
                raise self._all_failed(f"every worker failed during the update of layer {layer!r}", self._last_failure)
            start = b.get(b.call(learner, "begin_dppo", *[s[layer] for s in stats]))
            failure = self._dppo_steps(layer, start, sum(s[layer].num_samples for s in stats), holders)
            if failure is None:
                return b.get(b.call(learner, "end_dppo"))
            b.get(b.call(learner, "abort_dppo"))
            for src, error in failure:
                self._fail(src, error)
            if not failure:
                raise RuntimeError(f"group {self.name!r}: the update of layer {layer!r} failed, but no worker did")

    def _dppo_steps(self, layer: str, start: dict, n: int, holders: list[Source]) -> list[tuple[Source, BaseException]] | None:
        """The steps of one update. Object references flow straight from one call to the next (the
        learner's new weights into the workers' next gradient calls, their gradients into the
        learner), so the driver does not wait on each step; it synchronises for the KL stop, and
        once at the end to see whether every step went through. None if they did, else the
        gradient calls that failed first (after one fails, every later step fails with it)."""
        b, p, learner = self.backend, self.cfg.layer(layer).ppo, self.learners[layer]
        k = max(1, round(n / p.minibatch_size))
        weights: Any = start["weights"][0]
        issued: list[list[Any]] = []
        for epoch in range(p.num_epochs):
            for mb in range(k):
                grads = [b.call(self.workers[i], "gradient", weights, epoch, mb, k, start["adv_mean"], start["adv_std"],
                                start["entropy_coeff"], layer) for i, _ in holders]
                issued.append(grads)
                weights = b.call(learner, "apply_gradients", *grads)
            if p.target_kl is not None and b.get(b.call(learner, "epoch_kl", k)) > p.target_kl:
                break
        if not isinstance(b.outcomes([weights])[0], BaseException):
            return None
        for grads in issued:
            results = b.outcomes(grads)
            failed = [(src, r) for src, r in zip(holders, results) if isinstance(r, BaseException)]
            if failed:
                return failed
        return []

    # -- elastic pool --------------------------------------------------------------------------
    def _elastic(self, metrics: dict[str, float]) -> None:
        """Every ``elastic.every`` updates, resize by the policy on mean CPU utilization."""
        from .elastic import decide_workers

        e = self.dppo.elastic
        reading = self._meter()  # type: ignore[misc]
        if reading is not None:  # None: too soon after the last one to mean anything
            self._util.append(reading)
            metrics[M.PERF_CPU_UTIL] = reading
        if self._updates % e.every or not self._util:  # type: ignore[union-attr]
            return
        util = sum(self._util) / len(self._util)
        self._util = []
        free, each = self.backend.free_cpus(), self._worker_args[1]
        n = decide_workers(len(self.workers), util, e, free, each)  # type: ignore[arg-type]
        if (n == len(self.workers) < e.max_workers and util < e.low_util and free < each  # type: ignore[union-attr]
                and not self._told_no_room):
            self._told_no_room = True  # said once: the pool would grow, but no worker fits
            fix = (f"Lower dppo.worker_cpus below {free:g}" if free > 0 else
                   "No CPU is free (the learner and the other groups hold the rest): free one, or start with more "
                   "workers of smaller dppo.worker_cpus")
            print(f"[hdppo] group {self.name!r}: CPU utilization {util:.0%} is below elastic.low_util, but the pool "
                  f"cannot grow past {n} workers: each declares {each:g} CPUs and {free:g} are free. {fix} so that "
                  "another worker fits.", flush=True)
        if n != len(self.workers):
            print(f"[hdppo] group {self.name!r}: CPU utilization {util:.0%} -> {n} workers (was {len(self.workers)})",
                  flush=True)
            self.resize(n)

    @property
    def updates(self) -> int:
        """The updates this group has made in this process."""
        return self._updates

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
            # Ray's view of free CPUs lags an actor's exit (a worker removed moments ago still
            # counts as placed): give it a moment before settling for fewer workers.
            deadline = time.monotonic() + RESOURCE_SETTLE_S
            while fit < grow and time.monotonic() < deadline:
                time.sleep(0.1)
                fit = int(b.free_cpus() // cpus)
            if fit < grow:
                print(f"[hdppo] group {self.name!r}: {num_workers} workers asked, room for {len(self.workers) + fit} "
                      f"({b.free_cpus():g} free CPUs, {cpus:g} per worker)", flush=True)
                num_workers = len(self.workers) + fit
        if num_workers == len(self.workers):
            return num_workers
        while len(self.workers) > num_workers:
            b.kill(self.workers.pop())
            self.generation.pop()
        self.num_workers = num_workers
        # Calls to one actor run in order: the resize lands before any sample issued after it.
        for w in self.workers:
            b.call(w, "resize", num_workers)
        while len(self.workers) < num_workers:
            self.generation.append(next(self._incarnations))
            self.workers.append(self._make_worker(len(self.workers), self.generation[-1]))
        self.sync.on_resize(self, num_workers)
        return num_workers

    def get_state(self) -> dict[str, Any]:
        return self.resolve_state(self.state_calls())

    def state_calls(self) -> dict[str, Any]:
        """The group's state, asked for now and not waited on (on Ray, object references); each
        actor answers after the calls it already has."""
        b = self.backend
        return {"learners": {name: b.call(h, "get_state") for name, h in self.learners.items()},
                "workers": [b.call(w, "get_state") for w in self.workers]}

    def snapshot_calls(self) -> dict[str, Any]:
        """The group's state after the update just logged, for a checkpoint taken later: each
        worker is asked now (it answers after the rollout it is in, if any); each learner is
        asked only when the checkpoint is taken (:meth:`resolve_snapshot`), for the copy it kept
        at this version. Serialising a learner's state after every update cost it 5-6 ms of a 0.1
        s update; keeping a copy costs about 1 ms."""
        b = self.backend
        return {"versions": dict(self.versions), "workers": [b.call(w, "get_state") for w in self.workers]}

    def resolve_snapshot(self, snapshot: dict[str, Any], wait_s: float | None = None) -> dict[str, Any]:
        """The state of :meth:`snapshot_calls`. Each learner answers from a thread of its own
        (``Learner.state_snapshot``), so even during an update it never finished (a stop that
        abandoned it) it gives its state as of that snapshot."""
        b = self.backend
        learners = {name: b.call(h, "state_snapshot", snapshot["versions"][name]) for name, h in self.learners.items()}
        return self.resolve_state({"learners": learners, "workers": snapshot["workers"]}, wait_s)

    def load_weights(self, layer: str, state: dict[str, Any]) -> None:
        """Start layer ``layer`` from another run's weights (``schedule.checkpoint``)."""
        self.versions[layer] = self.backend.get(self.backend.call(self.learners[layer], "load_weights", state))

    def resolve_state(self, calls: dict[str, Any], wait_s: float | None = None) -> dict[str, Any]:
        """The state of :meth:`state_calls`. With ``wait_s``, a worker that has not answered by then
        (still in a rollout of an abandoned update) gets None: it restarts with fresh reward
        statistics on resume. A learner that has not answered is an error."""
        b = self.backend
        learners = list(calls["learners"].values())
        if wait_s is not None and not b.wait_all(learners, timeout=wait_s):
            raise RuntimeError(f"group {self.name!r}: its learners did not give their state within {wait_s:g}s")
        deadline = None if wait_s is None else time.monotonic() + wait_s

        def worker_state(f: Any) -> Any:
            if deadline is not None and not b.wait_all([f], timeout=max(deadline - time.monotonic(), 0.0)):
                return None
            try:
                return b.get(f)
            except Exception:  # noqa: BLE001 - a worker that failed (and was replaced) since it was asked
                return None    # its state, as one that did not answer: fresh reward statistics on resume

        workers = [worker_state(f) for f in calls["workers"]]
        # A snapshot's tensors come as arrays (Learner.state_snapshot); a state is the same either way.
        return {"learners": {name: restore_tensors(b.get(f)) for name, f in calls["learners"].items()}, "workers": workers}

    def set_state(self, state: dict[str, Any]) -> None:
        b = self.backend
        for name, h in self.learners.items():
            self.versions[name] = b.get(b.call(h, "set_state", state["learners"][name]))
        for w, ws in zip(self.workers, state["workers"]):
            if ws is not None:  # None: that worker's state was not saved (hdppo.platform.interrupts)
                b.get(b.call(w, "set_state", ws))
        self.env_steps = float(self.counters()["env_steps"])

    def counters(self) -> dict[str, int]:
        return self.backend.get(self.backend.call(self.learners[self.layers[0]], "counters"))

    def shutdown(self) -> None:
        self._closed = True
        for h in [*self.learners.values(), *self.workers]:
            self.backend.kill(h)
