"""Elastic worker pools: the resize policy (a pure function), the CPU meter it reads, and the
``hdppo scale`` request file a running trainer picks up between updates."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .config import ElasticConfig

SCALE_REQUEST = "scale_request.json"


def decide_workers(current: int, cpu_util: float, cfg: ElasticConfig, free_cpus: float, worker_cpus: float) -> int:
    """The pool size for the next updates.

    Grow by one while the machine has idle CPU (utilization below ``low_util``) and Ray still has
    room for another worker; shrink by one while it is oversubscribed (above ``high_util``:
    workers then only take CPU from each other and from the learner). One step at a time, so
    that each change is measured before the next.
    """
    current = min(max(current, cfg.min_workers), cfg.max_workers)
    if cpu_util < cfg.low_util and current < cfg.max_workers and free_cpus >= worker_cpus:
        return current + 1
    if cpu_util > cfg.high_util and current > cfg.min_workers:
        return current - 1
    return current


def busy_share(before: tuple, after: tuple) -> float | None:
    """CPU utilization (0..1) between two ``psutil.cpu_times()`` readings: the share of the
    elapsed CPU time not idle (idle and iowait count as idle); None when no time elapsed."""
    delta = {f: b - a for f, a, b in zip(after._fields, before, after)}
    total = sum(delta.values())
    if total <= 0:
        return None
    idle = delta.get("idle", 0.0) + delta.get("iowait", 0.0)
    return min(max(1.0 - idle / total, 0.0), 1.0)


class CpuMeter:
    """Mean CPU utilization (0..1, all cores of this node) since its last reading, from its own
    ``cpu_times`` (``psutil.cpu_percent(interval=None)`` keeps one interval per process, shared by
    every group's meter, and reads 0.0 when asked again too soon: a bogus 0% that resized pools)."""

    MIN_INTERVAL_S = 0.2  # a reading over less than this is noise: None (no reading)

    def __init__(self) -> None:
        import psutil  # a Ray dependency

        self._psutil = psutil
        self._times, self._at = psutil.cpu_times(), time.monotonic()

    def __call__(self) -> float | None:
        now = time.monotonic()
        if now - self._at < self.MIN_INTERVAL_S:
            return None
        times = self._psutil.cpu_times()
        share = busy_share(self._times, times)
        self._times, self._at = times, now
        return share


def request_scale(run_dir: Path | str, workers: int, group: str | None = None) -> Path:
    """Ask the trainer of ``run_dir`` to resize a group (all groups when ``group`` is None).
    Written atomically: the trainer never reads half a request."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise FileNotFoundError(run_dir)
    path = run_dir / SCALE_REQUEST
    tmp = path.with_suffix(".tmp")
    # Stamped, so that a trainer started later (a run resumed days after) can tell it was not meant for it.
    tmp.write_text(json.dumps({"group": group, "workers": int(workers), "time": time.time()}))
    os.replace(tmp, path)
    return path


def scale_request_pending(run_dir: Path) -> bool:
    """Whether ``hdppo scale`` has left a request that :func:`take_scale_request` would take."""
    return (Path(run_dir) / SCALE_REQUEST).exists()


def take_scale_request(run_dir: Path) -> dict | None:
    """The pending request, removed so that it is applied once; None when there is none."""
    path = Path(run_dir) / SCALE_REQUEST
    try:
        claimed = path.with_suffix(".claimed")
        os.replace(path, claimed)
    except FileNotFoundError:
        return None
    request = json.loads(claimed.read_text())
    claimed.unlink()
    return request
