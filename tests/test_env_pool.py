"""Episode boundaries, Gymnasium 1.x autoreset, and the checks on env outputs."""
import gymnasium as gym
import numpy as np
import pytest

from hdppo.envs.env_pool import EnvPool
from hdppo.envs.loading import make_gym_env
from hdppo.platform.errors import EnvError
from scripted_envs import CountdownEnv


def pool_of(n=1, **kw):
    return EnvPool(lambda: gym.wrappers.TimeLimit(CountdownEnv(**kw), 5), n, seed=0, name="countdown")


def test_gymnasium_vector_default_autoreset_is_next_step():
    """Documents why EnvPool exists: Gymnasium 1.x vector envs reset one step *after* the end,
    returning a reset observation with reward 0 that must not be learned from."""
    env = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(CountdownEnv(terminate_at=2), 10)])
    env.reset(seed=0)
    env.step(np.array([0]))
    _, _, term, _, _ = env.step(np.array([0]))
    assert term[0]
    obs, rew, term, trunc, _ = env.step(np.array([0]))  # the autoreset step
    assert obs[0, 0] == 0.0 and rew[0] == 0.0 and not term[0] and not trunc[0]


def test_pool_resets_in_the_same_step_and_keeps_final_obs_on_truncation():
    pool = pool_of()
    for t in range(1, 5):
        res = pool.step([0])
        assert not res.truncated[0] and res.obs[0, 0] == t
    res = pool.step([0])  # step 5: TimeLimit truncates
    assert res.truncated[0] and not res.terminated[0]
    assert res.final_obs[0][0] == 5.0        # true final observation, for bootstrapping
    assert res.obs[0, 0] == 0.0              # already the new episode's first observation
    assert res.episode_returns == [5.0] and res.episode_lengths == [5]
    res = pool.step([0])
    assert res.obs[0, 0] == 1.0 and res.rewards[0] == 1.0  # no phantom zero-reward step


def test_termination_is_not_truncation():
    pool = pool_of(terminate_at=3)
    for _ in range(2):
        pool.step([0])
    res = pool.step([0])
    assert res.terminated[0] and not res.truncated[0]
    assert res.final_obs[0][0] == 3.0


@pytest.mark.parametrize("bad,match", [("nan_obs", "non-finite observation"), ("inf_reward", "non-finite reward"),
                                       ("wrong_shape", "does not match the observation_space")])
def test_bad_env_outputs_are_named(bad, match):
    pool = pool_of(bad=bad)
    with pytest.raises(EnvError, match=match) as e:
        for _ in range(4):
            pool.step([0])
    assert "countdown" in str(e.value)


def test_unknown_env_id_suggests_close_ids():
    with pytest.raises(EnvError, match=r"'Hoper-v5' is not registered.*Did you mean 'Hopper-v5'"):
        make_gym_env("Hoper-v5")


def test_entry_point_errors():
    with pytest.raises(EnvError, match="cannot import module 'no_such_mod'"):
        make_gym_env(entry_point="no_such_mod:f")
    with pytest.raises(EnvError, match="has no attribute 'nope'"):
        make_gym_env(entry_point="scripted_envs:nope")
    with pytest.raises(EnvError, match="not a gymnasium.Env"):
        make_gym_env(entry_point="scripted_envs:not_an_env")
    with pytest.raises(EnvError, match="rejected its arguments"):
        make_gym_env(entry_point="scripted_envs:countdown", kwargs={"speed": 3})


def test_official_checker_passes_on_builtin_gym_env():
    from gymnasium.utils.env_checker import check_env

    check_env(make_gym_env("CartPole-v1").unwrapped, skip_render_check=True)
    check_env(CountdownEnv(), skip_render_check=True)
