"""Batched multi-agent envs: the one env interface the sampler reads.

Every env kind reaches the sampler (:mod:`hdppo.hierarchies.engine`) as a
:class:`VectorMultiAgentEnv`: ``num_envs`` copies of an env whose agents sit in fixed *slots*,
with every quantity an array shaped ``[copies, slots, ...]`` and masks saying which slots are
alive and which act this step. A single-agent Gymnasium env is one slot.

| adapter | wraps | per-copy Python |
|---|---|---|
| :class:`GymnasiumCopies` | N copies of a ``gymnasium.Env`` | one ``env.step`` per copy |
| :class:`AdapterCopies` | N copies of a PettingZoo parallel/AEC env or an RLlib ``MultiAgentEnv`` | one ``step`` per copy, dicts turned into arrays |
| :class:`GymnasiumVector` | a ``gymnasium.vector.VectorEnv`` (``autoreset_mode`` SAME_STEP) | none |
| your class | an env that steps N copies at once (EnvPool- or JAX-style) | none |

**Writing a natively vectorised env.** Subclass :class:`VectorMultiAgentEnv` (or duck-type
it): set ``num_envs``, ``agents`` (slot names), ``name``, ``obs_dim``, ``mask_dim`` (0 without
action masks), ``state_dim`` (None without a global state), give ``observation_space(agent)``
and ``action_space(agent)`` (the per-agent spaces), and implement ``reset(seed) -> VecObs``
and ``step(actions) -> VecStep``. ``actions`` is ``[N, A, *action_shape]`` in the env's own
format (int64 for Discrete); entries of slots that do not act are to be ignored. A copy whose
episode ends resets inside the same ``step``: its row of ``obs`` is the reset observation,
``final_obs``/``final_state`` hold the last ones, ``episode_end`` says which copies did, and
``episodes`` lists ``(return, length, copy)`` for each of them (training charts the returns and
the evaluation counts episodes from it). Seed copy ``i`` from ``(seed, i)`` alone, e.g. with
``seed + i`` or with child ``i`` of the seed (:mod:`hdppo.envs.builtin.copy_draws`, as skirmish and
swarm do): the evaluation assumes it, so that ``hdppo eval``'s first k games are the same for any
``--episodes``. An acting slot is alive and has a legal action; where a copy's episode ends, each agent alive before the step is ``terminated`` or ``truncated`` (a time limit: truncated, so that
hdppo bootstraps); an agent already gone gets no reward (it has no open transition). Training
checks every array against this contract for the first steps, as ``hdppo check-env`` does
(observations against the declared spaces too), and ``episodes`` on every step. The
arrays of a ``VecObs``/``VecStep`` need to stay valid only until the next ``step`` or ``reset``:
the sampler copies what it keeps, so an env may write every step into the same buffers
(``magent_vector`` does). Point
``env.type: vector`` and ``env.entry_point`` at a factory ``make(num_envs, seed, **kwargs)``.
An env whose task an upper layer changes (swarm's goal assignment) also defines
``apply_command(layer, copies, lanes, actions)``, which a layer with ``action.to_env: true``
calls with its decisions before the layers below act. A per-copy env (Gymnasium, PettingZoo,
RLlib) takes them one copy at a time: give the env itself a method
``apply_command(layer, lane, action) -> {agent: observation} or None`` (``lane`` the index of the
deciding lane in the layer's order, ``action`` its action: an index, or the values of a
MultiDiscrete or Box command), returning the observations that the decision changed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import gymnasium as gym
import numpy as np

from .adapters import MultiAgentAdapter, as_reward
from .errors import EnvError

# Observations are also checked against the declared space for this many steps after start
# (NaN/inf is checked on every step; ``space.contains`` is slower).
SPACE_CHECK_STEPS = 64


@dataclass
class VecObs:
    """What the sampler reads before acting. ``obs`` of slots that are not alive is 0."""

    obs: np.ndarray                 # [N, A, D] float32 flat observations
    alive: np.ndarray               # [N, A] bool
    acting: np.ndarray              # [N, A] bool: alive and acting this step (turn-based envs: one slot)
    masks: np.ndarray | None        # [N, A, K] float32 legal-action masks (1 legal), or None
    state: np.ndarray | None        # [N, S] float32 global state, or None when not asked for


@dataclass
class VecStep(VecObs):
    """One step of every copy. Copies whose episode ended were reset: their ``obs`` etc. are the
    first of the next episode, and ``final_obs``/``final_state`` the last of the one that ended."""

    rewards: np.ndarray = None          # type: ignore[assignment]  # [N, A] float64
    terminated: np.ndarray = None       # type: ignore[assignment]  # [N, A] bool: the slot's agent reached a terminal state
    truncated: np.ndarray = None        # type: ignore[assignment]  # [N, A] bool: cut short (never both)
    final_obs: np.ndarray = None        # type: ignore[assignment]  # [N, A, D]: last obs where a slot ended or its copy ended
    final_state: np.ndarray | None = None  # [N, S] where a copy ended
    episode_end: np.ndarray = None      # type: ignore[assignment]  # [N] bool: the copy's episode ended (it was reset)
    infos: list[dict[str, dict]] | None = None  # per copy: agent -> info (None: the env gives none)
    final_raw: dict[int, dict[str, Any]] = field(default_factory=dict)  # copy -> raw obs dict where a slot or copy ended
    episodes: list[tuple[float, int, int]] = field(default_factory=list)  # (return over agents, length, copy)
    # Optional, for natively vectorised envs: per-agent info values as arrays, key -> [N, A, ...]
    # (the value slot a's info dict has under key), valid where ``info_present`` [N, A] is True
    # (the slots that have an info dict). A vectorised intrinsic reward reads them through
    # :class:`InfoRows` instead of one dict per agent and step.
    info_columns: Mapping[str, np.ndarray] | None = None
    info_present: np.ndarray | None = None


class VectorMultiAgentEnv:
    """Interface (see the module docstring). Subclasses set the attributes in ``__init__``."""

    num_envs: int
    agents: list[str]
    name: str
    obs_dim: int
    mask_dim: int = 0
    state_dim: int | None = None
    want_state: bool = False        # set by the sampler: fill ``state`` every step
    # True where the env has no state() of its own and its one agent's flattened observation
    # stands in for it (a single-agent Gymnasium env): exports and docs say so.
    state_is_obs: bool = False
    # Info keys worth a chart per episode (``metadata["episode_metrics"]`` of the env; the config's
    # ``env.episode_metrics`` overrides): see :func:`episode_info_values`.
    episode_metrics: tuple[str, ...] = ()
    # Values per item of an env made for ``policy.encoder: set`` (``metadata["set_features"]``; the
    # job shop's ``observation: items`` says 14), so that a config giving another width is refused;
    # 0: the observation is no list of items (a set policy over it is refused).
    set_features: int | None = None

    def observation_space(self, agent: str) -> gym.Space: ...
    def action_space(self, agent: str) -> gym.Space: ...
    def reset(self, seed: int | None = None) -> VecObs: ...
    def step(self, actions: np.ndarray) -> VecStep: ...
    def close(self) -> None: ...

    # Optional: each copy reset with a seed of its own, so that several copies replay one episode
    # start (``hdppo self-label`` samples many solutions of one seeded instance).
    def reset_each(self, seeds: Sequence[int | None]) -> VecObs:
        """Reset copy ``i`` with ``seeds[i]`` (one seed per copy)."""
        raise EnvError(f"env {self.name!r} is natively vectorised: its copies cannot be reset one by one to given "
                       "seeds. Use the per-copy form of the env (env.type gymnasium or pettingzoo).")

    # Optional: an env whose task an upper layer's decision changes (``action.to_env: true``),
    # such as swarm's goal assignment. The sampler calls it right after that layer decides and
    # before the layers below act, so that they see the changed task in the same step.
    def apply_command(self, layer: str, copies: np.ndarray, lanes: np.ndarray, actions: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray | None] | None:
        """Layer ``layer``'s decisions: lane ``lanes[k]`` of copy ``copies[k]`` chose ``actions[k]``
        (the layer's action as its policy gives it: indices for discrete commands, values for a
        Box). Returns the observations ``[N, A, D]`` and the state ``[N, S]`` (None when it is not
        asked for, ``want_state``) as they are after the decisions, or None if no observation
        changed."""
        raise EnvError(f"env {self.name!r} takes no decisions from an upper layer (action.to_env): it has no "
                       "apply_command(layer, copies, lanes, actions) method. Write one into a natively vectorised "
                       "env (see hdppo.envs.vector), or set action.to_env: false.")

    @property
    def takes_commands(self) -> bool:
        """Whether :meth:`apply_command` is implemented (checked when a hierarchy is built)."""
        return type(self).apply_command is not VectorMultiAgentEnv.apply_command

    # Only envs made of per-copy Python envs have these (custom observation views need them).
    def raw_obs(self, i: int) -> dict[str, Any]:
        raise EnvError(f"env {self.name!r} is natively vectorised: a 'module:function' observation view needs "
                       "per-copy observations. Write the view into the env, or use observation.source 'env'/'state'.")

    def copy_env(self, i: int) -> Any:
        return None

    # Optional, for videos of a natively vectorised env (hdppo eval --video, train.video_every):
    # ``render_copy(i) -> [H, W, 3] uint8``, a picture of copy i as it is now.


def _declared(env: Any, key: str) -> Any:
    """``env.metadata[key]`` (Gymnasium's wrappers pass their env's metadata through), or None."""
    meta = getattr(env, "metadata", None)
    return meta.get(key) if isinstance(meta, dict) else None


def declared_episode_metrics(env: Any) -> tuple[str, ...]:
    """The info keys an env declares in ``metadata["episode_metrics"]`` (none if it declares none)."""
    return tuple(str(k) for k in _declared(env, "episode_metrics") or ())


def declared_set_features(env: Any) -> int | None:
    """The per-item width an env declares in ``metadata["set_features"]`` (None if it declares none)."""
    value = _declared(env, "set_features")
    return int(value) if value is not None else None


def episode_info_values(infos: Mapping[str, Mapping[str, Any]] | None, keys: Sequence[str]) -> dict[str, float]:
    """Per key, the mean over agents of the numeric value in their info of an episode's last step
    (``infos``: agent -> info). Keys no agent reports, and non-numeric values, are left out."""
    out: dict[str, float] = {}
    if not infos:
        return out
    for k in keys:
        vals = [float(v) for info in infos.values() if isinstance(info, Mapping)
                for v in (info.get(k),) if isinstance(v, (int, float, np.integer, np.floating, np.bool_, bool))]
        if vals:
            out[k] = float(np.mean(vals))
    return out


class LazyCopyInfos(Mapping):
    """One copy's agent -> info dict for a batched env, built on first access by
    ``make(copy, slots) -> {agent: info}`` (most steps nobody reads them), or given ready-made
    (``made``: copies that were reset, whose arrays no longer hold the ended episode)."""

    def __init__(self, make: Callable[[int, list[int]], dict[str, dict]], agents: Sequence[str], copy: int,
                 slots: np.ndarray, made: dict[str, dict] | None = None):
        self._make, self._agents, self._copy, self._slots, self._made = make, agents, copy, slots, made

    def _all(self) -> dict[str, dict]:
        if self._made is None:
            self._made = self._make(self._copy, self._slots.tolist())
        return self._made

    def __getitem__(self, agent: str) -> dict:
        return self._all()[agent]

    def __iter__(self) -> Iterator[str]:
        return (self._agents[s] for s in self._slots.tolist())

    def __len__(self) -> int:
        return len(self._slots)


class LazyStepInfos(Sequence):
    """``VecStep.infos`` of a batched env: per copy a :class:`LazyCopyInfos` over the slots that
    were alive before the step (``before [N, A]`` bool), made when the copy is first looked at."""

    def __init__(self, make: Callable[[int, list[int]], dict[str, dict]], agents: Sequence[str],
                 before: np.ndarray, made: dict[int, dict[str, dict]] | None = None):
        self._make, self._agents, self._before, self._made = make, agents, before, made or {}
        self._copies: dict[int, LazyCopyInfos] = {}

    def __getitem__(self, i: int) -> LazyCopyInfos:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i = int(i) % len(self)
        out = self._copies.get(i)
        if out is None:
            out = self._copies[i] = LazyCopyInfos(self._make, self._agents, i, np.flatnonzero(self._before[i]),
                                                  self._made.get(i))
        return out

    def __len__(self) -> int:
        return len(self._before)


class InfoRows(Sequence):
    """The info of B lanes, for a vectorised reward function (``info=``). Indexable as a list:
    on the bottom layer each row is one agent's info dict; on an upper layer (``grouped``) a
    dict of its m member agents' dicts, by name, in member order. ``column(key, default)`` gives
    the key's values of all rows as one array, ``[B, ...]`` (``[B, m, ...]`` grouped), straight
    from the env's :attr:`VecStep.info_columns` where it has them (``slots`` then holds each
    lane's slot, ``[B]``, or member slots, ``[B, m]``), else read from the dicts; ``default``
    where an agent has no info dict. ``present()`` says which agents have one."""

    def __init__(self, rows: Callable[[], Sequence[Mapping[str, Any]]], n: int,
                 columns: Mapping[str, np.ndarray] | None = None, present: np.ndarray | None = None,
                 copies: np.ndarray | None = None, slots: np.ndarray | None = None, grouped: bool = False):
        self._make, self._n, self._built = rows, n, None  # the dicts are built on first use only
        self._columns, self._present, self._slots, self.grouped = columns, present, slots, grouped
        self._copies = copies[:, None] if grouped and copies is not None else copies

    @property
    def _rows(self) -> Sequence[Mapping[str, Any]]:
        if self._built is None:
            self._built = self._make()
        return self._built

    def __getitem__(self, k):  # type: ignore[override]
        return self._rows[k]

    def __len__(self) -> int:
        return self._n

    def _agents(self) -> list[list[Mapping[str, Any]]]:
        """Every row's agents' dicts, ``[B][1 or m]`` (rows with fewer members padded with ``{}``)."""
        if not self.grouped:
            return [[r] for r in self._rows]
        rows = [list(r.values()) for r in self._rows]
        m = max((len(r) for r in rows), default=0)
        return [r + [{}] * (m - len(r)) for r in rows]

    def present(self) -> np.ndarray:
        """``[B]`` (``[B, m]`` grouped) bool: the agent has an info dict (was alive before the step)."""
        if self._columns is not None:
            if self._present is None:  # an env that gives columns without info_present: every agent has them
                return np.ones(np.shape(self._slots), bool)
            return self._present[self._copies, self._slots]
        have = np.array([[bool(a) for a in agents] for agents in self._agents()], bool).reshape(self._n, -1)
        return have if self.grouped else have[:, 0]

    def column(self, key: str, default: Any = 0.0) -> np.ndarray:
        """The key's values, float64 ``[B, ...]`` (``[B, m, ...]`` grouped); ``default`` where an
        agent has no info dict (or, read from dicts, no such key)."""
        fill = np.asarray(default, np.float64)
        if self._columns is not None and key in self._columns:
            vals = np.asarray(self._columns[key][self._copies, self._slots], np.float64)
            have = self.present()
            if not have.all():
                vals = np.where(have.reshape(have.shape + (1,) * (vals.ndim - have.ndim)), vals, fill)
            return vals
        agents = self._agents()
        found = [a[key] for row in agents for a in row if key in a]
        shape = np.shape(found[0]) if found else fill.shape
        out = np.array([[np.asarray(a.get(key, fill), np.float64) * np.ones(shape) for a in row] for row in agents],
                       np.float64).reshape((self._n, -1, *shape))
        return out if self.grouped else out[:, 0]


TRAINABLE_ACTIONS = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete)


def check_action_space(space: gym.Space, env: str, agent: str) -> None:
    """An :class:`EnvError` naming the env, the agent and a fix unless hdppo's policies can act in
    ``space`` (Box, Discrete, MultiDiscrete)."""
    if isinstance(space, TRAINABLE_ACTIONS):
        return
    fix = (f" Expose it as MultiDiscrete({[2] * int(np.prod(space.shape))}) in a wrapper (the same 0/1 values, "
           "passed on as they are)." if isinstance(space, gym.spaces.MultiBinary) else
           " Wrap the env so that it acts in one of those (a Dict or Tuple of them flattened into a MultiDiscrete "
           "or a Box).")
    raise EnvError(f"env {env!r}: agent {agent!r} acts in {space}, which hdppo's policies cannot produce: they act "
                   f"in Box, Discrete or MultiDiscrete spaces.{fix}")


def policy_space(space: gym.spaces.Dict) -> gym.Space | None:
    """What the policy reads of a Dict observation with an ``action_mask``: the ``observation``
    entry when it is the only other key (PettingZoo's convention), else every key but the mask as
    one Dict (flattened in Gymnasium's sorted key order, as ``gymnasium.spaces.flatten`` does), so
    that nothing an env offers is dropped; None when the observation is the mask alone."""
    rest = {k: v for k, v in space.spaces.items() if k != "action_mask"}
    if not rest:
        return None
    return rest["observation"] if list(rest) == ["observation"] else gym.spaces.Dict(rest)


def policy_values(space: gym.spaces.Dict, obs: Mapping[str, Any], inner: gym.Space | None = None) -> np.ndarray:
    """The flat values of :func:`policy_space` in ``obs`` (float32); ``inner``: that space, when the
    caller keeps it (an adapter, at every step)."""
    inner = policy_space(space) if inner is None else inner
    if inner is None:
        return np.zeros(0, np.float32)
    value = obs["observation"] if inner is space.spaces.get("observation") else {k: obs[k] for k in inner.spaces}
    return np.asarray(gym.spaces.flatten(inner, value), np.float32)


def flat_dims(space: gym.Space) -> tuple[int, int]:
    """(flat observation size, action-mask size) of one agent's observation space."""
    if isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces:
        inner = policy_space(space)
        return (gym.spaces.flatdim(inner) if inner is not None else 0), int(np.prod(space.spaces["action_mask"].shape))
    return int(gym.spaces.flatdim(space)), 0


def env_actions(space: gym.Space, n: int) -> np.ndarray:
    """An empty env-format action array ``[n, *shape]`` for ``space``."""
    if isinstance(space, gym.spaces.Box):
        return np.zeros((n, *space.shape), np.float32)
    if isinstance(space, gym.spaces.Discrete):
        return np.zeros(n, np.int64)
    return np.zeros((n, *space.shape), np.int64)


def why_outside(space: gym.Space, x: Any) -> str:
    """Why ``x`` is not in ``space``, in words: the shape, the dtype or the first value out of its
    bounds (a Dict or Tuple: of the first entry that is not). '' when nothing specific is found."""
    if isinstance(space, gym.spaces.Dict) and isinstance(x, dict):
        for key, sub in space.spaces.items():
            if key not in x:
                return f"key {key!r} is missing"
            if not sub.contains(x[key]):
                return f"[{key!r}]: {why_outside(sub, x[key])}"
        extra = sorted(set(x) - set(space.spaces))
        return f"keys {extra} are not in the space" if extra else ""
    if isinstance(space, gym.spaces.Tuple) and isinstance(x, (tuple, list)):
        for k, (sub, v) in enumerate(zip(space.spaces, x)):
            if not sub.contains(v):
                return f"[{k}]: {why_outside(sub, v)}"
        return f"{len(x)} entries for {len(space.spaces)}" if len(x) != len(space.spaces) else ""
    if isinstance(space, gym.spaces.Box):
        if not isinstance(x, np.ndarray):
            return f"a {type(x).__name__}, not a numpy array"
        if x.shape != space.shape:
            return f"shape {x.shape}, the space's is {space.shape}"
        if not np.can_cast(x.dtype, space.dtype):
            return f"dtype {x.dtype}, the space's is {space.dtype} (cast it, e.g. obs.astype(np.{space.dtype}))"
        low = np.broadcast_to(space.low, x.shape)
        high = np.broadcast_to(space.high, x.shape)
        bad = ~((x >= low) & (x <= high))
        if bad.any():
            i = tuple(int(k) for k in np.argwhere(bad)[0])
            return (f"{int(bad.sum())} value(s) outside the bounds, the first at index {list(i)}: {x[i]!r} not in "
                    f"[{low[i]!r}, {high[i]!r}]")
        return ""
    if isinstance(space, gym.spaces.Discrete):
        return f"{x!r} is not one of {space.start}..{space.start + space.n - 1}"
    return ""


class _Checker:
    """NaN/inf on every observation, the declared space for the first steps."""

    def __init__(self, name: str):
        self.name = name
        self.steps = 0

    def finite(self, obs: np.ndarray, what: str, copy: int | None) -> None:
        """``copy`` None: ``obs`` holds every copy's row, the first with a bad value is named."""
        if not np.isfinite(obs).all():
            if copy is None:
                copy = int(np.argwhere(~np.isfinite(obs))[0][0])
            raise EnvError(f"env {self.name!r} returned a non-finite observation (NaN or inf) from {what} "
                           f"(copy {copy}, step {self.steps}). Fix the env (guard divisions, reset on blow-up) "
                           "before training.")

    def contains(self, space: gym.Space, obs: Any, what: str, copy: int, agent: str | None = None) -> None:
        if self.steps < SPACE_CHECK_STEPS and not space.contains(obs):
            who = f" of agent {agent!r}" if agent is not None else ""
            why = why_outside(space, obs) or (f"shape {getattr(obs, 'shape', None)}, dtype "
                                              f"{getattr(obs, 'dtype', type(obs).__name__)}")
            raise EnvError(
                f"env {self.name!r}: the observation{who} from {what} (copy {copy}) is not in its "
                f"observation_space {space}: {why}. Make the env return observations inside its declared "
                "space (dtype included), or declare the space it really produces.")

    def rewards(self, rewards: np.ndarray) -> None:
        if not np.isfinite(rewards).all():
            bad = np.argwhere(~np.isfinite(rewards))[0]
            raise EnvError(f"env {self.name!r} returned a non-finite reward ({rewards[tuple(bad)]}) at step "
                           f"{self.steps} (copy {bad[0]}). Fix the env's reward, or clip it in a wrapper, before training.")


def _check_seeds(venv: VectorMultiAgentEnv, seeds: Sequence[int | None]) -> None:
    if len(seeds) != venv.num_envs:
        raise EnvError(f"env {venv.name!r}: reset_each() got {len(seeds)} seeds for {venv.num_envs} copies; "
                       "give one seed (or None) per copy.")


class GymnasiumCopies(VectorMultiAgentEnv):
    """``num_envs`` copies of a single-agent ``gymnasium.Env``: one slot, ``agent_0``.

    Gymnasium 1.x vector envs autoreset on the step *after* an episode ends by default
    (``AutoresetMode.NEXT_STEP``): that extra step returns the reset observation with a zero
    reward and must not be learned from. This resets in the same step instead, and hands the
    true final observation back so that a truncated episode bootstraps from V(final obs).
    """

    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int, name: str = "env"):
        from .adapters import SINGLE_AGENT

        self.name, self.num_envs = name, num_envs
        self.envs = [make_env() for _ in range(num_envs)]
        self.episode_metrics = declared_episode_metrics(self.envs[0])
        self.set_features = declared_set_features(self.envs[0])
        self._space = self.envs[0].observation_space
        self._action_space = self.envs[0].action_space
        self.agents = [SINGLE_AGENT]
        self.obs_dim = int(gym.spaces.flatdim(self._space))
        self._box = isinstance(self._space, gym.spaces.Box)
        self._vector_box = self._box and len(self._space.shape) == 1  # rows copy in as they are
        self._discrete = isinstance(self._action_space, gym.spaces.Discrete)
        self._check = _Checker(name)
        self._ep_return = np.zeros(num_envs)
        self._ep_len = np.zeros(num_envs, np.int64)
        self._obs = np.zeros((num_envs, 1, self.obs_dim), np.float32)
        self._ones = np.ones((num_envs, 1), bool)
        self._reset_copy(0, None)  # state() of many envs needs a reset first
        self.state_dim = int(self._state(0).size)
        self.state_is_obs = not callable(getattr(self.envs[0].unwrapped, "state", None))

    def observation_space(self, agent: str) -> gym.Space:
        return self._space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def _flat(self, obs: Any, what: str, i: int) -> np.ndarray:
        flat = (np.asarray(obs, np.float32).reshape(-1) if self._box
                else gym.spaces.flatten(self._space, obs).astype(np.float32, copy=False))
        self._check.finite(flat, what, i)
        self._check.contains(self._space, obs, what, i)
        return flat

    def _state(self, i: int) -> np.ndarray:
        fn = getattr(self.envs[i].unwrapped, "state", None)
        if callable(fn):
            return np.asarray(fn(), np.float32).reshape(-1)
        return self._obs[i, 0]

    def _reset_copy(self, i: int, seed: int | None) -> None:
        out = self.envs[i].reset(seed=seed)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise EnvError(f"env {self.name!r}: reset() must return (observation, info) as in Gymnasium >= 0.26; "
                           f"got {type(out).__name__}.")
        self._obs[i, 0] = self._flat(out[0], "reset()", i)
        self._ep_return[i], self._ep_len[i] = 0.0, 0

    def _states(self) -> np.ndarray | None:
        return np.stack([self._state(i) for i in range(self.num_envs)]) if self.want_state else None

    def reset(self, seed: int | None = None) -> VecObs:
        return self.reset_each([None if seed is None else seed + i for i in range(self.num_envs)])

    def reset_each(self, seeds: Sequence[int | None]) -> VecObs:
        _check_seeds(self, seeds)
        for i, s in enumerate(seeds):
            self._reset_copy(i, s)
        return VecObs(self._obs.copy(), self._ones, self._ones, None, self._states())

    def step(self, actions: np.ndarray) -> VecStep:
        # Runs once per env step for every copy: per-copy work stays in plain Python, and the
        # array checks are one pass each over all copies.
        n = self.num_envs
        acts = actions[:, 0].tolist() if self._discrete else actions[:, 0]
        rewards = np.empty((n, 1))
        term = np.zeros((n, 1), bool)
        trunc = np.zeros((n, 1), bool)
        end = np.zeros(n, bool)
        final_obs = self._obs  # rows are replaced below; only ended rows are read
        final_state = None
        infos: list[dict[str, dict]] = []
        episodes = []
        ended: list[int] = []
        new = np.empty_like(self._obs)
        checking = self._check.steps < SPACE_CHECK_STEPS
        agent = self.agents[0]
        for i, env in enumerate(self.envs):
            out = env.step(acts[i])
            if not (isinstance(out, tuple) and len(out) == 5):
                raise EnvError(f"env {self.name!r}: step() must return (obs, reward, terminated, truncated, info) "
                               f"as in Gymnasium >= 0.26; got a {type(out).__name__} of length "
                               f"{len(out) if isinstance(out, tuple) else '?'}.")
            obs, r, te, tr, info = out
            if checking or not self._vector_box:
                new[i, 0] = self._flat(obs, "step()", i)
            else:
                new[i, 0] = obs  # a 1-D Box row: cast to float32 on the copy
            if checking or not isinstance(r, (float, int)):  # numpy would store None as NaN, fail on a vector
                r = as_reward(r, self.name)
            rewards[i, 0] = r
            infos.append({agent: info})
            if te or tr:
                term[i, 0], trunc[i, 0], end[i] = bool(te), bool(tr) and not bool(te), True
                ended.append(i)
        # One float64 sum finds a NaN or inf anywhere (it cannot overflow from finite float32s);
        # only then the slower search names the copy.
        if not math.isfinite(new.sum(dtype=np.float64)):
            bad = int(np.flatnonzero(~np.isfinite(new).all(axis=(1, 2)))[0])
            self._check.finite(new[bad], "step()", bad)
        self._ep_return += rewards[:, 0]
        self._ep_len += 1
        for i in ended:
            episodes.append((float(self._ep_return[i]), int(self._ep_len[i]), i))
        self._check.steps += 1
        if not math.isfinite(rewards.sum()):
            self._check.rewards(rewards)
        if ended:
            final_obs = new.copy()
            if self.want_state:
                final_state = np.zeros((n, self.state_dim or 0), np.float32)
            for i in ended:
                if final_state is not None:
                    self._obs[i, 0] = new[i, 0]
                    final_state[i] = self._state(i)
                self._reset_copy(i, None)
                new[i, 0] = self._obs[i, 0]
        else:
            final_obs = new
        self._obs = new
        final_raw = {i: {agent: final_obs[i, 0]} for i in ended}
        return VecStep(new, self._ones, self._ones, None, self._states(), rewards=rewards, terminated=term,
                       truncated=trunc, final_obs=final_obs, final_state=final_state, episode_end=end,
                       infos=infos, episodes=episodes, final_raw=final_raw)

    def raw_obs(self, i: int) -> dict[str, Any]:
        return {self.agents[0]: self._obs[i, 0]}

    def copy_env(self, i: int) -> Any:
        return self.envs[i]

    def close(self) -> None:
        for env in self.envs:
            env.close()


@dataclass
class _StepOut:
    """What one :meth:`AdapterCopies.step` collects over its copies, before the view is built."""
    rewards: np.ndarray
    term: np.ndarray
    trunc: np.ndarray
    end: np.ndarray
    episodes: list = field(default_factory=list)
    ended_rows: list = field(default_factory=list)  # (copy, final obs rows, final state or None)
    final_raw: dict = field(default_factory=dict)


class AdapterCopies(VectorMultiAgentEnv):
    """``num_envs`` copies of a dict-keyed multi-agent env (:mod:`hdppo.envs.adapters`), turned
    into arrays. Slots are the env's ``possible_agents`` (or its agents at the first reset)."""

    def __init__(self, make_adapter: Callable[[], Any], num_envs: int, name: str | None = None):
        self.num_envs = num_envs
        self.copies = [make_adapter() for _ in range(num_envs)]
        first = self.copies[0]
        self.name = name or first.name
        # The env's own, then those an adapter adds (an opponents adapter's battle outcome).
        self.episode_metrics = tuple(dict.fromkeys(declared_episode_metrics(getattr(first, "env", first))
                                                   + tuple(getattr(first, "episode_metrics", ()))))
        self.set_features = declared_set_features(getattr(first, "env", first))
        self._check = _Checker(self.name)
        self._declared = list(first.possible_agents or [])
        self.keep_raw = True  # raw observation dicts, for 'module:function' views (the sampler turns it off otherwise)
        self.agents = list(self._declared)
        self._ready = False

    # Slots and sizes are known once the first copy has been reset (RLlib envs may name their
    # agents only then).
    def _setup(self, first_obs: dict[str, Any]) -> None:
        first = self.copies[0]
        if not self.agents:
            self.agents = list(dict.fromkeys([*first.agents, *first_obs]))
        self.slot = {a: k for k, a in enumerate(self.agents)}
        self._spaces = {a: first.observation_space(a) for a in self.agents}
        dims = {a: flat_dims(s) for a, s in self._spaces.items()}
        blind = [a for a, (d, k) in dims.items() if k and not d]
        if blind:
            raise EnvError(f"env {self.name!r}: the observation of {blind[0]!r} is a Dict holding only its "
                           "action_mask, so its policy would see nothing. Put what the agent observes beside the "
                           "mask (under 'observation', or under keys of your own: every key but action_mask is "
                           "the policy's input).")
        for agent, (_, k) in dims.items():  # a mask of another width than the actions it masks
            act = first.action_space(agent)
            want = (int(act.n) if isinstance(act, gym.spaces.Discrete) else int(np.sum(act.nvec))
                    if isinstance(act, gym.spaces.MultiDiscrete) else None)
            if k and want is not None and k != want:
                of = "logits (sum of nvec)" if isinstance(act, gym.spaces.MultiDiscrete) else "actions"
                raise EnvError(f"env {self.name!r}: the action_mask of {agent!r} has {k} entries but its action "
                               f"space {act} has {want} {of}; give one mask entry per action (a MultiDiscrete's "
                               "components side by side).")
        self.obs_dim = max(d for d, _ in dims.values())
        self.mask_dim = max(k for _, k in dims.values())
        self._masked = {a for a, (_, k) in dims.items() if k}
        self._policy_spaces = {a: policy_space(self._spaces[a]) for a in self._masked}  # type: ignore[arg-type]
        self._box = {a for a, s in self._spaces.items() if isinstance(s, gym.spaces.Box)}
        self._dims = {a: d for a, (d, _) in dims.items()}
        self._uniform = len(self._box) == len(self.agents) and len(set(self._dims.values())) == 1
        self._act_discrete = isinstance(first.action_space(self.agents[0]), gym.spaces.Discrete)
        # Agents with Discrete action spaces of different sizes (a game's unit types) share one
        # policy over the largest: each agent's actions beyond its own are masked out.
        sizes = {a: first.action_space(a) for a in self.agents}
        ns = [int(sp.n) for sp in sizes.values() if isinstance(sp, gym.spaces.Discrete) and int(sp.start) == 0]
        self._padded: gym.spaces.Discrete | None = None
        base_mask = None
        if len(ns) == len(self.agents) and len(set(ns)) > 1:
            self._padded = gym.spaces.Discrete(max(ns))
            self.mask_dim = max(ns)
            base_mask = np.zeros((len(self.agents), self.mask_dim), np.float32)
            for k, sp in enumerate(sizes.values()):
                base_mask[k, : int(sp.n)] = 1.0
        try:
            self.state_dim = int(np.asarray(first.state()).size)
        except Exception:  # noqa: BLE001 - an env without state(): asked for only by layers that need it
            self.state_dim = None
        n, a = self.num_envs, len(self.agents)
        self._obs = np.zeros((n, a, self.obs_dim), np.float32)
        self._masks = np.ones((n, a, self.mask_dim), np.float32) if self.mask_dim else None
        if base_mask is not None:
            self._masks[:] = base_mask
        self._alive = np.zeros((n, a), bool)
        self._acting = np.zeros((n, a), bool)
        self._ep_return = np.zeros(n)
        self._ep_len = np.zeros(n, np.int64)
        self._raw: list[dict[str, Any]] = [{} for _ in range(n)]
        self._live: list[list[str]] = [[] for _ in range(n)]
        self._live_slots: list[list[int]] = [[] for _ in range(n)]
        self._acting_slots: list[list[int]] = [[] for _ in range(n)]
        self._acting_names: list[list[str]] = [[] for _ in range(n)]
        # Every live agent acts (a parallel env) unless the adapter says otherwise (turn-based AEC).
        self._acting_is_live = getattr(type(first), "acting", None) is MultiAgentAdapter.acting
        self._ready = True

    def observation_space(self, agent: str) -> gym.Space:
        return self.copies[0].observation_space(agent)

    def action_space(self, agent: str) -> gym.Space:
        """The agent's action space; the largest one where Discrete sizes differ (see ``_setup``)."""
        padded = getattr(self, "_padded", None)
        return padded if padded is not None else self.copies[0].action_space(agent)

    def _slots(self, agents: Any) -> list[int]:
        try:
            return [self.slot[a] for a in agents]
        except KeyError:
            bad = next(a for a in agents if a not in self.slot)
            raise EnvError(f"env {self.name!r}: agent {bad!r} appeared that was not among its agents at the first "
                           f"reset ({', '.join(self.agents)}). Declare every agent the env can create in its "
                           "possible_agents.") from None

    def _write(self, i: int, obs: dict[str, Any], what: str) -> None:
        """Copy ``obs`` (a dict of the agents that returned one) into row ``i``."""
        if not obs:
            return
        slots = self._slots(obs)
        if self._check.steps < SPACE_CHECK_STEPS:
            for agent, o in obs.items():
                if agent in self._box:
                    self._check.finite(np.asarray(o, np.float32), what, i)
                self._check.contains(self._spaces[agent], o, what, i, agent)
        if self._uniform:
            # Every agent a Box of one size (the common case): one stack, one check, one copy.
            flat = np.stack(list(obs.values())).reshape(len(slots), -1)
            self._check.finite(flat, what, i)
            self._obs[i, slots] = flat
        else:
            for (agent, o), s in zip(obs.items(), slots):
                space = self._spaces[agent]
                if agent in self._masked:
                    flat = policy_values(space, o, self._policy_spaces[agent])  # type: ignore[arg-type]
                    m = np.asarray(o["action_mask"], np.float32).reshape(-1)
                    self._masks[i, s, : m.size] = m  # type: ignore[index]
                elif agent in self._box:
                    flat = np.asarray(o, np.float32).reshape(-1)
                else:
                    flat = gym.spaces.flatten(space, o)
                self._obs[i, s, : self._dims[agent]] = flat
                self._check.finite(self._obs[i, s], what, i)
        if self.keep_raw:
            self._raw[i].update(obs)

    def _refresh_masks(self, i: int) -> None:
        c = self.copies[i]
        self._alive[i] = False
        self._acting[i] = False
        live = c.agents
        live_slots = self._slots(live)
        acting_slots: list[int] = []
        if live:
            self._alive[i, live_slots] = True
            acting = live if self._acting_is_live else c.acting
            if acting:
                acting_slots = sorted(self._slots(acting))
                self._acting[i, acting_slots] = True
        self._obs[i, ~self._alive[i]] = 0.0
        # What the next step needs without asking the env again: who is alive (and in which
        # slots), and who acts, in slot order.
        self._live[i], self._live_slots[i] = list(live), live_slots  # a copy: an env may edit its list in place
        self._acting_slots[i] = acting_slots
        self._acting_names[i] = [self.agents[s] for s in acting_slots]

    def _reset_copy(self, i: int, seed: int | None) -> None:
        obs = self.copies[i].reset(seed=seed)
        if not self._ready:
            self._setup(obs)
        self._obs[i] = 0.0
        self._raw[i] = {}
        self._write(i, obs, "reset()")
        self._refresh_masks(i)
        self._check_observed(i, obs, "reset()")
        self._ep_return[i], self._ep_len[i] = 0.0, 0

    def _check_observed(self, i: int, obs: dict, what: str) -> None:
        """Every agent that acts next has an observation from this call: one left out would act
        on its last one (or zeros), and train on it, without a word."""
        missing = [a for a in self._acting_names[i] if a not in obs]
        if missing:
            raise EnvError(f"env {self.name!r}: {what} returned no observation for {', '.join(map(repr, missing))}, "
                           f"still in env.agents (copy {i}). Return an observation for every agent in env.agents, "
                           "and take an agent out of env.agents once it is terminated or truncated.")

    def _states(self) -> np.ndarray | None:
        if not self.want_state:
            return None
        return np.stack([np.asarray(c.state(), np.float32).reshape(-1) for c in self.copies])

    @staticmethod
    def _target(copy: Any) -> Any:
        """The user's env inside an adapter (a Gymnasium env unwrapped), whose methods we call."""
        return getattr(copy, "unwrapped", None) or getattr(copy, "env", None) or copy

    @property
    def takes_commands(self) -> bool:
        return callable(getattr(self._target(self.copies[0]), "apply_command", None))

    def apply_command(self, layer: str, copies: np.ndarray, lanes: np.ndarray, actions: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray | None] | None:
        """Each copy's decision handed to its env's ``apply_command(layer, lane, action)`` (see the
        module docstring); the observations it returns replace those of their agents."""
        if not self.takes_commands:
            return super().apply_command(layer, copies, lanes, actions)
        changed = False
        for i, lane, a in zip(np.asarray(copies).tolist(), np.asarray(lanes).tolist(), np.asarray(actions)):
            a = a.reshape(-1)
            one_index = a.size == 1 and a.dtype.kind in "iu"  # a Discrete decision: its index, as an int
            obs = self._target(self.copies[i]).apply_command(layer, lane, int(a[0]) if one_index else a.copy())
            if obs:
                self._write(i, obs, "apply_command()")
                changed = True
        return (self._obs.copy(), self._states()) if changed else None

    def _view(self) -> VecObs:
        return VecObs(self._obs.copy(), self._alive.copy(), self._acting.copy(),
                      self._masks.copy() if self._masks is not None else None, self._states())

    def reset(self, seed: int | None = None) -> VecObs:
        return self.reset_each([None if seed is None else seed + i for i in range(self.num_envs)])

    def reset_each(self, seeds: Sequence[int | None]) -> VecObs:
        _check_seeds(self, seeds)
        for i, s in enumerate(seeds):
            self._reset_copy(i, s)
        return self._view()

    def step(self, actions: np.ndarray) -> VecStep:
        n, a = self.num_envs, len(self.agents)
        out = _StepOut(np.zeros((n, a)), np.zeros((n, a), bool), np.zeros((n, a), bool), np.zeros(n, bool))
        rewards = out.rewards
        infos: list[dict[str, dict]] = []
        # A *quiet* copy (the same agents alive and acting as before the step, none of them ending,
        # every observation a Box of one size, the first steps' space checks over) is written after
        # the loop with the others: one stack, one finiteness sum and one scatter for all copies,
        # where a copy on its own costs a dozen small numpy calls (a fifth of simple_spread's step).
        quiet_ok = self._uniform and self._check.steps >= SPACE_CHECK_STEPS
        q_copies: list[int] = []   # one entry per quiet copy
        q_rows: list[int] = []     # per written observation: its copy, its slot
        q_slots: list[int] = []
        q_obs: list[Any] = []
        q_rew: list[float] = []
        rows = actions.tolist() if self._act_discrete else None
        for i, c in enumerate(self.copies):
            names, slots = self._acting_names[i], self._acting_slots[i]
            if rows is not None:
                row = rows[i]
                act_dict = {name: row[s] for name, s in zip(names, slots)}
            else:
                act_dict = dict(zip(names, list(actions[i, slots])))
            obs, rew, te, tr, info = c.step(act_dict)
            infos.append(info)
            if quiet_ok and not any(te.values()) and not any(tr.values()):
                live = c.agents
                if (live == self._live[i] and list(obs) == live and list(rew) == live
                        and (self._acting_is_live or sorted(self.slot[x] for x in c.acting) == slots)):
                    q_copies.append(i)
                    q_rows.extend([i] * len(live))
                    q_slots.extend(self._live_slots[i])
                    q_obs.extend(obs.values())
                    q_rew.extend(rew.values())
                    if self.keep_raw:
                        self._raw[i].update(obs)
                    continue
            self._step_copy(i, c, obs, rew, te, tr, out)
        if q_copies:
            block = np.stack(q_obs).reshape(len(q_rows), -1)
            if not math.isfinite(block.sum(dtype=np.float64)):
                bad = int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
                self._check.finite(block[bad], "step()", q_rows[bad])
            self._obs[q_rows, q_slots] = block
            rewards[q_rows, q_slots] = q_rew
            self._ep_return[q_copies] += rewards[q_copies].sum(axis=1)
            self._ep_len[q_copies] += 1
        self._check.steps += 1
        self._check.rewards(rewards)
        view = self._view()
        final_obs = view.obs.copy() if out.ended_rows else view.obs
        final_state = None
        if self.want_state and out.end.any():
            final_state = view.state.copy()  # type: ignore[union-attr]
        for i, rows_i, state in out.ended_rows:
            final_obs[i] = rows_i
            if state is not None:
                final_state[i] = state  # type: ignore[index]
        return VecStep(view.obs, view.alive, view.acting, view.masks, view.state, rewards=rewards,
                       terminated=out.term, truncated=out.trunc, final_obs=final_obs, final_state=final_state,
                       episode_end=out.end, infos=infos, episodes=out.episodes, final_raw=out.final_raw)

    def _step_copy(self, i: int, c: Any, obs: dict, rew: dict, te: dict, tr: dict, out: _StepOut) -> None:
        """One copy's step results written one by one: agents appeared, died or ended, the turn
        passed, or the observations are not one Box size (see ``step``)."""
        rewards, term, trunc = out.rewards, out.term, out.trunc
        before_alive = self._alive[i].copy()
        self._write(i, obs, "step()")
        if rew:
            rewards[i, self._slots(rew)] = list(rew.values())
        if any(te.values()):
            term[i, self._slots([k for k, v in te.items() if v])] = True
        if any(tr.values()):
            trunc[i, self._slots([k for k, v in tr.items() if v])] = True
            trunc[i] &= ~term[i]
        r_sum = float(rewards[i].sum())
        self._ep_return[i] += r_sum
        self._ep_len[i] += 1
        if not c.agents:
            out.end[i] = True
            out.episodes.append((float(self._ep_return[i]), int(self._ep_len[i]), i))
            # The last view of every agent alive before this step (the ones that just ended included).
            final = np.where(before_alive[:, None], self._obs[i], 0.0).astype(np.float32)
            state = np.asarray(c.state(), np.float32).reshape(-1) if self.want_state else None
            out.ended_rows.append((i, final, state))
            out.final_raw[i] = dict(self._raw[i])
            self._reset_copy(i, None)
            return
        ended = term[i] | trunc[i]
        if ended.any():
            out.ended_rows.append((i, self._obs[i].copy(), None))
            out.final_raw[i] = dict(self._raw[i])
        self._refresh_masks(i)
        self._check_observed(i, obs, "step()")
        if self.keep_raw and ended.any():
            for agent in list(self._raw[i]):
                if not self._alive[i, self.slot[agent]]:
                    del self._raw[i][agent]

    def raw_obs(self, i: int) -> dict[str, Any]:
        return self._raw[i]

    def copy_env(self, i: int) -> Any:
        return self.copies[i]

    def close(self) -> None:
        for c in self.copies:
            c.close()


class GymnasiumVector(VectorMultiAgentEnv):
    """A ``gymnasium.vector.VectorEnv`` (one slot), stepped with one call for all copies. It must
    reset in the same step (``autoreset_mode=AutoresetMode.SAME_STEP``; its final observations
    then come in ``infos['final_obs']``)."""

    def __init__(self, venv: Any, name: str = "env"):
        from .adapters import SINGLE_AGENT

        mode = venv.metadata.get("autoreset_mode")
        same = getattr(gym.vector.AutoresetMode, "SAME_STEP", None)
        if mode not in (same, getattr(same, "value", None)):
            raise EnvError(f"env {name!r}: a Gymnasium VectorEnv must reset in the same step (its autoreset_mode "
                           f"is {mode}): with NEXT_STEP every episode end adds a step that must not be learned from. "
                           "Build it with autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP (SyncVectorEnv(fns, "
                           "autoreset_mode=...), AsyncVectorEnv likewise; through gymnasium.make_vec, "
                           "vector_kwargs={'autoreset_mode': ...}); an env.id is made that way already.")
        self.venv, self.name = venv, name
        self.episode_metrics = declared_episode_metrics(venv)  # (its infos are not per episode: none logged)
        self.num_envs = int(venv.num_envs)
        self.agents = [SINGLE_AGENT]
        self._space = venv.single_observation_space
        self._action_space = venv.single_action_space
        self.obs_dim = int(gym.spaces.flatdim(self._space))
        self.state_dim = self.obs_dim
        self.state_is_obs = True
        self._box = isinstance(self._space, gym.spaces.Box)
        self._check = _Checker(name)
        self._ones = np.ones((self.num_envs, 1), bool)
        self._ep_return = np.zeros(self.num_envs)
        self._ep_len = np.zeros(self.num_envs, np.int64)

    def observation_space(self, agent: str) -> gym.Space:
        return self._space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def _flat(self, obs: Any) -> np.ndarray:
        if self._box:
            out = np.asarray(obs, np.float32).reshape(self.num_envs, 1, -1)
        else:
            out = np.stack([gym.spaces.flatten(self._space, o) for o in gym.vector.utils.iterate(
                self.venv.observation_space, obs)]).astype(np.float32).reshape(self.num_envs, 1, -1)
        self._check.finite(out, "the vector env", None)
        return out

    def reset(self, seed: int | None = None) -> VecObs:
        obs, _ = self.venv.reset(seed=seed)
        self._ep_return[:], self._ep_len[:] = 0.0, 0
        flat = self._flat(obs)
        return VecObs(flat, self._ones, self._ones, None, flat[:, 0] if self.want_state else None)

    def step(self, actions: np.ndarray) -> VecStep:
        obs, r, te, tr, info = self.venv.step(actions[:, 0])
        flat = self._flat(obs)
        r = np.asarray(r, np.float64)
        te, tr = np.asarray(te, bool), np.asarray(tr, bool) & ~np.asarray(te, bool)
        end = te | tr
        self._check.steps += 1
        self._check.rewards(r[:, None])
        self._ep_return += r
        self._ep_len += 1
        episodes = [(float(self._ep_return[i]), int(self._ep_len[i]), int(i)) for i in np.flatnonzero(end)]
        final = flat
        if end.any():
            final = flat.copy()
            fo = info.get("final_obs")
            for i in np.flatnonzero(end):
                if fo is not None and fo[i] is not None:
                    final[i, 0] = (np.asarray(fo[i], np.float32).reshape(-1) if self._box
                                   else gym.spaces.flatten(self._space, fo[i]))
            self._ep_return[end], self._ep_len[end] = 0.0, 0
        state = flat[:, 0] if self.want_state else None
        return VecStep(flat, self._ones, self._ones, None, state, rewards=r[:, None], terminated=te[:, None],
                       truncated=tr[:, None], final_obs=final, final_state=final[:, 0] if self.want_state else None,
                       episode_end=end, infos=None, episodes=episodes)

    def close(self) -> None:
        self.venv.close()


def check_array(name: str, where: str, got: Any, shape: tuple, kind: str) -> None:
    """An :class:`EnvError` naming the env and the field unless ``got`` is an array of ``shape``,
    of bools (``kind`` "bool") or of finite numbers ("finite")."""
    arr = np.asarray(got) if got is not None else None
    if arr is None or arr.shape != shape:
        raise EnvError(f"env {name!r}: {where} has shape {None if arr is None else arr.shape}, expected {shape} "
                       "([copies, agent slots, ...]; see hdppo.envs.vector).")
    if kind == "bool" and arr.dtype != bool:
        raise EnvError(f"env {name!r}: {where} is {arr.dtype}, expected bool.")
    if kind == "finite" and not np.isfinite(arr).all():
        raise EnvError(f"env {name!r}: {where} holds NaN or inf.")


def check_contract(venv: VectorMultiAgentEnv, name: str, where: str, out: VecObs | VecStep,
                   alive_before: np.ndarray | None = None) -> None:
    """Every array of a batched env's ``reset``/``step`` result against the contract above, and
    what the arrays say against each other: acting slots alive with a legal action, observations
    inside the declared spaces, and (given ``alive_before``, the ``alive`` of the step's input) a
    copy's end closing every agent it had, no reward for an agent that was already gone."""
    n, a, d = int(venv.num_envs), len(venv.agents), int(venv.obs_dim)
    m = int(getattr(venv, "mask_dim", 0) or 0)
    check_array(name, f"{where} obs", out.obs, (n, a, d), "finite")
    check_array(name, f"{where} alive", out.alive, (n, a), "bool")
    step = isinstance(out, VecStep)
    if step:
        check_array(name, f"{where} rewards", out.rewards, (n, a), "finite")
        for f in ("acting", "terminated", "truncated"):
            check_array(name, f"{where} {f}", getattr(out, f), (n, a), "bool")
        check_array(name, f"{where} episode_end", out.episode_end, (n,), "bool")
        if np.asarray(out.episode_end).any() or np.asarray(out.terminated).any() or np.asarray(out.truncated).any():
            check_array(name, f"{where} final_obs", out.final_obs, (n, a, d), "finite")
    alive = np.asarray(out.alive)
    acting = np.asarray(out.acting) if out.acting is not None else alive
    if not step:
        check_array(name, f"{where} acting", acting, (n, a), "bool")
    _check_pair(name, where, venv.agents, acting & ~alive,
                "is acting but not alive (acting means alive and deciding this step)")
    if m:
        check_array(name, f"{where} masks", out.masks, (n, a, m), "finite")
        _check_pair(name, where, venv.agents, acting & ~(np.asarray(out.masks) > 0).any(-1),
                    "is acting but its mask allows no action, so a policy can only pick an illegal one: leave "
                    "a legal action (a no-op), or set acting False while it cannot act")
    _check_observed_spaces(venv, name, where, np.asarray(out.obs), alive)
    if step and alive_before is not None:
        end = np.asarray(out.episode_end)[:, None]
        closed = np.asarray(out.terminated) | np.asarray(out.truncated)
        _check_pair(name, where, venv.agents, alive_before & end & ~closed,
                    "was alive when its copy's episode ended, but is neither terminated nor truncated: set "
                    "truncated where a time limit cut the episode (hdppo bootstraps from it), terminated where "
                    "the agent's task ended; with neither it is learned as a terminal state")
        gone = ~alive_before & (np.asarray(out.rewards) != 0)
        _check_pair(name, where, venv.agents, gone,
                    "was not alive before the step but is given a reward: it has no open transition, so the "
                    "reward would be dropped. Pay it on the step the agent ends (its last transition)")
    if getattr(venv, "want_state", False):
        s = int(venv.state_dim or 0)
        check_array(name, f"{where} state (state_dim {s}: an upper layer reads it)", out.state, (n, s), "finite")
        if step and np.asarray(out.episode_end).any():
            check_array(name, f"{where} final_state", out.final_state, (n, s), "finite")


def _check_pair(name: str, where: str, agents: Sequence[str], bad: np.ndarray, what: str) -> None:
    """An :class:`EnvError` naming the first (copy, slot) where ``bad`` holds."""
    if bad.any():
        c, k = (int(v) for v in np.argwhere(bad)[0])
        raise EnvError(f"env {name!r}: {where}: slot {k} ({agents[k]!r}) of copy {c} {what} "
                       f"({int(bad.sum())} such entries in this result; see hdppo.envs.vector).")


def _observed_bounds(venv: VectorMultiAgentEnv, name: str, width_of: int) -> list[tuple[int, str, int, np.ndarray, np.ndarray]]:
    """(slot, agent, flat width, low, high) of each agent whose declared observation space is a
    Box with a finite bound; an :class:`EnvError` where a space is wider than ``obs_dim``. Read
    once per env (the spaces are fixed; battle has 162 agents)."""
    cached = getattr(venv, "_hdppo_obs_bounds", None)
    if cached is not None:
        return cached
    bounds = []
    for k, agent in enumerate(venv.agents):
        space = venv.observation_space(agent)
        if isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces:
            space = policy_space(space)  # the masks travel apart, in VecObs.masks
            if space is None:
                continue
        try:
            width = int(gym.spaces.flatdim(space))
        except (ValueError, NotImplementedError, TypeError):
            continue  # a space with no flat form (Graph, Sequence): the env flattens it itself
        if width > width_of:
            raise EnvError(f"env {name!r}: agent {agent!r} declares an observation space of {width} values "
                           f"({space}) but obs_dim is {width_of}. Set obs_dim to the widest agent's flat size.")
        if not isinstance(space, gym.spaces.Box):
            continue
        low, high = np.asarray(space.low, np.float64).reshape(-1), np.asarray(space.high, np.float64).reshape(-1)
        if not (np.isinf(low).all() and np.isinf(high).all()):
            bounds.append((k, agent, width, low, high))
    try:
        venv._hdppo_obs_bounds = bounds  # type: ignore[attr-defined]
    except AttributeError:  # a class with __slots__: read again next time
        pass
    return bounds


def _check_observed_spaces(venv: VectorMultiAgentEnv, name: str, where: str, obs: np.ndarray,
                           alive: np.ndarray) -> None:
    """Each agent's declared observation space: no wider than ``obs_dim``, and for a Box its
    bounds holding the alive slots' observations (the rest of the row is padding)."""
    for k, agent, width, low, high in _observed_bounds(venv, name, obs.shape[-1]):
        if not alive[:, k].any():
            continue
        x = obs[alive[:, k], k, :width].astype(np.float64)
        tol = 1e-5 * (1.0 + np.abs(x))  # the float32 cast of a value on the bound
        out = (x < low - tol) | (x > high + tol)
        if out.any():
            row, j = (int(v) for v in np.argwhere(out)[0])
            c = int(np.flatnonzero(alive[:, k])[row])
            raise EnvError(f"env {name!r}: {where}: agent {agent!r} of copy {c}: observation value {j} is "
                           f"{x[row, j]:g}, outside its observation_space's bounds [{low[j]:g}, {high[j]:g}]. "
                           "Return observations inside the declared space, or declare the bounds it really has.")


def check_episodes(name: str, where: str, res: VecStep) -> None:
    """Copies whose episode ended are reported in ``VecStep.episodes``: training's returns and the
    evaluation's episode count come from it (an env that never fills it made the evaluation wait
    for episodes that never came)."""
    ended = np.flatnonzero(np.asarray(res.episode_end))
    if len(ended) and len(res.episodes or ()) < len(ended):
        raise EnvError(f"env {name!r}: {where} set episode_end for copies {ended.tolist()} but VecStep.episodes "
                       f"lists {len(res.episodes or ())}: append (return, length, copy) for every copy whose episode "
                       "ended (hdppo counts episodes and their returns from it).")


def contract_checked(venv: VectorMultiAgentEnv, name: str) -> VectorMultiAgentEnv:
    """A user's batched env (``env.type: vector``) as training steps it: its results checked as
    ``hdppo check-env`` checks them for the first SPACE_CHECK_STEPS steps, ``episodes`` on every
    step (cheap, and an episode may first end late). The same object, its ``reset``/``step``
    wrapped, so that every attribute the sampler reads or sets stays the env's own."""
    reset, step = venv.reset, venv.step
    steps = [0]
    alive: list[np.ndarray | None] = [None]   # the last result's alive (copied: an env may reuse its buffers)

    def checked_reset(seed: int | None = None) -> VecObs:
        out = reset(seed=seed)
        check_contract(venv, name, "reset()", out)
        alive[0] = np.array(out.alive, bool)
        return out

    def checked_step(actions: np.ndarray) -> VecStep:
        res = step(actions)
        steps[0] += 1
        if steps[0] <= SPACE_CHECK_STEPS:
            check_contract(venv, name, f"step() #{steps[0]}", res, alive[0])
            alive[0] = np.array(res.alive, bool) if steps[0] < SPACE_CHECK_STEPS else None
        check_episodes(name, f"step() #{steps[0]}", res)
        return res

    venv.reset, venv.step = checked_reset, checked_step  # type: ignore[method-assign]
    return venv


def make_vector_env(env_type: str, env_id: str | None, entry_point: str | None, kwargs: dict,
                    max_episode_steps: int | None, num_envs: int, seed: int | None = None,
                    opponents: dict | None = None) -> VectorMultiAgentEnv:
    """``num_envs`` copies of the configured env as one :class:`VectorMultiAgentEnv`; ``opponents``
    (``env.opponents`` as a dict) plays some agents inside each copy (:mod:`hdppo.envs.opponents`)."""
    from .adapters import GymnasiumAdapter, make_multi_agent
    from .loading import call_factory, make_gym_env, resolve_entry_point
    from .opponents import with_opponents

    if opponents and env_type not in ("pettingzoo", "rllib"):
        raise EnvError(f"env.opponents needs a dict-keyed multi-agent env (env.type pettingzoo or rllib); this one is "
                       f"{env_type!r}. A natively vectorised env plays its opponents itself (through its kwargs).")

    name = env_id or entry_point or "env"
    if env_type == "gymnasium":
        make = lambda: make_gym_env(env_id, entry_point, kwargs, max_episode_steps)  # noqa: E731
        first = make()
        space = first.observation_space
        first.close()
        if isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces:
            # Checked like a batched env for its first steps: an all-zero mask would go unseen.
            return contract_checked(AdapterCopies(lambda: GymnasiumAdapter(make(), name), num_envs, name), name)
        return GymnasiumCopies(make, num_envs, name)
    if env_type in ("pettingzoo", "rllib"):
        return contract_checked(AdapterCopies(lambda: with_opponents(make_multi_agent(
            env_type, env_id, entry_point, kwargs, max_episode_steps), opponents), num_envs, name), name)
    if env_type == "gymnasium_vector":
        same = gym.vector.AutoresetMode.SAME_STEP
        if entry_point is not None:
            venv = call_factory(resolve_entry_point(entry_point), entry_point, {"num_envs": num_envs, **kwargs},
                                how="a 'gymnasium_vector' entry_point is called as make(num_envs=, **env.kwargs)")
        else:
            try:
                venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                                    vector_kwargs={"autoreset_mode": same},
                                    **({"max_episode_steps": max_episode_steps} if max_episode_steps else {}), **kwargs)
            except (gym.error.Error, TypeError) as exc:
                raise EnvError(f"env {name!r} could not be made as a Gymnasium vector env ({exc}); an id goes to "
                               "gymnasium.make_vec. Check env.id and env.kwargs.") from None
        if not isinstance(venv, gym.vector.VectorEnv):
            raise EnvError(f"env {name!r}: type 'gymnasium_vector' but the factory returned {type(venv).__name__}, "
                           "not a gymnasium.vector.VectorEnv. Return one, or use env.type 'gymnasium'.")
        if int(venv.num_envs) != num_envs:  # the workers' copies are counted from what they asked for
            venv.close()
            raise EnvError(f"env {name!r}: asked for {num_envs} copies, the factory made {venv.num_envs}. Make "
                           "num_envs copies (the factory is called as make(num_envs=, **env.kwargs)).")
        return GymnasiumVector(venv, name)
    if env_type == "vector":
        if entry_point is None:
            raise EnvError("env.type 'vector' needs env.entry_point: a factory make(num_envs, seed, **kwargs) "
                           "returning an hdppo.envs.vector.VectorMultiAgentEnv.")
        venv = call_factory(resolve_entry_point(entry_point), entry_point,
                            {"num_envs": num_envs, "seed": seed, **kwargs},
                            how="a 'vector' entry_point is called as make(num_envs=, seed=, **env.kwargs)")
        missing = [a for a in ("num_envs", "agents", "obs_dim", "reset", "step") if not hasattr(venv, a)]
        if missing:
            raise EnvError(f"env {name!r}: type 'vector' but the factory's {type(venv).__name__} lacks "
                           f"{', '.join(missing)}; implement hdppo.envs.vector.VectorMultiAgentEnv.")
        if int(venv.num_envs) != num_envs:
            raise EnvError(f"env {name!r}: asked for {num_envs} copies, the factory made {venv.num_envs}.")
        return contract_checked(venv, name)
    raise EnvError(f"env.type {env_type!r} is not one of gymnasium, pettingzoo, rllib, gymnasium_vector, vector.")
