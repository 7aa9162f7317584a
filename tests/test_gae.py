import numpy as np
import pytest

from hdppo.policies.gae import compute_gae


def test_gae_matches_hand_computed_case():
    # One env, three steps, no episode end; gamma 0.5, lambda 0.5.
    r = np.array([[1.0], [2.0], [3.0]])
    v = np.array([[0.5], [1.0], [1.5]])
    nv = np.array([[1.0], [1.5], [2.0]])  # V(s_{t+1}); the last is the bootstrap after the rollout
    zeros = np.zeros_like(r, dtype=bool)
    adv, ret = compute_gae(r, v, nv, zeros, zeros, gamma=0.5, lam=0.5)
    d = [1 + 0.5 * 1.0 - 0.5, 2 + 0.5 * 1.5 - 1.0, 3 + 0.5 * 2.0 - 1.5]  # 1.0, 1.75, 2.5
    a2 = d[2]
    a1 = d[1] + 0.25 * a2
    a0 = d[0] + 0.25 * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + v, rtol=1e-6)


def test_termination_does_not_bootstrap_and_cuts_the_trace():
    r = np.array([[1.0], [1.0]])
    v = np.array([[0.0], [0.0]])
    nv = np.array([[100.0], [7.0]])  # 100 must be ignored: step 0 terminated
    term = np.array([[True], [False]])
    adv, _ = compute_gae(r, v, nv, term, term, gamma=0.9, lam=1.0)
    assert adv[0, 0] == pytest.approx(1.0)          # no bootstrap, no flow from step 1
    assert adv[1, 0] == pytest.approx(1.0 + 0.9 * 7.0)


def test_truncation_bootstraps_from_final_value_but_cuts_the_trace():
    r = np.array([[1.0], [5.0]])
    v = np.array([[0.0], [0.0]])
    nv = np.array([[2.0], [0.0]])  # V(final obs) of the truncated episode
    term = np.array([[False], [False]])
    end = np.array([[True], [False]])
    adv, _ = compute_gae(r, v, nv, term, end, gamma=0.5, lam=1.0)
    assert adv[0, 0] == pytest.approx(1.0 + 0.5 * 2.0)  # bootstrapped, and step 1's reward not leaked
    assert adv[1, 0] == pytest.approx(5.0)


def test_per_transition_gamma_array():
    r = np.array([[1.0], [1.0]])
    v = np.zeros((2, 1))
    nv = np.array([[0.0], [10.0]])
    z = np.zeros((2, 1), bool)
    g = np.array([[0.5], [0.25]])
    adv, _ = compute_gae(r, v, nv, z, z, gamma=g, lam=1.0)
    assert adv[1, 0] == pytest.approx(1 + 0.25 * 10)
    assert adv[0, 0] == pytest.approx(1 + 0.5 * (1 + 0.25 * 10))


def test_dense_shortcut_equals_the_general_recursion():
    """decision_gae takes a shortcut when every lane decides on the same rows; a lane that never
    decides forces the general path, and the other lanes' advantages must not change."""
    from hdppo.policies.gae import decision_gae

    rng = np.random.default_rng(0)
    T, N = 30, 3
    r, v, b = rng.normal(size=(T, N)), rng.normal(size=(T, N)), rng.normal(size=(T, N))
    g = rng.uniform(0.5, 0.99, size=(T, N))
    stop = rng.random((T, N)) < 0.1
    term = stop & (rng.random((T, N)) < 0.5)
    ones = np.ones((T, N), bool)
    last = rng.normal(size=N)
    dense = decision_gae(r, v, g, 0.9, ones, ones, stop, term, b, last)
    pad = lambda a, fill: np.concatenate([a, np.full((T, 1), fill, a.dtype)], axis=1)  # noqa: E731
    decided = pad(ones, False)
    general = decision_gae(pad(r, 0.0), pad(v, 0.0), pad(g, 0.9), 0.9, decided, decided, pad(stop, False),
                           pad(term, False), pad(b, 0.0), np.append(last, 0.0))
    np.testing.assert_allclose(general[:, :N], dense, rtol=1e-12)
    assert (general[:, N] == 0).all()
