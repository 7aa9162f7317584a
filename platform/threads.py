"""torch's intra-op threads for learners and workers, and numpy's BLAS threads in workers.

A worker acts on a few rows per step and shares the machine with other workers: one thread.
A learner may use more where the cores would otherwise be idle (see
:func:`hdppo.platform.group.learner_threads`).
"""
from __future__ import annotations

import os

import torch
from threadpoolctl import threadpool_limits


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


def limit_blas_threads(n: int = 1) -> None:
    """Cap the BLAS libraries loaded in this process (numpy's OpenBLAS) at ``n`` threads, for good.

    A worker's numpy actor (policies.networks.NumpyMLP) multiplies a few rows by each layer's
    weights every step. Above a size (MinAtar's 1024x128 dense layer, its im2col conv) OpenBLAS
    splits such a product over every core it sees and its threads spin between calls, on the
    cores the learner and the other workers need: a MinAtar worker took 81 us of CPU per env step
    with its default threads against 47 us with one, and the learner beside it updated in
    0.136 s against 0.085 s. Ray does not set ``OMP_NUM_THREADS`` for actors of fractional CPUs,
    and an env var would have to be set before numpy loads, hence threadpoolctl, at run time.
    torch's own threads (OpenMP) are :func:`use_threads`' business and are left alone."""
    threadpool_limits(limits=n, user_api="blas")
