"""Deterministic evaluation in this process: each policy's mode, frozen observation statistics."""
from __future__ import annotations

from typing import Any

import torch

from hdppo.envs.env_pool import EnvPool
from hdppo.platform.config import Config
from hdppo.platform.rollout_worker import make_adapter_fn, make_env_fn
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer, RunningStats


def _normalizer(cfg: Config, layer: str, obs_dim: int, state: dict[str, Any]) -> ObservationNormalizer:
    n = cfg.layer(layer).normalization
    norm = ObservationNormalizer((obs_dim,), n.clip, n.observation)
    norm.set_published(RunningStats.from_state(state["obs_stats"]))
    return norm


def _quota(episodes: int, copies: int) -> list[int]:
    """A fixed number of episodes per copy, so that copies with short episodes are not over-represented."""
    return [episodes // copies + (1 if i < episodes % copies else 0) for i in range(copies)]


def evaluate(cfg: Config, states: dict[str, dict[str, Any]], episodes: int, seed: int | None = None) -> list[float]:
    """Env returns (summed over agents) of ``episodes`` complete episodes with deterministic actions.
    ``states`` maps each layer to its learner state (as in a checkpoint)."""
    seed = cfg.train.seed + 999_983 if seed is None else seed
    num_envs = max(1, min(episodes, 8))
    if cfg.hierarchical:
        return _evaluate_hierarchy(cfg, states, episodes, seed, num_envs)
    layer = cfg.layers[0]
    state = states[layer.name]
    pool = EnvPool(make_env_fn(cfg), num_envs, seed=seed, name=cfg.env.name)
    policy = ActorCritic(pool.obs_dim, pool.action_space, layer.policy.hidden, layer.policy.activation)
    policy.load_state_dict(state["policy"])
    norm = _normalizer(cfg, layer.name, pool.obs_dim, state)
    quota = _quota(episodes, num_envs)
    returns: list[float] = []
    try:
        while len(returns) < episodes:
            actions, _, _ = policy.act(torch.from_numpy(norm(pool.obs)), deterministic=True)
            res = pool.step(policy.head.to_env(actions))
            for env_i, ret in zip(res.episode_envs, res.episode_returns):
                if quota[env_i] > 0:
                    quota[env_i] -= 1
                    returns.append(ret)
    finally:
        pool.close()
    return returns


def _evaluate_hierarchy(cfg: Config, states: dict[str, dict[str, Any]], episodes: int, seed: int,
                        num_envs: int) -> list[float]:
    from hdppo.hierarchies.runner import HierarchyRunner
    from hdppo.hierarchies.spec import probe_env

    probe, specs = probe_env(cfg, seed)
    probe.close()
    policies, norms = {}, {}
    for s in specs:
        p = s.cfg.policy
        policies[s.name] = ActorCritic(s.obs_dim, s.action_space, p.hidden, p.activation, p.init_log_std, s.critic_dim)
        policies[s.name].load_state_dict(states[s.name]["policy"])
        norms[s.name] = _normalizer(cfg, s.name, s.obs_dim, states[s.name])
    runner = HierarchyRunner(specs, make_adapter_fn(cfg), num_envs, seed, policies, norms, deterministic=True)
    quota = _quota(episodes, num_envs)
    returns: list[float] = []
    try:
        while len(returns) < episodes:
            for ret, _, ci in runner.step():
                if quota[ci] > 0:
                    quota[ci] -= 1
                    returns.append(float(ret))
    finally:
        runner.close()
    return returns
