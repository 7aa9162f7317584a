"""How the env-step budget is shared between the DPPO groups of a run.

Each group (its own workers and learner) gets an equal share of ``train.total_env_steps``, and
its schedules (learning rate, entropy) run over that share. Groups differ in the env steps one
update takes: a strategy layer deciding every 10 steps for 2 squads fills a 256-decision batch in
1,280 env steps, the unit layer under it a 4,096-sample batch in 512. Updating every group once
per iteration would split the budget in that ratio (the unit layer would learn from 29% of the
run's env steps, not half), so an iteration updates only the groups that are not ahead: a pure
rule over the groups' env steps, below.
"""
from __future__ import annotations

from typing import Sequence


def groups_to_update(steps: Sequence[float], increments: Sequence[float]) -> list[bool]:
    """Which groups update in this iteration, given each one's env steps so far (counted from
    when it started training, see :func:`levels`) and the env steps its last update took (0
    before its first).

    A group updates when it is behind where the group that will be furthest behind after this
    iteration will stand, ``steps[g] < min_h(steps[h] + increments[h])``, and the group furthest
    behind always does (so an iteration never stalls). Groups whose updates take equal env steps
    all update together (lockstep, as before), and no group gets ahead of another by more than
    one of its own updates."""
    if not steps:
        return []
    reach = min(s + d for s, d in zip(steps, increments))
    low = min(steps)
    return [s < reach or s == low for s in steps]


def levels(env_steps: Sequence[float], offsets: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """Each group's steps as :func:`groups_to_update` compares them, and the offsets, set for
    groups seen for the first time (``None``): a group that starts late (``schedule.start_after``)
    or a run resumed with unequal counts is levelled with the group furthest behind, so the
    groups share what is left of the budget from then on instead of the others pausing while it
    catches up."""
    known = [e - o for e, o in zip(env_steps, offsets) if o is not None]
    new = [e for e, o in zip(env_steps, offsets) if o is None]
    level = min(known) if known else (min(new) if new else 0.0)
    out = [o if o is not None else e - level for e, o in zip(env_steps, offsets)]
    return [e - o for e, o in zip(env_steps, out)], out
