"""Exploration bonuses as plug-ins: one interface (:class:`Bonus`), a registry, one factory.

Built in: ``count`` (:mod:`.count`, SimHash counts) and ``rnd`` (:mod:`.rnd`, random network
distillation). A new bonus is a new module with a ``@register_bonus("name")`` class, or any
class named as ``package.module:Class``.
"""
from .registry import Bonus, bonus_class, make_bonus, register_bonus, registered_bonuses

__all__ = ["Bonus", "bonus_class", "make_bonus", "register_bonus", "registered_bonuses"]
