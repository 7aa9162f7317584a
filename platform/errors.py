"""Errors a user can act on. The CLI prints their message as one paragraph and exits non-zero.

The base classes live in :mod:`hdppo.envs.errors` (env code must not import the runtime); they
are the same classes here.
"""
from __future__ import annotations

from ..envs.errors import ConfigError, EnvError, HdppoError

__all__ = ["HdppoError", "ConfigError", "EnvError", "RayStartError", "CheckpointError", "ExportError", "DivergedError"]


class RayStartError(HdppoError):
    """Ray could not start or could not be reached."""


class CheckpointError(HdppoError):
    """A run dir or checkpoint that cannot be used as asked."""


class ExportError(HdppoError):
    """A layer or format that ``hdppo export`` cannot write as asked."""


class DivergedError(HdppoError):
    """A layer's update turned non-finite: its weights diverged (a learning rate too high, rewards
    of a wild scale), and everything trained on from there would be NaN."""
