"""Opponents played inside the env: the config's ``env.opponents``.

Some of a multi-agent env's agents (a team) are played by a fixed policy, random or scripted,
and the learning layers see only the others, as if the env had only those agents::

    env:
      type: pettingzoo
      id: magent2.environments.combined_arms_v6
      opponents: {agents: blue, policy: random}      # every agent whose name starts with "blue"

| field | meaning |
|---|---|
| ``agents`` | a name prefix (``blue``) or a list of agent names: the agents the policy plays |
| ``policy`` | ``random`` (uniform over each agent's action space, legal actions only where the observation carries an ``action_mask``) or ``package.module:function`` |
| ``alive`` | optional ``package.module:function``, ``fn(env) -> names of the agents still standing`` after a step; default: the agents not terminated this episode. For games that terminate every agent when the game ends (MAgent2) |

A ``module:function`` policy is called once per env step with the opponents that act then::

    actions = fn(observations, env, rng)    # -> {agent: action} for the agents in observations

``observations``: the acting opponents' current observations (agent -> observation as the env
gives it); ``env``: the :class:`hdppo.envs.adapters.MultiAgentAdapter` of the env, with
``action_space(agent)``, ``state()``, ``agents`` and ``env`` (the env object the factory
made, for what a script reads from the game itself); ``rng``: a ``numpy.random.Generator``
seeded from the env's reset seed. An opponent the policy leaves out takes a random action.

It works for every dict-keyed env (``env.type`` pettingzoo, AEC included, or rllib): in a
turn-based game the opponents' turns are played inside ``step`` until a learner is to move,
their rewards summed for the learners. Every learner's info carries ``learners_alive`` and
``opponents_alive``, the agents of each side still standing after the step (a battle's outcome
at its last step; see ``alive``). With ``alive`` given, also ``win`` (1.0 when more learners than
opponents stand), and the three are charted per episode (``episode/win``, ...). ``state()`` is the env's, all agents included.
"""
from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from .adapters import MultiAgentAdapter
from .errors import ConfigError, EnvError

RANDOM = "random"
OUTCOME_METRICS = ("win", "learners_alive", "opponents_alive")  # charted per episode when env.opponents.alive is set
OpponentPolicy = Callable[[dict[str, Any], MultiAgentAdapter, np.random.Generator], dict[str, Any]]


def random_action(space: gym.Space, obs: Any, rng: np.random.Generator) -> Any:
    """A uniform action of ``space``; among the legal ones where ``obs`` has an ``action_mask``."""
    mask = obs.get("action_mask") if isinstance(obs, dict) else None
    if isinstance(space, gym.spaces.Discrete):
        if mask is not None:
            legal = np.flatnonzero(np.asarray(mask).reshape(-1))
            if len(legal):
                return int(space.start + rng.choice(legal))
        return int(space.start + rng.integers(space.n))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return (space.start + rng.integers(0, space.nvec)).astype(space.dtype)
    if isinstance(space, gym.spaces.Box) and np.isfinite(space.low).all() and np.isfinite(space.high).all():
        return rng.uniform(space.low, space.high).astype(space.dtype)
    space.seed(int(rng.integers(2**31)))
    return space.sample()


def random_policy(observations: dict[str, Any], env: MultiAgentAdapter, rng: np.random.Generator) -> dict[str, Any]:
    """``policy: random``: each opponent a uniform (legal) action."""
    return {a: random_action(env.action_space(a), o, rng) for a, o in observations.items()}


def resolve_alive(path: str, field: str = "env.opponents.alive") -> Callable[[MultiAgentAdapter], Any]:
    """The ``fn(env) -> standing agents`` a ``package.module:function`` names; :class:`ConfigError` naming ``field``."""
    from .loading import import_object

    if ":" not in path:
        raise ConfigError(f"{field} {path!r}: give 'package.module:function', called as fn(env) -> the names of the "
                          "agents still standing.")
    fn = import_object(path, field)
    if not callable(fn):
        raise ConfigError(f"{field} {path!r} is a {type(fn).__name__}, not a function.")
    return fn


def resolve_policy(policy: str, field: str = "env.opponents.policy") -> OpponentPolicy:
    """``random`` or the callable a ``package.module:function`` names; :class:`ConfigError` naming ``field``."""
    if policy == RANDOM:
        return random_policy
    if ":" not in policy:
        raise ConfigError(f"{field} {policy!r}: give 'random' or 'package.module:function' (called as "
                          "fn(observations, env, rng) -> {agent: action}).")
    from .loading import import_object

    fn = import_object(policy, field)
    if not callable(fn):
        raise ConfigError(f"{field} {policy!r} is a {type(fn).__name__}, not a function; give 'package.module:function' "
                          "called as fn(observations, env, rng) -> {agent: action}.")
    return fn


def select_agents(agents: str | list[str], names: list[str], env_name: str) -> list[str]:
    """The names of ``names`` that ``agents`` (a prefix, or a list of names) picks; raises
    :class:`EnvError` naming ``env.opponents.agents`` when it picks none, all, or unknown names."""
    if isinstance(agents, str):
        picked = [a for a in names if a.startswith(agents)]
        what = f"the prefix {agents!r}"
    else:
        unknown = [a for a in agents if a not in names]
        if unknown:
            raise EnvError(f"env.opponents.agents: {', '.join(map(repr, unknown))} is not an agent of env {env_name!r}; "
                           f"its agents are {', '.join(names)}.")
        picked = [a for a in names if a in set(agents)]
        what = f"the list {list(agents)}"
    if not picked:
        raise EnvError(f"env.opponents.agents: {what} matches no agent of env {env_name!r} (its agents are "
                       f"{', '.join(names)}). Give a name prefix or a list of agent names.")
    if len(picked) == len(names):
        raise EnvError(f"env.opponents.agents: {what} matches every agent of env {env_name!r}, leaving none to "
                       "learn. Name only the agents the script plays.")
    return picked


class OpponentsAdapter(MultiAgentAdapter):
    """A :class:`MultiAgentAdapter` whose opponents are played by ``policy``; it shows only the
    learners (see the module docstring)."""

    def __init__(self, inner: MultiAgentAdapter, agents: str | list[str], policy: str = RANDOM,
                 alive: str | None = None):
        self.inner = inner
        self.env = getattr(inner, "env", None)  # render() and scripts read the env itself
        self.name = inner.name
        self.policy_name = policy
        self._policy = resolve_policy(policy)
        self._selector = agents
        self._alive_fn = resolve_alive(alive) if alive else None
        # With an alive reading the game is a battle: its outcome is charted per episode (a turn-based
        # game without one ends with both sides "terminated", so no win can be read from who stands).
        self.episode_metrics: tuple[str, ...] = OUTCOME_METRICS if alive else ()
        self._rng = np.random.default_rng()
        self._opp: set[str] = set()
        self._opp_obs: dict[str, Any] = {}
        self._alive: set[str] = set()     # agents not terminated this episode (either side)
        self._over = True
        declared = list(inner.possible_agents or [])
        if declared:
            self._opp = set(select_agents(agents, declared, self.name))
        self.possible_agents = [a for a in declared if a not in self._opp] or None

    # Spaces and state are the env's.
    def observation_space(self, agent: str) -> gym.Space:
        return self.inner.observation_space(agent)

    def action_space(self, agent: str) -> gym.Space:
        return self.inner.action_space(agent)

    def state(self) -> np.ndarray:
        return self.inner.state()

    def close(self) -> None:
        self.inner.close()

    def render(self) -> Any:
        return self.inner.render()

    @property
    def opponents(self) -> list[str]:
        return sorted(self._opp)

    @property
    def agents(self) -> list[str]:
        return [] if self._over else [a for a in self.inner.agents if a not in self._opp]

    @property
    def acting(self) -> list[str]:
        return [] if self._over else [a for a in self.inner.acting if a not in self._opp]

    def _mine(self, d: dict[str, Any]) -> dict[str, Any]:
        return {a: v for a, v in d.items() if a not in self._opp}

    def _opponent_actions(self) -> dict[str, Any]:
        acting = [a for a in self.inner.acting if a in self._opp]
        if not acting:
            return {}
        obs = {a: self._opp_obs[a] for a in acting if a in self._opp_obs}
        out = dict(self._policy(obs, self.inner, self._rng) or {})
        extra = [a for a in out if a not in obs]
        if extra:
            raise EnvError(f"env.opponents.policy {self.policy_name!r} returned actions for {extra}, which are not "
                           f"opponents acting now ({', '.join(obs)}).")
        for a in acting:  # an opponent the script leaves out (or one without an observation) acts at random
            if a not in out:
                out[a] = random_action(self.inner.action_space(a), obs.get(a), self._rng)
        return out

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        obs = self.inner.reset(seed=seed)
        if not self._opp:  # the env names its agents only now
            self._opp = set(select_agents(self._selector, list(dict.fromkeys([*self.inner.agents, *obs])), self.name))
        self._opp_obs = {a: o for a, o in obs.items() if a in self._opp}
        self._alive = set(self.inner.agents) | set(obs)
        self._over = False
        acc = self._advance(None)
        return acc[0] if acc is not None else self._mine(obs)

    def _inner_step(self, actions: dict[str, Any], acc: tuple | None) -> tuple:
        """One step of the env; the learners' parts summed into ``acc`` (turn-based envs may
        take several per learner move)."""
        obs, rew, term, trunc, infos = self.inner.step(actions)
        self._opp_obs.update((a, o) for a, o in obs.items() if a in self._opp)
        self._alive -= {a for a, t in term.items() if t}  # truncated agents are still standing
        if not self.inner.agents or not [a for a in self.inner.agents if a not in self._opp]:
            self._over = True
        step = tuple(self._mine(d) for d in (obs, rew, term, trunc, infos))
        if acc is None:
            return step
        o, r, te, tr, inf = acc
        o.update(step[0])
        for a, v in step[1].items():
            r[a] = r.get(a, 0.0) + v
        for a, v in step[2].items():
            te[a] = te.get(a, False) or bool(v)
        for a, v in step[3].items():
            tr[a] = tr.get(a, False) or bool(v)
        inf.update(step[4])
        return o, r, te, tr, inf

    def _advance(self, acc: tuple | None) -> tuple | None:
        """Turn-based envs: play the opponents while none of the learners is to move (parallel
        envs: never). Returns ``acc`` with those steps added, or None if none ran and ``acc`` was None."""
        while not self._over and not self.acting and any(a in self._opp for a in self.inner.acting):
            acc = self._inner_step(self._opponent_actions(), acc)
        return acc

    def step(self, actions: dict[str, Any]):
        joint = {**self._mine(actions), **self._opponent_actions()}
        acc = self._advance(self._inner_step(joint, None))
        obs, rew, term, trunc, infos = acc  # type: ignore[misc]
        standing = set(self._alive_fn(self.inner)) if self._alive_fn is not None else self._alive
        live_opp = [a for a in standing if a in self._opp]
        live_mine = [a for a in standing if a not in self._opp]
        counts = {"learners_alive": len(live_mine), "opponents_alive": len(live_opp)}
        if self._alive_fn is not None:
            counts["win"] = float(len(live_mine) > len(live_opp))
        infos = {a: dict(infos.get(a) or {}, **counts) for a in {*infos, *rew}}
        return obs, rew, term, trunc, infos


def with_opponents(adapter: MultiAgentAdapter, opponents: dict | None) -> MultiAgentAdapter:
    """``adapter`` with ``opponents`` (the config's ``env.opponents`` as a dict) played inside it;
    unchanged when ``opponents`` is None."""
    if not opponents:
        return adapter
    return OpponentsAdapter(adapter, opponents["agents"], opponents.get("policy", RANDOM), opponents.get("alive"))
