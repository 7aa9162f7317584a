"""MAgent2's grid battles stepped through the engine's arrays: N copies, no per-agent dicts.

MAgent2's PettingZoo envs compute every team's observations, rewards and deaths as arrays in
C++, then split them into one dict entry per agent; the dict adapter (``env.type: pettingzoo``)
stacks them back into arrays. On ``battle_v4`` (map 20, 24 agents) those two conversions were
about half of a sampling step. This env reads the arrays from the engine instead
(``get_agent_id``, ``get_observation``, ``get_reward``, ``get_alive``) and writes them into the
``[copies, agents, ...]`` arrays the sampler takes::

    env:
      type: vector
      entry_point: hdppo.envs.builtin.magent_vector:make_vector
      kwargs: {env: battle_v4, map_size: 20}      # any other kwargs go to the env's parallel_env

It is the PettingZoo env underneath, not a re-implementation: each copy is made by the env's
``parallel_env(**kwargs)`` and reset by it (maps, team sizes, reward settings unchanged); only
the step bypasses the dicts, following ``magent2.environments.magent_env`` step for step (actions
per team in the engine's agent order, terminations from ``get_alive`` or all at once when the
engine reports the game over, truncation at ``max_cycles``, the observation view with the
minimap and extra features where the env has them). ``tests/test_magent_vector.py`` steps both
side by side and checks that every observation, reward, termination and truncation agrees.

One difference, a fix: MAgent2's ``reset`` counts the teams before it places them, so its
PettingZoo ``step`` slices the first step's actions by team sizes of 0 and sets none (every
unit's first action is lost); this env sets them. The test compares against the PettingZoo env
with that count put right.

Agents sit in the env's ``possible_agents`` slots; the dead are not alive (observation 0). A
copy whose agents are all gone (the game over, or ``max_cycles``) is reset in the same step, as
the dict adapter does, and an episode's return is the sum over every agent, as there.
``env.opponents`` needs the dict path (``env.type: pettingzoo``): its scripts read dicts.
"""
from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import EnvError
from ..vector import SPACE_CHECK_STEPS, VecObs, VecStep, VectorMultiAgentEnv, _Checker


def _load(env: str) -> Any:
    name = env if "." in env else f"magent2.environments.{env}"
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EnvError(f"env.kwargs.env {env!r}: cannot import {name} ({exc}). Name a MAgent2 env module, e.g. "
                       "battle_v4, battlefield_v5, combined_arms_v6 (pip install magent2).") from None


class MAgentVector(VectorMultiAgentEnv):
    """``num_envs`` copies of one MAgent2 PettingZoo env, stepped through its engine arrays."""

    def __init__(self, num_envs: int, seed: int | None = None, env: str = "battle_v4", **kwargs: Any):
        module = _load(env)
        self.name = f"magent2.{env}"
        self.num_envs = int(num_envs)
        self.copies = [module.parallel_env(**kwargs) for _ in range(self.num_envs)]
        first = self.copies[0]
        self.agents = list(first.possible_agents)
        self.slot = {a: k for k, a in enumerate(self.agents)}
        space = first.observation_space(self.agents[0])
        kinds = {str(first.observation_space(a)) for a in self.agents}
        if len(kinds) != 1 or not isinstance(space, gym.spaces.Box):
            raise EnvError(f"env {self.name!r}: its agents' observation spaces differ ({', '.join(sorted(kinds))}); "
                           "hdppo.envs.builtin.magent_vector needs one Box for every agent. Use env.type "
                           "pettingzoo with env.id magent2.environments.<env> instead.")
        self._space = space
        self._action_spaces = {a: first.action_space(a) for a in self.agents}
        self.obs_dim = int(np.prod(space.shape))
        # Unit types with Discrete actions of different sizes (combined arms: melee 9, ranged 25)
        # share one policy over the largest, each unit's actions beyond its own masked out, as the
        # dict adapter does.
        sizes = [int(sp.n) for sp in self._action_spaces.values()]
        self._padded = gym.spaces.Discrete(max(sizes)) if len(set(sizes)) > 1 else None
        self.mask_dim = max(sizes) if self._padded is not None else 0
        self._masks = None
        if self._padded is not None:
            base = np.zeros((len(self.agents), self.mask_dim), np.float32)
            for k, n_k in enumerate(sizes):
                base[k, :n_k] = 1.0
            self._masks = np.broadcast_to(base, (self.num_envs, *base.shape))
        self.state_dim = int(np.asarray(first.state()).size)
        self.episode_metrics = ()
        n, a = self.num_envs, len(self.agents)
        self._obs = np.zeros((n, a, self.obs_dim), np.float32)
        self._alive = np.zeros((n, a), bool)
        self._ep_return = np.zeros(n)
        self._ep_len = np.zeros(n, np.int64)
        self._check = _Checker(self.name)
        self._seed = seed

    def observation_space(self, agent: str) -> gym.Space:
        return self._space

    def action_space(self, agent: str) -> gym.Space:
        return self._padded if self._padded is not None else self._action_spaces[agent]

    def _mask_view(self) -> np.ndarray | None:
        return None if self._masks is None else self._masks.copy()

    # -- per copy ----------------------------------------------------------------------------------
    def _reset_copy(self, i: int, seed: int | None) -> None:
        c = self.copies[i]
        obs, _ = c.reset(seed=seed)
        self._obs[i] = 0.0
        slots = [self.slot[a] for a in obs]
        self._obs[i, slots] = np.stack(list(obs.values())).reshape(len(slots), -1)
        self._alive[i] = False
        self._alive[i, slots] = True
        self._ep_return[i], self._ep_len[i] = 0.0, 0

    def _views(self, c: Any, handle: Any) -> np.ndarray:
        """A team's observations ``[n, *shape]``, as ``magent_env._compute_observations`` builds them."""
        view, features = c.env.get_observation(handle)
        if c.minimap_mode and not c.extra_features:
            features = features[:, -2:]
        if c.minimap_mode or c.extra_features:
            tiled = np.broadcast_to(features[:, None, None, :], (*view.shape[:3], features.shape[-1]))
            return np.concatenate([view, tiled], axis=-1)
        return view

    def _step_copy(self, i: int, actions: np.ndarray, rewards: np.ndarray, term: np.ndarray,
                   trunc: np.ndarray) -> None:
        c, eng = self.copies[i], self.copies[i].env
        # Actions: each team's live agents in the engine's order (their ids are the slots). The
        # same agents are listed after the step: the dead leave only at clear_dead().
        team_ids = [eng.get_agent_id(h) for h in c.handles]
        for h, ids in zip(c.handles, team_ids):
            if len(ids):
                eng.set_action(h, np.ascontiguousarray(actions[ids], np.int32))
        c.frames += 1
        game_over = bool(eng.step())
        row = self._obs[i]
        before = self._alive[i].copy()
        for t, (h, ids) in enumerate(zip(c.handles, team_ids)):
            if not len(ids):
                continue
            dead = ~eng.get_alive(h) if not game_over else np.ones(len(ids), bool)
            term[i, ids] = dead
            if not game_over:
                c.team_sizes[t] = len(ids) - int(dead.sum())
            rewards[i, ids] = eng.get_reward(h)
            row[ids] = self._views(c, h).reshape(len(ids), -1)
        if c.frames >= c.max_cycles:
            trunc[i] = before & ~term[i]
        eng.clear_dead()
        self._alive[i] = before & ~(term[i] | trunc[i])
        c.agents = [a for a, live in zip(self.agents, self._alive[i]) if live]

    # -- the interface -------------------------------------------------------------------------------
    def _states(self) -> np.ndarray | None:
        if not self.want_state:
            return None
        return np.stack([np.asarray(c.state(), np.float32).reshape(-1) for c in self.copies])

    def reset(self, seed: int | None = None) -> VecObs:
        seed = self._seed if seed is None else seed
        for i in range(self.num_envs):
            self._reset_copy(i, None if seed is None else seed + i)
        alive = self._alive.copy()
        return VecObs(self._obs.copy(), alive, alive, self._mask_view(), self._states())

    def step(self, actions: np.ndarray) -> VecStep:
        n, a = self.num_envs, len(self.agents)
        acts = np.asarray(actions).reshape(n, a)
        rewards = np.zeros((n, a))
        term = np.zeros((n, a), bool)
        trunc = np.zeros((n, a), bool)
        end = np.zeros(n, bool)
        episodes = []
        ended_rows: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        for i in range(n):
            self._step_copy(i, acts[i], rewards, term, trunc)
            self._ep_return[i] += float(rewards[i].sum())
            self._ep_len[i] += 1
            if not self._alive[i].any():
                # Reset here, copy by copy, as the dict adapter does: MAgent2 draws maps and
                # moves from one random stream, so the order of steps and resets matters.
                end[i] = True
                episodes.append((float(self._ep_return[i]), int(self._ep_len[i]), i))
                state = np.asarray(self.copies[i].state(), np.float32).reshape(-1) if self.want_state else None
                ended_rows[i] = (self._obs[i].copy(), state)
                self._reset_copy(i, None)
        if self._check.steps < SPACE_CHECK_STEPS:  # engine-made floats: checked while a run starts
            self._check.finite(self._obs, "step()", 0)
        self._check.steps += 1
        self._check.rewards(rewards)
        # The last views: every agent's row as the step left it (0 for agents dead before it).
        final_obs = self._obs.copy()
        state = self._states()
        final_state = state.copy() if state is not None and ended_rows else None
        for i, (row, st) in ended_rows.items():
            final_obs[i] = row
            if final_state is not None:
                final_state[i] = st
        # Rows of agents no longer alive read 0, as the dict adapter leaves them.
        self._obs[~self._alive] = 0.0
        alive = self._alive.copy()
        return VecStep(self._obs.copy(), alive, alive, self._mask_view(), state, rewards=rewards, terminated=term,
                       truncated=trunc, final_obs=final_obs, final_state=final_state, episode_end=end, infos=None,
                       episodes=episodes, final_raw={})

    def close(self) -> None:
        for c in self.copies:
            c.close()


def make_vector(num_envs: int, seed: int | None = None, **kwargs: Any) -> MAgentVector:
    return MAgentVector(num_envs, seed, **kwargs)


__all__ = ["MAgentVector", "make_vector"]
