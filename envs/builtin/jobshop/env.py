"""The job-shop dispatching env (Gymnasium). Spaces, rewards and arguments:
:mod:`hdppo.envs.builtin.jobshop`."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ...errors import EnvError
from .instances import Instance, instance_from_dict, load_instance, parse_size, random_instance
from .schedule import SCHEMES, Dispatcher

__all__ = ["JobShopEnv", "make_env", "REWARDS", "obs_dim"]

REWARDS = ("lower_bound", "makespan")
JOB_ORDERS = ("index", "mwkr")
JOB_FEATURES = 10       # + one-hot of the next operation's machine (m)
MACHINE_FEATURES = 4
GLOBAL_FEATURES = 2
CLIP = 10.0


# observation="items": per job, its own features and those of its next operation's machine;
# "items_lookahead" adds what dispatching the job now would do (LOOKAHEAD_FEATURES, _lookahead).
ITEM_FEATURES = JOB_FEATURES + MACHINE_FEATURES
LOOKAHEAD_FEATURES = 6
OBSERVATIONS = ("flat", "items", "items_lookahead")
ITEM_WIDTH = {"items": ITEM_FEATURES, "items_lookahead": ITEM_FEATURES + LOOKAHEAD_FEATURES}


def obs_dim(n: int, m: int, observation: str = "flat") -> int:
    if observation in ITEM_WIDTH:
        return n * ITEM_WIDTH[observation] + GLOBAL_FEATURES
    return n * (JOB_FEATURES + m) + m * MACHINE_FEATURES + GLOBAL_FEATURES


InstanceArg = Union[None, str, dict, Instance, Sequence[Union[str, dict, Instance]]]


class JobShopEnv(gym.Env):
    """See :mod:`hdppo.envs.builtin.jobshop` for the table of spaces, rewards and arguments."""

    # episode_metrics: the end-of-episode info keys the trainer charts as episode/<key>.
    metadata = {"name": "jobshop_v0", "render_modes": ["rgb_array"], "render_fps": 4,
                "episode_metrics": ["makespan", "makespan_over_lb"]}

    def __init__(self, size: Optional[str] = None, instance: InstanceArg = None, scheme: str = "active",
                 reward: str = "lower_bound", low: int = 1, high: int = 99, skip_single: bool = True,
                 job_order: str = "index", observation: str = "flat", render_mode: Optional[str] = None):
        if render_mode not in (None, "rgb_array"):
            raise EnvError(f"jobshop renders only render_mode='rgb_array', not {render_mode!r}.")
        if scheme not in SCHEMES:
            raise EnvError(f"jobshop: scheme {scheme!r} is not one of {', '.join(SCHEMES)} (env kwarg scheme).")
        if reward not in REWARDS:
            raise EnvError(f"jobshop: reward {reward!r} is not one of {', '.join(REWARDS)} (env kwarg reward).")
        if job_order not in JOB_ORDERS:
            raise EnvError(f"jobshop: job_order {job_order!r} is not one of {', '.join(JOB_ORDERS)} (env kwarg job_order).")
        if observation not in OBSERVATIONS:
            raise EnvError(f"jobshop: observation {observation!r} is not one of {', '.join(OBSERVATIONS)} "
                           "(env kwarg observation).")
        if not (1 <= int(low) <= int(high)):
            raise EnvError(f"jobshop: durations low={low}, high={high} need 1 <= low <= high (env kwargs low, high).")
        self._fixed = self._as_instances(instance)
        if self._fixed:
            shapes = {i.size for i in self._fixed}
            if len(shapes) > 1:
                raise EnvError(f"jobshop: the instances given have different sizes ({', '.join(sorted(shapes))}); "
                               "one env has one observation size, so give instances of one size.")
            n, m = self._fixed[0].n_jobs, self._fixed[0].n_machines
            if size is not None and parse_size(size) != (n, m):
                raise EnvError(f"jobshop: size {size!r} does not match instance {self._fixed[0].name} "
                               f"({n}x{m}); drop size or give '{n}x{m}'.")
        else:
            n, m = parse_size(size if size is not None else "6x6")
        self.n, self.m = n, m
        self.scheme, self.reward_kind = scheme, reward
        self.low, self.high = int(low), int(high)
        self.skip_single = bool(skip_single)
        self.job_order = job_order
        self.observation = observation
        # The width a set policy must be given (hierarchies.spec checks it); 0: the flat observation is
        # no list of items, and a set policy over it would read misaligned rows.
        self.metadata = {**self.metadata, "set_features": ITEM_WIDTH.get(observation, 0)}
        self._perm = np.arange(n)
        self.render_mode = render_mode
        self.observation_space = spaces.Dict({
            "observation": spaces.Box(-CLIP, CLIP, (obs_dim(n, m, observation),), np.float32),
            "action_mask": spaces.Box(0, 1, (n,), np.int8)})
        self.action_space = spaces.Discrete(n)
        self._next_fixed = 0
        self.instance: Optional[Instance] = None
        self.d: Optional[Dispatcher] = None

    @staticmethod
    def _as_instances(instance: InstanceArg) -> list[Instance]:
        if instance is None:
            return []
        items = [instance] if isinstance(instance, (str, dict, Instance)) else list(instance)
        return [JobShopEnv._as_instance(i) for i in items]

    @staticmethod
    def _as_instance(item: Any) -> Instance:
        """A shipped name or a file path, a ``{name, durations, machines}`` mapping, or an Instance."""
        if isinstance(item, Instance):
            return item
        if isinstance(item, dict):
            return instance_from_dict(item)
        if isinstance(item, str):
            return load_instance(item)
        raise EnvError(f"jobshop: instance {item!r} is not a shipped name ('ft06'), a file path, a mapping "
                       "{name, durations, machines} or a hdppo.envs.builtin.jobshop.Instance.")

    # --- gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        chosen = (options or {}).get("instance")
        if chosen is not None:
            inst = self._as_instance(chosen)
            if (inst.n_jobs, inst.n_machines) != (self.n, self.m):
                raise EnvError(f"jobshop: reset option instance {inst.name} is {inst.size}, this env is {self.n}x{self.m}.")
        elif self._fixed:
            inst = self._fixed[self._next_fixed % len(self._fixed)]
            self._next_fixed += 1
        else:
            inst = random_instance(self.n, self.m, self.np_random, self.low, self.high)
        self.instance = inst
        self.d = Dispatcher(inst, self.scheme)
        self.lb0 = self.d.lower_bound()
        self._lb = self.lb0
        self._first = True
        self.decisions = 0
        reward = self._skip()
        self._pending = reward          # forced dispatches before the first decision count in step 1
        return self._obs(), self._info()

    def step(self, action):
        d = self.d
        if d is None:
            raise EnvError("jobshop: step() before reset().")
        legal = d.legal()[self._perm]
        a = int(action)
        replaced = not (0 <= a < self.n) or not legal[a]
        if replaced:
            a = int(np.flatnonzero(legal)[0])   # an illegal action dispatches the lowest legal slot
        d.schedule(int(self._perm[a]))
        self.decisions += 1
        reward = self._pending + self._gain() + self._skip()
        self._pending = 0.0
        terminated = d.done
        info = self._info()
        if replaced:   # said, so that a caller mixing up jobs and slots (job_order: mwkr) can tell
            info["illegal_action"] = int(action)
        return self._obs(), float(reward), terminated, False, info

    def _gain(self) -> float:
        lb = self.d.lower_bound()
        r = -(lb - self._lb) / self.d.pmax
        if self._first and self.reward_kind == "makespan":
            r -= self._lb / self.d.pmax     # the initial bound too, so that the rewards sum to -makespan / pmax
        self._first = False
        self._lb = lb
        return r

    def _skip(self) -> float:
        """With skip_single, dispatch every forced choice (a single candidate) at once."""
        r = 0.0
        if self.skip_single:
            # The last operation stays a decision, so that an episode never ends inside reset().
            while self.d.legal().sum() == 1 and int((self.d.m - self.d.next_op).sum()) > 1:
                self.d.schedule(int(np.flatnonzero(self.d.legal())[0]))
                r += self._gain()
        return r

    def _info(self) -> dict[str, Any]:
        d = self.d
        info: dict[str, Any] = {"lower_bound": int(self._lb), "decisions": int(self.decisions)}
        if d.done:
            info["makespan"] = d.makespan()
            info["makespan_over_lb"] = d.makespan() / self.lb0   # scale-free: 1.0 would be the initial bound
            gap = self.instance.gap(d.makespan())
            if gap is not None:
                info["gap"] = gap
        return info

    def _obs(self) -> dict[str, np.ndarray]:
        d = self.d
        n, m, pmax = self.n, self.m, d.pmax
        legal = d.legal()
        live = d.live
        now = d.now
        rem = d.remaining_work().astype(np.float64)
        max_rem = max(rem.max(), 1.0)
        idx = np.arange(n)
        k2 = np.minimum(d.next_op + 1, m - 1)
        p_next2 = np.where(d.next_op + 1 < m, d.p[idx, k2], 0)
        ect_live = d.ect[live]
        c_star = ect_live.min() if live.any() else 0
        items = self.observation in ITEM_WIDTH
        jobs = np.zeros((n, ITEM_WIDTH[self.observation] if items else JOB_FEATURES + m), np.float64)
        jobs[:, 0] = legal
        jobs[:, 1] = live
        jobs[:, 2] = d.op_p / pmax
        jobs[:, 3] = rem / (m * pmax)
        jobs[:, 4] = rem / max_rem
        jobs[:, 5] = (m - d.next_op) / m
        jobs[:, 6] = np.where(live, (d.est - now) / pmax, 0.0)
        jobs[:, 7] = np.where(live, (d.ect - c_star) / pmax, 0.0)
        jobs[:, 8] = p_next2 / pmax
        jobs[:, 9] = np.where(live, d.mach_load[d.op_mach] / (n * pmax), 0.0)
        machines = np.zeros((m, MACHINE_FEATURES), np.float64)
        machines[:, 0] = np.maximum(d.mach_ready - now, 0) / pmax
        machines[:, 1] = d.mach_load / (n * pmax)
        machines[:, 2] = d.mach_left / n
        if d.gt_machine >= 0:
            machines[d.gt_machine, 3] = 1.0
        lb = d.lower_bound()
        glob = np.array([len(d.order) / (n * m), (lb - now) / (m * pmax)])
        if self.job_order == "mwkr":
            # Slot i holds the i-th candidate by most work remaining (then the rest, by the same key):
            # jobs are exchangeable, and a fixed meaning per slot spares an MLP learning it n times.
            self._perm = np.lexsort((idx, -rem, ~legal))
        else:
            self._perm = idx
        if items:  # each live job carries its next machine's row, not a one-hot
            jobs[live, JOB_FEATURES:ITEM_FEATURES] = machines[d.op_mach[live]]
            if self.observation == "items_lookahead":
                jobs[:, ITEM_FEATURES:] = _lookahead(d, rem, lb)
            tail = [glob]
        else:
            jobs[idx[live], JOB_FEATURES + d.op_mach[live]] = 1.0
            tail = [machines.ravel(), glob]
        flat = np.concatenate([jobs[self._perm].ravel(), *tail])
        legal = legal[self._perm]
        return {"observation": np.clip(flat, -CLIP, CLIP).astype(np.float32), "action_mask": legal.astype(np.int8)}

    def job_of(self, action: int) -> int:
        """The job that ``action`` (a slot of the last observation) dispatches."""
        return int(self._perm[int(action)])

    def slot_of(self, job: int) -> int:
        """The action (slot of the last observation) that dispatches ``job``: with ``job_order:
        mwkr`` slots are not jobs, so a job chosen outside the env goes through here."""
        return int(np.flatnonzero(self._perm == int(job))[0])

    def rule_action(self, rule: str) -> int:
        """The action that the priority rule ``rule`` (``'MWKR'``, ``'SPT'``, ``'MOR'``, ``'FIFO'``,
        ``'LWKR'``) takes now, in this env's slot order."""
        from .rules import rule_choice

        if self.d is None:
            raise EnvError("jobshop: rule_action() before reset().")
        return self.slot_of(rule_choice(self.d, rule))

    def action_masks(self) -> np.ndarray:
        """The legal actions (sb3-contrib's MaskablePPO convention), in the observation's slot order."""
        return self.d.legal()[self._perm].copy()

    def render(self):
        if self.render_mode != "rgb_array" or self.d is None:
            return None
        from .gantt import gantt_image

        return gantt_image(self.instance, self.d.starts, title=f"{self.instance.name}: makespan so far "
                           f"{int(np.max(self.d.job_ready))}", dpi=60)


def _lookahead(d: Dispatcher, rem: np.ndarray, lb: int) -> np.ndarray:
    """Per job ``[n, LOOKAHEAD_FEATURES]``, what dispatching its next operation now would do (zeros
    for finished jobs; ``rem`` the remaining work, ``lb`` the bound now), in units of ``p_max``: the rise of the makespan lower bound (the step's
    reward, negated), the job's slack to the bound after it, the other live jobs queued for the
    same machine (count / n, and their largest remaining work / (m p_max)), and at the job's
    following machine the wait once this operation ends and that machine's remaining load / (n
    p_max). A set encoder sees each job alone plus pooled summaries; these are the comparisons
    between a job, its machine's queue and the bound that priority rules and L2D's reward encode,
    which an MLP over single rows has to learn otherwise."""
    n, m, pmax = d.n, d.m, d.pmax
    live, est, mach = d.live, d.est, d.op_mach
    out = np.zeros((n, LOOKAHEAD_FEATURES), np.float64)
    if not live.any():
        return out
    # Dispatching j starts it at est_j: its job's bound becomes est_j + rem_j and its machine's
    # est_j + load; both only grow, so the new bound is the max of these and the old one (exact).
    lb_after = np.maximum(lb, est + np.maximum(rem, d.mach_load[mach]))
    out[:, 0] = (lb_after - lb) / pmax
    out[:, 1] = (lb_after - est - rem) / pmax
    same = (mach[:, None] == mach[None, :]) & live[None, :] & live[:, None] & ~np.eye(n, dtype=bool)
    out[:, 2] = same.sum(1) / n
    out[:, 3] = np.where(same, rem[None, :], 0).max(1, initial=0) / (m * pmax)
    k2 = d.next_op + 1
    has_next = live & (k2 < m)
    mach2 = d.mach[np.arange(n), np.minimum(k2, m - 1)]
    out[:, 4] = np.where(has_next, np.maximum(d.mach_ready[mach2] - (est + d.op_p), 0) / pmax, 0.0)
    out[:, 5] = np.where(has_next, d.mach_load[mach2] / (n * pmax), 0.0)
    out[~live] = 0.0
    return out


def make_env(**kwargs: Any) -> JobShopEnv:
    """The factory for ``env.entry_point: hdppo.envs.builtin.jobshop:make_env``."""
    return JobShopEnv(**kwargs)
