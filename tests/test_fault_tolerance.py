"""A worker that dies or whose env raises is replaced; its rollout is dropped, never counted twice.

Every run here keeps the sample ledger (``diagnostics.accounting``): the checks are on the
samples' ids (see accounting_checks), not on counters that sum the same numbers twice.
"""
import os
import time

import gymnasium as gym
import numpy as np
import pytest

from accounting_checks import assert_accounted
from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.batch import ID_STEP, ID_WORKER
from hdppo.platform.config import rollout_length, validate
from hdppo.platform.trainer import Trainer


def _cfg(tmp_path, backend, env=None):
    return validate(tiny_config(
        env=env or {"id": "CartPole-v1"},
        layers=[{"ppo": {"minibatch_size": 64, "num_epochs": 2},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 512}}],
        train={"total_env_steps": 2560, "checkpoint_every": 100, "eval_episodes": 1},
        ray={"backend": backend}, diagnostics={"accounting": True}))


def _train(trainer):
    """Train; the summary and the control layer's ledger, checked (the group outlives shutdown)."""
    try:
        summary = trainer.train()
        group = trainer.groups[0]
    finally:
        trainer.shutdown()
    return summary, group, assert_accounted(group.accounting("control"))


def _trained_samples(run_dir, tag=M.PERF_SAMPLES):
    return sum(r["value"] for r in M.read_jsonl(run_dir / "metrics.jsonl") if r["tag"] == tag)


def _assert_crashed_rollout_counted_failed(ids):
    """The rollout that crashed: its samples all counted failed, all from one worker incarnation,
    and the last steps that incarnation reported (nothing of it was trained after them)."""
    failed = ids["failed"]
    assert len(failed), "the crashed rollout's samples were not counted"
    (uid,) = np.unique(failed[:, ID_WORKER])
    mine = ids["trained"][ids["trained"][:, ID_WORKER] == uid]
    assert not len(mine) or mine[:, ID_STEP].max() < failed[:, ID_STEP].min()


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_env_that_raises_is_replaced_and_training_goes_on(tmp_path, backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    env = {"entry_point": "scripted_envs:crash_once", "kwargs": {"flag": str(tmp_path / "crashed")}}
    summary, group, ids = _train(Trainer(_cfg(tmp_path, backend, env), tmp_path / "run", quiet=True))
    assert group.replaced == 1
    # The console said one line; the run dir keeps the worker's whole stack, down to the env's raise.
    log = (tmp_path / "run" / "worker_failures.log").read_text()
    assert log.count("=== ") == 1 and "worker " in log and "Traceback (most recent call last)" in log, log
    assert "scripted_envs.py" in log and "RuntimeError" in log, log
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    steps = [r["step"] for r in rows if r["tag"] == M.PERF_ENV_STEPS_PER_S]
    # Each update counts only the rollouts that arrived: one update has half a batch.
    increments = [b - a for a, b in zip([0] + steps, steps)]
    assert sorted(set(increments)) == [256, 512] and increments.count(256) == 1
    assert summary["env_steps"] == steps[-1] >= 2560
    _assert_crashed_rollout_counted_failed(ids)
    assert ids["workers"].tolist() == [0, 1, 2]  # the replacement is a new incarnation, and trained
    # The counters agree with the ids: one trained sample per env step counted.
    assert len(ids["trained"]) == summary["env_steps"] == _trained_samples(tmp_path / "run")


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
    summary, group, ids = _train(Trainer(cfg, tmp_path / "run", quiet=True, hooks=[kill_once]))
    assert group.replaced == 1 and group.workers[0] is not killed[0]
    assert type(group.sync).name == ("pipeline" if pipeline else "sync")
    # The killed worker's rollout in flight is unknown to the group (nothing of it came back);
    # what it did deliver was trained once, and its replacement is a new incarnation.
    assert not len(ids["failed"]) and ids["workers"].tolist() == [0, 1, 2]
    assert len(ids["trained"]) == summary["env_steps"] == _trained_samples(tmp_path / "run") >= 2560


class _WaitsForUpdates(gym.Wrapper):
    """At its step ``at`` (this copy's steps, counted here) the env waits until the run has
    logged ``updates`` more updates than it had when the worker's first copy got there (the
    copies of a worker step one after the other: one wait, not one per copy)."""

    target: int | None = None  # the updates logged that the copies wait for (per worker process)

    def __init__(self, env, metrics: str, at: int, updates: int):
        super().__init__(env)
        self.metrics, self.at, self.updates, self.n = metrics, at, updates, 0

    def _logged(self) -> int:
        try:
            with open(self.metrics) as fh:
                return fh.read().count(f'"tag": "{M.PERF_SAMPLES}"')
        except FileNotFoundError:
            return 0

    def step(self, action):
        if self.n == self.at:
            if _WaitsForUpdates.target is None:
                _WaitsForUpdates.target = self._logged() + self.updates
            deadline = time.monotonic() + 60.0
            while self._logged() < _WaitsForUpdates.target and time.monotonic() < deadline:
                time.sleep(0.01)
        self.n += 1
        return self.env.step(action)


def lagging_worker_crash_once(flag: str, metrics: str, driver: int, at_step: int = 200, slow_worker: int = 1):
    """crash_once; on rollout worker ``slow_worker`` (a Ray actor: not the ``driver`` process,
    where a local-backend test may have left the worker index), the first chunk waits at its
    step 8 for three more updates. The Ray workers import this module by its entry point, as a
    user's env module."""
    from scripted_envs import crash_once

    from hdppo.envs.loading import WORKER_INDEX_VAR

    env = crash_once(flag, at_step)
    if os.getpid() == driver or int(os.environ.get(WORKER_INDEX_VAR, -1)) != slow_worker:
        return env
    return _WaitsForUpdates(env, metrics, at=8, updates=3)


@pytest.mark.parametrize("sync", ["soft", "async"])
def test_streaming_modes_replace_failed_workers_without_counting_twice(ray_session, tmp_path, sync):
    """Sync soft/async: a crashed chunk is dropped, its worker replaced once, the others' chunks used.
    max_lag 1: chunks that sampled through two updates are dropped as stale, and counted so.

    Worker 1's first chunk (32 steps) stops at step 8 until three more updates are logged.
    What it acted on before (steps 0-11: the weights pulled at step 8 or before, at most one
    version ahead of the updates logged then) is at least two versions old when the chunk is
    used: stale. Soft pulls newer weights every refresh_every (4) steps, so from step 12 on the
    chunk acts with fresh weights: a partly stale rollout, of which the learner must count only
    what it kept. Async does not refresh: the whole chunk is stale."""
    env = {"entry_point": "test_fault_tolerance:lagging_worker_crash_once",
           "kwargs": {"flag": str(tmp_path / "crashed"), "at_step": 200, "metrics": str(tmp_path / "run" / "metrics.jsonl"),
                      "driver": os.getpid()}}
    cfg = _cfg(tmp_path, "ray", env)
    cfg.layers[0].dppo.sync = sync
    cfg.layers[0].dppo.max_lag = 1
    cfg.layers[0].dppo.refresh_every = 4
    chunk = rollout_length(cfg.layers[0], 2)
    assert chunk == 32
    summary, group, ids = _train(Trainer(cfg, tmp_path / "run", quiet=True))
    assert group.replaced == 1
    _assert_crashed_rollout_counted_failed(ids)
    run = tmp_path / "run"
    stale, trained = ids["stale"], ids["trained"]
    # Some samples were dropped as stale (the lagging worker's; in async, whose updates come with
    # every chunk, the fast worker's chunks may go stale too), and the logged drops agree with the ledger.
    assert len(stale) == _trained_samples(run, M.PERF_DROPPED_STALE) > 0
    assert 1 in stale[:, ID_WORKER] and (sync == "async" or set(stale[:, ID_WORKER].tolist()) == {1})
    # The logged trained count is the ledger's: a partly stale rollout's dropped part is not in it.
    assert len(trained) == _trained_samples(run) and summary["env_steps"] >= 2560
    # Every env step sampled counts, trained or dropped as stale (a rollout dropped whole, as async's
    # are, did not count before: the budget and env steps/s undercounted).
    assert summary["env_steps"] == len(trained) + len(stale)
    mine, stale = trained[trained[:, ID_WORKER] == 1], stale[stale[:, ID_WORKER] == 1]
    chunks = set((stale[:, ID_STEP] // chunk).tolist())
    assert 0 in chunks, chunks
    for c in chunks:
        lost = set((stale[stale[:, ID_STEP] // chunk == c][:, ID_STEP] % chunk).tolist())
        kept = set((mine[mine[:, ID_STEP] // chunk == c][:, ID_STEP] % chunk).tolist())
        assert lost == set(range(len(lost))) and kept == set(range(len(lost), chunk)), (c, lost, kept)  # a stale start
        if c == 0:
            assert len(lost) >= 12 and (len(lost) < chunk if sync == "soft" else not kept), (lost, kept)
        elif sync == "async":
            assert not kept, (c, kept)  # one version for a whole chunk


# -- mode dppo: the samples stay on the workers, so a worker lost mid-update takes its shard with it

def _dppo_cfg(backend, env=None):
    cfg = _cfg(None, backend, env)
    cfg.layers[0].dppo.mode = "dppo"
    return cfg


def _replaced_metric(run_dir):
    return [r["value"] for r in M.read_jsonl(run_dir / "metrics.jsonl") if r["tag"] == M.PERF_WORKERS_REPLACED]


def _assert_replaced_once_counted_once(run_dir, summary, ids):
    """One worker replaced during the run; the ledger sound (assert_accounted), and the counters
    agree with it: one trained sample per env step counted."""
    replaced = _replaced_metric(run_dir)
    assert replaced[0] == 0 and replaced[-1] == 1
    assert len(ids["workers"]) == 3
    assert len(ids["trained"]) == summary["env_steps"] == _trained_samples(run_dir) >= 2560


def test_dppo_mode_replaces_a_worker_whose_env_raises(tmp_path):
    env = {"entry_point": "scripted_envs:crash_once", "kwargs": {"flag": str(tmp_path / "crashed")}}
    summary, group, ids = _train(Trainer(_dppo_cfg("local", env), tmp_path / "run", quiet=True))
    assert group.replaced == 1
    _assert_replaced_once_counted_once(tmp_path / "run", summary, ids)
    _assert_crashed_rollout_counted_failed(ids)


def test_dppo_mode_redoes_an_update_when_a_worker_fails_during_it(tmp_path, monkeypatch):
    """Local backend, a gradient call that raises in the middle of the second update: the learner
    undoes that update's steps and redoes it with the other worker; nothing counts twice."""
    from hdppo.platform.rollout_worker import RolloutWorker

    real, calls = RolloutWorker.gradient, []

    def flaky(self, *args, **kwargs):
        calls.append(self.index)
        if len(calls) == 37:  # update 1 takes 2 workers x 2 epochs x 8 minibatches = 32 calls
            raise RuntimeError("worker lost mid-update")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RolloutWorker, "gradient", flaky)
    summary, group, ids = _train(Trainer(_dppo_cfg("local"), tmp_path / "run", quiet=True))
    assert group.replaced == 1
    assert _replaced_metric(tmp_path / "run")[:2] == [0, 1]
    _assert_replaced_once_counted_once(tmp_path / "run", summary, ids)
    # The failed worker's shard of the redone update: counted failed, whole (256 samples).
    assert len(ids["failed"]) == 256 and np.unique(ids["failed"][:, ID_WORKER]).size == 1
    assert summary["eval_return_mean"] > 0


@pytest.mark.parametrize("when", ["between_updates", "mid_update"])
def test_dppo_mode_replaces_a_killed_worker(ray_session, tmp_path, when):
    """Ray: worker 0's actor is killed after the first update (its next statistics call fails), or
    right before one of its gradient calls of the second update (the update is redone)."""
    import ray

    killed = []
    trainer = Trainer(_dppo_cfg("ray"), tmp_path / "run", quiet=True)

    def kill_once(trainer, layer, step, metrics):
        if not killed and when == "between_updates":
            killed.append(trainer.groups[0].workers[0])
            ray.kill(killed[0])

    trainer.hooks.append(kill_once)
    if when == "mid_update":
        real_call, grads = trainer.backend.call, []

        def call(handle, method, *args):
            if method == "gradient" and not killed:
                grads.append(handle)
                if len(grads) == 32 + 5 and handle is trainer.groups[0].workers[0]:
                    killed.append(handle)
                    ray.kill(handle)
                elif len(grads) == 32 + 5:
                    grads.pop()  # wait for worker 0's turn
            return real_call(handle, method, *args)

        trainer.backend.call = call
    summary, group, ids = _train(trainer)
    assert killed and group.replaced == 1 and group.workers[0] is not killed[0]
    _assert_replaced_once_counted_once(tmp_path / "run", summary, ids)
    # Killed mid-update, its shard (statistics in hand, samples on the dead actor) counts failed;
    # killed between updates, its rollout in flight never reached the group.
    assert len(ids["failed"]) == (256 if when == "mid_update" else 0)


def test_a_worker_that_fails_after_it_was_asked_for_its_state_is_left_out_of_the_checkpoint():
    """soft/async: a checkpoint taken while the next rollouts run asked every worker for its state;
    one that failed meanwhile (and was replaced, its actor killed) made the checkpoint raise
    ActorDiedError and the run crash with a traceback. Its state is now None, as for a worker that
    did not answer in time (it restarts with fresh reward statistics on resume)."""
    from types import SimpleNamespace

    from hdppo.platform.group import DPPOGroup

    class Backend:
        def get(self, call):
            if call == "dead":
                raise RuntimeError("The actor is dead because it was killed by `ray.kill`.")
            return {"asked": call}

        def wait_all(self, calls, timeout=None):
            return True

    group = SimpleNamespace(backend=Backend(), name="control")
    state = DPPOGroup.resolve_state(group, {"learners": {"control": "learner"}, "workers": ["w0", "dead"]})
    assert state["workers"] == [{"asked": "w0"}, None] and state["learners"] == {"control": {"asked": "learner"}}
    with pytest.raises(RuntimeError, match="killed"):  # a learner's failure is still an error
        DPPOGroup.resolve_state(group, {"learners": {"control": "dead"}, "workers": []})
