import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, tiny_config
from hdppo.platform.config import Config, json_schema, load_config, validate
from hdppo.platform.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_preset_loads_and_validates(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    assert cfg.layers and cfg.env


def test_unknown_key_names_the_path_and_suggests(tmp_path):
    p = write(tmp_path, "name: x\nenv: {id: CartPole-v1}\nlayers:\n  - ppo: {lrr: 0.1}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and "layers[0].ppo.lrr" in msg and "Did you mean 'lr'" in msg


def test_bad_literal_lists_allowed_values(tmp_path):
    p = write(tmp_path, "name: x\nenv: {id: CartPole-v1}\nlayers:\n  - dppo: {mode: fast}\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "layers[0].dppo.mode" in str(e.value) and "'central'" in str(e.value) and "'dppo'" in str(e.value)


def test_minibatch_larger_than_batch_is_rejected():
    with pytest.raises(ConfigError, match=r"minibatch_size \(600\) must be <= dppo.train_batch_size \(500\)"):
        validate({"name": "x", "env": {"id": "CartPole-v1"},
                  "layers": [{"ppo": {"minibatch_size": 600}, "dppo": {"train_batch_size": 500}}]})


def test_env_needs_exactly_one_source():
    with pytest.raises(ConfigError, match="exactly one of 'id'"):
        validate({"name": "x", "env": {}})
    with pytest.raises(ConfigError, match="package.module:factory"):
        validate({"name": "x", "env": {"entry_point": "nocolon"}})


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    p = write(tmp_path, "name: x\nenv: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(p)


def test_overrides_by_index_and_layer_name(tmp_path):
    p = write(tmp_path, "name: x\nenv: {id: CartPole-v1}\nlayers:\n  - name: control\n")
    cfg = load_config(p, ["layers.0.ppo.lr=1e-4", "layers.control.dppo.mode=dppo", "train.seed=7"])
    assert cfg.layers[0].ppo.lr == pytest.approx(1e-4)
    assert cfg.layers[0].dppo.mode == "dppo"
    assert cfg.train.seed == 7
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(p, ["train.seed"])
    with pytest.raises(ConfigError, match="no list entry 'strategy'"):
        load_config(p, ["layers.strategy.ppo.lr=1"])


def test_an_error_set_on_the_command_line_names_its_flag(tmp_path):
    """A value put there by --set is named by the flag as typed (a layer name resolved to its
    index); an error in the file itself is not, and a file with no --set errors reads as before."""
    p = write(tmp_path, "name: x\nenv: {id: CartPole-v1}\nlayers:\n  - name: control\n    ppo: {gamma: 2}\n")
    with pytest.raises(ConfigError) as err:
        load_config(p, ["layers.control.ppo.lr=-1", "train.totl=3", "train.seed=1"])
    msg = str(err.value)
    assert msg.startswith(f"{p}, as changed on the command line, is invalid: ")
    assert "layers[0].ppo.lr (from --set layers.control.ppo.lr=-1): Input should be greater than 0" in msg
    assert "train.totl (from --set train.totl=3): unknown key" in msg
    assert "layers[0].ppo.gamma: " in msg and "layers[0].ppo.gamma (from" not in msg
    assert "train.seed" not in msg
    # The longest path that a flag set names the error: a section set whole, then one field of it.
    with pytest.raises(ConfigError, match=r"layers\[0\]\.ppo\.clip \(from --set layers\.0\.ppo=\{clip: -1\}\)"):
        load_config(p, ["layers.0.ppo={clip: -1}"])
    with pytest.raises(ConfigError, match=r"layers\[0\]\.ppo\.lr \(from --set layers\.0\.ppo\.lr=0\)"):
        load_config(p, ["layers.0.ppo={clip: 0.2}", "layers.0.ppo.lr=0"])
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value).startswith(f"{p} is invalid: layers[0].ppo.gamma: ")
    # A misspelt section is named by the flag that made it; a check across fields lists the flags.
    with pytest.raises(ConfigError, match=r"trian \(from --set trian\.seed=1\): unknown key\. Did you mean 'train'"):
        load_config(p, ["trian.seed=1", "layers.0.ppo.gamma=0.9"])
    two = write(tmp_path, "name: x\nenv: {id: CartPole-v1}\nlayers:\n  - name: a\n    action: {type: discrete, n: 2}\n"
                          "  - name: b\n", name="two.yaml")
    with pytest.raises(ConfigError, match=r"as changed on the command line, is invalid: layers\[1\] \(b\)\.period.* "
                                          r"\(the command line set --set layers\.b\.period=2\)\.$"):
        load_config(two, ["layers.b.period=2"])
    # ... and not the flags that set fields it does not name (train.total_env_steps is on every tiny run).
    with pytest.raises(ConfigError) as err:
        load_config(two, ["layers.b.period=2", "train.total_env_steps=3000"])
    assert "total_env_steps" not in str(err.value) and "<top level>" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(two, ["train.total_env_steps=3000", "groups=[{layers: [a, bb]}]"])
    assert "unknown layer 'bb'" in str(err.value) and "(the command line set --set groups=" in str(err.value)
    assert "total_env_steps" not in str(err.value)
    three = write(tmp_path, two.read_text() + "groups: [{layers: [a, bb]}]\n", name="three.yaml")
    with pytest.raises(ConfigError) as err:
        load_config(three, ["train.total_env_steps=3000"])
    assert str(err.value) == f"{three} is invalid: groups[0]: unknown layer 'bb'; layers are a, b."


def test_defaults_come_from_the_seed_articles():
    cfg = validate({"name": "x", "env": {"id": "CartPole-v1"}})
    layer = cfg.layers[0]
    assert (layer.dppo.num_workers, layer.dppo.train_batch_size, layer.ppo.minibatch_size, layer.ppo.num_epochs) == (8, 4000, 512, 5)
    assert (layer.ppo.gamma, layer.ppo.gae_lambda, layer.ppo.clip, layer.ppo.lr, layer.ppo.vf_coeff) == (0.99, 0.95, 0.2, 3e-4, 0.5)
    assert (layer.ppo.entropy_coeff, layer.ppo.entropy_coeff_final) == (0.01, 0.001)
    assert layer.normalization.reward_scope == "worker"


def test_schema_is_json_and_documents_fields():
    schema = json_schema()
    json.dumps(schema)
    assert "layers" in schema["properties"]
    assert "description" in schema["$defs"]["PPOConfig"]["properties"]["clip"]


def test_the_schema_accepts_what_training_accepts_and_refuses_what_it_refuses():
    """Editors flagged a config with no name (the README's one-liner; the name comes from the file)
    and passed any key in a group's dppo (training refuses them)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema()
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    jsonschema.validate({"env": {"entry_point": "my_envs:make"}}, schema)
    group = {"env": {"id": "CartPole-v1"}, "layers": [{"name": "a"}, {"name": "b"}],
             "groups": [{"layers": ["a", "b"], "dppo": {"num_workers": 2}}]}
    jsonschema.validate(group, schema)
    group["groups"][0]["dppo"]["bogus"] = 1
    with pytest.raises(jsonschema.ValidationError, match="bogus"):
        jsonschema.validate(group, schema)


def test_tiny_config_is_valid():
    validate(tiny_config())


# -- group-level dppo settings -----------------------------------------------------------------

def _two_layers(a_dppo=None, b_dppo=None, groups=None):
    layers = [{"name": "a", "action": {"type": "discrete", "n": 2}, "dppo": a_dppo or {}},
              {"name": "b", "dppo": b_dppo or {}}]
    return {**tiny_config(layers=layers), **({"groups": groups} if groups is not None else {})}


def test_a_groups_dppo_section_is_stated_once_for_its_layers():
    from hdppo.platform.config import dump_config

    import yaml

    cfg = validate(_two_layers({"train_batch_size": 512}, groups=[
        {"layers": ["a", "b"], "dppo": {"num_workers": 3, "sync": "soft", "elastic": {"max_workers": 4}}}]))
    assert cfg.layer_groups() == [["a", "b"]]
    for name in ("a", "b"):
        d = cfg.layer(name).dppo
        assert (d.num_workers, d.sync, d.elastic.max_workers) == (3, "soft", 4)
    g = cfg.group_dppo(["a", "b"])
    assert (g.num_workers, g.sync) == (3, "soft")
    # Per-layer fields stay per layer.
    assert cfg.layer("a").dppo.train_batch_size == 512 and cfg.layer("b").dppo.train_batch_size == 4000
    # The resolved config.yaml a run writes loads again to the same settings.
    again = validate(yaml.safe_load(dump_config(cfg)))
    assert again.model_dump() == cfg.model_dump()
    # The old list form still works, and a group of agreeing layers is fine.
    assert validate(_two_layers({"num_workers": 2}, {"num_workers": 2}, groups=[["a", "b"]])).layer_groups() == [["a", "b"]]


@pytest.mark.parametrize("field, a, b", [("num_workers", 2, 4), ("sync", "sync", "soft"), ("mode", "central", "dppo"),
                                         ("num_envs_per_worker", 4, 8)])
def test_layers_of_one_group_must_agree_on_group_level_fields(field, a, b):
    with pytest.raises(ConfigError) as err:
        validate(_two_layers({field: a}, {field: b}, groups=[["a", "b"]]))
    msg = str(err.value)
    assert f"groups[0]: layers 'a' and 'b' disagree on dppo.{field}" in msg
    assert "groups: [{layers: [a, b], dppo: {" + field in msg  # says how to fix it
    # Alone, each is fine: only a shared pool needs one value.
    validate(_two_layers({field: a}, {field: b}))


def test_group_dppo_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"layers\[0\] \(a\)\.dppo\.num_workers \(5\) disagrees with groups\[0\]\.dppo\.num_workers \(3\)"):
        validate(_two_layers({"num_workers": 5}, groups=[{"layers": ["a", "b"], "dppo": {"num_workers": 3}}]))
    with pytest.raises(ConfigError, match=r"groups\[0\]\.dppo\.train_batch_size is a per-layer setting; set it in layers\[\]\.dppo"):
        validate(_two_layers(groups=[{"layers": ["a", "b"], "dppo": {"train_batch_size": 512}}]))
    with pytest.raises(ConfigError, match=r"groups\[0\]\.dppo\.num_workers: Input should be greater than or equal to 1"):
        validate(_two_layers(groups=[{"layers": ["a", "b"], "dppo": {"num_workers": 0}}]))
    with pytest.raises(ConfigError, match="unknown layer 'c'"):
        validate(_two_layers(groups=[{"layers": ["a", "c"], "dppo": {}}]))
    # The same value stated in the layer too is not a contradiction.
    validate(_two_layers({"num_workers": 3}, groups=[{"layers": ["a", "b"], "dppo": {"num_workers": 3}}]))


def test_a_run_config_saved_before_critic_input_keeps_its_state_only_critic(tmp_path):
    # A run dir's config.yaml lists every policy field; one written before policy.critic_input
    # existed has none, and its checkpoints hold a critic that reads state() and the command.
    from hdppo.platform.config import dump_config

    cfg = validate(tiny_config(layers=[{"name": "control", "policy": {"central_critic": True}}]))
    dumped = yaml.safe_load(dump_config(cfg))
    assert dumped["layers"][0]["policy"]["critic_input"] == "state_and_obs"
    del dumped["layers"][0]["policy"]["critic_input"]
    del dumped["layers"][0]["policy"]["log_std_range"]
    old = tmp_path / "config.yaml"
    old.write_text(yaml.safe_dump(dumped))
    assert load_config(old).layers[0].policy.critic_input == "state"
    # A config a person writes gets the default.
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(tiny_config(layers=[{"name": "control", "policy": {"central_critic": True}}])))
    assert load_config(mine).layers[0].policy.critic_input == "state_and_obs"


def test_set_reads_e_notation_as_a_number():
    """YAML 1.1 reads 1e6 (no dot) as text; --set takes it as the number a command line means."""
    from hdppo.platform.config import load_config, parse_override

    assert parse_override("train.total_env_steps=1e6") == ("train.total_env_steps", 1e6)
    assert parse_override("layers.0.ppo.lr=-2.5E-4") == ("layers.0.ppo.lr", -2.5e-4)
    assert parse_override("name=1e5x") == ("name", "1e5x")   # text stays text
    cfg = load_config(ROOT / "configs" / "cartpole.yaml", ["train.total_env_steps=1e6"])
    assert cfg.train.total_env_steps == 1_000_000 and isinstance(cfg.train.total_env_steps, int)


def test_the_readme_hierarchy_example_validates():
    """README's "A hierarchy in YAML" example is what a newcomer copies first: it must be a valid
    config (it once combined a layer-level num_envs_per_worker with a group that disagreed)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A hierarchy in YAML", 1)[1]
    block = section.split("```yaml", 1)[1].split("```", 1)[0]
    data = yaml.safe_load(block)
    data.setdefault("name", "readme_example")
    cfg = validate(data, source="README example")
    assert [layer.name for layer in cfg.layers] == ["strategy", "control"]
    assert cfg.group_dppo(["strategy", "control"]).num_envs_per_worker == 8
    assert cfg.layers[1].schedule.start_after is None and cfg.layers[1].exploration.type == "count"


def test_a_newcomers_config_needs_only_env_and_reads_numbers_as_yaml_1_2(tmp_path):
    """name defaults to the file's name (the README's plug-in example has none); 1e6 and 3e-4 are
    numbers in the file as on the command line (PyYAML's YAML 1.1 read them as strings, which an
    int field refused); a minibatch larger than the batch says when its size is the default."""
    p = write(tmp_path, "env: {id: CartPole-v1}\ntrain: {total_env_steps: 1e6}\nlayers: [{ppo: {lr: 3e-4}}]\n",
              name="my task.yaml")
    cfg = load_config(p)
    assert cfg.name == "my_task" and cfg.train.total_env_steps == 1_000_000 and cfg.layers[0].ppo.lr == 3e-4
    assert load_config(p, ["train.total_env_steps=2e3", "layers.0.ppo.lr=1.5E-3"]).train.total_env_steps == 2000
    assert load_config(write(tmp_path, "name: kept\nenv: {id: CartPole-v1}\n")).name == "kept"
    with pytest.raises(ConfigError, match=r"total_env_steps: Input should be a valid integer, got a number with a "
                                          r"fractional part"):
        load_config(write(tmp_path, "env: {id: CartPole-v1}\ntrain: {total_env_steps: 1.5e0}\n"))
    with pytest.raises(ConfigError, match=r"ppo.minibatch_size \(512, the default\) must be <= dppo.train_batch_size "
                                          r"\(256\); set ppo.minibatch_size"):
        load_config(p, ["layers.0.dppo.train_batch_size=256"])
    with pytest.raises(ConfigError, match=r"ppo.minibatch_size \(300\) must be"):
        load_config(p, ["layers.0.dppo.train_batch_size=256", "layers.0.ppo.minibatch_size=300"])
    with pytest.raises(ConfigError, match="A config needs at least env"):
        load_config(write(tmp_path, "\n", name="empty.yaml"))


def test_a_group_setting_refused_on_its_layers_is_said_once_and_names_its_flag():
    """groups[i].dppo reaches each of its layers, whose checks then refused it once per layer, naming
    neither the group nor the flag."""
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs" / "corridor_hierarchy.yaml",
                    ["groups=[{layers: [strategy, control], dppo: {mode: dppo}}]", "groups.0.dppo.pipeline=true"])
    text = str(err.value)
    assert "is invalid: layers[0], layers[1]: dppo.sync pipeline needs dppo.mode 'central'" in text, text
    assert text.count("needs dppo.mode") == 1 and text.endswith("(the command line set --set groups.0.dppo.pipeline=true).")


@pytest.mark.parametrize("action,stray", [({"n": 7}, "n is for type discrete, and this action is type 'env'"),
                                          ({"type": "discrete", "n": 3, "low": [0.0]}, "low is for type box"),
                                          ({"type": "box", "low": [0.0], "high": [1.0], "nvec": [2]},
                                           "nvec is for type multidiscrete")])
def test_an_action_field_of_another_type_is_refused_not_ignored(action, stray):
    """`--set layers.0.action.n=7` on the bottom layer trained on the env's own Discrete(2) in silence."""
    cfg = tiny_config()
    cfg["layers"] = [{"name": "top", "action": action}, cfg["layers"][0]] if action.get("type") else \
        [{**cfg["layers"][0], "action": action}]
    with pytest.raises(ConfigError, match=stray):
        validate(cfg)


@pytest.mark.parametrize("field", ["layers.0.ppo.lr", "train.stop_timeout_s", "layers.0.dppo.quality_beta"])
def test_an_infinite_number_is_refused_like_nan(field, tmp_path):
    """`--set layers.0.ppo.lr=.inf` passed the range checks (gt=0) and trained NaN weights."""
    with pytest.raises(ConfigError, match=r"Input should be a finite number"):
        load_config(str(ROOT / "configs" / "cartpole.yaml"), [f"{field}=.inf"])


def test_an_update_whose_losses_turned_non_finite_stops_the_run_naming_the_layer_and_lr():
    """A diverged layer trained on as NaN, exited 0, and its loss charts ended (NaN is not charted)."""
    from types import SimpleNamespace

    from hdppo.platform.errors import DivergedError
    from hdppo.platform.learner import Learner

    cfg = validate(tiny_config())
    me = SimpleNamespace(cfg=cfg, layer=cfg.layers[0], updates=4)
    Learner._check_finite(me, [{"policy": 0.1, "value": 2.0}], {"lr": 3e-4})   # finite: nothing to say
    Learner._check_finite(me, [], {"lr": 3e-4})                                  # no minibatch: nothing to check
    with pytest.raises(DivergedError, match=r"layer 'control': update 5 gave a non-finite loss \(value nan\).*"
                                            r"learning rate 0.5\). Lower layers\[0\].ppo.lr"):
        Learner._check_finite(me, [{"policy": 0.1, "value": float("nan")}], {"lr": 0.5})


@pytest.mark.parametrize("dppo,match", [({"compression": "q8"}, "compression: q8 applies in mode dppo only"),
                                        ({"aggregate": "quality"}, "aggregate: quality applies in mode dppo only"),
                                        ({"mode": "dppo", "stale": "downweight"},
                                         "stale: downweight applies in mode central only")])
def test_a_setting_of_the_other_mode_is_refused_not_ignored(dppo, match):
    cfg = tiny_config()
    cfg["layers"][0]["dppo"].update(dppo)
    with pytest.raises(ConfigError, match=match):
        validate(cfg)


@pytest.mark.parametrize("override,match", [("layers.0.dppo.num_workers=true", "num_workers: true is a boolean"),
                                            ("layers.0.dppo.max_lag=false", "max_lag: false is a boolean"),
                                            ("layers.0.ppo.lr=true", "lr: true is a boolean")])
def test_a_boolean_for_a_number_is_refused(override, match):
    """pydantic's lax mode read `num_workers: true` as 1 worker and `max_lag: false` as 0."""
    with pytest.raises(ConfigError, match=match):
        load_config(str(ROOT / "configs" / "cartpole.yaml"), [override])
    load_config(str(ROOT / "configs" / "cartpole.yaml"), ["layers.0.dppo.pipeline=true"])  # a boolean field takes one


@pytest.mark.parametrize("dppo, words", [
    ({"chunks_in_flight": 9}, "dppo.chunks_in_flight applies only under sync: soft or async, and this group's sync is 'sync'"),
    ({"sync": "async", "refresh_every": 7}, "dppo.refresh_every applies only under sync: soft, and this group's sync is 'async'"),
    ({"sync": "soft", "num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512, "chunks_per_worker": 200},
     "chunks_per_worker: 200 cuts a worker's share of train_batch_size 512 into chunks of 2 samples, less than one "
     "step of its 4 env copies; each chunk would be 4 samples and an update about 1600. Set chunks_per_worker to at most 64"),
    ({"num_workers": 2, "elastic": {"min_workers": 3, "max_workers": 4}}, "dppo.num_workers 2 is outside elastic's bounds [3, 4]"),
])
def test_dppo_settings_that_would_be_ignored_or_overshoot_are_refused(dppo, words):
    """A sync mode's setting under another mode was ignored in silence; a soft chunk below one step
    made updates three times train_batch_size (1600 for 512); a pool started outside its elastic bounds."""
    with pytest.raises(ConfigError) as info:
        validate(tiny_config(layers=[{"name": "control", "dppo": dppo}]))
    assert words in " ".join(str(info.value).split()), info.value
    # What a run saves (every field, defaults included) loads again under any sync mode.
    from hdppo.platform.config import dump_config
    import yaml
    for sync in ("sync", "pipeline", "soft", "async"):
        cfg = validate(tiny_config(layers=[{"name": "control", "dppo": {"sync": sync}}]))
        validate(yaml.safe_load(dump_config(cfg)))
