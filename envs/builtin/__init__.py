"""Built-in environments, written like PettingZoo's.

Each env module registers its own command-following rewards (see :mod:`hdppo.envs.rewards`);
``REWARDS`` says which module registers which name, so that a name resolves without its module
being imported beforehand, and without importing the other envs' modules.
"""

REWARDS: dict[str, str] = {
    "corridor_follow": "hdppo.envs.builtin.corridor",
    "ant_velocity_tracking": "hdppo.envs.builtin.ant_navigate",
    "ant_heading_frame_direction": "hdppo.envs.builtin.ant_navigate",
    "rooms_follow_direction": "hdppo.envs.builtin.rooms",
    "rooms_reach_room": "hdppo.envs.builtin.rooms",
    "fab_follow_command": "hdppo.envs.builtin.fab.rules",
    "skirmish_follow_order": "hdppo.envs.builtin.skirmish.rewards",
    "skirmish_squad_objective": "hdppo.envs.builtin.skirmish.rewards",
    "swarm_follow_command": "hdppo.envs.builtin.swarm.rewards",
    "swarm_mission_time": "hdppo.envs.builtin.swarm.assignment",
    "grasp_follow_phase": "hdppo.envs.builtin.grasp.rewards",
    "driving_follow_tactic": "hdppo.envs.builtin.driving",
    "hexapod_velocity_tracking": "hdppo.envs.builtin.hexapod.rewards",
    "hexapod_waypoint_following": "hdppo.envs.builtin.hexapod.rewards",
}
