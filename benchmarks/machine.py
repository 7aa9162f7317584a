"""What machine and software a benchmark ran on, so results can be compared honestly.

Usage:  python benchmarks/machine.py      (prints one JSON object)
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import platform
import socket
import sys


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 ** 2, 2)  # kB -> GiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _version(module: str) -> str | None:
    try:
        return getattr(importlib.import_module(module), "__version__", "unknown")
    except Exception:  # noqa: BLE001 - a missing package is just "not installed"
        return None


def machine_info() -> dict:
    """CPU, core count, memory, library versions, host and a UTC timestamp."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,  # cores this process may use (containers can restrict it)
        "mem_total_gib": _mem_total_gib(),
        "load_avg_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "ray": _version("ray"),
        "gymnasium": _version("gymnasium"),
        "mujoco": _version("mujoco"),
        "numpy": _version("numpy"),
        "hostname": socket.gethostname(),
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


if __name__ == "__main__":
    print(json.dumps(machine_info(), indent=2))
