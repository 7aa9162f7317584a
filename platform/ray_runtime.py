"""Starting or joining Ray, with errors that say what to do."""
from __future__ import annotations

import logging
import os

import ray

from hdppo.platform.errors import RayStartError


def init_ray(address: str | None = None, num_cpus: int | None = None) -> float:
    """Start an embedded Ray (``address`` None or 'local') or join a cluster; returns its CPU count.

    ``address="local"`` is explicit on purpose: a plain ``ray.init()`` follows a stale
    ``/tmp/ray/ray_current_cluster`` file and tries to join a cluster that no longer runs.
    """
    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1))
    local = address in (None, "local")
    kwargs: dict = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True}
    if local:
        kwargs["address"] = "local"
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
    else:
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = "an embedded local Ray" if local else f"the Ray cluster at {address!r}"
        fix = ("Check free memory and /tmp space, or run `ray stop` to clear a stale instance."
               if local else "Start it with `ray start --head` (and `ray start --address=HEAD:6379` on other nodes), "
               "check the address, or drop --address to train on this machine.")
        raise RayStartError(f"could not start or reach {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}. {fix}") from None
    return float(ray.cluster_resources().get("CPU", 1))
