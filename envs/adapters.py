"""One multi-agent interface over Gymnasium, PettingZoo (parallel and AEC) and RLlib envs.

The hierarchy runner sees every env as a PettingZoo-style parallel env: dicts keyed by agent
name. A Gymnasium env is one agent, ``agent_0``. A PettingZoo AEC env goes through PettingZoo's
own ``aec_to_parallel``. An RLlib ``MultiAgentEnv`` has its ``__all__`` keys folded away.
"""
from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from .errors import EnvError

SINGLE_AGENT = "agent_0"
# Steps of each PettingZoo parallel env whose agent lifecycle is checked (see check_lifecycle):
# as many as the array contract's first checks (hdppo.envs.vector.SPACE_CHECK_STEPS).
LIFECYCLE_CHECK_STEPS = 64


def check_lifecycle(name: str, before: list[str], after: list[str], term: dict, trunc: dict) -> None:
    """An :class:`EnvError` where a PettingZoo parallel env's ``agents`` changed against its
    flags in one step: an agent flagged terminated or truncated must leave ``env.agents`` on that
    step (kept, it would go on acting and being paid after its end), and an agent that leaves must
    be flagged (unflagged, its end would be learned as a terminal state)."""
    now = set(after)
    ended = {a for a in before if term.get(a) or trunc.get(a)}
    stays = [a for a in before if a in ended and a in now]
    if stays:
        raise EnvError(f"env {name!r}: agent {stays[0]!r} was flagged terminated or truncated but is still in "
                       "env.agents after the step, so it would go on acting and being rewarded after its end. Take "
                       "an agent out of env.agents on the step that ends it (PettingZoo's parallel API).")
    gone = [a for a in before if a not in now and a not in ended]
    if gone:
        raise EnvError(f"env {name!r}: agent {gone[0]!r} left env.agents without being flagged terminated or "
                       "truncated, so its end would be learned as a terminal state. On the step it leaves, set "
                       "terminations[agent] (its task ended) or truncations[agent] (cut off: hdppo bootstraps).")


class MultiAgentAdapter:
    """``reset(seed) -> obs``; ``step(actions) -> (obs, rewards, terminated, truncated, infos)``;
    all dicts keyed by live agent. ``agents`` lists the live agents."""

    name: str
    possible_agents: list[str] | None

    def observation_space(self, agent: str) -> gym.Space: ...
    def action_space(self, agent: str) -> gym.Space: ...
    def reset(self, seed: int | None = None) -> dict[str, Any]: ...
    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]: ...
    def state(self) -> np.ndarray: ...
    def close(self) -> None: ...

    @property
    def agents(self) -> list[str]: ...

    @property
    def acting(self) -> list[str]:
        """The agents that act this step (all live ones, except in turn-based envs)."""
        return self.agents

    def render(self) -> Any:
        """The wrapped env's ``render()`` (an ``[H, W, 3]`` uint8 frame when it was made with
        ``render_mode='rgb_array'``); None when it has no ``render``."""
        render = getattr(getattr(self, "env", None), "render", None)
        return render() if callable(render) else None


class GymnasiumAdapter(MultiAgentAdapter):
    def __init__(self, env: gym.Env, name: str):
        self.env, self.name = env, name
        self.possible_agents = [SINGLE_AGENT]
        self._live: list[str] = []
        self._last_obs: Any = None

    @property
    def unwrapped(self) -> gym.Env:
        """The Gymnasium env inside, as ``gym.Env.unwrapped``: what a teacher or an observation
        function given this copy reaches its own methods through."""
        return self.env.unwrapped

    def observation_space(self, agent: str) -> gym.Space:
        return self.env.observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space

    @property
    def agents(self) -> list[str]:
        return list(self._live)

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        obs, _ = self.env.reset(seed=seed)
        self._live = [SINGLE_AGENT]
        self._last_obs = obs
        return {SINGLE_AGENT: obs}

    def step(self, actions: dict[str, Any]):
        obs, r, term, trunc, info = self.env.step(actions[SINGLE_AGENT])
        if term or trunc:
            self._live = []
        self._last_obs = obs
        a = SINGLE_AGENT
        return {a: obs}, {a: as_reward(r, self.name)}, {a: bool(term)}, {a: bool(trunc)}, {a: info}

    def state(self) -> np.ndarray:
        fn = getattr(self.env.unwrapped, "state", None)
        if callable(fn):
            return np.asarray(fn(), dtype=np.float32)
        return gym.spaces.flatten(self.env.observation_space, self._last_obs).astype(np.float32)

    def close(self) -> None:
        self.env.close()


def as_reward(r: Any, env: str, agent: str | None = None) -> float:
    """One agent's reward as a float: a number, a numpy scalar, or a one-element array (as
    Stable-Baselines3-style code often returns); anything else (None, a vector) is an
    :class:`EnvError` naming the env and the agent."""
    try:
        return float(r)
    except (TypeError, ValueError):
        pass
    if r is not None and not isinstance(r, (str, bytes)):
        try:
            a = np.asarray(r, dtype=np.float64)
        except (TypeError, ValueError):
            a = None
        if a is not None and a.size == 1:
            return float(a.reshape(()))
    shown = repr(r) if len(repr(r)) <= 60 else repr(r)[:57] + "..."
    who = f" for agent {agent!r}" if agent is not None else ""
    raise EnvError(f"env {env!r}: step() returned the reward {shown} ({type(r).__name__}){who}; a reward must be one "
                   "number (a float, an int or a numpy scalar; a one-element array is read as its value). Return "
                   "float(...) of the step's reward" + (", one per agent." if agent is not None else "."))


class ParallelAdapter(MultiAgentAdapter):
    """A PettingZoo ``ParallelEnv`` (or an AEC env converted by PettingZoo)."""

    def __init__(self, env: Any, name: str):
        self.env, self.name = env, name
        self.possible_agents = list(getattr(env, "possible_agents", []) or []) or None

    def observation_space(self, agent: str) -> gym.Space:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> gym.Space:
        return self.env.action_space(agent)

    @property
    def agents(self) -> list[str]:
        return list(self.env.agents)

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        out = self.env.reset(seed=seed)
        return out[0] if isinstance(out, tuple) else out

    _lifecycle_checks = LIFECYCLE_CHECK_STEPS  # the first steps of each adapter (an instance count)

    def step(self, actions: dict[str, Any]):
        before = list(self.env.agents) if self._lifecycle_checks > 0 else None
        obs, rew, term, trunc, infos = self.env.step(actions)
        if before is not None:
            self._lifecycle_checks -= 1
            check_lifecycle(self.name, before, list(self.env.agents), term, trunc)
        return obs, {a: as_reward(r, self.name, a) for a, r in rew.items()}, term, trunc, infos

    def state(self) -> np.ndarray:
        try:
            return np.asarray(self.env.state(), dtype=np.float32).reshape(-1)
        except NotImplementedError:
            raise EnvError(f"env {self.name!r} has no state(); a layer with observation.source 'state' or a "
                           "centralized critic needs it. Use observation.source 'env' or a 'module:function' view.") from None

    def close(self) -> None:
        self.env.close()


class AECAdapter(ParallelAdapter):
    """A turn-based PettingZoo ``AECEnv`` that cannot be converted to parallel: only the agent
    whose turn it is acts (it is the one live agent each step); rewards reach every agent.
    Spaces, ``state()`` and ``close()`` are the parallel adapter's."""

    def __init__(self, env: Any, name: str):
        super().__init__(env, name)
        self._over = True

    @property
    def agents(self) -> list[str]:
        return [] if self._over else list(self.env.agents)

    @property
    def acting(self) -> list[str]:
        return [] if self._over else [self.env.agent_selection]

    def _skip_done(self) -> None:
        # PettingZoo asks a done agent to step with None before the next one can act.
        while self.env.agents and (self.env.terminations[self.env.agent_selection]
                                   or self.env.truncations[self.env.agent_selection]):
            self.env.step(None)

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        self.env.reset(seed=seed)
        self._over = False
        return {a: self.env.observe(a) for a in self.env.agents}

    def step(self, actions: dict[str, Any]):
        self.env.step(actions[self.env.agent_selection])
        rew = {a: as_reward(r, self.name, a) for a, r in self.env.rewards.items()}
        term = {a: bool(t) for a, t in self.env.terminations.items()}
        trunc = {a: bool(t) and not term[a] for a, t in self.env.truncations.items()}
        infos = {a: dict(i) for a, i in self.env.infos.items()}
        # Every agent's current observation (the final one too), not only the next player's:
        # a waiting agent's view changes with the others' moves, and truncation bootstraps from it.
        obs = {a: self.env.observe(a) for a in self.env.agents}
        self._over = all(term[a] or trunc[a] for a in term)
        if not self._over:
            self._skip_done()
            self._over = not self.env.agents
        return obs, rew, term, trunc, infos


class RLlibAdapter(MultiAgentAdapter):
    """An RLlib ``MultiAgentEnv`` (new API: ``reset -> (obs, infos)``, five-dict ``step``)."""

    def __init__(self, env: Any, name: str):
        self.env, self.name = env, name
        self.possible_agents = list(getattr(env, "possible_agents", []) or []) or None
        self._live: list[str] = []
        self._to_act: list[str] = []

    def observation_space(self, agent: str) -> gym.Space:
        fn = getattr(self.env, "get_observation_space", None)
        return fn(agent) if callable(fn) else self.env.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        fn = getattr(self.env, "get_action_space", None)
        return fn(agent) if callable(fn) else self.env.action_spaces[agent]

    @property
    def agents(self) -> list[str]:
        return list(self._live)

    @property
    def acting(self) -> list[str]:
        return list(self._to_act)

    def reset(self, seed: int | None = None) -> dict[str, Any]:
        obs, _ = self.env.reset(seed=seed)
        self._live = list(obs)
        self._to_act = list(obs)
        return obs

    def step(self, actions: dict[str, Any]):
        obs, rew, term, trunc, infos = self.env.step(actions)
        all_done = term.get("__all__", False) or trunc.get("__all__", False)
        done = {a for a in self._live if term.get(a, False) or trunc.get(a, False)}
        self._live = [] if all_done else [a for a in dict.fromkeys([*self._live, *obs]) if a not in done]
        # RLlib's rule: only agents with an observation this step act next.
        self._to_act = [a for a in obs if a in self._live and a != "__all__"]
        keys = set(obs) | set(rew)
        strip = lambda d: {k: v for k, v in d.items() if k != "__all__"}  # noqa: E731
        term_d = {a: bool(term.get(a, term.get("__all__", False))) for a in keys}
        trunc_d = {a: bool(trunc.get(a, trunc.get("__all__", False))) and not term_d[a] for a in keys}
        return strip(obs), {a: as_reward(r, self.name, a) for a, r in strip(rew).items()}, term_d, trunc_d, strip(infos)

    def state(self) -> np.ndarray:
        raise EnvError(f"env {self.name!r} (RLlib MultiAgentEnv) has no state(); use observation.source 'env'.")

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _what_it_is(env: Any) -> str:
    """The env.type that fits a factory's env, as a sentence (or nothing when none is known)."""
    if isinstance(env, gym.Env):
        return " It is a gymnasium.Env: set env.type: gymnasium (or leave env.type out)."
    if hasattr(env, "possible_agents") or hasattr(env, "agent_selection"):
        return " It is a PettingZoo env: set env.type: pettingzoo."
    return ""


def adapt(env: Any, name: str, env_type: str) -> MultiAgentAdapter:
    """Wrap a made env by its declared type, checking that it is what the config says."""
    if env_type == "gymnasium":
        if not isinstance(env, gym.Env):
            raise EnvError(f"env {name!r}: type 'gymnasium' but the factory returned {type(env).__name__}. "
                           "Set env.type to 'pettingzoo' or 'rllib', or return a gymnasium.Env.")
        return GymnasiumAdapter(env, name)
    if env_type == "pettingzoo":
        from pettingzoo import AECEnv, ParallelEnv
        from pettingzoo.utils.conversions import aec_to_parallel

        if isinstance(env, AECEnv):
            # PettingZoo's own conversion where it is safe; turn-based games stay turn-based.
            if env.metadata.get("is_parallelizable", False):
                return ParallelAdapter(aec_to_parallel(env), name)
            return AECAdapter(env, name)
        if isinstance(env, ParallelEnv) or hasattr(env, "possible_agents"):
            return ParallelAdapter(env, name)
        raise EnvError(f"env {name!r}: type 'pettingzoo' but the factory returned {type(env).__name__}, "
                       f"neither a ParallelEnv nor an AECEnv.{_what_it_is(env)}")
    if env_type == "rllib":
        from ray.rllib.env.multi_agent_env import MultiAgentEnv

        if not isinstance(env, MultiAgentEnv):
            raise EnvError(f"env {name!r}: type 'rllib' but the factory returned {type(env).__name__}, "
                           f"not a ray.rllib MultiAgentEnv.{_what_it_is(env)}")
        return RLlibAdapter(env, name)
    raise EnvError(f"env.type {env_type!r} is not one of gymnasium, pettingzoo, rllib.")


def make_multi_agent(env_type: str, env_id: str | None, entry_point: str | None, kwargs: dict,
                     max_episode_steps: int | None) -> MultiAgentAdapter:
    """Make and adapt one env. PettingZoo ids are module paths ('pettingzoo.classic.tictactoe_v3')."""
    from .loading import call_factory, load_module, make_gym_env, resolve_entry_point

    name = env_id or entry_point or "env"
    if env_type == "gymnasium":
        return adapt(make_gym_env(env_id, entry_point, kwargs, max_episode_steps), name, env_type)
    factory: Callable[..., Any]
    if entry_point is not None:
        factory = resolve_entry_point(entry_point)
    else:
        module = load_module(env_id, f"env id {env_id!r}", EnvError,  # type: ignore[arg-type]
                             hint="For PettingZoo give the module path, e.g. 'pettingzoo.classic.tictactoe_v3', "
                                  "or an entry_point.")
        factory = getattr(module, "parallel_env", None) or getattr(module, "env", None)
        if factory is None:
            raise EnvError(f"env id {env_id!r}: the module has neither parallel_env() nor env().")
    return adapt(call_factory(factory, name, kwargs), name, env_type)
