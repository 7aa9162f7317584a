"""A rollout worker: ``num_envs`` env copies, a local copy of the policy, its own reward scaler.

Plain Python; :mod:`hdppo.platform.backend` turns it into a Ray actor. Everything a worker
needs arrives as constructor arguments or through the parameter service, so it runs on any node.
"""
from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import torch

from hdppo.envs.env_pool import EnvPool
from hdppo.envs.loading import make_gym_env
from hdppo.platform.backend import call_service, deref
from hdppo.platform.batch import Batch, Rollout, RolloutStats
from hdppo.platform.config import Config, rollout_length
from hdppo.policies.gae import compute_gae
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer, RewardScaler, RunningStats
from hdppo.policies.ppo_update import gradients, minibatch_loss


def make_env_fn(cfg: Config):
    e = cfg.env
    return lambda: make_gym_env(e.id, e.entry_point, e.kwargs, e.max_episode_steps)


class RolloutWorker:
    def __init__(self, cfg: Config, layer_index: int, worker_index: int, num_workers: int, service: Any):
        torch.set_num_threads(1)  # many workers share a machine; one thread each avoids oversubscription
        self.cfg = cfg
        self.layer = cfg.layers[layer_index]
        self.index = worker_index
        self.service = service
        seed = cfg.train.seed + 10_007 * (worker_index + 1)
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        random.seed(seed)
        d, n = self.layer.dppo, self.layer.normalization
        self.pool = EnvPool(make_env_fn(cfg), d.num_envs_per_worker, seed=seed, name=cfg.env.id or cfg.env.entry_point or "env")
        self.policy = ActorCritic(self.pool.obs_dim, self.pool.action_space, self.layer.policy.hidden,
                                  self.layer.policy.activation, self.layer.policy.init_log_std)
        self.policy.requires_grad_(cfg.layers[layer_index].dppo.mode == "dppo")
        self.obs_norm = ObservationNormalizer((self.pool.obs_dim,), n.clip, n.observation)
        self.reward_scaler = RewardScaler(d.num_envs_per_worker, self.layer.ppo.gamma, n.clip, n.reward)
        self.rollout_len = rollout_length(self.layer, num_workers)
        self.version = -1
        self._last: Batch | None = None

    # -- weights -------------------------------------------------------------------------------
    def _pull(self) -> None:
        """Adopt the newest published version of this layer, if it is newer than ours."""
        rec = call_service(self.service, "latest", self.layer.name)
        if rec is None or rec["version"] == self.version:
            return
        self.policy.load_state_dict(deref(rec["weights"][0]))
        if rec.get("obs_stats") is not None:
            self.obs_norm.set_published(RunningStats.from_state(rec["obs_stats"]))
        if self.layer.normalization.reward_scope == "global" and rec.get("reward_stats") is not None:
            self.reward_scaler.set_published(RunningStats.from_state(rec["reward_stats"]))
        self.version = rec["version"]

    # -- sampling ------------------------------------------------------------------------------
    def sample(self) -> Rollout:
        """Step every env ``rollout_len`` times with the newest weights; GAE per worker."""
        self._pull()
        t0 = time.perf_counter()
        T, N, D = self.rollout_len, self.pool.num_envs, self.pool.obs_dim
        act_dim = self.policy.head.dim
        obs_buf = np.empty((T, N, D), np.float32)
        act_buf = np.empty((T, N, act_dim), np.float32)
        logp_buf = np.empty((T, N), np.float32)
        val_buf = np.empty((T, N), np.float32)
        rew_buf = np.empty((T, N), np.float32)
        term_buf = np.zeros((T, N), bool)
        end_buf = np.zeros((T, N), bool)
        truncated_final: list[tuple[int, int, np.ndarray]] = []
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        raw_reward_sum = 0.0
        for t in range(T):
            raw = self.pool.obs
            self.obs_norm.observe(raw)
            obs = self.obs_norm(raw)
            actions, logp, values = self.policy.act(torch.from_numpy(obs))
            res = self.pool.step(self.policy.head.to_env(actions))
            ended = res.terminated | res.truncated
            obs_buf[t], act_buf[t], logp_buf[t], val_buf[t] = obs, actions, logp, values
            rew_buf[t] = self.reward_scaler(res.rewards, ended)
            term_buf[t], end_buf[t] = res.terminated, ended
            raw_reward_sum += float(res.rewards.sum())
            for i in np.flatnonzero(res.truncated):
                truncated_final.append((t, int(i), res.final_obs[int(i)]))
            ep_returns += res.episode_returns
            ep_lengths += res.episode_lengths
        next_values = self._next_values(val_buf, truncated_final)
        adv, ret = compute_gae(rew_buf, val_buf, next_values, term_buf, end_buf,
                               self.layer.ppo.gamma, self.layer.ppo.gae_lambda)
        batch = Batch(obs_buf.reshape(T * N, D), act_buf.reshape(T * N, act_dim), logp_buf.reshape(-1),
                      val_buf.reshape(-1), adv.reshape(-1), ret.reshape(-1))
        self._last = batch
        scope_global = self.layer.normalization.reward_scope == "global"
        ret64 = batch.returns.astype(np.float64)
        res64 = ret64 - batch.values
        stats = RolloutStats(
            worker=self.index, version=self.version, env_steps=T * N, sample_s=time.perf_counter() - t0,
            episode_returns=ep_returns, episode_lengths=ep_lengths,
            obs_delta=self.obs_norm.take_delta().to_state() if self.obs_norm.enabled else None,
            reward_delta=self.reward_scaler.take_delta().to_state() if scope_global else None,
            adv_sum=float(batch.advantages.sum()), adv_sumsq=float((batch.advantages.astype(np.float64) ** 2).sum()),
            ret_sum=float(ret64.sum()), ret_sumsq=float((ret64**2).sum()),
            res_sum=float(res64.sum()), res_sumsq=float((res64**2).sum()),
            raw_reward_mean=raw_reward_sum / (T * N))
        return Rollout(batch, stats)

    def _next_values(self, values: np.ndarray, truncated_final: list) -> np.ndarray:
        """V(s_{t+1}): the next row's value, the value after the rollout for the last row, and
        V(true final observation) where an episode was truncated (one batched forward pass)."""
        nxt = np.empty_like(values)
        nxt[:-1] = values[1:]
        finals = [self.obs_norm(self.pool.obs)] + [self.obs_norm(f[None]) for _, _, f in truncated_final]
        with torch.inference_mode():
            v = self.policy.value(torch.from_numpy(np.concatenate(finals))).numpy()
        N = values.shape[1]
        nxt[-1] = v[:N]
        for k, (t, i, _) in enumerate(truncated_final):
            nxt[t, i] = v[N + k]
        return nxt

    def sample_stats_only(self) -> RolloutStats:
        """Mode ``dppo``: sample, keep the batch here, send back only the statistics."""
        return self.sample().stats

    # -- mode dppo -----------------------------------------------------------------------------
    def gradient(self, weights: Any, epoch: int, minibatch: int, num_minibatches: int,
                 adv_mean: float, adv_std: float, entropy_coeff: float) -> tuple[list[torch.Tensor], int, dict]:
        """Gradient of the mean loss on this worker's share of minibatch ``minibatch`` of ``epoch``."""
        assert self._last is not None, "gradient() before sample()"
        self.policy.load_state_dict(deref(weights))
        n = len(self._last)
        # The same permutation for every minibatch of an epoch: derived from (seed, version, epoch).
        perm = np.random.default_rng((self.cfg.train.seed, self.index, self.version, epoch)).permutation(n)
        idx = np.array_split(perm, num_minibatches)[minibatch]
        mb = self._last.take(idx).to_torch()
        p = self.layer.ppo
        terms = minibatch_loss(self.policy, mb, adv_mean, adv_std, clip=p.clip, value_clip=p.value_clip,
                               vf_coeff=p.vf_coeff, entropy_coeff=entropy_coeff, normalize=p.normalize_advantages)
        grads = gradients(self.policy, terms.total)
        info = {k: float(getattr(terms, k).detach()) for k in ("policy", "value", "entropy", "approx_kl", "clipfrac")}
        return grads, len(idx), info

    # -- state ---------------------------------------------------------------------------------
    def get_state(self) -> dict:
        rs = self.reward_scaler
        return {"reward_stats": rs.stats.to_state(), "reward_returns": rs.returns.tolist(),
                "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    def set_state(self, state: dict) -> None:
        self.reward_scaler.stats = RunningStats.from_state(state["reward_stats"])
        self.reward_scaler.returns = np.asarray(state["reward_returns"], np.float64)
        self.rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])

    def ping(self) -> int:
        return self.index
