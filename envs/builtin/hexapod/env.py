"""The hexapod Gymnasium env (see the package docstring for the table)."""
from __future__ import annotations

from typing import Any, Callable

import math

import gymnasium as gym
import mujoco
import numpy as np

from ...errors import EnvError
from .model import LEG_NAMES, HexapodParams, build_mjcf
from .terrain import KINDS, HeightMap, generate

TASKS = ("velocity", "goal")
PUSH_MODES = ("kick", "force")
ACTION_MODES = ("joints", "gait")
COMMAND_LOW = np.array([-0.25, -0.15, -0.5], np.float32)   # vx, vy (m/s, heading frame), yaw rate (rad/s)
COMMAND_HIGH = -COMMAND_LOW
# action_mode="gait" walks up to about 0.45 m/s forward, 0.35 sideways, 0.9 rad/s: commands span more.
GAIT_COMMAND_LOW = np.array([-0.4, -0.25, -0.8], np.float32)
GAIT_COMMAND_HIGH = -GAIT_COMMAND_LOW
ACTION_SCALE = np.tile([0.5, 0.6, 0.6], 6)                 # rad of joint target per unit of action

# action_mode="gait": a tripod gait generator under the policy (PMTG: Iscen et al., "Policies
# Modulating Trajectory Generators", CoRL 2018). Legs FL, RL, MR step together, then ML, FR, RR.
# Per leg with phase p (its tripod's phase, the other tripod half a cycle later), c = cos(p):
# coxa += side * fwd * c - turn * c (the foot sweeps back on the ground, forward in the air),
# femur += lift * max(0, sin p) (lifted in the air), tibia += -lift/2 * max(0, sin p) + side * lat * c
# (the leg stretches out and in: crab steps). The policy sets (fwd, lat, turn) every step and adds
# residual joint targets; the phase runs at gait_hz. Measured open loop at 2 Hz on flat ground:
# vx = 1.07 fwd, vy = -1.03 lat, yaw rate = 3.6 turn, each nearly linear and independent
# (tests/test_hexapod.py), so the residuals only have to balance, not to invent a gait.
GAIT_TRIPOD = np.array([0, 1, 0, 1, 0, 1])                 # LEG_NAMES order: FL ML RL FR MR RR
GAIT_SIDE = np.array([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])    # +1 left, -1 right
GAIT_PARAM_SCALE = np.array([0.45, 0.35, 0.25])            # rad of (fwd, lat, turn) per unit of action
GAIT_RESIDUAL = 0.25                                        # residual joint targets: this share of ACTION_SCALE
GAIT_GAIN = np.array([1.07, -1.03, 3.6])                    # (vx, vy, yaw rate) per rad of (fwd, lat, turn), at 2 Hz
SCAN_X = np.array([-0.4, -0.2, 0.0, 0.2, 0.4])             # local height scan, heading frame (m)
SCAN_Y = np.array([-0.3, -0.15, 0.0, 0.15, 0.3])
MAP_X = np.linspace(-1.0, 1.5, 5)                          # coarser, wider map for state()
MAP_Y = np.linspace(-1.0, 1.0, 5)
FALL_PENALTY = 5.0
SUCCESS_BONUS = 10.0

# Observation layout (named slices; the views and rewards read them).
GRAVITY, LIN_VEL, ANG_VEL = slice(0, 3), slice(3, 6), slice(6, 9)
JOINT_POS, JOINT_VEL, LAST_ACTION = slice(9, 27), slice(27, 45), slice(45, 63)
CONTACTS, SCAN, COMMAND = slice(63, 69), slice(69, 94), slice(94, 97)
BODY_DIM = 94
PHASE = slice(94, 96)  # action_mode="gait": sin and cos of the gait phase follow the body (the command after them)
STATE_DIM = 9 + MAP_X.size * MAP_Y.size


def _grid(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    return np.stack([gx.ravel(), gy.ravel()], 1)


SCAN_POINTS, MAP_POINTS = _grid(SCAN_X, SCAN_Y), _grid(MAP_X, MAP_Y)


def tracking(command: np.ndarray, velocity: np.ndarray, yaw_rate: float) -> float:
    """legged_gym's tracking terms (exp of the squared error), with kernels for a robot of this
    size (0.14 m/s and 0.32 rad/s): 1 for the planar velocity, 0.5 for the yaw rate."""
    lin = np.exp(-float(np.sum((velocity - command[:2]) ** 2)) / 0.02)
    ang = np.exp(-(yaw_rate - float(command[2])) ** 2 / 0.1)
    return float(lin + 0.5 * ang)


def gait_targets(phase: float, fwd: float, lat: float, turn: float, lift: float, stance: np.ndarray) -> np.ndarray:
    """The tripod gait generator's 18 joint targets (see GAIT_TRIPOD) at ``phase``."""
    ph = phase + np.pi * GAIT_TRIPOD
    c, up = np.cos(ph), np.maximum(0.0, np.sin(ph))
    q = stance.reshape(6, 3).copy()
    q[:, 0] += (GAIT_SIDE * fwd - turn) * c
    q[:, 1] += lift * up
    q[:, 2] += -0.5 * lift * up + GAIT_SIDE * lat * c
    return q.ravel()


def gait_action(command: np.ndarray, gait_hz: float = 2.0) -> np.ndarray:
    """The ``action_mode="gait"`` action that walks at ``command`` (vx, vy, yaw rate) open loop:
    the measured gains inverted, scaled by the cycle rate, no residuals. A scripted controller
    (benchmarks/hexapod.py's baseline) and what a trained control layer has to improve on."""
    params = np.asarray(command, np.float64)[:3] / GAIT_GAIN * (2.0 / gait_hz)
    return np.concatenate([np.clip(params / GAIT_PARAM_SCALE, -1.0, 1.0), np.zeros(18)]).astype(np.float32)


def _choice(field: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise EnvError(f"hexapod: {field}={value!r} is not one of {', '.join(repr(c) for c in choices)}. "
                       f"Set env.kwargs.{field} to one of them.")
    return value


class HexapodEnv(gym.Env):
    metadata = {"name": "hexapod_v0", "render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, terrain: str = "mixed", difficulty: float = 0.5, curriculum: bool | str | Callable = False,
                 task: str = "velocity", command_in_obs: bool = True, goal_in_obs: bool = False,
                 push_velocity: float = 1.0, push_interval_s: float = 5.0, push_mode: str = "kick",
                 max_steps: int = 500, frame_skip: int = 4, command_resample_s: float = 5.0,
                 goal_distance: tuple[float, float] = (2.0, 4.0), goal_radius: float = 0.4,
                 action_mode: str = "joints", gait_hz: float = 2.0, gait_lift: float = 0.4,
                 render_mode: str | None = None, params: HexapodParams | None = None):
        self.terrain_kind = _choice("terrain", terrain, KINDS)
        self.task = _choice("task", task, TASKS)
        self.push_mode = _choice("push_mode", push_mode, PUSH_MODES)
        self.action_mode = _choice("action_mode", action_mode, ACTION_MODES)
        if not (0.0 < float(gait_hz) <= 5.0 and 0.0 <= float(gait_lift) <= 1.0):
            raise EnvError(f"hexapod: gait_hz={gait_hz!r} must lie in (0, 5] and gait_lift={gait_lift!r} in [0, 1] "
                           "(rad of femur lift); the defaults 2.0 and 0.4 walk on every terrain kind.")
        self.gait_hz, self.gait_lift = float(gait_hz), float(gait_lift)
        gait = self.action_mode == "gait"
        self.command_low, self.command_high = (GAIT_COMMAND_LOW, GAIT_COMMAND_HIGH) if gait else (COMMAND_LOW, COMMAND_HIGH)
        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"hexapod: render_mode={render_mode!r} is not supported; use None or 'rgb_array'.")
        if not 0.0 <= float(difficulty) <= 1.0:
            raise EnvError(f"hexapod: difficulty={difficulty!r} must lie in [0, 1] (0 easiest).")
        if task == "goal" and command_in_obs:
            raise EnvError("hexapod: command_in_obs=True needs task='velocity' (the goal task has no velocity "
                           "command of its own; a layer above commands it). Set command_in_obs: false.")
        if isinstance(curriculum, str):
            from ...loading import resolve_entry_point

            curriculum = resolve_entry_point(curriculum, "hexapod: env.kwargs.curriculum")
        self.curriculum = curriculum
        self.difficulty = float(difficulty)
        self.command_in_obs, self.goal_in_obs = command_in_obs, goal_in_obs
        self.push_velocity, self.push_interval_s = float(push_velocity), float(push_interval_s)
        self.max_steps, self.frame_skip = int(max_steps), int(frame_skip)
        self.command_resample_s = float(command_resample_s)
        self.goal_distance, self.goal_radius = tuple(goal_distance), float(goal_radius)
        self.render_mode = render_mode

        self.params = params or HexapodParams()
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(self.params))
        self.data = mujoco.MjData(self.model)
        self.dt = self.params.timestep * self.frame_skip
        m = self.model
        self._torso = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "torso")
        self._torso_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "torso")
        self._terrain_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "terrain")
        self._feet = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, f"{leg}_foot") for leg in LEG_NAMES])
        self._goal_site = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "goal")
        self._ranges = self.params.ranges()
        self._stance = np.tile(self.params.stance, 6)
        self.stand_height = self.params.stand_height
        self._half = self.params.terrain_half

        self.body_dim = BODY_DIM + (2 if gait else 0)
        dim = self.body_dim + (3 if command_in_obs else 0) + (STATE_DIM if goal_in_obs else 0)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (21 if gait else 18,), np.float32)
        self.command_space = gym.spaces.Box(self.command_low, self.command_high)
        self.phase = 0.0
        self.heights = HeightMap(np.zeros((self.params.terrain_cells,) * 2), self._half)
        self.terrain = "flat"
        self.command = np.zeros(3, np.float32)
        self.goal = np.zeros(2)
        self._renderer: mujoco.Renderer | None = None
        self._hfield_dirty = True
        self._episode: dict[str, float] = {}

    # -- terrain, curriculum and pushes ----------------------------------------------------------

    def set_difficulty(self, difficulty: float) -> None:
        """The difficulty of the terrain generated at the next reset, in [0, 1]."""
        self.difficulty = float(np.clip(difficulty, 0.0, 1.0))

    def _auto_curriculum(self) -> float:
        """legged_gym's rule, by episode: harder after an episode walked well without a fall,
        easier after a fall."""
        ep = self._episode
        if not ep:
            return self.difficulty
        if ep["fell"]:
            return self.difficulty - 0.1
        good = ep["success"] if self.task == "goal" else ep["tracking_error"] / max(ep["steps"], 1) < 0.1
        return self.difficulty + (0.1 if good else 0.0)

    def _new_terrain(self) -> None:
        if self.curriculum is True:
            self.set_difficulty(self._auto_curriculum())
        elif callable(self.curriculum):
            self.set_difficulty(self.curriculum(self, dict(self._episode)))
        self.terrain, h = generate(self.terrain_kind, self.np_random, self.difficulty,
                                   self.params.terrain_cells, self._half)
        zmax = self.params.terrain_zmax
        self.model.hfield_data[:] = np.clip(h / zmax, 0.0, 1.0).ravel()
        self.heights = HeightMap(np.clip(h, 0.0, zmax), self._half)
        self._hfield_dirty = True

    def push(self, velocity: float | None = None, direction: float | None = None) -> None:
        """A push of the body by ``velocity`` m/s (default ``push_velocity``) in the world
        direction ``direction`` (rad; default random): the planar velocity changed at once
        (``kick``, as legged_gym pushes) or by a force through ``xfrc_applied`` over 0.1 s
        (``force``, the impulse of the same change of the whole robot's momentum)."""
        v = self.push_velocity if velocity is None else float(velocity)
        angle = self.np_random.uniform(0, 2 * np.pi) if direction is None else float(direction)
        dv = v * np.array([np.cos(angle), np.sin(angle)])
        if self.push_mode == "kick":
            self.data.qvel[:2] += dv
        else:
            self._push_force = self.params.total_mass * dv / 0.1
            self._push_left = max(1, int(round(0.1 / self.dt)))
        self._pushed = True

    # -- gymnasium API ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "difficulty" in options:
            self.set_difficulty(options["difficulty"])
        self._new_terrain()
        d, rng = self.data, self.np_random
        mujoco.mj_resetData(self.model, d)
        heading = rng.uniform(-np.pi, np.pi)
        d.qpos[2] = self.heights(np.array(0.0), np.array(0.0)) + self.stand_height + 0.02
        d.qpos[3:7] = [np.cos(heading / 2), 0, 0, np.sin(heading / 2)]
        d.qpos[7:] = self._stance + rng.uniform(-0.05, 0.05, 18)
        d.ctrl[:] = np.clip(self._stance, self._ranges[:, 0], self._ranges[:, 1])
        mujoco.mj_forward(self.model, d)
        self._measure()
        angle = rng.uniform(0, 2 * np.pi)
        dist = rng.uniform(*self.goal_distance)
        self.goal = dist * np.array([np.cos(angle), np.sin(angle)])
        self.model.site_pos[self._goal_site] = [self.goal[0], self.goal[1],
                                                float(self.heights(self.goal[0], self.goal[1])) + 0.05]
        self.t, self.last_action = 0, np.zeros(18)
        self.phase = 0.0
        self._resample_command()
        self._next_push = (rng.uniform(0.5, 1.0) * self.push_interval_s) if self.push_interval_s > 0 else np.inf
        self._push_left, self._pushed = 0, False
        self._prev_dist = float(np.linalg.norm(self.goal - d.qpos[:2]))
        self._episode = {"steps": 0, "tracking_error": 0.0, "fell": False, "success": False}
        obs = self._obs()
        return obs, self._info(fell=False, success=False)

    def _resample_command(self) -> None:
        if self.task == "goal":
            self.command = np.zeros(3, np.float32)
            return
        rng = self.np_random
        self.command = rng.uniform(self.command_low, self.command_high).astype(np.float32)
        if rng.random() < 0.1:
            self.command[:] = 0.0   # standing still is a command too
        self._next_command = self.t * self.dt + self.command_resample_s

    def _joint_targets(self, action: np.ndarray) -> np.ndarray:
        """Joint targets from an action in [-1, 1]: stance plus scaled offsets, or (gait) the gait
        generator's targets at the next phase plus scaled residuals."""
        if self.action_mode == "joints":
            return self._stance + ACTION_SCALE * action
        self.phase = (self.phase + 2.0 * np.pi * self.gait_hz * self.dt) % (2.0 * np.pi)
        fwd, lat, turn = GAIT_PARAM_SCALE * action[:3]
        base = gait_targets(self.phase, fwd, lat, turn, self.gait_lift, self._stance)
        return base + GAIT_RESIDUAL * ACTION_SCALE * action[3:]

    def step(self, action):
        a = np.clip(np.asarray(action, np.float64), -1.0, 1.0)
        d = self.data
        target = np.clip(self._joint_targets(a), self._ranges[:, 0], self._ranges[:, 1])
        d.ctrl[:] = target
        if self.action_mode == "gait":  # what the joints were asked, in the joint mode's units: obs and costs
            a = (target - self._stance) / ACTION_SCALE
        if self.t * self.dt >= self._next_push:
            self.push()
            self._next_push += self.push_interval_s
        if self._push_left > 0:
            d.xfrc_applied[self._torso, :2] = self._push_force
            self._push_left -= 1
        for _ in range(self.frame_skip):
            mujoco.mj_step(self.model, d)
        self._measure()
        if self._push_left == 0:
            d.xfrc_applied[self._torso, :2] = 0.0
        self.t += 1
        if self.task == "velocity" and self.t * self.dt >= self._next_command:
            self._resample_command()

        v_h, yaw_rate = self._heading_velocity()
        tilt_g = self._gravity()
        fell = self._fell(tilt_g)
        penalty = self._penalty(a, tilt_g)
        dist = math.hypot(self.goal[0] - d.qpos[0], self.goal[1] - d.qpos[1])
        success = dist < self.goal_radius
        if self.task == "velocity":
            reward = tracking(self.command, v_h, yaw_rate) + penalty
        else:
            reward = self._prev_dist - dist + (SUCCESS_BONUS if success else 0.0)
        self._prev_dist = dist
        if fell:
            reward -= FALL_PENALTY
        self.last_action = a
        ep = self._episode
        ep["steps"] += 1
        ep["tracking_error"] += math.hypot(v_h[0] - self.command[0], v_h[1] - self.command[1])
        ep["fell"] = ep["fell"] or fell
        ep["success"] = ep["success"] or success
        off_map = max(abs(d.qpos[0]), abs(d.qpos[1])) > self._half - 0.6
        terminated = bool(fell or (self.task == "goal" and success))
        truncated = bool(not terminated and (self.t >= self.max_steps or off_map))
        info = self._info(fell, success, v_h, yaw_rate, penalty, dist)
        self._pushed = False   # reported once, at the step the push (scheduled or by push()) came in
        return self._obs(), float(reward), terminated, truncated, info

    # -- measurements ----------------------------------------------------------------------------

    def _measure(self) -> None:
        """What the observation, reward and info share, computed once after each physics step."""
        self._R = self.data.xmat[self._torso].reshape(3, 3).copy()
        w, x, y, z = self.data.qpos[3:7]
        self._yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
        self._contacts = self.contacts()

    def _rot(self) -> np.ndarray:
        return self._R

    def _gravity(self) -> np.ndarray:
        """The unit gravity vector in the body frame ((0, 0, -1) when level)."""
        return -self._R[2]

    def heading(self) -> float:
        """The body's yaw (rad, world frame)."""
        return self._yaw

    def _heading_velocity(self) -> tuple[np.ndarray, float]:
        """Planar velocity in the heading frame and the yaw rate (world z)."""
        h = self.heading()
        c, s = np.cos(h), np.sin(h)
        vx, vy = self.data.qvel[0], self.data.qvel[1]
        omega_world = self._rot() @ self.data.qvel[3:6]
        return np.array([c * vx + s * vy, -s * vx + c * vy]), float(omega_world[2])

    def height_over_terrain(self) -> float:
        x, y, z = self.data.qpos[:3]
        return float(z - self.heights(np.array(x), np.array(y)))

    def _fell(self, g: np.ndarray) -> bool:
        """The body touches the ground, or is tilted more than 60 degrees."""
        if g[2] > -0.5:
            return True
        n = self.data.ncon
        if n:
            pairs = self.data.contact.geom[:n]
            hit = pairs[:, 0] + pairs[:, 1] == self._torso_geom + self._terrain_geom
            return bool(np.any(hit & ((pairs[:, 0] == self._torso_geom) | (pairs[:, 1] == self._torso_geom))))
        return False

    def contacts(self) -> np.ndarray:
        """1 for each foot touching the terrain (legs in LEG_NAMES order)."""
        n = self.data.ncon
        if not n:
            return np.zeros(6)
        pairs = self.data.contact.geom[:n]
        touching = np.zeros(self.model.ngeom + 1, bool)
        touching[np.where(pairs[:, 0] == self._terrain_geom, pairs[:, 1], -1)] = True
        touching[np.where(pairs[:, 1] == self._terrain_geom, pairs[:, 0], -1)] = True
        return touching[self._feet].astype(np.float64)

    def _penalty(self, a: np.ndarray, g: np.ndarray) -> float:
        """Stability and smoothness costs (legged_gym's kind, scaled for this robot): vertical
        velocity, roll and pitch rates, tilt, action rate, torques."""
        d = self.data
        omega = d.qvel[3:6]
        return float(-1.0 * d.qvel[2] ** 2 - 0.02 * (omega[0] ** 2 + omega[1] ** 2) - 1.0 * (g[0] ** 2 + g[1] ** 2)
                     - 0.002 * np.sum((a - self.last_action) ** 2) - 2e-4 * np.sum(d.actuator_force ** 2))

    def _scan(self, points: np.ndarray) -> np.ndarray:
        x, y, z = self.data.qpos[:3]
        h = self.heading()
        c, s = np.cos(h), np.sin(h)
        wx = x + c * points[:, 0] - s * points[:, 1]
        wy = y + s * points[:, 0] + c * points[:, 1]
        return np.clip(z - self.heights(wx, wy) - self.stand_height, -1.0, 1.0)

    def state(self) -> np.ndarray:
        """What a route layer sees: the goal in the heading frame, its distance, the planar
        velocity and yaw rate, the gravity vector in the body frame, and a coarse 5 x 5 height map
        from 1 m behind to 1.5 m ahead and 1 m to each side (body height over each point)."""
        h = self.heading()
        c, s = np.cos(h), np.sin(h)
        dx, dy = self.goal - self.data.qpos[:2]
        v_h, yaw_rate = self._heading_velocity()
        return np.concatenate([[c * dx + s * dy, -s * dx + c * dy, np.hypot(dx, dy)], v_h, [yaw_rate],
                               self._gravity(), self._scan(MAP_POINTS)]).astype(np.float32)

    def _obs(self) -> np.ndarray:
        d = self.data
        rot = self._rot()
        parts = [self._gravity(), rot.T @ d.qvel[:3], d.qvel[3:6], d.qpos[7:] - self._stance, 0.1 * d.qvel[6:],
                 self.last_action, self._contacts, self._scan(SCAN_POINTS)]
        if self.action_mode == "gait":
            parts.append([math.sin(self.phase), math.cos(self.phase)])
        if self.command_in_obs:
            parts.append(self.command)
        if self.goal_in_obs:
            parts.append(self.state())
        return np.concatenate(parts).astype(np.float32)

    def _info(self, fell: bool, success: bool, v_h=None, yaw_rate=0.0, penalty=0.0, dist=None) -> dict:
        if v_h is None:
            v_h, yaw_rate = self._heading_velocity()
        g = self._gravity()
        return {"body_velocity": v_h, "yaw_rate": yaw_rate, "command": self.command.copy(),
                "tracking_error": math.hypot(v_h[0] - self.command[0], v_h[1] - self.command[1]),
                "stability_penalty": penalty, "fell": fell, "is_success": success, "pushed": self._pushed,
                "body_height": self.height_over_terrain(), "tilt": float(np.arccos(np.clip(-g[2], -1, 1))),
                "contacts": self._contacts.copy(), "position": self.data.qpos[:2].copy(),
                "goal_distance": float(np.linalg.norm(self.goal - self.data.qpos[:2])) if dist is None else dist,
                "terrain": self.terrain, "difficulty": self.difficulty, "max_speed": float(self.command_high[0])}

    # -- rendering -------------------------------------------------------------------------------

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, 240, 320)
            self._camera = mujoco.MjvCamera()
            self._camera.distance, self._camera.elevation = 1.6, -25.0
        if self._hfield_dirty:
            self._renderer._gl_context.make_current()
            mujoco.mjr_uploadHField(self.model, self._renderer._mjr_context, 0)
            self._hfield_dirty = False
        self._camera.lookat[:] = self.data.qpos[:3]
        self._camera.azimuth = np.degrees(self.heading()) + 150.0
        self._renderer.update_scene(self.data, self._camera)
        return self._renderer.render().copy()

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
