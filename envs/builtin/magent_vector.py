"""MAgent2's grid battles stepped through the engine's arrays: N copies, no per-agent dicts.

MAgent2's PettingZoo envs compute every team's observations, rewards and deaths as arrays in
C++, then split them into one dict entry per agent; the dict adapter (``env.type: pettingzoo``)
stacks them back into arrays. On ``battle_v4`` (map 20, 24 agents) those two conversions were
about half of a sampling step. This env reads the arrays from the engine instead (the C
functions behind ``get_agent_id``, ``get_observation``, ``get_reward``, ``get_alive``, called
into buffers made once: see :class:`_Engine`) and writes them into the ``[copies, agents, ...]``
arrays the sampler takes::

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

Opponents: ``env.opponents`` is for the dict path; here the env plays them itself, from its
``opponents`` kwarg, with the same fields (``agents``: a name prefix or a list; ``policy``:
``random`` or a ``package.module:function`` called as ``fn(observations, env, rng)``, as
``env.opponents.policy``; ``hdppo.envs.builtin.magent:attack_nearest`` works unchanged)::

    kwargs: {env: combined_arms_v6, map_size: 16, opponents: {agents: blue, policy: random}}

The learners are then the only agents; an episode's return sums theirs, a copy resets when
none of them is left (or the game is over), and its last step's infos carry
``learners_alive``, ``opponents_alive`` (the units still on the grid, as
``hdppo.envs.builtin.magent:standing`` reads them) and ``win`` (more learners standing), declared
as episode metrics.
"""
from __future__ import annotations

import ctypes
import importlib
from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import EnvError
from ..opponents import resolve_policy, select_agents
from ..vector import SPACE_CHECK_STEPS, VecObs, VecStep, VectorMultiAgentEnv, _Checker

OUTCOME_KEYS = ("learners_alive", "opponents_alive", "win")


def _load(env: str) -> Any:
    name = env if "." in env else f"magent2.environments.{env}"
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EnvError(f"env.kwargs.env {env!r}: cannot import {name} ({exc}). Name a MAgent2 env module, e.g. "
                       "battle_v4, battlefield_v5, combined_arms_v6 (pip install magent2).") from None


class MAgentVector(VectorMultiAgentEnv):
    """``num_envs`` copies of one MAgent2 PettingZoo env, stepped through its engine arrays."""

    def __init__(self, num_envs: int, seed: int | None = None, env: str = "battle_v4",
                 opponents: dict | None = None, **kwargs: Any):
        module = _load(env)
        self.name = f"magent2.{env}"
        self.num_envs = int(num_envs)
        self.copies = [module.parallel_env(**kwargs) for _ in range(self.num_envs)]
        first = self.copies[0]
        # Internally every unit of the game has a slot (the engine's ids index possible_agents);
        # the learners' slots are what the sampler sees.
        self._everyone = list(first.possible_agents)
        self.slot = {a: k for k, a in enumerate(self._everyone)}
        self._opp_policy = None
        opp: list[str] = []
        if opponents:
            unknown = sorted(set(opponents) - {"agents", "policy"})
            if unknown or "agents" not in opponents:
                raise EnvError(f"env.kwargs.opponents of {self.name!r}: give agents (a name prefix or a list) and "
                               f"optionally policy ('random' or 'package.module:function'); got {sorted(opponents)}.")
            try:
                opp = select_agents(opponents["agents"], self._everyone, self.name)
            except EnvError as exc:
                raise EnvError(str(exc).replace("env.opponents.", "env.kwargs.opponents.")) from None
            self._opp_policy = resolve_policy(opponents.get("policy", "random"), "env.kwargs.opponents.policy")
            self._opp_rng = np.random.default_rng(seed)
            self._shims = [_OpponentView(c, self._everyone) for c in self.copies]
        self._opp_idx = np.array([self.slot[a] for a in opp], np.int64)
        self._learn_idx = np.array([k for k, a in enumerate(self._everyone) if a not in set(opp)], np.int64)
        self.agents = [self._everyone[k] for k in self._learn_idx]
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
        self.episode_metrics = OUTCOME_KEYS if self._opp_policy is not None else ()
        n, a = self.num_envs, len(self._everyone)
        self._obs = np.zeros((n, a, self.obs_dim), np.float32)
        self._alive = np.zeros((n, a), bool)
        self._ep_return = np.zeros(n)
        self._ep_len = np.zeros(n, np.int64)
        self._check = _Checker(self.name)
        self._seed = seed
        self._engines: list[_Engine | None] = [None] * n
        # Where a unit's observation is its view alone (no minimap, no extra features), the engine
        # writes a team's views straight into the observation rows when the team's ids are
        # consecutive slots (every unit of battle_v4 at the start; most steps after): a copy of
        # every view cost ~7 us per env step on battle_v4 (map 20). ``_slot_bytes`` tells the
        # consecutive runs of ids apart with one bytes comparison.
        views = [int(np.prod(first.env.view_space[h.value])) for h in first.handles]
        self._direct = (not first.minimap_mode and not first.extra_features
                        and all(v == self.obs_dim for v in views))
        self._slot_bytes = np.arange(a, dtype=np.int32).tobytes()

    @property
    def metadata(self) -> dict[str, Any]:
        return {"render_fps": getattr(self.copies[0], "metadata", {}).get("render_fps", 5)}

    def render_copy(self, i: int) -> np.ndarray:
        """Copy ``i`` as MAgent2 draws it (``hdppo eval --video``; MAgent2's renderer needs pygame)."""
        c = self.copies[i]
        c.render_mode = "rgb_array"  # MAgent2 makes its renderer on the first render, from this attribute
        return np.asarray(c.render())

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

    def _engine(self, i: int) -> "_Engine":
        """Copy ``i``'s engine binding, made again if its env made a new engine (a new game pointer)."""
        eng = self._engines[i]
        gw = self.copies[i].env
        if eng is None or eng.gridworld is not gw or eng.game != gw.game.value:
            eng = self._engines[i] = _Engine(gw, self.copies[i].handles, self._obs[i] if self._direct else None)
        return eng

    def _views(self, c: Any, eng: "_Engine", t: int, n: int) -> np.ndarray:
        """Team ``t``'s ``n`` observations ``[n, *shape]``, as ``magent_env._compute_observations`` builds them."""
        view, features = eng.observation(t, n)
        if c.minimap_mode and not c.extra_features:
            features = features[:, -2:]
        if c.minimap_mode or c.extra_features:
            tiled = np.broadcast_to(features[:, None, None, :], (*view.shape[:3], features.shape[-1]))
            return np.concatenate([view, tiled], axis=-1)
        return view

    def _step_copy(self, i: int, actions: np.ndarray, rewards: np.ndarray, term: np.ndarray,
                   trunc: np.ndarray) -> None:
        c, eng = self.copies[i], self._engine(i)
        # Actions: each team's live agents in the engine's order (their ids are the slots). The
        # same agents are listed after the step: the dead leave only at clear_dead().
        team_ids = [eng.ids(t) for t in range(len(c.handles))]
        for t, ids in enumerate(team_ids):
            if len(ids):
                eng.set_action(t, actions[ids])
        c.frames += 1
        game_over = eng.step()
        row = self._obs[i]
        before = self._alive[i].copy()
        for t, ids in enumerate(team_ids):
            n = len(ids)
            if not n:
                continue
            if game_over:
                term[i, ids] = True
            else:
                dead = ~eng.alive(t, n)
                term[i, ids] = dead
                c.team_sizes[t] = n - int(np.count_nonzero(dead))
            rewards[i, ids] = eng.reward(t, n)
            first = int(ids[0])
            if self._direct and ids.tobytes() == self._slot_bytes[4 * first:4 * (first + n)]:
                eng.views_into_slots(t, first)
            else:
                row[ids] = self._views(c, eng, t, n).reshape(n, -1)
        if c.frames >= c.max_cycles:
            trunc[i] = before & ~term[i]
        eng.clear_dead()
        gone = term[i] | trunc[i]
        if gone.any():  # the PettingZoo env's list of agents, as its own step leaves it (a 24-name loop: only on a change)
            self._alive[i] = before & ~gone
            c.agents = [a for a, live in zip(self._everyone, self._alive[i]) if live]

    # -- the interface -------------------------------------------------------------------------------
    def _states(self) -> np.ndarray | None:
        if not self.want_state:
            return None
        return np.stack([np.asarray(c.state(), np.float32).reshape(-1) for c in self.copies])

    def reset(self, seed: int | None = None) -> VecObs:
        seed = self._seed if seed is None else seed
        for i in range(self.num_envs):
            self._reset_copy(i, None if seed is None else seed + i)
        alive = self._learners(self._alive)
        return VecObs(self._learners(self._obs), alive, alive, self._mask_view(), self._states())

    def _learners(self, x: np.ndarray) -> np.ndarray:
        """The learners' columns of a ``[copies, every unit, ...]`` array (a copy either way)."""
        return x.copy() if self._opp_policy is None else x[:, self._learn_idx]

    def _opponent_actions(self, i: int, out: np.ndarray) -> None:
        """Copy ``i``'s live opponents' actions, from the policy, into ``out`` (every unit's slots)."""
        live = [k for k in self._opp_idx.tolist() if self._alive[i, k]]
        if not live:
            return
        shape = self._space.shape
        views = {self._everyone[k]: self._obs[i, k].reshape(shape) for k in live}
        picked = self._opp_policy(views, self._shims[i], self._opp_rng)  # type: ignore[misc]
        extra = sorted(set(picked) - set(views))
        if extra:
            raise EnvError(f"env.kwargs.opponents.policy returned actions for {extra}, which are not opponents "
                           f"standing in {self.name!r} now ({', '.join(views)}).")
        for agent, act in picked.items():
            out[self.slot[agent]] = int(np.asarray(act).reshape(-1)[0])

    def _outcome(self, i: int) -> dict[str, float]:
        """Units of each side still on copy ``i``'s grid (the engine has cleared the dead)."""
        eng = self._engine(i)
        standing = np.zeros(len(self._everyone), bool)
        for t in range(len(eng.handles)):
            standing[eng.ids(t)] = True
        mine, theirs = int(standing[self._learn_idx].sum()), int(standing[self._opp_idx].sum())
        return {"learners_alive": mine, "opponents_alive": theirs, "win": float(mine > theirs)}

    def step(self, actions: np.ndarray) -> VecStep:
        n, a = self.num_envs, len(self._everyone)
        if self._opp_policy is None:
            acts = np.asarray(actions).reshape(n, a)
        else:
            acts = np.zeros((n, a), np.int64)
            acts[:, self._learn_idx] = np.asarray(actions).reshape(n, len(self.agents))
            for i in range(n):
                self._opponent_actions(i, acts[i])
        rewards = np.zeros((n, a))
        term = np.zeros((n, a), bool)
        trunc = np.zeros((n, a), bool)
        end = np.zeros(n, bool)
        episodes = []
        ended_rows: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        infos = None if self._opp_policy is None else [{} for _ in range(n)]
        # Without opponents every unit learns: a slice, not a gather, on the per-copy hot path.
        learn = self._learn_idx if self._opp_policy is not None else slice(None)
        for i in range(n):
            self._step_copy(i, acts[i], rewards, term, trunc)
            self._ep_return[i] += float(rewards[i, learn].sum())
            self._ep_len[i] += 1
            if not self._alive[i, learn].any() or (self._opp_policy is not None and not self._alive[i].any()):
                # Reset here, copy by copy, as the dict adapter does: MAgent2 draws maps and
                # moves from one random stream, so the order of steps and resets matters.
                end[i] = True
                episodes.append((float(self._ep_return[i]), int(self._ep_len[i]), i))
                if infos is not None:
                    outcome = self._outcome(i)
                    infos[i] = {agent: outcome for agent in self.agents}
                state = np.asarray(self.copies[i].state(), np.float32).reshape(-1) if self.want_state else None
                ended_rows[i] = (self._obs[i].copy(), state)
                self._reset_copy(i, None)
        if self._check.steps < SPACE_CHECK_STEPS:  # engine-made floats: checked while a run starts
            self._check.finite(self._obs, "step()", 0)
        self._check.steps += 1
        self._check.rewards(rewards)
        # The last views: every agent's row as the step left it (0 for agents dead before it).
        # Where no agent ended and no copy reset, they are the observations themselves (most
        # steps: a copy of every view per step cost ~5 us per env step on battle_v4).
        ended_any = bool(ended_rows) or bool(term.any()) or bool(trunc.any())
        final_obs = self._obs.copy() if ended_any else None
        state = self._states()
        final_state = state.copy() if state is not None and ended_rows else None
        for i, (row, st) in ended_rows.items():
            final_obs[i] = row  # type: ignore[index]
            if final_state is not None:
                final_state[i] = st
        # Rows of agents no longer alive read 0, as the dict adapter leaves them.
        self._obs[~self._alive] = 0.0
        alive = self._learners(self._alive)
        # Without opponents, the env's own array: a step's arrays are valid until the next step
        # (see hdppo.envs.vector), and a copy of every view cost ~6 us per env step on battle_v4.
        obs = self._obs if self._opp_policy is None else self._obs[:, learn]
        if final_obs is None:
            final_obs = obs
        elif self._opp_policy is not None:
            final_obs = final_obs[:, learn]
        if self._opp_policy is not None:
            rewards, term, trunc = rewards[:, learn], term[:, learn], trunc[:, learn]
        return VecStep(obs, alive, alive, self._mask_view(), state, rewards=rewards,
                       terminated=term, truncated=trunc, final_obs=final_obs, final_state=final_state,
                       episode_end=end, infos=infos, episodes=episodes, final_raw={})

    def close(self) -> None:
        for c in self.copies:
            c.close()


class _Engine:
    """One copy's MAgent2 engine, called through its C functions with buffers and pointers made once.

    ``magent2.gridworld.GridWorld`` allocates an array and builds its ctypes pointers on every
    call (``get_agent_id``, ``get_alive``, ``get_reward``, ``get_observation``, each also asking
    for the team's size): on battle_v4 (map 20) those calls cost about five times the engine's
    own step. The same C functions are called here, with the same arguments, into per-team
    buffers that grow when a team does. What a method returns is a view of its buffer, valid until
    the next call of that method for that team.

    ``views_out`` (``[units, view size]`` float32, C-contiguous, one row per engine id): the rows
    :meth:`views_into_slots` has the engine write views into, without the buffer."""

    def __init__(self, gridworld: Any, handles: list[Any], views_out: np.ndarray | None = None):
        from magent2.c_lib import _LIB

        self.lib, self.gridworld = _LIB, gridworld
        self.game_ptr = gridworld.game
        self.game = gridworld.game.value
        self.handles = list(handles)
        self._n = ctypes.c_int32()
        self._n_ref = ctypes.byref(self._n)
        self._done = ctypes.c_int32()
        self._done_ref = ctypes.byref(self._done)
        self._cap = [0] * len(self.handles)
        self._bufs: list[dict[str, np.ndarray]] = [{} for _ in self.handles]
        self._ptrs: list[dict[str, Any]] = [{} for _ in self.handles]
        if views_out is not None and not (views_out.dtype == np.float32 and views_out.flags.c_contiguous):
            raise ValueError("views_out must be a C-contiguous float32 array")
        self._views_out = views_out  # held: the pointers below point into it
        self._into: dict[tuple[int, int], Any] = {}

    def _grow(self, t: int, n: int) -> None:
        h = self.handles[t]
        cap = max(n, 2 * self._cap[t], 1)
        view = (cap, *self.gridworld.view_space[h.value])
        feat = (cap, *self.gridworld.feature_space[h.value])
        bufs = {"id": np.empty(cap, np.int32), "alive": np.empty(cap, np.bool_), "reward": np.empty(cap, np.float32),
                "action": np.empty(cap, np.int32), "view": np.empty(view, np.float32),
                "feature": np.empty(feat, np.float32)}
        ptrs = {"id": bufs["id"].ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                "alive": bufs["alive"].ctypes.data_as(ctypes.POINTER(ctypes.c_bool)),
                "reward": bufs["reward"].ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                "action": bufs["action"].ctypes.data_as(ctypes.POINTER(ctypes.c_int32))}
        obs = (ctypes.POINTER(ctypes.c_float) * 2)()
        obs[0] = bufs["view"].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        obs[1] = bufs["feature"].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        ptrs["obs"] = obs
        self._bufs[t], self._ptrs[t], self._cap[t] = bufs, ptrs, cap
        self._into.clear()  # they point at the old feature buffers

    def num(self, t: int) -> int:
        self.lib.env_get_info(self.game_ptr, self.handles[t], b"num", self._n_ref)
        n = self._n.value
        if n > self._cap[t]:
            self._grow(t, n)
        return n

    def ids(self, t: int) -> np.ndarray:
        n = self.num(t)
        if n:
            self.lib.env_get_info(self.game_ptr, self.handles[t], b"id", self._ptrs[t]["id"])
        return self._bufs[t]["id"][:n]

    def set_action(self, t: int, actions: np.ndarray) -> None:
        buf = self._bufs[t]["action"]
        buf[:len(actions)] = actions
        self.lib.env_set_action(self.game_ptr, self.handles[t], self._ptrs[t]["action"])

    def step(self) -> bool:
        self.lib.env_step(self.game_ptr, self._done_ref)
        return bool(self._done.value)

    def alive(self, t: int, n: int) -> np.ndarray:
        self.lib.env_get_info(self.game_ptr, self.handles[t], b"alive", self._ptrs[t]["alive"])
        return self._bufs[t]["alive"][:n]

    def reward(self, t: int, n: int) -> np.ndarray:
        self.lib.env_get_reward(self.game_ptr, self.handles[t], self._ptrs[t]["reward"])
        return self._bufs[t]["reward"][:n]

    def observation(self, t: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        self.lib.env_get_observation(self.game_ptr, self.handles[t], self._ptrs[t]["obs"])
        return self._bufs[t]["view"][:n], self._bufs[t]["feature"][:n]

    def views_into_slots(self, t: int, first: int) -> None:
        """Team ``t``'s views written by the engine into ``views_out[first:first + n]`` (the
        caller has checked that the team's ids are ``first, first + 1, ...``); its features go
        to the buffer, as :meth:`observation` leaves them."""
        ptrs = self._into.get((t, first))
        if ptrs is None:
            assert self._views_out is not None
            ptrs = (ctypes.POINTER(ctypes.c_float) * 2)()
            ptrs[0] = ctypes.cast(self._views_out.ctypes.data + first * self._views_out.strides[0],
                                  ctypes.POINTER(ctypes.c_float))
            ptrs[1] = self._ptrs[t]["obs"][1]
            self._into[(t, first)] = ptrs
        self.lib.env_get_observation(self.game_ptr, self.handles[t], ptrs)

    def clear_dead(self) -> None:
        self.lib.gridworld_clear_dead(self.game_ptr)


class _OpponentView:
    """What an ``env.opponents.policy`` script reads of one copy, as the dict path hands it over:
    ``env.env`` the PettingZoo env (its grid, handles, map), every unit's action space."""

    def __init__(self, copy: Any, agents: list[str]):
        self.env = copy
        self.possible_agents = agents

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space(agent)


def make_vector(num_envs: int, seed: int | None = None, **kwargs: Any) -> MAgentVector:
    return MAgentVector(num_envs, seed, **kwargs)


__all__ = ["MAgentVector", "make_vector"]
