"""Intrinsic (command-following) rewards for any layer: the one entry point the engine calls.

The rewards themselves belong to the env modules that define them and are registered there
(:mod:`hdppo.envs.rewards`: ``corridor_follow`` in :mod:`hdppo.envs.builtin.corridor`,
``ant_velocity_tracking`` and ``ant_heading_frame_direction`` in
:mod:`hdppo.envs.builtin.ant_navigate`); ``package.module:function`` works for any other.

:func:`resolve` returns a :class:`~hdppo.envs.rewards.RewardFn`: ``.vectorized`` False means
call ``fn(command=, obs=, next_obs=, action=, info=) -> float`` once per lane per env step;
True means call it once per env step with every live lane's arguments stacked (``[B, ...]``
arrays, ``info`` a list of B dicts) -> ``[B]``. The module docstring of
:mod:`hdppo.envs.rewards` says what each argument holds on the bottom layer and on an upper one.
"""
from __future__ import annotations

from ..envs.rewards import RewardFn, register_reward, registered_rewards, resolve_reward

__all__ = ["IntrinsicFn", "RewardFn", "register_reward", "registered_rewards", "resolve"]

IntrinsicFn = RewardFn  # the older name


def reward_field(index: int, layer: str) -> str:
    """The config field of a layer's intrinsic reward, as errors name it."""
    return f"layers[{index}] ({layer}).reward.intrinsic_fn"


def resolve(name: str, field: str = "intrinsic_fn") -> RewardFn:
    """The reward named ``name`` (registered) or at ``package.module:function``; errors name ``field``."""
    return resolve_reward(name, field)
