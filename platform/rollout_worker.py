"""A rollout worker: ``num_envs`` env copies, a local copy of every layer's policy, its own
reward scalers.

Plain Python; :mod:`hdppo.platform.backend` turns it into a Ray actor. Everything a worker
needs arrives as constructor arguments or through the parameter service, so it runs on any node.

One layer over a single-agent Gymnasium env takes the vectorised fast path (:meth:`_sample_flat`);
anything else runs the whole hierarchy (:class:`~hdppo.hierarchies.runner.HierarchyRunner`)
and records the layers of this worker's group.
"""
from __future__ import annotations

import os
import random
import time
from typing import Any

import numpy as np
import torch

from hdppo.envs.env_pool import EnvPool
from hdppo.envs.loading import WORKER_INDEX_VAR, make_gym_env
from hdppo.platform.backend import call_service, deref
from hdppo.platform.batch import Batch, Rollout, RolloutStats
from hdppo.platform.config import Config, rollout_length, worker_quota
from hdppo.platform.diagnostics import moments
from hdppo.platform.messages import GradientResult
from hdppo.policies.compression import compress
from hdppo.policies.exploration import RND, CountBonus, RNDBonus
from hdppo.policies.gae import compute_gae
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer, RewardScaler, RunningStats
from hdppo.policies.ppo_update import gradients, minibatch_loss
from hdppo.policies.schedules import linear


def make_env_fn(cfg: Config):
    e = cfg.env
    return lambda: make_gym_env(e.id, e.entry_point, e.kwargs, e.max_episode_steps)


def make_adapter_fn(cfg: Config):
    from hdppo.envs.adapters import make_multi_agent

    e = cfg.env
    return lambda: make_multi_agent(e.type, e.id, e.entry_point, e.kwargs, e.max_episode_steps)


class RolloutWorker:
    def __init__(self, cfg: Config, layers: list[str], worker_index: int, num_workers: int, service: Any):
        torch.set_num_threads(1)  # many workers share a machine; one thread each avoids oversubscription
        # Envs may read which worker made them (e.g. to vary conditions per worker). A Ray actor
        # is its own process; on the local backend the last worker made wins.
        os.environ[WORKER_INDEX_VAR] = str(worker_index)
        self.cfg = cfg
        self.layers = list(layers)              # the layers this worker records (its group's)
        self.index = worker_index
        self.num_workers = num_workers
        self.service = service
        seed = cfg.train.seed + 10_007 * (worker_index + 1) + 101 * sum(map(ord, "".join(layers)))
        self.rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        random.seed(seed)
        self.group_cfg = cfg.layer(self.layers[0])
        d = self.group_cfg.dppo
        self.versions: dict[str, int] = {}
        self.progress: dict[str, float] = {}
        self._last: dict[str, Batch] = {}
        self._residuals: dict[str, torch.Tensor] = {}
        self.policies: dict[str, ActorCritic] = {}
        self.obs_norms: dict[str, ObservationNormalizer] = {}
        self.scalers: dict[str, RewardScaler] = {}
        if not cfg.hierarchical:
            layer = cfg.layers[0]
            self.pool = EnvPool(make_env_fn(cfg), d.num_envs_per_worker, seed=seed,
                                name=cfg.env.name)
            self._add_layer(layer.name, self.pool.obs_dim, self.pool.action_space, None, d.num_envs_per_worker)
            self.rollout_len = rollout_length(layer, num_workers)
        else:
            from hdppo.hierarchies.recorder import LayerRecorder
            from hdppo.hierarchies.runner import HierarchyRunner
            from hdppo.hierarchies.spec import probe_env

            probe, self.specs = probe_env(cfg, seed)
            probe.close()
            for s in self.specs:
                self._add_layer(s.name, s.obs_dim, s.action_space, s.critic_dim, 0)
            self.recorders = {name: LayerRecorder(cfg.layer(name).ppo.gamma, cfg.layer(name).ppo.gae_lambda,
                                                  cfg.layer(name).reward.discount == "smdp", self.scalers[name])
                              for name in self.layers}
            self.bonuses = {s.name: self._make_bonus(s) for s in self.specs
                            if s.cfg.exploration.type != "none" and s.name in self.layers}
            self.runner = HierarchyRunner(self.specs, make_adapter_fn(cfg), d.num_envs_per_worker, seed,
                                          self.policies, self.obs_norms, self.recorders, bonus=self._bonus)
        for p in self.policies.values():
            p.requires_grad_(d.mode == "dppo")

    def _add_layer(self, name: str, obs_dim: int, action_space, critic_dim: int | None, num_envs: int) -> None:
        layer = self.cfg.layer(name)
        p, n = layer.policy, layer.normalization
        self.policies[name] = ActorCritic(obs_dim, action_space, p.hidden, p.activation, p.init_log_std, critic_dim)
        self.obs_norms[name] = ObservationNormalizer((obs_dim,), n.clip, n.observation)
        self.scalers[name] = RewardScaler(num_envs, layer.ppo.gamma, n.clip, n.reward)
        self.versions[name] = -1

    @staticmethod
    def _make_bonus(spec) -> CountBonus | RNDBonus:
        e = spec.cfg.exploration
        if e.type == "count":
            return CountBonus(spec.obs_dim, e.hash_bits, spec.name)
        return RNDBonus(RND(spec.obs_dim, e.rnd_hidden, e.rnd_out, spec.name))

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
            if rec.get("rnd") is not None and name in getattr(self, "bonuses", {}):
                self.bonuses[name].rnd.predictor.load_state_dict(deref(rec["rnd"][0]))  # type: ignore[union-attr]
            self.versions[name] = rec["version"]
            self.progress[name] = float(rec.get("progress", 0.0))

    # -- sampling ------------------------------------------------------------------------------
    def sample(self) -> dict[str, Rollout]:
        """One rollout per recorded layer, with the newest weights; GAE on this worker."""
        self._pull()
        return self._sample_flat() if not self.cfg.hierarchical else self._sample_hierarchy()

    def _stats(self, name: str, batch: Batch, env_steps: int, t0: float, ep_returns: list, ep_lengths: list,
               raw_reward_sum: float, intrinsic_sum: float = 0.0, bonus_sum: float = 0.0,
               command_counts: list[int] | None = None) -> RolloutStats:
        layer = self.cfg.layer(name)
        ret64 = batch.returns.astype(np.float64)
        res64 = ret64 - batch.values
        adv64 = batch.advantages.astype(np.float64)
        n = max(len(batch), 1)
        return RolloutStats(
            worker=self.index, version=self.versions[name], env_steps=env_steps, sample_s=time.perf_counter() - t0,
            episode_returns=ep_returns, episode_lengths=ep_lengths,
            obs_delta=self.obs_norms[name].take_delta().to_state() if layer.normalization.observation else None,
            reward_delta=self.scalers[name].take_delta().to_state() if layer.normalization.reward_scope == "global" else None,
            adv_sum=float(adv64.sum()), adv_sumsq=float((adv64**2).sum()),
            ret_sum=float(ret64.sum()), ret_sumsq=float((ret64**2).sum()),
            res_sum=float(res64.sum()), res_sumsq=float((res64**2).sum()),
            raw_reward_mean=raw_reward_sum / n, intrinsic_reward_mean=intrinsic_sum / n, bonus_mean=bonus_sum / n,
            command_counts=command_counts, num_samples=len(batch),
            obs_moments=moments(batch.obs), action_moments=moments(batch.actions),
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

    def _sample_flat(self) -> dict[str, Rollout]:
        """Step every env ``rollout_len`` times: arrays ``[T, N]``, no per-agent bookkeeping."""
        name = self.layers[0]
        policy, obs_norm, scaler = self.policies[name], self.obs_norms[name], self.scalers[name]
        layer = self.cfg.layer(name)
        t0 = time.perf_counter()
        T, N, D = self.rollout_len, self.pool.num_envs, self.pool.obs_dim
        act_dim = policy.head.dim
        obs_buf = np.empty((T, N, D), np.float32)
        act_buf = np.empty((T, N, act_dim), np.float32)
        logp_buf = np.empty((T, N), np.float32)
        val_buf = np.empty((T, N), np.float32)
        rew_buf = np.empty((T, N), np.float32)
        term_buf = np.zeros((T, N), bool)
        end_buf = np.zeros((T, N), bool)
        ver_buf = np.empty((T, N), np.int64)
        truncated_final: list[tuple[int, int, np.ndarray]] = []
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        raw_reward_sum = 0.0
        refresh = layer.dppo.refresh_every if layer.dppo.sync == "soft" else 0
        segment = 0  # first row whose values are not computed yet

        def fill_values(end: int) -> None:
            # The critic runs once per stretch of rows acted with one weights version, batched,
            # rather than every step: the same values, a fraction of the per-step cost.
            with torch.inference_mode():
                val_buf[segment:end] = policy.value(torch.from_numpy(obs_buf[segment:end].reshape(-1, D))).numpy().reshape(-1, N)

        for t in range(T):
            if refresh and t and t % refresh == 0:
                fill_values(t)
                segment = t
                self._pull()  # soft sync: adopt newer weights mid-rollout; each sample keeps its version
            ver_buf[t] = self.versions[name]
            raw = self.pool.obs
            obs_norm.observe(raw)
            obs = obs_norm(raw)
            actions, logp, _ = policy.act(torch.from_numpy(obs), with_value=False)
            res = self.pool.step(policy.head.to_env(actions))
            ended = res.terminated | res.truncated
            obs_buf[t], act_buf[t], logp_buf[t] = obs, actions, logp
            rew_buf[t] = scaler(res.rewards, ended)
            term_buf[t], end_buf[t] = res.terminated, ended
            raw_reward_sum += float(res.rewards.sum())
            for i in np.flatnonzero(res.truncated):
                truncated_final.append((t, int(i), res.final_obs[int(i)]))
            ep_returns += res.episode_returns
            ep_lengths += res.episode_lengths
        fill_values(T)
        next_values = self._next_values(val_buf, truncated_final)
        adv, ret = compute_gae(rew_buf, val_buf, next_values, term_buf, end_buf, layer.ppo.gamma, layer.ppo.gae_lambda)
        batch = Batch(obs_buf.reshape(T * N, D), act_buf.reshape(T * N, act_dim), logp_buf.reshape(-1),
                      val_buf.reshape(-1), adv.reshape(-1), ret.reshape(-1), versions=ver_buf.reshape(-1))
        self._last[name] = batch
        return {name: Rollout(batch, self._stats(name, batch, T * N, t0, ep_returns, ep_lengths, raw_reward_sum))}

    def _next_values(self, values: np.ndarray, truncated_final: list) -> np.ndarray:
        """V(s_{t+1}): the next row's value, the value after the rollout for the last row, and
        V(true final observation) where an episode was truncated (one batched forward pass)."""
        name = self.layers[0]
        nxt = np.empty_like(values)
        nxt[:-1] = values[1:]
        norm = self.obs_norms[name]
        finals = [norm(self.pool.obs)] + [norm(f[None]) for _, _, f in truncated_final]
        with torch.inference_mode():
            v = self.policies[name].value(torch.from_numpy(np.concatenate(finals))).numpy()
        N = values.shape[1]
        nxt[-1] = v[:N]
        for k, (t, i, _) in enumerate(truncated_final):
            nxt[t, i] = v[N + k]
        return nxt

    def _sample_hierarchy(self) -> dict[str, Rollout]:
        t0 = time.perf_counter()
        quota = {name: worker_quota(self.cfg.layer(name), self.num_workers) for name in self.layers}
        cap = 1000 * max(quota.values()) * max(s.every for s in self.specs)  # a layer that never acts must not hang
        start = self.runner.env_steps
        episodes: list[tuple[float, int, int]] = []
        for c in self.runner.command_counts.values():
            c[:] = 0
        while any(self.recorders[n].num_closed < quota[n] for n in self.layers):
            episodes += self.runner.step()
            if self.runner.env_steps - start > cap:
                raise RuntimeError(f"layers {self.layers}: no transitions after {cap} env steps")
        env_steps = self.runner.env_steps - start
        out: dict[str, Rollout] = {}
        for name in self.layers:
            policy = self.policies[name]

            def value_fn(obs: np.ndarray, critic: np.ndarray, policy: ActorCritic = policy) -> np.ndarray:
                with torch.inference_mode():
                    return policy.value(torch.from_numpy(obs), torch.from_numpy(critic)).numpy()

            batch, sums = self.recorders[name].harvest(value_fn)  # type: ignore[misc]
            batch.versions[:] = self.versions[name]  # weights are refreshed only between rollouts here
            self._last[name] = batch
            counts = self.runner.command_counts.get(name)
            out[name] = Rollout(batch, self._stats(
                name, batch, env_steps, t0, [e[0] for e in episodes], [e[1] for e in episodes],
                sums["env_reward"], sums["intrinsic_reward"], sums["bonus"],
                counts.tolist() if counts is not None and counts.size else None))
        return out

    def resize(self, num_workers: int) -> int:
        """The pool now has ``num_workers`` workers: take this worker's new share of a batch."""
        self.num_workers = num_workers
        if not self.cfg.hierarchical:
            self.rollout_len = rollout_length(self.cfg.layers[0], num_workers)
        return num_workers

    def sample_stats_only(self) -> dict[str, RolloutStats]:
        """Mode ``dppo``: sample, keep the batches here, send back only the statistics."""
        return {name: r.stats for name, r in self.sample().items()}

    # -- mode dppo -----------------------------------------------------------------------------
    def gradient(self, weights: Any, epoch: int, minibatch: int, num_minibatches: int,
                 adv_mean: float, adv_std: float, entropy_coeff: float,
                 layer: str | None = None) -> GradientResult:
        """Gradient of the mean loss on this worker's share of minibatch ``minibatch`` of ``epoch``."""
        name = layer or self.layers[0]
        batch = self._last[name]
        policy = self.policies[name]
        policy.load_state_dict(deref(weights))
        # The same permutation for every minibatch of an epoch: derived from (seed, version, epoch).
        perm = np.random.default_rng((self.cfg.train.seed, self.index, self.versions[name], epoch)).permutation(len(batch))
        idx = np.array_split(perm, num_minibatches)[minibatch]
        mb = batch.take(idx).to_torch()
        p = self.cfg.layer(name).ppo
        terms = minibatch_loss(policy, mb, adv_mean, adv_std, clip=p.clip, value_clip=p.value_clip,
                               vf_coeff=p.vf_coeff, entropy_coeff=entropy_coeff, normalize=p.normalize_advantages)
        grads: Any = gradients(policy, terms.total)
        info = {k: float(getattr(terms, k).detach()) for k in ("policy", "value", "entropy", "approx_kl", "clipfrac")}
        scheme = self.cfg.layer(name).dppo.compression
        if scheme != "none":
            # Error feedback: what this worker's quantiser lost is added to its next message.
            grads, self._residuals[name] = compress(grads, scheme, self._residuals.get(name))
        return GradientResult(grads, len(idx), info)

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
