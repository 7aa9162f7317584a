"""Tiny deterministic envs for tests, importable as ``scripted_envs:...`` entry points."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv


class CountdownEnv(gym.Env):
    """Observation = [t]; reward 1 each step; terminates at ``terminate_at`` (if set), else the
    TimeLimit truncates. The final observation is distinguishable from the reset one ([0])."""

    metadata = {"name": "countdown"}

    def __init__(self, terminate_at: int | None = None, bad: str | None = None):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.terminate_at = terminate_at
        self.bad = bad
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float64 if self.bad == "float64" else np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([float(self.t)], np.float32)
        reward = 1.0
        if self.bad == "nan_obs" and self.t == 3:
            obs = np.array([np.nan], np.float32)
        if self.bad == "inf_reward" and self.t == 3:
            reward = float("inf")
        if self.bad == "wrong_shape":
            obs = np.zeros(3, np.float32)
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return obs, reward, terminated, False, {}


def countdown(**kwargs):
    return CountdownEnv(**kwargs)


def not_an_env():
    return object()


class _BanditEnv(gym.Env):
    """A contextual bandit as an episodic env: each step shows a fresh random observation
    (:meth:`_obs`) and pays :meth:`_reward` for the action taken on the previous one; ``length``
    steps an episode, truncated."""

    length = 20

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        reward = self._reward(action)
        self.t += 1
        return self._obs(), reward, False, self.t >= self.length, {}


class MultiChoiceEnv(_BanditEnv):
    """MultiDiscrete([3, 2]) actions; reward 1 when the action equals (obs-coded) target."""

    metadata = {"name": "multi_choice"}

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (5,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([3, 2])
        self.t = 0

    def _obs(self):
        self.target = (int(self.np_random.integers(3)), int(self.np_random.integers(2)))
        o = np.zeros(5, np.float32)
        o[self.target[0]] = 1.0
        o[3 + self.target[1]] = 1.0
        return o

    def _reward(self, action):
        return float(action[0] == self.target[0]) + float(action[1] == self.target[1])


def multi_choice():
    return MultiChoiceEnv()


class LitSideEnv(_BanditEnv):
    """An image observation (uint8 Box, HWC ``(size, size, 2)`` or CHW with ``chw=True``): one
    pixel of channel 0 is lit, in the left or the right half; action 0/1 names the half, reward 1
    when right. 20 steps an episode: random play scores about 10, a reader of the image 20."""

    metadata = {"name": "lit_side"}

    def __init__(self, size: int = 8, chw: bool = False, keyed: bool = False):
        self.size, self.chw, self.keyed = size, chw, keyed
        shape = (2, size, size) if chw else (size, size, 2)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        if keyed:  # {agent_pos, image}: the image key sorts second, 2 values into the flat input
            self.observation_space = gym.spaces.Dict({"agent_pos": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
                                                      "image": self.observation_space})
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def _obs(self):
        self.side = int(self.np_random.integers(2))
        half = self.size // 2
        r, c = int(self.np_random.integers(self.size)), int(self.np_random.integers(half)) + half * self.side
        img = np.zeros((self.size, self.size, 2), np.uint8)
        img[r, c, 0] = 255
        img = np.ascontiguousarray(img.transpose(2, 0, 1)) if self.chw else img
        if self.keyed:  # a position that says nothing of the side
            return {"agent_pos": self.np_random.random(2).astype(np.float32), "image": img}
        return img

    def _reward(self, action):
        return float(int(action) == self.side)


def lit_side(**kwargs):
    return LitSideEnv(**kwargs)


class RememberBitEnv(gym.Env):
    """A memory task: observation ``[cue, last]``; the cue (+1 or -1) is shown at step 0 only,
    ``last`` is 1 on the final step of ``length``. Reward 1 on the final step when the action
    names the cue (0 for -1, 1 for +1), else 0. A memoryless policy scores 0.5 an episode at best."""

    metadata = {"name": "remember_bit"}

    def __init__(self, length: int = 4):
        self.length = length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.bit = int(self.np_random.integers(2))
        return np.array([2.0 * self.bit - 1.0, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length - 1
        reward = 0.0
        if self.t == self.length:
            return np.zeros(2, np.float32), float(int(action) == self.bit), True, False, {}
        return np.array([0.0, 1.0 if done else 0.0], np.float32), reward, False, False, {}


def remember_bit(**kwargs):
    return RememberBitEnv(**kwargs)


class PickLargestEnv(_BanditEnv):
    """A set task: ``items`` rows of 3 random values, flattened item-major, then one global value
    (the step's fraction of the episode); action i picks row i, reward 1 when row i has the
    largest first value. 10 steps an episode: random play scores 10 / items, a reader 10."""

    metadata = {"name": "pick_largest"}
    length = 10

    def __init__(self, items: int = 5):
        self.items = items
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3 * items + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(items)
        self.t = 0

    def _obs(self):
        self.rows = self.np_random.uniform(-1.0, 1.0, (self.items, 3)).astype(np.float32)
        return np.concatenate([self.rows.ravel(), [self.t / 10.0]]).astype(np.float32)

    def _reward(self, action):
        return float(int(action) == int(self.rows[:, 0].argmax()))


def pick_largest(**kwargs):
    return PickLargestEnv(**kwargs)


def countdown_wrong_shape():
    return gym.wrappers.TimeLimit(CountdownEnv(bad="wrong_shape"), 10)


def countdown_float64():
    """Its reset observation is float64 where the space says float32 (a newcomer's usual slip)."""
    return gym.wrappers.TimeLimit(CountdownEnv(bad="float64"), 10)


def countdown_nan():
    return gym.wrappers.TimeLimit(CountdownEnv(bad="nan_obs"), 10)


def corridor_broken():
    """A PettingZoo env whose observations leave their declared space."""
    from hdppo.envs.builtin.corridor import CorridorEnv

    class Broken(CorridorEnv):
        def _obs(self, agent):
            return np.full(self.length, 7.0, np.float32)  # the space is Box(0, 1)

    return Broken()


def rllib_two_cartpoles():
    """RLlib's own multi-agent maker: two independent CartPoles, agents 0 and 1."""
    from ray.rllib.env.multi_agent_env import make_multi_agent

    return make_multi_agent("CartPole-v1")({"num_agents": 2})


class CrashOnceEnv(gym.Wrapper):
    """CartPole that raises once, in whichever process first reaches ``at_step`` total steps,
    as a simulator that crashes would; ``flag`` is a file that marks the crash as done."""

    def __init__(self, flag: str, at_step: int = 300):
        super().__init__(gym.make("CartPole-v1"))
        self.flag, self.at_step, self.steps = flag, at_step, 0

    def step(self, action):
        import os

        self.steps += 1
        if self.steps >= self.at_step and not os.path.exists(self.flag):
            try:  # O_EXCL: when two workers get here at once, only one of them crashes
                os.close(os.open(self.flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return self.env.step(action)
            raise RuntimeError("simulator crashed")
        return self.env.step(action)


def crash_once(flag: str, at_step: int = 300):
    return CrashOnceEnv(flag, at_step)


class BreaksLaterEnv(gym.Wrapper):
    """CartPole that raises on every step after ``at_step`` steps of its own (every worker fails,
    after some updates): a simulator that breaks mid-run."""

    def __init__(self, at_step: int):
        super().__init__(gym.make("CartPole-v1"))
        self.at_step, self.steps = at_step, 0

    def step(self, action):
        self.steps += 1
        if self.steps > self.at_step:
            raise RuntimeError("simulator blew up")
        return self.env.step(action)


def breaks_later(at_step: int = 350):
    return BreaksLaterEnv(at_step)


def corridor_aec():
    """The corridor as an AEC env (PettingZoo's parallel_to_aec marks it parallelizable)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    from hdppo.envs.builtin.corridor import CorridorEnv

    return parallel_to_aec(CorridorEnv(num_agents=2))


class ShiftedObsEnv(gym.ObservationWrapper):
    """CartPole whose observations are offset on one worker: a deviant worker for diagnostics."""

    def __init__(self, env: gym.Env, shift: float):
        super().__init__(env)
        self.shift = shift
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, env.observation_space.shape, np.float32)

    def observation(self, obs):
        return (obs + self.shift).astype(np.float32)


def shifted_on_worker(worker: int = 2, shift: float = 5.0):
    import os

    from hdppo.envs.loading import WORKER_INDEX_VAR

    mine = int(os.environ.get(WORKER_INDEX_VAR, -1)) == worker
    return ShiftedObsEnv(gym.make("CartPole-v1"), shift if mine else 0.0)


class BatchedCountdown:
    """A natively vectorised env (no per-copy Python): N countdowns stepped as one array, with
    one slot. Observation [t / 10], reward 1 per step, terminated at ``length`` steps; the action
    (Discrete 2) is ignored. Used to test the ``env.type: vector`` adapter."""

    def __init__(self, num_envs: int, seed: int | None = None, length: int = 7):
        from hdppo.envs.vector import VectorMultiAgentEnv  # noqa: F401 - the interface this follows

        self.num_envs, self.length = num_envs, length
        self.agents, self.name = ["agent_0"], "batched_countdown"
        self.obs_dim, self.mask_dim, self.state_dim = 1, 0, 1
        self.want_state = False
        self.t = np.zeros(num_envs, np.int64)
        self.steps_taken = 0

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 10.0, (1,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _view(self):
        from hdppo.envs.vector import VecObs

        ones = np.ones((self.num_envs, 1), bool)
        obs = (self.t / 10.0).astype(np.float32).reshape(-1, 1, 1)
        return VecObs(obs, ones, ones, None, obs[:, 0] if self.want_state else None)

    def reset(self, seed=None):
        self.t[:] = 0
        return self._view()

    def step(self, actions):
        from hdppo.envs.vector import VecStep

        assert actions.shape == (self.num_envs, 1)
        self.steps_taken += 1
        self.t += 1
        end = self.t >= self.length
        final = (self.t / 10.0).astype(np.float32).reshape(-1, 1, 1)
        episodes = [(float(self.length), int(self.length), int(i)) for i in np.flatnonzero(end)]
        self.t[end] = 0
        v = self._view()
        return VecStep(v.obs, v.alive, v.acting, None, v.state, rewards=np.ones((self.num_envs, 1)),
                       terminated=end[:, None], truncated=np.zeros((self.num_envs, 1), bool), final_obs=final,
                       final_state=final[:, 0], episode_end=end, episodes=episodes)

    def close(self):
        pass


def batched_countdown(num_envs: int, seed=None, **kwargs):
    return BatchedCountdown(num_envs, seed, **kwargs)


class _FlatRewards(BatchedCountdown):
    """Breaks the contract: rewards ``[N]`` instead of ``[N, agents]``."""

    def step(self, actions):
        res = super().step(actions)
        res.rewards = res.rewards[:, 0]
        return res


def batched_countdown_flat_rewards(num_envs: int, seed=None, **kwargs):
    return _FlatRewards(num_envs, seed, **kwargs)


class _NoEpisodes(BatchedCountdown):
    """Sets episode_end but never reports the episodes in VecStep.episodes."""

    def step(self, actions):
        import dataclasses

        return dataclasses.replace(super().step(actions), episodes=[])


def batched_countdown_no_episodes(num_envs: int, seed=None, **kwargs):
    return _NoEpisodes(num_envs, seed, **kwargs)


class _Broken(BatchedCountdown):
    """BatchedCountdown breaking one rule of the contract that the arrays' shapes do not show
    (``how``); each passed its shape checks and trained on something else than the env meant."""

    def __init__(self, num_envs, seed=None, how="", **kwargs):
        super().__init__(num_envs, seed, **kwargs)
        self.how = how
        if how == "all_masked":
            self.mask_dim = 2

    def _fix(self, out):
        n = self.num_envs
        if self.how == "out_of_bounds":      # declared Box(0, 10): 10 t
            out.obs = out.obs * 100.0
        if self.how == "acting_dead":        # acting, but not alive
            out.alive = np.zeros((n, 1), bool)
        if self.how == "all_masked":         # asked to act with no legal action
            out.masks = np.zeros((n, 1, 2), np.float32)
        return out

    def reset(self, seed=None):
        return self._fix(super().reset(seed))

    def step(self, actions):
        res = super().step(actions)
        if self.how == "end_unflagged":     # a time limit that says neither terminated nor truncated
            res.terminated = np.zeros_like(res.terminated)
        if self.how == "dead_paid":          # gone after step 3, still paid
            res.alive = (self.t < 3)[:, None] | res.episode_end[:, None]
            res.acting = res.alive.copy()
            res.terminated = res.terminated | (self.t == 3)[:, None]
        return self._fix(res)


def batched_countdown_broken(num_envs: int, seed=None, how: str = "", **kwargs):
    return _Broken(num_envs, seed, how, **kwargs)


class ScoredCountdown(CountdownEnv):
    """A countdown that reports, on its last step, ``score`` = the episode's length and
    ``reached`` = 1 when the agent pressed action 1 on that step; declares them as episode metrics."""

    metadata = {"name": "scored_countdown", "episode_metrics": ("score", "reached"), "render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None, **kwargs):
        super().__init__(**kwargs)
        self.render_mode = render_mode

    def render(self):
        """A 10x10 screen (MinAtar's size), brighter with t."""
        return np.full((10, 10, 3), min(255, 40 * self.t), np.uint8)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated:
            info = {"score": self.t, "reached": int(action == 1), "label": "not a number"}
        return obs, reward, terminated, truncated, info


def scored_countdown(**kwargs):
    return ScoredCountdown(terminate_at=kwargs.pop("terminate_at", 5), **kwargs)


class StrictMaskedEnv(gym.Env):
    """One legal action of three at each step (``t % 3``), said by an ``action_mask`` beside a
    2-value observation; an illegal action does nothing (the clock does not advance), so only
    legal play ends an episode in 5 steps."""

    metadata = {"name": "strict_masked"}

    def __init__(self, empty_mask_at=None):
        self.observation_space = gym.spaces.Dict({"observation": gym.spaces.Box(-1.0, 10.0, (2,), np.float32),
                                                  "action_mask": gym.spaces.MultiBinary(3)})
        self.action_space = gym.spaces.Discrete(3)
        self.t = 0
        self.empty_mask_at = empty_mask_at  # at this step no action is legal (a broken env)

    def _obs(self):
        mask = np.zeros(3, np.int8)
        mask[self.t % 3] = self.t != self.empty_mask_at
        return {"observation": np.array([self.t, -1.0], np.float32), "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if int(action) == self.t % 3:
            self.t += 1
        return self._obs(), 1.0, self.t >= 5, False, {}


def strict_masked(**kwargs):
    return StrictMaskedEnv(**kwargs)


def strict_masked_empty():
    """:class:`StrictMaskedEnv` whose mask allows nothing at step 1 (a broken env)."""
    return StrictMaskedEnv(empty_mask_at=1)


class StrictMaskedMultiEnv(StrictMaskedEnv):
    """:class:`StrictMaskedEnv` with a second action component, ``MultiDiscrete([3, 2])``: the
    mask is both components' logits side by side (3 + 2), and only ``[t % 3, 1]`` moves on (the
    fab's lot and release level)."""

    metadata = {"name": "strict_masked_multi"}

    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Dict({"observation": gym.spaces.Box(-1.0, 10.0, (2,), np.float32),
                                                  "action_mask": gym.spaces.MultiBinary(5)})
        self.action_space = gym.spaces.MultiDiscrete([3, 2])

    def _obs(self):
        out = super()._obs()
        out["action_mask"] = np.concatenate([out["action_mask"], np.array([0, 1], np.int8)])
        return out

    def step(self, action):
        a = np.asarray(action)
        if int(a[0]) == self.t % 3 and int(a[1]) == 1:
            self.t += 1
        return self._obs(), 1.0, self.t >= 5, False, {}


def strict_masked_multi():
    return StrictMaskedMultiEnv()


class KeyedMaskedParallel(ParallelEnv):
    """A PettingZoo ParallelEnv whose agents observe ``{cue: Box(1), pos: Box(2), action_mask}``:
    no ``observation`` key, as many games lay them out (``keys=("action_mask",)`` leaves the mask
    alone). ``cue`` is the step count, ``pos`` is ``[10, 20]``; episodes last 3 steps."""

    metadata = {"name": "keyed_masked", "render_modes": []}

    def __init__(self, keys=("cue", "pos", "action_mask"), dead_mask_at=None, broken=""):
        self.dead_mask_at = dead_mask_at   # from this step on, every action is masked out
        # A contract broken at step 1: "zombie" (a_1 flagged terminated, kept in agents), "vanish"
        # (a_1 leaves agents unflagged), "intruder" (an agent not in possible_agents appears),
        # "wide" (a 4-wide mask over Discrete(3)); "float64" (cue of another dtype, from the reset).
        self.broken = broken
        self.possible_agents = ["a_0", "a_1"]
        self.agents = []
        boxes = {"cue": gym.spaces.Box(0, 10, (1,), np.float32), "pos": gym.spaces.Box(0, 50, (2,), np.float32),
                 "action_mask": gym.spaces.MultiBinary(4 if broken == "wide" else 3)}
        self._space = gym.spaces.Dict({k: boxes[k] for k in keys})
        self._actions = {a: gym.spaces.Discrete(3) for a in self.possible_agents}
        self.t = 0

    def observation_space(self, agent):
        return self._space

    def action_space(self, agent):
        return self._actions[agent]

    def _obs(self):
        mask = [0, 0, 0] if self.dead_mask_at is not None and self.t >= self.dead_mask_at else [1, 1, 0]
        full = {"cue": np.array([self.t], np.float32), "pos": np.array([10.0, 20.0], np.float32),
                "action_mask": np.array(mask + [1] * (self.broken == "wide"), np.int8)}
        if self.broken == "float64":   # a dtype the space does not declare
            full["cue"] = full["cue"].astype(np.float64)
        return {a: {k: full[k] for k in self._space.spaces} for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        end = self.t >= 3
        obs = self._obs()
        out = (obs, {a: 1.0 for a in self.agents}, {a: end for a in self.agents}, {a: False for a in self.agents},
               {a: {} for a in self.agents})
        if end:
            self.agents = []
        elif self.t == 1 and self.broken == "zombie":
            out[2]["a_1"] = True
        elif self.t == 1 and self.broken == "vanish":
            self.agents = ["a_0"]
        elif self.t == 1 and self.broken == "intruder":
            self.agents = ["a_0", "a_1", "a_9"]   # without an observation: the env lists it only
        return out

    def close(self):
        pass


def keyed_masked(**kwargs):
    return KeyedMaskedParallel(**kwargs)


def chatty_countdown(**kwargs):
    """A countdown whose factory prints to stdout, as PyBullet does (``argv[0]=``) for each copy."""
    print("argv[0]=")
    return CountdownEnv(terminate_at=5, **kwargs)


def keyed_masked_dead(**kwargs):
    """:class:`KeyedMaskedParallel` whose masks allow nothing from step 1 on."""
    return KeyedMaskedParallel(dead_mask_at=1, **kwargs)


def keyed_masked_float64(**kwargs):
    return KeyedMaskedParallel(broken="float64", **kwargs)


def keyed_masked_float64_aec(**kwargs):
    """The same, turn-based (PettingZoo's parallel_to_aec): checked by PettingZoo's api_test."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(KeyedMaskedParallel(broken="float64", **kwargs))
