"""Make environments from an id or a ``module:factory`` entry point, with errors that say the fix."""
from __future__ import annotations

import difflib
import importlib
import importlib.metadata
from typing import Any, Callable

import gymnasium as gym

from .errors import ConfigError, EnvError

# Each rollout worker sets this before it makes its envs, so an env can vary by worker
# (per-worker conditions, domain randomization); unset outside workers.
WORKER_INDEX_VAR = "HDPPO_WORKER_INDEX"


def import_object(path: str, field: str) -> Any:
    """The attribute a config names as ``package.module:attribute`` (a reward, a bonus class);
    raises :class:`ConfigError` naming the config field."""
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{field} {path!r}: cannot import {attr!r} from {module_name!r} ({exc}). "
                          "Check the path and that the module is importable on every worker.") from None


def resolve_entry_point(entry_point: str) -> Callable[..., Any]:
    """Import ``package.module:attribute`` and return the attribute."""
    module_name, _, attr = entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvError(f"env entry_point {entry_point!r}: cannot import module {module_name!r} ({exc}). "
                       "Check the module path and that its package is installed in this environment.") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise EnvError(f"env entry_point {entry_point!r}: module {module_name!r} has no attribute {attr!r}.") from None


# Gymnasium 0.26-0.29 imported the ``gymnasium.envs`` entry points of installed packages at
# import time, so ids such as MinAtar's "MinAtar/Breakout-v1" registered themselves. Gymnasium
# 1.x dropped that plugin loading, and those packages still register only through it.
PLUGIN_GROUP = "gymnasium.envs"
_loaded_plugins: set[str] = set()


def load_plugin_envs(env_id: str) -> bool:
    """Register the ids of the installed package whose ``gymnasium.envs`` entry point is named
    after ``env_id``'s namespace ("MinAtar" for "MinAtar/Breakout-v1"), as Gymnasium before 1.0
    did on import. True when a plugin was (or had been) loaded for that namespace."""
    ns = env_id.rpartition(":")[2].partition("/")[0] if "/" in env_id else ""
    if not ns:
        return False
    if ns in _loaded_plugins:
        return True
    for ep in importlib.metadata.entry_points(group=PLUGIN_GROUP):
        if ep.name == ns:
            try:
                hook = ep.load()
                if callable(hook):
                    hook()
            except Exception as exc:  # noqa: BLE001 - a broken third-party plugin: say which
                raise EnvError(f"env id {env_id!r}: the Gymnasium plugin {ep.value!r} of namespace {ns!r} failed "
                               f"to register its envs ({type(exc).__name__}: {exc}).") from None
            _loaded_plugins.add(ns)
            return True
    return False


def _unknown_id(env_id: str) -> EnvError:
    ids = list(gym.registry.keys())
    close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return EnvError(f"env id {env_id!r} is not registered with Gymnasium.{hint} Use a registered id "
                    "(see gymnasium.pprint_registry()) or give env.entry_point: 'package.module:factory'.")


def make_gym_env(env_id: str | None = None, entry_point: str | None = None,
                 kwargs: dict | None = None, max_episode_steps: int | None = None) -> gym.Env:
    """One Gymnasium env. Raises :class:`EnvError` naming the id or entry point."""
    kwargs = dict(kwargs or {})
    name = env_id or entry_point
    try:
        if env_id is not None:
            if env_id not in gym.registry and not load_plugin_envs(env_id):
                # Some ids register on import of their package ("pkg/Env-v0" or "module:Env-v0").
                if ":" not in env_id and "/" not in env_id:
                    raise _unknown_id(env_id)
            env = gym.make(env_id, max_episode_steps=max_episode_steps, **kwargs)
        else:
            factory = resolve_entry_point(entry_point)  # type: ignore[arg-type]
            env = factory(**kwargs)
            if max_episode_steps is not None:
                env = gym.wrappers.TimeLimit(env, max_episode_steps)
    except EnvError:
        raise
    except gym.error.Error as exc:
        if env_id is not None and ("not found" in str(exc) or "doesn't exist" in str(exc)):
            raise _unknown_id(env_id) from None
        raise EnvError(f"env {name!r} could not be made: {exc}") from None
    except TypeError as exc:
        raise EnvError(f"env {name!r} rejected its arguments ({exc}). Check env.kwargs in the config.") from None
    except ImportError as exc:
        raise EnvError(f"env {name!r} needs a package that is not installed ({exc}).") from None
    if not isinstance(env, gym.Env):
        raise EnvError(f"env {name!r}: the factory returned {type(env).__name__}, not a gymnasium.Env. "
                       "Return a gymnasium.Env (wrap other APIs in an adapter).")
    return env
