"""Kickstarting teachers (``layer.teacher.policy``), written by the env module that owns them.

A teacher labels every decision a layer records with the action a script would take; the loss
adds ``coeff * -log pi(teacher's action | s)`` (see ``TeacherSpec`` in the config). Two kinds:

Per lane (the default): called once for each lane that decided, with that copy's raw
observations and env::

    fn(raw_obs, members, env, **kwargs) -> action      # members: the lane's agent names

It needs per-copy Python envs (``raw_obs``), so it cannot serve a natively vectorised env.

Vectorised (``@vectorized_teacher``): called once per layer and env step for all the lanes that
decided, in every copy at once::

    fn(env=venv, copies=[k], members=[k lists of agent indices], command=[k, C] or None,
       **kwargs) -> [k, action values]

``env`` is the vectorised env itself (for ``env.type: vector``, the factory's object), ``copies``
the copy of each lane, ``members`` its agents as indices into ``env.agents``, ``command`` the
command the lane received from the layer above (as the layer's observation carries it), None on
the top layer. This is the form for a batched simulator such as skirmish, where a script reads
the whole battle once per step.
"""
from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


def vectorized_teacher(fn: F) -> F:
    """Marks ``fn`` as a vectorised teacher (see the module docstring)."""
    fn.vectorized_teacher = True  # type: ignore[attr-defined]
    return fn


def is_vectorized_teacher(fn: Callable) -> bool:
    return bool(getattr(fn, "vectorized_teacher", False))
