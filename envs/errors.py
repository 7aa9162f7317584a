"""Errors a user can act on, owned by ``envs`` so that env code needs nothing from the runtime.

``hdppo.platform.errors`` re-exports these same classes (so ``except ConfigError`` catches
either import) and adds the runtime's own. The CLI prints their message as one paragraph and
exits non-zero.
"""
from __future__ import annotations

__all__ = ["HdppoError", "ConfigError", "EnvError"]


class HdppoError(Exception):
    """Base class: the message names the file, field or env and says what would fix it."""

    exit_code = 2


class ConfigError(HdppoError):
    """A config file or override that is missing, malformed or invalid."""


class EnvError(HdppoError):
    """An env that cannot be made, or whose outputs do not match its spaces."""
