"""Starting or joining Ray, with errors that say what to do."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import ray

from .errors import RayStartError
from .ray_auth import auth_error, is_auth_failure, match_auth_mode, refused
from .working_dir import LARGE_FILE_BYTES
from .working_dir import runtime_env as working_dir_env


def init_ray(address: str | None = None, num_cpus: int | None = None, working_dir: str | None = None) -> float:
    """Start an embedded Ray (``address`` None or 'local') or join a cluster; returns its CPU count.

    ``address="local"`` is explicit on purpose: a plain ``ray.init()`` follows a stale
    ``/tmp/ray/ray_current_cluster`` file and tries to join a cluster that no longer runs.
    ``working_dir`` (``ray.working_dir``, the folder of the user's env and reward modules) is
    shipped to every node of a cluster (:mod:`hdppo.platform.working_dir`); an embedded Ray's
    workers, on this machine, import it in place.
    """
    if address not in (None, "local", "auto"):
        _probe(address)
    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1))
    local = address in (None, "local")
    kwargs: dict = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True}
    if not local:
        kwargs["address"] = address
        if working_dir is not None:
            kwargs["runtime_env"], large = working_dir_env(working_dir)
            if large:
                print(f"[hdppo] ray.working_dir {working_dir}: not shipped to the nodes, over "
                      f"{LARGE_FILE_BYTES // 2**20} MiB: {', '.join(large)}", file=sys.stderr)
        _join(address, kwargs, working_dir)
        cpus = float(ray.cluster_resources().get("CPU", 1))
        # 'auto' joins whatever Ray runs on this machine (another user's ray.init() included): say which.
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        print(f"[hdppo] joined the Ray cluster at {ray.get_runtime_context().gcs_address} (--address {address}): "
              f"{nodes} node(s), {cpus:g} CPUs", file=sys.stderr, flush=True)
        return cpus
    kwargs["address"] = "local"
    kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
    # A user's env module next to their config ('my_envs:make') must import in the workers
    # as it does in the driver. (On a cluster, ray.working_dir ships it.)
    path = os.pathsep.join(p for p in (working_dir, os.getcwd(), os.environ.get("PYTHONPATH")) if p)
    kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
    # Ray 2.60 turns token authentication on for a local instance wherever ~/.ray/auth_token exists
    # (a cluster set up as "Run on a cluster" says), and says so at WARNING on every start: a note
    # about a safe default, not a problem with this run.
    auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = auth_log.level
    auth_log.setLevel(logging.ERROR)
    try:
        _init_keeping_handlers(kwargs, block_sigterm=True)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
        raise RayStartError(f"could not start or reach an embedded local Ray: {_first_line(exc)}. Check free memory "
                            "and /tmp space, or run `ray stop` to clear a stale instance.") from None
    finally:
        auth_log.setLevel(level)
    return float(ray.cluster_resources().get("CPU", 1))


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__


def _join(address: str, kwargs: dict, working_dir: str | None) -> None:
    """``ray.init`` on a cluster, with token authentication matched (:mod:`hdppo.platform.ray_auth`)
    and Ray's own output kept out of sight until it is known to be worth showing.

    Ray's C++ core writes a line a second to fd 2 while the GCS refuses it, for twenty seconds:
    fd 2 goes to a log file while joining. On success the file is copied to stderr (what the user
    saw before, less the refusals of the auth probes) and removed; on failure the error names it.
    """
    from ray.exceptions import AuthenticationError

    # 'auto': ray.init matches the mode itself; ray:// is Ray Client, another protocol.
    explicit = address != "auto" and not address.startswith("ray://")
    mode = os.environ.get("RAY_AUTH_MODE", "disabled").lower()
    log = Path(tempfile.gettempdir()) / f"hdppo-ray-join-{os.getpid()}.log"
    no, probed = None, 0
    try:
        with _fd2_to(log):
            if explicit:
                mode = match_auth_mode(address)
                no = refused(address)
                sys.stderr.flush()
                probed = log.stat().st_size  # the probes' own refusals are not news once joined
            if no is None:
                _init_keeping_handlers(kwargs, block_sigterm=False)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError, AuthenticationError) as exc:
        if is_auth_failure(exc):
            raise auth_error(address, mode, log) from None
        if working_dir is not None and any(w in str(exc) for w in ("working_dir", "Package size", "runtime_env")):
            raise RayStartError(f"could not ship ray.working_dir {working_dir} to the Ray cluster at {address!r}: "
                                f"{_first_line(exc)}. Keep large files out of it (list them in a .rayignore or "
                                f".gitignore file there) or give the folder that holds only your env and reward "
                                f"modules. Ray's connection log: {log}.") from None
        raise RayStartError(f"could not reach the Ray cluster at {address!r}: {_first_line(exc)}. Start it with "
                            "`ray start --head` (and `ray start --address=HEAD:6379` on other nodes), check the "
                            f"address, or drop --address to train on this machine. Ray's connection log: {log}.") from None
    if no is not None:
        raise auth_error(address, mode, log)
    try:
        with open(log, "rb") as f:
            f.seek(probed)
            sys.stderr.write(f.read().decode(errors="replace"))
        log.unlink()
    except OSError:
        pass


@contextlib.contextmanager
def _fd2_to(path: Path) -> Iterator[None]:
    """File descriptor 2 (where Ray's C++ core logs, as well as ``sys.stderr``) into ``path``."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "wb") as out:
            os.dup2(out.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


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
