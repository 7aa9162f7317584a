"""Every sync mode with every env kind, flat and hierarchical, through the one sampler: a few
updates each on the in-process backend, checking that samples arrive for every layer, and,
from their ids, that none is trained twice or lost between two that were."""
import pytest

from accounting_checks import assert_accounted
from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer

CORRIDOR = {"type": "pettingzoo", "entry_point": "hdppo.envs.builtin.corridor:parallel_env",
            "kwargs": {"num_agents": 2, "length": 7, "max_steps": 20}}
# Env kinds whose every agent acts at every step until the episode ends (so each lane's steps run 0..last).
EVERY_STEP = {"gymnasium", "gymnasium_vector", "vector"}
ENVS = {
    "gymnasium": ({"id": "CartPole-v1"}, False),
    "gymnasium_vector": ({"type": "gymnasium_vector", "id": "CartPole-v1"}, False),
    "vector": ({"type": "vector", "entry_point": "scripted_envs:batched_countdown"}, False),
    "pettingzoo": (CORRIDOR, False),
    "rllib": ({"type": "rllib", "entry_point": "scripted_envs:rllib_two_cartpoles"}, False),
    "hierarchy": (CORRIDOR, True),
}
DPPO = {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 128}


def _layers(hierarchy: bool, sync: str, mode: str) -> list[dict]:
    dppo = DPPO | {"sync": sync, "mode": mode}
    control = {"name": "control", "ppo": {"minibatch_size": 32, "num_epochs": 1}, "dppo": dppo}
    if not hierarchy:
        return [control]
    return [{"name": "strategy", "period": 4, "observation": {"source": "state"}, "action": {"type": "discrete", "n": 2},
             "ppo": {"minibatch_size": 16, "num_epochs": 1}, "dppo": dppo | {"train_batch_size": 32}},
            control | {"reward": {"env": 1.0, "intrinsic": 0.1, "intrinsic_fn": "corridor_follow"}}]


@pytest.mark.parametrize("kind", list(ENVS))
@pytest.mark.parametrize("sync,mode", [("sync", "central"), ("pipeline", "central"), ("soft", "central"),
                                       ("async", "central"), ("sync", "dppo")])
def test_every_sync_mode_with_every_env_kind(tmp_path, kind, sync, mode):
    _run(tmp_path, kind, sync, mode)


@pytest.mark.parametrize("kind", ["gymnasium", "pettingzoo", "hierarchy"])
@pytest.mark.parametrize("sync,mode", [("sync", "central"), ("pipeline", "central"), ("soft", "central"),
                                       ("async", "central"), ("sync", "dppo")])
def test_a_gru_layer_in_every_sync_mode(tmp_path, kind, sync, mode):
    """policy.encoder 'gru': on the only layer of a flat run, and on the strategy layer of a
    hierarchy (acting every 4 steps, carrying its hidden across its own decisions)."""
    _run(tmp_path, kind, sync, mode, gru=True)


def _run(tmp_path, kind: str, sync: str, mode: str, gru: bool = False) -> None:
    env, hierarchy = ENVS[kind]
    layers = _layers(hierarchy, sync, mode)
    if gru:
        layers[0]["policy"] = {"encoder": "gru", "gru_hidden": 8, "seq_len": 4}
    cfg = validate(tiny_config(env=env, layers=layers,
                               train={"total_env_steps": 600 if hierarchy else 400, "checkpoint_every": 100,
                                      "eval_episodes": 1}, diagnostics={"accounting": True}))
    trainer = Trainer(cfg, tmp_path / "run", quiet=True)
    summary = trainer.train()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    for i, layer in enumerate(cfg.layers):
        samples = [r["value"] for r in rows if r["layer"] == layer.name and r["tag"] == M.PERF_SAMPLES]
        assert samples and sum(samples) > 0, (layer.name, summary)
        group = next(g for g in trainer.groups if layer.name in g.layers)
        # The mode asked for is the one that ran: the group's strategy, and mode dppo's gradient
        # messages (logged by its update alone, with every update).
        assert type(group.sync).name == sync, (layer.name, type(group.sync))
        grad_bytes = [r["value"] for r in rows if r["layer"] == layer.name and r["tag"] == M.PERF_GRAD_BYTES]
        assert (len(grad_bytes) == len(samples) and min(grad_bytes) > 0) if mode == "dppo" else not grad_bytes, \
            (layer.name, grad_bytes)
        # The gru layer (layers[0]) trains a recurrent policy; the others do not.
        assert getattr(group.learners[layer.name].policy, "recurrent", False) == (gru and i == 0), layer.name
        ids = assert_accounted(group.accounting(layer.name), every_step=kind in EVERY_STEP)
        assert len(ids["trained"]) == sum(samples) and not len(ids["failed"])
    assert summary["env_steps"] >= cfg.train.total_env_steps
