"""torch threads: a run's only learner in a mode whose workers wait gets the machine's cores;
workers and every other learner one thread."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml

from conftest import tiny_config
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.group import learner_threads
from hdppo.platform.threads import thread_count
from hdppo.platform.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def _flat(threads="auto", **dppo) -> object:
    return validate(tiny_config(layers=[{"ppo": {"minibatch_size": 64}, "learner": {"num_threads": threads}, "dppo": {
        "num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256, **dppo}}]))


def test_auto_threads_follow_the_sync_mode_and_the_number_of_learners():
    assert learner_threads(_flat(threads=1), "control", "sync") == 1  # the default: one
    assert learner_threads(validate(tiny_config()), "control", "sync") == 1
    assert learner_threads(_flat(), "control", "sync") == 0  # every core: the workers wait
    for mode in ("pipeline", "soft", "async"):
        cfg = _flat(sync=mode, **({"max_lag": 2} if mode != "pipeline" else {}))
        assert learner_threads(cfg, "control", cfg.group_dppo(["control"]).sync) == 1
    raw = yaml.safe_load((ROOT / "configs/corridor_hierarchy.yaml").read_text())
    for layer in raw["layers"]:
        layer["learner"] = {"num_threads": "auto"}
    hier = validate(raw)
    assert [learner_threads(hier, n, "sync") for n in ("strategy", "control")] == [1, 1]  # two learners
    fixed = validate(tiny_config(layers=[{"learner": {"num_threads": 3}}]))
    assert learner_threads(fixed, "control", "pipeline") == 3


def test_thread_count_resolves_all_cores_capped():
    assert thread_count(2) == 2
    cores = len(os.sched_getaffinity(0))
    assert thread_count(0) == max(1, min(8, cores))


def test_num_threads_must_be_positive():
    with pytest.raises(ConfigError, match="num_threads"):
        validate(tiny_config(layers=[{"learner": {"num_threads": 0}}]))


def test_local_backend_workers_act_on_one_thread_after_a_many_thread_update(tmp_path):
    cfg = validate(tiny_config(layers=[{"learner": {"num_threads": 2}}], train={"total_env_steps": 512}))
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        trainer.setup()
        group = trainer.groups[0]
        group.iteration()
        assert torch.get_num_threads() == 2  # the learner's update ran last
        group.workers[0].sample()
        assert torch.get_num_threads() == 1
    finally:
        trainer.shutdown()
        torch.set_num_threads(1)


def test_a_rollout_worker_caps_numpys_blas_threads_at_one():
    """A worker's numpy actor must not start BLAS threads that spin beside the learner."""
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    from hdppo.platform.parameter_service import ParameterService
    from hdppo.platform.rollout_worker import RolloutWorker

    np.ones((4, 4)) @ np.ones((4, 4))  # numpy's BLAS is loaded
    if not any(i["user_api"] == "blas" for i in threadpool_info()):
        pytest.skip("numpy without a BLAS that threadpoolctl can see")
    before = threadpool_limits(limits=2, user_api="blas")  # as a fresh process on 2+ cores starts
    try:
        assert any(i["num_threads"] == 2 for i in threadpool_info() if i["user_api"] == "blas")
        cfg = validate(tiny_config())
        RolloutWorker(cfg, ["control"], 0, 1, ParameterService())
        assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
    finally:
        before.restore_original_limits()
