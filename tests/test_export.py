"""`hdppo export`: the exported ONNX and TorchScript policies act as the trained policy does.

Each case trains a tiny run for two updates (real checkpoints), steps the sampler with the
checkpoint's policies deterministically (as `hdppo eval` builds them) and records, for 1000
decisions of the exported layer, the raw policy input, the action mask and the action the env
(or the layer below) received. The exported files must give the same actions on those inputs:
equal for discrete spaces, to float32 rounding for Box ones.
"""
import json

import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.hierarchies.engine import Sampler
from hdppo.hierarchies.spec import probe_env
from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
from hdppo.platform.cli import main
from hdppo.platform.config import load_config, validate
from hdppo.platform.evaluation import frozen_policy
from hdppo.platform.trainer import Trainer

STATES = 1000
TRAIN = {"total_env_steps": 512, "eval_episodes": 0, "checkpoint_every": 1}
CORRIDOR = {"type": "pettingzoo", "entry_point": "hdppo.envs.builtin.corridor:parallel_env",
            "kwargs": {"num_agents": 2, "length": 9, "max_steps": 24}}


def _two_layers():
    return tiny_config(env=CORRIDOR, train=TRAIN, layers=[
        {"name": "strategy", "period": 4, "observation": {"source": "state"}, "action": {"type": "discrete", "n": 2},
         "ppo": {"minibatch_size": 64, "num_epochs": 2}, "dppo": {"num_workers": 1, "train_batch_size": 128}},
        {"name": "control", "observation": {"agent_id": True},
         "reward": {"env": 1.0, "intrinsic": 0.1, "intrinsic_fn": "corridor_follow"},
         "ppo": {"minibatch_size": 64, "num_epochs": 2}, "dppo": {"num_workers": 1, "train_batch_size": 256}}])


CASES = {  # name -> (config, layers to export)
    "cartpole": (tiny_config(train=TRAIN), ["control"]),
    "pendulum": (tiny_config(env={"id": "Pendulum-v1"}, train=TRAIN), ["control"]),
    "tictactoe": (tiny_config(env={"type": "pettingzoo", "id": "pettingzoo.classic.tictactoe_v3"}, train=TRAIN,
                              layers=[{"name": "control", "ppo": {"minibatch_size": 32, "num_epochs": 2}}]), ["control"]),
    "corridor_two_layers": (_two_layers(), ["strategy", "control"]),
    "jobshop_set": (tiny_config(env={"entry_point": "hdppo.envs.builtin.jobshop:make_env",
                                     "kwargs": {"size": "5x4", "observation": "items", "job_order": "mwkr"}},
                                train=TRAIN, layers=[{"name": "control", "policy": {"encoder": "set", "set_features": 14},
                                                      "ppo": {"minibatch_size": 64, "num_epochs": 2}}]), ["control"]),
    "jobshop_set_attention": (tiny_config(env={"entry_point": "hdppo.envs.builtin.jobshop:make_env",
                                               "kwargs": {"size": "5x4", "observation": "items", "job_order": "mwkr"}},
                                          train=TRAIN, layers=[{"name": "control", "policy": {
                                              "encoder": "set", "set_features": 14, "set_attention": 1, "hidden": [16, 16]},
                                              "ppo": {"minibatch_size": 64, "num_epochs": 2}}]), ["control"]),
    # An image policy (two convs: TorchScript could not script the slice convs[:-1] the forward used).
    "lit_side_cnn": (tiny_config(env={"entry_point": "scripted_envs:lit_side"}, train=TRAIN, layers=[
        {"name": "control", "policy": {"encoder": "cnn", "cnn_channels": [4, 4], "cnn_features": 16},
         "ppo": {"minibatch_size": 64, "num_epochs": 2}}]), ["control"]),
}
MASKED = ("tictactoe", "jobshop_set", "jobshop_set_attention")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each case trained once: name -> run dir."""
    out = {}
    for name, (cfg, _) in CASES.items():
        run_dir = tmp_path_factory.mktemp("export") / name
        Trainer(validate(cfg), run_dir, quiet=True).train()
        out[name] = run_dir
    return out


class _Recording:
    """An observation normalizer that remembers the raw input of its last call."""

    def __init__(self, inner):
        self.inner, self.raw = inner, None

    def __call__(self, obs, out=None):
        self.raw = np.array(obs, np.float32)
        return self.inner(obs, out=out)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def record(run_dir, layer: str, n: int = STATES):
    """``n`` decisions of ``layer`` from deterministic episodes of the run's last checkpoint, as the
    evaluation builds its policies: (raw inputs, masks or None, env-format actions), and the policy
    and normalizer that chose them."""
    cfg = load_config(run_dir / "config.yaml")
    states = learner_states(load_checkpoint(latest_checkpoint(run_dir)))
    venv, first, specs = probe_env(cfg, cfg.train.seed + 17, 4)
    policies, norms = {}, {}
    for s in specs:
        policies[s.name], norms[s.name] = frozen_policy(cfg, s, states[s.name])
    norm = norms[layer] = _Recording(norms[layer])
    policy, act = policies[layer], policies[layer].act
    raws, masks, actions = [], [], []

    def recording_act(obs, deterministic=False, mask=None, critic_obs=None, with_value=True):
        out = act(obs, deterministic, mask, critic_obs, with_value)
        assert np.array_equal(norm.inner(norm.raw), np.asarray(obs))  # the recorded input is this decision's (numpy or torch)
        raws.append(norm.raw)
        masks.append(None if mask is None else np.array(mask))
        actions.append(policy.head.to_env_array(out[0]))
        return out

    policy.act = recording_act
    sampler = Sampler(specs, venv, policies, norms, deterministic=True, first=first)
    try:
        while sum(len(r) for r in raws) < n:
            sampler.step()
    finally:
        sampler.close()
        del policy.act  # the class's own act again
    mask = None if masks[0] is None else np.concatenate(masks)[:n]
    return np.concatenate(raws)[:n], mask, np.concatenate(actions)[:n], policy, norm.inner


def _export(run_dir, layer, fmt, out):
    assert main(["export", str(run_dir), "--layer", layer, "--format", fmt, "--out", str(out)]) == 0
    return json.loads(out.with_name(out.name + ".json").read_text())


def _same(got: np.ndarray, want: np.ndarray, box: bool) -> None:
    assert got.shape == want.shape and got.dtype == (np.float32 if box else np.int64)
    if box:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", list(CASES))
def test_exported_policies_act_as_the_trained_one(runs, case, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    run_dir = runs[case]
    for layer in CASES[case][1]:
        raw, mask, want, policy, norm = record(run_dir, layer)
        box = policy.head.kind == "box"
        assert len(raw) == STATES and (mask is not None) == (case in MASKED)
        inputs = {"obs": raw} | ({"action_mask": mask} if mask is not None else {})

        layout = _export(run_dir, layer, "torchscript", tmp_path / f"{layer}.pt")
        scripted = torch.jit.load(str(tmp_path / f"{layer}.pt"))
        # As the README's snippet calls it, outside torch.no_grad(): a Box policy's action needed .detach().
        _same(scripted(*[torch.from_numpy(v) for v in inputs.values()]).numpy(), want, box)

        assert _export(run_dir, layer, "onnx", tmp_path / f"{layer}.onnx")["inputs"] == layout["inputs"]
        session = ort.InferenceSession(str(tmp_path / f"{layer}.onnx"))
        assert [i.name for i in session.get_inputs()] == list(inputs)
        _same(session.run(["action"], inputs)[0], want, box)

        # The layout adds up to the policy input, and says what was folded in.
        fields = layout["inputs"][0]["fields"]
        assert [f["offset"] for f in fields] == list(np.cumsum([0] + [f["size"] for f in fields[:-1]]))
        assert sum(f["size"] for f in fields) == raw.shape[1] == layout["inputs"][0]["shape"][1]
        assert layout["normalization"]["folded_in"] and layout["normalization"]["clip"] == 10.0
        np.testing.assert_allclose(layout["normalization"]["mean"], norm.current.mean, rtol=1e-6)
        assert layout["checkpoint"] == latest_checkpoint(run_dir).name and layout["layer"] == layer
        # The env steps its own group sampled (a hierarchy's groups share the run's total).
        from hdppo.platform.checkpoint import learner_states, load_checkpoint

        state = learner_states(load_checkpoint(latest_checkpoint(run_dir)))[layer]
        assert layout["env_steps"] == state["env_steps"] and "DPPO group" in layout["env_steps_counted"]

        if box:  # far outside the training data: the observation clip and the action bounds both act
            wild = (raw * 50.0).astype(np.float32)
            a, _, _ = policy.act(torch.from_numpy(norm(wild)), deterministic=True)
            far = policy.head.to_env_array(a)
            _same(session.run(["action"], {"obs": wild})[0], far, box)
            _same(scripted(torch.from_numpy(wild)).numpy(), far, box)
            assert layout["outputs"][0]["space"] == {"type": "Box", "shape": [1], "low": [-2.0], "high": [2.0]}


def test_layout_of_a_two_layer_hierarchy(runs, tmp_path):
    run_dir = runs["corridor_two_layers"]
    upper = _export(run_dir, "strategy", "torchscript", tmp_path / "s.pt")
    lower = _export(run_dir, "control", "torchscript", tmp_path / "c.pt")
    assert upper["period"] == 4 and upper["acts_every_env_steps"] == 4 and upper["lanes"] == {"all": "all agents"}
    assert upper["inputs"][0]["fields"][0]["source"] == "state"
    assert upper["outputs"][0]["space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert "layer below (control)" in upper["outputs"][0]["description"]
    env, command, agent_id = lower["inputs"][0]["fields"]
    assert command == {"name": "command", "offset": env["size"], "size": 2, "from_layer": "strategy",
                       "description": "one-hot of the layer above's command", "nvec": [2]}
    assert agent_id["offset"] == env["size"] + 2 and agent_id["order"] == ["walker_0", "walker_1"]
    assert lower["agents"] == ["walker_0", "walker_1"] and lower["period"] == 1


def test_a_frozen_layers_export_names_the_run_its_weights_came_from(runs, tmp_path, capsys):
    """A layer frozen from another run (schedule.checkpoint) holds that run's weights: its JSON
    said only the run it was exported from."""
    source = runs["corridor_two_layers"]
    cfg = _two_layers()
    cfg["layers"][1]["schedule"] = {"mode": "frozen", "checkpoint": str(source)}
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    capsys.readouterr()
    lower = _export(tmp_path / "run", "control", "torchscript", tmp_path / "c.pt")
    assert lower["weights_from"] == {"checkpoint": str(latest_checkpoint(source).resolve()), "frozen": True}
    assert "control is frozen in this run: its weights are those of" in capsys.readouterr().out
    assert "weights_from" not in _export(tmp_path / "run", "strategy", "torchscript", tmp_path / "s.pt")


def test_a_layer_never_updated_is_exported_with_a_warning(tmp_path, capsys):
    """A layer whose start_after gate had not opened by the checkpoint holds its random
    initialisation: the export said nothing and the JSON read like a policy's."""
    cfg = _two_layers()
    cfg["layers"][0]["schedule"] = {"start_after": {"layer": "control", "env_steps": 10 ** 6}}
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    capsys.readouterr()
    upper = _export(tmp_path / "run", "strategy", "torchscript", tmp_path / "s.pt")
    err = " ".join(capsys.readouterr().err.split())
    assert upper["untrained"] is True and upper["version"] == 0
    assert "warning: strategy had not been updated by" in err and "gate on control had not opened" in err, err
    lower = _export(tmp_path / "run", "control", "torchscript", tmp_path / "c.pt")
    assert "untrained" not in lower and lower["version"] > 0 and "warning" not in capsys.readouterr().err


# -- errors: one paragraph naming the fix, exit code 2 -------------------------------------------

def _error(capsys, *argv) -> str:
    assert main(["export", *argv]) == 2
    return " ".join(capsys.readouterr().err.split())


def test_export_errors(runs, tmp_path, capsys, monkeypatch):
    run_dir = runs["corridor_two_layers"]
    assert "no layer 'nope'; its layers are strategy, control" in _error(capsys, str(run_dir), "--layer", "nope")
    assert "name one with --layer" in _error(capsys, str(run_dir))
    assert "not an hdppo run dir (no config.yaml)" in _error(capsys, str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    assert "holds no checkpoint yet" in _error(capsys, str(empty), "--layer", "control")
    with pytest.raises(SystemExit) as exc:  # argparse's own error for a format it does not know
        main(["export", str(run_dir), "--layer", "control", "--format", "tflite"])
    assert exc.value.code == 2 and "invalid choice: 'tflite'" in capsys.readouterr().err

    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    msg = _error(capsys, str(run_dir), "--layer", "control", "--format", "onnx")
    assert "needs the package(s) onnxscript" in msg and "pip install 'hdppo[export]'" in msg
    assert not (run_dir / "export").exists()


def test_export_never_replaces_a_users_file_unasked_and_checks_the_folder(runs, tmp_path, capsys):
    run_dir = runs["cartpole"]
    mine = tmp_path / "mine.pt"
    mine.write_text("the user's own file")
    msg = _error(capsys, str(run_dir), "--format", "torchscript", "--out", str(mine))
    assert "the file exists" in msg and "--overwrite" in msg and mine.read_text() == "the user's own file"
    assert not mine.with_name("mine.pt.json").exists()
    side = tmp_path / "other.pt"
    side.with_name("other.pt.json").write_text("{}")   # the JSON beside the model is the user's too
    assert "other.pt.json: the file exists" in _error(capsys, str(run_dir), "--format", "torchscript", "--out", str(side))
    assert not side.exists()
    (tmp_path / "a_folder.pt").mkdir()
    assert "that is a folder" in _error(capsys, str(run_dir), "--format", "torchscript", "--out", str(tmp_path / "a_folder.pt"))
    assert "no file can be written in /proc/nope" in _error(capsys, str(run_dir), "--format", "torchscript", "--out", "/proc/nope/m.pt")
    assert "no file can be written" in _error(capsys, str(run_dir), "--format", "torchscript", "--out", str(mine / "m.pt"))
    deep = tmp_path / "new" / "deeper" / "m.pt"   # a folder that can be made: checked, then left as it was
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(deep)]) == 0 and deep.is_file()
    (deep.parent / "m.pt").unlink(), (deep.parent / "m.pt.json").unlink(), deep.parent.rmdir(), deep.parent.parent.rmdir()
    assert main(["export", str(run_dir), "--format", "torchscript", "--out", str(mine), "--overwrite"]) == 0
    assert mine.read_bytes() != b"the user's own file" and mine.with_name("mine.pt.json").is_file()


def test_export_refuses_a_file_named_for_the_other_format(runs, tmp_path, capsys):
    msg = _error(capsys, str(runs["cartpole"]), "--format", "torchscript", "--out", str(tmp_path / "m.onnx"))
    assert "a .onnx file with --format torchscript" in msg and "Name it m.pt, or pass --format onnx" in msg
    assert not list(tmp_path.iterdir())


def test_the_layout_says_where_each_key_of_a_dict_observation_lands():
    """Gymnasium flattens a Dict in sorted key order, not in the order the env declared it: the
    JSON lists each key's offset, so robot-side code builds the same vector (the mask left out)."""
    import gymnasium as gym

    from hdppo.platform.export import _dict_parts

    space = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,)), "desired_goal": gym.spaces.Box(-1, 1, (2,)),
                             "achieved_goal": gym.spaces.Box(-1, 1, (2,))})
    assert [(p["key"], p["offset"], p["size"]) for p in _dict_parts(space)] == [
        ("achieved_goal", 0, 2), ("desired_goal", 2, 2), ("observation", 4, 3)]
    masked = gym.spaces.Dict({"pos": gym.spaces.Box(0, 1, (2,)), "cue": gym.spaces.Discrete(3),
                              "action_mask": gym.spaces.MultiBinary(4)})
    assert [(p["key"], p["offset"], p["size"]) for p in _dict_parts(masked)] == [("cue", 0, 3), ("pos", 3, 2)]
    assert _dict_parts(gym.spaces.Box(0, 1, (3,))) is None
    assert _dict_parts(gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (3,)),
                                        "action_mask": gym.spaces.MultiBinary(2)})) is None


def test_a_state_field_says_when_the_observation_stands_in_for_state():
    """A single-agent Gymnasium env has no state(); its flattened observation is used and the
    layout says so instead of promising "the env's global state()"."""
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.export import _env_field

    for cfg, stands_in in ((tiny_config(layers=[{"name": "control", "observation": {"source": "state"}}]), True),
                           (_two_layers(), False)):
        cfg = validate(cfg)
        venv, _, specs = probe_env(cfg, 0)
        try:
            assert venv.state_is_obs is stands_in
            field = _env_field(cfg, specs[0], venv.obs_dim, None, venv.state_is_obs)
        finally:
            venv.close()
        assert field["source"] == "state"
        assert ("has no state()" in field["description"]) is stands_in
        assert ("global state()" in field["description"]) is not stands_in
