"""``hdppo check-env``: the official checker for the env's API, then a short random rollout
through hdppo's own adapter, reporting exactly what is wrong."""
from __future__ import annotations

import re
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from .adapters import GymnasiumAdapter, adapt, make_multi_agent
from .vector import (AdapterCopies, GymnasiumCopies, check_action_space, check_contract, check_episodes,
                     contract_checked, why_outside)
from .errors import EnvError
from .loading import call_factory, make_gym_env, resolve_entry_point


def _make(target: Any) -> tuple[Any, str, str, dict]:
    """(a fresh env, its type, its name, how to make another) for an id, 'module:factory' or an
    env section (see :func:`check_target`)."""
    if not isinstance(target, str):
        e = target
        spec = {"env_type": e.type, "env_id": e.id, "entry_point": e.entry_point, "kwargs": e.kwargs,
                "max_episode_steps": e.max_episode_steps}
        if e.type == "gymnasium":
            return make_gym_env(e.id, e.entry_point, e.kwargs, e.max_episode_steps), "gymnasium", e.id or e.entry_point, spec  # type: ignore[return-value]
        adapter = make_multi_agent(**spec)
        return adapter.env, e.type, adapter.name, spec
    if target.endswith((".yaml", ".yml")):
        from pathlib import Path

        if not Path(target).is_file():
            raise EnvError(f"config file {target!r} does not exist. Pass the path to an existing config file, a "
                           "Gymnasium id, or 'module:factory'.")
        raise EnvError(f"{target!r} is a config file: load it first and pass its env section "
                       "(hdppo check-env does this), or give an env id or 'module:factory'.")
    module_name, colon, attr = target.partition(":")
    if colon and not attr.isidentifier():   # 'highway_env:highway-fast-v0': Gymnasium's module:EnvId
        env = make_gym_env(target)
    elif colon:
        factory = resolve_entry_point(target)
        if _needs_num_envs(factory):
            raise EnvError(f"{target!r} is a batched factory (it takes num_envs): check it through a config whose "
                           "env.type is vector or gymnasium_vector, e.g. `hdppo check-env my_config.yaml` or a "
                           "preset that uses it (`hdppo check-env skirmish_flat`).")
        env = call_factory(factory, target, {})
    else:
        env = make_gym_env(target)
    if isinstance(env, gym.Env):
        return env, "gymnasium", target, {}
    if not all(callable(getattr(env, m, None)) for m in ("reset", "step")):  # not a PettingZoo env either
        raise EnvError(f"env {target!r}: the factory returned {type(env).__name__}, not an env. Return a "
                       "gymnasium.Env, or a PettingZoo ParallelEnv or AEC env (reset and step methods).")
    return env, "pettingzoo", target, {}


def _needs_num_envs(factory: Any) -> bool:
    """Whether ``factory`` requires a ``num_envs`` argument (a natively vectorised env's factory)."""
    import inspect

    try:
        p = inspect.signature(factory).parameters.get("num_envs")
    except (TypeError, ValueError):
        return False
    return p is not None and p.default is inspect.Parameter.empty


BATCHED = ("vector", "gymnasium_vector")


def _batch_actions(venv: Any, masks: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """Random actions ``[N, A, *shape]`` for every slot, legal ones where the env gives masks."""
    space = venv.action_space(venv.agents[0])
    n, a = venv.num_envs, len(venv.agents)
    if isinstance(space, gym.spaces.Discrete) and masks is not None:
        legal = masks > 0
        legal[~legal.any(-1)] = True  # a slot with no legal action (dead): anything
        scores = rng.random(legal.shape) + legal  # the highest score is a random legal action
        return (space.start + scores.argmax(-1)).astype(np.int64)
    space.seed(int(rng.integers(2**31)))
    return np.stack([np.asarray(space.sample()) for _ in range(n * a)]).reshape((n, a, *space.shape))


def _check_batched(e: Any, steps: int) -> str:
    """A natively vectorised env (``env.type`` vector or gymnasium_vector): 2 copies made as
    training makes them, every array of reset and step checked against the contract of
    :mod:`hdppo.envs.vector`, random (legal) actions."""
    from .vector import make_vector_env

    name = e.entry_point or e.id or "env"
    venv = make_vector_env(e.type, e.id, e.entry_point, e.kwargs, e.max_episode_steps, 2, seed=0)
    try:
        n, d = venv.num_envs, int(venv.obs_dim)
        m = int(getattr(venv, "mask_dim", 0) or 0)
        # An upper layer may read the global state: checked too where the env declares one.
        venv.want_state = bool(getattr(venv, "state_dim", None))
        now = venv.reset(seed=0)
        check_contract(venv, name, "reset()", now)
        rng = np.random.default_rng(0)
        episodes = 0
        for t in range(steps):
            before = np.array(now.alive, bool)  # copied: the env may write its next result into the same buffers
            res = venv.step(_batch_actions(venv, now.masks if m else None, rng))
            check_contract(venv, name, f"step() #{t + 1}", res, before)
            check_episodes(name, f"step() #{t + 1}", res)
            episodes += len(res.episodes)
            now = res
        agent = venv.agents[0]
        lines = [f"env {name!r}: OK ({e.type}, {n} copies)",
                 f"  agents:            {list(venv.agents)}",
                 f"  observation_space: {venv.observation_space(agent)} ({agent}; flattened to {d})",
                 f"  action_space:      {venv.action_space(agent)} ({agent})" + (f", action masks of {m}" if m else ""),
                 f"  contract:          reset and {steps} random steps, every array of hdppo.envs.vector's contract "
                 f"checked (shapes, dtypes, finite values, the declared spaces, acting slots alive with a legal action, episode ends closing every agent); {episodes} episodes ended"]
        return "\n".join(lines)
    finally:
        venv.close()


def check_target(target: Any, steps: int = 200) -> str:
    """Check an env given as an id, a ``module:factory``, or an env section of a config (any
    object with ``type``, ``id``, ``entry_point``, ``kwargs``, ``max_episode_steps``, such as
    :class:`hdppo.platform.config.EnvConfig`; the CLI loads a config file into one, so that env
    code needs no config loader). Returns a report; raises :class:`EnvError` naming what is wrong.
    A natively vectorised env (``type`` vector or gymnasium_vector, from a config) has no per-copy
    official checker: its arrays are checked against hdppo's contract instead."""
    if not isinstance(target, str) and getattr(target, "type", None) in BATCHED:
        return _check_batched(target, steps)
    env, kind, name, _ = _make(target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            checker = _official_check(env, kind)
        except EnvError:
            raise
        except Exception as exc:  # noqa: BLE001 - the checkers raise many kinds; all mean "broken env"
            why = _why_observation(target, kind) if "observation" in str(exc).lower() else ""
            raise EnvError(f"env {name!r} fails {_checker_name(env, kind)}: {type(exc).__name__}: {exc}{why}") from None
    env, kind, name, _ = _make(target)  # the checker consumed the first copy
    if kind == "gymnasium":
        env.close()
        masked = isinstance(env.observation_space, gym.spaces.Dict) and "action_mask" in env.observation_space.spaces
        # Through the copies training uses: a masked observation goes through the adapter, which
        # keeps the mask apart from the policy's input (vector.make_vector_env).
        pool = contract_checked(AdapterCopies(lambda: GymnasiumAdapter(_make(target)[0], name), 2, name) if masked
                                else GymnasiumCopies(lambda: _make(target)[0], 2, name=name), name)
        now = pool.reset(seed=0)
        space = pool.action_space(pool.agents[0])
        check_action_space(space, name, pool.agents[0])
        space.seed(0)
        rng = np.random.default_rng(0)
        episodes = 0
        for _ in range(steps):
            if masked and now.masks is not None:  # random among the legal actions, as a masked policy plays
                actions = np.stack([_legal_sample(space, row[0], rng) for row in now.masks])[:, None]
            else:
                actions = np.stack([np.asarray(space.sample()) for _ in range(pool.num_envs)])[:, None]
            now = pool.step(actions)
            episodes += len(now.episodes)
        pool.close()
        seen = (f"the policy sees {pool.obs_dim} values; the action_mask ({pool.mask_dim}) masks its logits"
                if masked else f"flattened to {pool.obs_dim}")
        spaces = [f"  observation_space: {pool.observation_space(pool.agents[0])} ({seen})",
                  f"  action_space:      {space}"]
    else:
        adapter = adapt(env, name, "rllib" if _is_rllib(env) else "pettingzoo")
        for agent in adapter.possible_agents or []:
            check_action_space(adapter.action_space(agent), name, agent)
        episodes = _rollout(adapter, steps)
        agent = (adapter.possible_agents or adapter.agents or ["?"])[0]
        spaces = [f"  agents:            {adapter.possible_agents}",
                  f"  observation_space: {adapter.observation_space(agent)} ({agent})",
                  f"  action_space:      {adapter.action_space(agent)} ({agent})"]
        adapter.close()
    warned = _env_warnings(caught)
    lines = [f"env {name!r}: OK", *spaces,
             f"  {checker + ':':<19}passed" + (f" with {sum(warned.values())} warning(s)" if warned else ""),
             f"  rollout:           {steps} random steps through hdppo's adapter, {episodes} episodes ended, "
             "all outputs finite and in their spaces"]
    lines += [f"  warning: {text}" + (f" (x{n})" if n > 1 else "") for text, n in warned.items()]
    return "\n".join(lines)


def _legal_sample(space: gym.Space, mask: np.ndarray, rng: np.random.Generator) -> np.ndarray | int:
    """A random action legal under ``mask``, as a masked policy draws one: for a MultiDiscrete
    space the mask is the components' logits side by side (``sum(nvec)`` values), one legal
    index drawn per component; a component with no legal value takes 0."""
    sizes = [int(n) for n in np.asarray(space.nvec).reshape(-1)] if isinstance(space, gym.spaces.MultiDiscrete) \
        else [int(mask.shape[-1])]
    out, at = [], 0
    for n in sizes:
        legal = np.flatnonzero(mask[at:at + n] > 0)
        out.append(int(rng.choice(legal)) if len(legal) else 0)
        at += n
    return np.asarray(out) if isinstance(space, gym.spaces.MultiDiscrete) else out[0]


def _why_observation(target: Any, kind: str = "gymnasium") -> str:
    """What is wrong with a fresh copy's first observation (Gymnasium's checker says only that it
    is not in the space, PettingZoo's "Out of bounds observation"), as training would say it: the
    shape, the dtype or a value (for a multi-agent env, of the first agent whose is wrong)."""
    try:
        env = _make(target)[0]
        out = env.reset(seed=0)
        obs = out[0] if isinstance(out, tuple) else out
        if kind == "gymnasium":
            reason = why_outside(env.observation_space, obs)
        else:  # an AEC env returns nothing from reset: its agents' observations are asked for
            obs = obs if isinstance(obs, dict) else {a: env.observe(a) for a in env.agents}
            reason = next((f"agent {a!r}, {r}" for a, o in obs.items()
                           for r in (why_outside(env.observation_space(a), o),) if r), None)
        env.close()
    except Exception:  # noqa: BLE001 - the checker's own message stands without the detail
        return ""
    return (f" Its first observation: {reason}. Make the env return observations inside its declared space "
            "(dtype included), or declare the space it really produces.") if reason else ""


# Warnings that a checker raises about itself, whatever the env: PettingZoo's test helpers make
# their own copies through an API it has deprecated.
_CHECKER_NOISE = ("The old environment creation API has been deprecated",)


def _env_warnings(caught: list) -> dict[str, int]:
    """The checker's warnings about the env, each text once with its count, without the checkers'
    notes about themselves."""
    out: dict[str, int] = {}
    for w in caught:
        # Gymnasium's logger colours its warnings for a terminal (ANSI codes) even into a file or pipe.
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(w.message)).strip()
        if not text.startswith(_CHECKER_NOISE):
            out[text] = out.get(text, 0) + 1
    return out


def _is_rllib(env: Any) -> bool:
    try:
        from ray.rllib.env.multi_agent_env import MultiAgentEnv
    except ImportError:
        return False
    return isinstance(env, MultiAgentEnv)


def _checker_name(env: Any, kind: str) -> str:
    if kind == "gymnasium":
        return "check_env"
    if _is_rllib(env):
        return "rollout"
    from pettingzoo import AECEnv

    return "api_test" if isinstance(env, AECEnv) else "parallel_api_test"


def _official_check(env: Any, kind: str) -> str:
    """Run the official checker; its progress prints ("Starting API test") are swallowed, so that
    hdppo's report (or error) is the only thing said."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return _run_official_check(env, kind)


def _run_official_check(env: Any, kind: str) -> str:
    name = _checker_name(env, kind)
    if name == "check_env":
        from gymnasium.utils.env_checker import check_env

        check_env(env.unwrapped, skip_render_check=True)
    elif name == "api_test":
        from pettingzoo.test import api_test

        api_test(env, num_cycles=50)
    elif name == "parallel_api_test":
        from pettingzoo.test import parallel_api_test

        parallel_api_test(env, num_cycles=50)
    return name


def _rollout(adapter, steps: int) -> int:
    """Random legal actions through the adapter, checking every output against its space."""
    rng = np.random.default_rng(0)
    obs = adapter.reset(seed=0)
    episodes = 0
    for t in range(steps):
        for a, o in obs.items():
            space = adapter.observation_space(a)
            if not space.contains(o):
                raise EnvError(f"env {adapter.name!r}: agent {a!r} observation at step {t} is not in its space {space}: "
                               f"{why_outside(space, o) or 'the space says no'}. Make the env return observations "
                               "inside its declared space (dtype included), or declare the space it really produces.")
        actions = {}
        for a in adapter.acting:
            space = adapter.action_space(a)
            mask = obs.get(a, {}).get("action_mask") if isinstance(obs.get(a), dict) else None
            if mask is not None and not np.asarray(mask).any():
                raise EnvError(f"env {adapter.name!r}: agent {a!r} is asked to act at step {t}, but its action_mask "
                               "allows no action, so a policy can only pick an illegal one. Leave at least one "
                               "legal action (a no-op), or leave the agent out of the step's agents while it "
                               "cannot act.")
            if mask is not None and isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
                actions[a] = _legal_sample(space, np.asarray(mask).reshape(-1), rng)
            else:
                actions[a] = space.sample()
        obs, rew, _, _, _ = adapter.step(actions)
        for a, r in rew.items():
            if not np.isfinite(r):
                raise EnvError(f"env {adapter.name!r}: agent {a!r} reward at step {t} is {r}; rewards must be finite.")
        if not adapter.agents:
            episodes += 1
            obs = adapter.reset()
    return episodes
