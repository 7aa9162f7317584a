"""Every sync mode with every env kind, flat and hierarchical, through the one sampler: a few
updates each on the in-process backend, checking that samples arrive for every layer."""
import pytest

from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer

CORRIDOR = {"type": "pettingzoo", "entry_point": "hdppo.envs.builtin.corridor:parallel_env",
            "kwargs": {"num_agents": 2, "length": 7, "max_steps": 20}}
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
    env, hierarchy = ENVS[kind]
    cfg = validate(tiny_config(env=env, layers=_layers(hierarchy, sync, mode),
                               train={"total_env_steps": 600 if hierarchy else 400, "checkpoint_every": 100,
                                      "eval_episodes": 1}))
    summary = Trainer(cfg, tmp_path / "run", quiet=True).train()
    rows = M.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    for layer in cfg.layers:
        samples = [r["value"] for r in rows if r["layer"] == layer.name and r["tag"] == M.PERF_SAMPLES]
        assert samples and sum(samples) > 0, (layer.name, summary)
    assert summary["env_steps"] >= cfg.train.total_env_steps
