import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.platform.config import validate
from hdppo.platform.learner import Learner
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import NUMPY_ACT_MAX_VALUES, ActorCritic, NumpyMLP, run_mlp, tanh_


@pytest.mark.parametrize("space", [gym.spaces.Box(-2.0, 2.0, (3,)), gym.spaces.Discrete(4, start=1),
                                   gym.spaces.MultiDiscrete([3, 2])], ids=["box", "discrete", "multidiscrete"])
def test_act_and_log_prob_agree(space):
    torch.manual_seed(0)
    net = ActorCritic(5, space)
    obs = torch.randn(7, 5)
    a, logp, v = net.act(obs)
    assert a.shape == (7, net.head.dim) and logp.shape == (7,) and v.shape == (7,)
    logp2, ent = net.log_prob_entropy(obs, torch.as_tensor(a))
    np.testing.assert_allclose(logp, logp2.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert (ent > 0).all()
    for env_action in net.head.to_env(a):
        assert space.contains(env_action if not isinstance(env_action, np.ndarray) else env_action.astype(space.dtype))



@pytest.mark.parametrize("nvec", [[3], [4, 2, 5]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_categorical_logp_entropy_is_torchs_categorical_exactly(nvec, dtype):
    """The written-out categorical gives the numbers and gradients of torch's Categorical, masked
    logits (MASKED_LOGIT) included, in float32 and bfloat16."""
    from torch.distributions import Categorical

    from hdppo.policies.networks import MASKED_LOGIT, categorical_logp_entropy

    torch.manual_seed(0)
    logits = (3 * torch.randn(64, sum(nvec))).to(dtype)
    logits[::3, 1] = MASKED_LOGIT  # an illegal action in every third row
    actions = torch.stack([torch.randint(0, n, (64,)) for n in nvec], dim=1).float()
    actions[::3, 0] = 0.0  # ... never the one taken
    mine_in = logits.clone().requires_grad_(True)
    theirs_in = logits.clone().requires_grad_(True)
    logp, ent = categorical_logp_entropy(mine_in, actions, nvec)
    dists = [Categorical(logits=c) for c in torch.split(theirs_in, nvec, dim=-1)]
    ref_logp = sum(d.log_prob(actions[:, i].long()) for i, d in enumerate(dists))
    ref_ent = sum(d.entropy() for d in dists)
    assert torch.equal(logp, ref_logp) and torch.equal(ent, ref_ent)
    (logp.sum() + 0.01 * ent.sum()).backward()
    (ref_logp.sum() + 0.01 * ref_ent.sum()).backward()
    assert torch.equal(mine_in.grad, theirs_in.grad)


def test_normal_logp_entropy_is_torchs_normal_exactly():
    """The written-out Gaussian gives the numbers and gradients of torch's Normal."""
    from torch.distributions import Normal

    from hdppo.policies.networks import normal_logp_entropy

    torch.manual_seed(0)
    mean, log_std, actions = torch.randn(64, 3), torch.randn(3) * 0.5, 2 * torch.randn(64, 3)
    ins = [(mean.clone().requires_grad_(True), log_std.clone().requires_grad_(True)) for _ in range(2)]
    (m1, s1), (m2, s2) = ins
    logp, ent = normal_logp_entropy(m1, s1.exp().expand_as(m1), actions)
    d = Normal(m2, s2.exp().expand_as(m2))
    ref_logp, ref_ent = d.log_prob(actions).sum(-1), d.entropy().sum(-1)
    assert torch.equal(logp, ref_logp) and torch.equal(ent, ref_ent)
    (logp.sum() + 0.01 * ent.sum()).backward()
    (ref_logp.sum() + 0.01 * ref_ent.sum()).backward()
    assert torch.equal(m1.grad, m2.grad) and torch.equal(s1.grad, s2.grad)

def test_deterministic_action_is_the_mode():
    net = ActorCritic(2, gym.spaces.Box(-1.0, 1.0, (2,)))
    obs = torch.randn(4, 2)
    a1, _, _ = net.act(obs, deterministic=True)
    a2, _, _ = net.act(obs, deterministic=True)
    np.testing.assert_array_equal(a1, a2)


def test_multidiscrete_env_learns_in_process(tmp_path):
    cfg = validate(tiny_config(env={"entry_point": "scripted_envs:multi_choice"},
                               layers=[{"ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 1e-3},
                                        "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512}}],
                               train={"total_env_steps": 15_000, "checkpoint_every": 100, "eval_episodes": 4}))
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 30  # max 40 (2 per step x 20); random scores about 16.7


def test_entropy_coefficient_decays_linearly_with_env_steps():
    cfg = validate(tiny_config(train={"total_env_steps": 1000}))
    learner = Learner(cfg, 0, 4, gym.spaces.Discrete(2), ParameterService())
    seen = []
    for steps in (0, 500, 1000, 2000):
        learner.env_steps = steps
        seen.append(learner.coefficients()["entropy_coeff"])
    np.testing.assert_allclose(seen, [0.01, 0.0055, 0.001, 0.001])
    cfg = validate(tiny_config(layers=[{"ppo": {"lr_schedule": "linear", "lr": 1e-3, "minibatch_size": 64},
                                        "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256}}],
                               train={"total_env_steps": 1000}))
    learner = Learner(cfg, 0, 4, gym.spaces.Discrete(2), ParameterService())
    learner.env_steps = 250
    assert learner.coefficients()["lr"] == pytest.approx(7.5e-4)


def test_reward_scope_global_merges_and_worker_scope_does_not(tmp_path):
    from hdppo.platform.rollout_worker import RolloutWorker

    for scope in ("worker", "global"):
        cfg = validate(tiny_config(layers=[{"normalization": {"reward_scope": scope}, "ppo": {"minibatch_size": 64},
                                            "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256}}]))
        svc = ParameterService()
        workers = [RolloutWorker(cfg, ["control"], i, 2, svc) for i in range(2)]
        learner = Learner(cfg, 0, 4, gym.spaces.Discrete(2), svc)
        learner.update_central(*[w.sample() for w in workers])
        merged = learner.reward_stats.count
        workers[0].sample()
        if scope == "global":
            assert merged == 256  # both workers' return statistics reached the learner
            assert workers[0].scalers['control'].stats.count == 256 + 128  # adopted the pool's, then its own
        else:
            assert merged == 0
            assert workers[0].scalers['control'].stats.count == pytest.approx(256 + 1e-4)  # its own two rollouts, over Gymnasium's prior


# ----------------------------------------------------------------------------- numpy inference

SPACES = [gym.spaces.Box(-2.0, 2.0, (3,)), gym.spaces.Discrete(4, start=1), gym.spaces.MultiDiscrete([3, 2])]
IDS = ["box", "discrete", "multidiscrete"]


@pytest.mark.parametrize("space", SPACES, ids=IDS)
def test_numpy_act_is_the_torch_act(space):
    """An MLP acts in numpy: its modes are torch's, and its log-probs are what the learner
    (torch) computes for the same actions; torch's own path samples the same distribution."""
    torch.manual_seed(1)
    net = ActorCritic(5, space, activation="relu")
    assert net._numpy_actor() is not None
    obs = torch.randn(6, 5)
    a, logp, v = net.act(obs)
    ref_logp, _ = net.log_prob_entropy(obs, torch.as_tensor(a))
    np.testing.assert_allclose(logp, ref_logp.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v, net.value(obs).detach().numpy(), rtol=1e-5, atol=1e-6)  # numpy's critic: float32 rounding
    np_mode, np_logp, _ = net.act(obs, deterministic=True)
    t_mode, t_logp, _ = net._act_torch(obs, deterministic=True)
    np.testing.assert_allclose(np_mode, t_mode, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np_logp, t_logp, rtol=1e-5, atol=1e-5)
    # Samples follow the distribution: a state where one action is far more likely picks it most.
    if space.__class__ is gym.spaces.Discrete:
        with torch.no_grad():
            net.actor[-1].bias.copy_(torch.tensor([0.0, 3.0, 0.0, 0.0]))
        picks, _, _ = net._act_torch(torch.zeros(4000, 5))  # torch's path
        small, _, _ = net.act(torch.zeros(1000, 5))  # numpy's
        for arr in (picks, small):
            assert 0.80 < (arr[:, 0] == 1).mean() < 0.90  # softmax([0, 3, 0, 0])[1] = 0.87


def test_numpy_act_honours_masks():
    net = ActorCritic(3, gym.spaces.Discrete(4))
    masks = torch.tensor([[0, 1, 0, 0], [1, 0, 0, 1]] * 50, dtype=torch.float32)
    a, logp, _ = net.act(torch.randn(100, 3), masks=masks)
    assert set(a[::2, 0].tolist()) == {1.0} and set(a[1::2, 0].tolist()) <= {0.0, 3.0}
    assert np.allclose(logp[::2], 0.0, atol=1e-5)


def test_numpy_act_sees_new_weights_and_moved_storage():
    torch.manual_seed(2)
    net, other = ActorCritic(4, gym.spaces.Box(-5, 5, (2,))), ActorCritic(4, gym.spaces.Box(-5, 5, (2,)))
    obs = torch.randn(3, 4)
    before, _, _ = net.act(obs, deterministic=True)
    net.load_state_dict(other.state_dict())  # in place: the numpy views follow
    after, _, _ = net.act(obs, deterministic=True)
    np.testing.assert_allclose(after, other._act_torch(obs, deterministic=True)[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(before, after)
    net.actor[0].weight.data = torch.zeros_like(net.actor[0].weight)  # new storage: views rebuilt
    moved, _, _ = net.act(obs, deterministic=True)
    np.testing.assert_allclose(moved, net._act_torch(obs, deterministic=True)[0], rtol=1e-5, atol=1e-6)


def test_numpy_act_takes_numpy_inputs_and_follows_a_new_log_std():
    """The sampler passes numpy arrays: the same actions and log-probs as torch inputs; and the
    Gaussian head's cached std and log-prob constant follow log_std when it changes in place
    (load_state_dict, an optimizer step) or moves."""
    torch.manual_seed(4)
    net = ActorCritic(4, gym.spaces.Box(-5, 5, (3,)))
    obs = torch.randn(6, 4)
    x = obs.numpy()
    np.testing.assert_array_equal(net.act(x, deterministic=True)[0], net.act(obs, deterministic=True)[0])
    np.testing.assert_allclose(net.act(x, deterministic=True)[1], net._act_torch(obs, deterministic=True)[1], rtol=1e-6)
    a, logp, v = net.act(x, with_value=True)
    ref, _ = net.log_prob_entropy(obs, torch.as_tensor(a))
    np.testing.assert_allclose(logp, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v, net.value(obs).detach().numpy(), rtol=1e-5, atol=1e-6)  # numpy's critic: float32 rounding
    before = net.act(x, deterministic=True)[1]
    with torch.no_grad():  # in place, as an optimizer step
        net.log_std.add_(torch.tensor([0.5, -0.25, 1.0]))
    after = net.act(x, deterministic=True)[1]
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, net._act_torch(obs, deterministic=True)[1], rtol=1e-6)
    a, logp, _ = net.act(x)
    ref, _ = net.log_prob_entropy(obs, torch.as_tensor(a))
    np.testing.assert_allclose(logp, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    net.log_std.data = torch.full((3,), -1.0)  # new storage
    np.testing.assert_allclose(net.act(x, deterministic=True)[1], net._act_torch(obs, deterministic=True)[1], rtol=1e-6)


def test_numpy_act_is_seeded_by_torch():
    def draw():
        torch.manual_seed(7)
        net = ActorCritic(4, gym.spaces.Box(-1, 1, (2,)))
        return net.act(torch.ones(5, 4))[0]
    np.testing.assert_array_equal(draw(), draw())


@pytest.mark.parametrize("chw, last, channels, extra", [((4, 10, 10), True, [16], 0), ((5, 13, 13), True, [8, 8], 3),
                                                        ((3, 12, 9), False, [6], 2)],
                         ids=["minatar", "magent-with-command", "chw-nonsquare"])
def test_numpy_act_runs_small_image_encoders(chw, last, channels, extra):
    """A CNN actor on small images acts in numpy too (im2col convs): the same modes and log-probs
    as torch, for channels-last and channels-first images, non-square ones, two conv layers and
    a command beside the image; and it follows new weights loaded in place."""
    torch.manual_seed(3)
    enc = {"kind": "cnn", "chw": chw, "channels_last": last, "channels": channels, "features": 32}
    pixels = int(np.prod(chw))
    net = ActorCritic(pixels + extra, gym.spaces.Discrete(5), hidden=[16], activation="relu", encoder=enc)
    assert net._numpy_actor() is not None
    obs = torch.rand(4, pixels + extra)
    np_mode, np_logp, _ = net.act(obs, deterministic=True)
    t_mode, t_logp, _ = net._act_torch(obs, deterministic=True)
    np.testing.assert_array_equal(np_mode, t_mode)
    np.testing.assert_allclose(np_logp, t_logp, rtol=1e-5, atol=1e-5)
    a, logp, _ = net.act(obs)
    ref, _ = net.log_prob_entropy(obs, torch.as_tensor(a))
    np.testing.assert_allclose(logp, ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    other = ActorCritic(pixels + extra, gym.spaces.Discrete(5), hidden=[16], activation="relu", encoder=enc)
    net.load_state_dict(other.state_dict())  # in place: the rearranged kernels are rebuilt
    np.testing.assert_allclose(net.act(obs, deterministic=True)[1], other._act_torch(obs, deterministic=True)[1],
                               rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # an optimizer-style in-place step is seen too
        net.actor[0].convs[0].weight.mul_(-1.5)
    np.testing.assert_allclose(net.act(obs, deterministic=True)[1], net._act_torch(obs, deterministic=True)[1],
                               rtol=1e-5, atol=1e-5)


def test_a_plain_mlp_acts_in_numpy_at_any_width(monkeypatch):
    """192 MAgent2 views of 845 values: numpy's act, whose log-probs are the learner's."""
    torch.manual_seed(2)
    net = ActorCritic(845, gym.spaces.Discrete(21), hidden=[64, 64])
    obs = np.random.default_rng(0).random((192, 845), dtype=np.float32)
    assert obs.size > NUMPY_ACT_MAX_VALUES

    def no_torch(*a, **k):
        raise AssertionError("a plain MLP went to torch's act")
    monkeypatch.setattr(net, "_act_torch", no_torch)
    a, logp, _ = net.act(obs)
    ref, _ = net.log_prob_entropy(torch.from_numpy(obs), torch.as_tensor(a))
    np.testing.assert_allclose(logp, ref.detach().numpy(), rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize("hidden", [[64, 64], []], ids=["hidden", "linear"])
@pytest.mark.parametrize("space", [gym.spaces.Discrete(21), gym.spaces.Box(-1, 1, (3,))], ids=["discrete", "box"])
def test_values_at_act_come_from_one_product_with_the_actor(hidden, space):
    """With values, numpy's act multiplies the rows by the actor's and critic's first layers side
    by side (FusedFirstLayer): its actions, log-probs and values must be the unfused ones, before
    and after new weights arrive; a central critic (another input) is not fused."""
    from hdppo.policies.networks import FusedFirstLayer

    torch.manual_seed(3)
    net = ActorCritic(300, space, hidden=hidden)
    other = ActorCritic(300, space, hidden=hidden)
    obs = np.random.default_rng(1).random((50, 300), dtype=np.float32)
    for _ in range(2):
        a, logp, v = net.act(obs, deterministic=True)
        assert isinstance(net.__dict__.get("_fused_first"), FusedFirstLayer)
        ref_a, ref_logp, _ = net._act_torch(torch.from_numpy(obs), deterministic=True, with_value=False)
        np.testing.assert_allclose(a, ref_a, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(logp, ref_logp, rtol=1e-4, atol=1e-5)
        with torch.no_grad():
            np.testing.assert_allclose(v, net.value(torch.from_numpy(obs)).numpy(), rtol=1e-5, atol=1e-5)
        net.load_state_dict(other.state_dict())  # new weights: the side-by-side ones are made again
    central = ActorCritic(300, space, hidden=hidden, critic_dim=7)
    central.act(obs, critic_obs=np.ones((50, 7), np.float32))
    assert "_fused_first" not in central.__dict__



@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_fused_first_layer_rounds_as_the_learner_does(precision):
    """A worker whose learner computes in bfloat16 acts with its first layer in bfloat16 too
    (inputs and weights rounded, as under the learner's autocast), the rest in float32; at float32
    the act is float32 throughout. Checked against torch computing each way, on battle_v4's width."""
    torch.manual_seed(4)
    net = ActorCritic(845, gym.spaces.Discrete(21), hidden=[64, 64])
    net.act_precision = precision
    obs = np.random.default_rng(2).random((192, 845), dtype=np.float32)
    a, logp, v = net.act(obs, deterministic=True)
    x = torch.from_numpy(obs)

    def through(seq, rounded):
        first = seq[0]
        h = ((x.bfloat16() @ first.weight.T.bfloat16()).float() if rounded else x @ first.weight.T) + first.bias
        return seq[1:](h)

    with torch.no_grad():
        for rounded in (False, True):
            logits, value = through(net.actor, rounded), through(net.critic, rounded)[:, 0]
            log_probs = torch.log_softmax(logits, -1)
            if rounded == (precision == "bf16"):  # the act's own arithmetic: equal up to float32 sums
                np.testing.assert_allclose(v, value.numpy(), rtol=1e-4, atol=1e-5)
                np.testing.assert_array_equal(a[:, 0], log_probs.argmax(-1).numpy())
                np.testing.assert_allclose(logp, log_probs.max(-1).values.numpy(), atol=1e-5)
            else:  # the other one's: visibly apart (bfloat16 keeps 8 bits of mantissa)
                assert np.abs(v - value.numpy()).max() > 1e-4


def test_large_images_and_padded_convs_stay_in_torch():
    enc = {"kind": "cnn", "chw": (3, 84, 84), "channels_last": False, "channels": [8], "features": 16}
    net = ActorCritic(3 * 84 * 84, gym.spaces.Discrete(3), hidden=[], activation="relu", encoder=enc)
    assert net._numpy_actor() is not None          # it could, but 4 rows of 21k values go to torch:
    assert 4 * 3 * 84 * 84 > NUMPY_ACT_MAX_VALUES
    small = ActorCritic(400, gym.spaces.Discrete(3), hidden=[], encoder={**enc, "chw": (4, 10, 10), "channels_last": True})
    small.actor[0].convs[0].padding = (1, 1)
    assert NumpyMLP.build(small.actor) is None


def test_tanh_in_place_through_numpy_matches_torch_and_leaves_what_it_must_alone():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(512, 64, generator=g) * 3
    ref = torch.tanh(z)
    out = tanh_(z)
    assert out is z  # fresh float32 CPU block: written in place
    torch.testing.assert_close(out, ref, rtol=0, atol=3e-7)
    # A tensor autograd tracks: torch's tanh, a new tensor with its gradient.
    x = (torch.randn(8, 4, generator=g)).requires_grad_()
    y = tanh_(x)
    assert y is not x and y.grad_fn is not None
    y.sum().backward()
    torch.testing.assert_close(x.grad, 1 - torch.tanh(x.detach()) ** 2)
    for other in (torch.randn(8, 4, generator=g).bfloat16(), torch.randn(4, 8, generator=g).t()):  # not float32 / not contiguous
        before = other.clone()
        assert torch.equal(tanh_(other).float(), torch.tanh(before).float()) and torch.equal(other, before)


def test_run_mlp_never_writes_into_its_input():
    # A Sequential that starts with Tanh gets the caller's tensor there: torch.tanh, not in place.
    seq = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    before = x.clone()
    with torch.no_grad():
        out = run_mlp(seq, x)
        ref = seq(before)
    assert torch.equal(x, before)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
