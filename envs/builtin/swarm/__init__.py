"""swarm: N drones cross a field of static and moving obstacles to their groups' goal regions.

A 3-D multi-drone navigation task in vectorised numpy (:mod:`.core`): every drone is a point
mass with an acceleration and a thrust limit, gravity, linear drag and a speed limit; the
drones fly in groups of four from the near side of a 30 x 16 x 10 m box to one goal region per
group on the far side, through a band of spheres, vertical cylinders and moving spheres. Start
cells are shuffled among the groups, so groups cross each other's paths. Each drone's goal is its
own pad in its group's region (the group's start pattern around the region's centre); a drone
within ``goal_radius`` = 1 m of its pad has reached it and lands (it leaves ``env.agents``); touching an
obstacle or coming within two body radii of another drone is a collision, counted and
penalised (the drone flies on, pushed back to the obstacle's surface; with
``crash_on_collision=True`` it crashes instead: terminated, out of the field).

| | |
|---|---|
| agents | ``drone_0`` ... ``drone_{n-1}`` (n = 8 or 16 by scenario); group g = drones 4g .. 4g+3; a drone that reaches its goal leaves ``env.agents`` |
| observation (each) | Box(-1, 1, (D,), float32), D = 11 + 8 Kn + 8 Ko = 75 by default (below) |
| action (each) | Box(-1, 1, (3,), float32): the acceleration asked for, times ``accel_max`` = 5 m/s^2 per axis, on top of hovering; the thrust is capped at 14 m/s^2 (about 1.4 g) in norm, the speed at 3 m/s |
| state() | Box(-1, 1, (409,), float32): 16 drone slots x 12 (position, velocity, goal offset, in the field, reached, collided), 24 obstacle slots x 9 (present, centre, radius, velocity, cylinder), time; the same size in every scenario |
| reward (each) | ``reward_progress * (m closer to the goal) + reward_reach * (reached this step) - reward_collision * (new collisions this step) - reward_time - reward_proximity * closeness``, closeness = the sum over obstacles and other drones of ``((proximity_margin - gap) / proximity_margin)^2`` for surface gaps under the margin (shaping; off by default) |
| info (each) | per step: ``group``, ``reached``, ``collided`` (1 once it collided this episode), ``collisions``, ``collision`` (new this step), ``progress``, ``altitude`` (z / height), ``in_field``, ``cohesion``, ``spacing`` (:func:`.env.drone_infos`); on the last step also ``reach_rate`` and ``collision_rate`` (fractions of the field's drones that reached their goal / collided at least once), ``episode_steps`` and ``assignment_shortest`` (1 when the groups flew to the regions with the shortest summed distance from their starts) |
| episode | a drone terminates when it reaches its goal (or, with ``crash_on_collision``, collides); the rest are truncated at ``max_steps`` |
| arguments | ``scenario="8_medium"`` (see below, or a :class:`Scenario`), ``max_steps=None`` (the scenario's: 150 steps of 0.1 s), ``k_neighbors=4`` (Kn), ``k_obstacles=4`` (Ko), ``reward_progress=1.0``, ``reward_reach=10.0``, ``reward_collision=10.0``, ``reward_time=0.01``, ``reward_proximity=0.0``, ``proximity_margin=1.0`` (m), ``crash_on_collision=False`` (a collision ends the drone's flight, as a real quadrotor's; the penalty is paid once and the drone's remaining progress and reach bonus are lost), ``render_mode=None`` (or ``"rgb_array"``) |
| render | ``rgb_array``: ``[420, 480, 3]`` uint8, the field from above and from the side (:mod:`.render`) |
| factories | ``parallel_env(**kwargs)`` (PettingZoo ParallelEnv, ``env.type: pettingzoo``); ``make_vector(num_envs, seed, **kwargs)`` (natively batched, ``env.type: vector``) |

**Observation** (distances over the 6 m sensing range unless said): the goal's offset / 30 m (3)
and distance / 30 m, velocity / 3 m/s (3), position / world size (3), time / max_steps; then the
Kn nearest other drones in the field within range, nearest first, each: present, offset (3),
relative velocity / 6 m/s (3), distance; then the Ko nearest obstacles whose surface is within
range, nearest first, each: present, offset to the nearest point of its surface (3), clearance
(surface distance less the drone's 0.25 m radius), its velocity / 3 m/s (3). Empty slots are
zeros. Observations and state() have one size for every scenario, so a policy trained with 8
drones flies 16.

**Scenarios** (:data:`SCENARIOS`; goal regions, starts and obstacles drawn anew each episode
from the seed; obstacles in the band 7 m < x < 23 m; sphere radii 0.8-1.5 m, cylinder radii
0.4-0.9 m, moving spheres 0.8 m at 1 m/s, mostly across the drones' path):

| scenario | drones (groups of 4) | static spheres | cylinders | moving spheres |
|---|---|---|---|---|
| ``8_sparse`` / ``16_sparse`` | 8 / 16 | 4 | 3 | 1 |
| ``8_medium`` / ``16_medium`` | 8 / 16 | 6 | 4 | 2 |
| ``8_dense`` / ``16_dense`` | 8 / 16 | 10 | 7 | 4 |

**Metrics.** Over evaluation episodes: the share of drones that reached their goal (the mean
of ``reach_rate``), and the collision rate, the share of drones that collided at least once in
their episode (the mean of ``collision_rate``).

**For a hierarchy** (group / drone). The group layer (one lane per group,
``agents: {squads: ...}`` as ``env.groups``) reads its four drones' observations side by side
(the same size with 8 or 16 drones) and commands them ``MultiDiscrete([3, 2])``: the altitude
lane to cross the field in (low, middle, high) and the formation (tight, loose);
``swarm_follow_command`` (:mod:`.rewards`) rewards the drone layer (per drone, shared weights)
for keeping to it. Reaching the goal and avoiding collisions is the env reward's part.

**Goal assignment** (mission / group / drone, :mod:`.assignment`). Group g flies to region g
unless a layer assigns the regions: a layer with ``action: {type: discrete, n: G!, to_env:
true}`` and one lane for the swarm (``agents: all``) picks one of the G! permutations, which the
env applies (``SwarmVector.apply_command``, or ``SwarmEnv.apply_command`` per copy for the
PettingZoo form) before the layers below act; the drones'
goals move to their pads in the assigned regions. ``swarm_mission_time`` rewards such a layer
for the mission's time and collisions (not progress, which pays for longer routes).
``assignment.assignment_teacher`` gives the scripted rules (fixed, shortest, longest, random).

**Scripted pilots** (:mod:`.scripted`, the baselines a drone layer is measured against):
``straight`` (full speed at the pad, no avoidance), ``potential_field`` (an artificial potential
field over the simulator's exact geometry), ``observed_field`` (the same field computed from each
drone's observation alone; :func:`.scripted.field_teacher` hands it to a drone layer as a
kickstarting teacher); :func:`.scripted.fly` runs one over episodes and counts reached and
collided drones.
"""
from .core import Physics, RewardWeights, StepArrays, Swarm
from .env import SwarmEnv, SwarmVector, drone_infos, make_vector, parallel_env
from .rewards import follow_command
from .scenarios import MAX_DRONES, MAX_OBSTACLES, SCENARIOS, Scenario

__all__ = ["MAX_DRONES", "MAX_OBSTACLES", "Physics", "RewardWeights", "SCENARIOS", "Scenario", "StepArrays", "Swarm",
           "SwarmEnv", "SwarmVector", "drone_infos", "follow_command", "make_vector", "parallel_env"]
