"""The batched env interface: episode boundaries, Gymnasium 1.x autoreset, checks on env
outputs, dict-keyed multi-agent envs as arrays, and natively vectorised envs."""
import gymnasium as gym
import numpy as np
import pytest

from conftest import tiny_config
from hdppo.envs.adapters import MultiAgentAdapter, make_multi_agent
from hdppo.envs.loading import make_gym_env
from hdppo.envs.vector import AdapterCopies, GymnasiumCopies, GymnasiumVector, make_vector_env
from hdppo.platform.config import validate
from hdppo.platform.errors import EnvError
from scripted_envs import CountdownEnv

CORRIDOR = ("pettingzoo", None, "hdppo.envs.builtin.corridor:parallel_env")


def copies_of(n=1, **kw):
    venv = GymnasiumCopies(lambda: gym.wrappers.TimeLimit(CountdownEnv(**kw), 5), n, name="countdown")
    venv.reset(seed=0)
    return venv


def zeros(venv):
    return np.zeros((venv.num_envs, len(venv.agents)), np.int64)


def test_gymnasium_vector_default_autoreset_is_next_step():
    """Documents why hdppo resets in the same step: Gymnasium 1.x vector envs reset one step
    *after* the end by default, returning a reset observation with reward 0 that must not be learned from."""
    env = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(CountdownEnv(terminate_at=2), 10)])
    env.reset(seed=0)
    env.step(np.array([0]))
    _, _, term, _, _ = env.step(np.array([0]))
    assert term[0]
    obs, rew, term, trunc, _ = env.step(np.array([0]))  # the autoreset step
    assert obs[0, 0] == 0.0 and rew[0] == 0.0 and not term[0] and not trunc[0]


def test_copies_reset_in_the_same_step_and_keep_final_obs_on_truncation():
    venv = copies_of()
    for t in range(1, 5):
        res = venv.step(zeros(venv))
        assert not res.truncated[0, 0] and res.obs[0, 0, 0] == t
    res = venv.step(zeros(venv))  # step 5: TimeLimit truncates
    assert res.truncated[0, 0] and not res.terminated[0, 0] and res.episode_end[0]
    assert res.final_obs[0, 0, 0] == 5.0     # true final observation, for bootstrapping
    assert res.obs[0, 0, 0] == 0.0           # already the new episode's first observation
    assert res.episodes == [(5.0, 5, 0)]
    res = venv.step(zeros(venv))
    assert res.obs[0, 0, 0] == 1.0 and res.rewards[0, 0] == 1.0  # no phantom zero-reward step


def test_termination_is_not_truncation():
    venv = copies_of(terminate_at=3)
    for _ in range(2):
        venv.step(zeros(venv))
    res = venv.step(zeros(venv))
    assert res.terminated[0, 0] and not res.truncated[0, 0]
    assert res.final_obs[0, 0, 0] == 3.0


@pytest.mark.parametrize("bad,match", [("nan_obs", "non-finite observation"), ("inf_reward", "non-finite reward"),
                                       ("wrong_shape", r"is not in its observation_space .*: shape")])
def test_bad_env_outputs_are_named(bad, match):
    with pytest.raises(EnvError, match=match) as e:
        venv = copies_of(bad=bad)
        for _ in range(4):
            venv.step(zeros(venv))
    assert "countdown" in str(e.value)


def test_multi_agent_dicts_become_slot_arrays_with_alive_masks():
    venv = AdapterCopies(lambda: make_multi_agent("pettingzoo", None, CORRIDOR[2],
                                                  {"num_agents": 3, "length": 3, "max_steps": 30}, None), 2)
    first = venv.reset(seed=0)
    assert venv.agents == ["walker_0", "walker_1", "walker_2"] and first.obs.shape == (2, 3, 3)
    assert first.alive.all() and first.acting.all()
    right = np.full((2, 3), 2, np.int64)  # everyone walks right; the goal is on one side
    for _ in range(30):
        res = venv.step(right)
        ended = res.terminated | res.truncated
        # Slots that ended are not alive any more (unless the copy reset) and their obs is zero.
        gone = ended & ~res.episode_end[:, None]
        assert not res.alive[gone].any() and (res.obs[gone] == 0).all()
        assert (res.final_obs[ended].sum(-1) == 1).all()  # the one-hot position they ended at


class ScriptedSpaces:
    """Spaces, ``state()`` and ``close()`` of the small scripted adapters below: ``obs_size`` Box
    values per agent, Discrete(2) actions."""
    obs_size = 1

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, (self.obs_size,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def state(self):
        return np.zeros(1, np.float32)

    def close(self):
        pass


class DuckAdapter(ScriptedSpaces):
    """An adapter by duck typing alone (no MultiAgentAdapter base): every live agent acts."""

    @property
    def acting(self):
        return self.agents


def test_unknown_agent_after_reset_is_named():
    class Grow(DuckAdapter):
        name, possible_agents = "grow", None

        def __init__(self):
            self.agents = ["a"]

        def reset(self, seed=None):
            self.agents = ["a"]
            return {"a": np.zeros(1, np.float32)}

        def step(self, actions):
            self.agents = ["a", "b"]
            obs = {"a": np.zeros(1, np.float32), "b": np.zeros(1, np.float32)}
            return obs, {"a": 0.0, "b": 0.0}, {}, {}, {}

    venv = AdapterCopies(Grow, 1)
    venv.reset(seed=0)
    with pytest.raises(EnvError, match="agent 'b' appeared.*possible_agents"):
        venv.step(np.zeros((1, 1), np.int64))


def test_gymnasium_vector_env_steps_all_copies_at_once():
    same = gym.vector.AutoresetMode.SAME_STEP
    vec = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TimeLimit(CountdownEnv(terminate_at=3), 10)] * 2,
                                   autoreset_mode=same)
    venv = GymnasiumVector(vec, "countdown")
    venv.reset(seed=0)
    for _ in range(2):
        venv.step(zeros(venv))
    res = venv.step(zeros(venv))
    assert res.terminated[:, 0].all() and res.episode_end.all()
    assert (res.final_obs[:, 0, 0] == 3.0).all() and (res.obs[:, 0, 0] == 0.0).all()
    assert [e[:2] for e in res.episodes] == [(3.0, 3), (3.0, 3)]


def test_gymnasium_vector_env_that_resets_next_step_is_refused():
    """The advice fits a VectorEnv built by hand (a factory's SyncVectorEnv), not only make_vec's."""
    vec = gym.vector.SyncVectorEnv([lambda: CountdownEnv()])
    with pytest.raises(EnvError, match=r"SyncVectorEnv\(fns, autoreset_mode=\.\.\.\).*vector_kwargs"):
        GymnasiumVector(vec, "countdown")


def test_a_gymnasium_vector_envs_nan_names_its_copy():
    """It was reported as copy -1."""
    class NanAt2(CountdownEnv):
        def step(self, action):
            obs, r, te, tr, info = super().step(action)
            return (obs * np.nan if self.nan else obs), r, te, tr, info

    def make(nan):
        env = NanAt2()
        env.nan = nan
        return env

    vec = gym.vector.SyncVectorEnv([lambda: make(False), lambda: make(True)],
                                   autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    venv = GymnasiumVector(vec, "countdown")
    venv.reset(seed=0)
    with pytest.raises(EnvError, match=r"non-finite observation .*\(copy 1, step"):
        venv.step(zeros(venv))


def test_make_vec_by_id_and_training_on_a_natively_vectorised_env():
    venv = make_vector_env("gymnasium_vector", "CartPole-v1", None, {}, None, 3)
    assert isinstance(venv, GymnasiumVector) and venv.num_envs == 3
    venv.close()
    from hdppo.platform.trainer import Trainer

    cfg = validate(tiny_config(env={"type": "vector", "entry_point": "scripted_envs:batched_countdown",
                                    "kwargs": {"length": 7}},
                               train={"total_env_steps": 512, "checkpoint_every": 100, "eval_episodes": 4}))
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        summary = Trainer(cfg, d + "/run", quiet=True).train()
    assert summary["env_steps"] >= 512 and summary["eval_return_mean"] == 7.0


def test_vector_type_needs_a_factory_of_the_interface():
    with pytest.raises(EnvError, match="needs env.entry_point"):
        make_vector_env("vector", "x", None, {}, None, 2)
    with pytest.raises(EnvError, match="rejected its arguments"):
        make_vector_env("vector", None, "scripted_envs:countdown", {}, None, 2)


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


# Envs whose agents stay, die one by one, or end one by one: the batched write of quiet copies
# must give the arrays the one-by-one write gives.
QUIET_CASES = {
    "simple_spread": ("pettingzoo", "mpe2.simple_spread_v3", None, {"N": 3, "max_cycles": 25}),
    "corridor": CORRIDOR + ({"num_agents": 3, "length": 4, "max_steps": 30},),
    "battle": ("pettingzoo", "magent2.environments.battle_v4", None, {"map_size": 12, "max_cycles": 40}),
}


def _play(case, steps=150, copies=3):
    env_type, env_id, entry, kwargs = QUIET_CASES[case]
    venv = make_vector_env(env_type, env_id, entry, kwargs, None, copies)
    venv.keep_raw = False
    venv.reset(seed=3)
    n_actions = int(venv.action_space(venv.agents[0]).n)
    rng = np.random.default_rng(0)
    return [venv.step(rng.integers(0, n_actions, (copies, len(venv.agents)))) for _ in range(steps)]


@pytest.mark.parametrize("case", sorted(QUIET_CASES))
def test_quiet_copies_written_together_equal_one_by_one(case, monkeypatch):
    """AdapterCopies.step writes the copies whose agents neither changed nor ended in one pass,
    once the first steps' space checks are over; until then (and here, forced for a whole run by
    moving that horizon) every copy goes one by one. Both must give the same arrays."""
    from hdppo.envs import vector

    per_copy = []
    original = vector.AdapterCopies._step_copy
    monkeypatch.setattr(vector.AdapterCopies, "_step_copy",
                        lambda self, i, *a: (per_copy.append(i), original(self, i, *a))[1])
    batched = _play(case)
    one_by_one_in_batched_run = len(per_copy)
    monkeypatch.setattr(vector, "SPACE_CHECK_STEPS", 10 ** 9)
    reference = _play(case)
    assert one_by_one_in_batched_run < 0.6 * 150 * 3  # most copy-steps took the batched write
    ended = 0
    for got, want in zip(batched, reference):
        for field_name in ("obs", "alive", "acting", "rewards", "terminated", "truncated", "final_obs", "episode_end"):
            np.testing.assert_array_equal(getattr(got, field_name), getattr(want, field_name), err_msg=field_name)
        assert got.episodes == want.episodes
        ended += int((want.terminated | want.truncated).sum())
    assert ended > 0  # the runs cross agent and episode ends


def test_non_finite_observation_of_a_quiet_copy_is_named():
    class Spoils(DuckAdapter):
        """Two agents, two values each; copy 1's observation turns NaN after 80 steps."""
        name, possible_agents, obs_size = "spoils", ["a", "b"], 2
        made = 0

        def __init__(self):
            self.copy, Spoils.made = Spoils.made, Spoils.made + 1
            self.agents, self.t = ["a", "b"], 0

        def reset(self, seed=None):
            self.t = 0
            return {a: np.zeros(2, np.float32) for a in self.agents}

        def step(self, actions):
            self.t += 1
            value = np.nan if (self.copy == 1 and self.t > 80) else float(self.t)
            return ({a: np.full(2, value, np.float32) for a in self.agents}, {a: 1.0 for a in self.agents},
                    {a: False for a in self.agents}, {a: False for a in self.agents}, {})

    venv = AdapterCopies(Spoils, 2)
    venv.reset(seed=0)
    for _ in range(80):
        res = venv.step(np.zeros((2, 2), np.int64))
    assert (res.obs == 80.0).all() and (res.rewards == 1.0).all()
    with pytest.raises(EnvError, match=r"non-finite observation .*copy 1, step 80"):
        venv.step(np.zeros((2, 2), np.int64))


def test_agent_that_comes_back_without_an_end_is_alive_again():
    """An agent may leave (terminated) and come back later with no signal but its observation (a
    respawn); the step it returns is written one by one, so its slot is alive again."""
    class Respawn(ScriptedSpaces, MultiAgentAdapter):  # acting: the base's, the live agents
        name, possible_agents, agents = "respawn", ["a", "b"], ["a", "b"]

        def __init__(self):
            self.t = 0

        def reset(self, seed=None):
            self.agents, self.t = ["a", "b"], 0
            return {a: np.zeros(1, np.float32) for a in self.agents}

        def step(self, actions):
            self.t += 1
            before = self.agents
            self.agents = ["a"] if 70 <= self.t < 90 else ["a", "b"]
            shown = before if self.t == 70 else self.agents  # b's last observation, then none
            term = {a: (a == "b" and self.t == 70) for a in shown}
            return ({a: np.full(1, self.t, np.float32) for a in shown}, {a: 1.0 for a in shown}, term,
                    {a: False for a in shown}, {})

    venv = AdapterCopies(Respawn, 2)
    venv.reset(seed=0)
    for t in range(1, 100):
        res = venv.step(np.zeros((2, 2), np.int64))
        gone = 70 <= t < 90
        assert (res.alive[:, 1] == (not gone)).all() and (res.acting[:, 1] == (not gone)).all(), t
        assert (res.obs[:, 1, 0] == (0.0 if gone else t)).all() and (res.obs[:, 0, 0] == t).all(), t
        assert (res.rewards[:, 1] == (0.0 if t > 70 and gone else 1.0)).all(), t


def test_a_masked_dict_observation_gives_the_policy_every_key_but_the_mask():
    """{cue, pos, action_mask} (no 'observation' key): the policy reads cue and pos, flattened in
    Gymnasium's sorted key order; the keys other than 'observation' were dropped, and without an
    'observation' key every worker failed on a zero-width input. A mask alone is refused by name."""
    from hdppo.envs.errors import EnvError
    from hdppo.envs.vector import make_vector_env

    venv = make_vector_env("pettingzoo", None, "scripted_envs:keyed_masked", {}, None, 2, seed=0)
    first = venv.reset(seed=0)
    assert venv.obs_dim == 3 and venv.mask_dim == 3
    np.testing.assert_array_equal(first.obs[0, 0], [0.0, 10.0, 20.0])      # cue, then pos
    np.testing.assert_array_equal(first.masks[0, 0], [1, 1, 0])
    step = venv.step(np.zeros((2, 2, 1), np.int64))
    np.testing.assert_array_equal(step.obs[1, 1], [1.0, 10.0, 20.0])
    venv.close()
    with pytest.raises(EnvError, match="holding only its action_mask"):
        make_vector_env("pettingzoo", None, "scripted_envs:keyed_masked", {"keys": ("action_mask",)}, None, 1,
                        seed=0).reset(seed=0)
