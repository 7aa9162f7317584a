"""The sampler: every run, flat or hierarchical, single- or multi-agent, steps through here.

Each layer acts for *lanes*: the bottom layer for agent slots of the env, a layer above for its
squads (or for all agents). Everything is an array ``[copies N, lanes L, ...]`` with masks:

- each env step, top layer first, the lanes that are due (bottom: agents that act now; above:
  copies whose episode time is a multiple of the layer's ``every``, squads with a live member)
  build their inputs (env view + the parent lane's command + agent id) in one gather, and one
  batched forward pass per layer picks their actions. The bottom layer's go to the env; the
  others become the commands of the lanes below;
- a recorded layer writes each decision into row ``t`` of its buffers ``[T, N, L, ...]``; the
  transition stays open, collecting reward (the env's, summed over the lane's agents, plus an
  optional command-following reward), until the lane decides again or its episode ends. With
  ``discount: smdp`` it accumulates sum_k gamma^k r_k and discounts by gamma^steps;
- the critic runs once per stretch of rows acted with one weights version, batched, and GAE runs
  backwards over the rows with one vectorised step per env step.

A transition still open at the end of a rollout stays open into the next one (its reward is not
cut in two), except where the lane decides on the very next step and its layer takes no
command: then it closes now, bootstrapped from V(next observation), as a flat PPO rollout does.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..envs.errors import ConfigError, EnvError, user_code
from ..envs.rewards import RewardFn, missing_info_keys
from ..envs.teachers import is_vectorized_teacher
from ..envs.vector import InfoRows, VecObs, VecStep, VectorMultiAgentEnv, env_actions, episode_info_values
from .intrinsic import resolve, reward_field
from .spec import LayerSpec
from ..platform.array_pool import ArrayPool, reusable
from ..platform.batch import ID_COLUMNS, Batch
from ..policies.gae import decision_gae
from ..policies.networks import ActorCritic
from ..policies.normalizers import ObservationNormalizer, RewardScaler

# Ended episodes after which an episode metric the env declares but never reported is pointed out.
_EPISODE_KEYS_WITHIN = 8

# Layers with a plain MLP critic (no central critic, no conv) whose inputs are at least this wide
# get their values from the critic beside the actor, in numpy, while the step's inputs are still in cache, instead of in one
# pass over the rollout at flush_values (battle_v4: 845 values a row, a rollout of 40 MB read back
# from memory). Narrow inputs (Hopper's 11) keep the batched pass: there a second forward pass
# every step costs more in calls than it saves.
VALUES_AT_ACT_MIN_WIDTH = 256

# At or above this share of decided rows, flush_values runs the critic on every row of the block
# rather than gathering the decided ones: a gathered row is a copy of its observation, and where
# rows are wide (845 values) the copy costs about two thirds of the row's critic pass.
DENSE_VALUE_SHARE = 0.8

# A recorded layer whose inputs are at least this wide, with at least this share of its lanes due
# but not all, acts on every row (see Sampler.step): on battle_v4, where 57% of steps have an agent
# dead in one of 8 copies and 99% of lanes are due on average, the gather and scatter of the due
# rows cost more than acting on the 1% more.
DENSE_ACT_MIN_WIDTH = 256
DENSE_ACT_SHARE = 0.75

# How an intrinsic reward is called, for the error that names it (reward_fn's contract: envs/rewards.py).
_REWARD_CALL = (" It is called for one lane with keyword arguments command, obs, next_obs (float32 arrays), action "
                "(the layer's action as a float array: one entry for Discrete, one per entry of MultiDiscrete or Box) "
                "and info (the agent's info dict; a dict per member for an upper layer).")
_VECTORIZED_REWARD_CALL = (" It is vectorised (reward_fn(vectorized=True)): called with keyword arguments command, "
                           "obs, next_obs and action, each an array with a row per lane, and info (InfoRows).")


@dataclass
class Track:
    """How a recorded layer turns rewards into returns."""

    gamma: float
    lam: float
    smdp: bool
    scaler: RewardScaler


@dataclass
class Harvest:
    """One layer's part of a rollout."""

    batch: Batch
    env_reward: float = 0.0        # sums over the batch's transitions
    intrinsic_reward: float = 0.0
    bonus: float = 0.0
    command_counts: list[int] | None = None


class _Plan:
    """Index arrays of one layer over the env's agent slots."""

    def __init__(self, spec: LayerSpec, agents: list[str], specs: list[LayerSpec]):
        self.spec = spec
        self.name = spec.name
        self.bottom = spec.bottom
        A = len(agents)
        slot = {a: k for k, a in enumerate(agents)}
        if spec.bottom:
            lanes = list(spec.members) if spec.members else list(agents)
            self.lanes = lanes
            self.lane_slots = np.array([slot[a] for a in lanes], np.int64)
            members = [[slot[a]] for a in lanes]
            self.fixed = np.ones(len(lanes), bool)
        else:
            self.lanes = list(spec.lanes)  # type: ignore[arg-type]
            members = [[slot[a] for a in spec.members[lane]] if spec.members[lane] is not None else list(range(A))
                       for lane in self.lanes]
            self.fixed = np.array([spec.members[lane] is not None for lane in self.lanes])
            self.lane_slots = None
        self.L = len(self.lanes)
        self.all_slots = spec.bottom and self.lane_slots.tolist() == list(range(A))  # type: ignore[union-attr]
        self.membership = np.zeros((A, self.L), np.float64)  # [A, L]: 1 where slot a is in lane l
        for lane, ms in enumerate(members):
            self.membership[ms, lane] = 1.0
        self.gather = np.array(members, np.int64) if len({len(m) for m in members}) == 1 else None
        self.members = members
        self.parent: int | None = None
        self.parent_of: np.ndarray | None = None
        # The command from above: in the policy's input where the layer observes it, and given to
        # a command-following reward either way (a layer may be paid for a command it does not see).
        self.sees_command = bool(spec.command_in)
        if spec.index > 0 and (spec.command_in or spec.cfg.reward.intrinsic_fn):
            upper = specs[spec.index - 1]
            up_members = [set(range(A)) if upper.members[lane] is None else {slot[a] for a in upper.members[lane]}
                          for lane in upper.lanes]  # type: ignore[union-attr]
            self.parent = spec.index - 1
            self.parent_of = np.array([next(k for k, um in enumerate(up_members) if set(ms) <= um) for ms in members])
        self.ids = (np.eye(len(spec.agent_ids), dtype=np.float32)[
            [spec.agent_ids.index(a) for a in self.lanes]] if spec.agent_ids else None)
        self.intrinsic: Callable[..., Any] | None = None
        self.vectorized = False
        self.reward_fn: RewardFn | None = None
        self.info_checked = True   # False until the env's first info is checked for the reward's info keys
        if spec.cfg.reward.intrinsic_fn:
            fn = resolve(spec.cfg.reward.intrinsic_fn, reward_field(spec.index, spec.name))
            self.intrinsic = getattr(fn, "fn", fn)
            self.vectorized = bool(getattr(fn, "vectorized", False))
            self.reward_fn = fn
            self.info_checked = not fn.info_keys
            if self.gather is None:
                raise EnvError(f"layer {spec.name!r}: reward.intrinsic_fn on squads of different sizes; the reward "
                               "receives the squad's observations side by side, so its squads must be equal.")

    def member_obs(self, obs: np.ndarray) -> np.ndarray:
        """The lanes' agents' flat env observations side by side ``[N, L, m * D]``."""
        if self.bottom:
            return obs[:, self.lane_slots]
        return obs[:, self.gather].reshape(obs.shape[0], self.L, -1)


class _Buffers:
    """A recorded layer's rows ``[T, N, L]``; row 0 holds transitions carried over from the last rollout."""

    FIELDS = ("value", "logp", "R", "rew", "gam", "env_r", "int_r", "bonus", "steps")
    FLAGS = ("decided", "closed", "end", "term", "stop", "first")

    def __init__(self, cap: int, N: int, L: int, obs_dim: int, act_dim: int, mask_dim: int, critic_dim: int,
                 hidden_dim: int = 0, teacher_dim: int = 0):
        self.N, self.L = N, L
        self.dims = {"obs": obs_dim, "act": act_dim, "mask": mask_dim, "critic": critic_dim, "hidden": hidden_dim,
                     "teacher": teacher_dim}
        self.cap = 0
        self._grow(cap)
        self.open_row = np.full((N, L), -1, np.int64)
        self.dense_row = -1   # >= 0: every lane is open, at this row (so indexing needs no masks)
        self.decided_n = 0    # decisions in this rollout (the carried-over row 0 excluded)
        self.disc = np.ones((N, L))
        self.boot_rows: list[np.ndarray] = []   # [k, 3] (t, n, l) of closed rows bootstrapped from a view
        self.boot_obs: list[np.ndarray] = []
        self.boot_critic: list[np.ndarray] = []
        self.boot_value: list[np.ndarray | None] = []
        self.boot_hidden: list[np.ndarray | None] = []  # a recurrent policy's hidden at each bootstrap view
        self.value_from = 1   # rows before this have their values
        self.values_at_act = False  # the critic runs beside the actor, not at flush_values (see VALUES_AT_ACT_MIN_WIDTH)
        self.reuse = ArrayPool()  # per field: harvest destinations (see gather)

    def gather(self, field: str, T: int, sel: np.ndarray) -> np.ndarray:
        """``getattr(self, field)[:T][sel]``: the rows ``sel [T, N, L]`` of a field, in the order a
        boolean index takes them, as ``[k, dim]``. A wide field goes into an array of :attr:`reuse`
        (``platform.array_pool``: kept from an earlier harvest once nothing outside holds it, a
        batch handed to a learner in this process or being serialised by Ray holding a view of it),
        which saves the page faults of a new one."""
        src = getattr(self, field)[:T]
        dim = src.shape[-1]
        if dim == 0 or not reusable(src.nbytes):
            return src[sel]
        idx = np.flatnonzero(sel)
        dest = self.reuse.take(field, len(idx), (dim,), src.dtype, capacity=self.cap * self.N * self.L)
        # mode="clip": with the default ("raise") numpy writes into a buffer and copies it to out
        return np.take(src.reshape(-1, dim), idx, axis=0, out=dest, mode="clip")

    def _alloc(self, T: int) -> dict[str, np.ndarray]:
        N, L, d = self.N, self.L, self.dims
        out = {k: np.zeros((T, N, L, d[k]), np.float32) for k in ("obs", "act", "mask", "critic", "hidden", "teacher")}
        out |= {k: np.zeros((T, N, L), np.float64 if k in ("R", "gam", "env_r", "int_r", "bonus", "steps") else np.float32)
                for k in self.FIELDS}
        out |= {k: np.zeros((T, N, L), bool) for k in self.FLAGS}
        out["version"] = np.zeros((T, N, L), np.int64)
        out["at_step"] = np.zeros((T, N, L), np.int64)  # the copy's env step at which the row was decided
        return out

    def _grow(self, cap: int) -> None:
        new = self._alloc(cap)
        if self.cap:
            for k, v in new.items():
                v[: self.cap] = self.arrays[k]
        self.arrays, self.cap = new, cap
        for k, v in new.items():
            setattr(self, k, v)

    def at(self, mask: np.ndarray) -> tuple[tuple, Callable[[np.ndarray], np.ndarray]]:
        """Index of the open rows of the lanes in ``mask`` into ``[T, N, L]`` arrays, and how to
        pick those lanes' entries of an ``[N, L]`` array. When every lane is open at one row (a
        flat run, every step) that is a plain row index: no fancy indexing on the hot path."""
        if self.dense_row >= 0 and mask.all():
            return (self.dense_row,), _same
        n, lane = np.nonzero(mask)
        return (self.open_row[mask], n, lane), (lambda a: a[mask])

    def ensure(self, t: int) -> None:
        if t >= self.cap:
            self._grow(max(2 * self.cap, t + 1))

    def carry_over(self) -> None:
        """Start a new rollout: open transitions move to row 0, everything else is forgotten."""
        open_ = self.open_row >= 0
        n, lane = np.nonzero(open_)
        rows = self.open_row[open_]
        kept = {k: v[rows, n, lane].copy() for k, v in self.arrays.items()}
        for k, v in self.arrays.items():
            if k in self.FIELDS or k in self.FLAGS:
                v[:] = 0  # rows >= 1 are written anew; their accumulators and flags must start clean
            else:
                v[0] = 0
        for k, v in self.arrays.items():
            v[0, n, lane] = kept[k]
        self.open_row[open_] = 0
        self.dense_row = 0 if open_.all() else -1
        self.decided_n = 0
        self.boot_rows, self.boot_obs, self.boot_critic, self.boot_value = [], [], [], []
        self.boot_hidden = []
        self.value_from = 1


def _same(a: np.ndarray) -> np.ndarray:
    return a


def command_vectors(spec: LayerSpec, actions: np.ndarray) -> np.ndarray:
    """A layer's actions ``[B, dim]`` as the layer below receives them ``[B, C]``: one-hot(s), or the clipped goal."""
    a = spec.cfg.action
    if a.type == "box":
        return np.clip(actions, a.low, a.high).astype(np.float32)
    nvec = [a.n] if a.type == "discrete" else a.nvec
    parts = [_eye(n)[actions[:, k].astype(np.int64)] for k, n in enumerate(nvec)]  # type: ignore[union-attr, arg-type]
    return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]


@functools.lru_cache(maxsize=None)
def _eye(n: int) -> np.ndarray:
    """One-hot rows of width ``n``, built once: an upper layer indexes them every step it acts."""
    out = np.eye(n, dtype=np.float32)
    out.flags.writeable = False  # shared: fancy indexing copies, so no caller can write into it
    return out


class Sampler:
    """Steps ``venv`` with every layer's policy; records the layers in ``tracks``."""

    def __init__(self, specs: list[LayerSpec], venv: VectorMultiAgentEnv, policies: dict[str, ActorCritic],
                 obs_norms: dict[str, ObservationNormalizer], tracks: dict[str, Track] | None = None,
                 deterministic: bool = False, bonus: Callable[[str, np.ndarray], np.ndarray] | None = None,
                 seed: int | None = 0, first: VecObs | None = None, episode_metrics: Sequence[str] | None = None,
                 scripted: Sequence[str] = ()):
        self.specs, self.venv = specs, venv
        # Layers that act by their teacher (``teacher.policy``) instead of their policy: an
        # evaluation that asks how the other layers do with the scripted skill beneath them, or
        # training over it (``schedule.mode: scripted``).
        self.scripted = frozenset(scripted)
        with_teacher = {s.name for s in specs if s.teacher_fn is not None}
        for name in self.scripted - with_teacher:
            known = {s.name for s in specs}
            raise ConfigError(f"scripted layer {name!r}: " + (
                f"the config has no such layer (its layers: {', '.join(s.name for s in specs)})." if name not in known
                else "it has no teacher.policy to act with. Give the layer a `teacher: {policy: module:function}` "
                     "in the config, or leave it out of the scripted layers."))
        if self.scripted & set(tracks or {}):  # their samples would pair the teacher's action with the policy's log-prob
            raise ConfigError(f"scripted layers {sorted(self.scripted & set(tracks or {}))} cannot also be trained; "
                              "a scripted layer acts by its teacher and is not trained.")
        # Info keys recorded per ended episode (None: the env's own declaration), drained by
        # take_episode_infos() with each rollout.
        self.episode_keys = tuple(getattr(venv, "episode_metrics", ()) if episode_metrics is None else episode_metrics)
        self._keys_seen: set[str] = set()
        self._episodes_seen = 0
        self._keys_warned = False
        self.episode_infos: dict[str, list[float]] = {}
        self.policies, self.obs_norms = policies, obs_norms
        self.tracks = tracks or {}
        self.deterministic = deterministic
        self.bonus = bonus
        self.version: dict[str, int] = {s.name: 0 for s in specs}
        self.N = venv.num_envs
        self.plans = [_Plan(s, venv.agents, specs) for s in specs]
        self.now = first if first is not None else venv.reset(seed=seed)
        self.ep_t = np.zeros(self.N, np.int64)
        A = len(venv.agents)
        self.agent_ended = np.zeros((self.N, A), bool)
        self.agent_trunc = np.zeros((self.N, A), bool)
        self.commands = {p.name: np.zeros((self.N, p.L, s.cfg.action.command_dim()), np.float32)
                         for p, s in zip(self.plans, specs) if not p.bottom}
        self.last_action = {p.name: np.zeros((self.N, p.L, policies[p.name].head.dim), np.float32) for p in self.plans}
        bottom = specs[-1]
        self.env_act = env_actions(bottom.action_space, self.N * A).reshape((self.N, A, *bottom.action_space.shape))  # type: ignore[union-attr]
        self.buffers: dict[str, _Buffers] = {}
        # A recurrent policy's hidden state per (copy, lane), as its next decision receives it, and
        # whether it was reset since the lane's last decision (stored with the step: Batch.first).
        self.hidden: dict[str, np.ndarray] = {}
        self.fresh: dict[str, np.ndarray] = {}
        for p, s in zip(self.plans, specs):
            if getattr(policies[s.name], "recurrent", False):
                self.hidden[s.name] = np.zeros((self.N, p.L, policies[s.name].hidden_dim), np.float32)
                self.fresh[s.name] = np.ones((self.N, p.L), bool)
        for p, s in zip(self.plans, specs):
            if s.name in self.tracks:
                dim = policies[s.name].head.dim
                self.buffers[s.name] = _Buffers(64, self.N, p.L, s.obs_dim, dim, s.mask_dim,
                                                s.critic_dim or 0,
                                                self.hidden[s.name].shape[-1] if s.name in self.hidden else 0,
                                                dim if s.teacher_fn is not None else 0)
                self.buffers[s.name].values_at_act = (s.name not in self.hidden and not s.critic_dim
                                                      and s.obs_dim >= VALUES_AT_ACT_MIN_WIDTH
                                                      and policies[s.name].numpy_critic())
        # How often each command was chosen (charts/commands): per choice of a discrete command, per
        # choice of each component of a multidiscrete one (its one-hots side by side).
        self.command_counts = {s.name: np.zeros(s.cfg.action.command_dim(), np.int64) for s in specs
                               if not s.bottom and s.cfg.action.type in ("discrete", "multidiscrete")}
        self.env_steps = 0
        # Sample ids (Batch.ids): this sampler's worker incarnation, the number of its first copy,
        # and the env steps each copy has taken (every copy steps together).
        self.source = 0
        self.copy_base = 0
        self.copy_steps = 0
        self.t = 1
        if hasattr(venv, "keep_raw"):  # raw observation dicts cost a dict update per copy and step
            venv.keep_raw = any(s.obs_fn is not None or (s.teacher_fn is not None and not is_vectorized_teacher(s.teacher_fn)
                                                         and (s.name in self.tracks or s.name in self.scripted))
                                 for s in specs)

    # -- inputs ----------------------------------------------------------------------------------
    def _env_part(self, p: _Plan, obs: np.ndarray, state: np.ndarray | None, due: np.ndarray,
                  raw: Callable[[int], dict] | None = None) -> np.ndarray:
        """The env part of every lane's input ``[N, L, De]`` (a ``module:function`` view only for ``due`` lanes)."""
        spec = p.spec
        src = spec.cfg.observation.source
        if src == "env":
            if p.bottom:
                return obs if p.all_slots else obs[:, p.lane_slots]
            if p.gather is None:
                raise EnvError(f"layer {spec.name!r}: squads of different sizes cannot share an 'env' observation.")
            return obs[:, p.gather].reshape(self.N, p.L, -1)
        if src == "state":
            return np.broadcast_to(state[:, None, :], (self.N, p.L, state.shape[-1]))  # type: ignore[index]
        width = spec.obs_dim - spec.command_in - len(spec.agent_ids)
        out = np.zeros((self.N, p.L, width), np.float32)
        raw = raw or self.venv.raw_obs
        with user_code(f"layers[{spec.index}] ({spec.name}).observation.source", str(src),
                       " It is called as view(raw_obs, members, env) for each due lane."):
            for n, lane in zip(*np.nonzero(due)):
                members = [self.venv.agents[k] for k in p.members[lane]]
                view = np.asarray(spec.obs_fn(raw(int(n)), members, self.venv.copy_env(int(n))),  # type: ignore[misc]
                                  np.float32).reshape(-1)
                if view.size != width:  # e.g. a finished agent's part left out: not the function crashing
                    raise EnvError(
                        f"layers[{spec.index}] ({spec.name}).observation.source {str(src)!r} returned {view.size} "
                        f"numbers for lane {p.lanes[lane]!r} of copy {n}, but {width} on its first call, which fixed "
                        "the layer's input size. A view must return one size on every call: `members` lists every "
                        "agent of the lane, finished ones included, while env_obs holds only those still in the "
                        "episode; give a missing agent's part zeros (env_obs.get(agent)) instead of leaving it out.")
                out[n, lane] = view
            if not math.isfinite(float(out.sum(dtype=np.float64))):  # a NaN would reach env.step as an action
                n, lane = (int(i[0]) for i in np.nonzero(~np.isfinite(out).all(axis=-1)))
                raise ValueError(f"it returned a non-finite value (nan or inf) for lane {p.lanes[lane]!r} of copy {n}; "
                                 "a view must return finite numbers")
        return out

    def _teacher(self, p: _Plan, due: np.ndarray, dim: int) -> np.ndarray:
        """The teacher's action ``[k, dim]`` for each due lane, in ``np.nonzero(due)`` order (the
        order the lanes' decisions are stored in): ``teacher(raw_obs, members, env, **kwargs)``."""
        fn, kwargs = p.spec.teacher_fn, p.spec.cfg.teacher.kwargs  # type: ignore[union-attr]
        n_idx, l_idx = np.nonzero(due)
        if is_vectorized_teacher(fn):  # type: ignore[arg-type]
            cmd = self._command_in(p)
            with user_code(f"layers[{p.spec.index}] ({p.name}).teacher.policy", str(p.spec.cfg.teacher.policy)):  # type: ignore[union-attr]
                value = fn(env=self.venv, copies=n_idx, members=[p.members[lane] for lane in l_idx],  # type: ignore[misc]
                           command=None if cmd is None else cmd[n_idx, l_idx], **kwargs)
            a = self._teacher_array(p, value, " (vectorised)", "")
            if a.size != len(n_idx) * dim:
                raise EnvError(f"layer {p.name!r}, teacher.policy: {p.spec.cfg.teacher.policy} (vectorised) returned "  # type: ignore[union-attr]
                               f"{a.shape} for {len(n_idx)} lanes; it must return one row per lane of {dim} value(s) "
                               "(one index for Discrete, one per entry of MultiDiscrete or Box).")
            return self._teacher_checked(p, a.reshape(len(n_idx), dim), l_idx, " (vectorised)")
        out = np.zeros((len(n_idx), dim), np.float32)
        with user_code(f"layers[{p.spec.index}] ({p.name}).teacher.policy", str(p.spec.cfg.teacher.policy),  # type: ignore[union-attr]
                       " It is called as teacher(raw_obs, members, env, **kwargs) for each due lane."):
            for k, (n, lane) in enumerate(zip(n_idx, l_idx)):
                members = [self.venv.agents[a] for a in p.members[lane]]
                a = self._teacher_array(p, fn(self.venv.raw_obs(int(n)), members, self.venv.copy_env(int(n)), **kwargs),  # type: ignore[misc]
                                        "", f" for lane {p.lanes[lane]!r}").reshape(-1)
                if a.size != dim:
                    raise EnvError(f"layer {p.name!r}, teacher.policy: {p.spec.cfg.teacher.policy} returned {a.size} "  # type: ignore[union-attr]
                                   f"value(s) for lane {p.lanes[lane]!r}; the layer's actions have {dim} (one index "
                                   "for Discrete, one per entry of MultiDiscrete or Box).")
                out[k] = a
        return self._teacher_checked(p, out, l_idx, "")

    def _teacher_array(self, p: _Plan, value: Any, where: str, lane: str) -> np.ndarray:
        """A teacher's return value as float32, or an EnvError naming what it returned."""
        try:
            if value is None:
                raise TypeError
            return np.asarray(value, np.float32)
        except (TypeError, ValueError):
            raise EnvError(f"layer {p.name!r}, teacher.policy: {p.spec.cfg.teacher.policy}{where} returned {value!r}"  # type: ignore[union-attr]
                           f"{lane}, not numbers; it must return {self._teacher_range(p)}. Fix the teacher.") from None

    def _teacher_range(self, p: _Plan) -> str:
        head = self.policies[p.name].head
        if head.kind == "box":
            return f"finite values for the layer's Box({head.dim}) action"
        ranges = ", ".join(f"[{int(s)}, {int(s) + n - 1}]" for s, n in zip(head.start, head.nvec))
        return f"integer actions in {ranges} (the layer's action space {p.spec.action_space})"

    def _teacher_checked(self, p: _Plan, a: np.ndarray, lanes: np.ndarray, where: str) -> np.ndarray:
        """The teacher's actions ``[k, dim]`` checked against the layer's action space (one
        vectorised test), as the policy's actions: Discrete/MultiDiscrete indices less ``start``."""
        head = self.policies[p.name].head
        if head.kind == "box":
            bad = ~np.isfinite(a)
        else:
            start = head.start.astype(np.float32)
            bad = ~np.isfinite(a) | (a != np.round(a)) | (a < start) | (a >= start + np.asarray(head.nvec, np.float32))
        if bad.any():
            row = int(np.nonzero(bad.any(axis=1))[0][0])
            vals = [f"{v:g}" for v in a[row]]
            shown = vals[0] if len(vals) == 1 else f"[{', '.join(vals)}]"
            raise EnvError(f"layer {p.name!r}, teacher.policy: {p.spec.cfg.teacher.policy}{where} returned {shown} "  # type: ignore[union-attr]
                           f"for lane {p.lanes[lanes[row]]!r}; "  # type: ignore[union-attr]
                           f"it must return {self._teacher_range(p)}. Fix the teacher.")
        return a if head.kind == "box" else a - head.start.astype(np.float32)

    def _command_in(self, p: _Plan) -> np.ndarray | None:
        if p.parent is None:
            return None
        return self.commands[self.plans[p.parent].name][:, p.parent_of]

    def _inputs(self, p: _Plan, obs: np.ndarray, state: np.ndarray | None, due: np.ndarray,
                raw: Callable[[int], dict] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(policy input ``[N, L, D]``, critic input ``[N, L, C]`` or None)."""
        parts = [self._env_part(p, obs, state, due, raw)]
        cmd = self._command_in(p) if p.sees_command else None
        if cmd is not None:
            parts.append(cmd)
        if p.ids is not None:
            parts.append(np.broadcast_to(p.ids, (self.N, p.L, p.ids.shape[1])))
        # One part may be a read-only broadcast (a state shared by the lanes): torch wants a real array.
        x = np.concatenate(parts, axis=-1, dtype=np.float32) if len(parts) > 1 else np.ascontiguousarray(parts[0], np.float32)
        if x.shape[-1] != p.spec.obs_dim:
            raise EnvError(f"layer {p.name!r}: its observation has {x.shape[-1]} values, expected {p.spec.obs_dim} "
                           "(the size seen when the env was first reset). The env's observation size must not "
                           "change during training.")
        critic = None
        if p.spec.critic_dim is not None:
            st = np.broadcast_to(state[:, None, :], (self.N, p.L, state.shape[-1]))  # type: ignore[index]
            # Agent-specific (MAPPO): the state, then the lane's own input; or the state and command.
            own = x if p.spec.cfg.policy.critic_input == "state_and_obs" else cmd
            critic = np.concatenate([st, own], axis=-1, dtype=np.float32) if own is not None else np.asarray(st, np.float32)
        return x, critic

    def _due(self, p: _Plan, now: VecObs, ep_t: np.ndarray) -> np.ndarray:
        if p.bottom:
            return now.acting if p.all_slots else now.acting[:, p.lane_slots]
        live = now.alive.astype(np.float64) @ p.membership > 0
        return (ep_t % p.spec.every == 0)[:, None] & live

    # -- one env step ----------------------------------------------------------------------------
    def step(self) -> list[tuple[float, int, int]]:
        """Advance every copy by one env step; returns (return, length, copy) of episodes that ended."""
        now, t = self.now, self.t
        for buf in self.buffers.values():
            buf.ensure(t)
        env_in: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # recorded layers: env part before the step
        for p in self.plans:
            due = self._due(p, now, self.ep_t)
            every = bool(due.all())  # the common case: no boolean gathers and scatters, reshapes
            if not every and not due.any():
                continue
            policy = self.policies[p.name]
            buf = self.buffers.get(p.name)   # None for a scripted layer: never recorded
            into = None  # the buffer's row, where the normalised inputs were written in place
            values = None  # set by the act where the buffer takes its values there (values_at_act)
            if p.name in self.scripted:  # acts by its teacher: no inputs, no forward pass
                actions, hid = self._teacher(p, due, policy.head.dim), None
            else:
                x, critic = self._inputs(p, now.obs, now.state, due)
                # Nearly every lane due (an agent dead in a few copies: most battle_v4 steps): act on
                # every row and keep the due ones' results, rather than gathering the due rows' inputs
                # and scattering them into the buffer (two passes over wide rows cost more than acting
                # on a few rows more). The observation statistics still count the due rows only.
                dense = (not every and buf is not None and p.name not in self.hidden and self.bonus is None
                         and x.shape[-1] >= DENSE_ACT_MIN_WIDTH and float(due.mean()) >= DENSE_ACT_SHARE
                         and buf.obs[t].flags.c_contiguous)  # its rows are written in place (into), never scattered
                whole = every or dense
                raw = x.reshape(-1, x.shape[-1]) if whole else x[due]
                pick = due.reshape(-1) if dense else None
                norm = self.obs_norms[p.name]
                if buf is not None:
                    if whole and buf.obs[t].flags.c_contiguous:  # whole rows: normalise straight into the buffer
                        into = buf.obs[t].reshape(raw.shape)
                    obs = norm.observe_and_normalise(raw, out=into, rows=pick)
                else:
                    obs = norm(raw)
                if into is None and not obs.flags.writeable:  # an env's read-only array passed through (normalization off)
                    obs = obs.copy()
                masks = None
                if p.bottom and p.spec.mask_dim:
                    lane_masks = now.masks[:, p.lane_slots] if now.masks is not None else None  # type: ignore[index]
                    masks = ((lane_masks.reshape(-1, p.spec.mask_dim) if whole else lane_masks[due]) if lane_masks is not None
                             else np.ones((len(obs), p.spec.mask_dim), np.float32))
                crit = (critic.reshape(-1, critic.shape[-1]) if whole else critic[due]) if critic is not None else None
                hid = self.hidden.get(p.name)
                if hid is None:
                    # numpy in: the numpy actor takes the arrays as they are (torch's path wraps them)
                    actions, logp, values = policy.act(obs, self.deterministic, masks,
                                                       np.ascontiguousarray(crit) if crit is not None else None,
                                                       with_value=buf is not None and buf.values_at_act)
                    if pick is not None:  # the due lanes' results, as the gathered path gives them
                        actions, logp = actions[pick], logp[pick]
                        values = values[pick] if values is not None else None
                        masks = masks[pick] if masks is not None else None
                        crit = crit[pick] if crit is not None else None
                else:
                    h_in = hid.reshape(-1, hid.shape[-1]).copy() if every else hid[due]
                    first = self.fresh[p.name].reshape(-1).copy() if every else self.fresh[p.name][due]
                    actions, logp, _, h_next = policy.act(
                        torch.from_numpy(obs), torch.from_numpy(h_in), self.deterministic,
                        torch.from_numpy(masks) if masks is not None else None,
                        torch.from_numpy(np.ascontiguousarray(crit)) if crit is not None else None, with_value=False)
            # Where the due lanes' values go: whole rows when every lane is due (a flat run,
            # every step), else the lanes' positions.
            if every:
                lanes: tuple = (slice(None), slice(None))
                shaped = lambda a: a.reshape(self.N, p.L, *a.shape[1:])  # noqa: E731
            else:
                lanes = np.nonzero(due)
                shaped = _same
            self.last_action[p.name][lanes] = shaped(actions)
            if hid is not None:
                hid[lanes] = shaped(h_next)
                self.fresh[p.name][lanes] = False
            if p.bottom:
                env_vals = policy.head.to_env_array(actions)
                if every and p.all_slots:
                    self.env_act[:] = shaped(env_vals)
                else:
                    n_idx, l_idx = np.nonzero(due)
                    self.env_act[n_idx, p.lane_slots[l_idx]] = env_vals
            else:
                onehots = command_vectors(p.spec, actions)
                self.commands[p.name][lanes] = shaped(onehots)
                if p.spec.cfg.action.to_env:  # the decision changes the task: the layers below see it now
                    n_idx, l_idx = np.nonzero(due)
                    decided = np.asarray(actions)
                    if p.spec.cfg.action.type != "box":  # indices, as an env takes discrete actions
                        decided = np.rint(decided).astype(np.int64)
                    changed = self.venv.apply_command(p.name, n_idx, l_idx, decided)
                    if changed is not None:
                        obs_now, state_now = changed
                        self.now = now = replace(now, obs=obs_now, state=now.state if state_now is None else state_now)
                if p.name in self.command_counts:
                    self.command_counts[p.name] += onehots.sum(0).astype(np.int64)
            if buf is None:
                continue
            if every and buf.dense_row >= 0:  # a flat run, every step: the whole previous row closes
                self._close_dense(p, buf)
            else:
                self._close(p, buf, due & (buf.open_row >= 0), end=False)
            row = (t, *lanes)
            if into is None:
                buf.obs[row] = shaped(obs)
            buf.act[row] = shaped(actions)
            buf.logp[row] = shaped(logp)
            if buf.values_at_act:
                buf.value[row] = shaped(values)
            if masks is not None:
                buf.mask[row] = shaped(masks)
            if crit is not None:
                buf.critic[row] = shaped(crit)
            if hid is not None:
                buf.hidden[row] = shaped(h_in)
                buf.first[row] = shaped(first)
            if p.spec.teacher_fn is not None:
                buf.teacher[row] = shaped(self._teacher(p, due, actions.shape[-1]))
            buf.decided[row] = True
            buf.version[row] = self.version[p.name]
            buf.at_step[row] = self.copy_steps
            if self.bonus is not None:  # rows start at 0 (see _Buffers.carry_over): only a bonus is written
                bonus = shaped(self.bonus(p.name, obs))
                buf.R[row] = bonus
                buf.bonus[row] = bonus
            buf.open_row[lanes] = t
            buf.disc[lanes] = 1.0
            buf.dense_row = t if every else -1
            buf.decided_n += len(actions)
        for p in self.plans:
            if p.name in self.buffers and p.intrinsic is not None:
                env_in[p.name] = (p.member_obs(now.obs), self._command_in(p))  # type: ignore[assignment]
        res = self.venv.step(self.env_act)
        self.env_steps += self.N
        self.copy_steps += 1
        self._after_step(res, env_in)
        if self.episode_keys and res.episodes and res.infos is not None:
            for _, _, ci in res.episodes:
                for k, v in episode_info_values(res.infos[ci], self.episode_keys).items():
                    self.episode_infos.setdefault(k, []).append(v)
                    self._keys_seen.add(k)
            self._episodes_seen += len(res.episodes)
            if self._episodes_seen >= _EPISODE_KEYS_WITHIN and not self._keys_warned:
                self._warn_unreported_keys()
        self.now = res
        self.t += 1
        return res.episodes

    def _warn_unreported_keys(self) -> None:
        """Once: the declared episode metrics that no episode so far reported (no chart is drawn
        for them, and nothing else would say why)."""
        self._keys_warned = True
        missing = [k for k in self.episode_keys if k not in self._keys_seen]
        if missing:
            print(f"[hdppo] env {getattr(self.venv, 'name', '?')!r} declares the episode metric(s) "
                  f"{', '.join(map(repr, missing))} (metadata['episode_metrics'] or env.episode_metrics), but none of "
                  f"its first {self._episodes_seen} episodes had a numeric value for them in an agent's info at the "
                  "last step, so they get no chart. Set them in the infos of the episode's last step, or leave them "
                  "out of the list.", flush=True)

    def _intrinsic(self, p: _Plan, res: VecStep, before: tuple[np.ndarray, np.ndarray | None],
                   open_: np.ndarray) -> np.ndarray:
        """Command-following reward ``[N, L]`` of the open lanes."""
        fn = p.intrinsic
        out = np.zeros((self.N, p.L))
        env_before, cmd = before
        # The observations after the step: the final ones where a slot or copy ended (not the reset ones).
        after_obs = np.where((res.terminated | res.truncated | res.episode_end[:, None])[..., None], res.final_obs, res.obs)
        env_after = p.member_obs(after_obs)
        width = cmd.shape[-1] if cmd is not None else 0
        n_idx, l_idx = np.nonzero(open_)
        if not len(n_idx):
            return out
        commands = cmd[n_idx, l_idx] if cmd is not None else np.zeros((len(n_idx), width), np.float32)
        actions = self.last_action[p.name][n_idx, l_idx]

        def lane_infos() -> list:
            infos = []
            for n, lane in zip(n_idx, l_idx):
                info_n = res.infos[n] if res.infos is not None else {}
                members = [self.venv.agents[k] for k in p.members[lane]]
                infos.append(info_n.get(members[0], {}) if p.bottom else {m: info_n.get(m, {}) for m in members})
            return infos

        if not p.info_checked:
            self._check_info_keys(p, lane_infos(), res.info_columns, res.infos is None)
        with user_code(reward_field(p.spec.index, p.name), str(p.spec.cfg.reward.intrinsic_fn),
                       _VECTORIZED_REWARD_CALL if p.vectorized else _REWARD_CALL):
            if p.vectorized:
                # The lanes' agents' info values can come straight from the env's info columns
                # (InfoRows.column), with no dict per agent and step: a bottom lane is one slot, an
                # upper lane its members' slots (equal squads: p.gather).
                slots = p.lane_slots[l_idx] if p.bottom else p.gather[l_idx]  # type: ignore[index]
                info = InfoRows(lane_infos, len(n_idx), res.info_columns, res.info_present, n_idx, slots,
                                grouped=not p.bottom)
                out[n_idx, l_idx] = np.asarray(fn(command=commands, obs=env_before[n_idx, l_idx],  # type: ignore[misc]
                                                  next_obs=env_after[n_idx, l_idx], action=actions, info=info),
                                               np.float64)
            else:
                infos = lane_infos()
                for k in range(len(n_idx)):
                    out[n_idx[k], l_idx[k]] = float(fn(command=commands[k], obs=env_before[n_idx[k], l_idx[k]],  # type: ignore[misc]
                                                       next_obs=env_after[n_idx[k], l_idx[k]], action=actions[k],
                                                       info=infos[k]))
        return out

    @staticmethod
    def _check_info_keys(p: _Plan, rows: list, columns: Any, no_infos: bool) -> None:
        """Once per layer, at the first agent info: a named reward that reads keys this env's info
        lacks (a reward used on an env it was not written for) stops the run, naming them.
        ``no_infos``: the env passes no per-agent info at all (a batched env without info columns)."""
        fn = p.reward_fn
        agents = [a for r in rows for a in ((r,) if p.bottom else r.values())]
        missing = (list(fn.info_keys) if no_infos and columns is None  # type: ignore[union-attr]
                   else missing_info_keys(fn, agents, columns))  # type: ignore[arg-type]
        if missing is None:
            return
        if missing:
            have = sorted(set(next((a for a in agents if a), {})) | set(columns or ()))
            raise ConfigError(
                f"{reward_field(p.spec.index, p.name)} {fn.name!r} reads the info keys {', '.join(missing)}, "  # type: ignore[union-attr]
                f"which this env's agent info does not have (it has: {', '.join(have) or 'none'}): it was written for "
                f"the env of {getattr(fn.fn, '__module__', '?')} and here it would pay a constant on every step. Name a "  # type: ignore[union-attr]
                "reward written for this env, or give this layer a module:function reward of your own.")
        p.info_checked = True

    def _after_step(self, res: VecStep, env_in: dict) -> None:
        ended_now = res.terminated | res.truncated
        self.agent_ended |= ended_now
        self.agent_trunc |= res.truncated
        end = res.episode_end
        any_end = bool(end.any())
        live_after = None  # alive after the step, before any reset; only squads need it
        for p in self.plans:
            buf = self.buffers.get(p.name)
            if buf is None:
                continue
            cfg = p.spec.cfg.reward
            dense = buf.dense_row >= 0
            open_ = buf.open_row >= 0 if not dense else None
            if not dense and not open_.any():  # type: ignore[union-attr]
                continue
            r_env = res.rewards if p.all_slots else res.rewards @ p.membership  # [N, L] the lane's agents' rewards
            r = r_env if cfg.env == 1.0 else cfg.env * r_env
            r_int = None
            if p.intrinsic is not None:
                r_int = self._intrinsic(p, res, env_in[p.name], open_ if open_ is not None else np.ones((self.N, p.L), bool))
                r = r + cfg.intrinsic * r_int
            at, pick = ((buf.dense_row,), _same) if dense else buf.at(open_)  # type: ignore[arg-type]
            track = self.tracks[p.name]
            if track.smdp:
                buf.R[at] += pick(buf.disc * r)
                if dense:
                    buf.disc *= track.gamma
                else:
                    buf.disc[open_] *= track.gamma
            else:
                buf.R[at] += pick(r)
            buf.env_r[at] += pick(r_env)
            buf.steps[at] += 1
            if r_int is not None:
                buf.int_r[at] += pick(r_int)
            # Ends: the bottom lane of an agent that ended; a squad whose members are all gone;
            # every lane of a copy whose episode ended.
            if p.bottom:
                closing = ended_now if p.all_slots else ended_now[:, p.lane_slots]
                if any_end:
                    closing = closing | end[:, None]
            else:
                if live_after is None:  # a copy that ended has no one alive
                    live_after = np.where(end[:, None], False, res.alive).astype(np.float64)
                closing = ((live_after @ p.membership == 0) & p.fixed[None, :]) | end[:, None]
            if not dense:
                closing = closing & open_
            if closing.any():
                # A lane was cut short when none of its agents that ended terminated.
                if p.bottom:
                    truncated = self.agent_trunc if p.all_slots else self.agent_trunc[:, p.lane_slots]
                else:
                    ended_cnt = self.agent_ended.astype(np.float64) @ p.membership
                    trunc_cnt = self.agent_trunc.astype(np.float64) @ p.membership
                    truncated = (ended_cnt > 0) & (trunc_cnt == ended_cnt)
                self._close(p, buf, closing, end=True, truncated=truncated, res=res)
        if self.hidden:
            self._reset_hidden(ended_now, end, any_end)
        # Copies whose episode ended start the next one.
        if any_end:
            self.ep_t[end] = 0
            self.agent_ended[end] = False
            self.agent_trunc[end] = False
            for cmd in self.commands.values():
                cmd[end] = 0.0
            self.ep_t[~end] += 1
        else:
            self.ep_t += 1

    def _reset_hidden(self, ended_now: np.ndarray, end: np.ndarray, any_end: bool) -> None:
        """Recurrent layers: zero the hidden of lanes whose episode ended (every lane of a copy
        that ended; a bottom lane whose agent ended), after their transitions were closed."""
        for p in self.plans:
            hid = self.hidden.get(p.name)
            if hid is None:
                continue
            reset = (ended_now if p.all_slots else ended_now[:, p.lane_slots]) if p.bottom else np.zeros((self.N, p.L), bool)
            if any_end:
                reset = reset | end[:, None]
            if reset.any():
                hid[reset] = 0.0
                self.fresh[p.name][reset] = True

    # -- closing transitions ---------------------------------------------------------------------
    def _close_dense(self, p: _Plan, buf: _Buffers) -> None:
        """:meth:`_close` of every lane, all open at ``buf.dense_row``, when they decide again
        (not an end): the same writes as plain row assignments, no masks."""
        row = buf.dense_row
        track = self.tracks[p.name]
        buf.gam[row] = buf.disc if track.smdp else track.gamma
        buf.closed[row] = True
        buf.end[row] = False
        buf.term[row] = False
        buf.stop[row] = False
        buf.open_row.fill(-1)
        buf.dense_row = -1

    def _close(self, p: _Plan, buf: _Buffers, closing: np.ndarray, end: bool,
               truncated: np.ndarray | None = None, res: VecStep | None = None, cut: bool = False) -> None:
        """Close the open transitions of ``closing`` lanes: scale their reward, note how they end,
        and keep the view to bootstrap from where an episode was truncated (or the rollout cut)."""
        if not closing.any():
            return
        at, pick = buf.at(closing)
        track = self.tracks[p.name]
        gamma = pick(buf.disc) if track.smdp else track.gamma
        term = ~pick(truncated) if end else False  # type: ignore[arg-type]
        buf.gam[at] = gamma  # (R is scaled at harvest, all rows at once: RewardScaler.scale_rows)
        buf.closed[at] = True
        buf.end[at] = end
        buf.term[at] = term
        buf.stop[at] = end or cut
        buf.open_row[closing] = -1
        buf.dense_row = -1
        if not (end or cut):
            return
        n_idx, l_idx = np.nonzero(closing)
        rows = np.full(len(n_idx), at[0]) if len(at) == 1 else at[0]
        # term: one entry per closing lane (in np.nonzero order) where an episode ended, else the
        # scalar False (np.broadcast_to costs more than this whole branch on a few lanes).
        boot = ~term.reshape(-1) if isinstance(term, np.ndarray) else np.full(len(n_idx), not term)
        if boot.any():
            view = np.zeros_like(closing)
            view[n_idx[boot], l_idx[boot]] = True
            if cut:
                x, critic = self._inputs(p, self.now.obs, self.now.state, view)
            else:
                obs = res.final_obs  # type: ignore[union-attr]
                # The state before any reset: the final one where a copy ended (final_state is set only then).
                state = (res.state if res.final_state is None  # type: ignore[union-attr]
                         else np.where(res.episode_end[:, None], res.final_state, res.state))  # type: ignore[union-attr]
                x, critic = self._inputs(p, obs, state, view, lambda i: res.final_raw.get(i) or self.venv.raw_obs(i))  # type: ignore[union-attr]
            buf.boot_rows.append(np.stack([rows[boot], n_idx[boot], l_idx[boot]], axis=1))
            buf.boot_obs.append(self.obs_norms[p.name](x[view]))
            buf.boot_critic.append(critic[view] if critic is not None else np.zeros((int(boot.sum()), 0), np.float32))
            buf.boot_value.append(None)
            # The hidden the lane's next step would have received (its reset comes after the close).
            buf.boot_hidden.append(self.hidden[p.name][view] if p.name in self.hidden else None)

    # -- values, GAE, batches --------------------------------------------------------------------
    def flush_values(self) -> None:
        """Values of the rows decided since the last flush, with the weights that acted on them
        (called before new weights are loaded mid-rollout, and at harvest)."""
        for name, buf in self.buffers.items():
            policy = self.policies[name]
            lo, hi = buf.value_from, self.t
            if hi > lo and buf.values_at_act:  # every row got its value when it was decided
                buf.value_from = hi
            elif hi > lo:
                sel = buf.decided[lo:hi]
                decided = int(np.count_nonzero(sel))
                if decided and name not in self.hidden and decided >= DENSE_VALUE_SHARE * sel.size:
                    # Nearly every row decided (a flat or bottom layer, few agents dead): the critic
                    # on all the rows, read in place, costs less than gathering the decided ones
                    # first (battle_v4: a copy of ~3 KB per row against ~1.6 us of critic per row).
                    obs = buf.obs[lo:hi].reshape(sel.size, -1)
                    critic = buf.critic[lo:hi].reshape(sel.size, -1)
                    with torch.inference_mode():
                        v = policy.value(torch.from_numpy(obs), torch.from_numpy(critic) if policy.central else None)
                    np.copyto(buf.value[lo:hi], v.numpy().reshape(sel.shape), where=sel)
                elif decided:
                    obs = buf.obs[lo:hi][sel]
                    critic = buf.critic[lo:hi][sel]
                    with torch.inference_mode():
                        if name in self.hidden:
                            v = policy.value(torch.from_numpy(obs), torch.from_numpy(buf.hidden[lo:hi][sel]),
                                             torch.from_numpy(critic) if policy.central else None)
                        else:
                            v = policy.value(torch.from_numpy(obs), torch.from_numpy(critic) if policy.central else None)
                    buf.value[lo:hi][sel] = v.numpy()
                buf.value_from = hi
            for k, val in enumerate(buf.boot_value):
                if val is None:
                    with torch.inference_mode():
                        crit_k = torch.from_numpy(buf.boot_critic[k]) if policy.central else None
                        if buf.boot_hidden[k] is not None:
                            v = policy.value(torch.from_numpy(buf.boot_obs[k]), torch.from_numpy(buf.boot_hidden[k]), crit_k)
                        else:
                            v = policy.value(torch.from_numpy(buf.boot_obs[k]), crit_k)
                    buf.boot_value[k] = v.numpy()

    def _cut(self) -> None:
        """End of a rollout: a lane of a command-less layer that decides on the next step closes
        now, bootstrapped from V(next observation)."""
        for p in self.plans:
            buf = self.buffers.get(p.name)
            if buf is None or p.spec.command_in:
                continue
            closing = self._due(p, self.now, self.ep_t) & (buf.open_row >= 0)
            self._close(p, buf, closing, end=False, cut=True)

    def harvest(self) -> dict[str, Harvest]:
        """Every recorded layer's closed transitions as a Batch with GAE; open ones carry over."""
        self._cut()
        self.flush_values()
        out: dict[str, Harvest] = {}
        for p in self.plans:
            buf = self.buffers.get(p.name)
            if buf is None:
                continue
            T = self.t
            boot = np.zeros((T, self.N, p.L))
            for rows, val in zip(buf.boot_rows, buf.boot_value):
                boot[rows[:, 0], rows[:, 1], rows[:, 2]] = val
            track = self.tracks[p.name]
            buf.rew[:T] = track.scaler.scale_rows(buf.R[:T], buf.gam[:T], buf.closed[:T], buf.end[:T])
            adv = decision_gae(buf.rew[:T].astype(np.float64), buf.value[:T].astype(np.float64), buf.gam[:T],
                               self.tracks[p.name].lam, buf.decided[:T], buf.closed[:T], buf.stop[:T],
                               buf.term[:T], boot)
            sel = buf.closed[:T]
            a = adv[sel]
            v = buf.value[:T][sel]
            batch = Batch(obs=buf.gather("obs", T, sel), actions=buf.act[:T][sel], logp=buf.logp[:T][sel], values=v,
                          advantages=a.astype(np.float32), returns=(a + v).astype(np.float32),
                          masks=buf.mask[:T][sel], critic_obs=buf.gather("critic", T, sel), versions=buf.version[:T][sel],
                          ids=self._ids(buf, sel), hidden=buf.hidden[:T][sel], first=buf.first[:T][sel],
                          teacher=buf.teacher[:T][sel])
            counts = self.command_counts.get(p.name)
            out[p.name] = Harvest(batch, float(buf.env_r[:T][sel].sum()), float(buf.int_r[:T][sel].sum()),
                                  float(buf.bonus[:T][sel].sum()),
                                  counts.tolist() if counts is not None and counts.size else None)
            buf.carry_over()
        for c in self.command_counts.values():
            c[:] = 0
        self.t = 1
        return out

    def _ids(self, buf: _Buffers, sel: np.ndarray) -> np.ndarray:
        """Ids ``[k, 4]`` (see hdppo.platform.batch) of the rows ``sel`` ``[T, N, L]``, in the
        order a boolean index takes them."""
        _, n, lane = np.nonzero(sel)
        ids = np.empty((len(n), ID_COLUMNS), np.int64)
        ids[:, 0] = self.source
        ids[:, 1] = self.copy_base + n
        ids[:, 2] = buf.at_step[: len(sel)][sel]
        ids[:, 3] = lane
        return ids

    def unharvested_ids(self) -> dict[str, np.ndarray]:
        """Per recorded layer, the ids of the rows decided since the last harvest (carried-over
        ones included): the samples lost if this rollout fails now."""
        return {name: self._ids(buf, buf.decided[: min(self.t + 1, buf.cap)]) for name, buf in self.buffers.items()}

    def decided_count(self, name: str) -> int:
        """Transitions decided in this rollout so far (the carried-over row excluded)."""
        return self.buffers[name].decided_n

    def collect(self, quota: dict[str, int], refresh: Callable[[], None] | None = None,
                refresh_every: int = 0) -> tuple[dict[str, Harvest], list[tuple[float, int, int]], int]:
        """Step until every recorded layer has ``quota`` transitions; (harvests, episodes, env steps).
        ``refresh`` (soft sync) is called every ``refresh_every`` steps to adopt newer weights."""
        start = self.env_steps
        every = max(s.every for s in self.specs)
        cap = 1000 * max(quota.values()) * every  # a layer that never acts must not hang
        episodes: list[tuple[float, int, int]] = []
        steps = 0
        while any(self.decided_count(n) < q for n, q in quota.items()):
            if refresh is not None and refresh_every and steps and steps % refresh_every == 0:
                self.flush_values()
                refresh()
            episodes += self.step()
            steps += 1
            if self.env_steps - start > cap:
                raise RuntimeError(f"layers {list(quota)}: no transitions after {cap} env steps")
        return self.harvest(), episodes, self.env_steps - start

    def take_episode_infos(self) -> dict[str, list[float]]:
        """The episode info values recorded since the last call (key -> one value per episode)."""
        out, self.episode_infos = self.episode_infos, {}
        return out

    def close(self) -> None:
        self.venv.close()


def run_episodes(sampler: Sampler, episodes: int, keep_infos: bool = False) -> list:
    """Returns of ``episodes`` complete episodes, a fixed number per copy (so that copies with
    short episodes are not over-represented). With ``keep_infos``, ``(return, length, infos)``
    per episode instead, ``infos`` the env's per-agent infos of the step that ended it."""
    n = sampler.N
    quota = [episodes // n + (1 if i < episodes % n else 0) for i in range(n)]
    played = [0] * n
    out: list = []
    t0 = time.perf_counter()
    while len(out) < episodes:
        for ret, length, ci in sampler.step():
            if quota[ci] > 0:
                quota[ci] -= 1
                if not keep_infos:
                    out.append(((played[ci], ci), float(ret)))
                else:
                    infos = sampler.now.infos  # the step that ended the episode (before the copy's reset)
                    last = {a: dict(i) for a, i in infos[ci].items()} if infos is not None else {}
                    out.append(((played[ci], ci), (float(ret), int(length), last)))
                played[ci] += 1
        if time.perf_counter() - t0 > 3600:
            raise RuntimeError(f"evaluation: {len(out)} of {episodes} episodes ended within an hour")
    # In the copies' order, not the order they ended in: each copy's first episode, then each one's
    # second, ... so that the list does not depend on the episodes' lengths, and the first k of
    # `episodes` are the same games for any k up to the number of copies (copy i reset with seed + i).
    return [value for _, value in sorted(out, key=lambda item: item[0])]
