"""Named command-following rewards, registered by the env modules that own them."""
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from hdppo.envs.rewards import RewardFn, register_reward, resolve_reward
from hdppo.hierarchies.intrinsic import resolve
from hdppo.platform.errors import ConfigError


@register_reward("test_progress", vectorized=True)
def progress(command, obs, next_obs, **_):
    return (next_obs - obs)[:, 0] * command[:, 0]


def scalar_reward(command, info, **_):
    return float(info.get("x", 0.0))


def corridor_train(steps: int = 512) -> list[str]:
    """``hdppo train`` of the corridor hierarchy, small and local, into ./r (no final evaluation)."""
    return ["train", str(ROOT / "configs" / "corridor_hierarchy.yaml"), "--set", "ray.backend=local",
            "--set", f"train.total_env_steps={steps}", "--set", "train.eval_episodes=0", "--run-dir", "r"]


def test_builtin_names_resolve_without_importing_their_module_first_and_corridor_needs_no_mujoco():
    code = ("import sys; from hdppo.hierarchies.intrinsic import resolve; r = resolve('corridor_follow'); "
            "assert r.fn.__module__ == 'hdppo.envs.builtin.corridor' and r.vectorized; "
            "assert 'mujoco' not in sys.modules and 'hdppo.envs.builtin.ant_navigate' not in sys.modules, 'imported'; "
            "r = resolve('ant_heading_frame_direction'); assert r.fn.__module__ == 'hdppo.envs.builtin.ant_navigate'; "
            "assert not r.vectorized; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_builtin_table_names_what_each_module_registers():
    import importlib

    from hdppo.envs import rewards
    from hdppo.envs.builtin import REWARDS

    for name, module in REWARDS.items():
        importlib.import_module(module)
        assert rewards._REGISTRY[name].fn.__module__ == module, name


def test_paths_and_the_vectorized_flag():
    r = resolve("test_rewards:scalar_reward")
    assert isinstance(r, RewardFn) and not r.vectorized and r(command=None, info={"x": 2.0}) == 2.0
    v = resolve("test_rewards:progress")  # registered vectorised: the flag holds by path too
    assert v.vectorized and v is not None
    out = v(command=np.array([[1.0], [2.0]]), obs=np.zeros((2, 3)), next_obs=np.ones((2, 3)), action=None, info=[{}, {}])
    assert out.tolist() == [1.0, 2.0]
    assert resolve_reward("test_progress").fn is progress


def test_corridor_follow_vectorised_matches_its_scalar_form():
    r = resolve("corridor_follow")
    commands = np.eye(2)[[0, 1, 1, 0]]
    infos = [{"moved": -1}, {"moved": 1}, {"moved": 0}, {"moved": 1}]
    batch = r(command=commands, obs=None, next_obs=None, action=None, info=infos)
    assert batch.dtype == np.float32 and batch.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert [r(command=c, info=i) for c, i in zip(commands, infos)] == batch.tolist()


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(ConfigError, match=r"'corridor' is not a registered reward; registered: .*ant_heading_frame_direction.*corridor_follow"):
        resolve("corridor")
    with pytest.raises(ConfigError, match="cannot import 'nope' from 'test_rewards'"):
        resolve("test_rewards:nope")


def test_a_named_reward_on_a_layer_it_was_not_written_for_is_refused_and_a_zero_one_is_charted(tmp_path, capsys,
                                                                                            monkeypatch):
    """corridor_follow reads one agent's info and a left/right command: on an upper layer, or under
    a 3-way command, it paid 0 on every step without a word (and its chart, never above 0, was not
    written). Now the config is refused naming the field; a reward that pays 0 is charted as 0."""
    import json

    from hdppo.platform.cli import main

    monkeypatch.chdir(tmp_path)
    base = corridor_train()
    assert main([*base, "--set", "layers.strategy.reward={env: 1.0, intrinsic: 0.1, intrinsic_fn: corridor_follow}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("layers[0] (strategy).reward.intrinsic_fn 'corridor_follow' does not fit layer 'strategy': it reads one "
            "agent's info per lane") in err and "none (it is the top layer)" in err
    assert main([*base, "--set", "layers.strategy.action.n=3"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "it reads a command of 2 choices and this layer receives 3" in err and not (tmp_path / "r").exists()
    # A Box goal of that width is not the one-hot it reads (it was accepted: the widths matched).
    assert main([*base, "--set", "layers.strategy.action={type: box, low: [0, 0], high: [1, 1]}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("it reads a one-hot command of 2 choices and this layer receives a box goal of 2 numbers" in err
            and not (tmp_path / "r").exists()), err
    (tmp_path / "zero_reward.py").write_text("def pay_nothing(**_):\n    return 0.0\n")
    assert main([*base, "--set", "layers.control.reward.intrinsic_fn=zero_reward:pay_nothing"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    charted = [r["value"] for r in rows if r["tag"] == "charts/reward_intrinsic" and r["layer"] == "control"]
    assert charted and all(v == 0.0 for v in charted)


def test_a_named_reward_that_reads_info_keys_the_env_lacks_stops_the_run_naming_them(tmp_path, capsys, monkeypatch):
    """ant_velocity_tracking reads info['x_velocity'] with a default of 0: on the corridor it paid
    exp(-|command|^2), a constant, on every step without a word. Now the run stops at the first
    info, naming the reward, the missing keys, the keys the env does have and the reward's module."""
    from hdppo.platform.cli import main

    monkeypatch.chdir(tmp_path)
    base = corridor_train()
    assert main([*base, "--set", "layers.control.reward.intrinsic_fn=ant_velocity_tracking"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("layers[1] (control).reward.intrinsic_fn 'ant_velocity_tracking' reads the info keys x_velocity, "
            "y_velocity, which this env's agent info does not have (it has: moved)") in err
    assert "hdppo.envs.builtin.ant_navigate" in err and not (tmp_path / "r").exists()
    assert resolve("corridor_follow").info_keys == ("moved",) and resolve("hexapod_velocity_tracking").info_keys


def test_info_keys_are_checked_against_dicts_or_columns_and_wait_for_a_first_info():
    from hdppo.envs.rewards import missing_info_keys

    fn = RewardFn(scalar_reward, name="r", info_keys=("x", "y"))
    assert missing_info_keys(fn, [{}, {}]) is None                  # no agent has an info yet: check later
    assert missing_info_keys(fn, [{}, {"x": 1, "z": 0}]) == ["y"]
    assert missing_info_keys(fn, [{"x": 1}], columns={"y": np.zeros(2)}) == []
    assert missing_info_keys(RewardFn(scalar_reward), [{}]) == []  # a reward that declares no keys is not checked


def test_a_layer_paid_for_a_command_it_does_not_observe_is_given_that_command(tmp_path, capsys, monkeypatch):
    """observation.command: false with a command-following reward is allowed (the layer is paid for
    following an order it does not see), but the reward was handed an empty command: corridor_follow
    stopped the run with "argmax of an empty sequence", and a module:function reward of one's own
    trained on a command that never came."""
    from hdppo.platform import metrics as M
    from hdppo.platform.cli import main

    monkeypatch.chdir(tmp_path)
    assert main([*corridor_train(steps=1024), "--set", "layers.control.observation.command=false"]) == 0, \
        capsys.readouterr().err
    paid = [r["value"] for r in M.read_jsonl(tmp_path / "r" / "metrics.jsonl")
            if r["layer"] == "control" and r["tag"] == M.CHART_REWARD_INTRINSIC]
    assert paid and 0.0 < max(paid) <= 1.0, paid   # steps the commanded way (a random walker makes some)
