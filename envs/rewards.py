"""Named command-following (intrinsic) rewards, registered by the env module that owns them.

An env module registers its rewards with ``@register_reward("name")``; a layer names one in
``reward.intrinsic_fn``, or gives any function as ``package.module:function``. A registered reward
may say which layers it fits (``layer="bottom"`` or ``"upper"``, ``commands=`` the width of the
one-hot command it reads); a config naming it on another layer is refused at load, since it would
pay 0 on every step.
:func:`resolve_reward` returns a :class:`RewardFn`, which says how to call it.

Scalar (the default): called once per env step for each lane (agent) of the layer::

    fn(command=c, obs=o, next_obs=o2, action=a, info=i) -> float

Vectorised (``register_reward(name, vectorized=True)``): called once per env step for all the
layer's B live lanes of all env copies at once, each argument stacked along a first axis::

    fn(command=[B, C], obs=[B, D], next_obs=[B, D], action=[B, A] (or [B]), info=B dicts) -> [B]

``info`` is a sequence of B dicts (:class:`hdppo.envs.vector.InfoRows`); on the bottom layer
``info.column(key, default)`` gives one key of all B at once, straight from the env's arrays
when a natively vectorised env returns ``VecStep.info_columns`` (skirmish does), so that no dict
is built per agent and step.

What the arguments are, per lane:

- bottom layer (one lane per env agent): ``command`` is the command from the layer above as the
  agent receives it (a one-hot for a discrete command, the goal vector for a Box command; an
  empty vector on the top layer); ``obs``/``next_obs`` the agent's raw env observation,
  flattened, before and after the step (after: the final one where the agent or episode
  ended, not the reset one); ``action`` its action as the policy chose it, always a float
  array: ``[index]`` for a Discrete space (``int(action[0])`` is the index), one entry per
  entry of a MultiDiscrete, the unclipped sample for a Box; ``info`` its info dict.
- an upper layer (one lane per squad, or one for all agents): ``command`` as above;
  ``obs``/``next_obs`` its member agents' flattened env observations side by side (zeros for
  members that are gone), before and after the step; ``action`` the lane's current command to
  the layer below (as its policy chose it); ``info`` a dict of its member agents' info dicts
  keyed by agent name.

A built-in name is found without importing its module first: :data:`hdppo.envs.builtin.REWARDS`
says which module registers it, and that module is imported on first lookup (so asking for
``corridor_follow`` does not import MuJoCo).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Mapping, Sequence

from .errors import ConfigError
from .loading import check_signature, import_object

__all__ = ["RewardFn", "check_reward_fits", "is_known_reward", "missing_info_keys", "register_reward", "registered_rewards",
           "resolve_reward"]


@dataclasses.dataclass(frozen=True)
class RewardFn:
    """A resolved reward function and how to call it (see the module docstring)."""

    fn: Callable[..., Any]
    vectorized: bool = False
    name: str = ""
    # What a named reward was written for, checked when a config names it: "bottom" (one agent's
    # info per lane), "upper" (a lane's members' infos by name) or "any"; and the command's width
    # it reads (a one-hot of that many), None for any.
    layer: str = "any"
    commands: int | None = None
    # The info keys it reads, checked against the env's first info: a reward that reads them with
    # defaults would otherwise pay a constant on an env that lacks them.
    info_keys: tuple[str, ...] = ()

    def __call__(self, **kwargs: Any) -> Any:
        return self.fn(**kwargs)


_REGISTRY: dict[str, RewardFn] = {}


def register_reward(name: str, *, vectorized: bool = False, layer: str = "any", commands: int | None = None,
                    info_keys: tuple[str, ...] | list[str] = ()):
    """Function decorator: make ``reward.intrinsic_fn: <name>`` call this function.
    ``vectorized=True`` says it takes stacked arrays (see the module docstring); the same holds
    when it is named by path. ``layer`` ('bottom', 'upper' or 'any') and ``commands`` (the width
    of the one-hot command it reads) say where it applies: a config naming it elsewhere is refused
    (it would pay 0 on every step, silently). ``info_keys``: the keys of an agent's info it reads;
    a run whose env's first info lacks one stops with an error naming the reward, the keys and the
    env (a reward used on an env it was not written for)."""
    if not name or ":" in name:
        raise ValueError(f"reward name {name!r}: use a plain name ('module:function' paths need no registering)")
    if layer not in ("bottom", "upper", "any"):
        raise ValueError(f"reward {name!r}: layer must be 'bottom', 'upper' or 'any', not {layer!r}")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = RewardFn(fn, vectorized, name, layer, commands, tuple(info_keys))
        fn.__hdppo_vectorized__ = vectorized  # type: ignore[attr-defined]
        return fn

    return deco


def _builtin_modules() -> dict[str, str]:
    from .builtin import REWARDS

    return REWARDS


def registered_rewards() -> list[str]:
    """Every name ``reward.intrinsic_fn`` accepts besides ``module:function`` paths."""
    return sorted(set(_builtin_modules()) | set(_REGISTRY))


def is_known_reward(name: str) -> bool:
    """True for a registered or built-in name, or anything shaped like ``module:function`` (such
    a path is imported where the reward is computed, not when a config is validated)."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        return bool(module_name and attr)
    return name in _REGISTRY or name in _builtin_modules()


def check_reward_fits(reward: RewardFn, field: str, layer_name: str, bottom: bool, command_width: int,
                      command_type: str = "discrete") -> None:
    """A :class:`ConfigError` naming ``field`` when the named ``reward`` was written for another
    kind of layer or command than layer ``layer_name`` has (its lanes are agents when ``bottom``;
    ``command_width``: the width of the command it receives from above, 0 on the top layer;
    ``command_type``: the above layer's ``action.type``, since a Box goal or a multidiscrete
    command of that width is not the one-hot a ``commands=`` reward reads)."""
    wrong = []
    if reward.layer == "bottom" and not bottom:
        wrong.append("it reads one agent's info per lane, as a bottom layer has, and this is an upper layer "
                     "(its lanes hold several agents)")
    if reward.layer == "upper" and bottom:
        wrong.append("it reads a lane's member agents, as an upper layer has, and this is the bottom layer")
    if reward.commands is not None and command_width and command_type != "discrete":
        kind = "a box goal of" if command_type == "box" else f"a {command_type} command of"
        wrong.append(f"it reads a one-hot command of {reward.commands} choices and this layer receives "
                     f"{kind} {command_width} numbers (the layer above's action.type: {command_type})")
    elif reward.commands is not None and command_width != reward.commands:
        wrong.append(f"it reads a command of {reward.commands} choices and this layer receives "
                     + (f"{command_width}" if command_width else "none (it is the top layer)"))
    if wrong:
        raise ConfigError(f"{field} {reward.name!r} does not fit layer {layer_name!r}: {'; '.join(wrong)}. It would "
                          "pay 0 on every step. Use it where it fits (see its docstring), or give this layer a "
                          "module:function reward of its own.")


def missing_info_keys(reward: RewardFn, infos: Sequence[Mapping[str, Any]],
                      columns: Mapping[str, Any] | None = None) -> list[str] | None:
    """The keys of ``reward.info_keys`` that the env's agent info dicts ``infos`` (or its info
    ``columns``) lack: [] when it has them all, None while no agent has an info yet."""
    if not reward.info_keys:
        return []
    have = set(columns or ())
    first = next((i for i in infos if i), None)
    if first is None and not have:
        return None
    have |= set(first or ())
    return [k for k in reward.info_keys if k not in have]


def resolve_reward(name_or_path: str, field: str = "intrinsic_fn") -> RewardFn:
    """The reward for a registered name or a ``package.module:function`` path; raises
    :class:`ConfigError` naming ``field`` (e.g. ``layers[1] (control).reward.intrinsic_fn``) and
    listing the registered names."""
    if ":" in name_or_path:
        fn = import_object(name_or_path, field)
        if not callable(fn):
            raise ConfigError(f"{field} {name_or_path!r} is not a function")
        check_signature(fn, f"{field} {name_or_path!r}", "fn(command=, obs=, next_obs=, action=, info=)",
                        command=None, obs=None, next_obs=None, action=None, info=None)
        return RewardFn(fn, bool(getattr(fn, "__hdppo_vectorized__", False)), name_or_path)
    if name_or_path not in _REGISTRY and name_or_path in _builtin_modules():
        importlib.import_module(_builtin_modules()[name_or_path])
    if name_or_path not in _REGISTRY:
        raise ConfigError(f"{field} {name_or_path!r} is not a registered reward; registered: "
                          f"{', '.join(registered_rewards())} (or 'package.module:function' for your own).")
    return _REGISTRY[name_or_path]
