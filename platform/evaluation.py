"""Deterministic evaluation in this process: the policy's mode, frozen observation statistics."""
from __future__ import annotations

from typing import Any

import torch

from hdppo.envs.env_pool import EnvPool
from hdppo.platform.config import Config
from hdppo.platform.rollout_worker import make_env_fn
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer, RunningStats


def evaluate(cfg: Config, learner_state: dict[str, Any], episodes: int, seed: int | None = None) -> list[float]:
    """Raw env returns of ``episodes`` complete episodes with deterministic actions."""
    layer = cfg.layers[0]
    num_envs = min(episodes, 8)
    pool = EnvPool(make_env_fn(cfg), num_envs, seed=cfg.train.seed + 999_983 if seed is None else seed,
                   name=cfg.env.id or cfg.env.entry_point or "env")
    policy = ActorCritic(pool.obs_dim, pool.action_space, layer.policy.hidden, layer.policy.activation)
    policy.load_state_dict(learner_state["policy"])
    norm = ObservationNormalizer((pool.obs_dim,), layer.normalization.clip, layer.normalization.observation)
    norm.set_published(RunningStats.from_state(learner_state["obs_stats"]))
    # A fixed quota per copy, so that copies with short episodes are not over-represented.
    quota = [episodes // num_envs + (1 if i < episodes % num_envs else 0) for i in range(num_envs)]
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
