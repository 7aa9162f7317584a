"""Elastic worker pools: resize by `hdppo scale` and by the CPU-utilization policy, while training."""
import time

import pytest

from accounting_checks import assert_accounted
from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.cli import main
from hdppo.platform.config import ElasticConfig, validate
from hdppo.platform.elastic import decide_workers, request_scale, take_scale_request
from hdppo.platform.trainer import Trainer


def test_policy_grows_on_idle_cpu_and_shrinks_when_oversubscribed():
    e = ElasticConfig(min_workers=1, max_workers=4, low_util=0.5, high_util=0.9)
    assert decide_workers(2, 0.2, e, free_cpus=4, worker_cpus=1) == 3
    assert decide_workers(2, 0.2, e, free_cpus=0.5, worker_cpus=1) == 2   # no room in Ray for another
    assert decide_workers(4, 0.2, e, free_cpus=4, worker_cpus=1) == 4     # at max
    assert decide_workers(2, 0.7, e, free_cpus=4, worker_cpus=1) == 2     # in the band: keep
    assert decide_workers(2, 0.99, e, free_cpus=4, worker_cpus=1) == 1
    assert decide_workers(1, 0.99, e, free_cpus=4, worker_cpus=1) == 1    # at min
    assert decide_workers(9, 0.7, e, free_cpus=4, worker_cpus=1) == 4     # clamped into the range


def test_scale_request_is_taken_once(tmp_path):
    (tmp_path / "config.yaml").write_text("name: x\n")
    before = time.time()
    request_scale(tmp_path, 3, "control")
    request = take_scale_request(tmp_path)
    assert request.pop("time") >= before and request == {"group": "control", "workers": 3}
    assert take_scale_request(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        request_scale(tmp_path / "nope", 2)


def _cfg(**dppo):
    return validate(tiny_config(
        layers=[{"ppo": {"minibatch_size": 64, "num_epochs": 2},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256, **dppo}}],
        train={"total_env_steps": 256 * 8, "checkpoint_every": 1000, "eval_episodes": 0, "seed": 4},
        diagnostics={"accounting": True}))


def _workers_and_samples(run_dir):
    rows = M.read_jsonl(run_dir / "metrics.jsonl")
    workers = [r["value"] for r in rows if r["tag"] == M.PERF_NUM_WORKERS]
    samples = sum(r["value"] for r in rows if r["tag"] == M.PERF_SAMPLES)
    return workers, samples


@pytest.mark.parametrize("sync", ["sync", "soft"])
def test_hdppo_scale_resizes_a_training_group(ray_session, tmp_path, sync):
    run_dir = tmp_path / "run"
    cfg = _cfg(sync=sync)
    cfg.ray.backend = "ray"
    plan = {2: 1, 5: 2}  # after update 2 scale to 1 worker, after update 5 back to 2

    def hook(trainer, layer, step, metrics):
        n = trainer.groups[0]._updates
        if n in plan:
            assert main(["scale", str(run_dir), "--workers", str(plan.pop(n)), "--group", "control"]) == 0

    trainer = Trainer(cfg, run_dir, hooks=[hook], quiet=True)
    try:
        summary = trainer.train()
        group = trainer.groups[0]
    finally:
        trainer.shutdown()
    workers, samples = _workers_and_samples(run_dir)
    assert workers[:2] == [2, 2] and 1 in workers and workers[-1] == 2, workers
    # From the ids: no env step trained twice across the resizes, none lost between two known
    # ones of a copy; the worker added back is a new incarnation (2), not worker 1 again.
    ids = assert_accounted(group.accounting("control"))
    assert set(ids["workers"].tolist()) <= {0, 1, 2} and not len(ids["failed"])
    assert len(ids["trained"]) == samples and summary["env_steps"] >= cfg.train.total_env_steps
    if sync == "sync":  # a barrier: every rollout whole, fresh and trained, one sample per env step
        assert ids["workers"].tolist() == [0, 1, 2]
        assert len(ids["trained"]) == summary["env_steps"] and not len(ids["stale"])


def test_cpu_policy_resizes_while_training(tmp_path, monkeypatch):
    """Local backend, scripted utilization: idle CPU grows the pool to max, overload shrinks it."""
    readings = iter([0.1] * 4 + [1.0] * 100)

    class FakeMeter:
        def __call__(self):
            return next(readings)

    monkeypatch.setattr("hdppo.platform.elastic.CpuMeter", FakeMeter)
    cfg = _cfg(num_workers=1, elastic={"min_workers": 1, "max_workers": 3, "low_util": 0.5, "high_util": 0.9, "every": 2})
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        summary = trainer.train()
        group = trainer.groups[0]
    finally:
        trainer.shutdown()
    workers, samples = _workers_and_samples(tmp_path / "run")
    assert workers[:3] == [1, 1, 2] and max(workers) == 3 and workers[-1] < 3, workers
    ids = assert_accounted(group.accounting("control"))
    assert ids["workers"].tolist() == [0, 1, 2]
    assert len(ids["trained"]) == samples == summary["env_steps"]


def test_scale_command_errors(tmp_path, capsys):
    def err() -> str:  # the CLI wraps its message to the terminal width
        return " ".join(capsys.readouterr().err.split())

    assert main(["scale", str(tmp_path), "--workers", "2"]) == 2
    assert "not an hdppo run dir" in err()
    (tmp_path / "config.yaml").write_text("name: t\nenv: {id: CartPole-v1}\n")
    assert main(["scale", str(tmp_path), "--workers", "2", "--group", "nope"]) == 2
    assert "no group 'nope'" in err()
    assert not (tmp_path / "scale_request.json").exists()


def test_a_scale_request_made_while_nothing_trained_is_not_applied_later(tmp_path, capsys):
    """`hdppo scale` on a run that had stopped: the trainer that resumes it later ignores the
    request and says so, rather than silently training with other workers."""
    run_dir = tmp_path / "run"
    cfg = _cfg()

    def train_to(env_steps, **kw):
        cfg.train.total_env_steps = env_steps
        trainer = Trainer(cfg, run_dir, **kw)
        try:
            trainer.train()
        finally:
            trainer.shutdown()

    train_to(256 * 2, quiet=True)
    # The command refuses: nothing is training the run now; it says how to resume with the count.
    assert main(["scale", str(run_dir), "--workers", "1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"no trainer is running {run_dir} now" in err
    assert f"--run-dir {run_dir} --resume --set layers.control.dppo.num_workers=1" in err
    assert not (run_dir / "scale_request.json").exists()
    # A request written all the same (a trainer that ended between the check and the write).
    from hdppo.platform.elastic import request_scale

    request_scale(run_dir, 1, None)
    train_to(256 * 4, resume=True)
    workers, _ = _workers_and_samples(run_dir)
    assert workers and set(workers) == {2}, workers
    assert "ignored a scale request to 1 workers made before this trainer started" in capsys.readouterr().out
    assert not (run_dir / "scale_request.json").exists()


def test_a_resize_waits_for_ray_to_see_the_cpus_of_workers_just_removed(monkeypatch):
    """Ray's free-CPU count lags an actor's exit: a group that shrank and grows back moments later
    must not settle for fewer workers because the count has not caught up yet (it did, in CI)."""
    import itertools

    from hdppo.platform import group as G

    class LaggingBackend:
        name = "ray"

        def __init__(self):
            self.freed_at = None

        def free_cpus(self):  # the removed worker's CPU shows up 0.4 s after its kill
            return 1.0 if self.freed_at is not None and time.monotonic() - self.freed_at > 0.4 else 0.0

        def kill(self, handle):
            self.freed_at = time.monotonic()

        def call(self, handle, method, *args):
            return None

    class Sync:
        def on_resize(self, group, n):
            pass

    g = G.DPPOGroup.__new__(G.DPPOGroup)
    g.name, g.backend, g._worker_args, g.sync = "control", LaggingBackend(), (None, 1.0), Sync()
    g.workers, g.generation, g.num_workers, g._incarnations = ["w0", "w1"], [0, 1], 2, itertools.count(2)
    g._make_worker = lambda index, uid: f"w{index}.{uid}"
    assert g.resize(1) == 1 and g.workers == ["w0"]
    assert g.resize(2) == 2 and g.workers == ["w0", "w1.2"] and g.generation == [0, 2]
    monkeypatch.setattr(G, "RESOURCE_SETTLE_S", 0.2)  # a cluster that is really full: fewer, after the wait
    g.backend.freed_at = None
    assert g.resize(3) == 2


def test_the_resume_command_scale_prints_works_for_a_config_with_groups(tmp_path, capsys):
    """A group stating its dppo once (groups: [{layers, dppo}]): the run dir's config.yaml holds the
    count in the group and in its layers, and the printed --set gave the group's only, which then
    disagreed with its layers. The command scale prints must run as printed."""
    import shlex

    import yaml

    cfg = tiny_config(layers=[{"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 1},
                               "dppo": {"train_batch_size": 256}}],
                      groups=[{"layers": ["control"], "dppo": {"num_workers": 2, "num_envs_per_worker": 2}}],
                      train={"total_env_steps": 256, "checkpoint_every": 1, "eval_episodes": 0})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    assert main(["train", str(path), "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    assert main(["scale", str(run_dir), "--workers", "1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    printed = err[err.index("hdppo train "):].rstrip(".")
    assert "--set groups.0.dppo.num_workers=1" in printed and "--set layers.control.dppo.num_workers=1" in printed
    argv = shlex.split(printed)[1:] + ["--set", "train.total_env_steps=512"]
    assert main(argv) == 0, capsys.readouterr().err
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["groups"][0]["dppo"]["num_workers"] == 1


def test_the_cpu_meter_reads_its_own_interval_and_gives_no_reading_too_soon(monkeypatch):
    """psutil.cpu_percent(interval=None) keeps one interval per process and reads 0.0 when asked
    again too soon: bogus 0% readings that grew and shrank the pool five times in 15 updates."""
    from collections import namedtuple

    from hdppo.platform import elastic

    T = namedtuple("T", "user system idle iowait")
    assert elastic.busy_share(T(10, 5, 80, 5), T(13, 6, 84, 5)) == pytest.approx(0.5)   # 4 busy of 8
    assert elastic.busy_share(T(1, 1, 1, 1), T(1, 1, 1, 1)) is None                      # no time passed
    clock = iter([0.0, 0.05, 1.0])
    monkeypatch.setattr(elastic.time, "monotonic", lambda: next(clock))
    times = iter([T(0, 0, 0, 0), T(3, 1, 4, 0)])
    import psutil

    monkeypatch.setattr(psutil, "cpu_times", lambda: next(times))
    meter = elastic.CpuMeter()
    assert meter() is None            # 0.05 s after the start: no reading (psutil's own would say 0%)
    assert meter() == pytest.approx(0.5)


def test_a_pool_that_wants_to_grow_but_has_no_room_says_why_once(tmp_path, monkeypatch, capsys):
    class Idle:
        def __call__(self):
            return 0.1

    monkeypatch.setattr("hdppo.platform.elastic.CpuMeter", Idle)
    cfg = _cfg(num_workers=1, elastic={"min_workers": 1, "max_workers": 3, "low_util": 0.5, "high_util": 0.9, "every": 1})
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    monkeypatch.setattr(trainer.backend, "free_cpus", lambda: 0.0)
    try:
        trainer.train()
    finally:
        trainer.shutdown()
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("is below elastic.low_util, but the pool cannot grow past 1 workers") == 1
    assert "No CPU is free (the learner and the other groups hold the rest)" in out and "(e.g. 0.5)" not in out
