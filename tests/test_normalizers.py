import gymnasium as gym
import numpy as np
import pytest

from hdppo.policies.normalizers import ObservationNormalizer, RewardScaler, RunningStats
from hdppo.policies.schedules import linear


def test_merge_equals_statistics_of_all_data():
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(1, 2, (50, 3)), rng.normal(-1, 0.5, (7, 3)), rng.normal(4, 3, (200, 3))
    parts = [RunningStats((3,)) for _ in range(3)]
    for p, x in zip(parts, (a, b, c)):
        p.update(x)
    total = RunningStats((3,))
    for p in parts:
        total.merge(p)
    full = np.concatenate([a, b, c])
    np.testing.assert_allclose(total.mean, full.mean(0), rtol=1e-10)
    np.testing.assert_allclose(total.var, full.var(0), rtol=1e-10)
    assert total.count == len(full)


def test_state_round_trip():
    s = RunningStats((2,))
    s.update(np.arange(10.0).reshape(5, 2))
    t = RunningStats.from_state(s.to_state())
    np.testing.assert_array_equal(s.mean, t.mean)
    assert t.count == 5


def test_observation_delta_is_handed_over_once():
    norm = ObservationNormalizer((1,))
    norm.observe(np.array([[1.0], [3.0]]))
    delta = norm.take_delta()
    assert delta.count == 2 and delta.mean[0] == pytest.approx(2.0)
    assert norm.take_delta().count == 0  # nothing counted twice
    assert norm.published.count == 2     # but still used for normalizing
    pool = RunningStats((1,))
    pool.update(np.array([[10.0]] * 4))
    norm.set_published(pool)
    norm.observe(np.array([[0.0]]))
    out = norm(np.array([[10.0]]))
    expected = norm.current  # the pool's statistics and the sample observed since
    assert expected.count == 5
    assert out[0, 0] == pytest.approx((10.0 - expected.mean[0]) / expected.std()[0], rel=1e-5)


def test_reward_scaler_is_per_worker():
    a = RewardScaler(1, gamma=0.99)
    b = RewardScaler(1, gamma=0.99)
    for _ in range(200):
        a(np.array([10.0]), np.array([False]))
        b(np.array([0.1]), np.array([False]))
    # Each worker scales by its own return statistics: both end near the same magnitude.
    ra = a(np.array([10.0]), np.array([False]))[0]
    rb = b(np.array([0.1]), np.array([False]))[0]
    assert ra == pytest.approx(rb, rel=0.05)
    assert a.stats.mean != pytest.approx(b.stats.mean)


def test_reward_scaler_resets_return_at_episode_end():
    s = RewardScaler(2, gamma=1.0)
    s(np.array([1.0, 1.0]), np.array([True, False]))
    np.testing.assert_array_equal(s.returns, [0.0, 1.0])


def test_linear_schedule():
    assert linear(0.01, 0.001, 0.0) == pytest.approx(0.01)
    assert linear(0.01, 0.001, 0.5) == pytest.approx(0.0055)
    assert linear(0.01, 0.001, 1.0) == pytest.approx(0.001)
    assert linear(0.01, 0.001, 7.0) == pytest.approx(0.001)


def test_moment_sums_are_exact_even_for_a_large_mean_and_a_small_spread():
    from hdppo.policies.normalizers import MomentSums

    rng = np.random.default_rng(1)
    batches = [rng.normal(1e4, 1e-2, (4, 3)) for _ in range(500)]
    sums = MomentSums((3,))
    for b in batches:
        sums.add(b)
    stats, full = sums.take(), np.concatenate(batches)
    np.testing.assert_allclose(stats.mean, full.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.var, full.var(0), rtol=1e-6)
    assert stats.count == 2000 and sums.take().count == 0  # taken once


def test_small_batches_observed_one_step_at_a_time_give_the_statistics_of_all_rows():
    # A sampler observes a few rows per env step, into one array it may later overwrite: the
    # normalizer keeps a copy of each batch and adds them in groups (ObservationNormalizer._stash).
    rng = np.random.default_rng(3)
    norm = ObservationNormalizer((5,))
    reused = np.empty((4, 5), np.float32)
    seen = []
    for k in range(3 * ObservationNormalizer.STASH_VALUES // 20 + 7):  # whole groups and a partial one
        reused[:] = rng.normal(2.0, 3.0, (4, 5))
        seen.append(reused.copy())
        norm.observe(reused)
        if k % 50 == 0:  # now and then a batch large enough to be added at once
            big = rng.normal(-1.0, 2.0, (ObservationNormalizer.STASH_VALUES // 5, 5))
            seen.append(big)
            norm.observe(big)
    reused[:] = 1e6  # the caller writes into its array again: nothing observed may change
    rows = np.concatenate(seen).astype(np.float64)
    delta = norm.take_delta()
    assert delta.count == len(rows)
    np.testing.assert_allclose(delta.mean, rows.mean(0), rtol=1e-6)
    np.testing.assert_allclose(delta.var, rows.var(0), rtol=1e-5)
    assert norm.take_delta().count == 0


def test_normalizer_refreshes_when_pending_samples_could_move_it():
    from hdppo.policies.normalizers import stale

    assert stale(1, 0) and stale(4, 1024) and not stale(3, 1024) and not stale(0, 0)
    norm = ObservationNormalizer((1,))
    norm.set_published(RunningStats((1,), np.array([0.0]), np.array([1.0]), 1e6))
    norm(np.array([[1.0]]))
    norm.observe(np.full((100, 1), 50.0))   # 100 samples: under 1/256 of a million
    assert norm(np.array([[1.0]]))[0, 0] == pytest.approx(1.0)   # not refreshed yet
    norm.observe(np.full((4000, 1), 50.0))  # now past it
    expected = (1.0 - norm.current.mean[0]) / norm.current.std()[0]
    assert norm(np.array([[1.0]]))[0, 0] == pytest.approx(expected, rel=1e-6) != pytest.approx(1.0)
    assert norm.take_delta().count == 4100  # every observed sample, once


def test_scale_rows_matches_the_running_return_of_each_lane():
    """A rollout scaled at once: each lane's running return follows its own closed rows (with
    per-row gamma and resets at episode ends), and row t is divided by the std of every return up
    to row t, over Gymnasium's prior (RunningMeanStd updated row by row)."""
    from gymnasium.wrappers.utils import RunningMeanStd

    rng = np.random.default_rng(1)
    T, L = 12, 3
    r = rng.normal(5.0, 1.0, (T, L))
    g = np.full((T, L), 0.9)
    closed = rng.random((T, L)) < 0.7
    end = closed & (rng.random((T, L)) < 0.2)
    sc = RewardScaler(0, 0.9)
    out = sc.scale_rows(r, g, closed, end)
    rms, ret, expected = RunningMeanStd(), np.zeros(L), np.zeros((T, L))
    for t in range(T):
        c = closed[t]
        if not c.any():
            continue
        new = ret * 0.9 + r[t]
        rms.update(new[c])
        expected[t] = np.where(c, np.clip(r[t] / np.sqrt(rms.var + 1e-8), -10, 10), 0.0)
        ret = np.where(c, np.where(end[t], 0.0, new), ret)
    np.testing.assert_allclose(sc.returns[:L], ret)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert sc.stats.count == pytest.approx(1e-4 + closed.sum())
    assert sc.stats.var == pytest.approx(rms.var) and sc.stats.mean == pytest.approx(rms.mean)
    assert sc.take_delta().count == closed.sum()  # the prior is not handed to the pool


class _RewardFeed(gym.Env):
    """Emits a fixed reward sequence and never ends (within the test)."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, rewards):
        self.rewards, self.t = rewards, 0

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), float(self.rewards[self.t - 1]), False, False, {}


@pytest.mark.parametrize("per_step", [False, True])
def test_reward_scaling_starts_as_gymnasiums_normalize_reward(per_step):
    """The same reward sequence through Gymnasium's vector NormalizeReward and through the
    scaler (a whole rollout at once, or step by step) gives the same scaled rewards from the
    first step on (CleanRL's clip to +-10 applied to Gymnasium's)."""
    from gymnasium.vector import SyncVectorEnv
    from gymnasium.wrappers.vector import NormalizeReward

    rng = np.random.default_rng(3)
    T, N, gamma = 300, 4, 0.99
    rewards = rng.normal(1.0, 2.0, (T, N))
    venv = NormalizeReward(SyncVectorEnv([lambda k=k: _RewardFeed(rewards[:, k]) for k in range(N)]), gamma=gamma)
    venv.reset(seed=0)
    gym_out = np.stack([venv.step(np.zeros(N, np.int64))[1] for _ in range(T)])
    sc = RewardScaler(N, gamma)
    if per_step:
        ours = np.stack([sc(rewards[t], np.zeros(N, bool)) for t in range(T)])
    else:
        ours = sc.scale_rows(rewards, gamma, np.ones((T, N), bool), np.zeros((T, N), bool))
    np.testing.assert_allclose(ours, np.clip(gym_out, -10, 10), rtol=1e-4, atol=1e-5)
    # Only the very first step (one return per copy against the 1e-4 prior) is clipped.
    assert np.abs(ours[1:]).max() < 10


@pytest.mark.parametrize("rows,width", [(4, 11), (192, 845)], ids=["small", "wide"])
@pytest.mark.parametrize("enabled", [True, False])
def test_observation_normalizer_writes_into_a_given_array(rows, width, enabled):
    """``norm(x, out=row)`` (the sampler normalising straight into its rollout buffer) gives what
    ``norm(x)`` gives, in ``out``; both clipped (np.clip for wide batches, max/min for small ones)."""
    rng = np.random.default_rng(0)
    norm = ObservationNormalizer((width,), clip=2.0, enabled=enabled)
    norm.observe((rng.standard_normal((64, width)) * 0.1).astype(np.float32))
    x = (rng.standard_normal((rows, width)) * 3).astype(np.float32)
    expected = norm(x)
    out = np.full((rows, width), np.nan, np.float32)
    got = norm(x, out=out)
    assert got is out
    np.testing.assert_array_equal(out, expected)
    if enabled:
        assert out.max() == 2.0 and out.min() == -2.0  # the clip happened on both sides
        ref = np.clip((x - norm._mean) / norm._std, -2.0, 2.0)
        np.testing.assert_array_equal(out, ref)
    else:
        np.testing.assert_array_equal(out, x)


def test_observe_and_normalise_gives_observe_then_normalise(monkeypatch):
    """The sampler's one call: a wide batch whose statistics need no refresh is normalised first
    and its moments taken from the normalised values (MomentSums.add_scaled). The values and the
    statistics must be those of observe() then normalise, also for a large mean and a small
    spread, with values clipped on both sides; and that path must be the one taken."""
    from hdppo.policies.normalizers import MomentSums

    scaled = []
    monkeypatch.setattr(MomentSums, "add_scaled", lambda self, *a, _f=MomentSums.add_scaled: (scaled.append(1), _f(self, *a)))
    rng = np.random.default_rng(4)

    def batch():  # sparse features on a large offset, and rare outliers beyond the clip
        x = 1e3 + (rng.random((192, 40)) < 0.1) * rng.normal(0.0, 0.5, (192, 40))
        x[rng.random((192, 40)) < 0.002] += 50.0
        return x.astype(np.float32)

    a, b = ObservationNormalizer((40,), clip=5.0), ObservationNormalizer((40,), clip=5.0)
    seen = []
    for _ in range(1000):  # refreshed every batch early on, then every few (see stale)
        x = batch()
        seen.append(x.astype(np.float64))
        a.observe(x)
        want = a(x)
        out = np.empty_like(x)
        got = b.observe_and_normalise(x, out=out)
        assert got is out
        np.testing.assert_allclose(got, want, atol=2e-4)
    assert np.abs(got).max() == 5.0  # clipped
    assert len(scaled) > 400, "the wide batches did not take the normalised path"
    rows = np.concatenate(seen)
    for norm in (a, b):
        stats = norm.take_delta()
        assert stats.count == len(rows)
        np.testing.assert_allclose(stats.mean, rows.mean(0), rtol=1e-9)
        np.testing.assert_allclose(stats.var, rows.var(0), rtol=1e-4)
