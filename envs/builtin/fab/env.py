"""The Gymnasium env over :class:`.sim.FabSim`: one step is one dispatching decision."""
from __future__ import annotations

import difflib

import math
from typing import Any

import gymnasium as gym
import numpy as np

from ...errors import EnvError
from .scenarios import Scenario, build_model, get_scenario
from .sim import RULES, Decision, FabSim, Model

SLOT_FEATURES = ("present", "hot", "super_hot", "wait", "step_time", "remaining", "slack", "critical_ratio",
                 "needs_setup", "batch_fill", "rank_fifo", "rank_spt", "rank_edd", "rank_cr")
RELEASE_LEVELS = (0.8, 1.0, 1.2)
OBJECTIVES = ("tardiness", "cycle_time", "throughput")
# The shift layer's view of the whole fab (:meth:`FabEnv.shift_observation`): per agent tool group,
# then fab-wide.
GROUP_FEATURES = ("queue", "idle", "down", "late_queued")
FAB_FEATURES = ("time", "wip", "late_wip", "released_rate")
ACTIONS = ("slot", "rule")  # what a decision picks: a candidate lot, or the rule that picks it
_MODEL_CACHE: dict = {}


def _objective(objective: str | dict) -> dict[str, float]:
    given = objective
    if isinstance(objective, str):
        objective = {objective: 1.0}
    bad = sorted(set(objective) - set(OBJECTIVES)) if isinstance(objective, dict) else [str(objective)]
    numbers = isinstance(objective, dict) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in objective.values())
    if bad or not objective or not numbers:
        close = difflib.get_close_matches(str(bad[0]).lower(), list(OBJECTIVES), n=1) if bad else []
        raise EnvError(f"fab objective {given!r}: use one of {list(OBJECTIVES)} or a dict of numeric weights over "
                       "them, e.g. {tardiness: 1.0, throughput: 0.5}."
                       + (f" Did you mean {close[0]!r}?" if close else ""))
    return {k: float(objective.get(k, 0.0)) for k in OBJECTIVES}


def _number(name: str, value: Any, low: float, what: str) -> float:
    """An env kwarg that must be a number >= ``low``, refused by name otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
        raise EnvError(f"fab {name}={value!r}: {what}.")
    return float(value)


class FabEnv(gym.Env):
    """See :mod:`hdppo.envs.builtin.fab` (the table of agents, spaces, rewards and arguments)."""

    # The last step's info carries these (the run's figures); hdppo charts them per episode.
    metadata = {"name": "fab_smt2020_v0", "render_modes": [],
                "episode_metrics": ["mean_tardiness_h", "tardy_fraction", "mean_cycle_time_h", "throughput_lots_per_day",
                                    "mean_wip", "late_lot_hours", "max_queue"]}

    def __init__(self, scenario: str | Scenario = "hvlm_mini", days: float | None = None, objective: str | dict = "tardiness",
                 k: int = 8, noise: bool = True, breakdowns: bool = True, default_rule: str = "fifo",
                 agent_groups: str | list[str] = "all", release_control: bool = False, hot_first: bool = True,
                 batch_wait: float = 240.0, reward_scale: float = 0.01, record_every: float = 60.0,
                 data_dir: str | None = None, render_mode: str | None = None, action: str = "slot",
                 crn: bool = False, reference_rule: str | None = None, setup_avoidance: bool = False):
        if action not in ACTIONS:
            raise EnvError(f"fab action={action!r}: use 'slot' (the agent picks one of the K candidate lots) or 'rule' "
                           f"(it picks which of {list(RULES)} chooses the lot).")
        if default_rule not in RULES:
            raise EnvError(f"fab default_rule={default_rule!r}: use one of {list(RULES)}.")
        if reference_rule is not None and (reference_rule not in RULES or not crn):
            raise EnvError(f"fab reference_rule={reference_rule!r}: use one of {list(RULES)}, with crn=True (the "
                           "reference run must see the same breakdowns and process times as the agent's, or the "
                           "difference of their rewards is mostly noise).")
        if not (isinstance(k, int) and k >= 2):
            raise EnvError(f"fab k={k!r}: the number of candidate slots must be an integer >= 2.")
        if render_mode is not None:
            raise EnvError(f"fab render_mode={render_mode!r}: the fab env does not render; leave it None and log the "
                           "infos (wip, queued, late_wip) or use hdppo.envs.builtin.fab.log_history.")
        self.scenario = get_scenario(scenario, days)
        key = (self.scenario, data_dir)
        if key not in _MODEL_CACHE:
            _MODEL_CACHE[key] = build_model(self.scenario, data_dir=data_dir)
        self.model: Model = _MODEL_CACHE[key]
        self.weights = _objective(objective)
        self.k, self.noise, self.breakdowns = k, noise, breakdowns
        self.action = action
        # The choices of one decision: the K candidate slots, or the rules (each always has a pick).
        self.n_choices = k if action == "slot" else len(RULES)
        batch_wait = _number("batch_wait", batch_wait, 0.0, "the minutes a partial batch may wait must be a number >= 0")
        reward_scale = _number("reward_scale", reward_scale, 0.0, "the reward's scale must be a number >= 0")
        record_every = _number("record_every", record_every, 0.0, "the minutes between history() rows must be a "
                               "number >= 0 (0 records none)")
        self.default_rule, self.hot_first, self.batch_wait = default_rule, hot_first, batch_wait
        self.crn, self.reference_rule = bool(crn), reference_rule
        self.setup_avoidance = bool(setup_avoidance)
        self.reference: FabSim | None = None
        self.release_control, self.reward_scale, self.record_every = release_control, reward_scale, record_every
        groups = self.model.data.groups
        used = [int(g) for g in self.model.used_groups if not self.model.delay[g]]
        if agent_groups == "all":
            chosen = used
        else:
            names = [agent_groups] if isinstance(agent_groups, str) else list(agent_groups)
            gidx = {groups[g]: g for g in used}
            bad = [n for n in names if n not in gidx]
            label = scenario if isinstance(scenario, str) else f"{self.scenario.fab} ({self.scenario.days:g} days)"
            if bad or not names:
                raise EnvError(f"fab agent_groups: {bad if bad else 'an empty list'} "
                               f"{'are not tool groups of' if bad else 'leaves no decision to the agent in'} scenario "
                               f"{label!r}'s routes; use 'all' or some of {sorted(gidx)[:12]}"
                               f"{'...' if len(gidx) > 12 else ''}.")
            chosen = [gidx[n] for n in names]
        self.agent_group_ids = np.array(chosen, np.int64)
        self._slot_of_group = -np.ones(len(groups), np.int64)
        self._slot_of_group[self.agent_group_ids] = np.arange(len(chosen))
        self.agent_mask = np.zeros(len(groups), bool)
        self.agent_mask[self.agent_group_ids] = True
        self.n_global = len(chosen) + 8 + (len(RELEASE_LEVELS) if release_control else 0)
        self.obs_dim = self.n_global + k * len(SLOT_FEATURES)
        n_act = self.n_choices + (len(RELEASE_LEVELS) if release_control else 0)
        self.observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Box(-10.0, 10.0, (self.obs_dim,), np.float32),
            "action_mask": gym.spaces.Box(0, 1, (n_act,), np.int8)})
        self.action_space = (gym.spaces.MultiDiscrete([self.n_choices, len(RELEASE_LEVELS)]) if release_control
                             else gym.spaces.Discrete(self.n_choices))
        self.sim: FabSim | None = None
        self.decision: Decision | None = None
        self.slots = np.zeros(0, np.int64)
        self.slot_ranks = np.zeros((k, len(RULES)), np.float32)
        self.release_level = 1
        self._wip_ref = max(len(self.model.wip), 1)

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        sim_seed = int(self.np_random.integers(2 ** 31))
        self._seeds = (seed, sim_seed)
        self.sim = FabSim(self.model, seed=sim_seed, noise=self.noise, breakdowns=self.breakdowns,
                          default_rule=self.default_rule, agent_groups=self.agent_mask, hot_first=self.hot_first,
                          batch_wait=self.batch_wait, record_every=self.record_every, crn=self.crn,
                          setup_avoidance=self.setup_avoidance)
        if self.reference_rule is not None:   # the same seed under one rule, kept at the agent's clock
            self.reference = FabSim(self.model, seed=sim_seed, noise=self.noise, breakdowns=self.breakdowns,
                                    default_rule=self.reference_rule, hot_first=self.hot_first,
                                    batch_wait=self.batch_wait, record_every=math.inf, crn=True,
                                    setup_avoidance=self.setup_avoidance)
        self.release_level = 1
        self._max_queue = 0
        self._last = self._totals()
        self._last_ref = self._totals(self.reference) if self.reference is not None else None
        self.decision = self.sim.advance()
        obs = self._observe()
        return obs, self._info(None)

    def step(self, action):
        if self.sim is None:
            raise EnvError("fab: step() before reset(); call reset() first.")
        a = np.asarray(action).reshape(-1)
        slot = int(a[0])
        if self.action == "rule" and self.decision is not None and len(self.slots):
            rule = int(np.clip(slot, 0, len(RULES) - 1))
            slot = int(np.argmin(self.slot_ranks[:len(self.slots), rule]))
        chosen_ranks = np.zeros(len(RULES), np.float32)
        if self.release_control:
            self.release_level = int(np.clip(a[1], 0, len(RELEASE_LEVELS) - 1))
            self.sim.rate = RELEASE_LEVELS[self.release_level]
        if self.decision is not None:
            if not (0 <= slot < len(self.slots)):
                slot = 0   # an illegal slot (masked out) falls back to the first candidate
            chosen_ranks = self.slot_ranks[slot].copy()
            self.sim.dispatch(self.decision.group, int(self.slots[slot]), self.default_rule)
            self.decision = self.sim.advance()
        now = self._totals()
        d = now - self._last
        self._last = now
        if self.reference is not None:
            # Reward relative to the reference rule on the same seed over the same simulated time:
            # a control variate (with common random numbers the two runs share the seed's luck,
            # so the difference is mostly the agent's doing); over an episode the reference's part
            # sums to a constant of the seed.
            self.reference.advance(until=self.sim.now if self.decision is not None else None)
            ref = self._totals(self.reference)
            d = d - (ref - self._last_ref)
            self._last_ref = ref
        w = self.weights
        reward = self.reward_scale * (-w["tardiness"] * d[0] / 60.0 - w["cycle_time"] * d[1] / 60.0) + w["throughput"] * d[2]
        terminated = self.decision is None
        obs = self._observe()
        info = self._info(chosen_ranks)
        if terminated:
            summary = self.sim.summary()
            # The timeline rides along: the copy resets at once, so an evaluation reads it here
            # (benchmarks/fab.py --tb writes a trained run's as a rule's).
            info["episode"] = dict(summary, env_seed=self._seeds[0], sim_seed=self._seeds[1], history=self.history())
            info.update({k: summary[k] for k in self.metadata["episode_metrics"] if k in summary and summary[k] == summary[k]})
            info["max_queue"] = self._max_queue
        return obs, float(reward), terminated, False, info

    # ------------------------------------------------------------------ views
    def _totals(self, sim: FabSim | None = None) -> np.ndarray:
        st = (sim if sim is not None else self.sim).stats  # type: ignore[union-attr]
        return np.array([st.late_area, st.wip_area, st.completed], np.float64)

    def _observe(self) -> dict[str, np.ndarray]:
        k, F = self.k, len(SLOT_FEATURES)
        obs = np.zeros(self.obs_dim, np.float32)
        c = self.n_choices
        mask = np.zeros(c + (len(RELEASE_LEVELS) if self.release_control else 0), np.int8)
        if self.release_control:
            mask[c:] = 1
        sim, dec = self.sim, self.decision
        if dec is None:
            mask[0] = 1
            self.slots = np.zeros(0, np.int64)
            return {"observation": obs, "action_mask": mask}
        g = dec.group
        m = self.model
        lots = dec.lots
        keys = sim.keys(lots)
        orders = {r: sim.order(lots, keys[r], g) for r in RULES}
        chosen: list[int] = []
        seen: set[int] = set()
        depth = 0
        while len(chosen) < min(k, len(lots)):
            for r in RULES:
                if depth < len(lots):
                    lot = int(orders[r][depth])
                    if lot not in seen and len(chosen) < k:
                        seen.add(lot)
                        chosen.append(lot)
            depth += 1
        slots = np.array(chosen, np.int64)
        self.slots = slots
        n = len(slots)
        mask[:n if self.action == "slot" else c] = 1
        # Global part.
        G = len(self.agent_group_ids)
        obs[self._slot_of_group[g]] = 1.0
        nt = max(sim.n_tools[g], 1)
        horizon = m.horizon
        obs[G:G + 8] = [sim.now / horizon, sim.n_wip / self._wip_ref, min(len(sim.queues[g]) / 50.0, 5.0),
                        len(sim.idle_tools[g]) / nt, sim.down_g[g] / nt,
                        float(m.data.batching[g]), sim.n_late / max(sim.n_wip, 1), min(len(lots) / 20.0, 5.0)]
        if self.release_control:
            obs[G + 8 + self.release_level] = 1.0
        # Slots.
        pos = {int(l): i for i, l in enumerate(lots)}
        idx = np.array([pos[int(l)] for l in slots])
        rank = np.zeros((len(lots), len(RULES)), np.float32)
        for j, r in enumerate(RULES):
            rank[[pos[int(l)] for l in orders[r]], j] = np.arange(len(lots)) / max(len(lots) - 1, 1)
        self.slot_ranks = np.zeros((k, len(RULES)), np.float32)
        self.slot_ranks[:n] = rank[idx]
        rem = sim.rem[slots]
        to_due = sim.due[slots] - sim.now
        fill = np.zeros(n)
        if m.data.batching[g]:
            q = np.asarray(sim.queues[g], np.int64)
            for i, lot in enumerate(slots.tolist()):
                bmax = m.L[sim.part[lot]]["bmax"][sim.step[lot]]
                if bmax > 0:
                    fam = q[sim.fam[q] == sim.fam[lot]].tolist()
                    fill[i] = min(sum(sim.pieces[f] for f in fam) / bmax, 1.0)
        feats = np.stack([
            np.ones(n), (sim.prio[slots] >= 20).astype(float), (sim.prio[slots] >= 30).astype(float),
            np.log1p((sim.now - sim.arrive[slots]) / 60.0) / 3.0, np.minimum(sim.spt[slots] / 600.0, 5.0),
            rem / 1440.0 / 10.0, np.clip((to_due - rem) / 1440.0 / 3.0, -3, 3),
            np.clip(to_due / np.maximum(rem, 1.0), -2.0, 5.0) / 5.0, sim.needs_setup(g, slots).astype(float), fill,
            *self.slot_ranks[:n].T], 1)
        body = np.zeros((k, F), np.float32)
        body[:n] = feats
        obs[self.n_global:] = np.clip(body.reshape(-1), -10, 10)
        return {"observation": obs, "action_mask": mask}

    def _info(self, chosen_ranks: np.ndarray | None) -> dict[str, Any]:
        sim = self.sim
        st = sim.stats  # type: ignore[union-attr]
        g = self.decision.group if self.decision is not None else -1
        if g >= 0:
            self._max_queue = max(self._max_queue, len(sim.queues[g]))
        return {"sim_time_h": sim.now / 60.0, "wip": sim.n_wip, "queued": sim.n_queued,
                "late_wip": sim.n_late, "tools_down": sim.n_down, "completed": st.completed,
                "mean_tardiness_h": st.tardiness_sum / max(st.completed, 1) / 60.0,
                "group": self.model.data.groups[g] if g >= 0 else "", "group_queue": len(sim.queues[g]) if g >= 0 else 0,
                "group_slot": int(self._slot_of_group[g]) if g >= 0 else -1,
                "release_level": self.release_level,
                "chosen_ranks": chosen_ranks if chosen_ranks is not None else np.zeros(len(RULES), np.float32)}

    # ------------------------------------------------------------------ scripted dispatching
    def rule_action(self, rule: str) -> int | np.ndarray:
        """The action by which ``rule`` decides now: its slot (each rule's first choice is always
        among the slots), or with ``action='rule'`` the rule's index."""
        if rule not in RULES:
            raise EnvError(f"fab rule {rule!r}: use one of {list(RULES)}.")
        if self.action == "rule":
            slot = RULES.index(rule)
        elif self.decision is None or not len(self.slots):
            slot = 0
        else:
            slot = int(np.argmin(self.slot_ranks[:len(self.slots), RULES.index(rule)]))
        return np.array([slot, 1]) if self.release_control else slot

    def state(self) -> np.ndarray:
        return self._observe()["observation"]

    def shift_observation(self) -> np.ndarray:
        """The whole fab as a shift layer reads it, ``[G * 4 + 4 + 3]``: for each agent tool group its
        queue (lots / 50), idle and down tool fractions and the late share of its queue; then
        time / horizon, WIP / initial WIP, the late share of the WIP, the release level (its
        factor) and the release level one-hot. The per-decision observation shows one group only;
        a command per tool group needs every group's queue."""
        sim, G = self.sim, len(self.agent_group_ids)
        out = np.zeros(G * len(GROUP_FEATURES) + len(FAB_FEATURES) + len(RELEASE_LEVELS), np.float32)
        if sim is None:
            return out
        per = out[:G * len(GROUP_FEATURES)].reshape(G, len(GROUP_FEATURES))
        for i, g in enumerate(self.agent_group_ids.tolist()):
            q = sim.queues[g]
            nt = max(sim.n_tools[g], 1)
            late = float(np.count_nonzero(sim.due[np.asarray(q, np.int64)] < sim.now)) / len(q) if q else 0.0
            per[i] = (min(len(q) / 50.0, 5.0), len(sim.idle_tools[g]) / nt, sim.down_g[g] / nt, late)
        f = G * len(GROUP_FEATURES)
        out[f:f + len(FAB_FEATURES)] = (sim.now / self.model.horizon, sim.n_wip / self._wip_ref,
                                        sim.n_late / max(sim.n_wip, 1), RELEASE_LEVELS[self.release_level])
        out[f + len(FAB_FEATURES) + self.release_level] = 1.0
        return out

    def history(self) -> np.ndarray:
        """``[T, 7]``: every ``record_every`` minutes: time (min), WIP, queued lots, late WIP, tools down,
        completed lots, mean tardiness of the completed lots (h)."""
        return np.asarray(self.sim.stats.history if self.sim else [], np.float64).reshape(-1, 7)
