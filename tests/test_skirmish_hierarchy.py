"""The skirmish hierarchies by config (configs/skirmish_hierarchy.yaml, skirmish_two_layers.yaml):
a few updates of each, each layer its own group, and the deterministic evaluation that the
benchmark reads win rates from (the env's end-of-episode infos), on 8v8 and on 10v10."""
import pytest

from conftest import ROOT
from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
from hdppo.platform.config import load_config, validate
from hdppo.platform.evaluation import evaluate_episodes
from hdppo.platform.trainer import Trainer

PRESETS = {"skirmish_hierarchy.yaml": ["strategy", "squad", "control"],
           "skirmish_two_layers.yaml": ["squad", "control"]}


def small(preset: str, steps: int = 1200) -> dict:
    """The preset in this process with small batches and networks: a few updates per layer."""
    cfg = load_config(ROOT / "configs" / preset, ["ray.backend=local", f"train.total_env_steps={steps}",
                                                  "train.checkpoint_every=1", "train.eval_episodes=0"])
    data = cfg.model_dump(mode="json")
    data["env"]["kwargs"]["max_steps"] = 40
    for layer in data["layers"]:
        layer["dppo"].update(num_workers=1, num_envs_per_worker=4, train_batch_size=256 if layer["period"] == 1 else 32)
        layer["ppo"].update(minibatch_size=32 if layer["period"] > 1 else 128, num_epochs=1)
        layer["policy"]["hidden"] = [32, 32]
    for group in data["groups"]:
        group["dppo"].update(num_workers=1, num_envs_per_worker=4)
    return data


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_shape(preset):
    cfg = load_config(ROOT / "configs" / preset)
    assert [layer.name for layer in cfg.layers] == PRESETS[preset]
    assert cfg.layer_groups() == [[name] for name in PRESETS[preset]]  # each layer its own DPPO group
    assert cfg.layers[-1].reward.intrinsic_fn == "skirmish_follow_order" and cfg.layers[-1].policy.central_critic
    assert {k: cfg.env.kwargs[k] for k in ("scenario", "opponent")} == {"scenario": "8v8_mixed", "opponent": "focus_kite"}
    if "strategy" in PRESETS[preset]:
        assert cfg.layer("squad").reward.intrinsic_fn == "skirmish_squad_objective"
    # The control layer is kickstarted from focus_kite under its squad's order, kept at 0.3, in the
    # two-layer baseline too, so that the two differ by the strategy layer alone.
    teacher = cfg.layer("control").teacher
    assert teacher.policy == "hdppo.envs.builtin.skirmish.opponents:order_teacher" and teacher.coeff_final == 0.3
    # The upper layers read state() by squad and unit type, so 10v10 lines up with 8v8.
    assert cfg.env.kwargs["state_layout"] == "squads"


def test_flat_baseline_has_the_hierarchies_kickstart():
    """Flat MAPPO starts from the same micro as the hierarchies' control layers (focus_kite's, with
    no order to read), kept at the same weight, and its central critic reads the same state layout."""
    flat, three = (load_config(ROOT / "configs" / name) for name in ("skirmish_flat.yaml", "skirmish_hierarchy.yaml"))
    t, t3 = flat.layers[0].teacher, three.layer("control").teacher
    assert t.policy == "hdppo.envs.builtin.skirmish.opponents:micro_teacher"
    assert (t.coeff, t.coeff_final, t.anneal) == (t3.coeff, t3.coeff_final, t3.anneal)
    assert flat.env.kwargs == three.env.kwargs and flat.layers[0].policy.central_critic


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_a_few_updates_of_each_layer_then_games_with_outcomes(preset, tmp_path):
    cfg = validate(small(preset))
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["updates"] >= 2
    logged = (tmp_path / "run" / "metrics.jsonl").read_text()
    for name in PRESETS[preset]:
        assert f'"layer": "{name}", "tag": "losses/approx_kl"' in logged, name
    if load_config(ROOT / "configs" / preset).layer("control").teacher is not None:
        assert '"layer": "control", "tag": "losses/teacher_nll"' in logged
    # What the squad layer ordered (MultiDiscrete([2, 3, 2])): each component's shares sum to 1.
    import hdppo.platform.metrics as M

    rows = [r for r in M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
            if r["layer"] == "squad" and r["tag"].startswith("charts/commands/")]
    assert rows
    last = max(r["step"] for r in rows)
    shares = {r["tag"].rsplit("/", 1)[1]: r["value"] for r in rows if r["step"] == last}
    assert sorted(shares) == ["0_0", "0_1", "1_0", "1_1", "1_2", "2_0", "2_1"]
    for k, n in enumerate((2, 3, 2)):
        assert sum(shares[f"{k}_{i}"] for i in range(n)) == pytest.approx(1.0)
    # The game's outcome per layer (the env's episode_metrics) wherever that layer's group saw
    # games end (the control group's small batches may see none).
    ended = [name for name in PRESETS[preset] if f'"layer": "{name}", "tag": "charts/episodic_return"' in logged]
    assert ended
    for name in ended:
        for key in ("win", "draw", "kills", "losses"):
            assert f'"layer": "{name}", "tag": "episode/{key}"' in logged, (name, key)
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))
    assert set(states) == set(PRESETS[preset])
    episodes = evaluate_episodes(cfg, states, 6, num_envs=3)
    assert len(episodes) == 6
    for ep in episodes:
        ends = [i for i in ep.infos.values() if "outcome" in i]
        assert ends and ends[0]["win"] + ends[0]["draw"] + (ends[0]["outcome"] < 0) == 1
        assert 0 <= ends[0]["kills"] <= 8 and 0 < ep.length <= 40
    # The same weights on 10v10 (squads of five): the benchmark's transfer game.
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from skirmish import games_of, scenario_config

    big = scenario_config(cfg, "10v10_mixed", "focus_kite")
    assert big.layer("squad").agents.squads["squad_1"] == [f"red_{i}" for i in range(5, 10)]
    result = games_of(evaluate_episodes(big, states, 4, num_envs=2))
    assert result["games"] == 4 and result["win"] + result["draw"] + result["loss"] == 4
    if cfg.layer("control").teacher is not None:
        # The benchmark's rows with the control layer played by its teacher (focus_kite's micro
        # under the trained squads' orders), on both scenarios, and their table.
        from skirmish import evaluate_checkpoint, render_markdown

        last = latest_checkpoint(tmp_path / "run")
        evs = [evaluate_checkpoint(cfg, last, 4, sc, scripted=("control",)) for sc in ("8v8_mixed", "10v10_mixed")]
        assert [e["scripted"] for e in evs] == [["control"]] * 2 and all(e["games"] == 4 for e in evs)
        md = render_markdown({"machine": {"load_avg_1_5_15": [0.0]}, "command": "test", "settings": {"quick": True, "games": 4},
                              "trained": {"three_layers": {"evaluations": [], "scripted_evaluations": evs}}})
        assert "| three_layers | control | 10v10_mixed |" in md
    # A video of the batched env (env.type vector): its copies are drawn by render_copy().
    from PIL import Image

    from hdppo.platform.video import record_video

    rec = record_video(cfg, states, tmp_path / "battle.gif", 1)
    assert rec.frames >= rec.lengths[0] >= 1 and len(rec.returns) == 1
    gif = Image.open(tmp_path / "battle.gif")
    assert gif.n_frames >= 2 and gif.size[1] > gif.size[0] * 24 / 32 * 0.9  # the map, plus the commands' band


def test_the_three_layers_train_on_3v3_with_a_one_option_target(tmp_path):
    """3v3 has one squad a side: the squad's target is a one-option component (nvec [1, 3, 2]),
    which order_teacher and skirmish_follow_order read; the config refused any component below 2,
    so the hierarchy could not run on the documented 3v3 scenario at all."""
    data = small("skirmish_hierarchy.yaml", steps=1200)
    data["env"]["kwargs"]["scenario"] = "3v3"
    squad, strategy = (next(x for x in data["layers"] if x["name"] == n) for n in ("squad", "strategy"))
    squad["agents"] = {"squads": {"squad_0": ["red_0", "red_1", "red_2"]}}
    squad["action"]["nvec"], strategy["action"]["nvec"] = [1, 3, 2], [3]
    summary = Trainer(validate(data), tmp_path / "run", quiet=True).train()
    assert summary["updates"] >= 2
    with pytest.raises(Exception, match="one of them >= 2"):
        validate({**data, "layers": [{**squad, "action": {"type": "multidiscrete", "nvec": [1, 1]}}]})
