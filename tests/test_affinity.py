"""ray.cpu_affinity: the core plan, the config's refusals, and the pinning inside Ray actors."""
from __future__ import annotations

import os
import threading
import time

import gymnasium as gym
import pytest

from conftest import ROOT, tiny_config
from hdppo.platform import affinity
from hdppo.platform.config import ConfigError, load_config, validate

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")


def test_learners_get_cores_of_their_own_and_the_workers_share_the_rest():
    plan = affinity.plan_core
    assert plan("learner", 0, 1, [0, 1]) == 0
    assert [plan("worker", k, 1, [0, 1]) for k in range(3)] == [1, 1, 1]
    # Three learners on 8 cores (a three-layer hierarchy): cores 0-2; the workers cycle over 3-7.
    assert [plan("learner", k, 3, list(range(8))) for k in range(3)] == [0, 1, 2]
    assert [plan("worker", k, 3, list(range(8))) for k in range(6)] == [3, 4, 5, 6, 7, 3]
    # Not a core for each learner and one for the workers: nothing pinned.
    assert [plan("learner", k, 3, [4, 6]) for k in range(3)] == [None, None, None]
    assert plan("worker", 0, 3, [4, 6]) is None and plan("worker", 0, 3, [0, 1, 2]) is None
    assert plan("learner", 2, 3, [0, 1, 2, 5]) == 2 and plan("worker", 1, 3, [0, 1, 2, 5]) == 5
    assert plan("learner", 0, 1, [3]) is None and plan("worker", 0, 1, [3]) is None
    with pytest.raises(ValueError, match="role"):
        plan("driver", 0, 1, [0, 1])


def test_slots_count_learners_and_workers_across_the_groups():
    cfg = load_config(ROOT / "configs" / "skirmish_hierarchy.yaml")
    groups = cfg.layer_groups()
    assert len(groups) == 3
    learners = [name for g in groups for name in g]
    for k, name in enumerate(learners):
        assert affinity.slot_of(cfg, "learner", [name]) == (k, 3)
    first = cfg.group_dppo(groups[0]).num_workers
    assert affinity.slot_of(cfg, "worker", groups[0], 1) == (1, 3)
    assert affinity.slot_of(cfg, "worker", groups[1], 0) == (first, 3)


@pytest.mark.parametrize("ray_cfg,field", [({"backend": "local"}, "backend"), ({"address": "auto"}, "address")])
def test_the_config_refuses_affinity_where_it_cannot_plan(ray_cfg, field):
    with pytest.raises(ConfigError, match=f"cpu_affinity .*{field}"):
        validate(tiny_config(ray={"backend": "ray", "cpu_affinity": True, **ray_cfg}))


def test_outside_a_ray_actor_nothing_is_pinned():
    before = os.sched_getaffinity(0)
    cfg = validate(tiny_config(ray={"backend": "ray", "cpu_affinity": True}))
    assert affinity.apply(cfg, "worker", ["control"], 0) is None
    assert os.sched_getaffinity(0) == before


def _affinities() -> set[frozenset[int]]:
    """The core sets of every thread of this process."""
    out = set()
    for t in os.listdir("/proc/self/task"):
        try:
            out.add(frozenset(os.sched_getaffinity(int(t))))
        except ProcessLookupError:
            continue
    return out


def test_learner_and_workers_are_pinned_inside_their_actors(ray_session):
    """The run's learner and its workers, as Ray actors: every thread of each process on its
    planned core (also a thread started before the pinning), and with the setting off, nothing."""
    ray = ray_session
    cores = sorted(ray.get(ray.remote(lambda: sorted(os.sched_getaffinity(0))).remote()))
    if len(cores) < 2:
        pytest.skip("one core: nothing to separate")
    from hdppo.platform.backend import RayBackend
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService
    from hdppo.platform.rollout_worker import RolloutWorker

    @ray.remote(num_cpus=0)
    class Early:
        """A process with a thread running before the pinning, as Ray's own are."""

        def __init__(self, cfg):
            self.thread = threading.Thread(target=time.sleep, args=(30,), daemon=True)
            self.thread.start()
            self.core = affinity.apply(cfg, "worker", ["control"], 0)

        def report(self):
            return self.core, _affinities()

    backend = RayBackend()
    service = backend.make(ParameterService, num_cpus=0)
    for on in (True, False):
        cfg = validate(tiny_config(ray={"backend": "ray", "cpu_affinity": on},
                                   layers=[{"name": "control", "ppo": {"minibatch_size": 32}, "dppo": {"num_workers": 2, "num_envs_per_worker": 1,
                                                                        "train_batch_size": 64}}]))
        learner = backend.make(Learner, cfg, "control", 4, gym.spaces.Discrete(2), service, "ray", num_cpus=0)
        workers = [backend.make(RolloutWorker, cfg, ["control"], i, 2, service, num_cpus=0) for i in range(2)]
        early = Early.remote(cfg)
        learner_sets = ray.get(learner.__ray_call__.remote(lambda self: _affinities()))
        worker_sets = [ray.get(w.__ray_call__.remote(lambda self: _affinities())) for w in workers]
        core, early_sets = ray.get(early.report.remote())
        if on:
            assert learner_sets == {frozenset({cores[0]})}
            assert all(s == {frozenset({cores[1]})} for s in worker_sets), worker_sets
            assert core == cores[1] and early_sets == {frozenset({cores[1]})}
        else:
            assert core is None
            assert all(s == {frozenset(cores)} for s in [learner_sets, *worker_sets, early_sets])
        for h in (learner, *workers, early):
            ray.kill(h)
    ray.kill(service)
