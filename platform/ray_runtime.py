"""Starting or joining Ray, with errors that say what to do."""
from __future__ import annotations

import logging
import os
import socket

import ray

from .errors import RayStartError


def init_ray(address: str | None = None, num_cpus: int | None = None) -> float:
    """Start an embedded Ray (``address`` None or 'local') or join a cluster; returns its CPU count.

    ``address="local"`` is explicit on purpose: a plain ``ray.init()`` follows a stale
    ``/tmp/ray/ray_current_cluster`` file and tries to join a cluster that no longer runs.
    """
    if address not in (None, "local", "auto"):
        _probe(address)
    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1))
    local = address in (None, "local")
    kwargs: dict = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True}
    if local:
        kwargs["address"] = "local"
        kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
        # A user's env module next to their config ('my_envs:make') must import in the workers
        # as it does in the driver. (On a cluster, install it or use a runtime_env working_dir.)
        path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)
        kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
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


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes: ``ray.init`` retries an unreachable GCS for a long time."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return
    except ValueError:
        raise RayStartError(f"Ray address {address!r} is not host:port. Use 'auto' on a cluster node, "
                            "host:port of the head node, or drop --address to train on this machine.") from None
    except OSError as exc:
        raise RayStartError(f"nothing answers at Ray address {address!r} ({exc.strerror or exc}). Start the head "
                            "node with `ray start --head`, check the address and port, or drop --address to "
                            "train on an embedded local Ray.") from None
