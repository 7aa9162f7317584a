"""The swarm envs: a PettingZoo ParallelEnv (one field) and a natively batched vector env
(``num_envs`` fields in one set of arrays). Spaces, rewards and scenarios:
:mod:`hdppo.envs.builtin.swarm`."""
from __future__ import annotations

import functools
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from ...errors import EnvError
from ...vector import LazyStepInfos, VecObs, VecStep, VectorMultiAgentEnv
from .assignment import assignment_rows, permutations
from .core import Physics, RewardWeights, StepArrays, Swarm
from .render import frame
from .scenarios import SCENARIOS, Scenario, get_scenario


# Keys of the last step's infos that describe the whole episode (every drone's info has them).
EPISODE_METRICS = ("reach_rate", "collision_rate", "assignment_shortest")


def make_swarm(num_copies: int, scenario: str | Scenario, max_steps: int | None, k_neighbors: int, k_obstacles: int,
               reward_progress: float, reward_reach: float, reward_collision: float, reward_time: float,
               rng: np.random.Generator, reward_proximity: float = 0.0, proximity_margin: float = 1.0,
               crash_on_collision: bool = False) -> Swarm:
    try:
        sc = get_scenario(scenario)
    except ValueError as exc:
        raise EnvError(str(exc)) from None
    if k_neighbors < 0 or k_obstacles < 0:
        raise EnvError(f"swarm: k_neighbors ({k_neighbors}) and k_obstacles ({k_obstacles}) must be >= 0")
    if max_steps is not None and max_steps < 1:
        raise EnvError(f"swarm: max_steps must be >= 1 (or None for the scenario's {sc.max_steps}), not {max_steps}")
    if reward_proximity < 0 or proximity_margin <= 0:
        raise EnvError(f"swarm: reward_proximity ({reward_proximity}) must be >= 0 and proximity_margin "
                       f"({proximity_margin}) > 0 (metres of clearance where the proximity penalty starts)")
    weights = RewardWeights(reward_progress, reward_reach, reward_collision, reward_time, reward_proximity,
                            proximity_margin)
    if not isinstance(crash_on_collision, bool):
        raise EnvError(f"swarm: crash_on_collision must be true or false, not {crash_on_collision!r}")
    return Swarm(sc, num_copies, k_neighbors, k_obstacles, max_steps, Physics(), weights, rng, crash=crash_on_collision)


def drone_infos(s: Swarm, res: StepArrays | None, copy: int, drones: list[int], names: list[str]) -> dict[str, dict]:
    """Per drone in ``drones`` of copy ``copy``: its info dict for the step ``res`` (None: after reset).

    Each step: ``group``, ``reached`` (1 once at the goal), ``collided`` (1 once it collided),
    ``collisions`` (this episode), ``collision`` (new contacts this step), ``progress`` (m toward
    the goal this step), ``altitude`` (z / height), ``in_field`` (1 inside the obstacle band),
    ``cohesion`` (m to its group's centroid), ``spacing`` (m to the nearest drone of its group,
    ``inf`` alone). On the step that ends the episode also ``reach_rate`` and ``collision_rate``
    (fractions of all the field's drones), ``episode_steps`` and ``assignment_shortest`` (1 when
    the groups flew to the regions with the shortest summed distance from their starts)."""
    coh, spacing = s.group_stats()
    x = s.pos[copy, :, 0]
    in_field = (x >= s.sc.field[0]) & (x <= s.sc.field[1])
    out: dict[str, dict] = {}
    end = res is not None and bool(res.ended[copy])
    summary = {"reach_rate": float(s.reached[copy].mean()), "collision_rate": float(s.collided[copy].mean()),
               "episode_steps": int(s.t[copy]),
               "assignment_shortest": float((s.assignment[copy] == s.shortest[copy]).all())} if end else {}
    for i, name in zip(drones, names):
        out[name] = {"group": int(s.group[i]), "reached": int(s.reached[copy, i]),
                     "collided": int(s.collided[copy, i]), "collisions": int(s.collisions[copy, i]),
                     "collision": int(res.collision_now[copy, i]) if res is not None else 0,
                     "progress": float(res.progress[copy, i]) if res is not None else 0.0,
                     "altitude": float(s.pos[copy, i, 2] / s.sc.world[2]), "in_field": int(in_field[i]),
                     "cohesion": float(coh[copy, i]), "spacing": float(spacing[copy, i])} | summary
    return out


def _spaces(s: Swarm) -> tuple[spaces.Box, spaces.Box, spaces.Box]:
    return (spaces.Box(-1.0, 1.0, (s.obs_dim,), np.float32), spaces.Box(-1.0, 1.0, (3,), np.float32),
            spaces.Box(-1.0, 1.0, (s.state_dim,), np.float32))


class SwarmEnv(ParallelEnv):
    """See :mod:`hdppo.envs.builtin.swarm` for the table of agents, spaces, rewards and arguments."""

    # episode_metrics: charted per episode as episode/<key> (hdppo.envs.vector.episode_info_values).
    metadata = {"name": "swarm_v0", "render_modes": ["rgb_array"], "render_fps": 10,
                "episode_metrics": EPISODE_METRICS}

    def __init__(self, scenario: str | Scenario = "8_medium", max_steps: int | None = None, k_neighbors: int = 4,
                 k_obstacles: int = 4, reward_progress: float = 1.0, reward_reach: float = 10.0,
                 reward_collision: float = 10.0, reward_time: float = 0.01, reward_proximity: float = 0.0,
                 proximity_margin: float = 1.0, crash_on_collision: bool = False, render_mode: str | None = None):
        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"swarm renders only render_mode='rgb_array', not {render_mode!r}")
        self.render_mode = render_mode
        self._rng = np.random.default_rng()
        self.swarm = make_swarm(1, scenario, max_steps, k_neighbors, k_obstacles, reward_progress, reward_reach,
                                reward_collision, reward_time, self._rng, reward_proximity, proximity_margin,
                                crash_on_collision)
        n = self.swarm.n
        self.possible_agents = [f"drone_{i}" for i in range(n)]
        self._slot = {a: i for i, a in enumerate(self.possible_agents)}
        self.agents: list[str] = []
        self._obs_space, self._act_space, self._state_space = _spaces(self.swarm)
        self.last_outcome: dict[str, Any] | None = None

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return self._obs_space

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return self._act_space

    @property
    def state_space(self):
        return self._state_space

    @property
    def groups(self) -> dict[str, list[str]]:
        """Group name -> its drones, as a hierarchy config lists them (``agents: {squads: ...}``)."""
        s = self.swarm
        return {f"group_{g}": [a for a, q in zip(self.possible_agents, s.group) if q == g] for g in range(s.G)}

    def state(self) -> np.ndarray:
        return self.swarm.state()[0]

    def reset(self, seed=None, options=None):
        if seed is not None:
            self._rng = self.swarm.reseed(seed)
        self.swarm.reset()
        self.agents = list(self.possible_agents)
        self.last_outcome = None
        obs = self.swarm.obs[0]
        return ({a: obs[i].copy() for i, a in enumerate(self.agents)},
                drone_infos(self.swarm, None, 0, list(range(self.swarm.n)), self.agents))

    def step(self, actions):
        s = self.swarm
        full = np.zeros((1, s.n, 3))
        if actions:
            full[0, [self._slot[a] for a in actions]] = np.stack([np.asarray(v, np.float64) for v in actions.values()])
        res = s.step(full)
        agents = self.agents
        slots = [self._slot[a] for a in agents]
        end, trunc_all = bool(res.ended[0]), bool(res.truncated[0])
        ended_flight = res.terminated[0]
        obs = s.obs[0]
        observations = {a: obs[i].copy() for a, i in zip(agents, slots)}
        rewards = {a: float(res.rewards[0, i]) for a, i in zip(agents, slots)}
        term = {a: bool(ended_flight[i]) for a, i in zip(agents, slots)}
        trunc = {a: trunc_all and not term[a] for a in agents}
        infos = drone_infos(s, res, 0, slots, agents)
        if end:
            self.last_outcome = {k: infos[agents[0]][k] for k in ("reach_rate", "collision_rate", "episode_steps")}
        self.agents = [a for a in agents if not (term[a] or trunc[a])]
        return observations, rewards, term, trunc, infos

    def apply_command(self, layer: str, lane: int, action: int) -> dict[str, np.ndarray]:
        """Goal assignment by an upper layer (``action.to_env``): action k sends group g to region
        ``assignment.permutations(G)[k][g]``, as :meth:`SwarmVector.apply_command`; returns the
        drones' new observations."""
        s = self.swarm
        s.assign(np.array([0]), assignment_rows(layer, np.asarray(action).reshape(-1)[:1], s.G, s.sc.name))
        return {a: self.swarm.obs[0, self._slot[a]].copy() for a in self.agents}

    def render(self) -> np.ndarray | None:
        """``[H, W, 3]`` uint8 (None without render_mode); see :mod:`.render`."""
        if self.render_mode is None:
            gymnasium.logger.warn("swarm: render() without render_mode; make it with render_mode='rgb_array'.")
            return None
        return frame(self.swarm, 0)


def parallel_env(**kwargs) -> SwarmEnv:
    return SwarmEnv(**kwargs)


class SwarmVector(VectorMultiAgentEnv):
    """``num_envs`` swarm fields stepped together; arguments as :class:`SwarmEnv` (frames by
    :meth:`render_copy`, no render_mode)."""

    metadata = SwarmEnv.metadata
    episode_metrics = EPISODE_METRICS

    def __init__(self, num_envs: int, seed: int | None = None, scenario: str | Scenario = "8_medium",
                 max_steps: int | None = None, k_neighbors: int = 4, k_obstacles: int = 4,
                 reward_progress: float = 1.0, reward_reach: float = 10.0, reward_collision: float = 10.0,
                 reward_time: float = 0.01, reward_proximity: float = 0.0, proximity_margin: float = 1.0,
                 crash_on_collision: bool = False):
        self.num_envs = num_envs
        self._rng = np.random.default_rng(seed)
        self.swarm = s = make_swarm(num_envs, scenario, max_steps, k_neighbors, k_obstacles, reward_progress,
                                    reward_reach, reward_collision, reward_time, self._rng, reward_proximity,
                                    proximity_margin, crash_on_collision)
        self.name = "swarm"
        self.agents = [f"drone_{i}" for i in range(s.n)]
        self.obs_dim, self.mask_dim, self.state_dim = s.obs_dim, 0, s.state_dim
        self._obs_space, self._act_space, _ = _spaces(s)
        self._ep_return = np.zeros(num_envs)
        self._ep_len = np.zeros(num_envs, np.int64)

    def render_copy(self, i: int) -> np.ndarray:
        """Copy ``i`` as :mod:`.render` draws it (for ``hdppo eval --video``)."""
        return frame(self.swarm, i)

    def raw_obs(self, i: int) -> dict[str, np.ndarray]:
        """Copy ``i``'s observation of each drone in the field (for ``teacher.policy`` and
        ``observation.source`` functions), as :class:`SwarmEnv` would return them."""
        obs, active = self.swarm.obs[i], self.swarm.active[i]
        return {a: obs[k] for k, a in enumerate(self.agents) if active[k]}

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_space

    def reset(self, seed: int | None = None) -> VecObs:
        if seed is not None:
            self._rng = self.swarm.reseed(seed)
        self.swarm.reset()
        self._ep_return[:], self._ep_len[:] = 0.0, 0
        alive = self.swarm.active.copy()
        return VecObs(self.swarm.obs.copy(), alive, alive.copy(), None, self.swarm.state() if self.want_state else None)

    def step(self, actions: np.ndarray) -> VecStep:
        s = self.swarm
        res = s.step(actions)
        before = res.active_before
        term = res.terminated
        trunc = res.truncated[:, None] & before & ~term
        rewards = res.rewards * before
        self._ep_return += rewards.sum(1)
        self._ep_len += 1
        end = res.ended
        final_obs = s.obs * before[..., None]
        final_state = None
        made: dict[int, dict[str, dict]] = {}
        episodes = []

        def infos_of(i: int, drones: list[int]) -> dict[str, dict]:
            return drone_infos(s, res, i, drones, [self.agents[j] for j in drones])

        if end.any():
            idx = np.flatnonzero(end)
            if self.want_state:
                final_state = s.state()
            for i in idx.tolist():
                episodes.append((float(self._ep_return[i]), int(self._ep_len[i]), i))
                made[i] = infos_of(i, np.flatnonzero(before[i]).tolist())  # end-of-episode infos, before the reset
            self._ep_return[idx], self._ep_len[idx] = 0.0, 0
            s.reset(idx)
        alive = s.active.copy()
        infos = LazyStepInfos(infos_of, self.agents, before, made)
        return VecStep(s.obs.copy(), alive, alive.copy(), None, s.state() if self.want_state else None,
                       rewards=rewards, terminated=term.copy(), truncated=trunc, final_obs=final_obs,
                       final_state=final_state, episode_end=end, infos=infos,  # type: ignore[arg-type]
                       episodes=episodes)

    def apply_command(self, layer: str, copies: np.ndarray, lanes: np.ndarray, actions: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray | None]:
        """Goal assignment by an upper layer (``action: {type: discrete, n: G!, to_env: true}``,
        one lane for the whole swarm): action k sends group g to region
        ``assignment.permutations(G)[k][g]`` (:mod:`.assignment`)."""
        s = self.swarm
        copies = np.asarray(copies, np.int64)
        a = np.asarray(actions).reshape(len(copies), -1)
        if a.shape[1] != 1 or len(np.unique(copies)) != len(copies):
            raise EnvError(f"swarm: layer {layer!r} assigns goals (action.to_env) with {a.shape[1]} value(s) per "
                           f"decision and {len(copies) - len(np.unique(copies))} copies decided twice; goal "
                           f"assignment needs one lane for the whole swarm (agents: all) and one Discrete choice, "
                           f"action: {{type: discrete, n: {len(permutations(s.G))}}} for {s.G} groups.")
        s.assign(copies, assignment_rows(layer, np.rint(a[:, 0]), s.G, s.sc.name))
        return s.obs.copy(), (s.state() if self.want_state else None)

    def close(self) -> None:
        pass


def make_vector(num_envs: int, seed: int | None = None, **kwargs: Any) -> SwarmVector:
    return SwarmVector(num_envs, seed, **kwargs)


__all__ = ["SCENARIOS", "SwarmEnv", "SwarmVector", "drone_infos", "make_vector", "parallel_env"]
