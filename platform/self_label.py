"""Self-labeling: fine-tune a trained policy on the best of its own sampled solutions.

For tasks where an episode builds one solution of a seeded instance (a job-shop schedule, a
route), a policy sampled K times finds a better solution than its most likely actions give:
best-of-64 sampling meets ft06 <= 5% where the greedy policy does not (docs/domains/jobshop.md). Self-labeling
(Corsini et al., "Self-Labeling the Job Shop Scheduling Problem", NeurIPS 2024) trains that into
the greedy policy: sample K solutions of each of B instances with the policy, keep each instance's
best (the highest return), and raise the log-probability of the best solution's decisions
(cross-entropy on them, ``epochs`` Adam steps an iteration). No critic and no reward scale are involved, so
it fine-tunes a PPO run without touching its settings.

``hdppo self-label RUN --out DIR`` reads RUN's config and checkpoint and writes DIR as a run dir of
the same config (``config.yaml``, ``checkpoints/``, ``tb/<layer>/``, ``metrics.jsonl``, and
``self_label.json`` with the settings and where it started), so ``hdppo eval`` and the benchmarks
take it as they take RUN. What it needs, checked before any work: one layer, one agent, a
discrete (maskable) action space, and an env whose ``reset(seed=s)`` always starts the same
episode (the K copies of an instance must show one first observation), and a feed-forward policy.
An exploration bonus of the run plays no part: the label is the best env return.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..envs.vector import VectorMultiAgentEnv, env_actions
from ..hierarchies.spec import LayerSpec, probe_env
from ..policies.networks import ActorCritic
from ..policies.normalizers import ObservationNormalizer
from ..policies.self_label import best_of_groups, self_label_nll
from .checkpoint import (learner_states, load_checkpoint, policy_checkpoint, sampled_env_steps, save_best,
                         save_checkpoint)
from .config import Config
from .errors import CheckpointError, ConfigError
from .evaluation import frozen_policy
from .metrics import (SELF_LABEL_BEST_RETURN, SELF_LABEL_MEAN_RETURN, SELF_LABEL_NLL, SELF_LABEL_VALID_RETURN,
                      MetricsWriter)

__all__ = ["SelfLabelSettings", "SampledGroups", "sample_groups", "self_label_run", "valid_return"]

# Instance seeds: far from the training seeds (train.seed + worker offsets) and from the
# evaluation's (train.seed + 999,983); validation instances are fixed, training ones never repeat.
TRAIN_SEED_BASE = 50_000_000
VALID_SEED_BASE = 40_000_000


@dataclass(frozen=True)
class SelfLabelSettings:
    iterations: int = 200        # each a fresh batch of instances
    instances: int = 16          # instances per iteration (B)
    samples: int = 64            # solutions sampled per instance (K); the best is the label
    lr: float = 1e-4
    epochs: int = 1              # Adam steps on each iteration's labels
    seed: int = 0
    valid_instances: int = 64    # fixed held-out instances, solved greedily every valid_every iterations
    valid_every: int = 25

    def check(self) -> None:
        for name in ("iterations", "instances", "samples", "epochs", "valid_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"hdppo self-label: --{name.replace('_', '-')} must be at least 1, "
                                  f"got {getattr(self, name)}.")
        if self.samples < 2:
            raise ConfigError("hdppo self-label: --samples must be at least 2: the label is the best of several "
                              "sampled solutions of one instance.")
        if self.valid_instances < 0 or not self.lr > 0:
            raise ConfigError("hdppo self-label: --valid-instances must be 0 or more and --lr above 0.")


@dataclass
class SampledGroups:
    """Every decision of one round: ``obs [R, D]``, ``masks [R, M]`` or None, ``actions [R, dim]``,
    ``copy [R]`` (the copy that took it), and each copy's episode ``returns [N]``."""

    obs: np.ndarray
    masks: np.ndarray | None
    actions: np.ndarray
    copy: np.ndarray
    returns: np.ndarray


def _one_layer_one_agent(cfg: Config, source: str, agents: int | None = None) -> None:
    if len(cfg.layers) != 1 or (agents is not None and agents != 1):
        over = f" over {agents} agent(s)" if agents is not None else ""
        raise ConfigError(f"hdppo self-label {source}: its config has {len(cfg.layers)} layer(s){over}; "
                          "self-labeling fine-tunes a single-layer, single-agent run (one solution per episode). "
                          "Give a run of such a config.")


def _check_run(cfg: Config, spec: LayerSpec, venv: VectorMultiAgentEnv, source: str) -> None:
    layer = spec.name
    _one_layer_one_agent(cfg, source, len(venv.agents))
    head = spec.action_space
    if not hasattr(head, "n") and not hasattr(head, "nvec"):
        raise ConfigError(f"hdppo self-label {source}: layer {layer!r} has a {type(head).__name__} action space; "
                          "self-labeling imitates discrete decisions (Discrete or MultiDiscrete).")
    if spec.cfg.policy.encoder in ("gru", "cnn_gru"):
        raise ConfigError(f"hdppo self-label {source}: layer {layer!r} has a recurrent policy "
                          f"(policy.encoder {spec.cfg.policy.encoder!r}); self-labeling supports feed-forward ones.")


def sample_groups(venv: VectorMultiAgentEnv, policy: ActorCritic, norm: ObservationNormalizer,
                  seeds: list[int], samples: int, deterministic: bool = False,
                  check_same_start: bool = True) -> SampledGroups:
    """Play ``samples`` episodes of each seeded instance in ``seeds`` at once (copy ``g * samples + k``
    is sample k of instance g; ``venv`` has ``len(seeds) * samples`` copies), recording each copy's
    decisions until its first episode ends. ``check_same_start``: refuse an env whose copies of one
    seed start apart (it is not reproducible from its reset seed)."""
    n = venv.num_envs
    if n != len(seeds) * samples:
        raise ValueError(f"{n} copies for {len(seeds)} instances x {samples} samples")
    now = venv.reset_each([s for s in seeds for _ in range(samples)])
    if check_same_start:
        firsts = now.obs[:, 0].reshape(len(seeds), samples, -1)
        if not np.array_equal(firsts, np.broadcast_to(firsts[:, :1], firsts.shape)):
            raise ConfigError(f"env {venv.name!r}: copies reset with one seed start apart, so the best of several "
                              "solutions of an instance cannot be told: self-labeling needs an env whose "
                              "reset(seed=s) always starts the same episode (instance drawn from the env's "
                              "np_random, no unseeded randomness).")
    space = policy.head
    action_space = venv.action_space(venv.agents[0])
    env_act = env_actions(action_space, n).reshape((n, 1, *action_space.shape))
    active = np.ones(n, bool)
    returns = np.zeros(n)
    obs_rows, mask_rows, act_rows, copy_rows = [], [], [], []
    while active.any():
        x = norm(np.ascontiguousarray(now.obs[:, 0], np.float32))
        masks = now.masks[:, 0] if now.masks is not None else None
        a, _, _ = policy.act(x, deterministic, masks, with_value=False)
        idx = np.flatnonzero(active)
        obs_rows.append(x[idx])
        if masks is not None:
            mask_rows.append(masks[idx])
        act_rows.append(a[idx])
        copy_rows.append(idx)
        env_act[:, 0] = space.to_env_array(a)
        res = venv.step(env_act)
        for ret, _, i in res.episodes:
            if active[i]:
                returns[i] = ret
                active[i] = False
        now = res
    return SampledGroups(np.concatenate(obs_rows), np.concatenate(mask_rows) if mask_rows else None,
                         np.concatenate(act_rows), np.concatenate(copy_rows), returns)


def valid_return(venv: VectorMultiAgentEnv, policy: ActorCritic, norm: ObservationNormalizer) -> float:
    """The greedy policy's mean return on the validation instances, one per copy of ``venv``
    (seeds ``VALID_SEED_BASE + i``): the score that picks ``best.pt``."""
    seeds = [VALID_SEED_BASE + i for i in range(venv.num_envs)]
    got = sample_groups(venv, policy, norm, seeds, 1, deterministic=True, check_same_start=False)
    return float(got.returns.mean())


def _refuse_existing(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"hdppo self-label --out {out}: it exists and is not an empty folder; hdppo never writes "
                          "into a user's files. Name a new folder.")


def self_label_run(run_dir: Path, out: Path, settings: SelfLabelSettings, cfg: Config,
                   checkpoint: str = "latest", log=print) -> dict[str, Any]:
    """Fine-tune ``run_dir``'s policy by self-labeling into the new run dir ``out``; returns the summary
    also written to ``out/self_label.json``."""
    settings.check()
    run_dir, out = Path(run_dir), Path(out)
    _refuse_existing(out)
    _one_layer_one_agent(cfg, str(run_dir))   # before the checkpoint is read and B x K env copies are made
    ckpt = policy_checkpoint(run_dir, checkpoint)
    state = load_checkpoint(ckpt)
    states = learner_states(state)
    B, K = settings.instances, settings.samples
    venv, _, specs = probe_env(cfg, TRAIN_SEED_BASE, B * K)
    valid_env = None
    try:
        spec = specs[0]
        _check_run(cfg, spec, venv, str(run_dir))
        layer = spec.name
        if layer not in states:
            raise CheckpointError(f"{ckpt} holds no weights for layer {layer!r}; pick the run's own checkpoint.")
        policy, norm = frozen_policy(cfg, spec, states[layer])
        torch.manual_seed(settings.seed)
        optimizer = torch.optim.Adam(policy.actor.parameters(), lr=settings.lr)
        V = settings.valid_instances
        if V:
            valid_env, _, _ = probe_env(cfg, VALID_SEED_BASE, V)

        def validate() -> float:
            return valid_return(valid_env, policy, norm)

        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text((run_dir / "config.yaml").read_text())
        writer = MetricsWriter(out, [layer])
        history: list[dict[str, float]] = []
        best_valid = -np.inf
        if V:
            best_valid = validate()
            writer.scalars(layer, 0, {SELF_LABEL_VALID_RETURN: best_valid})
            history.append({"iteration": 0, "valid_return": best_valid})
            log(f"[hdppo] self-label: {V} validation instances, greedy mean return {best_valid:.4f} before")
            # best.pt starts as the source's weights: if no iteration beats them on validation, they stay best.
            save_best(out, state, _best_info(best_valid, 0, state, V))
        start = time.perf_counter()
        base = TRAIN_SEED_BASE + settings.seed * 1_000_000
        for it in range(1, settings.iterations + 1):
            seeds = [base + (it - 1) * B + b for b in range(B)]
            got = sample_groups(venv, policy, norm, seeds, K, check_same_start=it == 1)
            best = best_of_groups(got.returns, K)
            keep = np.isin(got.copy, best)
            obs = torch.from_numpy(got.obs[keep])
            acts = torch.from_numpy(got.actions[keep])
            masks = torch.from_numpy(np.ascontiguousarray(got.masks[keep])) if got.masks is not None else None
            for _ in range(settings.epochs):
                nll = self_label_nll(policy, obs, acts, masks)
                optimizer.zero_grad()
                nll.backward()
                optimizer.step()
            row = {SELF_LABEL_NLL: float(nll.item()), SELF_LABEL_BEST_RETURN: float(got.returns[best].mean()),
                   SELF_LABEL_MEAN_RETURN: float(got.returns.mean())}
            if V and (it % settings.valid_every == 0 or it == settings.iterations):
                row[SELF_LABEL_VALID_RETURN] = validate()
            writer.scalars(layer, it, row)
            history.append({"iteration": it, **{k.split("/")[-1]: v for k, v in row.items()}})
            if SELF_LABEL_VALID_RETURN in row:
                log(f"[hdppo] self-label {it}/{settings.iterations}: nll {row[SELF_LABEL_NLL]:.3f}, best of {K} "
                    f"{row[SELF_LABEL_BEST_RETURN]:.4f}, sampled mean {row[SELF_LABEL_MEAN_RETURN]:.4f}, validation "
                    f"greedy {row[SELF_LABEL_VALID_RETURN]:.4f} ({time.perf_counter() - start:.0f}s)")
                new = _with_policy(state, layer, policy)
                save_checkpoint(out, it, new)
                if row[SELF_LABEL_VALID_RETURN] > best_valid:
                    best_valid = row[SELF_LABEL_VALID_RETURN]
                    save_best(out, new, _best_info(best_valid, it, state, V))
        if not V:
            save_checkpoint(out, settings.iterations, _with_policy(state, layer, policy))
        writer.close()
        summary = {"source_run": str(run_dir), "source_checkpoint": ckpt.name, "layer": layer,
                   "settings": asdict(settings), "wall_s": time.perf_counter() - start, "history": history}
        (out / "self_label.json").write_text(json.dumps(summary, indent=2))
        return summary
    finally:
        venv.close()
        if valid_env is not None:
            valid_env.close()


def _best_info(score: float, iteration: int, state: dict[str, Any], episodes: int) -> dict[str, Any]:
    """``checkpoints/best.json`` in the trainer's keys (what ``--checkpoint best`` readers show)."""
    return {"best_by": SELF_LABEL_VALID_RETURN, "best_mode": "max", "score": score, "update": iteration,
            "env_steps": sampled_env_steps(state), "episodes": episodes}


def _with_policy(state: dict[str, Any], layer: str, policy: ActorCritic) -> dict[str, Any]:
    """A copy of checkpoint ``state`` with ``layer``'s policy weights replaced by ``policy``'s."""
    new = copy.deepcopy(state)
    weights = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    for group in new["groups"].values():
        learners = group.get("learners") or ({layer: group["learner"]} if "learner" in group else {})
        if layer in learners:
            learners[layer]["policy"] = weights
            return new
    if layer in new.get("fixed", {}):
        new["fixed"][layer]["policy"] = weights
        return new
    raise CheckpointError(f"the checkpoint holds no learner state for layer {layer!r}")
