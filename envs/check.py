"""``hdppo check-env``: the official checker, then a short rollout through hdppo's own env pool."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from hdppo.envs.env_pool import EnvPool
from hdppo.envs.loading import make_gym_env
from hdppo.platform.errors import EnvError


def _resolve(target: str) -> tuple[dict, str]:
    if target.endswith((".yaml", ".yml")) and Path(target).exists():
        from hdppo.platform.config import load_config

        e = load_config(target).env
        return {"env_id": e.id, "entry_point": e.entry_point, "kwargs": e.kwargs,
                "max_episode_steps": e.max_episode_steps}, target
    if ":" in target and not target.split(":", 1)[0].endswith("-v"):
        return {"entry_point": target}, target
    return {"env_id": target}, target


def check_target(target: str, steps: int = 200) -> str:
    """Run Gymnasium's ``check_env`` and ``steps`` random steps through :class:`EnvPool`.

    Returns a report; raises :class:`EnvError` naming what is wrong.
    """
    from gymnasium.utils.env_checker import check_env

    kwargs, name = _resolve(target)
    env = make_gym_env(**kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check_env(env.unwrapped, skip_render_check=True)
        except Exception as exc:  # noqa: BLE001 - the checker raises many kinds; all mean "broken env"
            raise EnvError(f"env {name!r} fails Gymnasium's check_env: {type(exc).__name__}: {exc}") from None
    env.close()
    pool = EnvPool(lambda: make_gym_env(**kwargs), 2, seed=0, name=name)
    rng = np.random.default_rng(0)
    pool.action_space.seed(int(rng.integers(2**31)))
    episodes = 0
    for _ in range(steps):
        res = pool.step([pool.action_space.sample() for _ in range(pool.num_envs)])
        episodes += len(res.episode_returns)
    pool.close()
    lines = [f"env {name!r}: OK",
             f"  observation_space: {pool.observation_space} (flattened to {pool.obs_dim})",
             f"  action_space:      {pool.action_space}",
             f"  check_env:         passed" + (f" with {len(caught)} warning(s)" if caught else ""),
             f"  rollout:           {steps} steps x 2 copies, {episodes} episodes ended, all outputs finite and in their spaces"]
    lines += [f"  warning: {w.message}" for w in caught]
    return "\n".join(lines)
