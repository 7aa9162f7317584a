"""The grasp env: a Franka Panda over a tray of random objects, in PyBullet (see the package docstring)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import pybullet
import pybullet_data
from pybullet_utils import bullet_client

from ...errors import EnvError
from .objects import resolve_objects, urdf_path

PHASES = ("reach", "grasp", "lift")

TRAY_POS = np.array([0.55, 0.0, 0.0])
TRAY_TOP = 0.015                 # the tray's floor (its collision box is 0.02 thick, centred at 0.005)
SPAWN_HALF = 0.10                # objects spawn within +-0.10 m of the tray's centre, x and y
MIN_SEPARATION = 0.09            # between two objects' spawn points
WORKSPACE_LOW = np.array([0.35, -0.20, TRAY_TOP + 0.005])
WORKSPACE_HIGH = np.array([0.75, 0.20, 0.35])
HOME = np.array([0.55, 0.0, 0.25])
PREGRASP_HEIGHT = 0.08           # "reach": the point this far above the object's centre
FINGER_OPEN = 0.04               # per finger (an 8 cm opening in all)
GRASP_MAX_OPENING = 0.9          # a grasp needs the fingers closed below 90% of the full opening
FINGER_FORCE = 40.0
ARM_FORCE = 240.0
EE_LINK, FINGERS, ARM_JOINTS = 11, (9, 10), tuple(range(7))
REST = (0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.785)
TIME_STEP = 1.0 / 240.0
EE_DIM, OBJ_DIM = 7, 13
RESET_ATTEMPTS = 3               # fresh PyBullet worlds tried before a reset gives up

# Env reward weights (robosuite Lift's staged reward, per object, the best object counts).
REACH_W, GRASP_W, LIFT_W = 0.1, 0.35, 0.65


class Grasp(gym.Env):
    """See :mod:`hdppo.envs.builtin.grasp`."""

    metadata = {"name": "grasp_v0", "render_modes": ["rgb_array"], "render_fps": 24,
                "episode_metrics": ["reached", "grasp_made", "is_success"]}

    def __init__(self, objects: str | Sequence[int] = "train", num_objects: int = 1, max_steps: int = 50,
                 lift_height: float = 0.08, step_size: float = 0.02, yaw_step: float = 0.15,
                 substeps: int = 10, render_mode: str | None = None, render_size: tuple[int, int] = (240, 180)):
        if not 1 <= int(num_objects) <= 5:
            raise EnvError(f"grasp: num_objects={num_objects!r}: use 1 to 5 objects on the tray.")
        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"grasp: render_mode={render_mode!r}: use None or 'rgb_array' (PyBullet's TinyRenderer).")
        if max_steps < 1 or lift_height <= 0 or step_size <= 0 or substeps < 1:
            raise EnvError("grasp: max_steps and substeps must be >= 1, lift_height and step_size > 0.")
        self.split, self.object_ids = resolve_objects(objects)
        self.num_objects, self.max_steps = int(num_objects), int(max_steps)
        self.lift_height, self.step_size, self.yaw_step = float(lift_height), float(step_size), float(yaw_step)
        self.substeps, self.render_mode, self.render_size = int(substeps), render_mode, tuple(render_size)
        dim = EE_DIM + OBJ_DIM * self.num_objects
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
        self._p: bullet_client.BulletClient | None = None
        self._bodies: list[int] = []
        self._numbers: list[int] = []

    # -- simulation ---------------------------------------------------------------------------
    def _connect(self) -> None:
        p = bullet_client.BulletClient(connection_mode=pybullet.DIRECT)
        p.setAdditionalSearchPath(pybullet_data.getDataPath())
        p.setGravity(0, 0, -9.81)
        p.setTimeStep(TIME_STEP)
        p.loadURDF("plane.urdf", [0, 0, -0.0001])
        self._tray = p.loadURDF("tray/traybox.urdf", TRAY_POS.tolist(), useFixedBase=True)
        self._robot = p.loadURDF("franka_panda/panda.urdf", [0, 0, 0], useFixedBase=True)
        for f in FINGERS:
            p.changeDynamics(self._robot, f, lateralFriction=1.5, spinningFriction=0.001)
        self._lower = [p.getJointInfo(self._robot, j)[8] for j in ARM_JOINTS]
        self._upper = [p.getJointInfo(self._robot, j)[9] for j in ARM_JOINTS]
        self._p = p

    def _ee_target(self, pos: np.ndarray, yaw: float) -> None:
        p = self._p
        orn = p.getQuaternionFromEuler([math.pi, 0.0, yaw])
        q = p.calculateInverseKinematics(self._robot, EE_LINK, pos.tolist(), orn, lowerLimits=self._lower,
                                         upperLimits=self._upper, jointRanges=[u - l for l, u in zip(self._lower, self._upper)],
                                         restPoses=list(REST), maxNumIterations=20)
        p.setJointMotorControlArray(self._robot, ARM_JOINTS, pybullet.POSITION_CONTROL, targetPositions=q[:7],
                                    forces=[ARM_FORCE] * 7, positionGains=[0.05] * 7)
        return q

    def _fingers(self, closed: bool) -> None:
        target = 0.0 if closed else FINGER_OPEN
        self._p.setJointMotorControlArray(self._robot, FINGERS, pybullet.POSITION_CONTROL,
                                          targetPositions=[target, target], forces=[FINGER_FORCE] * 2)

    def _ee_pose(self) -> tuple[np.ndarray, float]:
        state = self._p.getLinkState(self._robot, EE_LINK, computeForwardKinematics=True)
        m = self._p.getMatrixFromQuaternion(state[5])  # row-major; the hand's x axis is column 0
        return np.asarray(state[4], dtype=np.float64), math.atan2(m[3], m[0])

    # -- gymnasium ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # PyBullet can blow up on one of random_urdfs' meshes (NaN poses after the objects
        # settle: seen once, at a reset about 117k env steps into a training run). The world is
        # then rebuilt from scratch and the tray drawn anew, rather than handing NaN to the learner.
        for _ in range(RESET_ATTEMPTS):
            if self._p is None:
                self._connect()
            obs, quantities = self._build()
            if np.isfinite(obs).all():
                return obs, self._info(quantities)
            self._disconnect()
        raise EnvError(f"grasp: the PyBullet simulation gave a non-finite observation after {RESET_ATTEMPTS} fresh "
                       f"starts (objects {self._numbers}); leave these objects out of `objects`.")

    def _disconnect(self) -> None:
        if self._p is not None:
            try:
                self._p.disconnect()
            except pybullet.error:
                pass
        self._p, self._bodies = None, []

    def _build(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Objects drawn and dropped on the tray, the arm near home: the first observation."""
        p, rng = self._p, self.np_random
        for body in self._bodies:
            p.removeBody(body)
        self._numbers = [int(n) for n in rng.choice(self.object_ids, self.num_objects, replace=len(self.object_ids) < self.num_objects)]
        spots: list[np.ndarray] = []
        while len(spots) < self.num_objects:
            xy = TRAY_POS[:2] + rng.uniform(-SPAWN_HALF, SPAWN_HALF, 2)
            if all(np.linalg.norm(xy - s) >= MIN_SEPARATION for s in spots) or len(spots) and rng.random() < 0.01:
                spots.append(xy)
        self._bodies = []
        data = pybullet_data.getDataPath()
        for number, xy in zip(self._numbers, spots):
            orn = p.getQuaternionFromEuler([0.0, 0.0, float(rng.uniform(-math.pi, math.pi))])
            body = p.loadURDF(urdf_path(data, number), [float(xy[0]), float(xy[1]), TRAY_TOP + 0.06], orn)
            p.changeDynamics(body, -1, lateralFriction=1.0)
            self._bodies.append(body)
        # The arm starts above the tray, a few centimetres off home, gripper open.
        start = HOME + np.array([*rng.uniform(-0.05, 0.05, 2), rng.uniform(-0.03, 0.03)])
        self._yaw = float(rng.uniform(-0.5, 0.5))
        for j, q in zip(ARM_JOINTS, REST):
            p.resetJointState(self._robot, j, q)
        for f in FINGERS:
            p.resetJointState(self._robot, f, FINGER_OPEN)
        for _ in range(3):  # IK from the rest pose, applied at once, refined
            q = self._ee_target(start, self._yaw)
            for j in ARM_JOINTS:
                p.resetJointState(self._robot, j, q[j])
        self._target = start.copy()
        self._closed = False
        self._fingers(False)
        for _ in range(60):  # let the objects settle
            p.stepSimulation()
        self._spawn_z = np.array([p.getBasePositionAndOrientation(b)[0][2] for b in self._bodies])
        self._steps = 0
        self._reached = self._grasped = self._lifted = False
        obs, quantities = self._observe()
        self._last_obs = obs
        return obs, quantities

    def step(self, action):
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        self._target = np.clip(self._target + a[:3] * self.step_size, WORKSPACE_LOW, WORKSPACE_HIGH)
        self._yaw = float(np.clip(self._yaw + a[3] * self.yaw_step, -math.pi / 2, math.pi / 2))
        self._closed = bool(a[4] > 0.0)
        self._ee_target(self._target, self._yaw)
        self._fingers(self._closed)
        for _ in range(self.substeps):
            self._p.stepSimulation()
        self._steps += 1
        obs, q = self._observe()
        if not np.isfinite(obs).all():
            # A blow-up mid-episode: the episode is cut short on its last sound observation, and
            # the next reset starts a fresh world (see reset).
            self._disconnect()
            info = {"sim_blowup": 1.0, "reached": float(self._reached), "grasp_made": float(self._grasped),
                    "is_success": float(self._lifted), "objects": list(self._numbers)}
            return self._last_obs, 0.0, False, True, info
        self._last_obs = obs
        reach = REACH_W * (1.0 - np.tanh(10.0 * q["dist"]))
        held = q["grasped"].astype(np.float64)
        lift = held * (GRASP_W + LIFT_W * np.clip(q["height"] / self.lift_height, 0.0, 1.0))
        reward = float(np.max(np.maximum(reach, lift)))
        self._reached |= bool(np.any(q["pregrasp_dist"] < 0.03))
        self._grasped |= bool(np.any(q["grasped"]))
        self._lifted |= bool(np.any(q["lifted"]))
        truncated = self._steps >= self.max_steps
        return obs, reward, False, truncated, self._info(q)

    def _observe(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        p = self._p
        ee, yaw = self._ee_pose()
        opening = p.getJointState(self._robot, FINGERS[0])[0] + p.getJointState(self._robot, FINGERS[1])[0]
        parts = [ee - TRAY_POS, [math.sin(yaw), math.cos(yaw), opening / (2 * FINGER_OPEN), float(self._closed)]]
        k = self.num_objects
        q = {name: np.zeros(k) for name in ("dist", "pregrasp_dist", "height", "left", "right")}
        for i, body in enumerate(self._bodies):
            pos, orn = p.getBasePositionAndOrientation(body)
            pos = np.asarray(pos)
            lo, hi = p.getAABB(body)
            half = 0.5 * (np.asarray(hi) - np.asarray(lo))
            left = len(p.getContactPoints(self._robot, body, FINGERS[0])) > 0
            right = len(p.getContactPoints(self._robot, body, FINGERS[1])) > 0
            height = pos[2] - self._spawn_z[i]
            q["dist"][i] = np.linalg.norm(pos - ee)
            q["pregrasp_dist"][i] = np.linalg.norm(pos + [0.0, 0.0, PREGRASP_HEIGHT] - ee)
            q["height"][i], q["left"][i], q["right"][i] = height, left, right
            parts += [pos - ee, orn, half, [height, float(left), float(right)]]
        # Held: both fingers touch it, the gripper is commanded closed, and the fingers did close
        # some way (pressing open fingertips down on an object also touches it with both).
        q["grasped"] = (q["left"] > 0) & (q["right"] > 0) & self._closed & (opening < GRASP_MAX_OPENING * 2 * FINGER_OPEN)
        q["lifted"] = q["grasped"] & (q["height"] >= self.lift_height)
        return np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in parts]).astype(np.float32), q

    def _info(self, q: dict[str, np.ndarray]) -> dict[str, Any]:
        return {"dist": q["dist"].copy(), "pregrasp_dist": q["pregrasp_dist"].copy(), "height": q["height"].copy(),
                "lift_progress": np.clip(q["height"] / self.lift_height, -1.0, 1.0),
                "grasped": q["grasped"].astype(np.float32), "gripper_closed": float(self._closed),
                "reached": float(self._reached), "grasp_made": float(self._grasped),
                "is_success": float(self._lifted), "objects": list(self._numbers)}

    def render(self):
        if self.render_mode != "rgb_array" or self._p is None:
            return None
        w, h = self.render_size
        p = self._p
        view = p.computeViewMatrixFromYawPitchRoll(cameraTargetPosition=(TRAY_POS + [0, 0, 0.08]).tolist(),
                                                   distance=0.75, yaw=50.0, pitch=-35.0, roll=0.0, upAxisIndex=2)
        proj = p.computeProjectionMatrixFOV(fov=60.0, aspect=w / h, nearVal=0.05, farVal=3.0)
        img = p.getCameraImage(w, h, view, proj, renderer=pybullet.ER_TINY_RENDERER)[2]
        return np.asarray(img, dtype=np.uint8).reshape(h, w, 4)[:, :, :3].copy()

    def close(self):
        self._disconnect()
        super().close()


def make(max_episode_steps: int | None = None, **kwargs: Any) -> gym.Env:
    """The grasp env (``env.entry_point: hdppo.envs.builtin.grasp:make``); the episode length is the
    env's own ``max_steps`` argument."""
    return Grasp(**kwargs)
