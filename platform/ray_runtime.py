"""Starting or joining Ray, with errors that say what to do."""
from __future__ import annotations

import logging
import os
import signal
import socket
import threading

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
        _init_keeping_handlers(kwargs, block_sigterm=local)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        where = "an embedded local Ray" if local else f"the Ray cluster at {address!r}"
        fix = ("Check free memory and /tmp space, or run `ray stop` to clear a stale instance."
               if local else "Start it with `ray start --head` (and `ray start --address=HEAD:6379` on other nodes), "
               "check the address, or drop --address to train on this machine.")
        raise RayStartError(f"could not start or reach {where}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}. {fix}") from None
    return float(ray.cluster_resources().get("CPU", 1))


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_sigterm_blocked = False  # whether the embedded Ray running now was started with SIGTERM blocked


def _init_keeping_handlers(kwargs: dict, block_sigterm: bool) -> None:
    """``ray.init``, with two things about signals put right (hdppo.platform.interrupts).

    The processes an embedded Ray starts (gcs, raylet, agents) stay in the driver's process group,
    so a SIGTERM sent to the group (``timeout``, systemd) would kill them under the driver while it
    writes its checkpoint. Ray starts them with SIGINT blocked; with SIGTERM blocked in this thread
    while they start, they inherit both. And ``ray.init`` replaces the driver's SIGTERM handler
    (with ``sys.exit``, and its C++ core with one that prints a stack dump): the handlers the
    program had installed are put back, before the signals are unblocked.
    """
    global _sigterm_blocked
    main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in _SIGNALS} if main else {}
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS) if block_sigterm else None
    try:
        ray.init(**kwargs)
        _sigterm_blocked = block_sigterm
    finally:
        for s, handler in saved.items():
            if callable(handler) and handler is not signal.default_int_handler:
                signal.signal(s, handler)
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def shutdown_ray() -> None:
    """``ray.shutdown()``, without waiting for nothing: Ray asks its processes to stop with SIGTERM
    and gives each a second; those of an embedded Ray started by :func:`init_ray` block SIGTERM,
    so they are killed at once (the instance is this run's alone)."""
    global _sigterm_blocked
    if not ray.is_initialized():
        return
    node = getattr(ray._private.worker, "_global_node", None)  # private: checked, with a fallback
    kill_all = getattr(node, "kill_all_processes", None)
    if _sigterm_blocked and kill_all is not None:
        node.kill_all_processes = lambda **kw: kill_all(**{**kw, "allow_graceful": False})  # type: ignore[union-attr]
    try:
        ray.shutdown()
    finally:
        _sigterm_blocked = False


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
