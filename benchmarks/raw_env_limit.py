"""Raw environment-step ceiling for this machine.

Measures how many env steps/s the hardware can do with *no* RL framework at
all: one process per core, each stepping its own env with random actions
(pre-sampled in numpy blocks, since ``action_space.sample()`` per step is
comparatively slow) and resetting when the episode ends.  The total is an
upper bound for any PPO sampler on the same CPUs, so framework numbers (e.g.
``rllib_ppo.py``) can be read as a fraction of it.

Two kinds of env:

* ``raw_env_steps_per_s(env_id)``: a Gymnasium id (``gymnasium.make``).
* ``raw_pettingzoo_steps_per_s(module, kwargs)``: a PettingZoo parallel env,
  ``importlib.import_module(module).parallel_env(**kwargs)``; every live agent
  acts each step, action masks (``obs[agent]["action_mask"]`` or
  ``infos[agent]["action_mask"]``) respected.  Reports env steps/s and agent
  steps/s (one per live agent per env step).

Usage:  python benchmarks/raw_env_limit.py [seconds]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import threading
import time

_ACTION_BLOCK = 4096


def _block(space, rng, size: int):
    """``size`` random actions of a Discrete or Box space, as one array."""
    if hasattr(space, "n"):  # Discrete
        return rng.integers(0, space.n, size=size) + int(getattr(space, "start", 0))
    if hasattr(space, "nvec"):  # MultiDiscrete
        return rng.integers(0, space.nvec, size=(size, *space.shape))
    low = space.low if hasattr(space, "low") else -1.0  # Box
    return rng.uniform(low, space.high, size=(size, *space.shape)).astype(space.dtype)


class _GymStepper:
    """One Gymnasium env; ``step()`` returns (env steps, agent steps) taken."""

    check_every = 256  # steps between looks at the clock

    def __init__(self, env_id: str, seed: int):
        import gymnasium as gym
        import numpy as np

        self.env = gym.make(env_id)
        self.rng = np.random.default_rng(seed)
        self.env.reset(seed=seed)
        self.actions, self.i = _block(self.env.action_space, self.rng, _ACTION_BLOCK), 0

    def step(self) -> tuple[int, int]:
        _, _, terminated, truncated, _ = self.env.step(self.actions[self.i])
        self.i += 1
        if terminated or truncated:
            self.env.reset()
        if self.i == _ACTION_BLOCK:
            self.actions, self.i = _block(self.env.action_space, self.rng, _ACTION_BLOCK), 0
        return 1, 1

    def close(self) -> None:
        self.env.close()


def _mask(obs, info):
    for src in (obs, info):
        if isinstance(src, dict) and "action_mask" in src:
            return src["action_mask"]
    return None


class _ParallelStepper:
    """One PettingZoo ParallelEnv; every live agent acts, masks respected."""

    check_every = 256

    def __init__(self, module: str, kwargs: dict, seed: int):
        import importlib

        import numpy as np

        self.np = np
        self.env = importlib.import_module(module).parallel_env(**kwargs)
        self.rng = np.random.default_rng(seed)
        self.obs, self.infos = self.env.reset(seed=seed)
        agents = self.env.possible_agents
        self.spaces = {a: self.env.action_space(a) for a in agents}
        self.blocks = {a: _block(self.spaces[a], self.rng, _ACTION_BLOCK) for a in agents}
        self.i = 0
        # Envs with masks say so from the first observation; the others skip the per-agent look-up.
        self.masked = any(_mask(self.obs.get(a), self.infos.get(a)) is not None for a in self.env.agents)

    def _action(self, agent: str):
        mask = _mask(self.obs.get(agent), self.infos.get(agent))
        if mask is not None:
            return self.rng.choice(self.np.flatnonzero(mask))
        return self.blocks[agent][self.i]

    def step(self) -> tuple[int, int]:
        if self.masked:
            actions = {a: self._action(a) for a in self.env.agents}
        else:
            actions = {a: self.blocks[a][self.i] for a in self.env.agents}
        self.obs, _, terms, truncs, self.infos = self.env.step(actions)
        self.i += 1
        if self.i == _ACTION_BLOCK:
            self.blocks = {a: _block(s, self.rng, _ACTION_BLOCK) for a, s in self.spaces.items()}
            self.i = 0
        if not self.env.agents or all(terms.get(a, False) or truncs.get(a, False) for a in self.env.agents):
            self.obs, self.infos = self.env.reset()
        return 1, len(actions)

    def close(self) -> None:
        self.env.close()


def _worker(make, args: tuple, seconds: float, seed: int, barrier, out) -> None:
    try:
        stepper = make(*args, seed=seed)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        barrier.abort()
        out.put(f"{type(exc).__name__}: {exc}")
        return
    try:
        barrier.wait()  # all procs start the clock together
    except threading.BrokenBarrierError:  # another process failed to make its env
        out.put("another process failed")
        return
    env_steps = agent_steps = calls = 0
    every = stepper.check_every
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        e, a = stepper.step()
        env_steps += e
        agent_steps += a
        calls += 1
        if calls % every == 0 and time.perf_counter() >= deadline:
            break
    wall = time.perf_counter() - t0
    out.put((env_steps / wall, agent_steps / wall))
    stepper.close()


def run_per_core(make, args: tuple, seconds: float, procs: int | None) -> tuple[int, list[tuple[float, float]]]:
    """``procs`` spawned processes (default one per core), each ``make(*args, seed=...)`` and then
    ``step()`` for ``seconds`` from a common start; their (env steps/s, agent steps/s), sorted.

    ``make`` builds a stepper: ``step() -> (env steps, agent steps)``, ``close()``, and
    ``check_every`` (calls between looks at the clock)."""
    procs = procs or os.cpu_count() or 1
    ctx = mp.get_context("spawn")  # clean interpreters; no forked Ray/torch state
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(make, args, seconds, 1000 + k, barrier, out)) for k in range(procs)]
    for p in ps:
        p.start()
    got = [out.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join()
    errors = sorted((g for g in got if isinstance(g, str)), key=lambda g: g == "another process failed")
    if errors:
        raise RuntimeError(f"raw env limit: {errors[0]}")
    return procs, sorted(got)


def raw_env_steps_per_s(env_id: str, seconds: float = 10.0,
                        procs: int | None = None) -> dict:
    """Total random-action env steps/s with ``procs`` processes (default: one per core)."""
    procs, per_proc = run_per_core(_GymStepper, (env_id,), seconds, procs)
    return {"env_id": env_id, "procs": procs,
            "steps_per_s": round(sum(e for e, _ in per_proc), 1),
            "per_proc": [round(e, 1) for e, _ in per_proc]}


def raw_pettingzoo_steps_per_s(module: str, kwargs: dict | None = None, seconds: float = 10.0,
                               procs: int | None = None) -> dict:
    """Total random-action env and agent steps/s of a PettingZoo parallel env, one process per core."""
    procs, per_proc = run_per_core(_ParallelStepper, (module, dict(kwargs or {})), seconds, procs)
    return {"env_id": module, "kwargs": dict(kwargs or {}), "procs": procs,
            "env_steps_per_s": round(sum(e for e, _ in per_proc), 1),
            "agent_steps_per_s": round(sum(a for _, a in per_proc), 1),
            "per_proc_agent_steps_per_s": [round(a, 1) for _, a in per_proc]}


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    for env_id in ("Hopper-v5", "Ant-v5"):
        print(json.dumps(raw_env_steps_per_s(env_id, seconds=secs)), flush=True)
