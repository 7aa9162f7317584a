import re

import numpy as np
import pytest
import yaml

from conftest import ROOT, tiny_config
from hdppo.envs.check import check_target
from hdppo.platform.errors import EnvError


def test_check_env_passes_builtin_and_config():
    assert "OK" in check_target("CartPole-v1", steps=50)
    assert "Pendulum-v1" in check_target("Pendulum-v1", steps=50)
    from hdppo.platform.config import load_config

    assert "OK" in check_target(load_config(ROOT / "configs" / "default.yaml").env, steps=20)


def test_check_env_cli_loads_a_config_file(capsys):
    from hdppo.platform.cli import main

    assert main(["check-env", str(ROOT / "configs" / "default.yaml"), "--steps", "20"]) == 0
    assert "OK" in capsys.readouterr().out


def test_check_env_of_a_config_builds_and_plays_its_hierarchy(capsys, tmp_path):
    """check-env CONFIG checked the env section alone: a bottom layer naming an agent the env lacks,
    or a reward reading info keys the env never writes, passed and failed only in training."""
    from hdppo.platform.cli import main

    assert main(["check-env", str(ROOT / "configs" / "corridor_hierarchy.yaml"), "--steps", "20"]) == 0
    out = capsys.readouterr().out
    assert "hierarchy of corridor_hierarchy: 2 layer(s) over the env, 20 steps of" in out, out
    assert re.search(r"strategy \(train\): 1 lane\(s\), acts every 4 env step\(s\), input \d+, commands "
                     r"Discrete\(2\), \d+ decisions recorded", out), out
    cfg = yaml.safe_load((ROOT / "configs" / "corridor_hierarchy.yaml").read_text())
    cfg["layers"][-1]["agents"] = ["walker_9"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check-env", str(path), "--steps", "20"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "'walker_9' is not an agent of env" in err and "agents" in err, err
    cfg["layers"][-1]["agents"] = "all"
    cfg["layers"][-1]["reward"]["intrinsic_fn"] = "skirmish_follow_order"   # reads skirmish's info keys
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check-env", str(path), "--steps", "20"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "skirmish_follow_order" in err, err


def test_check_env_names_what_is_broken():
    with pytest.raises(EnvError, match=r"is not in its observation_space .*: shape \(3,\), the space's is \(1,\)"):
        check_target("scripted_envs:countdown_wrong_shape", steps=10)
    with pytest.raises(EnvError, match="non-finite"):
        check_target("scripted_envs:countdown_nan", steps=10)
    # Gymnasium's checker says only "not within the observation space"; the report says why.
    with pytest.raises(EnvError, match=r"fails check_env: .* Its first observation: dtype float64, the space's is "
                                       r"float32 \(cast it, e.g. obs.astype\(np.float32\)\)"):
        check_target("scripted_envs:countdown_float64", steps=10)


def test_check_env_checks_a_batched_env_against_the_contract(capsys):
    from hdppo.platform.cli import main
    from hdppo.platform.config import EnvConfig

    assert main(["check-env", str(ROOT / "configs" / "skirmish_flat.yaml"), "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "OK (vector, 2 copies)" in out and "action masks of" in out
    ok = EnvConfig(type="vector", entry_point="scripted_envs:batched_countdown", kwargs={"length": 3})
    assert "3 episodes ended" not in check_target(ok, steps=9) and "6 episodes ended" in check_target(ok, steps=9)
    bad = EnvConfig(type="vector", entry_point="scripted_envs:batched_countdown_flat_rewards")
    with pytest.raises(EnvError, match=r"step\(\) #1 rewards has shape \(2,\), expected \(2, 1\)"):
        check_target(bad, steps=5)


def test_check_env_runs_pettingzoo_checkers_and_a_rollout():
    report = check_target("hdppo.envs.builtin.corridor:parallel_env", steps=50)
    assert "parallel_api_test:" in report and "OK" in report
    report = check_target("pettingzoo.classic.tictactoe_v3:env", steps=50)  # AEC, action masks
    assert "api_test:" in report and "episodes ended" in report


def test_check_env_catches_a_broken_pettingzoo_env():
    with pytest.raises(EnvError, match="corridor_broken"):
        check_target("scripted_envs:corridor_broken", steps=20)


@pytest.mark.parametrize("target", ["hdppo.envs.builtin.latency:make", "hdppo.envs.builtin.ant_navigate:make"])
def test_builtin_gymnasium_envs_pass_the_checker(target):
    assert "OK" in check_target(target, steps=5)


def test_why_an_observation_is_outside_its_space_is_said():
    import gymnasium as gym
    import numpy as np

    from hdppo.envs.vector import why_outside

    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    assert why_outside(box, np.array([0.0, 3.0, 0.5], np.float32)) == \
        "1 value(s) outside the bounds, the first at index [1]: np.float32(3.0) not in [np.float32(-1.0), np.float32(1.0)]"
    assert why_outside(box, np.zeros(3, np.float64)).startswith("dtype float64, the space's is float32")
    assert why_outside(box, np.zeros(2, np.float32)) == "shape (2,), the space's is (3,)"
    assert why_outside(box, [0.0, 0.0, 0.0]) == "a list, not a numpy array"
    assert why_outside(box, np.zeros(3, np.float32)) == ""
    masked = gym.spaces.Dict({"observation": box, "action_mask": gym.spaces.Box(0, 1, (2,), np.int8)})
    assert why_outside(masked, {"observation": np.full(3, 2.0, np.float32), "action_mask": np.ones(2, np.int8)}) \
        .startswith("['observation']: 3 value(s) outside the bounds")
    assert why_outside(masked, {"observation": np.zeros(3, np.float32)}) == "key 'action_mask' is missing"
    assert why_outside(gym.spaces.Discrete(3), 5) == "5 is not one of 0..2"


def test_check_env_reports_the_envs_warnings_once_each_and_not_the_checkers_own(capsys):
    """PettingZoo's api_test prints its progress and warns about its own deprecated helpers: the
    report has neither, and a warning about the env comes once with its count."""
    from hdppo.platform.cli import main

    assert main(["check-env", "pettingzoo.classic.tictactoe_v3:env", "--steps", "20"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("env 'pettingzoo.classic.tictactoe_v3:env': OK")   # no "Starting API test" before it
    assert "old environment creation API" not in out and "passed with 2 warning(s)" in out
    assert out.count("warning: Observation numpy array is all zeros. (x2)") == 1


def test_check_env_plays_a_masked_gymnasium_env_as_training_does():
    """An ``{observation, action_mask}`` Gymnasium env: the report gives the policy's input size
    without the mask, and the rollout plays legal actions only (this env raises on any other)."""
    out = check_target("scripted_envs:strict_masked", steps=40)
    assert "the policy sees 2 values; the action_mask (3) masks its logits" in out
    assert "16 episodes ended" in out   # 2 copies x 40 steps, 5 steps an episode


def test_check_env_plays_a_masked_multidiscrete_env_component_by_component():
    """A MultiDiscrete action whose mask is the components' logits side by side (the fab's lot
    and release level): the rollout draws a legal index per component; it crashed on one index."""
    out = check_target("scripted_envs:strict_masked_multi", steps=40)
    assert "the action_mask (5) masks its logits" in out
    assert "16 episodes ended" in out   # every step legal: 2 copies x 40 steps, 5 steps an episode


def test_check_env_says_when_an_agent_must_act_with_every_action_masked():
    """An all-zero action_mask crashed the rollout with numpy's 'a cannot be empty'; training
    then picks an illegal action. The check names the agent and the step."""
    out = check_target("scripted_envs:keyed_masked", steps=20)
    assert "OK" in out
    with pytest.raises(EnvError, match=r"agent 'a_0' is asked to act at step 1, but its action_mask allows no action"):
        check_target("scripted_envs:keyed_masked_dead", steps=20)


def test_check_env_takes_a_module_env_id_and_says_a_batched_factory_needs_a_config():
    """'module:EnvId' is a Gymnasium id there as in a config (it was read as module:factory), and a
    batched factory named alone is told to come through a config (it failed on num_envs)."""
    assert "OK" in check_target("gymnasium.envs.classic_control:CartPole-v1", steps=10)
    with pytest.raises(EnvError, match="batched factory .* through a config whose env.type is vector"):
        check_target("hdppo.envs.builtin.skirmish:make_vector")


def test_a_built_in_env_refusing_a_value_points_at_env_kwargs():
    """A built-in env's ValueError on a kwarg is the config's to fix, not 'Fix the factory'."""
    from hdppo.envs.loading import call_factory, resolve_entry_point

    name = "hdppo.envs.builtin.skirmish:parallel_env"
    with pytest.raises(EnvError) as err:
        call_factory(resolve_entry_point(name), name, {"opponent": "focus_kyte"})
    assert "Change env.kwargs in the config" in str(err.value) and "Fix the factory" not in str(err.value)
    assert "focus_kite" in str(err.value)


@pytest.mark.parametrize("entry,match", [
    ("scripted_envs:batched_countdown_flat_rewards", r"step\(\) #1 rewards has shape \(2,\), expected \(2, 1\)"),
    ("scripted_envs:batched_countdown_no_episodes", r"set episode_end for copies \[0, 1\] but VecStep.episodes lists 0"),
    # What the shapes do not show: each of these trained on without a word.
    ("end_unflagged", r"step\(\) #7: slot 0 \('agent_0'\) of copy 0 was alive when its copy's episode ended, but is "
                      r"neither terminated nor truncated"),
    ("out_of_bounds", r"step\(\) #2: agent 'agent_0' of copy 0: observation value 0 is 20, outside its "
                      r"observation_space's bounds \[0, 10\]"),  # 10 t: step 1's 10 is on the bound
    ("acting_dead", r"reset\(\): slot 0 \('agent_0'\) of copy 0 is acting but not alive"),
    ("all_masked", r"reset\(\): slot 0 \('agent_0'\) of copy 0 is acting but its mask allows no action"),
    ("dead_paid", r"step\(\) #4: slot 0 \('agent_0'\) of copy 0 was not alive before the step but is given a reward")])
def test_training_checks_a_batched_envs_arrays_as_check_env_does(entry, match, tmp_path, capsys):
    """`type: vector` envs were unchecked in training: rewards [N] failed every worker with a numpy
    broadcast error, and an env that never filled VecStep.episodes made the final evaluation wait
    an hour for episodes that never came. A copy ending with no agent flagged trained the time
    limit as a terminal state, observations outside the declared bounds, acting dead slots or
    all-masked ones trained on, and rewards to agents already gone were dropped."""
    from hdppo.platform.cli import main
    from hdppo.platform.config import EnvConfig

    kwargs = {}
    if ":" not in entry:
        entry, kwargs = "scripted_envs:batched_countdown_broken", {"how": entry}
    with pytest.raises(EnvError, match=match):
        check_target(EnvConfig(type="vector", entry_point=entry, kwargs=kwargs))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_config(env={"type": "vector", "entry_point": entry, "kwargs": kwargs})))
    assert main(["train", str(path), "--set", "ray.backend=local", "--run-dir", str(tmp_path / "r")]) == 2
    assert re.search(match, " ".join(capsys.readouterr().err.split()))


def test_a_gymnasium_vector_factory_that_ignores_num_envs_is_refused(tmp_path, monkeypatch):
    """It trained on 4 copies where 8 were asked, and check-env said OK (4 copies) after asking for 2."""
    from hdppo.platform.config import EnvConfig

    (tmp_path / "fixed4.py").write_text(
        "import gymnasium as gym\n"
        "def make(num_envs):\n"
        "    return gym.vector.SyncVectorEnv([lambda: gym.make('CartPole-v1')] * 4,\n"
        "                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvError, match=r"asked for 2 copies, the factory made 4"):
        check_target(EnvConfig(type="gymnasium_vector", entry_point="fixed4:make"))


@pytest.mark.parametrize("env_type, kwargs, words", [
    ("pettingzoo", {"broken": "zombie"}, "'a_1' was flagged terminated or truncated but is still in env.agents"),
    ("pettingzoo", {"broken": "vanish"}, "'a_1' left env.agents without being flagged terminated or truncated"),
    ("pettingzoo", {"broken": "intruder"}, "agent 'a_9' appeared that was not among its agents at the first reset"),
    ("pettingzoo", {"broken": "wide"}, "the action_mask of 'a_0' has 4 entries but its action space Discrete(3) has 3"),
    ("gymnasium", {"empty_mask_at": 1}, "is acting but its mask allows no action"),
])
def test_dict_keyed_envs_breaking_the_contract_stop_training_with_the_fix(env_type, kwargs, words):
    """Through the dict adapters (PettingZoo, RLlib, a masked Gymnasium env) these trained without a
    word: an agent ended but kept acting, an agent gone with no flag learned as a terminal state,
    an all-zero mask sampled an illegal action, a mask of the wrong width crashed in numpy, an
    unknown agent was a bare KeyError. Training's env stops on each with the fix."""
    from hdppo.envs.vector import make_vector_env

    entry = "scripted_envs:keyed_masked" if env_type == "pettingzoo" else "scripted_envs:strict_masked"
    with pytest.raises(EnvError) as info:
        venv = make_vector_env(env_type, None, entry, kwargs, None, 2)
        now = venv.reset(seed=0)
        for _ in range(3):
            legal = now.masks[..., :3].argmax(-1) if now.masks is not None else np.zeros(now.alive.shape, np.int64)
            now = venv.step(legal)
    assert words in str(info.value), info.value
    if env_type == "gymnasium":   # check-env says so too (it drew action 0, as if legal)
        with pytest.raises(EnvError, match="is acting but its mask allows no action"):
            check_target("scripted_envs:strict_masked_empty", steps=10)


def test_a_pettingzoo_observation_outside_its_space_is_explained():
    """PettingZoo's checker says only "Out of bounds observation"; the report says which agent,
    which key and why, as training says it."""
    with pytest.raises(EnvError, match=r"agent 'a_0' observation at step 0 is not in its space .*\['cue'\]: dtype "
                                       r"float64, the space's is float32 \(cast it"):
        check_target("scripted_envs:keyed_masked_float64", steps=10)
    with pytest.raises(EnvError, match=r"Its first observation: agent 'a_0', \['cue'\]: dtype float64, the space's "
                                       r"is float32 \(cast it"):
        check_target("scripted_envs:keyed_masked_float64_aec", steps=10)
