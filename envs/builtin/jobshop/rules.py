"""Priority dispatching rules (Panwalkar & Iskander 1977; Haupt 1989), applied to the candidates
of a generation scheme (:class:`.schedule.Dispatcher`): the candidate with the best priority is
dispatched, ties to the lowest job index.

| rule | picks the candidate with |
|---|---|
| ``MWKR`` | the most work remaining (its job's unfinished durations, this operation included) |
| ``SPT`` | the shortest processing time of this operation |
| ``MOR`` | the most operations remaining |
| ``FIFO`` | the earliest ready time (its job's previous operation done first) |
| ``LWKR`` | the least work remaining |
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...errors import EnvError
from .instances import Instance
from .schedule import Dispatcher

__all__ = ["RULES", "rule_choice", "run_rule"]

# Each rule: the dispatcher -> a score per job, the highest dispatched.
RULES: dict[str, Callable[[Dispatcher], np.ndarray]] = {
    "MWKR": lambda d: d.remaining_work().astype(np.float64),
    "SPT": lambda d: -d.op_p.astype(np.float64),
    "MOR": lambda d: (d.m - d.next_op).astype(np.float64),
    "FIFO": lambda d: -d.job_ready.astype(np.float64),
    "LWKR": lambda d: -d.remaining_work().astype(np.float64),
}


def rule_choice(d: Dispatcher, rule: str) -> int:
    """The job ``rule`` dispatches next among ``d.legal()`` (a job index: through an env whose
    ``job_order`` is ``mwkr``, :meth:`JobShopEnv.rule_action` gives the slot)."""
    key = str(rule).upper()
    if key not in RULES:
        raise EnvError(f"jobshop: no dispatching rule {rule!r}; choose one of {', '.join(RULES)}.")
    score = np.where(d.legal(), RULES[key](d), -np.inf)
    return int(np.argmax(score))


def run_rule(instance: Instance, rule: str, scheme: str = "active") -> tuple[int, np.ndarray]:
    """The makespan and the schedule ``starts [n, m]`` the rule builds with the scheme."""
    d = Dispatcher(instance, scheme)
    while not d.done:
        d.schedule(rule_choice(d, rule))
    return d.makespan(), d.starts.copy()
