"""platform.array_pool: destinations of large copies reused only once nothing holds them, in the
sampler's harvest (tests/test_multiagent_envs.py), the learner's batch concatenation and its
bfloat16 observations."""
import gc

import gymnasium as gym
import numpy as np
import torch

from conftest import tiny_config
from hdppo.platform import array_pool
from hdppo.platform.array_pool import ArrayPool
from hdppo.platform.batch import Batch, Rollout, RolloutStats
from hdppo.platform.config import validate


def test_a_kept_array_is_handed_out_again_only_when_nothing_holds_it():
    pool = ArrayPool(keep=2)
    a = pool.take("x", 10, (3,), np.float32)
    b = pool.take("x", 8, (3,), np.float32)
    assert a.base is pool.arrays["x"][0] and b.base is pool.arrays["x"][1]
    c = pool.take("x", 10, (3,), np.float32)  # both held: a new array, not kept
    assert c.base is not None and all(c.base is not k for k in pool.arrays["x"]) and len(pool.arrays["x"]) == 2
    first = id(pool.arrays["x"][0])  # an id: a reference would hold it
    del a
    gc.collect()
    d = pool.take("x", 9, (3,), np.float32)
    assert id(d.base) == first and d.shape == (9, 3)
    wider = pool.take("x", 4, (5,), np.float32)  # another shape: b and d held, so a new one
    assert wider.shape == (4, 5) and all(wider.base is not k for k in pool.arrays["x"])
    held_by_torch = torch.from_numpy(pool.take("y", 4, (2,), np.uint16)).view(torch.bfloat16)
    assert pool.take("y", 4, (2,), np.uint16).base is not pool.arrays["y"][0]  # the tensor holds it
    del held_by_torch
    gc.collect()
    assert pool.take("y", 4, (2,), np.uint16).base is pool.arrays["y"][0]


def _batch(rng, n: int, obs_dim: int) -> Batch:
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    return Batch(f(n, obs_dim), rng.integers(0, 3, (n, 1)).astype(np.float32), np.full(n, -np.log(3), np.float32),
                 f(n), f(n), f(n), versions=np.zeros(n, np.int64))


def test_concat_into_the_pool_equals_a_plain_concat_and_spares_held_batches(monkeypatch):
    monkeypatch.setattr(array_pool, "REUSE_MIN_BYTES", 0)
    rng = np.random.default_rng(1)
    pool = ArrayPool()
    parts = [[_batch(rng, n, 7) for n in (30, 20)] for _ in range(3)]
    got = [Batch.concat(p, pool=pool) for p in parts]  # all three held: the third in new arrays
    for g, p in zip(got, parts):
        want = Batch.concat(p)
        for name in ("obs", "actions", "advantages", "versions", "ids"):
            np.testing.assert_array_equal(getattr(g, name), getattr(want, name))
    assert got[0].obs.base is pool.arrays["obs"][0]


def test_the_learners_pooled_batches_give_the_same_updates(monkeypatch):
    """Three bf16 updates with the batch and its bfloat16 observations in pooled arrays: the
    weights of a learner that pools none, bit for bit, and each update reused the last one's
    arrays (one kept per field: had the last batch still been held, a second would be kept)."""
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService

    cfg = validate(tiny_config(layers=[{"name": "control", "policy": {"hidden": [32, 32]}, "learner": {"precision": "bf16"},
                                        "ppo": {"minibatch_size": 128, "num_epochs": 2}}]))
    weights = []
    for min_bytes in (0, 1 << 60):
        monkeypatch.setattr(array_pool, "REUSE_MIN_BYTES", min_bytes)
        rng = np.random.default_rng(0)
        torch.manual_seed(0)
        learner = Learner(cfg, 0, 40, gym.spaces.Discrete(3), ParameterService())
        assert learner._bf16_obs
        for _ in range(3):
            rollouts = []
            for w in range(2):
                b = _batch(rng, 256, 40)
                adv = b.advantages.astype(np.float64)
                rollouts.append(Rollout(b, RolloutStats(worker=w, version=learner.version, env_steps=256, sample_s=0.0,
                                                        adv_sum=float(adv.sum()), adv_sumsq=float((adv ** 2).sum()))))
            learner.update_central(*rollouts)
        weights.append(torch.cat([p.detach().reshape(-1) for p in learner.params]))
        kept = {k: len(v) for k, v in learner._pool.arrays.items()}
        if min_bytes == 0:
            assert kept["obs"] == 1 and kept["obs_bf16"] == 1, kept
        else:
            assert kept == {}
    assert torch.equal(weights[0], weights[1])
