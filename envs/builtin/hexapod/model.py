"""The hexapod's MuJoCo model, written as MJCF from a few parameters.

Six legs on a flat box body, three hinge joints per leg (hip yaw "coxa", hip pitch "femur",
knee "tibia"), each driven by a position actuator with a joint range, a force limit and joint
damping: 18 actuators. The feet are spheres with rubber-like friction. The floor is a heightfield
whose elevations the env rewrites every episode (see :mod:`.terrain`).

Sizes are those of a small hobby hexapod (PhantomX-like, about 0.5 m across the legs, 2.5 kg).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEG_NAMES = ("front_left", "middle_left", "rear_left", "front_right", "middle_right", "rear_right")
JOINTS_PER_LEG = ("coxa", "femur", "tibia")


@dataclass(frozen=True)
class HexapodParams:
    """What the MJCF is built from (lengths in m, masses in kg, gains in N m / rad)."""

    body_half: tuple[float, float, float] = (0.16, 0.09, 0.03)
    body_mass: float = 1.6
    hip_x: tuple[float, float, float] = (0.13, 0.0, -0.13)   # front, middle, rear hip along the body
    mount_yaw_deg: tuple[float, float, float] = (40.0, 0.0, -40.0)  # front legs turned 40 deg forward, rear back
    coxa_len: float = 0.05
    femur_len: float = 0.10
    tibia_len: float = 0.13
    coxa_mass: float = 0.04
    femur_mass: float = 0.06
    tibia_mass: float = 0.04
    foot_radius: float = 0.015
    foot_friction: float = 1.0
    kp: float = 12.0                  # position-actuator stiffness
    kv: float = 0.25                  # its damping (N m s / rad)
    max_torque: float = 2.5           # force limit of every actuator
    joint_damping: float = 0.05
    armature: float = 0.002
    coxa_range: tuple[float, float] = (-0.8, 0.8)
    femur_range: tuple[float, float] = (-0.6, 1.4)
    tibia_range: tuple[float, float] = (-1.4, 0.9)
    stance: tuple[float, float, float] = (0.0, 0.35, -0.35)   # nominal (coxa, femur, tibia) angles
    timestep: float = 0.01
    terrain_half: float = 8.0         # the heightfield spans [-terrain_half, terrain_half]^2 m
    terrain_cells: int = 161          # rows = columns (0.1 m between samples for 16 m)
    terrain_zmax: float = 1.0         # elevation of a heightfield value of 1

    @property
    def total_mass(self) -> float:
        return self.body_mass + 6 * (self.coxa_mass + self.femur_mass + self.tibia_mass + 0.005)

    @property
    def stand_height(self) -> float:
        """Height of the body's centre above flat ground in the nominal stance (from the kinematics)."""
        _, femur, tibia = self.stance
        knee_z = self.femur_len * np.sin(femur)
        foot_z = knee_z - self.tibia_len * np.cos(femur + tibia)
        return float(-foot_z + self.foot_radius)

    def ranges(self) -> np.ndarray:
        """[18, 2] joint ranges in actuator order (leg by leg, coxa-femur-tibia)."""
        return np.array([self.coxa_range, self.femur_range, self.tibia_range] * 6, np.float64)


def _leg(p: HexapodParams, name: str, x: float, y: float, yaw: float) -> str:
    c, f, t = p.coxa_len, p.femur_len, p.tibia_len
    cr, fr, tr = p.coxa_range, p.femur_range, p.tibia_range
    # Local +x points away from the body; positive femur lifts the leg, positive tibia swings the
    # foot outward (both hinge about local -y).
    return f"""
    <body name="{name}_coxa" pos="{x} {y} 0" euler="0 0 {yaw:.6f}">
      <joint name="{name}_coxa" axis="0 0 1" range="{cr[0]} {cr[1]}"/>
      <geom type="capsule" fromto="0 0 0 {c} 0 0" size="0.012" mass="{p.coxa_mass}" rgba="0.25 0.25 0.3 1"/>
      <body name="{name}_femur" pos="{c} 0 0">
        <joint name="{name}_femur" axis="0 -1 0" range="{fr[0]} {fr[1]}"/>
        <geom type="capsule" fromto="0 0 0 {f} 0 0" size="0.011" mass="{p.femur_mass}" rgba="0.8 0.45 0.1 1"/>
        <body name="{name}_tibia" pos="{f} 0 0">
          <joint name="{name}_tibia" axis="0 -1 0" range="{tr[0]} {tr[1]}"/>
          <geom type="capsule" fromto="0 0 0 0 0 {-t}" size="0.009" mass="{p.tibia_mass}" rgba="0.3 0.3 0.35 1"/>
          <geom name="{name}_foot" type="sphere" pos="0 0 {-t}" size="{p.foot_radius}" mass="0.005"
                friction="{p.foot_friction} 0.02 0.002" rgba="0.1 0.1 0.1 1"/>
        </body>
      </body>
    </body>"""


def build_mjcf(p: HexapodParams = HexapodParams()) -> str:
    """The MJCF of the hexapod on a heightfield floor (the elevations are set later)."""
    legs = []
    bx, by, bz = p.body_half
    for side, sign in (("left", 1.0), ("right", -1.0)):
        for (pos, x), yaw in zip(zip(("front", "middle", "rear"), p.hip_x), p.mount_yaw_deg):
            legs.append(_leg(p, f"{pos}_{side}", x, sign * by, np.deg2rad(sign * (90.0 - yaw))))
    actuators = "\n".join(
        f'    <position name="{leg}_{j}" joint="{leg}_{j}" kp="{p.kp}" kv="{p.kv}" ctrlrange="{lo} {hi}" '
        f'forcerange="{-p.max_torque} {p.max_torque}" forcelimited="true"/>'
        for leg in LEG_NAMES for j, (lo, hi) in zip(JOINTS_PER_LEG, (p.coxa_range, p.femur_range, p.tibia_range)))
    h = p.terrain_half
    z0 = p.stand_height + 0.05
    return f"""<mujoco model="hexapod">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{p.timestep}" integrator="implicitfast"/>
  <default>
    <joint damping="{p.joint_damping}" armature="{p.armature}" limited="true"/>
    <geom contype="1" conaffinity="1" condim="3" friction="0.8 0.02 0.002" solref="0.01 1"/>
  </default>
  <visual><global offwidth="640" offheight="480"/><quality shadowsize="1024"/></visual>
  <asset>
    <hfield name="terrain" nrow="{p.terrain_cells}" ncol="{p.terrain_cells}" size="{h} {h} {p.terrain_zmax} 0.1"/>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.45 0.5 0.45" rgb2="0.35 0.4 0.35" width="256" height="256"/>
    <material name="ground" texture="grid" texrepeat="32 32" reflectance="0"/>
  </asset>
  <worldbody>
    <light pos="0 0 4" dir="0 0 -1" directional="true" diffuse="0.8 0.8 0.8"/>
    <geom name="terrain" type="hfield" hfield="terrain" material="ground" friction="1.0 0.02 0.002"/>
    <site name="goal" pos="2 0 0.05" size="0.08" rgba="0.9 0.1 0.1 0.8" type="sphere"/>
    <body name="torso" pos="0 0 {z0}">
      <freejoint name="root"/>
      <geom name="torso" type="box" size="{bx} {by} {bz}" mass="{p.body_mass}" rgba="0.2 0.35 0.7 1"/>
      <site name="imu" pos="0 0 0" size="0.01"/>
{"".join(legs)}
    </body>
  </worldbody>
  <actuator>
{actuators}
  </actuator>
</mujoco>
"""
