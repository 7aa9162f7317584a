"""The learner's update time on CPU and, where one is present, on a CUDA GPU (learner.device).

One mode-``central`` update of :class:`hdppo.platform.learner.Learner` on a fixed synthetic
batch, Hopper-sized (11 observations, a 3-dimensional Box action): by default 4096 samples,
minibatches of 512, 10 epochs (80 optimizer steps), for actor and critic MLPs of 64x64 and
256x256. The time is the whole ``update_central`` call as the trainer makes it: the batch moved
to the device, the epochs, and the new weights copied back to CPU and published. CPU runs use
one torch thread, as hdppo's learner does by default (``Learner(num_threads=1)``); ``--threads``
changes that. The median of ``--repeats`` updates after one warm-up is reported.

``--net minatar`` times the CNN of ``configs/minatar_breakout.yaml`` instead (10x10x4 boolean
screens, one 3x3 conv of 16 channels, a dense layer of 128, ``Discrete(3)``) at that preset's
update (batch 1024, minibatch 256, 4 epochs, unless given), with hdppo's default activation (tanh;
the preset uses relu).

``--net battle`` times the update of ``benchmarks/multiagent.py``'s MAgent2 ``battle_v4`` runs: 13x13x5
views flattened to 845 inputs, an MLP (64x64 by default), ``Discrete(21)``, batch 24,000 agent steps,
minibatch 512, 5 epochs.

``--base COMMIT`` times this tree against an older commit instead, on CPU: each measurement in
a fresh interpreter with the commit's packages first on ``PYTHONPATH`` (``old_commit.old_tree``)
or this tree's, the two alternated ``--rounds`` times (this VM's speed drifts within minutes, so
the figure is the ratio within each round).

Usage: python benchmarks/learner_device.py [--net mlp|minatar|battle] [--hidden 64x64,256x256] [--batch 4096]
                                           [--minibatch 512] [--epochs 10] [--repeats 5] [--devices cpu,cuda]
                                           [--precisions fp32,bf16] [--out STEM]
                                           [--threads 1] [--base COMMIT --rounds 3]

Writes benchmarks/results/learner_device.{json,md} (or --out's stem).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import machine_info  # noqa: E402

OBS_DIM, ACT_DIM = 11, 3  # Hopper-v5
MINATAR_SCREEN, MINATAR_ACTIONS = (10, 10, 4), 3  # Breakout: HWC booleans, 3 actions
MINATAR_UPDATE = {"batch": 1024, "minibatch": 256, "epochs": 4}  # configs/minatar_breakout.yaml
BATTLE_OBS, BATTLE_ACTIONS = 13 * 13 * 5, 21  # MAgent2 battle_v4: a unit's view, flattened; its actions
BATTLE_UPDATE = {"batch": 24000, "minibatch": 512, "epochs": 5}  # benchmarks/multiagent.py's battle_v4 runs
DEFAULTS = {"mlp": {"batch": 4096, "minibatch": 512, "epochs": 10}, "minatar": MINATAR_UPDATE, "battle": BATTLE_UPDATE}


def _batch(n: int, net: str = "mlp", seed: int = 0):
    from hdppo.platform.batch import Batch

    rng = np.random.default_rng(seed)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    values, adv = f(n), f(n)
    if net == "battle":
        obs = rng.random((n, BATTLE_OBS)).astype(np.float32)
        actions = rng.integers(BATTLE_ACTIONS, size=(n, 1)).astype(np.float32)
        return Batch(obs=obs, actions=actions, logp=np.full(n, -np.log(BATTLE_ACTIONS), np.float32), values=values,
                     advantages=adv, returns=adv + values)
    if net == "minatar":
        obs = (rng.random((n, int(np.prod(MINATAR_SCREEN)))) < 0.1).astype(np.float32)
        actions = rng.integers(MINATAR_ACTIONS, size=(n, 1)).astype(np.float32)
        return Batch(obs=obs, actions=actions, logp=np.full(n, -np.log(MINATAR_ACTIONS), np.float32), values=values,
                     advantages=adv, returns=adv + values)
    return Batch(obs=f(n, OBS_DIM), actions=f(n, ACT_DIM), logp=f(n) - 3.0, values=values, advantages=adv,
                 returns=adv + values)


def time_updates(device: str, hidden: list[int], batch: int, minibatch: int, epochs: int, repeats: int,
                 threads: int = 1, net: str = "mlp", precision: str = "fp32") -> dict:
    """Seconds per update (median, min, max over ``repeats`` after one warm-up) on ``device``."""
    import gymnasium as gym
    import torch

    from hdppo.platform import metrics as M
    from hdppo.platform.batch import Rollout, RolloutStats
    from hdppo.platform.config import validate
    from hdppo.platform.learner import Learner
    from hdppo.platform.parameter_service import ParameterService

    policy: dict = {"hidden": hidden}
    space: gym.Space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    obs_dim, encoder = OBS_DIM, None
    if net == "minatar":
        policy = {"encoder": "cnn", "cnn_channels": [16], "cnn_features": 128, "hidden": hidden}
        space, obs_dim = gym.spaces.Discrete(MINATAR_ACTIONS), int(np.prod(MINATAR_SCREEN))
    if net == "battle":
        space, obs_dim = gym.spaces.Discrete(BATTLE_ACTIONS), BATTLE_OBS
    cfg = validate({"name": "learner-device", "env": {"id": "Hopper-v5"}, "diagnostics": {"every": 0},
                    "layers": [{"policy": policy, "learner": {"precision": precision},
                                "ppo": {"minibatch_size": minibatch, "num_epochs": epochs},
                                "dppo": {"train_batch_size": batch}}], "ray": {"backend": "local"}})
    if net == "minatar":  # the encoder as hdppo builds it from the layer's policy section (hierarchies/spec.py)
        from hdppo.policies.networks import image_layout

        p = cfg.layers[0].policy
        chw, last = image_layout(MINATAR_SCREEN)
        encoder = {"kind": "cnn", "chw": chw, "channels_last": last, "channels": list(p.cnn_channels),
                   "features": int(p.cnn_features)}
    learner = Learner(cfg, 0, obs_dim, space, ParameterService(), "local", None, None, threads, device, encoder)
    data = _batch(batch, net)
    adv = data.advantages.astype(np.float64)
    times = []
    for i in range(repeats + 1):
        # Each update's samples are from the current version, so none is dropped as stale.
        b = dataclasses.replace(data, versions=np.full(batch, learner.version, np.int64))
        stats = RolloutStats(worker=0, version=learner.version, env_steps=batch, sample_s=0.0,
                             adv_sum=float(adv.sum()), adv_sumsq=float((adv ** 2).sum()))
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        result = learner.update_central(Rollout(b, stats))
        if device == "cuda":
            torch.cuda.synchronize()
        if i:  # the first is a warm-up (allocations, CUDA context and kernels)
            times.append(time.perf_counter() - t0)
    steps = int(result.metrics[M.PERF_SGD_STEPS])
    name = "x".join(map(str, hidden))
    return {"device": device, "hidden": f"cnn16+128 {name}".strip() if net == "minatar" else name, "net": net, "threads": threads if device == "cpu" else None,
            "precision": precision,
            "median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "sgd_steps": steps, "repeats": repeats}


_CHILD = """
import json, sys
sys.path.insert(0, {here!r})
import hdppo.platform.learner as learner
from learner_device import time_updates
r = time_updates("cpu", {hidden!r}, {batch!r}, {minibatch!r}, {epochs!r}, {repeats!r}, {threads!r}, {net!r}, {precision!r})
print("RESULT " + json.dumps(dict(r, learner_file=learner.__file__)))
"""


def time_in_child(import_root: Path | None, **kw) -> dict:
    """:func:`time_updates` on CPU in a fresh interpreter, with ``import_root`` (an older tree)
    first on ``PYTHONPATH``, or this tree; checks which copy of the learner ran."""
    from old_commit import run_child

    return run_child(_CHILD.format(here=str(HERE), **kw), import_root, "learner_file", "timing", 1800)


def ab_rounds(base: str, rounds: int, **kw) -> dict:
    """The update time of ``base`` and of this tree, alternated ``rounds`` times (old, new, old,
    new, ...); per round the ratio old / new (> 1: this tree is faster)."""
    from old_commit import old_tree

    old_s, new_s = [], []
    with old_tree(base) as root:
        for _ in range(rounds):
            old_s.append(time_in_child(root, **kw)["median_s"])
            new_s.append(time_in_child(None, **kw)["median_s"])
            print(f"[learner_device] {kw['net']} {kw['hidden']} {kw['precision']}: {base} {old_s[-1]:.4f} s, "
                  f"this tree {new_s[-1]:.4f} s ({old_s[-1] / new_s[-1]:.2f}x)", flush=True)
    ratios = [o / n for o, n in zip(old_s, new_s)]
    return {"base": base, "old_s": old_s, "new_s": new_s, "speedups": ratios,
            "speedup_median": statistics.median(ratios), **kw}


def render_ab(report: dict) -> str:
    m, s = report["machine"], report["settings"]
    rows = []
    for r in report["ab"]:
        net = "x".join(map(str, r["hidden"])) or "-"
        rows.append(f"| {r['net']} | {net} | {r['precision']} | {' / '.join(f'{x:.4f}' for x in r['old_s'])} | "
                    f"{' / '.join(f'{x:.4f}' for x in r['new_s'])} | {' / '.join(f'{x:.2f}' for x in r['speedups'])} | "
                    f"**{r['speedup_median']:.2f}x** |")
    return (f"# Learner update time: this tree against `{s['base']}`\n\nMeasured {m.get('timestamp_utc')} on "
            f"{m.get('cpu_model')}, {m.get('cpu_count')} CPUs (load average at start {m['load_avg_1_5_15'][0]:.1f}); "
            f"torch {m.get('torch')}.\n\n"
            f"One mode-central `Learner.update_central` on a synthetic batch (batch {s['batch']}, minibatch "
            f"{s['minibatch']}, {s['epochs']} epochs; mlp: Hopper-sized, minatar: the preset's CNN, battle: battle_v4's MLP), one torch thread, "
            f"median of {s['repeats']} updates after a warm-up, each measurement in a fresh interpreter; the old and "
            "the new alternated, round by round.\n\n"
            "| net | hidden | precision | old s per update (rounds) | new s per update (rounds) | old / new per round | "
            "median |\n|---|---|---|---|---|---|---:|\n" + "\n".join(rows) + "\n\n"
            f"Command: `{report['command']}`\n")


def render_markdown(report: dict) -> str:
    m, s = report["machine"], report["settings"]
    gpu = report.get("gpu") or "none"
    rows = []
    for r in report["results"]:
        # Against float32 on CPU with the same network (results from before learner.precision have none).
        cpu = next((c for c in report["results"] if c["device"] == "cpu" and c["hidden"] == r["hidden"]
                    and c.get("precision", "fp32") == "fp32"), None)
        vs = f"{cpu['median_s'] / r['median_s']:.2f}x" if cpu and cpu is not r else "-"
        ms_step = f"{1000 * r['median_s'] / r['sgd_steps']:.2f}"
        where = f"cpu ({r['threads']} thread{'s' if r['threads'] != 1 else ''})" if r["device"] == "cpu" else r["device"]
        rows.append(f"| {r['hidden']} | {where} | {r.get('precision', 'fp32')} | {r['median_s']:.3f} | {r['min_s']:.3f}-{r['max_s']:.3f} | "
                    f"{ms_step} | {vs} |")
    what = {"minatar": f"MinAtar-sized ({'x'.join(map(str, MINATAR_SCREEN))} screens, the preset's CNN, Discrete({MINATAR_ACTIONS}))",
            "battle": f"battle_v4-sized ({BATTLE_OBS} inputs, an MLP, Discrete({BATTLE_ACTIONS}))"}.get(
        s.get("net"), f"Hopper-sized ({OBS_DIM} observations, {ACT_DIM}-d Box action)")
    return (f"# Learner update time by device\n\nMeasured {m.get('timestamp_utc')} on {m.get('cpu_model')}, "
            f"{m.get('cpu_count')} CPUs (load average at start {m['load_avg_1_5_15'][0]:.1f}); GPU: {gpu}; "
            f"torch {m.get('torch')}.\n\n"
            f"One mode-central `Learner.update_central` on a synthetic batch, {what}: {s['batch']} samples, minibatch {s['minibatch']}, {s['epochs']} epochs, "
            f"median of {s['repeats']} updates after one warm-up, the batch's move to the device and the CPU copy "
            f"of the published weights included.\n\n"
            "| hidden | device | learner.precision | update s (median) | min-max s | ms per SGD step | speed-up vs CPU fp32 |\n"
            "|---|---|---|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n\n"
            f"Command: `{report['command']}`\n")


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", choices=tuple(DEFAULTS), default="mlp",
                   help="mlp: Hopper-sized MLPs; minatar: configs/minatar_breakout.yaml's CNN and update; "
                        "battle: benchmarks/multiagent.py's battle_v4 MLP and update")
    p.add_argument("--hidden", default=None, help="comma-separated MLP sizes, e.g. 64x64,256x256 (default: that; "
                   "with --net minatar the preset's none, written '')")
    p.add_argument("--batch", type=int, default=None, help="default 4096 (minatar: 1024, battle: 24000)")
    p.add_argument("--minibatch", type=int, default=None, help="default 512 (minatar: 256)")
    p.add_argument("--epochs", type=int, default=None, help="default 10 (minatar: 4, battle: 5)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the CPU learner (hdppo's default 1)")
    p.add_argument("--devices", default=None, help="default: cpu, and cuda where torch sees a GPU")
    p.add_argument("--precisions", default="fp32", help="comma-separated learner.precision values, e.g. fp32,bf16 "
                   "(bf16 paid for a CNN on a CPU with AMX, cost for a 64x64 MLP; time it on yours)")
    p.add_argument("--results", type=Path, default=HERE / "results")
    p.add_argument("--out", default="learner_device", help="output stem in --results (default learner_device)")
    p.add_argument("--base", default=None, help="time this tree against this older commit (CPU only), alternated")
    p.add_argument("--rounds", type=int, default=3, help="with --base: old/new pairs")
    args = p.parse_args(argv)
    for key, value in DEFAULTS[args.net].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.hidden is None:
        args.hidden = "" if args.net == "minatar" else "64x64,256x256"
    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    report = {"machine": machine_info(), "command": " ".join(["python benchmarks/learner_device.py", *(argv or sys.argv[1:])]),
              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "settings": {"net": args.net, "batch": args.batch, "minibatch": args.minibatch, "epochs": args.epochs,
                           "repeats": args.repeats, "threads": args.threads}, "results": []}
    if args.base:
        report["settings"]["base"] = args.base
        report["ab"] = [ab_rounds(args.base, args.rounds, hidden=[int(h) for h in hidden.split("x") if h],
                                  batch=args.batch, minibatch=args.minibatch, epochs=args.epochs, repeats=args.repeats,
                                  threads=args.threads, net=args.net, precision=precision)
                        for hidden in args.hidden.split(",") for precision in args.precisions.split(",")]
        return _write(args, report, render_ab(report))
    for hidden in args.hidden.split(","):
        for device in devices:
            for precision in args.precisions.split(","):
                r = time_updates(device, [int(h) for h in hidden.split("x") if h], args.batch, args.minibatch,
                                 args.epochs, args.repeats, args.threads, args.net, precision)
                report["results"].append(r)
                print(f"[learner_device] {r['hidden']:>9s} {device:4s} {precision} {r['median_s']:.3f} s/update "
                      f"({r['min_s']:.3f}-{r['max_s']:.3f})", flush=True)
    return _write(args, report, render_markdown(report))


def _write(args: argparse.Namespace, report: dict, md: str) -> int:
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{args.out}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.results / f"{args.out}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
