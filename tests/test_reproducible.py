"""A seeded run on the local backend is reproducible bit for bit.

A learning A/B between two versions of the engine (benchmarks/engine_ab.py) relies on it: a
seed's second run must be its first, so that a difference between arms is the arms'. The Ant
A/B of 2026-12-02 was checked by hand this way (seed 1 through 223k env steps); this test keeps
it true on a run that has everything Ant's has: Box actions through the numpy actor, observation
and reward normalization, truncated episodes bootstrapped from their final observations, two
workers whose normalizer statistics are merged.
"""
from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.config import validate
from hdppo.platform.trainer import Trainer

TIMING = ("perf/",)  # wall-clock figures differ between runs by nature


def _run(tmp_path, name: str, seed: int) -> dict[tuple[int, str], float]:
    cfg = validate(tiny_config(
        env={"id": "Pendulum-v1"},  # 200-step episodes, ended by truncation only
        layers=[{"ppo": {"minibatch_size": 128, "num_epochs": 3, "lr_schedule": "linear"},
                 "dppo": {"num_workers": 2, "num_envs_per_worker": 2, "train_batch_size": 1024},
                 "normalization": {"observation": True, "reward": True}}],
        train={"total_env_steps": 4096, "checkpoint_every": 100, "eval_episodes": 0, "seed": seed}))
    Trainer(cfg, tmp_path / name, quiet=True).train()
    return {(r["step"], r["tag"]): r["value"] for r in M.read_jsonl(tmp_path / name / "metrics.jsonl")
            if not r["tag"].startswith(TIMING)}


def test_a_seeded_local_run_repeats_exactly_and_another_seed_does_not(tmp_path):
    first, again, other = _run(tmp_path, "a", 5), _run(tmp_path, "b", 5), _run(tmp_path, "c", 6)
    assert first.keys() == again.keys()
    assert {tag for _, tag in first} >= {M.LOSS_POLICY, M.LOSS_VALUE, M.CHART_EPISODIC_RETURN}
    assert len({step for step, _ in first}) == 4  # four updates, each compared
    differing = {k: (first[k], again[k]) for k in first if first[k] != again[k]}
    assert not differing, f"the same seed gave different figures: {sorted(differing.items())[:5]}"
    returns = [k for k in first if k[1] == M.CHART_EPISODIC_RETURN and k in other]
    assert returns and any(first[k] != other[k] for k in returns), "seed 6 repeated seed 5's run"
