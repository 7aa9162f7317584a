"""The exploration-bonus interface and its registry.

A bonus is a class with a worker side (it scores observations) and, optionally, a learner side
(it trains on the group's samples and publishes a state that the workers adopt with each
version, as RND's predictor). Register one with ``@register_bonus("name")`` and name it in a
layer's ``exploration.type``; or name it ``"package.module:Class"``, which works on Ray workers
without anything registered there (they import it by path), so a user's bonus needs no edit of
hdppo. Built-in names are imported lazily, so ``count`` needs no torch and the registry is cheap
to import for config validation.

Lifecycle, as the runtime drives it::

    bonus = make_bonus(layer_cfg.exploration, obs_dim, layer_name)   # on every worker and on the learner
    # worker, each env step, obs [B, D] normalised float32:
    r = bonus(obs, coeff)                                            # -> [B] float32, added to the reward
    # learner, after each update (only if bonus.learned):
    loss = bonus.train(obs_tensor, num_epochs, num_minibatches, rng)
    state = bonus.state()                                            # published with the new version
    # worker, when it pulls that version:
    bonus.load_state(state)
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ...envs.errors import ConfigError
from ...envs.loading import import_object

__all__ = ["Bonus", "bonus_class", "make_bonus", "register_bonus", "registered_bonuses"]

# Built-in bonuses: name -> the module that registers it (imported on first lookup).
_BUILTIN: dict[str, str] = {"count": "hdppo.policies.bonuses.count", "rnd": "hdppo.policies.bonuses.rnd"}
_REGISTRY: dict[str, type["Bonus"]] = {}


class Bonus(ABC):
    """One layer's exploration bonus.

    Constructed as ``cls(spec, obs_dim, layer)``: ``spec`` is the layer's ``exploration`` section
    (``spec.params`` holds a plug-in's own settings), ``obs_dim`` the size of the layer's
    observation, ``layer`` its name (seed anything that must agree across processes with it:
    every worker and the learner build their own copy).
    """

    #: True if the bonus has a learner side (:meth:`train`, :meth:`state`). Such a bonus needs
    #: the samples on the learner, i.e. ``dppo.mode: central`` (checked when the config is validated).
    learned: ClassVar[bool] = False

    def __init__(self, spec: Any, obs_dim: int, layer: str):
        self.spec, self.obs_dim, self.layer = spec, obs_dim, layer

    # -- worker side ---------------------------------------------------------------------------
    @abstractmethod
    def __call__(self, obs: np.ndarray, coeff: float) -> np.ndarray:
        """Bonuses ``[B]`` float32 for normalised observations ``obs [B, D]`` float32, scaled by
        ``coeff`` (the layer's coefficient at this point of its schedule)."""

    def load_state(self, state: Any) -> None:
        """Adopt the state the learner published (:meth:`state`) with a new version."""

    # -- learner side (``learned = True``) -----------------------------------------------------
    def train(self, obs: Any, num_epochs: int, num_minibatches: int, rng: np.random.Generator) -> float:
        """Train on one update's observations (a torch tensor ``[B, D]``, normalised); returns the
        mean loss (the learner logs it)."""
        raise NotImplementedError(f"bonus {type(self).__name__} has no learner side (learned = False)")

    def state(self) -> Any:
        """What the workers need from the learner side (picklable; a snapshot later training
        cannot change); published with each version."""
        return None

    def checkpoint(self) -> dict[str, Any]:
        """The learner side's full state for a checkpoint (optimizer included)."""
        return {}

    def restore(self, state: dict[str, Any]) -> None:
        """Load what :meth:`checkpoint` returned."""


def register_bonus(name: str):
    """Class decorator: make ``exploration.type: <name>`` build this class."""
    if ":" in name or not name or name == "none":
        raise ValueError(f"bonus name {name!r}: use a plain name ('none' and 'module:Class' are taken)")

    def deco(cls: type[Bonus]) -> type[Bonus]:
        if not (isinstance(cls, type) and issubclass(cls, Bonus)):
            raise TypeError(f"register_bonus({name!r}): {cls!r} is not a subclass of hdppo.policies.bonuses.Bonus")
        _REGISTRY[name] = cls
        return cls

    return deco


def registered_bonuses() -> list[str]:
    """Every name ``exploration.type`` accepts besides 'none' and 'module:Class'."""
    return sorted(set(_BUILTIN) | set(_REGISTRY))


def bonus_class(name: str) -> type[Bonus]:
    """The class for a registered name or a ``package.module:Class`` path; raises
    :class:`ConfigError` saying what is registered."""
    if ":" in name:
        cls = import_object(name, "exploration.type")
        if not (isinstance(cls, type) and issubclass(cls, Bonus)):
            raise ConfigError(f"exploration.type {name!r} is not a subclass of hdppo.policies.bonuses.Bonus")
        return cls
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _REGISTRY:
        raise ConfigError(f"exploration.type {name!r} is not a registered bonus; registered: "
                          f"{', '.join(registered_bonuses())} (or 'none', or 'package.module:Class' for your own).")
    return _REGISTRY[name]


def make_bonus(spec: Any, obs_dim: int, layer: str) -> Bonus | None:
    """The layer's bonus from its ``exploration`` section (anything with ``.type``), or None for
    ``type: none``. Workers and the learner both call this."""
    if spec.type == "none":
        return None
    return bonus_class(spec.type)(spec, obs_dim, layer)
