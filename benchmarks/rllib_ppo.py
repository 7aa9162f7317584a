"""End-to-end PPO throughput of stock RLlib, as a baseline for hdppo.

Runs RLlib's PPO (default API stack of the installed Ray: RLModule/Learner +
EnvRunner/ConnectorV2) with a fixed, CleanRL-like config -- by default 2 env
runners x 4 envs, batch 4000, minibatch 512, 5 epochs, MLP [64, 64] tanh,
CPU only (``common.PPOSettings``) -- and reports *training* throughput: env
steps sampled during ``iterations`` timed iterations divided by their wall
time (sampling + SGD + weight sync).  Warm-up iterations are excluded (actor
start-up, first torch/connector calls).  The step count comes from RLlib's own
lifetime counter and is cross-checked against ``iterations * train_batch``.

Two kinds of env:

* ``rllib_env_steps_per_s(env_id)``: a Gymnasium id.
* ``rllib_pettingzoo_steps_per_s(module, kwargs)``: a PettingZoo parallel env
  through RLlib's ``ParallelPettingZooEnv``, all agents on one shared module
  (parameter sharing, as hdppo's bottom layer), the train batch counted in
  agent steps (``count_steps_by="agent_steps"``, as hdppo counts samples).
  ``flatten_obs=True`` flattens image observations (MAgent2's 13x13x5) to
  vectors, so that RLlib's default MLP encoder takes them.

Usage:  python benchmarks/rllib_ppo.py [iterations]
"""

from __future__ import annotations

import json
import sys
import time

from common import PPOSettings

TRAIN_BATCH = PPOSettings().train_batch


def _lifetime(result: dict, key: str) -> int:
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

    value = result[ENV_RUNNER_RESULTS].get(key, 0)
    return int(sum(value.values()) if isinstance(value, dict) else value)  # agent steps: per agent id


def _ppo_config(env, s: PPOSettings):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return (
        PPOConfig()
        .environment(env)
        .framework("torch")
        # 2 runners x 0.5 CPU + the local learner on the driver fit in 2 CPUs.
        .env_runners(num_env_runners=s.num_workers, num_envs_per_env_runner=s.envs_per_worker,
                     num_cpus_per_env_runner=0.5)
        .learners(num_learners=0, num_gpus_per_learner=0)
        .training(train_batch_size_per_learner=s.train_batch, minibatch_size=s.minibatch,
                  num_epochs=s.epochs, gamma=s.gamma, lambda_=s.gae_lambda, clip_param=s.clip,
                  lr=s.lr, vf_loss_coeff=s.vf_coeff, entropy_coeff=s.entropy_coeff)
        .rl_module(model_config=DefaultModelConfig(
            fcnet_hiddens=list(s.hidden), fcnet_activation=s.activation))
    )


def _timed(config, env_id: str, iterations: int, warmup: int, s: PPOSettings, agent_steps: bool) -> dict:
    import ray
    from ray.rllib.utils.metrics import NUM_AGENT_STEPS_SAMPLED_LIFETIME, NUM_ENV_STEPS_SAMPLED_LIFETIME

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False)
    algo = config.build_algo()
    try:
        result = None
        for _ in range(warmup):
            result = algo.train()
        env0 = _lifetime(result, NUM_ENV_STEPS_SAMPLED_LIFETIME) if result else 0
        agent0 = _lifetime(result, NUM_AGENT_STEPS_SAMPLED_LIFETIME) if result else 0
        t0 = time.perf_counter()
        for _ in range(iterations):
            result = algo.train()
        wall = time.perf_counter() - t0
        env_steps = _lifetime(result, NUM_ENV_STEPS_SAMPLED_LIFETIME) - env0
        agent = _lifetime(result, NUM_AGENT_STEPS_SAMPLED_LIFETIME) - agent0
    finally:
        algo.stop()

    expected = iterations * s.train_batch
    counted = agent if agent_steps else env_steps
    if abs(counted - expected) > 0.05 * expected:  # RLlib may overshoot a little
        print(f"warning: RLlib counted {counted} {'agent' if agent_steps else 'env'} steps, expected ~{expected}",
              file=sys.stderr)
    return {
        "env_id": env_id,
        "env_steps_per_s": round(env_steps / wall, 1),
        "agent_steps_per_s": round(agent / wall, 1),
        "env_steps_per_s_nominal": round(expected / wall, 1),  # wall-clock x batch
        "iterations": iterations,
        "env_steps": env_steps,
        "agent_steps": agent,
        "wall_s": round(wall, 2),
        "settings": s.as_dict(),
        "rllib_version": ray.__version__,
        "api_stack": ("new (RLModule/Learner + EnvRunner/ConnectorV2)"
                      if config.enable_rl_module_and_learner else "old (RolloutWorker/Policy)"),
    }


def rllib_env_steps_per_s(env_id: str, iterations: int = 5, warmup: int = 1,
                          settings: PPOSettings | None = None) -> dict:
    """RLlib PPO on a Gymnasium id: whole-iteration env steps/s."""
    s = settings or PPOSettings()
    return _timed(_ppo_config(env_id, s), env_id, iterations, warmup, s, agent_steps=False)


def _flat_obs_env(env):
    """A PettingZoo parallel env whose observations are flattened to 1-D float32 vectors."""
    import gymnasium as gym
    import numpy as np
    from pettingzoo.utils.wrappers import BaseParallelWrapper

    class FlatObs(BaseParallelWrapper):
        def __init__(self, inner):
            super().__init__(inner)
            self._spaces = {a: gym.spaces.flatten_space(inner.observation_space(a)) for a in inner.possible_agents}

        def observation_space(self, agent):
            return self._spaces[agent]

        def _flat(self, obs: dict) -> dict:
            return {a: np.asarray(o, np.float32).reshape(-1) for a, o in obs.items()}

        def reset(self, seed=None, options=None):
            obs, infos = self.env.reset(seed=seed, options=options)
            return self._flat(obs), infos

        def step(self, actions):
            obs, rew, term, trunc, infos = self.env.step(actions)
            return self._flat(obs), rew, term, trunc, infos

    return FlatObs(env)


def pettingzoo_creator(module: str, kwargs: dict, flatten_obs: bool):
    """The env creator RLlib's runners call: an RLlib MultiAgentEnv over the parallel env."""
    def make(_config=None):
        import importlib

        from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

        env = importlib.import_module(module).parallel_env(**kwargs)
        return ParallelPettingZooEnv(_flat_obs_env(env) if flatten_obs else env)
    return make


def rllib_pettingzoo_steps_per_s(module: str, kwargs: dict | None = None, iterations: int = 5, warmup: int = 1,
                                 settings: PPOSettings | None = None, flatten_obs: bool = False) -> dict:
    """RLlib PPO on a PettingZoo parallel env, one module shared by all agents."""
    from ray import cloudpickle
    from ray.tune.registry import register_env

    # The runners unpickle the creator; this module is not importable there, so ship it by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    s = settings or PPOSettings()
    name = f"hdppo_bench_{module.rsplit('.', 1)[-1]}{'_flat' if flatten_obs else ''}"
    register_env(name, pettingzoo_creator(module, dict(kwargs or {}), flatten_obs))
    config = _ppo_config(name, s).multi_agent(
        policies={"shared"}, policy_mapping_fn=lambda agent_id, *args, **kw: "shared",
        count_steps_by="agent_steps")
    out = _timed(config, module, iterations, warmup, s, agent_steps=True)
    out.update({"kwargs": dict(kwargs or {}), "flatten_obs": flatten_obs, "modules": "one shared"})
    return out


if __name__ == "__main__":
    iters = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for env_id in ("Hopper-v5", "Ant-v5"):
        print(json.dumps(rllib_env_steps_per_s(env_id, iterations=iters)), flush=True)
