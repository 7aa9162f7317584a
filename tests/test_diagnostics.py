"""Diagnostics: per-worker divergence from the pool, gradient agreement, state-coverage images."""
import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.diagnostics import (coverage_image, divergences, embed_2d, gaussian_divergence,
                                        mean_pairwise_cosine, moments, observation_moments, pool_moments)
from hdppo.policies.normalizers import RunningStats
from hdppo.platform.trainer import Trainer


def test_pool_moments_are_those_of_the_union():
    rng = np.random.default_rng(0)
    parts = [rng.normal(i, 1 + i, (50 + 10 * i, 3)) for i in range(3)]
    m, v = pool_moments(*zip(*[moments(p) for p in parts]), [len(p) for p in parts])
    um, uv = moments(np.concatenate(parts))
    np.testing.assert_allclose(m, um)
    np.testing.assert_allclose(v, uv)


def test_moments_of_a_row_sample_estimate_the_batch_and_see_every_lane():
    # 24 lanes per step, time-major, lane k's values centred on k: a stride of 6 rows would see
    # lanes 0, 6, 12, 18 only (mean 9 instead of 11.5).
    rng = np.random.default_rng(0)
    steps, lanes = 1000, 24
    x = (np.arange(lanes)[None, :, None] + rng.normal(0, 1, (steps, lanes, 2))).reshape(-1, 2).astype(np.float32)
    exact_m, exact_v = moments(x)
    m, v = moments(x, max_rows=4000)
    np.testing.assert_allclose(m, exact_m, atol=0.05 * np.sqrt(exact_v).max())
    np.testing.assert_allclose(v, exact_v, rtol=0.1)
    assert moments(x[:3000], max_rows=4000)[0] == pytest.approx(moments(x[:3000])[0])  # small: exact
    # the sample is fixed by the batch size, not drawn from a shared random stream
    np.testing.assert_array_equal(moments(x, max_rows=4000)[0], m)


def test_observation_moments_are_the_normalisers_raw_moments_else_the_batchs():
    rng = np.random.default_rng(3)
    raw = rng.normal(4.0, 3.0, (500, 2, 3)).astype(np.float32)  # image-shaped: the moments come out flat
    seen = RunningStats((2, 3))
    seen.update(raw)
    normalised = (raw - 1.0) / 2.0
    m, v = observation_moments(seen, normalised.reshape(500, -1))
    np.testing.assert_allclose(m, raw.reshape(500, -1).mean(0), rtol=1e-5)
    np.testing.assert_allclose(v, raw.reshape(500, -1).var(0), rtol=1e-4)
    for none_seen in (None, RunningStats((2, 3))):  # normalisation off, or nothing counted: the batch's own
        m, v = observation_moments(none_seen, normalised.reshape(500, -1))
        np.testing.assert_allclose(m, normalised.reshape(500, -1).mean(0), rtol=1e-5)
        np.testing.assert_allclose(v, normalised.reshape(500, -1).var(0), rtol=1e-4)


def test_divergence_is_zero_for_the_same_data_and_grows_with_a_shift():
    m, v = np.zeros(4), np.ones(4)
    assert gaussian_divergence(m, v, m, v) == pytest.approx(0.0)
    assert gaussian_divergence(m + 1, v, m, v) == pytest.approx(0.5, rel=1e-4)   # 0.5 d^2
    assert gaussian_divergence(m + 2, v, m, v) == pytest.approx(2.0, rel=1e-4)
    rng = np.random.default_rng(1)
    data = [rng.normal(0, 1, (200, 4)) for _ in range(3)] + [rng.normal(3, 1, (200, 4))]
    div = divergences(*zip(*[moments(d) for d in data]))
    assert np.argmax(div) == 3 and div[3] > 5 * max(div[:3])


def test_mean_pairwise_cosine():
    g = [torch.tensor([1.0, 0.0]), torch.tensor([2.0])]
    assert mean_pairwise_cosine([g, g]) == pytest.approx(1.0)
    assert mean_pairwise_cosine([g, [-x for x in g]]) == pytest.approx(-1.0)
    assert mean_pairwise_cosine([[torch.tensor([1.0, 0.0])], [torch.tensor([0.0, 1.0])]]) == pytest.approx(0.0)
    assert np.isnan(mean_pairwise_cosine([g]))


def test_embedding_and_image():
    rng = np.random.default_rng(2)
    pts = rng.normal(0, 1, (60, 5))
    assert embed_2d(pts).shape == (60, 2) and embed_2d(pts[:, :1]).shape == (60, 2)
    img = coverage_image(pts, np.repeat([0, 1, 2], 20), "t")
    assert img.dtype == np.uint8 and img.shape[0] == 3 and img.shape[1] > 100 and img.std() > 0


@pytest.mark.parametrize("mode,obs_norm", [("central", True), ("dppo", True), ("central", False)])
def test_training_logs_diagnostics_and_finds_the_deviant_worker(tmp_path, mode, obs_norm):
    # With observation normalisation the divergence compares the raw observations' moments (the
    # normaliser's); without it, the batch's (estimated from rows): the deviant is found either way.
    cfg = validate(tiny_config(
        env={"entry_point": "scripted_envs:shifted_on_worker", "kwargs": {"worker": 2, "shift": 5.0}},
        layers=[{"ppo": {"minibatch_size": 96, "num_epochs": 2}, "normalization": {"observation": obs_norm},
                 "dppo": {"mode": mode, "num_workers": 3, "num_envs_per_worker": 2, "train_batch_size": 384}}],
        train={"total_env_steps": 384 * 4, "checkpoint_every": 100, "eval_episodes": 0, "seed": 5},
        diagnostics={"every": 2, "coverage_points": 32}))
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        trainer.train()
    finally:
        trainer.shutdown()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")

    def last(tag):
        return [r["value"] for r in rows if r["tag"] == tag][-1]

    div = [last(f"{M.DIAG_OBS_DIVERGENCE}/{w}") for w in range(3)]
    assert div[2] > 5 * max(div[:2]) and last(f"{M.DIAG_OBS_DIVERGENCE}/max") == div[2]
    assert f"{M.DIAG_ACTION_DIVERGENCE}/max" in {r["tag"] for r in rows}
    cos = [r["value"] for r in rows if r["tag"] == M.DIAG_GRAD_COSINE]
    # Mode central: every diagnostics.every (2) of the 4 updates; mode dppo: every update (the
    # workers' gradients are at hand anyway). Different workers' data, so never the same gradient
    # (two identical batches give 1.0: test_gradient_agreement_of_identical_worker_batches_is_one).
    assert len(cos) == (2 if mode == "central" else 4) and all(-1 <= c < 0.99 for c in cos), cos
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    acc = EventAccumulator(str(tmp_path / "run" / "tb" / "control"), size_guidance={IMAGES: 0})
    acc.Reload()
    images = acc.Images(M.IMG_STATE_COVERAGE)
    assert [im.step for im in images] == [384 * 2, 384 * 4] and images[0].width > 100


def test_gradient_agreement_of_identical_worker_batches_is_one():
    """The learner's agreement (mode central): each worker's gradient on its own samples at the
    update's start weights, then their mean pairwise cosine. The same samples from two workers
    agree fully; different samples do not."""
    import gymnasium as gym

    from hdppo.platform.batch import Batch, Rollout, RolloutStats
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService

    def rollout(worker, seed, n=128):
        rng = np.random.default_rng(seed)
        ids = np.stack([np.full(n, worker), np.zeros(n, np.int64), np.arange(n), np.zeros(n, np.int64)], axis=1)
        batch = Batch(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, (n, 1)).astype(np.float32),
                      np.full(n, np.log(0.5), np.float32), np.zeros(n, np.float32),
                      rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32),
                      versions=np.zeros(n, np.int64), ids=ids)
        return Rollout(batch, RolloutStats(worker=worker, version=0, env_steps=n, sample_s=0.0, num_samples=n))

    cfg = validate(tiny_config(diagnostics={"every": 1}))
    learner = Learner(cfg, 0, 4, gym.spaces.Discrete(2), ParameterService())
    same = (rollout(0, seed=1), rollout(1, seed=1))
    assert np.array_equal(same[0].batch.obs, same[1].batch.obs)
    assert learner._central_agreement(same, 0.0, 1.0, 0.01) == pytest.approx(1.0, abs=1e-5)
    assert learner._central_agreement((rollout(0, seed=1), rollout(1, seed=2)), 0.0, 1.0, 0.01) < 0.99
    # A whole update logs it, on the same weights as the check above (they start the update).
    assert learner.update_central(*same).metrics[M.DIAG_GRAD_COSINE] == pytest.approx(1.0, abs=1e-5)


def test_hierarchy_logs_coverage_for_every_layer(tmp_path):
    from conftest import ROOT
    from hdppo.platform.config import load_config

    cfg = load_config(ROOT / "configs" / "default.yaml", ["train.total_env_steps=3000", "train.eval_episodes=0",
                                                          "diagnostics.every=1", "ray.backend=local"])
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    try:
        trainer.train()
    finally:
        trainer.shutdown()
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    for layer in cfg.layers:
        acc = EventAccumulator(str(tmp_path / "run" / "tb" / layer.name), size_guidance={IMAGES: 0})
        acc.Reload()
        assert acc.Images(M.IMG_STATE_COVERAGE), layer.name


def test_coverage_image_is_drawn_beside_the_loop(tmp_path, monkeypatch, capsys):
    """MetricsWriter.coverage hands the drawing to a thread and returns; close waits for it. A
    drawing that fails raises at the next flush (the training loop flushes every update), and at
    close it is reported, not raised."""
    import threading

    from hdppo.platform import diagnostics

    release, drawn = threading.Event(), []

    def slow_image(points, workers, title=""):
        assert release.wait(10)
        drawn.append(title)
        return np.zeros((3, 8, 8), np.uint8)

    monkeypatch.setattr(diagnostics, "coverage_image", slow_image)
    w = M.MetricsWriter(tmp_path, ["control"])
    pts = np.zeros((4, 3))
    w.coverage("control", 10, pts, np.zeros(4))
    w.flush()  # does not wait for the drawing either
    assert drawn == []
    release.set()
    w.close()
    assert drawn == ["control, step 10"]
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / "control"), size_guidance={IMAGES: 0})
    acc.Reload()
    assert [im.step for im in acc.Images(M.IMG_STATE_COVERAGE)] == [10]

    def broken(points, workers, title=""):
        raise ValueError("no display")

    monkeypatch.setattr(diagnostics, "coverage_image", broken)
    (tmp_path / "b").mkdir()
    w = M.MetricsWriter(tmp_path / "b", ["control"])
    w.coverage("control", 20, pts, np.zeros(4))
    w._drawings[0].exception(timeout=10)  # let it fail
    with pytest.raises(ValueError, match="no display"):
        w.flush()
    w.coverage("control", 30, pts, np.zeros(4))
    w.close()
    assert "a state-coverage image was not written: ValueError('no display')" in capsys.readouterr().err


def test_the_coverage_embedding_runs_on_one_blas_thread(monkeypatch):
    """The driver's SVD must not start OpenBLAS threads that spin beside the learner."""
    from threadpoolctl import threadpool_info, threadpool_limits

    np.ones((4, 4)) @ np.ones((4, 4))
    if not any(i["user_api"] == "blas" for i in threadpool_info()):
        pytest.skip("numpy without a BLAS that threadpoolctl can see")
    seen = []
    svd = np.linalg.svd

    def spy(*args, **kwargs):
        seen.append([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"])
        return svd(*args, **kwargs)

    monkeypatch.setattr(np.linalg, "svd", spy)
    with threadpool_limits(limits=2, user_api="blas"):  # as the driver starts on 2+ cores
        xy = embed_2d(np.random.default_rng(0).normal(size=(64, 10)))
        assert all(i["num_threads"] == 2 for i in threadpool_info() if i["user_api"] == "blas")  # restored
    assert xy.shape == (64, 2) and seen and all(n == 1 for n in seen[0])


def test_the_coverage_drawing_thread_runs_at_the_lowest_priority():
    import os
    import sys
    import threading

    if not sys.platform.startswith("linux"):
        pytest.skip("per-thread nice values are Linux's")
    out = {}

    def probe():
        M._lowest_priority()
        out["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert out["nice"] == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) != 19  # the caller's thread is left alone


def test_a_rare_one_hot_cell_seen_by_one_worker_is_not_a_deviant_worker():
    """Three workers drawing the same one-hot observations: one of them saw a rare cell once. With a
    fixed 1e-6 on the variances that cell alone gave it 2.5 here (the others 0.005; 195 in a smaller
    run), more than a worker whose data is shifted by 3 standard deviations in 10 of the 50
    dimensions (0.94). With the floor at a quarter of the workers' pooled variance the rare cell
    stays small and the shifted worker stands out."""
    rng = np.random.default_rng(0)
    n, d = 2000, 50
    workers = []
    for w in range(3):
        x = np.zeros((n, d))
        x[np.arange(n), rng.integers(0, d - 1, n)] = 1.0   # the last cell is the rare one
        if w == 1:
            x[0] = 0.0
            x[0, d - 1] = 1.0
        workers.append(x)
    div = divergences([x.mean(0) for x in workers], [x.var(0) for x in workers])
    assert max(div) < 0.1, div
    shifted = [x.copy() for x in workers]
    shifted[2][:, :10] += 3.0 * workers[2][:, :10].std(0)
    div = divergences([x.mean(0) for x in shifted], [x.var(0) for x in shifted])
    assert div[2] > 5 * max(div[0], div[1]) and div[2] > 0.3, div
