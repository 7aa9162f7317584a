"""Unit types and scenarios of skirmish: what each side fields, where, on which map.

Both sides of a scenario field the same army (a mirror match), so that a win says something
about play, not about the draw of units. A scenario is data; pass your own
:class:`Scenario` as ``scenario=`` to play another one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MELEE, RANGED, HEALER = 0, 1, 2
TYPE_NAMES = ("melee", "ranged", "healer")
MAX_SQUADS = 4        # squad one-hots in observations and state are this wide
MAX_OBSTACLES = 8     # obstacle slots in state()
UNIT_RADIUS = 0.4     # a unit's body: it keeps this far from map edges and obstacles


@dataclass(frozen=True)
class UnitType:
    """One unit type. ``cooldown`` is the number of steps a unit must wait after it attacks or
    heals before it can again (0: every step); distances are in map units, from centre to centre."""

    name: str
    hp: float
    speed: float          # distance moved by one move action
    attack_range: float   # 0: cannot attack
    damage: float
    cooldown: int
    heal: float = 0.0     # hp restored by one heal action (0: cannot heal)
    heal_range: float = 0.0
    sight: float = 9.0


# Melee hits hardest and lasts longest but must touch; ranged hits from 5 units every other
# step and is a little slower than melee, so it can kite only by stepping back while it
# reloads; healers restore 12 hp every other step and cannot attack.
UNIT_TYPES: tuple[UnitType, ...] = (
    UnitType("melee", hp=120.0, speed=1.0, attack_range=1.5, damage=9.0, cooldown=0),
    UnitType("ranged", hp=70.0, speed=0.9, attack_range=5.0, damage=13.0, cooldown=1),
    UnitType("healer", hp=60.0, speed=0.9, attack_range=0.0, damage=0.0, cooldown=1, heal=12.0, heal_range=4.0),
)


@dataclass(frozen=True)
class Scenario:
    """One side's army (``units``: type per unit; ``squads``: squad index per unit, squads
    numbered 0.., each of them contiguous), the map and its obstacles. The other side mirrors it."""

    name: str
    units: tuple[int, ...]
    squads: tuple[int, ...]
    width: float
    height: float
    obstacles: int                       # circles in the middle band, drawn anew each episode
    obstacle_radius: tuple[float, float] = (1.0, 2.5)
    max_steps: int = 150

    def __post_init__(self):
        if len(self.units) != len(self.squads) or not self.units:
            raise ValueError(f"scenario {self.name!r}: units and squads must list the same units (at least one)")
        n_sq = max(self.squads) + 1
        if sorted(set(self.squads)) != list(range(n_sq)) or n_sq > MAX_SQUADS:
            raise ValueError(f"scenario {self.name!r}: squads must be numbered 0..S-1 with S <= {MAX_SQUADS}")
        if list(self.squads) != sorted(self.squads):
            raise ValueError(f"scenario {self.name!r}: list each squad's units together, squad 0 first")
        if self.obstacles > MAX_OBSTACLES:
            raise ValueError(f"scenario {self.name!r}: at most {MAX_OBSTACLES} obstacles")
        if any(u not in (MELEE, RANGED, HEALER) for u in self.units):
            raise ValueError(f"scenario {self.name!r}: unit types are 0 melee, 1 ranged, 2 healer")

    @property
    def n_units(self) -> int:
        return len(self.units)

    @property
    def n_squads(self) -> int:
        return max(self.squads) + 1

    def squad_sizes(self) -> list[int]:
        return np.bincount(self.squads).tolist()


M, R, H = MELEE, RANGED, HEALER
SCENARIOS: dict[str, Scenario] = {
    "3v3": Scenario("3v3", (M, R, H), (0, 0, 0), 20.0, 16.0, obstacles=2, max_steps=100),
    # Two squads of four: a melee-heavy one and a ranged-heavy one, each with a healer.
    "8v8_mixed": Scenario("8v8_mixed", (M, M, R, H, M, R, R, H), (0, 0, 0, 0, 1, 1, 1, 1),
                          32.0, 24.0, obstacles=4, max_steps=150),
    # Two squads of five (the same squad count as 8v8_mixed, so that squad and strategy
    # layers trained there can be run here).
    "10v10_mixed": Scenario("10v10_mixed", (M, M, R, R, H, M, R, R, M, H), (0, 0, 0, 0, 0, 1, 1, 1, 1, 1),
                            36.0, 28.0, obstacles=5, max_steps=160),
}


def get_scenario(scenario: str | Scenario) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    try:
        return SCENARIOS[scenario]
    except KeyError:
        raise ValueError(f"skirmish: unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)} "
                         "(or pass a skirmish.Scenario)") from None
