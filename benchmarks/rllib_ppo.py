"""End-to-end PPO throughput of stock RLlib, as a baseline for hdppo.

Runs RLlib's PPO (default API stack of the installed Ray: RLModule/Learner +
EnvRunner/ConnectorV2) with a fixed, CleanRL-like MuJoCo config -- 2 env
runners x 4 envs, batch 4000, minibatch 512, 5 epochs, MLP [64, 64] tanh,
CPU only -- and reports *training* throughput: env steps sampled during
``iterations`` timed iterations divided by their wall time (sampling + SGD +
weight sync).  Warm-up iterations are excluded (actor start-up, first
torch/connector calls).  The step count comes from RLlib's own lifetime
counter and is cross-checked against ``iterations * train_batch_size``.

Usage:  python benchmarks/rllib_ppo.py [iterations]
"""

from __future__ import annotations

import json
import sys
import time

TRAIN_BATCH = 4000


def _env_steps_lifetime(result: dict) -> int:
    from ray.rllib.utils.metrics import (ENV_RUNNER_RESULTS,
                                         NUM_ENV_STEPS_SAMPLED_LIFETIME)
    return int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])


def rllib_env_steps_per_s(env_id: str, iterations: int = 5, warmup: int = 1) -> dict:
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False)

    config = (
        PPOConfig()
        .environment(env_id)
        .framework("torch")
        # 2 runners x 0.5 CPU + the local learner on the driver fit in 2 CPUs.
        .env_runners(num_env_runners=2, num_envs_per_env_runner=4,
                     num_cpus_per_env_runner=0.5)
        .learners(num_learners=0, num_gpus_per_learner=0)
        .training(train_batch_size_per_learner=TRAIN_BATCH, minibatch_size=512,
                  num_epochs=5, gamma=0.99, lambda_=0.95, clip_param=0.2,
                  lr=3e-4, vf_loss_coeff=0.5, entropy_coeff=0.0)
        .rl_module(model_config=DefaultModelConfig(
            fcnet_hiddens=[64, 64], fcnet_activation="tanh"))
    )
    algo = config.build_algo()
    try:
        result = None
        for _ in range(warmup):
            result = algo.train()
        steps0 = _env_steps_lifetime(result) if result else 0
        t0 = time.perf_counter()
        for _ in range(iterations):
            result = algo.train()
        wall = time.perf_counter() - t0
        steps = _env_steps_lifetime(result) - steps0
    finally:
        algo.stop()

    expected = iterations * TRAIN_BATCH
    if abs(steps - expected) > 0.05 * expected:  # RLlib may overshoot a little
        print(f"warning: RLlib counted {steps} env steps, expected ~{expected}",
              file=sys.stderr)
    return {
        "env_id": env_id,
        "env_steps_per_s": round(steps / wall, 1),
        "env_steps_per_s_nominal": round(expected / wall, 1),  # wall-clock x batch
        "iterations": iterations,
        "env_steps": steps,
        "wall_s": round(wall, 2),
        "rllib_version": ray.__version__,
        "api_stack": ("new (RLModule/Learner + EnvRunner/ConnectorV2)"
                      if config.enable_rl_module_and_learner else "old (RolloutWorker/Policy)"),
    }


if __name__ == "__main__":
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for env_id in ("Hopper-v5", "Ant-v5"):
        print(json.dumps(rllib_env_steps_per_s(env_id, iterations=iters)), flush=True)
