"""The interface of a sync mode and the registry that names them.

A sync mode decides how a group's rollouts are collected for one update: with a barrier
(``sync``), with the next rollouts started during the update (``pipeline``), or streamed in
chunks without a barrier (``soft``, ``async``). The group (:class:`hdppo.platform.group.DPPOGroup`)
owns the pool, the learners, fault tolerance and elastic resizing; a mode only issues and
gathers sample calls, and keeps its own calls in flight in step with the pool.

A new mode is a new module::

    from . import SyncMode, register

    @register("mine")
    class Mine(SyncMode):
        def collect(self, group):
            calls = [group.sample(i) for i in range(len(group.workers))]
            group.backend.wait_all([c.ref for c in calls])
            return [c.ref for c in calls], [c.source for c in calls]

and ``dppo.sync: mine`` in a config (the module must be imported before the config is validated).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

if TYPE_CHECKING:  # the group imports this package, not the other way round
    from ..group import DPPOGroup

Source = tuple[int, int]  # (worker index, generation): which incarnation of a worker made a result


@dataclass
class Call:
    """A sample call in flight: its result (a reference on Ray) and the worker that runs it."""

    ref: Any
    source: Source


class SyncMode:
    """One group's collection strategy; one instance per group, holding its calls in flight.

    Class attributes describe the mode to config validation (hdppo.platform.config), so that a
    new mode needs no edit there:

    - ``streaming``: rollouts are cut into ``dppo.chunks_per_worker`` chunks (see ``worker_quota``);
    - ``min_lag``: the fewest versions behind the learner its samples can be (1 when workers
      sample during the update, so ``dppo.max_lag`` must be at least that);
    - ``barrier``: every rollout of an update acted with the newest weights, which mode ``dppo``
      needs (each gradient step takes every worker's gradient on one version);
    - ``refresh_in_rollout``: workers adopt newer weights inside a rollout every
      ``dppo.refresh_every`` steps.
    """

    name: ClassVar[str] = ""
    streaming: ClassVar[bool] = False
    min_lag: ClassVar[int] = 0
    barrier: ClassVar[bool] = True
    refresh_in_rollout: ClassVar[bool] = False

    def collect(self, group: "DPPOGroup") -> tuple[list[Any], list[Source]]:
        """The results (references) the next update uses, and the source of each. The results may
        include failed calls: the group sorts those out (replaces the worker, drops the result)."""
        raise NotImplementedError

    def on_worker_failure(self, group: "DPPOGroup", index: int, cause: BaseException) -> None:
        """Worker ``index`` was just replaced (``group.workers[index]`` is the fresh one): re-issue
        the calls this mode had in flight on the dead one."""

    def on_resize(self, group: "DPPOGroup", num_workers: int) -> None:
        """The pool now has ``num_workers`` workers (removed from, or added at, the end): forget the
        calls of removed workers, start any the mode keeps in flight for new ones."""


SYNC_MODES: dict[str, type[SyncMode]] = {}


def register(name: str) -> Callable[[type[SyncMode]], type[SyncMode]]:
    """Class decorator: make the mode available as ``dppo.sync: <name>``."""

    def add(cls: type[SyncMode]) -> type[SyncMode]:
        if not (isinstance(cls, type) and issubclass(cls, SyncMode)):
            raise TypeError(f"sync mode {name!r}: {cls!r} is not a SyncMode subclass")
        cls.name = name
        SYNC_MODES[name] = cls
        return cls

    return add


def sync_mode_class(name: str) -> type[SyncMode]:
    try:
        return SYNC_MODES[name]
    except KeyError:
        raise ValueError(f"unknown sync mode {name!r}; registered: {', '.join(sorted(SYNC_MODES))}") from None


def make_sync_mode(name: str) -> SyncMode:
    return sync_mode_class(name)()
