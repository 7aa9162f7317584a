"""``ray.cpu_affinity``: each learner on a core of its own, the rollout workers on the others.

Where the learner's update is the iteration (pipeline, soft and async modes, whose workers
sample beside it), the OS otherwise runs a worker on the learner's core now and then and the
update waits: ``configs/battle.yaml`` on 2 cores (one learner, two workers, pipelined) trained
1.10x faster pinned, the update 0.78 against 0.86 s (README, Devices). Where the workers are the
iteration (plain ``sync``: they sample while the learner waits) pinning leaves the learner's core
idle and costs: Hopper 0.69x. Sample Factory's ``set_workers_cpu_affinity`` is the same idea.

One machine only (the embedded Ray, ``ray.address`` null or 'local'): the cores are counted on
the machine each actor runs on, and a worker on a node with no learner would leave a core idle.
Linux only (``os.sched_setaffinity``); elsewhere a warning and nothing pinned.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def plan_core(role: str, slot: int, num_learners: int, cores: list[int]) -> int | None:
    """The core for the ``slot``-th learner or worker (``role``) of a run with ``num_learners``
    learners, on a machine whose usable ``cores`` are listed. Learners take the first cores, one
    each, and the workers share the rest round robin. None (nothing pinned) where the learners
    cannot each have a core and leave one to the workers: learners sharing a core would wait on
    each other (a three-layer skirmish run on 2 cores trained at 0.755x pinned that way)."""
    if role not in ("learner", "worker"):
        raise ValueError(f"role must be 'learner' or 'worker', got {role!r}")
    if num_learners < 1 or len(cores) < num_learners + 1:
        return None
    if role == "learner":
        return cores[slot % num_learners]
    rest = cores[num_learners:]
    return rest[slot % len(rest)]


def pin_process(core: int) -> None:
    """Pin every thread of this process (Ray's, torch's and the caller's) to ``core``; threads
    started later inherit it from the thread that starts them."""
    tids = [int(t.name) for t in Path("/proc/self/task").iterdir()] if Path("/proc/self/task").is_dir() else [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, {core})
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            continue


def in_ray_actor() -> bool:
    """Whether this code runs inside a Ray actor (its own process): pinning anywhere else would
    pin the caller's process, a test's or the driver's."""
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # noqa: BLE001 - no Ray, or no runtime context: not an actor
        return False


def slot_of(cfg: Any, role: str, layers: list[str], index: int = 0) -> tuple[int, int]:
    """``(slot, number of learners)`` of a run's learner of ``layers[0]``, or (``role`` 'worker')
    of worker ``index`` of the group of ``layers``: learners in the order of the DPPO groups'
    layers, workers numbered on from the earlier groups' (their configured counts)."""
    groups = cfg.layer_groups()
    learners = [name for g in groups for name in g]
    if role == "learner":
        return learners.index(layers[0]), len(learners)
    group = next((k for k, g in enumerate(groups) if set(g) & set(layers)), 0)
    before = sum(cfg.group_dppo(g).num_workers for g in groups[:group])
    return before + index, len(learners)


def apply(cfg: Any, role: str, layers: list[str], index: int = 0) -> int | None:
    """Pin this actor's process as :func:`plan_core` says when ``cfg.ray.cpu_affinity`` is set and
    it is a Ray actor; the core, or None where nothing was pinned."""
    if not cfg.ray.cpu_affinity or not in_ray_actor():
        return None
    if not hasattr(os, "sched_setaffinity"):
        log.warning("ray.cpu_affinity: this OS cannot pin processes to cores (Linux only); nothing pinned")
        return None
    slot, num_learners = slot_of(cfg, role, layers, index)
    core = plan_core(role, slot, num_learners, sorted(os.sched_getaffinity(0)))
    if core is not None:
        pin_process(core)
    return core
