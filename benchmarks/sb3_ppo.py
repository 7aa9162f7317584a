"""End-to-end PPO throughput of Stable-Baselines3, as a second baseline for hdppo.

SB3's PPO has no worker pool: one process samples ``num_workers * envs_per_worker`` env copies
(``DummyVecEnv``, in-process, SB3's default; ``vec="subproc"`` gives each copy its own process)
and then runs the update. The settings are those of ``common.PPOSettings`` (n_steps =
train_batch / env copies, batch_size = minibatch, n_epochs, MLP [64, 64] tanh, entropy 0; SB3
normalizes advantages per minibatch and does not normalize observations or rewards).

Throughput is whole-iteration, as for RLlib and hdppo: env steps of the timed iterations (rollout
+ update) divided by their wall time, after ``warmup`` untimed iterations, clocked by a callback
at the start of every rollout and at the end of training.

Usage:  python benchmarks/sb3_ppo.py [iterations]
"""
from __future__ import annotations

import json
import sys
import time

from common import PPOSettings


def clock_callback():
    """An SB3 callback that notes (time, num_timesteps) at the start of every rollout and at the
    end of training."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self):
            super().__init__()
            self.starts: list[tuple[float, int]] = []  # (time, num_timesteps) at each rollout start
            self.end: tuple[float, int] | None = None

        def _on_rollout_start(self) -> None:
            self.starts.append((time.perf_counter(), self.num_timesteps))

        def _on_step(self) -> bool:
            return True

        def _on_training_end(self) -> None:
            self.end = (time.perf_counter(), self.num_timesteps)

    return Clock()


def clocked_learn(model, total_timesteps: int, warmup: int = 1) -> dict:
    """``model.learn(total_timesteps)``; whole-iteration env steps/s after ``warmup`` iterations
    (rollout + update), as ``env_steps_per_s`` with the timed ``env_steps`` and ``wall_s``."""
    clock = clock_callback()
    model.learn(total_timesteps=total_timesteps, callback=clock)
    t0, s0 = clock.starts[warmup]
    t1, s1 = clock.end
    return {"env_steps_per_s": round((s1 - s0) / (t1 - t0), 1), "env_steps": s1 - s0, "wall_s": round(t1 - t0, 2)}


def sb3_env_steps_per_s(env_id: str, iterations: int = 5, warmup: int = 1,
                        settings: PPOSettings | None = None, vec: str = "dummy") -> dict:
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    s = settings or PPOSettings()
    n_envs = s.num_workers * s.envs_per_worker
    n_steps = max(1, s.train_batch // n_envs)

    env = make_vec_env(env_id, n_envs=n_envs, seed=0,
                       vec_env_cls=SubprocVecEnv if vec == "subproc" else DummyVecEnv)
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}[s.activation]
    model = PPO("MlpPolicy", env, n_steps=n_steps, batch_size=s.minibatch, n_epochs=s.epochs, learning_rate=s.lr,
                gamma=s.gamma, gae_lambda=s.gae_lambda, clip_range=s.clip, vf_coef=s.vf_coeff,
                ent_coef=s.entropy_coeff, policy_kwargs={"net_arch": list(s.hidden), "activation_fn": act},
                device="cpu", seed=0, verbose=0)
    try:
        timed = clocked_learn(model, (warmup + iterations) * n_steps * n_envs, warmup)
    finally:
        env.close()
    return {"env_id": env_id, **timed, "iterations": iterations, "n_envs": n_envs, "n_steps": n_steps,
            "vec_env": vec, "torch_threads": torch.get_num_threads(), "settings": s.as_dict(),
            "sb3_version": stable_baselines3.__version__}


if __name__ == "__main__":
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for env_id in ("Hopper-v5", "Ant-v5"):
        print(json.dumps(sb3_env_steps_per_s(env_id, iterations=iters)), flush=True)
