"""Errors a user can act on. The CLI prints their message as one paragraph and exits non-zero."""
from __future__ import annotations


class HdppoError(Exception):
    """Base class: the message names the file, field or env and says what would fix it."""

    exit_code = 2


class ConfigError(HdppoError):
    """A config file or override that is missing, malformed or invalid."""


class EnvError(HdppoError):
    """An env that cannot be made, or whose outputs do not match its spaces."""


class RayStartError(HdppoError):
    """Ray could not start or could not be reached."""


class CheckpointError(HdppoError):
    """A run dir or checkpoint that cannot be used as asked."""
