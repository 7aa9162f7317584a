"""Exploration bonuses as plug-ins: bonuses defined and registered in this file alone (no edit of
hdppo) are built by the runtime, and what they return reaches the logged rewards."""
import numpy as np
import pytest

from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import ExplorationSpec, validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.trainer import Trainer
from hdppo.policies.bonuses import Bonus, bonus_class, make_bonus, register_bonus, registered_bonuses


@register_bonus("test_constant")
class ConstantBonus(Bonus):
    """The coefficient itself, times ``params['scale']``, for every state."""

    def __call__(self, obs, coeff):
        return np.full(len(obs), coeff * self.spec.params.get("scale", 1.0), np.float32)


class LearnedCount(Bonus):
    """A bonus with a learner side: the learner counts its updates and publishes the count; a
    worker's bonus is the last count it adopted (so it is 0 until a worker loads a state)."""

    learned = True

    def __init__(self, spec, obs_dim, layer):
        super().__init__(spec, obs_dim, layer)
        self.updates = 0
        self.adopted = 0

    def __call__(self, obs, coeff):
        return np.full(len(obs), float(self.adopted), np.float32)

    def load_state(self, state):
        self.adopted = state

    def train(self, obs, num_epochs, num_minibatches, rng):
        self.updates += 1
        return 0.0

    def state(self):
        return self.updates

    def checkpoint(self):
        return {"updates": self.updates}

    def restore(self, state):
        self.updates = state["updates"]


def _bonus_series(tmp_path, exploration: dict, steps: int = 512) -> list[float]:
    cfg = validate(tiny_config(layers=[{"name": "control", "exploration": exploration,
                                        "ppo": {"minibatch_size": 64, "num_epochs": 2},
                                        "dppo": {"num_workers": 2, "num_envs_per_worker": 2,
                                                 "train_batch_size": 256}}],
                               train={"total_env_steps": steps, "checkpoint_every": 100, "eval_episodes": 0}))
    Trainer(cfg, tmp_path / "run", quiet=True).train()
    return [r["value"] for r in M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
            if r["layer"] == "control" and r["tag"] == M.CHART_EXPLORATION_BONUS]


def test_a_bonus_registered_by_a_test_file_reaches_the_rewards(tmp_path):
    exploration = {"type": "test_constant", "coeff": 0.25, "coeff_final": 0.25, "params": {"scale": 2.0}}
    series = _bonus_series(tmp_path, exploration)
    assert len(series) == 2 and series == pytest.approx([0.5, 0.5])
    # The chart reads the bonus part of each transition; the reward trained on (R, before
    # scaling) holds it too: CartPole's 1 per step, plus 0.5.
    from hdppo.platform.parameter_service import ParameterService
    from hdppo.platform.rollout_worker import RolloutWorker

    cfg = validate(tiny_config(layers=[{"name": "control", "exploration": exploration}]))
    sampler = RolloutWorker(cfg, ["control"], 0, 1, ParameterService()).sampler
    for _ in range(20):
        sampler.step()
    buf = sampler.buffers["control"]
    closed = buf.closed[:sampler.t]
    assert closed.sum() >= 19 * sampler.N
    assert np.all(buf.bonus[:sampler.t][closed] == 0.5) and np.all(buf.env_r[:sampler.t][closed] == 1.0)
    np.testing.assert_allclose(buf.R[:sampler.t][closed], 1.5)


def test_a_bonus_named_by_module_path_is_built_without_registering(tmp_path):
    # How a Ray worker finds a user's bonus: by importing it, nothing registered there.
    series = _bonus_series(tmp_path, {"type": "test_bonuses:ConstantBonus", "coeff": 0.125, "coeff_final": 0.125})
    assert series == pytest.approx([0.125, 0.125])


def test_a_learned_bonus_publishes_its_state_and_workers_adopt_it(tmp_path):
    # Update 1's rollouts were collected before any training: bonus 0 (a zero bonus is not logged).
    # Update 2's with the state the learner published after update 1: its count, 1, except for
    # each lane's first transition, opened at the end of the previous rollout.
    series = _bonus_series(tmp_path, {"type": "test_bonuses:LearnedCount"})
    assert len(series) == 1 and 0.9 < series[0] <= 1.0, series


def _rollout(n: int, worker: int = 0):
    """A rollout of ``n`` CartPole-sized samples (4 observations, 2 actions) from version 0."""
    from hdppo.platform.batch import Batch, Rollout, RolloutStats

    rng = np.random.default_rng(worker)
    ids = np.stack([np.full(n, worker), np.zeros(n, np.int64), np.arange(n), np.zeros(n, np.int64)], axis=1)
    batch = Batch(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, (n, 1)).astype(np.float32),
                  np.full(n, np.log(0.5), np.float32), np.zeros(n, np.float32), rng.normal(size=n).astype(np.float32),
                  rng.normal(size=n).astype(np.float32), versions=np.zeros(n, np.int64), ids=ids)
    return Rollout(batch, RolloutStats(worker=worker, version=0, env_steps=n, sample_s=0.0, num_samples=n))


def test_learned_bonus_on_the_learner(tmp_path):
    """The learner builds the learner side only for a learned bonus, trains it after each update
    and checkpoints it."""
    from hdppo.platform.learner import Learner
    import gymnasium as gym

    class Service:
        published: list = []

        def publish(self, *args):
            self.published.append(args)
            return args[1]

    cfg = validate(tiny_config(layers=[{"name": "control", "exploration": {"type": "test_bonuses:LearnedCount"}}]))
    learner = Learner(cfg, "control", 4, gym.spaces.Discrete(2), Service())
    assert isinstance(learner.bonus, LearnedCount)
    assert Service.published[-1][-1] == [0]   # the bonus state travels with each version
    # One update: the bonus is trained once, and its new state is published with version 1.
    learner.update_central(_rollout(64))
    assert learner.bonus.updates == 1 and Service.published[-1][1] == 1 and Service.published[-1][-1] == [1]
    # ... and checkpointed: a fresh learner restored from the state has the trained bonus.
    state = learner.get_state()
    assert state.get("bonus") == {"updates": 1}
    fresh = Learner(cfg, "control", 4, gym.spaces.Discrete(2), Service())
    fresh.set_state(state)
    assert fresh.bonus.updates == 1 and Service.published[-1][-1] == [1]
    cfg = validate(tiny_config(layers=[{"name": "control", "exploration": {"type": "test_constant"}}]))
    assert Learner(cfg, "control", 4, gym.spaces.Discrete(2), Service()).bonus is None


def test_unknown_bonus_names_list_the_registered_ones():
    with pytest.raises(ConfigError, match=r"exploration.type 'cuont' is not a registered bonus; registered: "
                       r"count, rnd, test_constant"):
        validate(tiny_config(layers=[{"name": "control", "exploration": {"type": "cuont"}}]))
    with pytest.raises(ConfigError, match="cannot import 'Nope' from 'test_bonuses'"):
        validate(tiny_config(layers=[{"name": "control", "exploration": {"type": "test_bonuses:Nope"}}]))
    assert {"count", "rnd", "test_constant"} <= set(registered_bonuses())


def test_a_learned_bonus_needs_mode_central():
    layer = {"name": "control", "exploration": {"type": "test_bonuses:LearnedCount"}, "dppo": {"mode": "dppo"}}
    with pytest.raises(ConfigError, match="'test_bonuses:LearnedCount' needs dppo.mode 'central'"):
        validate(tiny_config(layers=[layer]))
    layer["exploration"] = {"type": "test_constant"}
    validate(tiny_config(layers=[layer]))  # no learner side: any mode


def test_builtin_bonuses_through_the_factory():
    assert make_bonus(ExplorationSpec(), 3, "control") is None
    assert not bonus_class("count").learned and bonus_class("rnd").learned
    rnd = make_bonus(ExplorationSpec(type="rnd"), 5, "control")
    obs = np.random.default_rng(0).normal(size=(64, 5)).astype(np.float32)
    before = rnd(obs, 1.0)
    assert before.shape == (64,) and before.dtype == np.float32
    import torch

    loss = rnd.train(torch.as_tensor(obs), 5, 4, np.random.default_rng(0))
    worker = make_bonus(ExplorationSpec(type="rnd"), 5, "control")
    worker.load_state(rnd.state())
    with torch.no_grad():
        err = worker.rnd.error(torch.as_tensor(obs)).mean().item()
    assert err < loss * 1.5 and all(torch.equal(a, b) for a, b in
                                    zip(worker.rnd.predictor.state_dict().values(), rnd.rnd.predictor.state_dict().values()))
