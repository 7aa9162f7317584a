"""The teacher's aggregated data set (DAgger, Ross et al. 2011, arXiv:1011.0686): the
(observation, teacher's action, action mask) of past decisions, kept in a ring of fixed size.

Kickstarting on fresh samples only fits the teacher on the states of the latest rollouts. A
skill whose hard states are rare (a drone near an obstacle: 8% of its steps) is then fitted to
them in some updates and forgets them in the next, and flies worse than its imitation error
suggests. The learner adds the teacher's negative log-likelihood on an equal number of states
drawn from this ring to every minibatch (``layers[].teacher.replay``), as DAgger refits on every
state it has seen.

Observations are stored as the workers normalised them to act, the same as the batch's, so an
old state enters the loss with the normaliser of its time; the statistics settle early in a run.
The ring lives in the learner's memory and is not checkpointed: a resumed run starts it empty.
"""
from __future__ import annotations

import numpy as np


class TeacherReplay:
    """A ring of ``capacity`` labelled decisions: ``add`` a batch's, ``sample`` uniformly."""

    def __init__(self, capacity: int):
        if capacity <= 0:
            raise ValueError(f"TeacherReplay: capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.size = 0
        self._next = 0
        self._cols: tuple[np.ndarray, ...] | None = None  # obs, teacher, masks; allocated on the first add

    def add(self, obs: np.ndarray, teacher: np.ndarray, masks: np.ndarray) -> None:
        """Append ``[B, ...]`` rows, overwriting the oldest once full (the newest ``capacity`` rows
        of a batch larger than the ring)."""
        new = (obs, teacher, masks)
        n = len(obs)
        if n == 0:
            return
        if self._cols is None:
            self._cols = tuple(np.zeros((self.capacity, *c.shape[1:]), np.float32) for c in new)
        if n > self.capacity:
            new = tuple(c[-self.capacity:] for c in new)
            n = self.capacity
        at = (self._next + np.arange(n)) % self.capacity
        for col, c in zip(self._cols, new):
            col[at] = c
        self._next = int((self._next + n) % self.capacity)
        self.size = min(self.capacity, self.size + n)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        """``n`` rows drawn uniformly with replacement from what the ring holds: (obs, teacher, masks)."""
        if self._cols is None or self.size == 0:
            raise ValueError("TeacherReplay.sample: the ring is empty; add a batch first")
        at = rng.integers(0, self.size, n)
        return tuple(col[at] for col in self._cols)
