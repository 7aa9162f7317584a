"""grasp: a Franka Panda picks random objects off a tray, in PyBullet (DIRECT, no display).

A single-agent Gymnasium env. A Panda arm (``pybullet_data/franka_panda``) stands beside a tray
(``tray/traybox.urdf``); ``num_objects`` objects from pybullet_data's ``random_urdfs`` (1000
random blobs of a few centimetres, 0.1 kg) are dropped at random places and yaws within
+-10 cm of the tray's centre and left to settle. The agent commands the end effector, pointing
down: a Cartesian step, a yaw step and the gripper; inverse kinematics and position control
move the arm, PyBullet simulates fingers, contacts and objects. An object is *grasped* when both
fingers touch it, the gripper is commanded closed and the fingers have closed below 90% of
their full opening (open fingertips pressed down on it do not count). Success is a **lift**: a
grasped object ``lift_height`` above where it settled.

| | |
|---|---|
| agents | one (Gymnasium env) |
| action | Box(-1, 1, (5,), float32): ``dx, dy, dz`` (times ``step_size``, 2 cm; the target is kept in the workspace above the tray), ``dyaw`` (times ``yaw_step``, 0.15 rad; yaw within +-pi/2), gripper (> 0 closed, else open) |
| observation | Box(-inf, inf, (7 + 13 K,), float32), K = ``num_objects``: ee position relative to the tray centre (3), sin and cos of ee yaw, finger opening (0 closed .. 1 open), gripper command (0/1); then per object: its position relative to the ee (3), orientation quaternion (4), half-extents of its bounding box (3), height gained since it settled, left and right finger contact (0/1) |
| reward | robosuite Lift's staged reward, the best object counting: ``max(0.1 (1 - tanh(10 d)), grasped (0.35 + 0.65 lift_progress))``, d the ee-to-object distance; at most 1 per step, while an object is held high |
| info | per object (arrays [K]): ``dist``, ``pregrasp_dist`` (to 8 cm above the object), ``height``, ``lift_progress`` (height / lift_height, clipped to [-1, 1]), ``grasped``; ``gripper_closed``; per episode so far: ``reached`` (ee within 3 cm of a pre-grasp point), ``grasp_made``, ``is_success`` (a lift); ``objects`` (the object numbers on the tray); ``sim_blowup`` (1.0, on the one step where PyBullet's state went non-finite: the episode is truncated on its last sound observation and the next reset builds a fresh world) |
| episode metrics | ``reached``, ``grasp_made``, ``is_success`` (``metadata["episode_metrics"]``: charted per episode, printed by ``hdppo eval``) |
| episode | never terminates; truncated after ``max_steps`` (50 steps of 10 physics steps at 240 Hz: 2.1 s) |
| arguments | ``objects="train"`` (or ``"heldout"``, or a list of object numbers), ``num_objects=1`` (1-5), ``max_steps=50``, ``lift_height=0.08`` m, ``step_size=0.02`` m, ``yaw_step=0.15`` rad, ``substeps=10``, ``render_mode=None`` (or ``"rgb_array"``), ``render_size=(240, 180)`` |
| render | ``rgb_array``: PyBullet's TinyRenderer (software, needs no display or GPU), ``[180, 240, 3]`` uint8 |
| factory | ``make(**kwargs)`` (``env.entry_point: hdppo.envs.builtin.grasp:make``) |

**Objects** (:mod:`.objects`): the held-out set is every tenth object of random_urdfs (``000``,
``010``, ..., ``990``: 100 objects), the training set the other 900. The split is fixed by
number, the same on every machine; train on ``objects="train"`` and evaluate on
``objects="heldout"`` (``benchmarks/grasp.py`` does).

**For a hierarchy** (``configs/grasp_hierarchy.yaml``): an upper layer chooses the phase (reach,
grasp, lift: ``Discrete(3)``; with several objects ``MultiDiscrete([3, K])``, phase and target
object) every few steps; the lower layer commands the end effector and is rewarded for carrying
out the phase by ``grasp_follow_phase`` (:mod:`.rewards`).

**Scripts** (:mod:`.scripted`, reading object 0 from the observation): :class:`.scripted.ScriptedPick`
(above the object, down, close, raise), the reference ``benchmarks/grasp.py`` runs beside the
learned policies; :func:`.scripted.phase_teacher`, the phase a pick is in, a ``teacher.policy``
that kickstarts the phase layer of ``configs/grasp_hierarchy.yaml``.
"""
from .env import PHASES, Grasp, make
from .objects import SPLITS, resolve_objects, split_ids
from . import rewards  # noqa: F401  (registers grasp_follow_phase)

__all__ = ["Grasp", "PHASES", "SPLITS", "make", "resolve_objects", "split_ids"]
