"""Evaluation with sampled actions (evaluate_episodes(deterministic=False)): reproducible from its
seed, and not the policy's most likely actions."""
import numpy as np

from conftest import tiny_config
from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
from hdppo.platform.config import validate
from hdppo.platform.evaluation import evaluate_episodes
from hdppo.platform.trainer import Trainer


def test_sampled_evaluation_is_seeded_and_differs_from_the_most_likely_actions(tmp_path):
    # Classify (tests/test_teacher.py): a one-hot class each step, 1 for naming it. One update of
    # a zero-reward run leaves the policy near uniform: its most likely action is a fixed class per
    # observation, its samples spread over all eight.
    layer = {"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 1},
             "dppo": {"num_workers": 1, "num_envs_per_worker": 4, "train_batch_size": 256},
             "normalization": {"observation": False, "reward": False}}
    cfg = tiny_config(env={"entry_point": "test_teacher:Classify", "kwargs": {"reward": 0.0}}, layers=[layer],
                      train={"total_env_steps": 256, "checkpoint_every": 100, "eval_episodes": 0})
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    scored = validate(dict(cfg, env={"entry_point": "test_teacher:Classify", "kwargs": {"reward": 1.0}}))
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))

    def right(seed: int, deterministic: bool) -> list[float]:
        return [e.ret for e in evaluate_episodes(scored, states, 32, seed=seed, num_envs=4, deterministic=deterministic)]

    sampled = right(3, False)
    assert sampled == right(3, False)                      # the same seed, the same samples
    assert sampled != right(4, False)
    greedy = right(3, True)
    assert greedy != sampled
    # Most likely actions name at most the classes whose argmax is right, in every episode alike;
    # samples name about one class in eight, spread over episodes.
    assert 0.5 <= np.mean(sampled) <= 4.0 and np.std(sampled) > 0.5


def test_hdppo_eval_sampled_actions(tmp_path, capsys):
    """`hdppo eval --sampled-actions`: reported as such, seeded (the same figures twice), other figures
    than the most likely actions'; with --video it is refused, naming both flags."""
    import json

    import yaml

    from hdppo.platform.cli import main

    layer = {"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 1},
             "dppo": {"num_workers": 1, "num_envs_per_worker": 4, "train_batch_size": 256},
             "normalization": {"observation": False, "reward": False}}
    cfg = tiny_config(env={"entry_point": "test_teacher:Classify", "kwargs": {"reward": 1.0}}, layers=[layer],
                      train={"total_env_steps": 256, "checkpoint_every": 100, "eval_episodes": 0},
                      ray={"backend": "local"})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(path), "--run-dir", str(tmp_path / "run")]) == 0
    capsys.readouterr()

    def figures(*flags: str) -> dict:
        assert main(["eval", str(tmp_path / "run"), "--episodes", "16", "--seed", "5", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    sampled = figures("--sampled-actions")
    assert sampled["sampled_actions"] is True and sampled["returns"] == figures("--sampled-actions")["returns"]
    greedy = figures()
    assert greedy["sampled_actions"] is False and greedy["returns"] != sampled["returns"]
    assert main(["eval", str(tmp_path / "run"), "--sampled-actions", "--video", str(tmp_path / "v.mp4")]) != 0
    assert "--sampled-actions" in capsys.readouterr().err


def test_evaluation_lists_episodes_copy_by_copy_whatever_their_lengths(tmp_path):
    """Episodes come in the copies' order (each copy's first, then each one's second), not in the order
    they ended: the first k of any evaluation are the same games (copy i reset with seed + i) for
    every number of episodes from k to the number of copies, and a longer run extends a shorter one."""
    cfg = tiny_config(train={"total_env_steps": 256, "checkpoint_every": 100, "eval_episodes": 0})
    Trainer(validate(cfg), tmp_path / "run", quiet=True).train()
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))
    run = lambda n, copies: [(e.ret, e.length) for e in evaluate_episodes(validate(cfg), states, n, seed=11,  # noqa: E731
                                                                          num_envs=copies)]
    five = run(5, 8)
    assert run(2, 8) == five[:2] and run(3, 8) == five[:3]
    assert len({length for _, length in five}) > 1          # lengths differ, so the order is not theirs
    twelve = run(12, 4)
    assert twelve[:4] == run(4, 4) == five[:4] and twelve[4:8] != twelve[:4]
