"""driving: highway-env's scenarios (PyPI ``highway-env``) with their outcome in ``info``, for a
hierarchy of tactical choices over the env's meta-actions.

Flat driving needs no adapter: ``env: {id: "highway_env:highway-fast-v0"}`` makes Gymnasium
import ``highway_env`` (which registers its ids) and make the env (``configs/highway.yaml``).
This module is for the two-layer variant on ``roundabout-v1`` (``configs/highway_roundabout_hierarchy.yaml``):
it makes the env with config overrides, and writes into every step's info how the episode is
going, which highway-env leaves implicit (the roundabout has no success flag), plus what a
command-following reward needs (the ego's ring lane and speed).

| | |
|---|---|
| agents | one (Gymnasium env), the ego vehicle |
| action | the env's: ``Discrete(5)`` DiscreteMetaAction (0 LANE_LEFT, 1 IDLE, 2 LANE_RIGHT, 3 FASTER, 4 SLOWER), one per second |
| observation | the env's: Kinematics, Box(-inf, inf, (5, 5), float32) (hdppo flattens it) |
| reward | the env's (roundabout: speed, a lane-change cost, 0 on a crash; normalised to [0, 1] per step), plus ``exit_reward`` once, on the step the ego reaches its exit |
| episode metrics | ``is_success``, ``crash``, ``timeout`` (``metadata["episode_metrics"]``) |
| info | highway-env's (``speed``, ``crashed``, ``rewards``) plus ``lane`` (the ego's lane index in its road segment; on the ring 0 is the inner lane, 1 the outer), ``on_ring`` (1 on the ring), ``exited`` (1 once the ego reached its exit), ``is_success`` (exited without a crash), ``crash`` (1/0), ``timeout`` (1 where the episode ran out of time without success or crash) |
| episode | the env's: ends on a crash; truncated after ``duration`` (roundabout: 11 s) |
| arguments | ``env_id="roundabout-v1"`` (any highway-env id), ``config=None`` (a dict of highway-env config overrides), ``exit_reward=0.0`` (paid once on reaching the exit), ``render_mode=None`` (or ``"rgb_array"``), ``shield=False`` (``true`` or a dict of :func:`safe_actions` arguments: mask unsafe meta-actions; straight highways only) |
| with ``shield`` | observation ``Dict(observation=<the env's>, action_mask=MultiBinary(5))``; ``info["shield_masked"]`` the number of meta-actions masked at the step |
| factory | ``make(**kwargs)`` (``env.entry_point: hdppo.envs.builtin.driving:make``) |

**For a hierarchy**: an upper layer chooses every few seconds a *tactic*, ``Discrete(4)`` =
ring lane (inner, outer) x speed (cautious 8 m/s, brisk 16 m/s), :data:`TACTICS`; the lower
layer drives with the meta-actions and is rewarded by ``driving_follow_tactic`` for being in the
commanded lane at the commanded speed, and not crashing.

**A scripted driver** for the straight highways (``highway-v0``, ``highway-fast-v0``):
:func:`gap_keeping_action` reads the simulator (not the observation) and keeps a time headway to
the vehicle ahead, changes lanes when blocked and a neighbouring lane has room front and rear,
keeps right when the right lane is as open, and speeds up when the gap allows. With
``escape=True`` it treats a leader slower than the lowest target speed (20 m/s on highway-fast,
where SLOWER can do no more) as a wall: it leaves that lane as soon as a neighbour has room, and
close to the wall with bumper margins only (half the crashes: ``benchmarks/results/highway_escape.md``).
:func:`gap_teacher` is the same rule as a ``teacher.policy`` (kickstarting,
``configs/highway_kickstart.yaml``), and ``benchmarks/highway.py`` runs it as a no-learning baseline.

**A safety shield** for the straight highways (``configs/highway_shield.yaml``):
:func:`clearance` predicts, for each meta-action, the smallest bumper-to-bumper gap over the next
3 s if the ego takes it now and then brakes as hard as the meta-actions can (SLOWER each second;
they cannot go below 20 m/s on highway-fast, so a slower leader is a wall, watched for 6 s), the
other vehicles at constant speed (a braking leader braking on for 1 s). :class:`SafetyShield`
masks the actions that come within ``margin`` (2 m) and always leaves the least bad one; the
policy learns among the rest. It reads the simulator, as :func:`gap_keeping_action` does: a
driver-assistance layer under the policy, not part of what the policy observes.

**Why ``exit_reward``**: roundabout-v1 pays 0.83 a step for the slowest speed and 1.0 for the
fastest, and nothing for reaching the exit, while a crash ends the episode. Driving slowly round
the ring until time runs out is then nearly as good as exiting and far safer, and that is what a
policy trained on the env's reward alone learns (67% timeouts, ``benchmarks/results/highway_roundabout.md``).
A one-off payment on reaching the exit states the task a driver has.
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..errors import EnvError
from ..rewards import register_reward

__all__ = ["RING", "TACTICS", "DrivingOutcome", "SafetyShield", "clearance", "follow_tactic", "gap_keeping_action",
           "gap_teacher", "make", "safe_actions"]

# The roundabout's ring, as highway-env builds it (roundabout_env._make_road): eight arcs, two
# lanes each (lane 0 radius 20 m, lane 1 radius 24 m).
RING = {("se", "ex"), ("ex", "ee"), ("ee", "nx"), ("nx", "ne"), ("ne", "wx"), ("wx", "we"), ("we", "sx"), ("sx", "se")}
# The upper layer's tactics: (ring lane, target speed in m/s); roundabout's meta-action speeds are 0, 8, 16.
TACTICS = ((0, 8.0), (0, 16.0), (1, 8.0), (1, 16.0))
SPEED_SCALE = 16.0


class DrivingOutcome(gym.Wrapper):
    """Adds the episode's outcome and the ego's lane to ``info`` (module docstring)."""

    def __init__(self, env: gym.Env, exit_reward: float = 0.0):
        super().__init__(env)
        self.exit_reward = float(exit_reward)
        self.metadata = dict(env.metadata, name=f"driving_{env.spec.id if env.spec else 'highway'}",
                             episode_metrics=["is_success", "crash", "timeout"])
        self._destination: str | None = None
        self._exited = False

    def _outcome(self, info: dict, terminated: bool = False, truncated: bool = False) -> dict:
        vehicle = self.env.unwrapped.vehicle
        lane = vehicle.lane_index
        self._exited |= self._destination is not None and lane[1] == self._destination
        crashed = bool(vehicle.crashed)
        info = dict(info)
        info.update(lane=int(lane[2]), on_ring=float((lane[0], lane[1]) in RING), exited=float(self._exited),
                    crash=float(crashed), is_success=float(self._exited and not crashed),
                    timeout=float(truncated and not crashed and not self._exited), speed=float(vehicle.speed))
        return info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        route = getattr(self.env.unwrapped.vehicle, "route", None) or []
        self._destination = route[-1][1] if route else None
        self._exited = False
        return obs, self._outcome(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        was_out = self._exited
        info = self._outcome(info, terminated, truncated)
        if self._exited and not was_out:
            reward = float(reward) + self.exit_reward
        return obs, reward, terminated, truncated, info


# DiscreteMetaAction's indices.
LANE_LEFT, IDLE, LANE_RIGHT, FASTER, SLOWER = range(5)
# The straight highways, where the shield's gap prediction (along x) holds.
STRAIGHT = ("highway-v0", "highway-fast-v0")


def _simulator(env: Any) -> Any:
    """The highway-env env under ``env``'s wrappers and hdppo's adapters (it has ``road`` and
    ``vehicle``)."""
    seen = env
    for _ in range(16):
        if hasattr(seen, "road") and hasattr(seen, "vehicle"):
            return seen
        seen = getattr(seen, "env", None) or getattr(seen, "unwrapped", None)
        if seen is None:
            break
    name = type(getattr(env, "unwrapped", env)).__name__
    raise EnvError(f"driving: {name} is not (and does not wrap) a highway-env env; the gap-keeping driver reads "
                   "highway-env's road and ego vehicle. Use it with a highway-env id such as highway_env:highway-fast-v0.")


def _gaps(sim: Any, lane: tuple) -> tuple[tuple[float, float], tuple[float, float]]:
    """(gap, speed) of the vehicles ahead of and behind the ego in ``lane``, bumper to bumper
    along the road (straight highways: x); (inf, inf) ahead and (inf, -inf) behind when empty."""
    ego = sim.vehicle
    front, rear = sim.road.neighbour_vehicles(ego, lane)
    x = ego.position[0]
    ahead = (front.position[0] - x - ego.LENGTH, front.speed) if front is not None else (np.inf, np.inf)
    behind = (x - rear.position[0] - ego.LENGTH, rear.speed) if rear is not None else (np.inf, -np.inf)
    return ahead, behind


def _room_ahead(gap: tuple[float, float], speed: float, headway: float, ttc: float) -> bool:
    """At ``speed``, at least ``headway`` seconds (and 8 m) to the vehicle ahead, and, if closing
    on it, more than ``ttc`` seconds to collision."""
    g, v_front = gap
    return g >= max(headway * speed, 8.0) and (v_front >= speed or g / (speed - v_front) > ttc)


def _room_behind(gap: tuple[float, float], speed: float, headway: float) -> bool:
    g, v_rear = gap
    return g > max(headway * max(v_rear, speed), 6.0) and (v_rear <= speed or g / (v_rear - speed) > 3.0)


def gap_keeping_action(env: Any, headway: float = 1.0, ttc: float = 5.0, rear_headway: float = 0.5,
                       look: float = 60.0, gain: float = 15.0, escape: bool = False, wall: float = 50.0) -> int:
    """A rule-based driver for the straight highways (the module docstring): the meta-action for
    the ego now. ``headway`` (s) and ``ttc`` (s) bound the gap it keeps ahead, ``rear_headway``
    (s) the gap it wants behind in a lane it moves into; when the vehicle ahead is within
    ``look`` m and slower than the top speed, it overtakes into a lane with ``gain`` m more
    room. Defaults: the safest of the settings tried (``benchmarks/results/highway_scripted.md``).

    ``escape``: the ego cannot drive slower than its lowest target speed (20 m/s on the highways;
    SLOWER does nothing below it), so a leader slower than that within ``wall`` m is a wall it
    will run into (the default driver's crashes, ``results/highway_scripted.md``). With it, such a
    lane is no lane to move into, the ego leaves it as soon as a neighbouring lane has room, and
    when none has, it takes a lane change with only bumper margins once the wall is near."""
    sim = _simulator(env)
    ego = sim.vehicle
    v, lane = float(ego.speed), ego.lane_index
    sides = {side[2]: side for side in sim.road.network.side_lanes(lane)}
    v_top, v_min = float(ego.target_speeds[-1]), float(ego.target_speeds[0])
    ahead, _ = _gaps(sim, lane)

    def room(gap: tuple[float, float]) -> float:  # free road at the top speed: the gap, and a fast leader's lead
        return min(gap[0], 150.0) + 5.0 * (min(gap[1], v_top) - v)

    def walled(gap: tuple[float, float]) -> bool:  # a leader slower than the ego can drive, near
        return escape and gap[1] < v_min - 0.3 and gap[0] < wall

    options, escapes = [], []  # (room, action) of the neighbouring lanes one can move into now
    for offset, action in ((1, LANE_RIGHT), (-1, LANE_LEFT)):
        side = sides.get(lane[2] + offset)
        if side is not None:
            front, rear = _gaps(sim, side)
            if walled(front):
                continue
            if _room_ahead(front, v, headway, ttc) and _room_behind(rear, v, rear_headway):
                options.append((room(front) + (10.0 if action == LANE_RIGHT else 0.0), action))
            if escape and front[0] > 6.0 + 1.5 * max(0.0, v - front[1]) and rear[0] > 3.0 + 1.5 * max(0.0, rear[1] - v):
                escapes.append((room(front), action))
    options.sort(reverse=True)
    escapes.sort(reverse=True)
    if walled(ahead) and v > ahead[1]:
        if options:
            return options[0][1]
        if escapes and (ahead[0] < 15.0 or ahead[0] / (v - ahead[1]) < 6.0):
            return escapes[0][1]
    if not _room_ahead(ahead, v, headway, ttc):
        return options[0][1] if options else SLOWER
    here = room(ahead)
    if ahead[0] < look and ahead[1] < v_top - 1.0 and options and options[0][0] > here + gain:
        return options[0][1]
    if any(action == LANE_RIGHT and score >= min(here, 150.0) and score > 100.0 for score, action in options):
        return LANE_RIGHT  # the right lane pays, when it is as open as this one
    index = int(ego.speed_index)
    if index < len(ego.target_speeds) - 1 and _room_ahead(ahead, float(ego.target_speeds[index + 1]),
                                                           1.2 * headway, 1.2 * ttc):
        return FASTER
    return IDLE


# The ego's speed controller (highway-env's ControlledVehicle.TAU_ACC): speed closes on the target
# speed with this time constant.
SPEED_TAU = 0.6


def _ego_x(x0: float, v0: float, v_target: float, t: np.ndarray | float) -> np.ndarray:
    """The ego's position after ``t`` s closing from ``v0`` on ``v_target`` (first-order speed)."""
    return x0 + v_target * t + (v0 - v_target) * SPEED_TAU * (1.0 - np.exp(-np.asarray(t) / SPEED_TAU))


def clearance(env: Any, action: int, horizon: float = 3.0, wall_horizon: float = 6.0, change_time: float = 1.2,
              rear_horizon: float = 1.5, brake_time: float = 1.0, dt: float = 0.1,
              neighbours: dict | None = None) -> float:
    """The smallest bumper-to-bumper gap (m; negative: a collision) the ego keeps over the next
    ``horizon`` s if it takes meta-action ``action`` now and SLOWER at every later decision (one
    target speed down a second, the hardest the meta-actions brake), on a straight highway.

    Other vehicles keep their speed, except that a braking leader keeps braking for
    ``brake_time`` s. A leader that will be slower than the ego's lowest target speed is a wall
    (SLOWER does nothing below 20 m/s on highway-fast): it is watched for ``wall_horizon`` s, so
    the lane is left while there is still time. During a lane change (``change_time`` s) the ego
    counts in both lanes; vehicles behind it count only in a lane it moves into, for
    ``rear_horizon`` s (in its own lane they brake for it). ``neighbours``: a dict to memoise
    each lane's (front, rear) vehicles in, shared by the calls for one state (:func:`safe_actions`)."""
    sim = _simulator(env)
    neighbours = {} if neighbours is None else neighbours
    ego = sim.vehicle
    speeds = np.asarray(ego.target_speeds, float)
    v0, x0 = float(ego.speed), float(ego.position[0])
    lane = ego.target_lane_index
    sides = {side[2]: side for side in sim.road.network.side_lanes(lane)}
    index = int(np.argmin(np.abs(speeds - v0)))  # as DiscreteMetaAction does (speed_to_index)
    target = lane
    if action == FASTER:
        index = min(index + 1, len(speeds) - 1)
    elif action == SLOWER:
        index = max(index - 1, 0)
    elif action in (LANE_LEFT, LANE_RIGHT):
        target = sides.get(lane[2] + (1 if action == LANE_RIGHT else -1), lane)
    elif action == IDLE:
        index = int(np.argmin(np.abs(speeds - float(ego.target_speed))))
    end = max(horizon, wall_horizon)
    t = np.arange(dt, end + 1e-9, dt)
    xe = np.empty_like(t)
    x, v, start = x0, v0, 0.0
    while start < end - 1e-9:  # one decision a second: the action, then SLOWER
        vt = speeds[index]
        seg = (t > start + 1e-9) & (t <= start + 1.0 + 1e-9)
        xe[seg] = _ego_x(x, v, vt, t[seg] - start)
        x, v = float(_ego_x(x, v, vt, 1.0)), vt + (v - vt) * np.exp(-1.0 / SPEED_TAU)
        index, start = max(index - 1, 0), start + 1.0
    lanes = {lane: np.ones_like(t, bool)}
    if target != lane:
        lanes[lane] = t <= change_time
        lanes[target] = np.ones_like(t, bool)
    if ego.lane_index not in lanes:  # still crossing into ``lane`` from an earlier change
        lanes[ego.lane_index] = t <= change_time
    worst = np.inf
    for each, when in lanes.items():
        if each not in neighbours:
            neighbours[each] = sim.road.neighbour_vehicles(ego, each)
        front, rear = neighbours[each]
        if front is not None:
            a = min(float(getattr(front, "action", {}).get("acceleration", 0.0)), 0.0)
            a = max(a, -float(front.speed) / brake_time)
            tb = np.minimum(t, brake_time)
            gap = front.position[0] + front.speed * t + a * tb * (t - 0.5 * tb) - xe - ego.LENGTH
            wall = front.speed + a * brake_time < speeds[0] - 0.3
            seen = when & (t <= (wall_horizon if wall else horizon) + 1e-9)
            worst = min(worst, float(gap[seen].min()))
        if rear is not None and each != ego.lane_index:
            seen = when & (t <= rear_horizon + 1e-9)
            if seen.any():
                gap = xe - (rear.position[0] + rear.speed * t) - ego.LENGTH
                worst = min(worst, float(gap[seen].min()))
    return worst


def safe_actions(env: Any, margin: float = 2.0, **kwargs: float) -> np.ndarray:
    """The action mask of a safety shield over the five meta-actions (1 allowed): those whose
    :func:`clearance` stays at least ``margin`` m; when none does, the ones with the largest
    clearance (the least bad), so that a move is always left."""
    seen: dict = {}  # the five predictions look at the same lanes of the same state
    gaps = np.array([clearance(env, action, neighbours=seen, **kwargs) for action in range(5)])
    allowed = gaps >= margin
    if not allowed.any():
        allowed = gaps >= gaps.max() - 1e-6
    return allowed.astype(np.int8)


class SafetyShield(gym.Wrapper):
    """Masks the meta-actions that :func:`safe_actions` finds unsafe: the observation becomes
    ``{"observation": <the env's>, "action_mask": MultiBinary(5)}`` (hdppo's mask convention), so
    the policy chooses, and learns, among the safe actions only; the env, its dynamics and its
    reward are untouched. ``info["shield_masked"]`` counts the actions masked at the step."""

    def __init__(self, env: gym.Env, **kwargs: float):
        super().__init__(env)
        if not isinstance(env.action_space, gym.spaces.Discrete) or env.action_space.n != 5:
            raise EnvError(f"driving: shield needs highway-env's DiscreteMetaAction (Discrete(5)); this env's action "
                           f"space is {env.action_space}. Leave action.type at its default (DiscreteMetaAction).")
        self.shield = dict(kwargs)
        self.observation_space = gym.spaces.Dict({"observation": env.observation_space,
                                                  "action_mask": gym.spaces.MultiBinary(5)})

    def _wrap(self, obs: Any, info: dict) -> tuple[dict, dict]:
        mask = safe_actions(self.env, **self.shield)
        return {"observation": obs, "action_mask": mask}, dict(info, shield_masked=float(5 - int(mask.sum())))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._wrap(obs, info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs, info = self._wrap(obs, info)
        return obs, reward, terminated, truncated, info


def gap_teacher(raw_obs: dict, members: list[str], env: Any = None, **kwargs: float) -> int:
    """``teacher.policy`` for a flat highway layer: :func:`gap_keeping_action` on the copy's env."""
    if env is None:
        raise EnvError("driving.gap_teacher needs the copy's env (the ego vehicle and road); it got none. Use it as "
                       "`teacher: {policy: hdppo.envs.builtin.driving:gap_teacher}` on a highway-env layer.")
    return gap_keeping_action(env, **kwargs)


@register_reward("driving_follow_tactic", info_keys=("on_ring", "lane", "speed", "crash"))
def follow_tactic(command: np.ndarray, info: dict, **_) -> float:
    """Carry out the commanded tactic (a one-hot over :data:`TACTICS`): 0.5 for being in its
    ring lane (off the ring, on the entry and exit roads, any lane counts), up to 0.5 for
    driving at its speed (``0.5 (1 - |v - v_cmd| / 16)``), and -1 on a crash."""
    lane, speed = TACTICS[int(np.argmax(np.asarray(command)))]
    in_lane = 1.0 if (not info.get("on_ring", 0.0) or int(info.get("lane", -1)) == lane) else 0.0
    fit = max(0.0, 1.0 - abs(float(info.get("speed", 0.0)) - speed) / SPEED_SCALE)
    return 0.5 * in_lane + 0.5 * fit - float(info.get("crash", 0.0))


def make(env_id: str = "roundabout-v1", config: dict[str, Any] | None = None, exit_reward: float = 0.0,
         render_mode: str | None = None, shield: bool | dict[str, float] = False) -> gym.Env:
    """A highway-env env wrapped in :class:`DrivingOutcome`; ``config`` overrides highway-env's
    own config keys (``duration``, ``vehicles_count``, ...); ``exit_reward`` is paid once, on the
    step the ego reaches its exit; ``shield`` (``true``, or a dict of :func:`safe_actions`'
    arguments, e.g. ``{margin: 2.0}``) masks the meta-actions a :class:`SafetyShield` finds
    unsafe (straight highways only: ``highway-v0``, ``highway-fast-v0``)."""
    try:
        import highway_env  # noqa: F401  (registers the ids)
    except ImportError as exc:
        raise EnvError(f"driving: highway-env is not installed ({exc}). Install it: pip install 'hdppo[domains]' "
                       "(or pip install highway-env).") from None
    full = env_id if ":" in env_id else env_id
    if full not in gym.registry:
        ids = sorted(k for k, v in gym.registry.items() if str(v.entry_point).startswith("highway_env"))
        raise EnvError(f"driving: env_id={env_id!r} is not a highway-env id. Use one of {', '.join(ids)}.")
    if not np.isfinite(exit_reward):
        raise EnvError(f"driving: exit_reward={exit_reward!r} must be a finite number (0 turns it off).")
    options = _shield_options(env_id, shield)
    env = gym.make(full, config=dict(config or {}), render_mode=render_mode)
    env = DrivingOutcome(env, exit_reward=exit_reward)
    return SafetyShield(env, **options) if options is not None else env


def _shield_options(env_id: str, shield: Any) -> dict[str, float] | None:
    """``make``'s ``shield`` argument checked: None (off), or the keyword arguments of :func:`safe_actions`."""
    if shield is False or shield is None:
        return None
    if env_id.split(":")[-1] not in STRAIGHT:
        raise EnvError(f"driving: shield is for the straight highways ({', '.join(STRAIGHT)}); env_id={env_id!r} "
                       "has curved or crossing roads its gap prediction does not model. Remove shield.")
    if shield is True:
        return {}
    known = {"margin", "horizon", "wall_horizon", "change_time", "rear_horizon", "brake_time", "dt"}
    if not isinstance(shield, dict) or set(shield) - known:
        raise EnvError(f"driving: shield={shield!r} must be true or a dict with some of {', '.join(sorted(known))} "
                       "(seconds, and margin in metres).")
    for key, value in shield.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not np.isfinite(value) or (
                value <= 0 and key != "margin"):
            raise EnvError(f"driving: shield.{key}={value!r} must be a finite number (> 0 but for margin).")
    return {key: float(value) for key, value in shield.items()}
