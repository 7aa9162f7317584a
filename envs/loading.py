"""Make environments from an id or a ``module:factory`` entry point, with errors that say the fix."""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import importlib.metadata
import inspect
import re
from typing import Any, Callable

import gymnasium as gym

from .errors import ConfigError, EnvError, HdppoError

# Each rollout worker sets this before it makes its envs, so an env can vary by worker
# (per-worker conditions, domain randomization); unset outside workers.
WORKER_INDEX_VAR = "HDPPO_WORKER_INDEX"


def split_path(path: str, label: str, error: type[HdppoError] = ConfigError) -> tuple[str, str]:
    """``(module, attribute)`` of a ``package.module:attribute`` path; ``error`` naming ``label``
    when either part is missing."""
    module_name, colon, attr = str(path).partition(":")
    if not colon or not module_name.strip() or not attr.strip():
        what = ("no ':'" if not colon else "an empty module name" if not module_name.strip()
                else "an empty name after ':'")
        raise error(f"{label} {path!r} has {what}: write it as 'package.module:function' (a module path, a colon, "
                    "then the function or class in that module), e.g. 'my_envs:make'.")
    return module_name.strip(), attr.strip()


def load_module(module_name: str, label: str, error: type[HdppoError] = ConfigError, hint: str = "") -> Any:
    """Import ``module_name`` for ``label`` (a config field or an env): a module that is missing,
    or that raises while it is imported, becomes ``error`` naming both and the exception."""
    try:
        return importlib.import_module(module_name)
    except HdppoError:
        raise  # the module's own clear error
    except ImportError as exc:
        raise error(f"{label}: cannot import module {module_name!r} ({exc}). "
                    + (hint or "Check the module path, that its package is installed in this environment, and that "
                       "its folder is the working dir (--working-dir) or on PYTHONPATH.")) from exc
    except Exception as exc:  # noqa: BLE001 - any error in the user's module: say which and what
        raise error(f"{label}: importing module {module_name!r} raised {type(exc).__name__}: {exc}. Fix the module "
                    f"so that it imports; `python -c \"import {module_name}\"` in its folder shows the "
                    "traceback.") from exc


def load_object(path: str, label: str, error: type[HdppoError] = ConfigError) -> Any:
    """The attribute a ``package.module:attribute`` path names (an env factory, a reward, a bonus
    class, an opponent policy): the one resolver of such names. Every failure (a malformed path,
    a missing module or attribute, a module that raises on import) is ``error``, naming ``label``
    (the config field or env) and the path, and chaining the original exception."""
    module_name, attr = split_path(path, label, error)
    module = load_module(module_name, f"{label} {path!r}", error)
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise error(f"{label} {path!r}: cannot import {attr!r} from {module_name!r}: the module has no attribute "
                    f"{attr!r}. Check the name after the ':'.") from exc


def import_object(path: str, field: str) -> Any:
    """The attribute a config names as ``package.module:attribute`` (a reward, a bonus class);
    raises :class:`ConfigError` naming the config field."""
    return load_object(path, field, ConfigError)


def resolve_entry_point(entry_point: str, label: str = "env entry_point") -> Callable[..., Any]:
    """Import ``package.module:attribute`` and return the attribute; :class:`EnvError` naming it."""
    return load_object(entry_point, label, EnvError)


def check_signature(fn: Callable[..., Any], field: str, expected: str, *args: Any,
                    error: type[HdppoError] = ConfigError, **kwargs: Any) -> None:
    """A :class:`ConfigError` naming ``field`` when ``fn`` cannot be called with ``args`` and
    ``kwargs`` (names only, nothing is called): a user's function with the wrong parameters fails
    when the config is read, not as a worker crash mid-rollout. ``expected`` is the call as the
    docs write it. A callable whose signature Python cannot read (a C function) passes."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        raise error(f"{field}: {name}{sig} cannot be called as {expected} ({exc}). Give it those parameters "
                    f"(extra ones need defaults; **kwargs takes any it does not use).") from None


def _call_text(name: str, kwargs: dict) -> str:
    """How a factory was called, e.g. ``make(num_envs=2, length=9)``."""
    args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return f"{name.rpartition(':')[2]}({args})"


def _accepts(fn: Callable[..., Any], kwargs: dict) -> bool:
    """Whether ``fn`` can be called with ``kwargs`` (by its signature; True when it has none to
    read), so that a TypeError raised inside the factory is not blamed on env.kwargs."""
    try:
        inspect.signature(fn).bind(**kwargs)
    except TypeError:
        return False
    except ValueError:  # a builtin without a signature
        return True
    return True


def _rejects(fn: Callable[..., Any], kwargs: dict, exc: TypeError) -> bool:
    """Whether a TypeError from ``fn(**kwargs)`` is about those arguments: the signature refuses
    them, or a factory taking ``**kwargs`` passed one on to something that did not know it."""
    if not _accepts(fn, kwargs):
        return True
    unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
    return bool(unknown and unknown.group(1) in kwargs)


def call_factory(factory: Callable[..., Any], name: str, kwargs: dict, how: str = "") -> Any:
    """``factory(**kwargs)`` for the env ``name`` (its entry point or id): a user's factory that
    raises becomes :class:`EnvError` naming it, the exception and the arguments it was called with.
    ``how`` says how such a factory is called (added where it rejects its arguments)."""
    try:
        return factory(**kwargs)
    except HdppoError:
        raise  # the env's own clear error
    except Exception as exc:  # noqa: BLE001 - any error in the user's factory: say which, what and with what
        if isinstance(exc, TypeError) and _rejects(factory, kwargs, exc):
            raise EnvError(f"env {name!r} rejected its arguments ({exc}){'; ' + how if how else ''}. Check "
                           "env.kwargs in the config and the factory's signature.") from exc
        if name.startswith("hdppo.envs.builtin.") and isinstance(exc, (ValueError, KeyError)):
            # A built-in env refusing a value: the fix is the config's, not the factory's.
            raise EnvError(f"env {name!r} refused env.kwargs {kwargs}: {exc}. Change env.kwargs in the config "
                           "(the env's module docstring lists its arguments).") from exc
        call = _call_text(name, kwargs)
        module_name, colon, attr = name.partition(":")
        show = (f'`python -c "from {module_name} import {attr}; {call}"` in its folder' if colon
                else "calling it so in Python")
        raise EnvError(f"env {name!r}: the factory raised {type(exc).__name__}: {exc} when called as {call}"
                       f"{'' if kwargs else ' (no env.kwargs)'}. Fix the factory, or env.kwargs if they are wrong; "
                       f"{show} shows the traceback.") from exc


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
    if not close and "." in env_id:
        try:  # a module path, not an id: most likely a PettingZoo env given as type gymnasium
            module = importlib.util.find_spec(env_id) is not None
        except (ImportError, ValueError):
            module = False
        if module:
            hint = (f" {env_id!r} is a Python module: for a PettingZoo env set env.type: pettingzoo in the config "
                    f"(it calls the module's parallel_env or env), or name its factory, e.g. '{env_id}:env' "
                    "(hdppo check-env takes that form too).")
    return EnvError(f"env id {env_id!r} is not registered with Gymnasium.{hint} Use a registered id "
                    "(see gymnasium.pprint_registry()) or give env.entry_point: 'package.module:factory'.")


def _api_hint(env: Any) -> str:
    """What to set in the config for an env of another API that ``env.type`` can take."""
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ImportError:  # pragma: no cover - pettingzoo is a dependency
        AECEnv = ParallelEnv = ()  # type: ignore[assignment,misc]
    if isinstance(env, (ParallelEnv, AECEnv)) or hasattr(env, "possible_agents"):
        return " It is a PettingZoo env: set env.type: pettingzoo in the config, with this entry_point."
    if type(env).__name__ == "MultiAgentEnv" or any(c.__name__ == "MultiAgentEnv" for c in type(env).__mro__):
        return " It is an RLlib MultiAgentEnv: set env.type: rllib in the config."
    if isinstance(env, gym.vector.VectorEnv):
        return " It is a Gymnasium VectorEnv: set env.type: gymnasium_vector in the config."
    return " Return a gymnasium.Env, or set env.type for another API (pettingzoo, rllib, gymnasium_vector, vector)."


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
            env = call_factory(resolve_entry_point(entry_point), entry_point, kwargs)  # type: ignore[arg-type]
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
    except Exception as exc:  # noqa: BLE001 - a registered env whose constructor fails: say which and what
        raise EnvError(f"env {name!r} could not be made: {type(exc).__name__}: {exc} (env.kwargs: {kwargs}). "
                       "Fix the env, or env.kwargs if they are wrong.") from exc
    if not isinstance(env, gym.Env):
        raise EnvError(f"env {name!r}: the factory returned {type(env).__name__}, not a gymnasium.Env."
                       f"{_api_hint(env)}")
    return env
