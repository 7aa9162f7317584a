"""Sync modes: how a DPPO group collects the rollouts of an update (see :mod:`.base`).

Importing this package registers the built-in modes: ``sync`` (barrier), ``pipeline``,
``soft`` and ``async``.
"""
from .base import SYNC_MODES, Call, Source, SyncMode, make_sync_mode, register, sync_mode_class
from . import async_mode, barrier, pipeline, soft  # noqa: F401 - registers the built-ins

__all__ = ["SYNC_MODES", "Call", "Source", "SyncMode", "make_sync_mode", "register", "sync_mode_class"]
