"""A worker that dies or whose env raises is replaced; its rollout is dropped, never counted twice."""
import pytest

from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer


def _cfg(tmp_path, backend, env=None):
    return validate(tiny_config(
        env=env or {"id": "CartPole-v1"},
        layers=[{"ppo": {"minibatch_size": 64, "num_epochs": 2},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 512}}],
        train={"total_env_steps": 2560, "checkpoint_every": 100, "eval_episodes": 1},
        ray={"backend": backend}))


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_env_that_raises_is_replaced_and_training_goes_on(tmp_path, backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    env = {"entry_point": "scripted_envs:crash_once", "kwargs": {"flag": str(tmp_path / "crashed")}}
    trainer = Trainer(_cfg(tmp_path, backend, env), tmp_path / "run", quiet=True)
    try:
        summary = trainer.train()
        assert trainer.groups[0].replaced == 1
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    steps = [r["step"] for r in rows if r["tag"] == M.PERF_ENV_STEPS_PER_S]
    # Each update counts only the rollouts that arrived: one update has half a batch.
    increments = [b - a for a, b in zip([0] + steps, steps)]
    assert sorted(set(increments)) == [256, 512] and increments.count(256) == 1
    assert summary["env_steps"] == steps[-1] >= 2560


@pytest.mark.parametrize("pipeline", [False, True])
def test_killed_worker_is_replaced(ray_session, tmp_path, pipeline):
    """Pipelined, the killed worker already holds its next rollout call: that one fails too."""
    import ray

    killed = []

    def kill_once(trainer, layer, step, metrics):
        if not killed:
            killed.append(trainer.groups[0].workers[0])
            ray.kill(trainer.groups[0].workers[0])

    cfg = _cfg(tmp_path, "ray")
    cfg.layers[0].dppo.pipeline = pipeline
    trainer = Trainer(cfg, tmp_path / "run", quiet=True, hooks=[kill_once])
    try:
        summary = trainer.train()
        assert trainer.groups[0].replaced == 1 and trainer.groups[0].workers[0] is not killed[0]
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    samples = sum(r["value"] for r in rows if r["tag"] == M.PERF_SAMPLES)
    assert samples == summary["env_steps"] >= 2560


@pytest.mark.parametrize("sync", ["soft", "async"])
def test_streaming_modes_replace_failed_workers_without_counting_twice(ray_session, tmp_path, sync):
    """Sync soft/async: a crashed chunk is dropped, its worker replaced once, the others' chunks used."""
    env = {"entry_point": "scripted_envs:crash_once", "kwargs": {"flag": str(tmp_path / "crashed"), "at_step": 200}}
    cfg = _cfg(tmp_path, "ray", env)
    cfg.layers[0].dppo.sync = sync
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        summary = trainer.train()
        assert trainer.groups[0].replaced == 1
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    samples = sum(r["value"] for r in rows if r["tag"] == M.PERF_SAMPLES)
    assert samples == summary["env_steps"] >= 2560
