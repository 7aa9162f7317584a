"""The skirmish PettingZoo ParallelEnv: the red army's units are the agents, a scripted player
commands the blue army. Spaces, rewards and scenarios: :mod:`hdppo.envs.builtin.skirmish`."""
from __future__ import annotations

import functools
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from .accounts import unit_infos
from .core import Battle, RewardWeights
from .opponents import get_policy
from .render import frame
from .scenarios import Scenario, get_scenario


def make_battle(num_copies: int, scenario: str | Scenario, max_steps: int | None, k_enemies: int, k_allies: int,
                k_obstacles: int, reward_damage: float, reward_kill: float, reward_win: float, reward_taken: float,
                rng: np.random.Generator, state_layout: str = "units", state_summary: bool = False) -> Battle:
    weights = RewardWeights(reward_damage, reward_kill, reward_win, reward_taken)
    return Battle(get_scenario(scenario), num_copies, k_enemies, k_allies, k_obstacles, max_steps, weights, rng,
                  state_layout, state_summary)


def observation_space(battle: Battle) -> spaces.Dict:
    return spaces.Dict({"observation": spaces.Box(-1.0, 1.0, (battle.obs_dim,), np.float32),
                        "action_mask": spaces.Box(0, 1, (battle.A,), np.int8)})


class SkirmishEnv(ParallelEnv):
    """See :mod:`hdppo.envs.builtin.skirmish` for the table of agents, spaces, rewards and arguments."""

    # episode_metrics: last-step info keys that hdppo charts per episode (episode/win, ...).
    metadata = {"name": "skirmish_v0", "render_modes": ["rgb_array"], "render_fps": 10,
                "episode_metrics": ("win", "draw", "kills", "losses")}

    def __init__(self, scenario: str | Scenario = "8v8_mixed", opponent: str = "focus_kite",
                 max_steps: int | None = None, k_enemies: int = 5, k_allies: int = 4, k_obstacles: int = 2,
                 reward_damage: float = 1.0, reward_kill: float = 0.5, reward_win: float = 1.0,
                 reward_taken: float = 0.5, render_mode: str | None = None, state_layout: str = "units",
                 state_summary: bool = False):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"skirmish renders only render_mode='rgb_array', not {render_mode!r}")
        self.render_mode = render_mode
        self._rng = np.random.default_rng()
        self.battle = make_battle(1, scenario, max_steps, k_enemies, k_allies, k_obstacles, reward_damage,
                                  reward_kill, reward_win, reward_taken, self._rng, state_layout, state_summary)
        self.opponent_name = opponent
        self._opponent = get_policy(opponent)
        n = self.battle.n
        self.possible_agents = [f"red_{i}" for i in range(n)]
        self._slot = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        self._obs_space = observation_space(self.battle)
        self._state_space = spaces.Box(0.0, 1.0, (self.battle.state_dim,), np.float32)
        self.last_outcome: dict[str, Any] | None = None

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return self._obs_space

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(self.battle.A)

    @property
    def state_space(self):
        return self._state_space

    @property
    def squads(self) -> dict[str, list[str]]:
        """Squad name -> its agents, as a hierarchy config lists them (``agents: {squads: ...}``)."""
        b = self.battle
        return {f"squad_{s}": [a for a, q in zip(self.possible_agents, b.squad[: b.n]) if q == s] for s in range(b.S)}

    def state(self) -> np.ndarray:
        return self.battle.state()[0]

    def _observations(self, agents: list[str]) -> dict[str, dict[str, np.ndarray]]:
        b = self.battle
        obs, mask = b.obs[0], b.mask[0].astype(np.int8)
        return {a: {"observation": obs[self._slot[a]], "action_mask": mask[self._slot[a]]} for a in agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = self.battle.reseed(seed)
        self.battle.reset()
        self.agents = list(self.possible_agents)
        self.last_outcome = None
        b = self.battle
        return self._observations(self.agents), {a: {"squad": int(b.squad[i]), "n_squads": b.S}
                                                 for i, a in enumerate(self.agents)}

    def scripted_actions(self, policy: str) -> dict[str, int]:
        """What scripted player ``policy`` would do with the live red units now (for baselines)."""
        acts = get_policy(policy)(self.battle, 0, self._rng)[0]
        return {a: int(acts[self._slot[a]]) for a in self.agents}

    def step(self, actions):
        b = self.battle
        full = np.zeros((1, b.U), np.int64)
        if actions:
            slots = [self._slot[a] for a in actions]
            full[0, slots] = [int(v) for v in actions.values()]
        full[0, b.n:] = self._opponent(b, 1, self._rng)[0]
        res = b.step(full)
        agents = self.agents
        units = [self._slot[a] for a in agents]
        r = float(res.rewards[0, 0])
        died = res.died[0].tolist()
        elim, end = bool(res.eliminated[0]), bool(res.ended[0])
        term = {a: died[u] or elim for a, u in zip(agents, units)}
        trunc = {a: end and not term[a] for a in agents}
        infos = unit_infos(b, res, 0, units, agents)
        obs = self._observations(agents)
        if end:
            self.last_outcome = {k: infos[agents[0]][k] for k in ("win", "draw", "outcome", "kills", "losses",
                                                                   "episode_steps")} if agents else None
        self.agents = [a for a in agents if not (term[a] or trunc[a])]
        return obs, dict.fromkeys(agents, r), term, trunc, infos

    def render(self) -> np.ndarray | None:
        """``[H, W, 3]`` uint8 (None without render_mode); see :mod:`.render`."""
        if self.render_mode is None:
            gymnasium.logger.warn("skirmish: render() without render_mode; make it with render_mode='rgb_array'.")
            return None
        return frame(self.battle, 0)


def parallel_env(**kwargs) -> SkirmishEnv:
    return SkirmishEnv(**kwargs)
