"""Schedules: the dispatching state that builds them, and the feasibility check.

A schedule is ``starts [n_jobs, n_machines]``: the start time of operation ``k`` of job ``j``.
:class:`Dispatcher` builds one operation at a time, each appended to its machine at its earliest
start (the job's previous operation done, the machine free), with two classic generation schemes
(Giffler & Thompson 1960; Baker, *Introduction to Sequencing and Scheduling*, 1974):

- ``active``: Giffler-Thompson. Among the jobs' next operations take the earliest completion
  ``C*`` and its machine ``M*``; the candidates are the operations on ``M*`` that can start before
  ``C*``. Every schedule built is active, and some sequence of choices builds an optimal one.
- ``nondelay``: the candidates are the operations that can start earliest; no machine is left
  idle while an operation waits for it. Smaller choice sets; the optimum may be out of reach.
"""
from __future__ import annotations

import numpy as np

from .instances import Instance

__all__ = ["Dispatcher", "SCHEMES", "check_schedule", "makespan"]

SCHEMES = ("active", "nondelay")


class Dispatcher:
    """The partial schedule of one instance, as arrays. ``legal()`` are the candidate jobs of the
    scheme; ``schedule(j)`` starts job ``j``'s next operation at its earliest start."""

    def __init__(self, instance: Instance, scheme: str = "active"):
        if scheme not in SCHEMES:
            raise ValueError(f"jobshop: scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
        self.inst = instance
        self.scheme = scheme
        self.n, self.m = instance.n_jobs, instance.n_machines
        self.p = instance.durations.astype(np.int64)
        self.mach = instance.machines.astype(np.int64)
        self.pmax = float(self.p.max())
        # Remaining work of each job after (and including) op k: suffix sums.
        self.suffix = np.concatenate([np.cumsum(self.p[:, ::-1], axis=1)[:, ::-1], np.zeros((self.n, 1), np.int64)], 1)
        self.reset()

    def reset(self) -> None:
        n, m = self.n, self.m
        self.next_op = np.zeros(n, np.int64)
        self.job_ready = np.zeros(n, np.int64)
        self.mach_ready = np.zeros(m, np.int64)
        self.starts = np.full((n, m), -1, np.int64)
        self.mach_load = np.zeros(m, np.int64)                       # remaining work per machine
        np.add.at(self.mach_load, self.mach.ravel(), self.p.ravel())
        self.mach_left = np.full(m, n, np.int64)                     # remaining ops per machine
        self.order: list[int] = []                                   # jobs in the order dispatched
        self._refresh()

    # --- the candidates -------------------------------------------------------------------------
    def _refresh(self) -> None:
        live = self.next_op < self.m
        self.live = live
        k = np.minimum(self.next_op, self.m - 1)
        idx = np.arange(self.n)
        self.op_mach = self.mach[idx, k]
        self.op_p = np.where(live, self.p[idx, k], 0)
        self.est = np.where(live, np.maximum(self.job_ready, self.mach_ready[self.op_mach]), 0)
        self.ect = self.est + self.op_p
        legal = np.zeros(self.n, bool)
        self.gt_machine = -1
        if live.any():
            if self.scheme == "active":
                ect = np.where(live, self.ect, np.iinfo(np.int64).max)
                j_star = int(np.argmin(ect))
                c_star, self.gt_machine = ect[j_star], int(self.op_mach[j_star])
                legal = live & (self.op_mach == self.gt_machine) & (self.est < c_star)
                # The operation that sets C* is always a candidate: with a zero duration (orb07
                # has one) it starts at C* itself, and the strict test above would leave none.
                legal[j_star] = True
            else:
                est = np.where(live, self.est, np.iinfo(np.int64).max)
                legal = live & (est == est.min())
        self.legal_mask = legal

    def legal(self) -> np.ndarray:
        """Bool ``[n_jobs]``: the jobs whose next operation may be dispatched now."""
        return self.legal_mask

    @property
    def done(self) -> bool:
        return not self.live.any()

    @property
    def now(self) -> int:
        """The frontier: the earliest start among the next operations (0 when done)."""
        return int(self.est[self.live].min()) if self.live.any() else 0

    def remaining_work(self) -> np.ndarray:
        return self.suffix[np.arange(self.n), self.next_op]

    def lower_bound(self) -> int:
        """A bound on the makespan of any completion of this partial schedule: each job's ready
        time plus its remaining work, each machine's free time plus its remaining load (both hold
        because operations are only appended). Non-decreasing as operations are dispatched, and
        the makespan once all are."""
        return int(max((self.job_ready + self.remaining_work()).max(), (self.mach_ready + self.mach_load).max()))

    def schedule(self, j: int) -> int:
        """Dispatch job ``j``'s next operation (it must be legal); returns its start time."""
        if not (0 <= j < self.n) or not self.legal_mask[j]:
            raise ValueError(f"jobshop: job {j} is not a legal choice now (legal: {np.flatnonzero(self.legal_mask).tolist()})")
        k, mi, s, p = int(self.next_op[j]), int(self.op_mach[j]), int(self.est[j]), int(self.op_p[j])
        self.starts[j, k] = s
        self.job_ready[j] = s + p
        self.mach_ready[mi] = s + p
        self.mach_load[mi] -= p
        self.mach_left[mi] -= 1
        self.next_op[j] = k + 1
        self.order.append(int(j))
        self._refresh()
        return s

    def makespan(self) -> int:
        return int(self.job_ready.max())


def makespan(instance: Instance, starts: np.ndarray) -> int:
    return int((np.asarray(starts) + instance.durations).max())


def check_schedule(instance: Instance, starts: np.ndarray) -> list[str]:
    """Every violated constraint of a complete schedule ``starts [n_jobs, n_machines]`` (empty when
    feasible): an operation unscheduled or before 0, a job's operation starting before its previous
    one ends (precedence), two operations overlapping on one machine."""
    starts = np.asarray(starts, np.int64)
    p, mach = instance.durations, instance.machines
    n, m = p.shape
    problems: list[str] = []
    if starts.shape != (n, m):
        return [f"starts has shape {starts.shape}, the instance is {n}x{m}"]
    for j, k in zip(*np.nonzero(starts < 0)):
        problems.append(f"job {j} op {k} has no start ({starts[j, k]})")
    end = starts + p
    for j in range(n):
        for k in range(1, m):
            if starts[j, k] < end[j, k - 1]:
                problems.append(f"precedence: job {j} op {k} starts at {starts[j, k]} before op {k - 1} ends at {end[j, k - 1]}")
    for mi in range(m):
        jobs, ks = np.nonzero(mach == mi)
        order = np.argsort(starts[jobs, ks], kind="stable")
        for a, b in zip(order[:-1], order[1:]):
            ja, ka, jb, kb = jobs[a], ks[a], jobs[b], ks[b]
            if starts[jb, kb] < end[ja, ka]:
                problems.append(f"machine {mi}: job {jb} op {kb} starts at {starts[jb, kb]} while job {ja} op {ka} "
                                f"runs until {end[ja, ka]}")
    return problems
