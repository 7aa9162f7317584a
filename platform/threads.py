"""torch's intra-op threads for learners and workers.

A worker acts on a few rows per step and shares the machine with other workers: one thread.
A learner may use more where the cores would otherwise be idle (see
:func:`hdppo.platform.group.learner_threads`).
"""
from __future__ import annotations

import os

import torch


def thread_count(num_threads: int) -> int:
    """``num_threads``, or (0) the cores this process may run on, at most 8: beyond that a PPO
    minibatch of this size gains little and the threads would crowd the machine."""
    if num_threads > 0:
        return num_threads
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def use_threads(n: int) -> None:
    """Set torch's intra-op threads if they differ: with ``ray.backend: local`` the learner and
    the workers share one process, and each sets what it needs before it computes."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
