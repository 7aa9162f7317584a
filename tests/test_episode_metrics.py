"""Episode metrics: info keys an env declares (metadata['episode_metrics']) or a config names
(env.episode_metrics) are charted per layer as episode/<key>, and `hdppo eval` reports them."""
import json

import numpy as np
import pytest

from conftest import tiny_config
from hdppo.envs.vector import episode_info_values
from hdppo.platform import metrics as M
from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
from hdppo.platform.config import validate
from hdppo.platform.evaluation import evaluate_with_metrics
from hdppo.platform.trainer import Trainer


def test_values_are_means_over_the_agents_that_report_numbers():
    infos = {"a": {"win": 1, "kills": 3, "name": "x"}, "b": {"win": 0, "kills": np.int64(5)}, "c": {}}
    assert episode_info_values(infos, ["win", "kills", "name", "absent"]) == {"win": 0.5, "kills": 4.0}
    assert episode_info_values(None, ["win"]) == {} and episode_info_values({"a": {"win": True}}, ["win"]) == {"win": 1.0}


def _logged(run_dir, tag):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["value"] for r in rows if r["tag"] == tag]


def _cfg(**env):
    return validate(tiny_config(env={"entry_point": "scripted_envs:scored_countdown", **env},
                                train={"total_env_steps": 512, "eval_episodes": 0, "checkpoint_every": 1, "seed": 3}))


def test_declared_metrics_are_charted_and_evaluated(tmp_path):
    cfg = _cfg()
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    scores = _logged(tmp_path / "run", f"{M.EPISODE_INFO}/score")
    reached = _logged(tmp_path / "run", f"{M.EPISODE_INFO}/reached")
    assert scores and all(s == 5.0 for s in scores)  # every episode lasts 5 steps
    assert reached and all(0.0 <= r <= 1.0 for r in reached) and 0.0 < np.mean(reached) < 1.0  # a random policy
    assert not _logged(tmp_path / "run", f"{M.EPISODE_INFO}/label")  # not declared (and not a number)
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))
    returns, means = evaluate_with_metrics(cfg, states, 6)
    assert len(returns) == 6 and means["score"] == 5.0 and means["reached"] in (0.0, 1.0)  # deterministic


@pytest.mark.parametrize("keys, expect", [([], set()), (["score"], {"score"})])
def test_the_config_overrides_the_declaration(tmp_path, keys, expect):
    Trainer(_cfg(episode_metrics=keys), tmp_path / "run", quiet=True).train()
    logged = {k for k in ("score", "reached") if _logged(tmp_path / "run", f"{M.EPISODE_INFO}/{k}")}
    assert logged == expect


def test_a_declared_metric_that_no_episode_reports_is_pointed_out_once(tmp_path, capsys):
    """A metric declared but never set in the last infos got no chart and no word (a typo, or the
    key set on another step)."""
    Trainer(_cfg(episode_metrics=["score", "scroe"]), tmp_path / "run", quiet=False).train()
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("declares the episode metric(s) 'scroe'") == 2, out   # once per worker (2 workers)
    assert "'score'" not in out.split("declares the episode metric(s)")[1].split("so they get no chart")[0]
    assert _logged(tmp_path / "run", f"{M.EPISODE_INFO}/score") and not _logged(tmp_path / "run", f"{M.EPISODE_INFO}/scroe")


def test_best_by_may_be_written_as_its_chart_is_named():
    """The README says episode/win is usable as train.best_by; it was refused (only 'win' passed)."""
    for written in ("episode/score", "eval/episode/score", "score"):
        cfg = validate(tiny_config(train={"eval_every": 1, "eval_episodes": 1, "best_by": written}))
        assert cfg.train.best_by == "score"
