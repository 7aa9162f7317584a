"""skirmish natively batched: ``num_envs`` battles in one set of arrays, as an
:class:`hdppo.envs.vector.VectorMultiAgentEnv` (``env.type: vector``,
``env.entry_point: hdppo.envs.builtin.skirmish:make_vector``).

The same game, agents, spaces and rewards as the ParallelEnv; a copy whose episode ends resets
inside the same step. Info dicts (what command-following rewards read) are made only when
asked for, copy by copy. ``module:function`` observation views need per-copy envs and are not
available here: give upper layers ``observation.source: state`` or ``env``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from ...vector import LazyStepInfos, VecObs, VecStep, VectorMultiAgentEnv
from .accounts import unit_infos
from .core import StepArrays
from .env import SkirmishEnv, make_battle, observation_space
from .opponents import get_policy
from .render import frame
from .scenarios import Scenario


class SkirmishVector(VectorMultiAgentEnv):
    """``num_envs`` skirmish battles stepped together; arguments as :class:`.env.SkirmishEnv`."""

    def __init__(self, num_envs: int, seed: int | None = None, scenario: str | Scenario = "8v8_mixed",
                 opponent: str = "focus_kite", max_steps: int | None = None, k_enemies: int = 5, k_allies: int = 4,
                 k_obstacles: int = 2, reward_damage: float = 1.0, reward_kill: float = 0.5, reward_win: float = 1.0,
                 reward_taken: float = 0.5, state_layout: str = "units", state_summary: bool = False):
        self.num_envs = num_envs
        self._rng = np.random.default_rng(seed)
        self.battle = b = make_battle(num_envs, scenario, max_steps, k_enemies, k_allies, k_obstacles, reward_damage,
                                      reward_kill, reward_win, reward_taken, self._rng, state_layout, state_summary)
        self._opponent = get_policy(opponent)
        self.name = "skirmish"
        self.episode_metrics = tuple(SkirmishEnv.metadata["episode_metrics"])
        self.agents = [f"red_{i}" for i in range(b.n)]
        self.obs_dim, self.mask_dim, self.state_dim = b.obs_dim, b.A, b.state_dim
        self._obs_space = observation_space(b)
        self._act_space = spaces.Discrete(b.A)
        self._ep_return = np.zeros(num_envs)
        self._ep_len = np.zeros(num_envs, np.int64)

    metadata = {"render_fps": SkirmishEnv.metadata["render_fps"]}

    def render_copy(self, i: int) -> np.ndarray:
        """Copy ``i`` as :mod:`.render` draws it (for ``hdppo eval --video``)."""
        return frame(self.battle, i)

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_space

    def _view(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b, n = self.battle, self.battle.n
        alive = b.alive[:, :n]
        obs = b.obs[:, :n] * alive[..., None]
        return obs, alive, b.mask[:, :n].astype(np.float32)

    def reset(self, seed: int | None = None) -> VecObs:
        if seed is not None:
            self._rng = self.battle.reseed(seed)
        self.battle.reset()
        self._ep_return[:], self._ep_len[:] = 0.0, 0
        obs, alive, masks = self._view()
        return VecObs(obs, alive.copy(), alive.copy(), masks, self.battle.state() if self.want_state else None)

    def step(self, actions: np.ndarray) -> VecStep:
        b, N, n = self.battle, self.num_envs, self.battle.n
        full = np.concatenate([np.asarray(actions, np.int64).reshape(N, n), self._opponent(b, 1, self._rng)], 1)
        res = b.step(full)
        before = res.alive_before[:, :n]
        died = res.died[:, :n]
        term = died | (res.eliminated[:, None] & before)
        trunc = (res.ended & ~res.eliminated)[:, None] & before & ~term
        rewards = res.rewards[:, :1] * before
        self._ep_return += rewards.sum(1)
        self._ep_len += 1
        end = res.ended
        final_obs = b.obs[:, :n] * before[..., None]        # the last view of every slot alive before the step
        final_state = None
        made: dict[int, dict[str, dict]] = {}
        episodes = []

        def infos_of(i: int, units: list[int]) -> dict[str, dict]:
            return unit_infos(b, res, i, units, [self.agents[u] for u in units])

        if end.any():
            idx = np.flatnonzero(end)
            if self.want_state:
                final_state = b.state()
            for i in idx.tolist():
                episodes.append((float(self._ep_return[i]), int(self._ep_len[i]), i))
                made[i] = infos_of(i, np.flatnonzero(before[i]).tolist())  # end-of-episode infos, before the reset
            self._ep_return[idx], self._ep_len[idx] = 0.0, 0
            b.reset(idx)
        obs, alive, masks = self._view()
        infos = LazyStepInfos(infos_of, self.agents, before, made)
        state = b.state() if self.want_state else None
        return VecStep(obs, alive, alive.copy(), masks, state, rewards=rewards, terminated=term, truncated=trunc,
                       final_obs=final_obs, final_state=final_state, episode_end=end, infos=infos,  # type: ignore[arg-type]
                       episodes=episodes, info_columns=self._info_columns(res), info_present=before)

    def _info_columns(self, res: StepArrays) -> "_UnitColumns":
        """The per-step keys of :func:`.accounts.unit_infos` as ``[N, n, ...]`` views of ``res``
        (the red units' slots), for vectorised rewards (``InfoRows.column``); each made when read."""
        return _UnitColumns(res, self.battle)

    def close(self) -> None:
        pass


class _UnitColumns(Mapping):
    """:meth:`SkirmishVector._info_columns`: a view is sliced only for a key a reward reads (most
    steps of an upper layer's worker read none)."""

    KEYS = ("dealt", "dealt_to", "killed", "taken", "healed", "approach", "retreat", "cohesion", "spacing", "depth",
            "moved", "squad", "n_squads", "unit_type")

    def __init__(self, res: StepArrays, battle):
        self._res, self._battle = res, battle

    def __getitem__(self, key: str) -> np.ndarray:
        b, n = self._battle, self._battle.n
        static = {"squad": b.squad[:n], "unit_type": b.utype[:n], "n_squads": b.S}.get(key)
        if static is not None:  # the same for every copy: a view, not an array per step
            return np.broadcast_to(static, (b.N, n))
        if key not in self.KEYS:
            raise KeyError(key)
        return getattr(self._res, key)[:, :n]

    def __iter__(self):
        return iter(self.KEYS)

    def __len__(self) -> int:
        return len(self.KEYS)


def make_vector(num_envs: int, seed: int | None = None, **kwargs: Any) -> SkirmishVector:
    return SkirmishVector(num_envs, seed, **kwargs)
