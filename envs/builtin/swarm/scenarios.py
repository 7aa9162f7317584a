"""Scenarios of swarm: how many drones, in which groups, across how dense a field.

A scenario is data; pass your own :class:`Scenario` as ``scenario=`` to fly another one. Every
built-in scenario uses the same world, so observations and the state have one size and one
policy flies all of them.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_DRONES = 16       # drone slots in state()
MAX_OBSTACLES = 24    # obstacle slots in state()


@dataclass(frozen=True)
class Scenario:
    """``n_drones`` drones in groups of ``group_size`` (group g: drones g*size .. g*size+size-1),
    one goal region per group (a pad for each of its drones, in the pattern the group starts in); ``spheres`` static spheres, ``cylinders`` vertical cylinders and
    ``moving`` moving spheres, drawn anew each episode in the band ``field`` (x from, to) of a
    ``world`` (length x, width y, height z) box, in metres."""

    name: str
    n_drones: int
    group_size: int = 4
    spheres: int = 6
    cylinders: int = 4
    moving: int = 2
    world: tuple[float, float, float] = (30.0, 16.0, 10.0)
    field: tuple[float, float] = (7.0, 23.0)
    sphere_radius: tuple[float, float] = (0.8, 1.5)
    cylinder_radius: tuple[float, float] = (0.4, 0.9)
    moving_radius: float = 0.8
    moving_speed: float = 1.0
    goal_radius: float = 1.0            # a drone has reached its pad within this distance
    goal_margin: float = 3.0            # goal regions' centres lie this far from the far wall
    max_steps: int = 150

    def __post_init__(self):
        if self.n_drones < 1 or self.n_drones > MAX_DRONES:
            raise ValueError(f"swarm scenario {self.name!r}: n_drones must be 1..{MAX_DRONES}, not {self.n_drones}")
        if self.group_size < 1 or self.n_drones % self.group_size:
            raise ValueError(f"swarm scenario {self.name!r}: n_drones ({self.n_drones}) must be a multiple of "
                             f"group_size ({self.group_size})")
        if self.n_obstacles > MAX_OBSTACLES or min(self.spheres, self.cylinders, self.moving) < 0:
            raise ValueError(f"swarm scenario {self.name!r}: 0..{MAX_OBSTACLES} obstacles in all, "
                             f"not {self.n_obstacles}")

    @property
    def n_groups(self) -> int:
        return self.n_drones // self.group_size

    @property
    def n_obstacles(self) -> int:
        return self.spheres + self.cylinders + self.moving


SCENARIOS: dict[str, Scenario] = {
    "8_sparse": Scenario("8_sparse", 8, spheres=4, cylinders=3, moving=1),
    "8_medium": Scenario("8_medium", 8, spheres=6, cylinders=4, moving=2),
    "8_dense": Scenario("8_dense", 8, spheres=10, cylinders=7, moving=4),
    "16_sparse": Scenario("16_sparse", 16, spheres=4, cylinders=3, moving=1),
    "16_medium": Scenario("16_medium", 16, spheres=6, cylinders=4, moving=2),
    "16_dense": Scenario("16_dense", 16, spheres=10, cylinders=7, moving=4),
}


def get_scenario(scenario: str | Scenario) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    try:
        return SCENARIOS[scenario]
    except KeyError:
        raise ValueError(f"swarm: unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)} "
                         "(or pass a swarm.Scenario)") from None
