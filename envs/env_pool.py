"""A worker's env copies, stepped together, with episodes handled explicitly.

Gymnasium 1.x vector envs autoreset on the step *after* an episode ends by default
(``AutoresetMode.NEXT_STEP``): that extra step returns the reset observation with a zero reward
and must not be learned from. This pool instead resets in the same step: ``step`` returns the
first observation of the new episode, and hands the true final observation back separately so
that a truncated episode can be bootstrapped from V(final observation).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym
import numpy as np

from hdppo.envs.errors import EnvError

# How many steps after construction every observation is also checked against the space.
# NaN/inf is checked on every step (one isfinite per observation); ``space.contains`` is slower, so only at the start.
_SPACE_CHECK_STEPS = 64


@dataclass
class StepResult:
    obs: np.ndarray            # [N, obs_dim] next observations (reset ones where an episode ended)
    rewards: np.ndarray        # [N] raw env rewards
    terminated: np.ndarray     # [N] bool
    truncated: np.ndarray      # [N] bool
    final_obs: dict[int, np.ndarray] = field(default_factory=dict)  # env index -> true final obs (flat)
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_envs: list[int] = field(default_factory=list)  # which copy each finished episode ran in


class EnvPool:
    """``num_envs`` copies of one env; observations flattened to float32 vectors."""

    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int, seed: int, name: str = "env"):
        self.name = name
        self.envs = [make_env() for _ in range(num_envs)]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.obs_dim = int(gym.spaces.flatdim(self.observation_space))
        self._box = isinstance(self.observation_space, gym.spaces.Box)
        self.num_envs = num_envs
        self._seed = seed
        self._ep_return = np.zeros(num_envs)
        self._ep_len = np.zeros(num_envs, dtype=np.int64)
        self._steps = 0
        self.obs = np.stack([self._reset(i, seed + i) for i in range(num_envs)])

    def _flatten(self, obs, what: str, index: int) -> np.ndarray:
        try:
            finite = bool(np.isfinite(np.asarray(obs, dtype=np.float64)).all())
        except (TypeError, ValueError):
            finite = True  # structured observations: left to the space check below
        if not finite:
            raise EnvError(f"env {self.name!r} returned a non-finite observation (NaN or inf) from {what} "
                           f"(copy {index}, step {self._steps}): {obs!r}. Fix the env (guard divisions, "
                           "reset on blow-up) before training.")
        if self._steps < _SPACE_CHECK_STEPS and not self.observation_space.contains(obs):
            shape = getattr(obs, "shape", None)
            dtype = getattr(obs, "dtype", type(obs).__name__)
            raise EnvError(
                f"env {self.name!r}: the observation from {what} (copy {index}) does not match the "
                f"observation_space {self.observation_space} (got shape {shape}, dtype {dtype}). "
                "Make the env return observations inside its declared space (dtype included), "
                "or declare the space it really produces.")
        if self._box:  # the common case, without gym.spaces.flatten's dispatch on every step
            return np.asarray(obs, dtype=np.float32).reshape(-1)
        return gym.spaces.flatten(self.observation_space, obs).astype(np.float32, copy=False)

    def _reset(self, i: int, seed: int | None = None) -> np.ndarray:
        out = self.envs[i].reset(seed=seed)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise EnvError(f"env {self.name!r}: reset() must return (observation, info) as in Gymnasium >= 0.26; "
                           f"got {type(out).__name__}.")
        self._ep_return[i] = 0.0
        self._ep_len[i] = 0
        return self._flatten(out[0], "reset()", i)

    def step(self, actions: list) -> StepResult:
        n = self.num_envs
        next_obs = np.empty((n, self.obs_dim), dtype=np.float32)
        rewards = np.empty(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        res = StepResult(next_obs, rewards, terminated, truncated)
        for i, env in enumerate(self.envs):
            out = env.step(actions[i])
            if not (isinstance(out, tuple) and len(out) == 5):
                raise EnvError(f"env {self.name!r}: step() must return (obs, reward, terminated, truncated, info) "
                               f"as in Gymnasium >= 0.26; got a {type(out).__name__} of length {len(out) if isinstance(out, tuple) else '?'}.")
            obs, r, term, trunc, _ = out
            flat = self._flatten(obs, "step()", i)
            rewards[i] = r
            self._ep_return[i] += r
            self._ep_len[i] += 1
            if term or trunc:
                terminated[i], truncated[i] = bool(term), bool(trunc) and not bool(term)
                res.final_obs[i] = flat
                res.episode_returns.append(float(self._ep_return[i]))
                res.episode_lengths.append(int(self._ep_len[i]))
                res.episode_envs.append(i)
                flat = self._reset(i)
            next_obs[i] = flat
        self._steps += 1
        self._check_rewards(rewards)
        self.obs = next_obs
        return res

    def _check_rewards(self, rewards: np.ndarray) -> None:
        if not np.isfinite(rewards).all():
            bad = int(np.flatnonzero(~np.isfinite(rewards))[0])
            raise EnvError(f"env {self.name!r} returned a non-finite reward ({rewards[bad]}) at step {self._steps} "
                           f"(copy {bad}). Fix the env's reward, or clip it in a wrapper, before training.")

    def close(self) -> None:
        for env in self.envs:
            env.close()
