"""A rollout worker: ``num_envs`` env copies, a local copy of every layer's policy, its own
reward scalers.

Plain Python; :mod:`hdppo.platform.backend` turns it into a Ray actor. Everything a worker
needs arrives as constructor arguments or through the parameter service, so it runs on any node.

Every run samples through the one engine, :class:`~hdppo.hierarchies.engine.Sampler`, over the
env as a :class:`~hdppo.envs.vector.VectorMultiAgentEnv`: a single-agent Gymnasium env is one
lane of one layer; a hierarchy is several layers, of which this worker records its group's.
"""
from __future__ import annotations

import os
import random
import time
from typing import Any

import numpy as np
import torch

from ..envs.loading import WORKER_INDEX_VAR
from ..hierarchies.engine import Sampler, Track
from ..hierarchies.spec import probe_env
from . import affinity
from .backend import call_service, deref
from .batch import Batch, Rollout, RolloutStats
from .config import Config, worker_quota
from .diagnostics import DIAG_MAX_ROWS, moments, observation_moments
from .messages import GradientResult
from .threads import limit_blas_threads, use_threads

# The attribute a failed ``sample`` call's exception carries: per recorded layer, the ids of the
# samples its rollout had collected, lost with it (the group counts them as failed).
LOST_IDS = "hdppo_lost_ids"
from ..policies.bonuses import make_bonus
from ..policies.compression import compress
from ..policies.networks import ActorCritic, make_policy, sequence_chunks
from ..policies.normalizers import ObservationNormalizer, RewardScaler, RunningStats
from ..policies.ppo_update import minibatch_gradients
from ..policies.schedules import linear


class RolloutWorker:
    def __init__(self, cfg: Config, layers: list[str], worker_index: int, num_workers: int, service: Any,
                 uid: int | None = None):
        affinity.apply(cfg, "worker", layers, worker_index)  # ray.cpu_affinity (a Ray actor only)
        use_threads(1)  # many workers share a machine; one thread each avoids oversubscription
        limit_blas_threads(1)  # and numpy's products too (its BLAS threads spin beside the learner)
        # Envs may read which worker made them (e.g. to vary conditions per worker). A Ray actor
        # is its own process; on the local backend the last worker made wins.
        os.environ[WORKER_INDEX_VAR] = str(worker_index)
        self.cfg = cfg
        self.layers = list(layers)              # the layers this worker records (its group's)
        self.index = worker_index
        # This incarnation's number in its samples' ids (the group gives each worker it starts a new one).
        self.uid = worker_index if uid is None else uid
        self._copies_made = 0
        self.num_workers = num_workers
        self.service = service
        seed = cfg.train.seed + 10_007 * (worker_index + 1) + 101 * sum(map(ord, "".join(layers)))
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        random.seed(seed)
        self.dppo = cfg.group_dppo(self.layers)
        d = self.dppo
        self.versions: dict[str, int] = {}
        self.progress: dict[str, float] = {}
        self._last: dict[str, Batch] = {}
        self._residuals: dict[str, torch.Tensor] = {}
        self.policies: dict[str, ActorCritic] = {}
        self.obs_norms: dict[str, ObservationNormalizer] = {}
        self.scalers: dict[str, RewardScaler] = {}
        self._seed = seed
        venv, first, self.specs = probe_env(cfg, seed, d.num_envs_per_worker)
        for s in self.specs:
            layer = s.cfg
            p, n = layer.policy, layer.normalization
            self.policies[s.name] = make_policy(s.obs_dim, s.action_space, p.hidden, p.activation, p.init_log_std,
                                                s.critic_dim, s.encoder)
            self.policies[s.name].act_precision = cfg.learner_of(s.name).precision
            self.obs_norms[s.name] = ObservationNormalizer((s.obs_dim,), n.clip, n.observation)
            self.scalers[s.name] = RewardScaler(d.num_envs_per_worker, layer.ppo.gamma, n.clip, n.reward)
            self.versions[s.name] = -1
        tracks = {name: Track(cfg.layer(name).ppo.gamma, cfg.layer(name).ppo.gae_lambda,
                              cfg.layer(name).reward.discount == "smdp", self.scalers[name]) for name in self.layers}
        made = {s.name: make_bonus(s.cfg.exploration, s.obs_dim, s.name) for s in self.specs if s.name in self.layers}
        self.bonuses = {name: b for name, b in made.items() if b is not None}
        self._tracks = tracks
        self._start_sampler(venv, first)
        for p in self.policies.values():
            p.requires_grad_(d.mode == "dppo")

    def _start_sampler(self, venv: Any, first: Any) -> None:
        self.sampler = Sampler(self.specs, venv, self.policies, self.obs_norms, self._tracks,
                               bonus=self._bonus if self.bonuses else None, first=first,
                               episode_metrics=self.cfg.env.episode_metrics, scripted=self.cfg.scripted_layers())
        self.sampler.version = self.versions  # rows are stamped with the version that acted
        self.sampler.source, self.sampler.copy_base = self.uid, self._copies_made
        self._copies_made += self.sampler.N
        self._broken = False

    def _bonus(self, layer: str, obs: np.ndarray) -> np.ndarray:
        bonus = self.bonuses.get(layer)
        if bonus is None:
            return np.zeros(len(obs), np.float32)
        e = self.cfg.layer(layer).exploration
        return bonus(obs, linear(e.coeff, e.coeff_final, self.progress.get(layer, 0.0)))

    # -- weights -------------------------------------------------------------------------------
    def _pull(self) -> None:
        """Adopt the newest published version of every layer that is newer than ours."""
        for name in self.policies:
            rec = call_service(self.service, "latest", name)
            if rec is None or rec["version"] == self.versions[name]:
                continue
            self.policies[name].load_state_dict(deref(rec["weights"][0]))
            if rec.get("obs_stats") is not None:
                self.obs_norms[name].set_published(RunningStats.from_state(rec["obs_stats"]))
            if self.cfg.layer(name).normalization.reward_scope == "global" and rec.get("reward_stats") is not None:
                self.scalers[name].set_published(RunningStats.from_state(rec["reward_stats"]))
            bonus_state = rec.get("bonus", rec.get("rnd"))
            if bonus_state is not None and name in self.bonuses:
                self.bonuses[name].load_state(deref(bonus_state[0]))
            self.versions[name] = rec["version"]
            self.progress[name] = float(rec.get("progress", 0.0))

    # -- sampling ------------------------------------------------------------------------------
    def sample(self) -> dict[str, Rollout]:
        """One rollout per recorded layer, with the newest weights; GAE on this worker. With
        ``sync: soft`` newer weights are also adopted inside the rollout, every
        ``refresh_every`` env steps; each sample keeps the version that chose it."""
        use_threads(1)  # one thread per worker (a local-backend learner in this process may have set more)
        self._pull()
        t0 = time.perf_counter()
        quota = {name: worker_quota(self.cfg.layer(name), self.num_workers) for name in self.layers}
        refresh = self.dppo.refresh_in_rollout  # env steps between refreshes; 0 for modes without
        if self._broken:
            # The last rollout failed mid-step (the env raised): its copies are in an unknown
            # state and its partial rows must not count. Start over with fresh copies.
            try:
                self.sampler.close()
            except Exception:  # noqa: BLE001 - a crashed simulator may fail to close too; it is dropped
                pass
            self._seed += 1
            venv, first, _ = probe_env(self.cfg, self._seed, self.dppo.num_envs_per_worker)
            self._start_sampler(venv, first)
        try:
            harvests, episodes, env_steps = self.sampler.collect(quota, self._pull if refresh else None, refresh)
        except BaseException as exc:
            self._broken = True
            try:
                setattr(exc, LOST_IDS, {name: ids for name, ids in self.sampler.unharvested_ids().items()
                                        if name in self.layers})
            except Exception:  # noqa: BLE001 - an exception that takes no attributes: its samples go unreported
                pass
            raise
        out: dict[str, Rollout] = {}
        ep_infos = self.sampler.take_episode_infos()  # the same episodes for every layer of this worker
        for name in self.layers:
            h = harvests[name]
            self._last[name] = h.batch
            out[name] = Rollout(h.batch, self._stats(
                name, h.batch, env_steps, t0, [e[0] for e in episodes], [e[1] for e in episodes],
                h.env_reward, h.intrinsic_reward, h.bonus, h.command_counts, ep_infos))
        return out

    def _stats(self, name: str, batch: Batch, env_steps: int, t0: float, ep_returns: list, ep_lengths: list,
               raw_reward_sum: float, intrinsic_sum: float = 0.0, bonus_sum: float = 0.0,
               command_counts: list[int] | None = None,
               episode_infos: dict[str, list[float]] | None = None) -> RolloutStats:
        layer = self.cfg.layer(name)
        ret64 = batch.returns.astype(np.float64)
        res64 = ret64 - batch.values
        adv64 = batch.advantages.astype(np.float64)
        n = max(len(batch), 1)
        obs_delta = self.obs_norms[name].take_delta() if layer.normalization.observation else None
        return RolloutStats(
            worker=self.index, version=self.versions[name], env_steps=env_steps, sample_s=time.perf_counter() - t0,
            episode_returns=ep_returns, episode_lengths=ep_lengths, episode_infos=episode_infos or {},
            obs_delta=obs_delta.to_state() if obs_delta is not None else None,
            reward_delta=self.scalers[name].take_delta().to_state() if layer.normalization.reward_scope == "global" else None,
            adv_sum=float(adv64.sum()), adv_sumsq=float((adv64**2).sum()),
            ret_sum=float(ret64.sum()), ret_sumsq=float((ret64**2).sum()),
            res_sum=float(res64.sum()), res_sumsq=float((res64**2).sum()),
            raw_reward_mean=raw_reward_sum / n, intrinsic_reward_mean=intrinsic_sum / n, bonus_mean=bonus_sum / n,
            command_counts=command_counts, num_samples=len(batch),
            oldest_version=int(batch.versions.min()) if len(batch) else None,
            mean_version=float(batch.versions.mean()) if len(batch) else None,
            obs_moments=observation_moments(obs_delta, batch.obs), action_moments=moments(batch.actions, DIAG_MAX_ROWS),
            coverage=self._coverage_sample(name, batch))

    def _coverage_sample(self, name: str, batch: Batch) -> np.ndarray | None:
        """States for the coverage image, only for the updates that draw it (this rollout feeds
        the update that makes version ``version + 1``)."""
        every = self.cfg.diagnostics.every
        if not every or self.versions[name] < 0 or (self.versions[name] + 1) % every or not len(batch):
            return None
        k = min(self.cfg.diagnostics.coverage_points, len(batch))
        pick = np.random.default_rng((self.cfg.train.seed, self.index, self.versions[name]))  # leaves self.rng alone
        return batch.obs[pick.choice(len(batch), k, replace=False)]

    def resize(self, num_workers: int) -> int:
        """The pool now has ``num_workers`` workers: take this worker's new share of a batch."""
        self.num_workers = num_workers  # the next rollout's quota follows from it
        return num_workers

    def sample_stats_only(self) -> dict[str, RolloutStats]:
        """Mode ``dppo``: sample, keep the batches here, send back only the statistics (with the
        samples' ids under ``diagnostics.accounting``)."""
        out = self.sample()
        if self.cfg.diagnostics.accounting:
            for r in out.values():
                r.stats.ids = r.batch.ids
        return {name: r.stats for name, r in out.items()}

    # -- mode dppo -----------------------------------------------------------------------------
    def gradient(self, weights: Any, epoch: int, minibatch: int, num_minibatches: int,
                 adv_mean: float, adv_std: float, entropy_coeff: float,
                 layer: str | None = None) -> GradientResult:
        """Gradient of the mean loss on this worker's share of minibatch ``minibatch`` of ``epoch``."""
        use_threads(1)
        name = layer or self.layers[0]
        batch = self._last[name]
        policy = self.policies[name]
        policy.load_state_dict(deref(weights))
        # The same permutation for every minibatch of an epoch: derived from (seed, version, epoch).
        rng = np.random.default_rng((self.cfg.train.seed, self.index, self.versions[name], epoch))
        chunks = None
        if getattr(policy, "recurrent", False):  # a GRU layer: this worker's share is whole chunks, as in mode central
            index, valid = sequence_chunks(batch.ids, self.cfg.layer(name).policy.seq_len)
            pick = np.array_split(rng.permutation(len(index)), num_minibatches)[minibatch]
            mb, chunks, count = batch.to_torch(), (torch.as_tensor(index[pick]), torch.as_tensor(valid[pick])), int(valid[pick].sum())
        else:
            idx = np.array_split(rng.permutation(len(batch)), num_minibatches)[minibatch]
            mb, count = batch.take(idx).to_torch(), len(idx)
        p = self.cfg.layer(name).ppo
        if chunks is not None and not count:  # more minibatches than this worker has chunks: nothing to add
            grads: Any = [torch.zeros_like(q) for q in policy.parameters()]
            info = {k: 0.0 for k in ("policy", "value", "entropy", "approx_kl", "clipfrac")}
            return GradientResult(grads, 0, info)
        learner = self.cfg.learner_of(name)
        terms, grads = minibatch_gradients(policy, mb, adv_mean, adv_std, list(policy.parameters()), clip=p.clip,
                                           value_clip=p.value_clip, vf_coeff=p.vf_coeff, entropy_coeff=entropy_coeff,
                                           normalize=p.normalize_advantages, chunks=chunks,
                                           bounds_coeff=p.bounds_loss_coeff, precision=learner.precision,
                                           autograd=learner.autograd)
        info = {k: float(getattr(terms, k).detach()) for k in ("policy", "value", "entropy", "approx_kl", "clipfrac")}
        scheme = self.cfg.layer(name).dppo.compression
        if scheme != "none":
            # Error feedback: what this worker's quantiser lost is added to its next message.
            grads, self._residuals[name] = compress(grads, scheme, self._residuals.get(name))
        return GradientResult(grads, count, info)

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict:
        return {"reward": {name: {"stats": s.stats.to_state(), "returns": s.returns.tolist()}
                           for name, s in self.scalers.items()},
                "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    def set_state(self, state: dict) -> None:
        for name, s in state["reward"].items():
            self.scalers[name].stats = RunningStats.from_state(s["stats"])
            # Episodes restart after a resume, so the running returns of the old ones start at 0
            # (in a hierarchy their slots would not even map to the same lanes).
            self.scalers[name].returns = np.zeros_like(np.asarray(s["returns"], np.float64))
        self.rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])

    def ping(self) -> int:
        return self.index

    def node(self) -> str:
        """The Ray node this worker runs on ('local' in-process)."""
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
