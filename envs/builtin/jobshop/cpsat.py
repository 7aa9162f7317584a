"""OR-Tools CP-SAT as the oracle: the disjunctive model of the job shop (an interval per
operation, precedence within a job, ``AddNoOverlap`` per machine), minimising the makespan under a
time limit. Returns the makespan found, CP-SAT's proven lower bound and whether it is optimal."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .instances import Instance

__all__ = ["CpSatResult", "solve"]


@dataclass
class CpSatResult:
    status: str                     # OPTIMAL | FEASIBLE | UNKNOWN | INFEASIBLE | MODEL_INVALID
    makespan: Optional[int]         # of the best schedule found (None when none)
    bound: Optional[int]            # CP-SAT's proven lower bound on the makespan
    wall_s: float
    starts: Optional[np.ndarray]    # [n_jobs, n_machines]

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"


def solve(instance: Instance, time_limit_s: float = 10.0, workers: int = 2, seed: int = 0,
          hint: Optional[np.ndarray] = None) -> CpSatResult:
    """Solve ``instance`` with CP-SAT in at most ``time_limit_s`` s on ``workers`` search threads;
    ``hint``: a schedule ``starts [n, m]`` to start from (a rule's, say)."""
    from ortools.sat.python import cp_model

    p, mach = instance.durations, instance.machines
    n, m = p.shape
    horizon = int(p.sum())
    model = cp_model.CpModel()
    start = [[model.NewIntVar(0, horizon, f"s{j}_{k}") for k in range(m)] for j in range(n)]
    per_machine: dict[int, list] = {}
    for j in range(n):
        for k in range(m):
            d = int(p[j, k])
            iv = model.NewFixedSizeIntervalVar(start[j][k], d, f"i{j}_{k}")
            per_machine.setdefault(int(mach[j, k]), []).append(iv)
            if k:
                model.Add(start[j][k] >= start[j][k - 1] + int(p[j, k - 1]))
    for ivs in per_machine.values():
        model.AddNoOverlap(ivs)
    cmax = model.NewIntVar(0, horizon, "makespan")
    for j in range(n):
        model.Add(cmax >= start[j][m - 1] + int(p[j, m - 1]))
    model.Minimize(cmax)
    if hint is not None:
        for j in range(n):
            for k in range(m):
                model.AddHint(start[j][k], int(hint[j, k]))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(seed)
    t0 = time.perf_counter()
    code = solver.Solve(model)
    wall = time.perf_counter() - t0
    status = solver.StatusName(code)
    if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        starts = np.array([[solver.Value(start[j][k]) for k in range(m)] for j in range(n)], np.int64)
        return CpSatResult(status, int(solver.ObjectiveValue()), int(round(solver.BestObjectiveBound())), wall, starts)
    return CpSatResult(status, None, None, wall, None)
