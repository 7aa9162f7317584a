"""The engine-array MAgent2 env against the PettingZoo dict path it replaces, step for step."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("magent2")

from hdppo.envs.builtin.magent import attack_nearest  # noqa: E402
from hdppo.envs.builtin.magent_vector import MAgentVector  # noqa: E402
from hdppo.envs.check import check_target  # noqa: E402
from hdppo.platform.config import validate  # noqa: E402
from hdppo.envs.errors import EnvError  # noqa: E402
from hdppo.envs.vector import make_vector_env  # noqa: E402


def _pair(env: str, kwargs: dict, n: int = 2, seed: int = 5):
    native = MAgentVector(n, None, env=env, **kwargs)
    dicts = make_vector_env("pettingzoo", f"magent2.environments.{env}", None, dict(kwargs), None, n)
    for c in dicts.copies:  # magent2's reset counts the teams before placing them (see the module docstring)
        c.env.reset = _counted(c.env)
    return native, dicts, native.reset(seed), dicts.reset(seed)


def y_alive(venv, i: int, agent: str) -> bool:
    return bool(venv._alive[i, venv.slot[agent]])


def scripted_actions(dicts, rng) -> np.ndarray:
    """``attack_nearest`` for every live agent of the dict path's copies, ``[copies, agents]``."""
    actions = np.zeros((dicts.num_envs, len(dicts.agents)), np.int64)
    for i in range(dicts.num_envs):
        alive = {a: o for a, o in dicts.raw_obs(i).items() if y_alive(dicts, i, a)}
        for a, act in attack_nearest(alive, dicts.copy_env(i), rng).items():
            actions[i, dicts.slot[a]] = act
    return actions


def _counted(env):
    reset = env.reset

    def fixed(*args, **kwargs):
        out = reset(*args, **kwargs)
        env.team_sizes = [env.env.get_num(h) for h in env.handles]
        return out
    return fixed


@pytest.mark.parametrize("env,kwargs", [("battle_v4", {"map_size": 12, "max_cycles": 40}),
                                        ("battle_v4", {"map_size": 15, "max_cycles": 30, "extra_features": True}),
                                        ("combined_arms_v6", {"map_size": 16, "max_cycles": 30})],
                         ids=["battle", "extra_features", "combined_arms"])
def test_native_steps_agree_with_the_pettingzoo_path(env, kwargs, monkeypatch):
    from hdppo.envs.builtin import magent_vector

    direct = []  # teams whose views the engine wrote straight into the observation rows
    into = magent_vector._Engine.views_into_slots
    monkeypatch.setattr(magent_vector._Engine, "views_into_slots",
                        lambda self, t, first: (direct.append(first), into(self, t, first))[1])
    native, dicts, a, b = _pair(env, kwargs)
    assert native.agents == dicts.agents and native.obs_dim == dicts.obs_dim
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.alive, b.alive)
    rng = np.random.default_rng(0)
    deaths = ends = 0
    for t in range(100):
        # The scripted attacker of hdppo.envs.builtin.magent on every unit, so that units die
        # within the test's steps; read from the dict path's observations.
        actions = scripted_actions(dicts, rng)
        x, y = native.step(actions), dicts.step(actions)
        for field in ("obs", "alive", "acting", "masks", "rewards", "terminated", "truncated", "episode_end"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=f"{field} at step {t}")
        ended = x.terminated | x.truncated | x.episode_end[:, None]
        np.testing.assert_array_equal(x.final_obs[ended], y.final_obs[ended], err_msg=f"final_obs at step {t}")
        assert [(e[1], e[2]) for e in x.episodes] == [(e[1], e[2]) for e in y.episodes]
        np.testing.assert_allclose([e[0] for e in x.episodes], [e[0] for e in y.episodes], rtol=1e-6)
        deaths += int(x.terminated.sum())
        ends += int(x.episode_end.sum())
    assert deaths > 0 and ends >= 2  # the test saw units die (or a game won) and copies reset
    if not kwargs.get("extra_features"):
        # Views written in place, from the teams' first slots and, after deaths, from later ones.
        assert len(direct) > 100 and len(set(direct)) > 2, sorted(set(direct))
    else:  # views with features appended always go through the buffer
        assert not direct


@pytest.mark.parametrize("policy", ["hdppo.envs.builtin.magent:attack_nearest", "random"])
def test_opponents_played_inside_agree_with_env_opponents(policy):
    """kwargs.opponents against the dict path's env.opponents (with magent:standing for the
    counts): the same learners, observations, rewards, episode ends and outcomes. Random
    opponents draw from different generators, so for them only the shapes and outcomes are checked."""
    kwargs = {"map_size": 16, "max_cycles": 30}
    opp = {"agents": "blue", "policy": policy}
    native = MAgentVector(2, None, env="combined_arms_v6", opponents=opp, **kwargs)
    dicts = make_vector_env("pettingzoo", "magent2.environments.combined_arms_v6", None, dict(kwargs), None, 2,
                            opponents=dict(opp, alive="hdppo.envs.builtin.magent:standing"))
    for c in dicts.copies:
        c.env.reset = _counted(c.env)
    assert native.agents == dicts.agents and all(a.startswith("red") for a in native.agents)
    assert set(native.episode_metrics) >= {"learners_alive", "opponents_alive", "win"}
    a, b = native.reset(5), dicts.reset(5)
    np.testing.assert_array_equal(a.obs, b.obs)
    same = policy != "random"
    rng = np.random.default_rng(0)
    outcomes = []
    for t in range(120):
        actions = scripted_actions(dicts, rng)
        if not same:  # random opponents: drive each env with its own learners' actions
            actions = rng.integers(0, 9, actions.shape)
        x, y = native.step(actions), dicts.step(actions)
        assert x.obs.shape == y.obs.shape and x.masks.shape == y.masks.shape
        if same:
            for field in ("obs", "alive", "masks", "rewards", "terminated", "truncated", "episode_end"):
                np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=f"{field} at step {t}")
            np.testing.assert_allclose([e[0] for e in x.episodes], [e[0] for e in y.episodes], rtol=1e-6)
        for _, _, ci in x.episodes:
            got = x.infos[ci][native.agents[0]]
            outcomes.append(got)
            assert got["win"] == float(got["learners_alive"] > got["opponents_alive"])
            if same:
                want = y.infos[ci][native.agents[0]]
                assert (got["learners_alive"], got["opponents_alive"]) == (want["learners_alive"], want["opponents_alive"])
    assert len(outcomes) >= 2


def test_opponents_kwarg_errors_name_the_field():
    with pytest.raises(EnvError, match=r"env.kwargs.opponents.agents: the prefix 'green' matches no agent"):
        MAgentVector(1, None, env="combined_arms_v6", map_size=16, opponents={"agents": "green"})
    with pytest.raises(EnvError, match=r"env.kwargs.opponents.*got \['agent', 'policy'\]"):
        MAgentVector(1, None, env="combined_arms_v6", map_size=16, opponents={"agent": "blue", "policy": "random"})


def test_state_and_a_training_config(tmp_path):
    native = MAgentVector(2, 0, env="battle_v4", map_size=12)
    native.want_state = True
    first = native.reset()
    assert first.state.shape == (2, native.state_dim)
    cfg = {"name": "native-battle", "env": {"type": "vector", "entry_point": "hdppo.envs.builtin.magent_vector:make_vector",
                                            "kwargs": {"env": "battle_v4", "map_size": 12, "max_cycles": 20}},
           "layers": [{"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 1},
                       "dppo": {"num_workers": 1, "num_envs_per_worker": 2, "train_batch_size": 256}}],
           "train": {"total_env_steps": 64, "eval_episodes": 1}, "ray": {"backend": "local"}}
    report = check_target(validate(cfg).env, steps=50)
    assert "magent2.battle_v4" in report or "vector" in report


def test_an_unknown_env_is_a_clear_error():
    with pytest.raises(EnvError, match="battle_v4"):
        MAgentVector(1, None, env="no_such_env_v0")


def test_the_battle_preset_trains_a_few_updates(tmp_path):
    """configs/battle.yaml (self-play through the engine's arrays, pipelined, bf16 learner) at a
    small batch: it trains, and every unit of both teams is a learner of the one layer."""
    from hdppo.platform.config import load_config
    from hdppo.platform.trainer import Trainer

    cfg = load_config("battle", ["ray.backend=local", "train.total_env_steps=200", "train.eval_episodes=0",
                                 "train.checkpoint_every=100", "env.kwargs.map_size=12", "env.kwargs.max_cycles=20",
                                 "layers.0.dppo.train_batch_size=480", "layers.0.dppo.num_envs_per_worker=2",
                                 "layers.0.dppo.num_workers=1", "layers.0.ppo.minibatch_size=240"])
    assert cfg.layers[0].dppo.pipeline and cfg.learner_of("control").precision == "bf16"
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["updates"] >= 2 and summary["env_steps"] >= 200


def test_a_video_of_the_native_env_draws_its_copies(tmp_path):
    """`hdppo eval --video` of the battle preset (env.type vector) was refused: the native env had
    no render_copy. Its copies are now drawn by MAgent2's own renderer."""
    pytest.importorskip("pygame")
    from PIL import Image

    from hdppo.platform.trainer import Trainer
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config
    from hdppo.platform.video import record_video

    cfg = load_config("battle", ["ray.backend=local", "train.total_env_steps=400", "env.kwargs.max_cycles=12",
                                 "layers.0.dppo.num_workers=1", "layers.0.dppo.num_envs_per_worker=1",
                                 "layers.0.dppo.train_batch_size=256", "layers.0.dppo.pipeline=false",
                                 "layers.0.ppo.minibatch_size=128", "layers.0.ppo.num_epochs=1",
                                 "layers.0.learner.precision=fp32"])
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))
    rec = record_video(cfg, states, tmp_path / "battle.gif", 1)
    assert rec.lengths == [12] and rec.frames >= 12
    gif = Image.open(tmp_path / "battle.gif")
    # (Pillow merges identical consecutive frames, adding up their durations: MAgent2's units do
    # not move on every step.)
    assert gif.n_frames >= 2 and min(gif.size) >= 160
    assert len({bytes(np.asarray(f.convert("RGB"))) for f in _frames(gif)}) > 1  # the units move
    venv = MAgentVector(2, 0, env="battle_v4", map_size=20)
    venv.reset(0)
    a, b = venv.render_copy(0), venv.render_copy(1)
    assert a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3 and a.shape == b.shape
    venv.close()


def _frames(gif):
    from PIL import ImageSequence

    return [f.copy() for f in ImageSequence.Iterator(gif)]
