"""What ``policy.set_attention`` costs: the job-shop set policy's act and SGD step with 0, 1, 2 blocks.

The network is the one ``configs/jobshop_set.yaml`` builds (10x10 job shop, ``observation: items``:
10 items of 14 values plus 2 global values, ``hidden: [64, 64]``), its encoder taken from the
preset's validated policy section as hdppo builds it (``hierarchies/spec.py``), with
``set_attention`` set to each of ``--blocks``. Timed in one process on one torch thread, as a
worker and the learner run: ``act`` on ``--act-batch`` rows (a worker's env copies; the preset has
8) with an action mask, and one Adam step of actor and critic on ``--minibatch`` rows (the preset's
512) through a stand-in loss (sum of log-sum-exp of the scores and the values: the same forward
and backward passes as PPO's loss, without its arithmetic). Median of ``--repeats`` rounds, the
variants alternating within each round, so that a drift of the machine's speed hits them alike.

Usage: python benchmarks/set_encoder_cost.py [--blocks 0,1,2] [--act-batch 8] [--minibatch 512] [--repeats 5]

Writes benchmarks/results/set_encoder_cost.{json,md}.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import save_files  # noqa: E402
from machine import machine_info  # noqa: E402

PRESET = ROOT / "configs" / "jobshop_set.yaml"


def build(blocks: int):
    """The preset's ActorCritic with ``set_attention: blocks`` (its encoder spec from probe_env)."""
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.config import load_config
    from hdppo.policies.networks import make_policy

    cfg = load_config(PRESET, [f"layers.0.policy.set_attention={blocks}"])
    venv, _, specs = probe_env(cfg, 0)
    venv.close()
    spec, p = specs[0], cfg.layers[0].policy
    return make_policy(spec.obs_dim, spec.action_space, p.hidden, p.activation, p.init_log_std, spec.critic_dim,
                       spec.encoder), spec


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", default="0,1,2")
    ap.add_argument("--act-batch", type=int, default=8)
    ap.add_argument("--minibatch", type=int, default=512)
    ap.add_argument("--acts", type=int, default=300, help="acts per round")
    ap.add_argument("--steps", type=int, default=10, help="SGD steps per round")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--results", type=Path, default=HERE / "results")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    variants = {}
    for b in (int(x) for x in args.blocks.split(",")):
        pol, spec = build(b)
        n = spec.action_space.n
        variants[b] = {"policy": pol, "opt": torch.optim.Adam(pol.parameters(), lr=1e-4),
                       "x_act": torch.randn(args.act_batch, spec.obs_dim), "mask": torch.ones(args.act_batch, n),
                       "x_mb": torch.randn(args.minibatch, spec.obs_dim), "act_s": [], "sgd_s": [],
                       "params": sum(p.numel() for p in pol.parameters())}
    for _ in range(args.repeats + 1):  # the first round warms up
        for v in variants.values():
            pol = v["policy"]
            with torch.no_grad():
                t0 = time.perf_counter()
                for _ in range(args.acts):
                    pol.act(v["x_act"], masks=v["mask"])
                v["act_s"].append((time.perf_counter() - t0) / args.acts)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                loss = pol.actor(v["x_mb"]).logsumexp(-1).sum() + pol.value(v["x_mb"]).sum()
                v["opt"].zero_grad()
                loss.backward()
                v["opt"].step()
            v["sgd_s"].append((time.perf_counter() - t0) / args.steps)
    rows = []
    base = None
    for b, v in variants.items():
        act, sgd = statistics.median(v["act_s"][1:]), statistics.median(v["sgd_s"][1:])
        base = base or (act, sgd)
        rows.append({"set_attention": b, "params": v["params"], "act_ms": 1e3 * act, "sgd_step_ms": 1e3 * sgd,
                     "act_vs_none": act / base[0], "sgd_vs_none": sgd / base[1]})
        print(f"[set_encoder_cost] set_attention={b}: act {1e3 * act:.2f} ms, SGD step {1e3 * sgd:.1f} ms", flush=True)
    m = machine_info()
    cmd = " ".join(["python benchmarks/set_encoder_cost.py", *(argv if argv is not None else sys.argv[1:])])
    report = {"machine": m, "command": cmd, "settings": vars(args) | {"results": str(args.results)}, "rows": rows}
    md = (f"# What set_attention costs (job-shop set policy, 10 items of 14 values, hidden [64, 64])\n\n"
          f"Measured {m.get('timestamp_utc')} on {m.get('cpu_model')}, {m.get('cpu_count')} CPUs (load average at "
          f"start {m['load_avg_1_5_15'][0]:.1f}); torch {m.get('torch')}, one thread. Median of {args.repeats} rounds, "
          f"the variants alternating within each round.\n\n"
          f"| set_attention | parameters | act, batch {args.act_batch} (ms) | x none | SGD step, {args.minibatch} rows (ms) "
          f"| x none |\n|---:|---:|---:|---:|---:|---:|\n"
          + "\n".join(f"| {r['set_attention']} | {r['params']:,} | {r['act_ms']:.2f} | {r['act_vs_none']:.2f} | "
                      f"{r['sgd_step_ms']:.1f} | {r['sgd_vs_none']:.2f} |" for r in rows)
          + f"\n\nCommand: `{cmd}`\n")
    save_files(args.results / "set_encoder_cost", report, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
