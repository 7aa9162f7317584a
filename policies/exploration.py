"""Deprecated: the bonuses are plug-ins in :mod:`hdppo.policies.bonuses` now (build one with
``make_bonus``). These names keep the old constructors until the rollout worker calls
``make_bonus``; then this module goes."""
from __future__ import annotations

from types import SimpleNamespace

from hdppo.policies.bonuses.count import CountBonus as _CountBonus
from hdppo.policies.bonuses.rnd import RND, RNDBonus as _RNDBonus
from hdppo.policies.normalizers import RunningStats

__all__ = ["RND", "CountBonus", "RNDBonus"]


def CountBonus(obs_dim: int, bits: int, layer: str) -> _CountBonus:  # noqa: N802 - the old class name
    return _CountBonus(SimpleNamespace(hash_bits=bits), obs_dim, layer)


def RNDBonus(rnd: RND) -> _RNDBonus:  # noqa: N802 - the old class name
    """A worker-side RND bonus around an existing network (it never trains)."""
    bonus = object.__new__(_RNDBonus)
    bonus.spec, bonus.obs_dim, bonus.layer = None, rnd.predictor[0].in_features, ""
    bonus.rnd, bonus.stats, bonus._optimizer = rnd, RunningStats(()), None
    return bonus
