"""Stopping ``hdppo train`` cleanly on SIGINT and SIGTERM.

Ctrl-C sends SIGINT to the terminal's whole foreground process group. ``timeout``, ``docker
stop``, systemd and cluster schedulers send SIGTERM, ``timeout`` to the child and then to its
whole process group, systemd to every process of the service's cgroup. So the driver may get the
signal twice, and Ray's own processes get it too: Ray starts them with SIGINT blocked, and
:func:`hdppo.platform.ray_runtime.init_ray` blocks SIGTERM in them as well, so they keep serving
the driver while it saves the run; its actors run in process groups of their own.

While :class:`SignalHandlers` is active (``hdppo train`` installs it), the first SIGINT or SIGTERM
is a :class:`StopRequest`: the trainer lets the update in flight finish within
``train.stop_timeout_s`` or drops it, writes a checkpoint, and returns. Outside the training loop
(Ray starting, the final evaluation) there is nothing to wait for, and the signal raises
:class:`KeyboardInterrupt` at once. Any SIGINT after the first signal exits at once
(``os._exit``), deleting nothing, as does any signal while the trainer shuts its actors and Ray
down (``StopRequest.finishing``); a repeated SIGTERM is ignored (``timeout`` sends two).
A hook may stop a run too: ``trainer.stop.request("target reached")``.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Why and when training was asked to stop; false until then. ``interruptible`` says whether
    the trainer is somewhere a signal may simply raise KeyboardInterrupt (outside the loop)."""

    def __init__(self) -> None:
        self.reason: Optional[str] = None
        self.signum: Optional[int] = None
        self.at: Optional[float] = None  # time.monotonic() of the request
        self.interruptible = True
        self.finishing = False  # the trainer is shutting its actors and Ray down: nothing left to save

    def request(self, reason: str, signum: Optional[int] = None) -> None:
        if self.reason is None:
            self.reason, self.signum, self.at = reason, signum, time.monotonic()

    def __bool__(self) -> bool:
        return self.reason is not None

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum if self.signum is not None else 1


class Interrupted(KeyboardInterrupt):
    """A signal arrived before training started (or a KeyboardInterrupt without handlers)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def signal_name(signum: Optional[int]) -> str:
    return signal.Signals(signum).name if signum is not None else "request"


class SignalHandlers:
    """Context manager: SIGINT and SIGTERM become ``stop`` requests while it is active (in the main
    thread only; elsewhere, as in a Ray Tune trial, it does nothing). ``timeout_s``: what the
    update in flight is given (None: it always finishes, as in-process)."""

    def __init__(self, stop: StopRequest, timeout_s: Optional[float]):
        self.stop = stop
        self.timeout_s = timeout_s
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> "SignalHandlers":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._saved[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._saved.items():
            signal.signal(s, handler)
        self._saved = {}

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal_name(signum)
        if self.stop.finishing and (signum == signal.SIGINT or not self.stop):
            _say(f"[hdppo] {name} while shutting down: exiting at once. The run dir is kept as it is "
                 "(metrics.jsonl and tb/ up to the last update; the last checkpoint, if any).")
            os._exit(128 + signum)
        if self.stop:
            if signum == signal.SIGINT:
                # Not print(): the main thread may be inside a write to the same stream.
                _say(f"[hdppo] second {name}: exiting at once. The run dir is kept as it is "
                     "(metrics.jsonl and tb/ up to the last update; the last checkpoint, if any).")
                os._exit(128 + signum)
            return
        self.stop.request(f"stopped by {name}", signum)
        if self.stop.interruptible:
            raise KeyboardInterrupt
        wait = "finishes" if self.timeout_s is None else f"has {self.timeout_s:g}s to finish"
        _say(f"[hdppo] {name}: stopping; the update in flight {wait}, then a checkpoint is written. "
             "Press Ctrl-C again to exit at once.")


def _say(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass
