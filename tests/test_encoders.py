"""Policy encoders: the CNN's layout detection and output shapes, and a CNN policy that trains."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from conftest import tiny_config
from hdppo.hierarchies.spec import probe_env
from hdppo.platform.config import validate
from hdppo.platform.errors import ConfigError
from hdppo.platform.trainer import Trainer
from hdppo.policies.networks import ActorCritic, ImageEncoder, image_layout


@pytest.mark.parametrize("shape,chw,last", [
    ((10, 10, 4), (4, 10, 10), True),     # MinAtar
    ((13, 13, 5), (5, 13, 13), True),     # MAgent2 view
    ((84, 84, 3), (3, 84, 84), True),     # Atari-sized HWC
    ((3, 84, 84), (3, 84, 84), False),    # the same, CHW
    ((4, 10, 10), (4, 10, 10), False),
    ((8, 8, 12), (12, 8, 8), True),       # four stacked RGB frames: it was read as CHW, 8 channels of 8x12
    ((210, 160, 3), (3, 210, 160), True),
    ((3, 210, 160), (3, 210, 160), False),
])
def test_image_layout_is_detected(shape, chw, last):
    assert image_layout(shape) == (chw, last)


@pytest.mark.parametrize("shape", [(10, 10, 4), (13, 13, 5), (84, 84, 3), (3, 84, 84), (5, 7, 2)])
@pytest.mark.parametrize("extra", [0, 6])
def test_cnn_output_shape(shape, extra):
    chw, last = image_layout(shape)
    enc = ImageEncoder(chw, last, (16, 32, 32), 64)
    x = torch.rand(5, int(np.prod(shape)) + extra)
    out = enc(x)
    assert out.shape == (5, 64 + extra) and enc.out_dim(x.shape[1]) == 64 + extra
    # The pass-through part (command, agent id) arrives unchanged after the features.
    torch.testing.assert_close(out[:, 64:], x[:, x.shape[1] - extra:])
    assert enc(x.reshape(1, 5, -1)).shape == (1, 5, 64 + extra)  # leading dims kept


def test_hwc_and_chw_read_the_same_image():
    torch.manual_seed(0)
    chw_enc = ImageEncoder((4, 10, 10), False, (8,), 16)
    hwc_enc = ImageEncoder((4, 10, 10), True, (8,), 16)
    hwc_enc.load_state_dict(chw_enc.state_dict())
    img = torch.rand(3, 4, 10, 10)
    torch.testing.assert_close(chw_enc(img.reshape(3, -1)), hwc_enc(img.permute(0, 2, 3, 1).reshape(3, -1)))



def _nchw_reference(enc: ImageEncoder, weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The encoder as it computed before its maps were flattened in (H, W, C) order."""
    c, h, w = enc.chw
    img = x.reshape(-1, h, w, c).permute(0, 3, 1, 2) if enc.channels_last else x.reshape(-1, c, h, w)
    return enc.act(torch.nn.functional.linear(enc.convs(img).flatten(1), weight, bias))  # an empty Sequential: identity


@pytest.mark.parametrize("chw,last,channels", [((4, 10, 10), True, (16,)), ((3, 12, 9), False, (8, 6)),
                                               ((3, 2, 2), True, (8,))])  # the last: no conv fits
def test_weights_saved_in_the_old_layout_compute_what_they_did(chw, last, channels):
    torch.manual_seed(0)
    enc = ImageEncoder(chw, last, channels, 32)
    old = {k: v for k, v in enc.state_dict().items() if not k.startswith("dense.")}
    old["linear.weight"] = torch.randn_like(enc.dense.weight) * 0.05  # columns in (C, H, W) order
    old["linear.bias"] = torch.randn_like(enc.dense.bias)
    x = torch.rand(5, int(np.prod(chw)))
    fresh = ImageEncoder(chw, last, channels, 32)
    fresh.load_state_dict(old)  # strict: the old keys are converted, not left over
    torch.testing.assert_close(fresh(x), _nchw_reference(enc, old["linear.weight"], old["linear.bias"], x))
    # A new-layout state dict loads as it is.
    again = ImageEncoder(chw, last, channels, 32)
    again.load_state_dict(fresh.state_dict())
    torch.testing.assert_close(again(x), fresh(x))


def test_an_old_layout_checkpoint_fits_the_network_and_resumes_with_its_moments():
    from hdppo.platform.checkpoint import policy_mismatch
    from hdppo.policies.networks import upgrade_image_encoders, upgrade_moments

    enc = {"kind": "cnn", "chw": (4, 10, 10), "channels_last": True, "channels": [8], "features": 16}
    net = ActorCritic(400, gym.spaces.Discrete(3), (16,), encoder=enc)
    opt = torch.optim.Adam(net.parameters())
    obs = torch.rand(4, 400)
    (net.log_prob_entropy(obs, torch.zeros(4, 1))[0].sum() + net.value(obs).sum()).backward()
    opt.step()
    new = net.state_dict()
    dense = [k for k in new if k.endswith("dense.weight")]
    assert len(dense) == 2  # the actor's and the critic's encoders
    # The same checkpoint as it would have been written before: 'linear', columns in (C, H, W) order.
    to_old = lambda t: t.reshape(t.shape[0], 8 * 8, 8).transpose(1, 2).reshape(t.shape[0], -1)  # noqa: E731
    old = {k.replace("dense.", "linear."): (to_old(v) if k in dense else v) for k, v in new.items()}
    assert policy_mismatch(old, {k: list(v.shape) for k, v in new.items()}) is None
    converted, keys = upgrade_image_encoders(old)
    assert sorted(keys) == sorted(dense)
    for k in new:
        torch.testing.assert_close(converted[k], new[k])
    index = {n: i for i, (n, _) in enumerate(net.named_parameters())}
    opt_old = opt.state_dict()
    for k in dense:
        for m in ("exp_avg", "exp_avg_sq"):
            opt_old["state"][index[k]][m] = to_old(opt_old["state"][index[k]][m])
    upgrade_moments(net, opt_old, keys, old)
    for k in dense:
        for m in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt_old["state"][index[k]][m], opt.state_dict()["state"][index[k]][m])
@pytest.mark.parametrize("space", [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,))], ids=["discrete", "box"])
def test_cnn_actor_critic_acts_and_scores(space):
    enc = {"kind": "cnn", "chw": (5, 13, 13), "channels_last": True, "channels": [8, 8], "features": 32}
    net = ActorCritic(13 * 13 * 5 + 3, space, (32,), encoder=enc)
    obs = torch.rand(6, 13 * 13 * 5 + 3)
    a, logp, v = net.act(obs)
    assert a.shape == (6, net.head.dim) and logp.shape == (6,) and v.shape == (6,)
    logp2, _ = net.log_prob_entropy(obs, torch.as_tensor(a))
    np.testing.assert_allclose(logp, logp2.detach().numpy(), rtol=1e-5, atol=1e-5)


def _lit_side_config(**policy):
    return validate(tiny_config(
        env={"entry_point": "scripted_envs:lit_side", "kwargs": policy.pop("env_kwargs", {})},
        layers=[{"name": "control", "policy": {"encoder": "cnn", "cnn_channels": [8, 8], "cnn_features": 32,
                                               "hidden": [32], **policy},
                 "ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 1e-3},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512}}],
        train={"total_env_steps": 10_000, "checkpoint_every": 100, "eval_episodes": 4}))


@pytest.mark.parametrize("chw", [False, True], ids=["hwc", "chw"])
def test_image_shape_is_inferred_from_a_rank_3_box(chw):
    venv, _, specs = probe_env(_lit_side_config(env_kwargs={"chw": chw}), 0)
    venv.close()
    assert specs[0].encoder["chw"] == (2, 8, 8) and specs[0].encoder["channels_last"] is (not chw)


def test_the_image_of_a_dict_observation_is_read_where_its_key_sorts():
    """{agent_pos, image}: the flat input is agent_pos then the image, and the CNN read the first
    128 values, an image shifted by two with its channels mixed, while training went on."""
    venv, _, specs = probe_env(_lit_side_config(env_kwargs={"keyed": True}), 0)
    venv.close()
    enc = specs[0].encoder
    assert enc["offset"] == 2 and enc["chw"] == (2, 8, 8) and enc["channels_last"] is True
    torch.manual_seed(0)
    first = ImageEncoder((2, 8, 8), True, (4, 4), 16)
    second = ImageEncoder((2, 8, 8), True, (4, 4), 16, offset=2)
    second.load_state_dict(first.state_dict())
    img, pos, cmd = torch.rand(5, 128), torch.rand(5, 2), torch.rand(5, 3)
    want = first(torch.cat([img, pos, cmd], 1))                  # [z, pos, cmd]
    got = second(torch.cat([pos, img, cmd], 1))                  # the same: z, then the rest in its order
    torch.testing.assert_close(got, want)
    from hdppo.policies.networks import NumpyMLP
    fast = NumpyMLP.build(torch.nn.Sequential(second))
    np.testing.assert_allclose(fast(torch.cat([pos, img, cmd], 1).numpy()), want.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_cnn_learns_from_the_image_key_of_a_dict_observation(tmp_path):
    summary = Trainer(_lit_side_config(env_kwargs={"keyed": True}), tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 17  # max 20; random play about 10 (and so it was, reading agent_pos)


def test_an_image_shape_other_than_the_envs_image_is_refused():
    # [4, 4, 2] used to be accepted: the first 32 of the 128 values were read as a 4x4 image
    venv, _, specs = probe_env(_lit_side_config(image_shape=[8, 8, 2]), 0)
    venv.close()
    assert specs[0].encoder["chw"] == (2, 8, 8)
    for shape in ([4, 4, 2], [2, 8, 8]):
        with pytest.raises(ConfigError, match=r"policy.image_shape.*not the shape of this env's image observation "
                                              r"\[8, 8, 2\]"):
            probe_env(_lit_side_config(image_shape=shape), 0)


def test_cnn_on_a_flat_observation_asks_for_image_shape():
    cfg = validate(tiny_config(layers=[{"name": "control", "policy": {"encoder": "cnn"}}]))
    with pytest.raises(ConfigError, match="policy.image_shape"):
        probe_env(cfg, 0)


def test_cnn_policy_learns_to_read_an_image(tmp_path):
    summary = Trainer(_lit_side_config(), tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 17  # max 20; random play about 10


@pytest.mark.parametrize("sync,mode", [("sync", "central"), ("pipeline", "central"), ("soft", "central"),
                                       ("async", "central"), ("sync", "dppo")])
def test_cnn_policy_in_every_sync_mode(tmp_path, sync, mode):
    cfg = validate(tiny_config(
        env={"entry_point": "scripted_envs:lit_side"},
        layers=[{"name": "control", "policy": {"encoder": "cnn", "cnn_channels": [4], "cnn_features": 8, "hidden": [8]},
                 "ppo": {"minibatch_size": 32, "num_epochs": 1},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 128, "sync": sync, "mode": mode}}],
        train={"total_env_steps": 384, "checkpoint_every": 100, "eval_episodes": 1}))
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    assert summary["env_steps"] >= 384


# -- the GRU building blocks (policy.encoder 'gru' is not yet wired into the sampler) -----------

@pytest.mark.parametrize("central", [False, True], ids=["own_critic", "central_critic"])
@pytest.mark.parametrize("cnn", [None, {"kind": "cnn", "chw": (2, 5, 5), "channels_last": True, "channels": [4],
                                        "features": 8}], ids=["flat", "cnn"])
def test_gru_replay_matches_stepping(central, cnn):
    """Chunk replay from the stored hidden equals what act() computed step by step, resets included."""
    from hdppo.policies.networks import RecurrentActorCritic

    torch.manual_seed(0)
    D = 53 if cnn else 6
    net = RecurrentActorCritic(D, gym.spaces.Discrete(3), (16,), critic_dim=4 if central else None,
                               gru_hidden=8, cnn=cnn)
    T, B = 7, 3
    obs, crit = torch.randn(T, B, D), torch.randn(T, B, 4)
    first = torch.zeros(T, B, dtype=torch.bool)
    first[0] = True
    first[4, 1] = True  # an episode of lane 1 starts at step 4
    h = torch.as_tensor(net.initial_hidden(B))
    h_in, acts, logps, vals = [], [], [], []
    for t in range(T):
        h = torch.where(first[t].unsqueeze(-1), torch.zeros_like(h), h)
        h_in.append(h)
        a, logp, v, h_next = net.act(obs[t], h, critic_obs=crit[t] if central else None)
        acts.append(torch.as_tensor(a)), logps.append(logp), vals.append(v)
        h = torch.as_tensor(h_next)
    # Chunks of 3 from step 1 (a chunk starting mid-sequence replays from its stored hidden).
    lo, hi = 1, 4
    seq = lambda x: x[lo:hi].transpose(0, 1)  # noqa: E731  [B, C, ...]
    logp, ent, v = net.replay(seq(obs), h_in[lo], seq(first), seq(torch.stack(acts)),
                              critic_obs=seq(crit) if central else None)
    np.testing.assert_allclose(logp.detach().numpy(), np.stack(logps)[lo:hi].T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(v.detach().numpy(), np.stack(vals)[lo:hi].T, rtol=1e-4, atol=1e-5)
    lo, hi = 3, 7  # across lane 1's reset
    logp, _, v = net.replay(seq(obs), h_in[lo], seq(first), seq(torch.stack(acts)),
                            critic_obs=seq(crit) if central else None)
    np.testing.assert_allclose(logp.detach().numpy(), np.stack(logps)[lo:hi].T, rtol=1e-4, atol=1e-5)
    # The stored-hidden value of one step needs no sequence.
    np.testing.assert_allclose(net.value(obs[5], h_in[5], crit[5] if central else None).detach().numpy(), vals[5],
                               rtol=1e-4, atol=1e-5)


def test_gru_replay_backpropagates_through_time():
    from hdppo.policies.networks import RecurrentActorCritic

    torch.manual_seed(0)
    net = RecurrentActorCritic(3, gym.spaces.Discrete(2), (8,), gru_hidden=8)
    obs = torch.randn(2, 5, 3, requires_grad=True)
    first = torch.zeros(2, 5, dtype=torch.bool)
    first[1, 3] = True
    logp, _, _ = net.replay(obs, torch.zeros(2, 16), first, torch.zeros(2, 5, 1))
    logp[:, -1].sum().backward()
    assert obs.grad[0, 0].abs().sum() > 0          # the last step's loss reaches the first step
    assert obs.grad[1, :3].abs().sum() == 0        # but not across an episode start


def test_sequence_chunks_cover_every_sample_once_in_step_order():
    from hdppo.policies.networks import sequence_chunks

    rng = np.random.default_rng(0)
    rows = [(w, c, s, l) for w in range(2) for c in range(2) for l in range(3) for s in range(rng.integers(1, 9))]
    ids = np.array(rows, np.int64)[rng.permutation(len(rows))]
    index, valid = sequence_chunks(ids, 4)
    assert index.shape[1] == 4 and sorted(index[valid].tolist()) == list(range(len(ids)))
    for row, ok in zip(index, valid):
        picked = ids[row[ok]]
        assert ok[: ok.sum()].all()                              # padding only at the end
        assert (picked[:, [0, 1, 3]] == picked[0, [0, 1, 3]]).all()  # one lane
        assert (np.diff(picked[:, 2]) > 0).all()                 # in step order


def _memory_config(encoder: str, steps: int):
    return validate(tiny_config(
        env={"entry_point": "scripted_envs:remember_bit"},
        layers=[{"name": "control", "policy": {"encoder": encoder, "hidden": [32], "gru_hidden": 32, "seq_len": 8},
                 "ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 2e-3, "gamma": 0.9},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 8, "train_batch_size": 512}}],
        train={"total_env_steps": steps, "checkpoint_every": 100, "eval_episodes": 40}))


def test_gru_remembers_what_an_mlp_cannot(tmp_path):
    """The cue is shown at step 0 and must be named at step 3: a memoryless policy scores 0.5."""
    gru = Trainer(_memory_config("gru", 10_000), tmp_path / "gru", quiet=True).train()
    mlp = Trainer(_memory_config("mlp", 10_000), tmp_path / "mlp", quiet=True).train()
    assert gru["eval_return_mean"] >= 0.9, gru["eval_return_mean"]
    assert mlp["eval_return_mean"] <= 0.75, mlp["eval_return_mean"]


def test_gru_refuses_export(tmp_path):
    from hdppo.platform.errors import ExportError
    from hdppo.platform.export import export_layer

    with pytest.raises(ExportError, match="recurrent policy"):
        export_layer(_memory_config("gru", 512), {}, "control", "torchscript", tmp_path / "x.pt")


def test_gru_dppo_gradient_equals_central_gradient():
    """Workers replaying their own chunks give, averaged by samples, the central gradient."""
    from hdppo.platform.batch import Batch, advantage_moments
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService
    from hdppo.platform.rollout_worker import RolloutWorker
    from hdppo.policies.ppo_update import average_gradients

    cfg = validate(tiny_config(layers=[{"name": "control", "policy": {"encoder": "gru", "gru_hidden": 8, "seq_len": 5},
                                        "ppo": {"minibatch_size": 64},
                                        "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 256,
                                                 "mode": "dppo"}}]))
    svc = ParameterService()
    workers = [RolloutWorker(cfg, ["control"], i, 2, svc) for i in range(2)]
    spec = workers[0].specs[0]
    learner = Learner(cfg, 0, spec.obs_dim, spec.action_space, svc, encoder=spec.encoder)
    for w in workers:
        w.policies["control"].requires_grad_(True)
    rollouts = [w.sample()["control"] for w in workers]
    mean, std = advantage_moments([r.stats for r in rollouts])
    central = learner.gradient(Batch.concat([r.batch for r in rollouts]), mean, std, 0.01)
    parts = [w.gradient(learner.weights(), 0, 0, 1, mean, std, 0.01) for w in workers]
    assert [p.num_samples for p in parts] == [len(r.batch) for r in rollouts]
    for x, y in zip(average_gradients([p.grads for p in parts], [p.num_samples for p in parts]), central):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in central)


def test_cnn_then_gru_trains(tmp_path):
    cfg = validate(tiny_config(
        env={"entry_point": "scripted_envs:lit_side"},
        layers=[{"name": "control", "policy": {"encoder": "cnn_gru", "cnn_channels": [4], "cnn_features": 8,
                                               "gru_hidden": 8, "seq_len": 4, "hidden": [8]},
                 "ppo": {"minibatch_size": 32, "num_epochs": 1},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 128}}],
        train={"total_env_steps": 384, "checkpoint_every": 100, "eval_episodes": 1}))
    venv, _, specs = probe_env(cfg, 0)
    venv.close()
    assert specs[0].encoder["kind"] == "gru" and specs[0].encoder["cnn"]["chw"] == (2, 8, 8)
    assert Trainer(cfg, tmp_path / "run", quiet=True).train()["env_steps"] >= 384


# -- policy.encoder 'set' --------------------------------------------------------------------
def _set_policy(items: int, features: int = 3, extra: int = 1, hidden=(16, 16), attention: int = 0) -> ActorCritic:
    return ActorCritic(items * features + extra, gym.spaces.Discrete(items), hidden,
                       encoder={"kind": "set", "items": items, "features": features, "attention": attention,
                                "heads": 4})


@pytest.mark.parametrize("attention", [0, 2])
def test_set_actor_is_permutation_equivariant_and_critic_invariant(attention):
    torch.manual_seed(0)
    pol = _set_policy(6, attention=attention)
    if attention:  # the blocks start as the identity; perturb them so that they take part
        with torch.no_grad():
            for p in pol.parameters():
                p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(4, 6 * 3 + 1)
    perm = torch.tensor([3, 1, 0, 5, 4, 2])
    xp = torch.cat([x[:, :18].reshape(4, 6, 3)[:, perm].reshape(4, -1), x[:, 18:]], -1)
    assert pol.actor(x).shape == (4, 6)
    assert torch.allclose(pol.actor(x)[:, perm], pol.actor(xp), atol=1e-6)
    assert torch.allclose(pol.value(x), pol.value(xp), atol=1e-6)
    # The global values reach both heads (the item rows alone do not decide).
    x2 = x.clone()
    x2[:, 18] += 1.0
    assert not torch.allclose(pol.actor(x), pol.actor(x2)) and not torch.allclose(pol.value(x), pol.value(x2))


@pytest.mark.parametrize("attention", [0, 1])
def test_set_policy_weights_do_not_depend_on_the_item_count(attention):
    small, large = _set_policy(5, attention=attention), _set_policy(9, attention=attention)
    large.load_state_dict(small.state_dict())  # raises on any shape mismatch
    a, logp, v = large.act(torch.randn(7, 9 * 3 + 1), masks=torch.ones(7, 9))
    assert a.shape == (7, 1) and logp.shape == (7,) and v.shape == (7,) and (0 <= a).all() and (a < 9).all()


def _pick_config(encoder: str, steps: int) -> dict:
    policy = {"encoder": "set", "set_features": 3} if encoder == "set" else {}
    return validate(tiny_config(
        env={"entry_point": "scripted_envs:pick_largest", "kwargs": {"items": 5}},
        layers=[{"name": "control", "policy": {"hidden": [32, 32], **policy},
                 "ppo": {"minibatch_size": 128, "num_epochs": 4, "lr": 3e-3},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 4, "train_batch_size": 512},
                 "normalization": {"observation": False}}],
        train={"total_env_steps": steps, "checkpoint_every": 100, "eval_episodes": 4}))


def test_set_policy_learns_and_runs_on_more_items_than_it_trained_on(tmp_path):
    """Trained to pick the largest of 5 rows, the same weights pick the largest of 12."""
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint

    summary = Trainer(_pick_config("set", 12_000), tmp_path / "run", quiet=True).train()
    assert summary["eval_return_mean"] >= 8.5, summary["eval_return_mean"]  # max 10; random play 2
    state = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))["control"]
    big = _set_policy(12, hidden=(32, 32))
    big.load_state_dict(state["policy"])
    rng = np.random.default_rng(0)
    rows = rng.uniform(-1, 1, (500, 12, 3)).astype(np.float32)
    x = torch.as_tensor(np.concatenate([rows.reshape(500, -1), np.full((500, 1), 0.5, np.float32)], 1))
    with torch.no_grad():
        picks = big.actor(x).argmax(-1).numpy()
    assert (picks == rows[:, :, 0].argmax(1)).mean() >= 0.75  # random: 1/12


def test_set_encoder_errors_name_the_field():
    with pytest.raises(ConfigError, match="policy: encoder .set. needs set_features"):
        validate(tiny_config(layers=[{"name": "control", "policy": {"encoder": "set"}}]))
    with pytest.raises(ConfigError, match="set_attention applies to encoder 'set' only"):
        validate(tiny_config(layers=[{"name": "control", "policy": {"set_attention": 1}}]))
    with pytest.raises(ConfigError, match=r"hidden\[0\] = 30 must be a multiple of set_heads = 4"):
        validate(tiny_config(layers=[{"name": "control", "policy": {"encoder": "set", "set_features": 3,
                                                                    "set_attention": 1, "hidden": [30]}}]))
    cfg = validate(tiny_config(env={"id": "Pendulum-v1"},
                               layers=[{"name": "control", "policy": {"encoder": "set", "set_features": 1}}]))
    with pytest.raises(ConfigError, match="policy.encoder.*Discrete"):
        probe_env(cfg, 0)
    cfg = validate(tiny_config(layers=[{"name": "control", "policy": {"encoder": "set", "set_features": 3}}]))
    with pytest.raises(ConfigError, match="policy.set_features"):
        probe_env(cfg, 0)  # CartPole: 2 items of 3 values need 6, it has 4


def test_the_learner_steps_a_conv_on_its_channels_last_gradient_as_adam_does():
    """The CNN's conv weights get channels-last gradients; fused Adam (the learner's) would read
    them in the wrong order. One learner step must equal plain Adam on the same gradient."""
    import copy

    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService
    from hdppo.policies.ppo_update import gradients

    enc = {"kind": "cnn", "chw": (4, 10, 10), "channels_last": True, "channels": [8], "features": 16}
    cfg = validate(tiny_config(layers=[{"policy": {"encoder": "cnn", "cnn_channels": [8], "cnn_features": 16,
                                                   "image_shape": [10, 10, 4]}}]))
    learner = Learner(cfg, "control", 400, gym.spaces.Discrete(3), ParameterService(), encoder=enc)
    reference = copy.deepcopy(learner.policy)
    obs = torch.rand(32, 400)
    loss = lambda net: (net.log_prob_entropy(obs, torch.ones(32, 1))[0].sum() + net.value(obs).sum())  # noqa: E731
    grads = gradients(learner.policy, loss(learner.policy), learner.params)
    conv = [g for (name, _), g in zip(learner.policy.named_parameters(), grads) if name.endswith("convs.0.weight")]
    assert conv and not conv[0].is_contiguous()   # what the layout gives: the case under test
    learner._step(grads, 1e-2)
    ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2, eps=1e-5)
    ref_grads = gradients(reference, loss(reference))
    for p, g in zip(reference.parameters(), ref_grads):
        p.grad = g.contiguous()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), cfg.layers[0].ppo.max_grad_norm)
    ref_opt.step()
    for (name, p), q in zip(learner.policy.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, msg=name)
