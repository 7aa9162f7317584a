"""Random layouts drawn per env copy, for the natively batched envs (skirmish, swarm).

A batched env that draws every copy's layout from one generator gives copy ``i`` a layout that
depends on how many copies there are and on when the other copies' episodes ended. Then
``hdppo eval --episodes 4`` and ``--episodes 200`` play other first games, and two checkpoints
evaluated with one seed meet other maps as soon as their games last differently long. Each copy
here draws from its own child of the env's seed (NumPy's ``Generator.spawn``; child ``i`` is the
same whatever the number of children), so copy ``i``'s ``j``-th layout is fixed by the seed alone,
and copy 0 of a batched env lays out the games of the one-copy PettingZoo env with that seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def copy_generators(rng: np.random.Generator, copies: int) -> list[np.random.Generator]:
    """One independent generator per copy, spawned from ``rng``'s seed (not from its stream)."""
    return rng.spawn(copies)


class CopyDraws:
    """The draws of the copies ``idx``, each from its own generator, stacked on a leading axis
    of ``len(idx)``: the ``uniform``/``random`` calls of a vectorised reset, with its ``size``."""

    def __init__(self, generators: Sequence[np.random.Generator], idx: np.ndarray):
        self._gens = [generators[i] for i in np.asarray(idx, np.int64)]

    def _stack(self, draw, size: tuple[int, ...]) -> np.ndarray:
        if not self._gens:
            return np.empty(size)
        return np.stack([draw(g, size[1:]) for g in self._gens])

    def uniform(self, low=0.0, high=1.0, size: tuple[int, ...] = (1,)) -> np.ndarray:
        return self._stack(lambda g, s: g.uniform(low, high, s), size)

    def random(self, size: tuple[int, ...] = (1,)) -> np.ndarray:
        return self._stack(lambda g, s: g.random(s), size)
