"""Transitions of one layer, aligned to its period, per lane (an agent or a squad of that layer).

A layer's transition opens when it decides and closes when it decides again or when its lane's
episode ends. In between, every env step adds reward: with ``discount: smdp``,
R = sum_k gamma^k r_k and the transition discounts by gamma^steps (the exact semi-MDP return);
with ``discount: decision``, R = sum_k r_k and gamma per transition. A transition still open at
the end of a rollout stays open into the next one (its reward is not cut in two); the value of
its start state bootstraps the transition before it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable

import numpy as np

from hdppo.platform.batch import Batch
from hdppo.policies.gae import compute_gae
from hdppo.policies.normalizers import RewardScaler


@dataclass
class Transition:
    obs: np.ndarray
    critic_obs: np.ndarray
    mask: np.ndarray
    action: np.ndarray
    logp: float
    value: float
    reward: float = 0.0           # accumulated, unscaled
    discount: float = 1.0         # gamma^steps so far (smdp)
    steps: int = 0
    env_reward: float = 0.0
    intrinsic_reward: float = 0.0
    bonus: float = 0.0
    # set when closed:
    scaled_reward: float = 0.0
    gamma: float = 1.0
    end: bool = False
    terminated: bool = False
    final: tuple[np.ndarray, np.ndarray] | None = None  # (obs, critic_obs) to bootstrap a truncation


@dataclass
class LayerRecorder:
    gamma: float
    lam: float
    smdp: bool
    scaler: RewardScaler
    pending: dict[Hashable, Transition] = field(default_factory=dict)
    closed: dict[Hashable, list[Transition]] = field(default_factory=dict)
    slots: dict[Hashable, int] = field(default_factory=dict)
    num_closed: int = 0

    def open(self, lane: Hashable, obs, critic_obs, mask, action, logp: float, value: float, bonus: float = 0.0) -> None:
        if lane in self.pending:
            self._close(lane)
        self.pending[lane] = Transition(obs, critic_obs, mask, action, float(logp), float(value), reward=bonus, bonus=bonus)

    def reward(self, lane: Hashable, env_reward: float, intrinsic_reward: float, w_env: float, w_int: float) -> None:
        t = self.pending.get(lane)
        if t is None:
            return
        r = w_env * env_reward + w_int * intrinsic_reward
        if self.smdp:
            t.reward += t.discount * r
            t.discount *= self.gamma
        else:
            t.reward += r
        t.steps += 1
        t.env_reward += env_reward
        t.intrinsic_reward += intrinsic_reward

    def end(self, lane: Hashable, terminated: bool, final: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """The lane's episode ended: close its open transition (bootstrapped from ``final`` if truncated)."""
        if lane in self.pending:
            self._close(lane, end=True, terminated=terminated, final=None if terminated else final)

    def _close(self, lane: Hashable, end: bool = False, terminated: bool = False, final=None) -> None:
        t = self.pending.pop(lane)
        t.end, t.terminated, t.final = end, terminated, final
        t.gamma = t.discount if self.smdp else self.gamma
        slot = self.slots.setdefault(lane, len(self.slots))
        t.scaled_reward = float(self.scaler.scale(np.array([slot]), np.array([t.reward]), np.array([end]), gamma=t.gamma)[0])
        self.closed.setdefault(lane, []).append(t)
        self.num_closed += 1

    def harvest(self, value_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> tuple[Batch, dict] | None:
        """All closed transitions as a Batch with GAE per lane; they are then forgotten.
        ``value_fn(obs [K, D], critic_obs [K, C]) -> [K]`` values the truncation bootstraps."""
        if self.num_closed == 0:
            return None
        boots = [t for seq in self.closed.values() for t in seq if t.end and not t.terminated and t.final is not None]
        if boots:
            vals = value_fn(np.stack([t.final[0] for t in boots]), np.stack([t.final[1] for t in boots]))  # type: ignore[index]
            boot_value = {id(t): float(v) for t, v in zip(boots, vals)}
        else:
            boot_value = {}
        parts: list[tuple] = []
        sums = {"env_reward": 0.0, "intrinsic_reward": 0.0, "bonus": 0.0, "steps": 0}
        for lane, seq in self.closed.items():
            n = len(seq)
            nxt = np.zeros(n)
            for k, t in enumerate(seq):
                if t.end:
                    nxt[k] = 0.0 if t.terminated else boot_value.get(id(t), 0.0)
                elif k + 1 < n:
                    nxt[k] = seq[k + 1].value
                else:
                    nxt[k] = self.pending[lane].value  # open into the next rollout
            rew = np.array([[t.scaled_reward] for t in seq])
            val = np.array([[t.value] for t in seq])
            term = np.array([[t.terminated] for t in seq])
            ends = np.array([[t.end] for t in seq])
            gam = np.array([[t.gamma] for t in seq])
            adv, ret = compute_gae(rew, val, nxt[:, None], term, ends, gam, self.lam)
            parts.append((seq, adv[:, 0], ret[:, 0]))
            for t in seq:
                sums["env_reward"] += t.env_reward
                sums["intrinsic_reward"] += t.intrinsic_reward
                sums["bonus"] += t.bonus
                sums["steps"] += t.steps
        seqs = [t for seq, _, _ in parts for t in seq]
        batch = Batch(
            obs=np.stack([t.obs for t in seqs]).astype(np.float32),
            actions=np.stack([np.asarray(t.action, np.float32).reshape(-1) for t in seqs]),
            logp=np.array([t.logp for t in seqs], np.float32),
            values=np.array([t.value for t in seqs], np.float32),
            advantages=np.concatenate([p[1] for p in parts]).astype(np.float32),
            returns=np.concatenate([p[2] for p in parts]).astype(np.float32),
            masks=np.stack([t.mask for t in seqs]).astype(np.float32),
            critic_obs=np.stack([t.critic_obs for t in seqs]).astype(np.float32))
        self.closed = {}
        self.num_closed = 0
        return batch, sums
