"""Shared fixtures: one embedded Ray for the whole session, scripted envs, tiny configs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        # Workers import the tests' own env modules (scripted_envs), as a user's would from their folder.
        path = os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


def tiny_config(**over) -> dict:
    """A CartPole config small enough for a unit test; ``over`` merges into the top level."""
    cfg = {
        "name": "tiny",
        "env": {"id": "CartPole-v1"},
        "layers": [{"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 2},
                    "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256}}],
        "train": {"total_env_steps": 512, "checkpoint_every": 1, "eval_episodes": 1, "seed": 3},
        "ray": {"backend": "local"},
    }
    for key, value in over.items():
        merge = isinstance(value, dict) and key != "env"  # an env is replaced whole (id vs entry_point)
        cfg[key] = {**cfg.get(key, {}), **value} if merge else value
    return cfg


def check_copy_draws(make_vector, parallel_env, core: str, fields: tuple[str, ...], scenario: str, seed: int) -> None:
    """A batched built-in env (skirmish, swarm) draws copy i's layout (``fields`` of its ``core``
    simulator) from (seed, i) alone: not from the number of copies, nor from when the other copies'
    episodes end; copy 0 lays out the PettingZoo env's episode with that seed."""
    import numpy as np

    two, five = make_vector(2, scenario=scenario), make_vector(5, scenario=scenario)
    two.reset(seed=seed), five.reset(seed=seed)
    a, b = getattr(two, core), getattr(five, core)
    for name in fields:
        assert np.array_equal(getattr(a, name), getattr(b, name)[:2]), name
    assert not np.array_equal(getattr(a, fields[0])[0], getattr(a, fields[0])[1])
    b.reset(np.array([1, 3]))     # other copies end their episodes in between
    b.reset(np.array([0, 3]))
    a.reset(np.array([0]))
    for name in fields:
        assert np.array_equal(getattr(a, name)[0], getattr(b, name)[0]), name
    env, fresh = parallel_env(scenario=scenario), make_vector(3, scenario=scenario)
    env.reset(seed=seed), fresh.reset(seed=seed)
    for name in fields:
        assert np.array_equal(getattr(getattr(env, core), name)[0], getattr(getattr(fresh, core), name)[0]), name
