"""Raw environment-step ceiling for this machine.

Measures how many env steps/s the hardware can do with *no* RL framework at
all: one process per core, each stepping its own ``gymnasium.make(env_id)``
with random actions (pre-sampled in numpy blocks, since
``action_space.sample()`` per step is comparatively slow) and resetting on
terminated/truncated.  The total is an upper bound for any PPO sampler on the
same CPUs, so framework numbers (e.g. ``rllib_ppo.py``) can be read as a
fraction of it.

Usage:  python benchmarks/raw_env_limit.py [seconds]
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time

_ACTION_BLOCK = 4096


def _worker(env_id: str, seconds: float, seed: int, barrier, out) -> None:
    import gymnasium as gym
    import numpy as np

    env = gym.make(env_id)
    space = env.action_space
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)

    def block():
        if hasattr(space, "n"):  # Discrete
            return rng.integers(0, space.n, size=_ACTION_BLOCK)
        return rng.uniform(space.low, space.high,
                           size=(_ACTION_BLOCK, *space.shape)).astype(space.dtype)

    actions = block()
    barrier.wait()  # all procs start the clock together
    steps, i = 0, 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        _, _, terminated, truncated, _ = env.step(actions[i])
        steps += 1
        i += 1
        if terminated or truncated:
            env.reset()
        if i == _ACTION_BLOCK:
            actions, i = block(), 0
            if time.perf_counter() >= deadline:
                break
        elif (steps & 255) == 0 and time.perf_counter() >= deadline:
            break
    out.put(steps / (time.perf_counter() - t0))
    env.close()


def raw_env_steps_per_s(env_id: str, seconds: float = 10.0,
                        procs: int | None = None) -> dict:
    """Total random-action env steps/s with ``procs`` processes (default: one per core)."""
    procs = procs or os.cpu_count() or 1
    ctx = mp.get_context("spawn")  # clean interpreters; no forked Ray/torch state
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(env_id, seconds, 1000 + k, barrier, out))
          for k in range(procs)]
    for p in ps:
        p.start()
    per_proc = sorted(out.get(timeout=seconds + 120) for _ in ps)
    for p in ps:
        p.join()
    return {"env_id": env_id, "procs": procs,
            "steps_per_s": round(sum(per_proc), 1),
            "per_proc": [round(x, 1) for x in per_proc]}


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    for env_id in ("Hopper-v5", "Ant-v5"):
        print(json.dumps(raw_env_steps_per_s(env_id, seconds=secs)), flush=True)
