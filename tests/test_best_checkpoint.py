"""train.eval_every keeps the weights that scored best on a fixed evaluation as checkpoints/best.pt,
and eval/export read them with --checkpoint best."""
import json

import pytest
import torch

import hdppo.platform.trainer as trainer_module
from conftest import tiny_config
from hdppo.platform.checkpoint import best_info, learner_states, load_checkpoint, policy_checkpoint
from hdppo.platform.cli import main
from hdppo.platform.config import validate
from hdppo.platform.errors import CheckpointError, ConfigError
from hdppo.platform.evaluation import EVAL_SEED_OFFSET, SELECTION_SEED_OFFSET
from hdppo.platform.trainer import Trainer


def _eval_rows(run_dir) -> dict[str, list[tuple[int, float]]]:
    rows: dict[str, list[tuple[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["tag"].startswith("eval/"):
            rows.setdefault(r["tag"], []).append((r["step"], r["value"]))
    return rows


def _scripted(monkeypatch, scores: list[float], metric: str | None = None):
    """The periodic evaluation returns ``scores`` in turn (as the return, or as episode metric ``metric``)."""
    calls = iter(scores)

    def fake(cfg, states, episodes, seed=None):
        s = next(calls)
        return ([s] * episodes, {}) if metric is None else ([0.0] * episodes, {metric: s})

    monkeypatch.setattr(trainer_module, "evaluate_with_metrics", fake)


def test_cartpole_keeps_the_best_evaluated_weights_and_eval_reads_them(tmp_path, capsys):
    run = tmp_path / "run"
    cfg = validate(tiny_config(train={"total_env_steps": 1536, "eval_every": 1, "eval_episodes": 2}))
    Trainer(cfg, run, quiet=True).train()
    rows = _eval_rows(run)
    returns = rows["eval/return_mean"][:-1]  # the last row is the final evaluation
    assert len(returns) == 6
    best_step, best = max(returns, key=lambda sv: sv[1])  # the first of equal scores is kept
    info = best_info(run)
    assert info["score"] == pytest.approx(best) and info["env_steps"] == best_step
    assert info["best_by"] == "return" and info["episodes"] == 2
    # eval/best is the running best
    running = [max(v for _, v in returns[:i + 1]) for i in range(len(returns))]
    assert [v for _, v in rows["eval/best"]] == pytest.approx(running)
    state = learner_states(load_checkpoint(run / "checkpoints" / "best.pt"))["control"]
    assert state["env_steps"] == best_step
    # `hdppo eval --checkpoint best` evaluates those weights on the selection's seeds: the same
    # return. By default it plays other games than those the checkpoint was picked on.
    assert SELECTION_SEED_OFFSET != EVAL_SEED_OFFSET
    seed = cfg.train.seed + SELECTION_SEED_OFFSET
    assert main(["eval", str(run), "--checkpoint", "best", "--episodes", "2", "--seed", str(seed), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["checkpoint"] == "best.pt" and out["return_mean"] == pytest.approx(best)


def test_min_mode_ranks_by_an_episode_metric_and_keeps_that_update(tmp_path, monkeypatch):
    _scripted(monkeypatch, [3.0, 1.0, 2.0, 1.5], metric="score")
    run = tmp_path / "run"
    cfg = validate(tiny_config(env={"entry_point": "scripted_envs:scored_countdown"},
                               train={"total_env_steps": 1024, "eval_every": 1, "eval_episodes": 1,
                                      "best_by": "score", "best_mode": "min"}))
    Trainer(cfg, run, quiet=True).train()
    info = best_info(run)
    assert (info["score"], info["update"], info["env_steps"]) == (1.0, 2, 512)
    assert learner_states(load_checkpoint(run / "checkpoints" / "best.pt"))["control"]["updates"] == 2
    assert [v for _, v in _eval_rows(run)["eval/best"]] == [3.0, 1.0, 1.0, 1.0]
    assert [v for _, v in _eval_rows(run)["eval/episode/score"]] == [3.0, 1.0, 2.0, 1.5]


def test_resume_keeps_the_best_score_so_a_worse_one_does_not_replace_it(tmp_path, monkeypatch):
    run = tmp_path / "run"
    train = {"eval_every": 1, "eval_episodes": 1}
    _scripted(monkeypatch, [5.0, 9.0])
    Trainer(validate(tiny_config(train={**train, "total_env_steps": 512})), run, quiet=True).train()
    weights = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    _scripted(monkeypatch, [7.0, 8.0])
    Trainer(validate(tiny_config(train={**train, "total_env_steps": 1024})), run, resume=True, quiet=True).train()
    assert best_info(run)["score"] == 9.0 and best_info(run)["update"] == 2
    again = torch.load(run / "checkpoints" / "best.pt", weights_only=True)
    pol = learner_states(weights)["control"]["policy"]
    assert all(torch.equal(v, learner_states(again)["control"]["policy"][k]) for k, v in pol.items())


def test_a_best_by_the_env_does_not_report_fails_before_training(tmp_path):
    cfg = validate(tiny_config(train={"eval_every": 1, "best_by": "win"}))
    with pytest.raises(ConfigError, match=r"train.best_by: 'win' is neither 'return' nor an episode metric"):
        Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert not (tmp_path / "run").exists()  # nothing half-made left behind


def test_eval_every_needs_episodes_and_best_needs_a_best_checkpoint(tmp_path, capsys):
    with pytest.raises(ConfigError, match="train.eval_every needs train.eval_episodes > 0"):
        validate(tiny_config(train={"eval_every": 5, "eval_episodes": 0}))
    run = tmp_path / "run"
    Trainer(validate(tiny_config()), run, quiet=True).train()
    with pytest.raises(CheckpointError, match="has no best.pt: it is written by runs trained with train.eval_every"):
        policy_checkpoint(run, "best")
    assert main(["eval", str(run), "--checkpoint", "best", "--episodes", "1"]) == 2
    assert "train.eval_every" in capsys.readouterr().err
