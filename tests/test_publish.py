"""What a learner publishes on Ray: its weights as NumPy buffers that every reader gets back as
tensors (tensor_buffers, backend.deref), and an update that returns only once the parameter
service holds its new version."""
import dataclasses
import time

import gymnasium as gym
import numpy as np
import ray
import torch

from conftest import tiny_config
from hdppo.platform.backend import deref
from hdppo.platform.batch import Batch, Rollout, RolloutStats
from hdppo.platform.config import validate
from hdppo.platform.learner import Learner
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.tensor_buffers import TensorArray, as_buffers, restore_tensors

SLOW_PUBLISH_S = 0.5


class SlowService(ParameterService):
    """A parameter service that takes SLOW_PUBLISH_S to record a version (a loaded machine)."""

    def publish(self, *args, **kwargs) -> int:
        time.sleep(SLOW_PUBLISH_S)
        return super().publish(*args, **kwargs)


def _ray_learner(service) -> Learner:
    """A CartPole learner in this process that puts and publishes as it does in a Ray actor."""
    cfg = validate(tiny_config())
    return Learner(cfg, 0, 4, gym.spaces.Discrete(2), service, "ray")


def _rollout(learner: Learner, n: int = 128) -> Rollout:
    rng = np.random.default_rng(0)
    adv = rng.standard_normal(n).astype(np.float32)
    values = rng.standard_normal(n).astype(np.float32)
    batch = Batch(obs=rng.standard_normal((n, 4)).astype(np.float32),
                  actions=rng.integers(2, size=(n, 1)).astype(np.float32),
                  logp=np.full(n, -np.log(2.0), np.float32), values=values, advantages=adv, returns=adv + values)
    batch = dataclasses.replace(batch, versions=np.full(n, learner.version, np.int64))
    a64 = adv.astype(np.float64)
    return Rollout(batch, RolloutStats(worker=0, version=learner.version, env_steps=n, sample_s=0.0,
                                       adv_sum=float(a64.sum()), adv_sumsq=float((a64 ** 2).sum())))


def test_buffers_round_trip_keeps_values_dtypes_and_strides():
    conv = torch.randn(16, 4, 3, 3).contiguous(memory_format=torch.channels_last)
    tree = {"w": conv, "b": torch.arange(3, dtype=torch.int64), "h": torch.ones(2, dtype=torch.bfloat16),
            "n": [1.5, {"x": np.zeros(2)}]}
    shared = as_buffers(tree)
    assert isinstance(shared["w"], TensorArray) and isinstance(shared["b"], TensorArray)
    assert np.shares_memory(shared["w"].array, conv.numpy())  # no copy: the caller's copy is put
    assert isinstance(shared["h"], torch.Tensor)  # NumPy has no bfloat16
    back = restore_tensors(shared)
    for k in ("w", "b", "h"):
        assert back[k].dtype == tree[k].dtype and torch.equal(back[k], tree[k])
    assert back["w"].stride() == conv.stride()
    assert back["n"][0] == 1.5 and isinstance(back["n"][1]["x"], np.ndarray)
    back["w"] += 1  # its own memory
    assert not torch.equal(back["w"], conv)


def test_on_ray_published_weights_travel_as_buffers_and_arrive_as_the_learners_tensors(ray_session):
    service = ray.remote(ParameterService).remote()
    learner = _ray_learner(service)
    learner.update_central(_rollout(learner))
    record = ray.get(service.latest.remote("control"))
    assert record["version"] == learner.version == 1
    raw = ray.get(record["weights"][0])
    assert raw and all(isinstance(v, TensorArray) for v in raw.values())
    weights = deref(record["weights"][0])
    mine = learner.policy.state_dict()
    assert weights.keys() == mine.keys()
    for k, v in weights.items():
        assert isinstance(v, torch.Tensor) and torch.equal(v, mine[k])
    ray.kill(service)


def test_on_ray_an_update_returns_once_the_service_holds_its_version(ray_session):
    """The service's answer to the publish is awaited after the update's other work, but before
    it returns: a worker asked next must find the new version."""
    service = ray.remote(SlowService).remote()
    learner = _ray_learner(service)  # its first publish waits as well
    t0 = time.perf_counter()
    learner.update_central(_rollout(learner))
    took = time.perf_counter() - t0
    assert took >= SLOW_PUBLISH_S, f"the update returned after {took:.2f}s, before the service recorded it"
    assert ray.get(service.latest.remote("control"))["version"] == learner.version == 1
    ray.kill(service)
