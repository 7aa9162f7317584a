"""Real multi-agent envs through the one sampler: agents that die (KAZ, MAgent2), a central
critic on state() (MPE), trained for a few updates by config alone."""
import dataclasses

import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.hierarchies.engine import Sampler, Track
from hdppo.hierarchies.spec import probe_env
from hdppo.platform.config import validate
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.rollout_worker import RolloutWorker
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer, RewardScaler

KAZ = {"type": "pettingzoo", "id": "pettingzoo.butterfly.knights_archers_zombies_v11",
       "kwargs": {"obs_method": "vector", "max_zombies": 4, "max_cycles": 120, "spawn_delay": 5}}

SPREAD = {"type": "pettingzoo", "id": "mpe2.simple_spread_v3", "kwargs": {"N": 3, "max_cycles": 25}}


def layer(**over):
    return {"name": "control", "ppo": {"minibatch_size": 64, "num_epochs": 1},
            "dppo": {"num_workers": 1, "num_envs_per_worker": 2, "train_batch_size": 256}} | over


def seeded_sampler(env=KAZ, wrap=lambda venv: venv, deterministic=False):
    """A sampler over two copies of ``env`` (KAZ: agents die), its policy seeded: two calls sample alike."""
    cfg = validate(tiny_config(env=env, layers=[layer()]))
    venv, first, specs = probe_env(cfg, 0, 2)
    torch.manual_seed(0)
    pol = {s.name: ActorCritic(s.obs_dim, s.action_space) for s in specs}
    norms = {s.name: ObservationNormalizer((s.obs_dim,)) for s in specs}
    tracks = {"control": Track(0.99, 0.95, True, RewardScaler(0, 0.99))}
    return Sampler(specs, wrap(venv), pol, norms, tracks, first=first, deterministic=deterministic)


def test_agents_that_die_in_kaz_close_their_lanes_and_the_copy_goes_on():
    cfg = validate(tiny_config(env=KAZ, layers=[layer()]))
    venv, first, specs = probe_env(cfg, 0, 2)
    pol = {s.name: ActorCritic(s.obs_dim, s.action_space) for s in specs}
    norms = {s.name: ObservationNormalizer((s.obs_dim,)) for s in specs}
    tracks = {"control": Track(0.99, 0.95, True, RewardScaler(0, 0.99))}
    sampler = Sampler(specs, venv, pol, norms, tracks, first=first)
    torch.manual_seed(0)  # the random policy decides who dies: the same run whatever ran before
    partial = 0
    for _ in range(2000):
        sampler.step()
        alive = sampler.now.alive
        partial += int((alive.any(1) & ~alive.all(1)).any())  # some agent of a running copy is gone
        if partial >= 20:
            break
    batch = sampler.harvest()["control"].batch
    assert partial >= 20, "agents hardly died in 2000 steps: the test no longer covers deaths"
    buf = sampler.buffers["control"]
    assert np.isfinite(batch.advantages).all() and len(batch) > 100
    assert not (buf.open_row[~sampler.now.alive] >= 0).any()  # no open transition for a dead agent


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_magent2_battle_trains_by_config_alone(tmp_path, precision):
    """Also at learner.precision bf16, where the workers act with a bfloat16 first layer (wide rows)."""
    pytest.importorskip("magent2")
    env = {"type": "pettingzoo", "id": "magent2.environments.battle_v4", "kwargs": {"map_size": 20, "max_cycles": 40}}
    cfg = validate(tiny_config(env=env, layers=[layer(dppo={"num_workers": 1, "num_envs_per_worker": 2,
                                                            "train_batch_size": 960},
                                                      learner={"precision": precision})],
                               train={"total_env_steps": 160, "checkpoint_every": 100, "eval_episodes": 1}))
    w = RolloutWorker(cfg, ["control"], 0, 1, ParameterService())
    assert w.policies["control"].act_precision == precision
    r = w.sample()["control"]
    assert r.batch.obs.shape[1] == 13 * 13 * 5 and len(r.batch) >= 960
    # The act's log-probs are the learner's (at its precision) up to bfloat16's rounding.
    from hdppo.policies.networks import precision_context
    with torch.no_grad(), precision_context(precision, "cpu"):
        ref, _ = w.policies["control"].log_prob_entropy(torch.from_numpy(r.batch.obs), torch.from_numpy(r.batch.actions))
    np.testing.assert_allclose(r.batch.logp, ref.float().numpy(), atol=0.05 if precision == "bf16" else 1e-4)
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["updates"] >= 1 and np.isfinite(summary["eval_return_mean"])


def test_mpe_with_a_central_critic_on_state():
    pytest.importorskip("mpe2")
    cfg = validate(tiny_config(env=SPREAD, layers=[layer(policy={"central_critic": True})]))
    w = RolloutWorker(cfg, ["control"], 0, 1, ParameterService())
    r = w.sample()["control"]
    spec = w.specs[0]
    assert r.batch.critic_obs.shape == (len(r.batch), spec.critic_dim) and spec.critic_dim > spec.obs_dim
    # Three agents share one policy: a copy's step gives three samples.
    assert len(r.batch) == 3 * r.stats.env_steps


@pytest.mark.parametrize("env", [KAZ], ids=["kaz"])
def test_values_read_in_place_equal_the_gathered_ones(env, monkeypatch):
    """flush_values runs the critic on every row of a nearly dense block instead of gathering the
    decided rows, and wide layers take their values from a numpy critic beside the act: the values,
    advantages and returns must be those of the gathered path (agents die in KAZ, so some rows of
    the block are not decided and must keep no value)."""
    import hdppo.hierarchies.engine as engine

    def run(share, at_act_width=10**9):
        monkeypatch.setattr(engine, "DENSE_VALUE_SHARE", share)
        monkeypatch.setattr(engine, "VALUES_AT_ACT_MIN_WIDTH", at_act_width)
        sampler = seeded_sampler(env)
        assert sampler.buffers["control"].values_at_act == (at_act_width == 0)
        undecided = 0
        for _ in range(300):
            sampler.step()
            undecided += int((~sampler.buffers["control"].decided[sampler.t - 1]).any())
        return sampler.harvest()["control"].batch, undecided

    gathered, undecided = run(1.1)
    assert undecided > 0, "every row decided: the test no longer covers rows the dense pass must skip"
    for other in (run(0.0)[0], run(1.1, at_act_width=0)[0]):
        assert len(other) == len(gathered) and len(other) > 100
        np.testing.assert_array_equal(other.obs, gathered.obs)
        np.testing.assert_allclose(other.values, gathered.values, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(other.advantages, gathered.advantages, rtol=1e-4, atol=1e-5)



class _Scribbler:
    """A vector env whose arrays are valid only until its next step, as the interface allows
    (hdppo.envs.vector): it hands out copies and writes NaN over them on its next step."""

    FIELDS = ("obs", "alive", "acting", "masks", "state", "rewards", "terminated", "truncated", "final_obs",
              "final_state", "episode_end")

    def __init__(self, venv):
        self.venv, self.handed = venv, []

    def __getattr__(self, name):
        return getattr(self.venv, name)

    def _hand(self, res):
        for a in self.handed:
            a[...] = np.nan if a.dtype.kind == "f" else 1
        fresh = {f: getattr(res, f).copy() for f in self.FIELDS if getattr(res, f, None) is not None}
        self.handed = list(fresh.values())
        return dataclasses.replace(res, **fresh)

    def reset(self, seed=None):
        return self._hand(self.venv.reset(seed))

    def step(self, actions):
        return self._hand(self.venv.step(actions))


@pytest.mark.parametrize("env", [KAZ, SPREAD], ids=["kaz", "spread"])
def test_the_sampler_keeps_no_env_array_past_the_next_step(env):
    """An env may write every step into the arrays it returned the step before (magent_vector
    does): the batches must be those of an env that hands out new arrays. (KAZ: agents die, wide
    batches; simple_spread: few values a step, which the observation normalizer stashes.)"""
    if env is SPREAD:
        pytest.importorskip("mpe2")
    batches = []
    for wrap in (lambda venv: venv, _Scribbler):
        s = seeded_sampler(env, wrap)
        got = []
        for _ in range(2):
            for _ in range(80):
                s.step()
            got.append(s.harvest()["control"].batch)
        batches.append(got)
    for plain, scribbled in zip(*batches):
        assert len(plain) > 100
        for f in ("obs", "actions", "logp", "values", "advantages", "returns"):
            np.testing.assert_array_equal(getattr(scribbled, f), getattr(plain, f), err_msg=f)


def test_harvested_rows_reuse_an_array_only_once_nothing_holds_it(monkeypatch):
    """Wide harvested fields go into arrays kept from earlier harvests (no page faults on new
    memory): the rows must equal the plain boolean gather's, a batch still held (as a learner
    holds one) must never be written over by a later harvest, and a dropped one's array is reused."""
    import gc

    import hdppo.platform.array_pool as array_pool

    def sampler(min_bytes):
        monkeypatch.setattr(array_pool, "REUSE_MIN_BYTES", min_bytes)
        return seeded_sampler()

    def harvest(s):
        for _ in range(60):
            s.step()
        return s.harvest()["control"].batch.obs

    plain_sampler = sampler(1 << 60)
    plain = [harvest(plain_sampler).copy() for _ in range(4)]
    assert plain_sampler.buffers["control"].reuse.arrays == {} and len(plain[0]) > 100

    s = sampler(0)
    pool = s.buffers["control"].reuse.arrays
    h0, h1 = harvest(s), harvest(s)
    assert h0.base is pool["obs"][0] and h1.base is pool["obs"][1]
    h2 = harvest(s)  # both kept arrays held: a new one, not kept
    assert all(h2.base is not a for a in pool["obs"]) and len(pool["obs"]) == array_pool.REUSE_KEEP
    for got, want in zip((h0, h1, h2), plain):
        np.testing.assert_array_equal(got, want)  # held batches were not written over
    where0 = h0.__array_interface__["data"][0]
    del h0
    gc.collect()
    h3 = harvest(s)
    assert h3.__array_interface__["data"][0] == where0, "the dropped batch's array was not reused"
    np.testing.assert_array_equal(h3, plain[3])
    np.testing.assert_array_equal(h1, plain[1])


def test_acting_on_every_row_when_nearly_every_lane_is_due_changes_no_sample(monkeypatch):
    """Where most lanes but not all are due (agents dead in some copies), a wide layer acts on
    every row and keeps the due ones' results, its inputs normalised straight into the buffer and
    the statistics taken over the due rows: the batches must be the gathered path's, and that
    path must have been taken. Greedy actions, so that both paths draw alike; KAZ's greedy agents
    do not die, so every third step one lane sits out (as in a turn-based env)."""
    import hdppo.hierarchies.engine as engine

    monkeypatch.setattr(engine, "DENSE_ACT_MIN_WIDTH", 0)  # KAZ's rows are narrow
    monkeypatch.setattr(engine, "VALUES_AT_ACT_MIN_WIDTH", 0)  # and values at the act, fused, as on battle_v4
    shares = []
    due = engine.Sampler._due

    def some_out(self, *a):
        d = due(self, *a).copy()
        if self.t % 3 == 0:
            d[0, 1] = False
        shares.append(float(d.mean()))
        return d
    monkeypatch.setattr(engine.Sampler, "_due", some_out)
    runs = []
    for share in (1.1, engine.DENSE_ACT_SHARE):  # never, then the default
        monkeypatch.setattr(engine, "DENSE_ACT_SHARE", share)
        shares.clear()
        s = seeded_sampler(deterministic=True)
        got = []
        for _ in range(2):
            for _ in range(150):
                s.step()
            got.append(s.harvest()["control"].batch)
        runs.append((got, s.obs_norms["control"].current))
    assert sum(engine.DENSE_ACT_SHARE <= x < 1.0 for x in shares) > 20, "no step had most lanes but not all due"
    (gathered, g_stats), (dense, d_stats) = runs
    for a, b in zip(gathered, dense):
        assert len(a) == len(b) > 100
        np.testing.assert_array_equal(b.actions, a.actions)
        for f in ("obs", "logp", "values", "advantages"):
            np.testing.assert_allclose(getattr(b, f), getattr(a, f), rtol=1e-4, atol=1e-5, err_msg=f)
    assert d_stats.count == g_stats.count  # the undecided rows were not counted
    np.testing.assert_allclose(d_stats.mean, g_stats.mean, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(d_stats.var, g_stats.var, rtol=1e-4, atol=1e-7)
