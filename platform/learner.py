"""The learner of one DPPO group: owns the optimizer, merges normalizer statistics, publishes.

Mode ``central``: :meth:`update_central` receives whole rollouts and runs the epochs.
Mode ``dppo``: the group asks workers for gradients on their own shards and hands them to
:meth:`apply_gradients`, which averages (by sample count, or by trajectory quality) and steps (Heess et al. 2017,
arXiv:1707.02286). Both paths go through :meth:`_step`, so clipping and schedules are shared.
"""
from __future__ import annotations

import copy
import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from . import affinity
from . import metrics as M
from .array_pool import ArrayPool, reusable
from .backend import call_service, concurrency_group, deref, make_backend
from .batch import Batch, Rollout, RolloutStats, advantage_moments, explained_variance_of, no_ids
from .config import Config
from .devices import check_visible
from .errors import DivergedError
from .diagnostics import divergences, mean_pairwise_cosine, pool_moments
from .messages import Accounting, GradientResult, UpdateResult
from .tensor_buffers import as_buffers, copied, on_cpu
from ..policies.compression import decompress, wire_nbytes
from ..policies.bonuses import make_bonus
from ..policies.flat_params import FlatParameters, clip_grad_norm_
from ..policies.networks import make_policy, precision_context, sequence_chunks, upgrade_image_encoders, upgrade_moments
from ..policies.normalizers import RunningStats
from ..policies.ppo_update import average_gradients, minibatch_gradients, quality_weights
from ..policies.schedules import linear
from ..policies.staleness import staleness_weights
from ..policies.teacher_replay import TeacherReplay
from .threads import thread_count, use_threads


PROXIMAL_CHUNK = 4096  # samples per forward pass of decoupled PPO's proximal log-probabilities
SNAPSHOT_GROUP = "snapshot"  # the Ray concurrency group of Learner.state_snapshot
KEPT_SNAPSHOTS = 3  # the driver asks for the last update's; it cannot be more than one behind


class Learner:
    CONCURRENCY_GROUPS = {SNAPSHOT_GROUP: 1}

    def __init__(self, cfg: Config, layer: str | int, obs_dim: int, action_space: gym.Space,
                 service: Any, backend_name: str = "local", critic_dim: int | None = None,
                 env_step_budget: int | None = None, num_threads: int = 1, device: str = "cpu",
                 encoder: dict | None = None):
        if backend_name == "ray":  # ray.cpu_affinity: first, so that every thread started below inherits the core
            affinity.apply(cfg, "learner", [cfg.layers[layer].name if isinstance(layer, int) else layer])
        self.threads = thread_count(num_threads)
        use_threads(self.threads)
        torch.manual_seed(cfg.train.seed)
        self.cfg = cfg
        self.layer = cfg.layers[layer] if isinstance(layer, int) else cfg.layer(layer)
        self.service = service
        self._put = make_backend(backend_name).put
        # Schedules run over this group's share of the env steps (all groups together make the total).
        self.budget = env_step_budget or cfg.train.total_env_steps
        p = self.layer.policy
        # learner.device, resolved by the group (hdppo.platform.devices): weights, optimizer and
        # minibatches live there; everything that leaves the learner is on CPU.
        check_visible(device, f"layer {self.layer.name!r}: learner.device")
        self.device = torch.device(device)
        self.precision = cfg.learner_of(self.layer.name).precision
        self.policy = make_policy(obs_dim, action_space, p.hidden, p.activation, p.init_log_std, critic_dim,
                                  encoder).to(self.device)
        # Under bf16 the first dense or conv layer rounds the observations to bfloat16 anyway; rounded
        # once per update instead, minibatches gather half the bytes and no forward pass casts them
        # again (battle_v4's 845 inputs, 24,000 samples: see _update_inputs).
        self._bf16_obs = self.precision == "bf16" and bool(getattr(self.policy, "bf16_inputs_exact", lambda: False)())
        # The update's batch (and its bfloat16 observations) go into arrays reused from update to
        # update: a new 80 MB batch page-faults on every 4 KB (battle_v4: the concatenation and the
        # cast took ~47 ms of a ~0.8 s update into new memory, ~25 into reused).
        self._pool = ArrayPool()
        # The parameter list, once: nn.Module.parameters() walks the module tree on every call,
        # and an update makes hundreds of optimizer steps.
        self.params = list(self.policy.parameters())
        # The parameters as views of one buffer, which the optimizer steps as one tensor: clipping
        # and Adam in a few operators per minibatch instead of a few per parameter (flat_params).
        self.flat = FlatParameters(self.params)
        # eps=1e-5 as in the PPO2 baseline and CleanRL (PyTorch's default 1e-8 differs). Fused:
        # one kernel instead of a chain of elementwise operators (same maths).
        self.optimizer = torch.optim.Adam([self.flat.param], lr=self.layer.ppo.lr, eps=1e-5, fused=True)
        # learner.critic_thread: the critic's half of each minibatch on a thread of its own.
        learner_cfg = cfg.learner_of(self.layer.name)
        self._autograd = learner_cfg.autograd
        self._critic_pool = (ThreadPoolExecutor(1, thread_name_prefix=f"critic-{self.layer.name}")
                             if learner_cfg.critic_thread else None)
        # The learner side of the layer's exploration bonus, if it has one (RND's predictor).
        bonus = make_bonus(self.layer.exploration, obs_dim, self.layer.name)
        self.bonus = bonus if bonus is not None and bonus.learned else None
        self.obs_stats = RunningStats((obs_dim,))
        self.reward_stats = RunningStats(())
        teacher = self.layer.teacher
        self.teacher_replay = TeacherReplay(teacher.replay) if teacher is not None and teacher.replay else None
        self._agg_weights: list[float] | None = None
        self._dense_wire: int | None = None
        self.version = 0
        self.env_steps = 0
        self.updates = 0
        self._rng = np.random.default_rng(cfg.train.seed)
        # On Ray, a copy of the state after each update, for state_snapshot (see _keep_snapshot),
        # and what is put goes as NumPy buffers (_shareable). Two switches: a test keeps copies
        # in-process, where the workers read the published weights as they are, not through deref.
        self._keeps_snapshots = self._on_ray = backend_name == "ray"
        self._unacked: Any = None  # the service's answer to a publish not yet awaited (publish)
        self._snapshots: dict[int, dict[str, Any]] = {}
        self._snapshot_lock = threading.Lock()
        self.publish()
        self._keep_snapshot()

    # -- publishing ----------------------------------------------------------------------------
    def weights(self) -> dict[str, torch.Tensor]:
        return _snapshot(self.policy)

    def _shareable(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` (a copy no later step changes) as it is ``put``: on Ray with NumPy buffers
        (tensor_buffers: less than half the cost of pickling tensors), in-process as it is."""
        return as_buffers(state) if self._on_ray else state

    def publish(self, wait: bool = True) -> int:
        """One ``put`` of this version's weights; the service keeps the reference. ``wait=False``
        (the end of an update, which still has work to do): the service's answer is awaited by
        :meth:`_published` before the update returns, and its round trip (about 4 ms of a
        pipelined MinAtar update on 2 busy cores) runs beside that work."""
        ref = self._put(self._shareable(self.weights()))
        bonus_state = [self._put(self.bonus.state())] if self.bonus else None
        ack = call_service(self.service, "publish", self.layer.name, self.version, [ref],
                           self.obs_stats.to_state(), self.reward_stats.to_state(), self.progress(), bonus_state,
                           wait=wait)
        if not wait:
            self._unacked = ack
        return self.version

    def _published(self) -> None:
        """Wait until the service has the last version published with ``wait=False``: the
        workers the driver asks next must find it."""
        ack, self._unacked = self._unacked, None
        deref(ack)

    # -- schedules -----------------------------------------------------------------------------
    def progress(self) -> float:
        return self.env_steps / self.budget

    def coefficients(self) -> dict[str, float]:
        p, prog = self.layer.ppo, self.progress()
        lr = p.lr if p.lr_schedule == "constant" else linear(p.lr, 0.0, prog)
        out = {"lr": lr, "entropy_coeff": linear(p.entropy_coeff, p.entropy_coeff_final, prog)}
        t = self.layer.teacher
        if t is not None:  # kickstarting: the teacher's weight falls over the first `anneal` of the run
            out["teacher_coeff"] = linear(t.coeff, t.coeff_final, prog / t.anneal)
        return out

    def _absorb(self, stats: list[RolloutStats]) -> None:
        """Count the samples and merge the workers' normalizer deltas."""
        for s in stats:
            self.env_steps += s.env_steps
            if s.obs_delta is not None:
                self.obs_stats.merge(RunningStats.from_state(s.obs_delta))
            if s.reward_delta is not None:
                self.reward_stats.merge(RunningStats.from_state(s.reward_delta))

    # -- the optimizer step shared by both modes ----------------------------------------------
    def _step(self, grads: list[torch.Tensor], lr: float) -> float:
        """One optimizer step on ``grads`` (one per parameter, in :attr:`params`' order; left
        untouched: they are gathered into one new flat gradient, each in its logical order, so a
        conv's channels-last gradient updates the right weights). Returns the gradient's norm
        before clipping (0.0 without ``max_grad_norm``)."""
        grad = self.flat.gather(grads)
        norm = 0.0
        if self.layer.ppo.max_grad_norm is not None:
            norm = float(clip_grad_norm_(grad, self.layer.ppo.max_grad_norm))
        self.flat.param.grad = grad
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        bounds = self.layer.policy.log_std_range
        if bounds is not None and isinstance(getattr(self.policy, "log_std", None), torch.nn.Parameter):
            with torch.no_grad():
                self.policy.log_std.clamp_(*bounds)
        return norm

    def _loss_settings(self, n: int, entropy_coeff: float, chunks: tuple | None, teacher_coeff: float) -> dict:
        """minibatch_loss's keyword arguments for a minibatch of ``n`` samples."""
        p = self.layer.ppo
        replay = None
        if self.teacher_replay is not None and self.teacher_replay.size and teacher_coeff > 0.0 and chunks is None:
            replay = tuple(torch.from_numpy(c).to(self.device) for c in self.teacher_replay.sample(n, self._rng))
        return dict(clip=p.clip, value_clip=p.value_clip, vf_coeff=p.vf_coeff, entropy_coeff=entropy_coeff,
                    normalize=p.normalize_advantages, chunks=chunks, teacher_coeff=teacher_coeff,
                    bounds_coeff=p.bounds_loss_coeff, replay=replay, precision=self.precision)

    def _chunks(self, batch: Batch) -> tuple[np.ndarray, np.ndarray] | None:
        """A recurrent layer's batch as chunks of ``policy.seq_len`` consecutive decisions of one
        lane (from the sample ids); None for an MLP or CNN layer."""
        if not getattr(self.policy, "recurrent", False):
            return None
        return sequence_chunks(batch.ids, self.layer.policy.seq_len)

    def gradient(self, batch: Batch, adv_mean: float, adv_std: float, entropy_coeff: float) -> list[torch.Tensor]:
        """Gradient of the mean loss over ``batch`` without stepping (for tests and diagnostics),
        as a minibatch's is taken: written out for a plain MLP (the workers' agreement every
        diagnostics.every updates, on battle_v4 two batches of 12,000 samples, cost ~3.5% of the
        update through autograd), else autograd."""
        chunks = self._chunks(batch)
        if chunks is not None:
            chunks = tuple(torch.as_tensor(c, device=self.device) for c in chunks)
        tb = self._tensors(batch)
        _, grads = minibatch_gradients(self.policy, tb, adv_mean, adv_std, self.params, autograd=self._autograd,
                                       **self._loss_settings(len(tb.obs), entropy_coeff, chunks, 0.0))
        return grads

    def _tensors(self, batch: Batch):
        """``batch`` as tensors on the learner's device: on CPU they share the arrays' memory; on
        CUDA the whole train batch is copied once per update, and minibatches are taken there."""
        tb = batch.to_torch()
        if self.device.type == "cpu":
            return tb
        return type(tb)(**{f.name: getattr(tb, f.name).to(self.device) for f in dataclasses.fields(tb)})

    def _update_inputs(self, tb):
        """The update's tensors, with the observations in bfloat16 where that is exact
        (``_bf16_obs``). On battle_v4's update (845 inputs, a 64x64 MLP) the per-minibatch casts
        and the gathers of float32 rows were a fifth of the bf16 update's time."""
        if not self._bf16_obs:
            return tb
        low = {}
        for name in ("obs", "critic_obs"):
            t = getattr(tb, name)
            if t is None or not t.is_floating_point() or not t.numel():
                continue
            if self.device.type == "cpu" and reusable(2 * t.numel()):  # into memory already touched
                bits = self._pool.take(f"{name}_bf16", t.shape[0], tuple(t.shape[1:]), np.uint16)
                low[name] = torch.from_numpy(bits).view(torch.bfloat16).copy_(t)
            else:
                low[name] = t.to(torch.bfloat16)
        return dataclasses.replace(tb, **low)

    # -- mode central --------------------------------------------------------------------------
    def _mine(self, items: tuple) -> list:
        """Workers return one entry per layer of their group; keep this layer's."""
        return [x[self.layer.name] if isinstance(x, dict) else x for x in items]

    def _fresh_samples(self, rollouts: list[Rollout]) -> tuple[list[Rollout], np.ndarray, np.ndarray, list[RolloutStats]]:
        """Per sample: drop what is more than ``max_lag`` versions old, down-weight the rest if
        configured. Returns the rollouts that keep any sample, the kept samples' lags, the ids
        ``[k, 4]`` of the samples dropped, and the stats of the rollouts dropped whole (their env
        steps were taken all the same, and count, as a partly stale rollout's do)."""
        d = self.layer.dppo
        kept: list[Rollout] = []
        lags: list[np.ndarray] = []
        dropped = [no_ids()]
        whole: list[RolloutStats] = []
        for r in rollouts:
            lag = self.version - r.batch.versions
            w = staleness_weights(lag, d.max_lag, d.stale, d.stale_decay)
            keep = w > 0
            if not keep.all():
                dropped.append(r.batch.ids[~keep])
            if not keep.any():
                whole.append(r.stats)
                continue
            batch = r.batch if keep.all() else r.batch.take(np.flatnonzero(keep))
            if d.stale == "downweight":  # a new Batch: the rollout may be the worker's own object (local backend)
                batch = dataclasses.replace(batch, weights=batch.weights * w[keep])
            # A partly stale rollout counts only the samples it keeps (perf/samples, per worker).
            stats = r.stats if keep.all() else dataclasses.replace(r.stats, num_samples=int(keep.sum()))
            kept.append(Rollout(batch, stats))
            lags.append(lag[keep])
        return kept, (np.concatenate(lags) if lags else np.zeros(0, np.int64)), np.concatenate(dropped), whole

    def _accounting(self, trained: Any, stale: np.ndarray | None = None) -> Accounting | None:
        """What an update trained (ids, or a function making them) and dropped as stale, if
        ``diagnostics.accounting`` asks for it."""
        if not self.cfg.diagnostics.accounting:
            return None
        return Accounting(trained() if callable(trained) else trained, no_ids() if stale is None else stale, no_ids())

    def update_central(self, *rollouts: Rollout | dict[str, Rollout]) -> UpdateResult:
        t0 = time.perf_counter()
        use_threads(self.threads)
        fresh, lags, stale, stale_whole = self._fresh_samples(self._mine(rollouts))
        dropped = len(stale)
        # Rollouts dropped whole still count their env steps and normaliser statistics: the env was
        # stepped (RLlib counts sampled steps the same way); before, they vanished from the budget.
        self._absorb(stale_whole)
        if not fresh:
            return UpdateResult({M.PERF_DROPPED_STALE: float(dropped)}, self.env_steps, self.version,
                                accounting=self._accounting(no_ids(), stale))
        rollouts = tuple(fresh)
        stats = [r.stats for r in rollouts]
        coefs = self.coefficients()
        self._absorb(stats)
        batch = Batch.concat([r.batch for r in rollouts], pool=self._pool)
        if self.teacher_replay is not None and batch.teacher.shape[-1]:
            self.teacher_replay.add(batch.obs, batch.teacher, batch.masks)
        if dropped:  # the workers' sums cover samples that were just dropped
            adv64 = batch.advantages.astype(np.float64)
            adv_mean, adv_std = float(adv64.mean()), float(adv64.std())
        else:
            adv_mean, adv_std = advantage_moments(stats)
        cosine = self._central_agreement(rollouts, adv_mean, adv_std, coefs["entropy_coeff"])
        tb = self._update_inputs(self._tensors(batch))
        n = len(batch)
        k = max(1, round(n / self.layer.ppo.minibatch_size))
        chunks = self._chunks(batch)
        if chunks is not None:  # a recurrent layer: minibatches of whole chunks, indexing the whole batch
            index, valid = (torch.as_tensor(c, device=self.device) for c in chunks)
            k = min(k, len(index))
        if self.layer.ppo.decoupled and bool((lags > 0).any()):
            tb = dataclasses.replace(tb, prox_logp=self._proximal_logp(tb, None if chunks is None else (index, valid)))
        logs: list[dict[str, float]] = []
        for _ in range(self.layer.ppo.num_epochs):
            epoch_kl = []
            for idx in np.array_split(self._rng.permutation(n if chunks is None else len(index)), k):
                if chunks is None:
                    mb, mb_chunks = tb.take(torch.as_tensor(idx, device=self.device)), None
                else:
                    sel = torch.as_tensor(idx, device=self.device)
                    mb, mb_chunks = tb, (index[sel], valid[sel])
                terms, grads = minibatch_gradients(
                    self.policy, mb, adv_mean, adv_std, self.params, pool=self._critic_pool, autograd=self._autograd,
                    **self._loss_settings(len(mb.obs), coefs["entropy_coeff"], mb_chunks, coefs.get("teacher_coeff", 0.0)))
                grad_norm = self._step(grads, coefs["lr"])
                logs.append(_terms_dict(terms) | {"grad_norm": grad_norm})
                epoch_kl.append(float(terms.approx_kl))
            if self._kl_exceeded(epoch_kl):
                break
        result = self._finish(stats, logs, coefs, time.perf_counter() - t0, publish=self.bonus is None, lags=lags)
        result.accounting = self._accounting(batch.ids, stale)
        out = result.metrics
        out[M.PERF_DROPPED_STALE] = float(dropped)
        if cosine is not None:
            out[M.DIAG_GRAD_COSINE] = cosine
        if self.bonus is not None:  # trained on the same states, epochs and minibatch count; published with them
            out[M.LOSS_RND] = self.bonus.train(torch.as_tensor(batch.obs), self.layer.ppo.num_epochs, k, self._rng)  # RND stays on CPU
            self.publish()
        self._keep_snapshot()
        self._published()
        return result

    def _proximal_logp(self, tb, chunks: tuple | None) -> torch.Tensor:
        """Decoupled PPO's proximal policy: the log-probability of every sample's action under the
        weights at the update's start (before its first step), in pieces of PROXIMAL_CHUNK samples
        (or a minibatch, if larger): the memory of a few minibatches, a fraction of the calls
        (MinAtar's 1024 samples in one pass: 3.0 against 4.3 ms in four of 256)."""
        size = max(self.layer.ppo.minibatch_size, PROXIMAL_CHUNK)
        with torch.no_grad(), precision_context(self.precision, self.device.type):
            if chunks is None:
                return torch.cat([self.policy.log_prob_entropy(tb.obs[i:i + size], tb.actions[i:i + size],
                                                               tb.masks[i:i + size])[0].float()
                                  for i in range(0, len(tb.obs), size)])
            index, valid = chunks  # recurrent: each chunk replayed from its stored hidden state
            logp_s = self.policy.replay(tb.obs[index], tb.hidden[index[:, 0]], tb.first[index], tb.actions[index],
                                        tb.masks[index], tb.critic_obs[index])[0].float()
            out = tb.logp.clone()
            out[index[valid]] = logp_s[valid]
            return out

    def _central_agreement(self, rollouts: tuple, adv_mean: float, adv_std: float, entropy_coeff: float) -> float | None:
        """Mean pairwise cosine of the workers' gradients at the update's start weights, each on
        its own samples (every diagnostics.every updates: one extra backward pass per worker)."""
        every = self.cfg.diagnostics.every
        by_worker: dict[int, list[Batch]] = {}
        for r in rollouts:
            by_worker.setdefault(r.stats.worker, []).append(r.batch)
        if not every or (self.updates + 1) % every or len(by_worker) < 2:
            return None
        grads = [self.gradient(Batch.concat(bs), adv_mean, adv_std, entropy_coeff) for bs in by_worker.values()]
        return mean_pairwise_cosine(grads)

    def _kl_exceeded(self, kls: list[float]) -> bool:
        target = self.layer.ppo.target_kl
        return target is not None and float(np.mean(kls)) > target

    # -- mode dppo -----------------------------------------------------------------------------
    def begin_dppo(self, *stats: RolloutStats | dict[str, RolloutStats]) -> dict[str, Any]:
        """Start an update from the workers' reports: the weights to differentiate at, the
        whole-batch advantage moments, and the coefficients for this update."""
        stats = tuple(self._mine(stats))
        # What abort_dppo restores if a worker dies during the update (the group then restarts it
        # with the survivors): nothing of the aborted attempt's samples or steps may count.
        self._rollback = (copy.deepcopy(self.policy.state_dict()), copy.deepcopy(self.optimizer.state_dict()),
                          self.env_steps, self.obs_stats.to_state(), self.reward_stats.to_state())
        self._pending = (list(stats), self.coefficients(), time.perf_counter())
        self._dppo_logs: list[dict[str, float]] = []
        self._grad_bytes = self._grad_messages = 0
        self._absorb(list(stats))
        d = self.layer.dppo
        counts = [s.num_samples for s in stats]
        # Gradients arrive in the same worker order as these stats (the group asks in pool order).
        self._agg_weights = (quality_weights(counts, [s.ret_sum / max(s.num_samples, 1) for s in stats], d.quality_beta)
                             if d.aggregate == "quality" else None)
        adv_mean, adv_std = advantage_moments(list(stats))
        return {"weights": [self._put(self._shareable(self.weights()))], "adv_mean": adv_mean, "adv_std": adv_std,
                "entropy_coeff": self._pending[1]["entropy_coeff"], "logs": []}

    def apply_gradients(self, *results: GradientResult) -> dict[str, torch.Tensor]:
        """Average the workers' gradients (by sample count, or by count and trajectory quality with
        ``dppo.aggregate: quality``), step, and return the new weights
        (on Ray, the return value is stored once and every worker reads that one object).
        A gradient may arrive compressed (bytes, see hdppo.policies.compression)."""
        shapes = [tuple(p.shape) for p in self.params]
        dense = [decompress(r.grads, shapes) if isinstance(r.grads, bytes) else r.grads for r in results]
        self._grad_bytes += sum(self._message_bytes(r.grads) for r in results)
        self._grad_messages += len(results)
        weights = self._agg_weights if self._agg_weights is not None and len(self._agg_weights) == len(results) \
            else [r.num_samples for r in results]
        grads = average_gradients(dense, weights)
        norm = self._step(grads, self._pending[1]["lr"])
        n = sum(r.num_samples for r in results)
        info = {k: sum(r.info[k] * r.num_samples for r in results) / n for k in results[0].info} | {"grad_norm": norm}
        if len(dense) > 1:  # the workers' gradients are here anyway: their agreement costs one matmul
            info["grad_cosine"] = mean_pairwise_cosine(dense)
        self._dppo_logs.append(info)
        return self.weights()

    def _message_bytes(self, grads: list[torch.Tensor] | bytes) -> int:
        """Bytes a gradient message takes serialised for sending (pickle protocol 5, as Ray
        sends it): the honest 'bytes moved', framing included. A dense message's size depends
        only on the shapes, so it is measured once."""
        if isinstance(grads, bytes):
            return wire_nbytes(grads)
        if self._dense_wire is None:
            self._dense_wire = wire_nbytes(grads)
        return self._dense_wire

    def epoch_kl(self, steps_per_epoch: int) -> float:
        """Mean approximate KL of the last epoch's steps (for the KL early stop)."""
        return float(np.mean([log["approx_kl"] for log in self._dppo_logs[-steps_per_epoch:]]))

    def end_dppo(self) -> UpdateResult:
        stats, coefs, t0 = self._pending
        logs, self._dppo_logs = self._dppo_logs, []
        result = self._finish(stats, logs, coefs, time.perf_counter() - t0)
        # The samples stay on the workers; their ids came with the statistics.
        result.accounting = self._accounting(lambda: np.concatenate([no_ids()] + [s.ids for s in stats]))
        result.metrics[M.PERF_GRAD_BYTES] = float(self._grad_bytes)
        # The same messages as raw float32 payload (4 bytes a parameter, no framing): the baseline
        # a compression ratio is stated against.
        result.metrics[M.PERF_GRAD_FP32_BYTES] = float(self._grad_messages * 4 * sum(p.numel() for p in self.params))
        self._keep_snapshot()
        self._published()
        return result

    def abort_dppo(self) -> int:
        """Undo the update begun by :meth:`begin_dppo` (a worker died during it): weights, optimizer,
        counters and normalizer statistics as they were. Returns the version (unchanged)."""
        policy, optimizer, self.env_steps, obs_stats, reward_stats = self._rollback
        self.policy.load_state_dict(policy)
        self.optimizer.load_state_dict(optimizer)
        self.obs_stats = RunningStats.from_state(obs_stats)
        self.reward_stats = RunningStats.from_state(reward_stats)
        self._dppo_logs, self._grad_bytes, self._grad_messages = [], 0, 0
        self._keep_snapshot()
        return self.version

    # -- bookkeeping ---------------------------------------------------------------------------
    def _check_finite(self, logs: list[dict], coefs: dict) -> dict[str, float]:
        """The update's mean policy and value losses (NaN without minibatches); stops on losses
        that are not finite (the weights diverged): it would go on as NaN, exit 0, and its loss
        charts would just end (a NaN is not charted)."""
        losses = {k: _mean(logs, k) for k in ("policy", "value")}
        bad = {k: v for k, v in losses.items() if logs and not np.isfinite(v)}
        if bad:
            idx = [layer.name for layer in self.cfg.layers].index(self.layer.name)
            raise DivergedError(
                f"layer {self.layer.name!r}: update {self.updates + 1} gave a non-finite loss ("
                + ", ".join(f"{k} {v}" for k, v in bad.items()) + f"): its weights diverged (learning rate "
                f"{coefs['lr']:g}). Lower layers[{idx}].ppo.lr, keep ppo.max_grad_norm set, or check the scale of the "
                "env's rewards and observations (normalization).")
        return losses

    def _finish(self, stats: list[RolloutStats], logs: list[dict], coefs: dict, update_s: float,
                publish: bool = True, lags: np.ndarray | None = None) -> UpdateResult:
        losses = self._check_finite(logs, coefs)
        self.version += 1
        self.updates += 1
        if publish:  # awaited (_published) by the caller before it returns
            self.publish(wait=False)
        out: dict[str, float] = {
            M.LOSS_POLICY: losses["policy"], M.LOSS_VALUE: losses["value"],
            M.LOSS_ENTROPY: _mean(logs, "entropy"), M.LOSS_APPROX_KL: _mean(logs, "approx_kl"),
            M.LOSS_CLIPFRAC: _mean(logs, "clipfrac"), M.LOSS_GRAD_NORM: _mean(logs, "grad_norm"),
            M.CHART_LR: coefs["lr"], M.CHART_ENTROPY_COEFF: coefs["entropy_coeff"],
            M.PERF_UPDATE_S: update_s, M.PERF_SGD_STEPS: float(len(logs)),
            M.CHART_REWARD_EXTRINSIC: float(np.mean([s.raw_reward_mean for s in stats])),
        }
        out[M.LOSS_EXPLAINED_VARIANCE] = explained_variance_of(stats)
        if "teacher_coeff" in coefs:
            out[M.CHART_TEACHER_COEFF] = coefs["teacher_coeff"]
            if any("teacher" in entry for entry in logs):
                out[M.LOSS_TEACHER] = _mean([e for e in logs if "teacher" in e], "teacher")
            if any("teacher_replay" in entry for entry in logs):
                out[M.LOSS_TEACHER_REPLAY] = _mean([e for e in logs if "teacher_replay" in e], "teacher_replay")
        if any("bounds" in entry for entry in logs):
            out[M.LOSS_BOUNDS] = _mean([e for e in logs if "bounds" in e], "bounds")
        if self.layer.reward.intrinsic_fn or any(s.intrinsic_reward_mean for s in stats):
            # Charted whenever the layer has one, 0 included: a reward that never pays must show as 0.
            out[M.CHART_REWARD_INTRINSIC] = float(np.mean([s.intrinsic_reward_mean for s in stats]))
        if any(s.bonus_mean for s in stats):
            out[M.CHART_EXPLORATION_BONUS] = float(np.mean([s.bonus_mean for s in stats]))
        counts = [s.command_counts for s in stats if s.command_counts]
        if any("grad_cosine" in entry for entry in logs):
            out[M.DIAG_GRAD_COSINE] = float(np.mean([e["grad_cosine"] for e in logs if "grad_cosine" in e]))
        divergence, coverage = _worker_diagnostics(stats)
        out |= divergence
        out[M.PERF_SAMPLES] = float(sum(s.num_samples for s in stats))
        per_worker: dict[int, int] = {}
        for s in stats:  # with dynamic batching (sync soft/async) faster workers contribute more
            per_worker[s.worker] = per_worker.get(s.worker, 0) + s.num_samples
        for w, n in per_worker.items():
            out[f"{M.PERF_WORKER_SAMPLES}/{w}"] = float(n)
        returns = [r for s in stats for r in s.episode_returns]
        lengths = [n for s in stats for n in s.episode_lengths]
        if returns:
            out[M.CHART_EPISODIC_RETURN] = float(np.mean(returns))
            out[M.CHART_EPISODE_LENGTH] = float(np.mean(lengths))
        out[M.CHART_EPISODES] = float(len(returns))
        infos: dict[str, list[float]] = {}
        for s in stats:
            for k, vals in s.episode_infos.items():
                infos.setdefault(k, []).extend(vals)
        for k, vals in infos.items():
            out[f"{M.EPISODE_INFO}/{k}"] = float(np.mean(vals))
        if lags is None:  # mode dppo: the samples stay on the workers, which report their versions' range
            n = [max(s.num_samples, 0) for s in stats]
            oldest = [s.version if s.oldest_version is None else s.oldest_version for s in stats]
            mean = [s.version if s.mean_version is None else s.mean_version for s in stats]
            total = sum(n)
            out[M.PERF_MAX_STALENESS] = float(self.version - 1 - min(oldest)) if total else 0.0
            out[M.PERF_MEAN_STALENESS] = (float(self.version - 1 - sum(k * v for k, v in zip(n, mean)) / total)
                                          if total else 0.0)
        else:
            out[M.PERF_MAX_STALENESS] = float(lags.max()) if lags.size else 0.0
            out[M.PERF_MEAN_STALENESS] = float(lags.mean()) if lags.size else 0.0
        return UpdateResult(out, self.env_steps, self.version,
                            np.sum(counts, axis=0).tolist() if counts else None, coverage)

    # -- checkpoints ---------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        extra = {"bonus": self.bonus.checkpoint()} if self.bonus else {}
        # On CPU: checkpoints are loaded where there may be no GPU (and Ray unpickles a CUDA
        # tensor onto a GPU, which the driver may not have).
        return extra | {"policy": on_cpu(self.policy.state_dict()), "optimizer": on_cpu(self.flat.per_parameter_state(self.optimizer.state_dict())),
                "obs_stats": self.obs_stats.to_state(), "reward_stats": self.reward_stats.to_state(),
                "version": self.version, "env_steps": self.env_steps, "updates": self.updates,
                "rng": self._rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    def set_state(self, state: dict[str, Any]) -> int:
        policy, converted = upgrade_image_encoders(state["policy"])
        self.policy.load_state_dict(policy)
        optimizer = copy.deepcopy(state["optimizer"]) if converted else state["optimizer"]
        upgrade_moments(self.policy, optimizer, converted, state["policy"])
        self.optimizer.load_state_dict(self.flat.flat_state(optimizer))
        self.flat.check()
        if self.bonus is not None:
            self.bonus.restore(state.get("bonus", state))  # checkpoints before bonus plug-ins kept RND's at the top
        self.obs_stats = RunningStats.from_state(state["obs_stats"])
        self.reward_stats = RunningStats.from_state(state["reward_stats"])
        self.version, self.env_steps, self.updates = state["version"], state["env_steps"], state["updates"]
        self._rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        version = self.publish()
        self._keep_snapshot()
        return version

    def counters(self) -> dict[str, int]:
        return {"version": self.version, "env_steps": self.env_steps, "updates": self.updates}

    def weight_shapes(self) -> dict[str, list[int]]:
        """Each policy tensor's shape, by state-dict key: what a checkpoint must match to be loaded."""
        return {k: list(v.shape) for k, v in self.policy.state_dict().items()}

    def load_weights(self, state: dict[str, Any]) -> int:
        """Start from another run's weights and observation statistics (schedule.checkpoint)."""
        self.policy.load_state_dict(state["policy"])
        self.obs_stats = RunningStats.from_state(state["obs_stats"])
        version = self.publish()
        self._keep_snapshot()
        return version

    def _keep_snapshot(self) -> None:
        """On Ray: keep a copy of :meth:`get_state` as it is now, between calls that change it.

        The trainer notes the version after every update and checkpoints the copy of that version
        (:meth:`state_snapshot`), so that a stop which has to abandon an update still saves the
        state after the last update it logged. It used to ask for the whole state after every
        update, which cost the learner 5-6 ms of a 0.1 s MinAtar update to serialise; the copy
        costs about 1 ms, and is serialised only for a checkpoint, on a thread of its own."""
        if not self._keeps_snapshots:
            return
        state = copied(self.get_state())
        with self._snapshot_lock:
            self._snapshots[self.version] = state
            for old in sorted(self._snapshots)[:-KEPT_SNAPSHOTS]:
                del self._snapshots[old]

    @concurrency_group(SNAPSHOT_GROUP)
    def state_snapshot(self, version: int | None = None) -> dict[str, Any]:
        """:meth:`get_state` as it was at ``version`` (None: the latest kept), answered even while an
        update runs. Each copy is kept whole and never changed, so it is read without the update's
        lock. Only on Ray (``ray.backend: ray``); in-process there is no update to run beside."""
        with self._snapshot_lock:
            if not self._snapshots:
                raise RuntimeError(f"layer {self.layer.name!r}: this learner keeps no state snapshots (ray.backend is "
                                   "not ray); ask get_state instead")
            key = max(self._snapshots) if version is None else version
            if key not in self._snapshots:
                raise RuntimeError(f"layer {self.layer.name!r}: no state snapshot of version {key} (kept: "
                                   f"{sorted(self._snapshots)})")
            return self._snapshots[key]


def _worker_diagnostics(stats: list[RolloutStats]) -> tuple[dict[str, float], tuple | None]:
    """Each worker's observation and action divergence from the pool; the coverage sample
    (states and the worker of each), or None."""
    out: dict[str, float] = {}
    by_worker: dict[int, list[RolloutStats]] = {}
    for s in stats:
        by_worker.setdefault(s.worker, []).append(s)
    for key, tag in (("obs_moments", M.DIAG_OBS_DIVERGENCE), ("action_moments", M.DIAG_ACTION_DIVERGENCE)):
        if len(by_worker) < 2 or any(getattr(s, key) is None for s in stats):
            continue
        means, variances = [], []
        for ss in by_worker.values():  # a worker's chunks (sync soft/async) pooled first
            m, v = pool_moments([getattr(s, key)[0] for s in ss], [getattr(s, key)[1] for s in ss],
                                [s.num_samples for s in ss])
            means.append(m)
            variances.append(v)
        div = divergences(means, variances)
        out[f"{tag}/max"] = max(div)
        for w, d in zip(by_worker, div):
            out[f"{tag}/{w}"] = d
    cov = [(s.coverage, s.worker) for s in stats if s.coverage is not None]
    if not cov:
        return out, None
    return out, (np.concatenate([c for c, _ in cov]), np.concatenate([np.full(len(c), w) for c, w in cov]))


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the module's weights that later optimizer steps cannot change."""
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}


def _terms_dict(terms) -> dict[str, float]:
    out = {k: float(getattr(terms, k).detach()) for k in ("policy", "value", "entropy", "approx_kl", "clipfrac")}
    if terms.teacher is not None:
        out["teacher"] = float(terms.teacher.detach())
    if terms.teacher_replay is not None:
        out["teacher_replay"] = float(terms.teacher_replay.detach())
    if terms.bounds is not None:
        out["bounds"] = float(terms.bounds.detach())
    return out


def _mean(logs: list[dict], key: str) -> float:
    return float(np.mean([entry[key] for entry in logs])) if logs else float("nan")
