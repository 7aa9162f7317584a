"""Pipelining: workers collect the next batch during the update; staleness stays within max_lag."""
import pytest

from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.trainer import Trainer


def _cfg(**dppo):
    return validate(tiny_config(
        layers=[{"ppo": {"minibatch_size": 256, "num_epochs": 4},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 1024, **dppo}}],
        train={"total_env_steps": 30_000, "checkpoint_every": 100, "eval_episodes": 10, "seed": 2}))


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_pipelined_training_learns_with_staleness_one(tmp_path, backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    cfg = _cfg(pipeline=True)
    cfg.ray.backend = backend
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        summary = trainer.train()
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    lags = [r["value"] for r in rows if r["tag"] == M.PERF_MAX_STALENESS]
    assert lags[0] == 0 and set(lags[1:]) == {1.0}       # every later batch was collected during an update
    assert summary["eval_return_mean"] >= 150, summary     # CartPole still learns (random: about 20)


def test_pipeline_needs_a_lag_of_at_least_one():
    with pytest.raises(ConfigError, match="pipeline needs"):
        _cfg(pipeline=True, max_lag=0)
