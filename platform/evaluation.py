"""Deterministic evaluation in this process: each policy's mode, frozen observation statistics."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..envs.vector import VecObs, VectorMultiAgentEnv, episode_info_values
from ..hierarchies.engine import Sampler, run_episodes
from ..hierarchies.spec import LayerSpec, probe_env
from .config import Config
from ..policies.networks import ActorCritic, make_policy
from ..policies.normalizers import ObservationNormalizer, RunningStats


def frozen_normalizer(cfg: Config, layer: str, obs_dim: int, state: dict[str, Any]) -> ObservationNormalizer:
    """Layer ``layer``'s observation normalizer with the statistics of its learner ``state``, frozen."""
    n = cfg.layer(layer).normalization
    norm = ObservationNormalizer((obs_dim,), n.clip, n.observation)
    norm.set_published(RunningStats.from_state(state["obs_stats"]))
    return norm


def frozen_policy(cfg: Config, spec: LayerSpec, state: dict[str, Any]) -> tuple[ActorCritic, ObservationNormalizer]:
    """The layer of ``spec`` as its learner ``state`` (a checkpoint's) left it: its policy with
    those weights and its normalizer with those statistics."""
    p = spec.cfg.policy
    policy = make_policy(spec.obs_dim, spec.action_space, p.hidden, p.activation, p.init_log_std, spec.critic_dim,
                         spec.encoder)
    policy.load_state_dict(state["policy"])
    return policy, frozen_normalizer(cfg, spec.name, spec.obs_dim, state)


# The default evaluation seed: away from the training seeds (train.seed + worker offsets).
EVAL_SEED_OFFSET = 999_983
# train.eval_every's seed: other games than the default evaluation's, so that the checkpoint picked
# as best (checkpoints/best.pt) is then scored by `hdppo eval` on games it was not picked on.
SELECTION_SEED_OFFSET = 424_247


def eval_sampler(cfg: Config, states: dict[str, dict[str, Any]], venv: VectorMultiAgentEnv, first: VecObs,
                 specs: list[LayerSpec], scripted: Sequence[str] = (), deterministic: bool = True,
                 seed: int = 0) -> Sampler:
    """A deterministic sampler over ``venv`` (just reset to ``first``) with every layer's weights and
    frozen observation statistics from ``states`` (layer -> learner state, as in a checkpoint); the
    layers in ``scripted``, and those the config scripts (``schedule.mode: scripted``), act by their
    ``teacher.policy`` instead. ``deterministic=False`` samples the actions (from a stream seeded
    with ``seed``) as training does."""
    policies, norms = {}, {}
    for s in specs:
        policies[s.name], norms[s.name] = frozen_policy(cfg, s, states[s.name])
    return Sampler(specs, venv, policies, norms, deterministic=deterministic, seed=seed, first=first,
                   episode_metrics=cfg.env.episode_metrics,
                   scripted=sorted(set(scripted) | set(cfg.scripted_layers())))


def evaluate(cfg: Config, states: dict[str, dict[str, Any]], episodes: int, seed: int | None = None) -> list[float]:
    """Env returns (summed over agents) of ``episodes`` complete episodes with deterministic actions,
    through the same sampler as training. ``states`` maps each layer to its learner state (as in a checkpoint)."""
    return [e.ret for e in _evaluate(cfg, states, episodes, seed)[0]]


@dataclass
class Episode:
    """One evaluation episode: its env return (summed over agents), its length, and the env's
    infos of its last step (agent -> info dict), where an env reports how the episode ended
    (a game's ``win``, for example)."""

    ret: float
    length: int
    infos: dict[str, dict]


def run_episodes_with_infos(sampler: Sampler, episodes: int) -> list[Episode]:
    """As :func:`hdppo.hierarchies.engine.run_episodes` (a fixed number of episodes per copy),
    keeping each episode's last-step infos."""
    return [Episode(*e) for e in run_episodes(sampler, episodes, keep_infos=True)]


def evaluate_episodes(cfg: Config, states: dict[str, dict[str, Any]], episodes: int, seed: int | None = None,
                      num_envs: int = 8, scripted: Sequence[str] = (), deterministic: bool = True) -> list[Episode]:
    """As :func:`evaluate` (deterministic actions, the training sampler, ``num_envs`` copies at
    most), returning each episode with the env's infos of its last step; ``scripted`` layers act
    by their teacher; ``deterministic=False`` samples the actions, as in training."""
    return _evaluate(cfg, states, episodes, seed, num_envs, scripted, deterministic)[0]


def _evaluate(cfg: Config, states: dict[str, dict[str, Any]], episodes: int, seed: int | None = None,
              num_envs: int = 8, scripted: Sequence[str] = (), deterministic: bool = True) -> tuple[list[Episode], Sequence[str]]:
    """The episodes every evaluation plays, and the env's episode metric keys (its sampler's)."""
    seed = cfg.train.seed + EVAL_SEED_OFFSET if seed is None else seed
    venv, first, specs = probe_env(cfg, seed, max(1, min(episodes, num_envs)))
    sampler = eval_sampler(cfg, states, venv, first, specs, scripted, deterministic, seed)
    try:
        return _play(sampler, episodes, deterministic, seed), sampler.episode_keys
    finally:
        sampler.close()


def _play(sampler: Sampler, episodes: int, deterministic: bool, seed: int) -> list[Episode]:
    """:func:`run_episodes_with_infos`; with sampled actions, from a fork of torch's generator
    seeded with ``seed``: each policy's noise comes from torch's generator (NumpyMLP's is seeded
    from it on first use), so the same seed plays the same games, and the caller's stream is
    left as it was."""
    if deterministic:
        return run_episodes_with_infos(sampler, episodes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return run_episodes_with_infos(sampler, episodes)


def episode_metric_means(episodes: list[Episode], keys: Sequence[str]) -> dict[str, float]:
    """Per info key, its mean over the episodes that report it (each episode's value: the mean
    over its agents, :func:`hdppo.envs.vector.episode_info_values`)."""
    per: dict[str, list[float]] = {}
    for e in episodes:
        for k, v in episode_info_values(e.infos, keys).items():
            per.setdefault(k, []).append(v)
    return {k: float(np.mean(v)) for k, v in per.items()}


def evaluate_with_metrics(cfg: Config, states: dict[str, dict[str, Any]], episodes: int,
                          seed: int | None = None, scripted: Sequence[str] = (),
                          deterministic: bool = True) -> tuple[list[float], dict[str, float]]:
    """As :func:`evaluate`, with the means of the env's episode metrics (``env.episode_metrics``,
    or what the env declares: a game's win rate, for example); ``scripted`` layers act by their
    teacher; ``deterministic=False`` samples the actions (as :func:`evaluate_episodes`)."""
    eps, keys = _evaluate(cfg, states, episodes, seed, 8, scripted, deterministic)
    return [e.ret for e in eps], episode_metric_means(eps, keys)
