"""Pixels side by side: MinAtar Breakout from its 10x10x4 images, hdppo PPO beside Stable-Baselines3 PPO.

Both frameworks train the same network with the same PPO settings for the same env steps, seed
by seed, in one run (hdppo, then SB3, per seed, so both see similar machine load):

* the settings are read from ``configs/minatar_breakout.yaml`` (``--config``) and turned into SB3's
  arguments here, so the two cannot drift apart: ``n_envs = num_workers x num_envs_per_worker``
  (8), ``n_steps = train_batch_size / n_envs`` (128), ``batch_size = minibatch_size``, ``n_epochs``,
  the lr annealed linearly to 0 (a callable of SB3's progress), clip and value clip, entropy and
  value coefficients, max grad norm, gamma, lambda; no observation or reward normalization in
  either;
* the network is the MinAtar paper's (Young & Tian 2019): one 3x3 conv of 16 channels (ReLU),
  one dense layer of 128 (ReLU), then the heads, orthogonally initialised, with separate actor and
  critic stacks in both (hdppo's ``policy.encoder: cnn``; in SB3 a features extractor of the same
  shape with ``share_features_extractor=False``, ``net_arch`` = ``policy.hidden``);
* the env is made by hdppo's own loader for both (``MinAtar/Breakout-v1``: 3 actions, sticky
  actions 0.1, ``env.max_episode_steps``); SB3 steps its 8 copies in a ``DummyVecEnv``, hdppo in
  its 2 Ray rollout workers of 4 copies each and a learner, on one embedded Ray of ``--ray-cpus``.

Reported per framework, over ``--seeds``: the mean deterministic evaluation return of the final
weights (``--eval-episodes`` episodes; hdppo's own evaluator, SB3's ``evaluate_policy``), with its
spread over seeds, and the whole-iteration training throughput (env steps of every iteration after
the first, rollout + update + weight sync, over their wall time: ``common.throughput_from_metrics``
for hdppo, ``sb3_ppo.clocked_learn`` for SB3), as the ratio hdppo/SB3 seed by seed. The load
average before and after each run is recorded: on a shared machine the ratio is only as good as
the load was even.

Targets (issue 11, item 2): return >= SB3's and training throughput >= 2x SB3's.

Usage:
    python benchmarks/minatar_ppo.py [--env-steps 500000] [--seeds 0,1] [--eval-episodes 20]
    python benchmarks/minatar_ppo.py --quick      # smoke: 4 updates per run, 2 episodes

Writes benchmarks/results/minatar.{json,md} (``--quick``: minatar_quick.*), rewritten after every
run so that an interrupted benchmark keeps what it measured. (The script is not ``minatar.py``: on
the path of a script in benchmarks/, that name would shadow the ``minatar`` package.)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import command_line, fmt, fmt_ratio, join_md, machine_line, met, ratio, safe, throughput_from_metrics, write_report  # noqa: E402
from machine import machine_info  # noqa: E402

TARGET_RETURN_VS_SB3 = 1.0
TARGET_THROUGHPUT_VS_SB3 = 2.0
DEFAULT_CONFIG = ROOT / "configs" / "minatar_breakout.yaml"


# ----------------------------------------------------------------------------- the shared settings

def load_settings(path: Path, env_steps: int, seed: int, eval_episodes: int, overrides: list[str] | None = None) -> Any:
    """The validated hdppo config of one run (the one source of both frameworks' settings);
    ``overrides`` as ``hdppo train --set`` takes them."""
    from hdppo.platform.config import load_config

    cfg = load_config(path, list(overrides or []))
    train = cfg.train.model_copy(update={"total_env_steps": int(env_steps), "seed": int(seed),
                                         "eval_episodes": int(eval_episodes), "checkpoint_every": 1_000_000})
    return cfg.model_copy(update={"train": train})


def sb3_arguments(cfg: Any) -> dict:
    """SB3 ``PPO(...)`` keyword arguments equal to the config's one layer (see the module docstring)."""
    layer = cfg.layers[0]
    p, d, pol = layer.ppo, layer.dppo, layer.policy
    if pol.encoder != "cnn":
        raise ValueError(f"{cfg.name}: the benchmark compares CNN policies; policy.encoder is {pol.encoder!r}")
    n_envs = d.num_workers * d.num_envs_per_worker
    if d.train_batch_size % n_envs:
        raise ValueError(f"train_batch_size {d.train_batch_size} is not a multiple of the {n_envs} env copies")
    lr0 = float(p.lr)
    lr = (lambda progress_remaining: lr0 * progress_remaining) if p.lr_schedule == "linear" else lr0
    if p.entropy_coeff != p.entropy_coeff_final:
        raise ValueError("SB3 has no entropy schedule: give entropy_coeff_final == entropy_coeff")
    return {"n_envs": n_envs, "n_steps": d.train_batch_size // n_envs, "batch_size": p.minibatch_size,
            "n_epochs": p.num_epochs, "learning_rate": lr, "gamma": p.gamma, "gae_lambda": p.gae_lambda,
            "clip_range": p.clip, "clip_range_vf": p.value_clip, "ent_coef": p.entropy_coeff, "vf_coef": p.vf_coeff,
            "max_grad_norm": p.max_grad_norm if p.max_grad_norm is not None else 1e9,
            "normalize_advantage": p.normalize_advantages}


def describe(cfg: Any) -> str:
    layer = cfg.layers[0]
    p, d, pol = layer.ppo, layer.dppo, layer.policy
    return (f"`{cfg.env.id}`, conv {pol.cnn_channels} 3x3 + dense {pol.cnn_features}"
            f"{f' + hidden {pol.hidden}' if pol.hidden else ''} ({pol.activation}), separate actor and critic; "
            f"{d.num_workers * d.num_envs_per_worker} env copies x {d.train_batch_size // (d.num_workers * d.num_envs_per_worker)} "
            f"steps = {d.train_batch_size} per update, minibatch {p.minibatch_size}, {p.num_epochs} epochs, lr {p.lr} "
            f"({p.lr_schedule}), clip {p.clip}, value clip {p.value_clip}, entropy {p.entropy_coeff}, vf {p.vf_coeff}, "
            f"max grad norm {p.max_grad_norm}, gamma {p.gamma}, lambda {p.gae_lambda}; no obs/reward normalization")


# ----------------------------------------------------------------------------- SB3

def make_sb3_extractor(chw: tuple[int, int, int], channels_last: bool, channels: list[int], features: int):
    """An SB3 features extractor with hdppo's ImageEncoder shape (3x3 stride-1 convs, dense, ReLU)."""
    import torch
    from torch import nn
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarCNN(BaseFeaturesExtractor):
        def __init__(self, observation_space, features_dim: int = features):
            super().__init__(observation_space, features_dim)
            c, h, w = chw
            layers: list[nn.Module] = []
            for out in channels:
                layers += [nn.Conv2d(c, int(out), 3, 1), nn.ReLU()]
                c, h, w = int(out), h - 2, w - 2
            self.convs = nn.Sequential(*layers, nn.Flatten())
            self.linear = nn.Sequential(nn.Linear(c * h * w, features_dim), nn.ReLU())

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            x = obs.float()
            x = x.permute(0, 3, 1, 2) if channels_last else x
            return self.linear(self.convs(x))

    return MinAtarCNN


def sb3_run(cfg: Any, threads: int) -> dict:
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    from hdppo.envs.loading import make_gym_env
    from hdppo.policies.networks import image_layout
    from sb3_ppo import clocked_learn

    torch.set_num_threads(threads)
    env_cfg, pol, seed = cfg.env, cfg.layers[0].policy, cfg.train.seed
    make = lambda: make_gym_env(env_cfg.id, env_cfg.entry_point, env_cfg.kwargs, env_cfg.max_episode_steps)  # noqa: E731
    args = sb3_arguments(cfg)
    n_envs = args.pop("n_envs")
    probe = make()
    chw, last = image_layout(pol.image_shape or probe.observation_space.shape, pol.image_layout)
    probe.close()
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}[pol.activation]
    extractor = make_sb3_extractor(chw, last, list(pol.cnn_channels), int(pol.cnn_features))
    env = make_vec_env(make, n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)
    # MlpPolicy with a custom extractor: SB3's CnnPolicy would insist on uint8 [0, 255] images.
    model = PPO("MlpPolicy", env, **args, seed=seed, device="cpu", verbose=0,
                policy_kwargs={"features_extractor_class": extractor, "share_features_extractor": False,
                               "net_arch": {"pi": list(pol.hidden), "vf": list(pol.hidden)}, "activation_fn": act})
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        timed = clocked_learn(model, cfg.train.total_env_steps, warmup=1)
    finally:
        env.close()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    last_returns = [ep["r"] for ep in model.ep_info_buffer]
    eval_env = make_vec_env(make, n_envs=1, seed=seed + 999_983, vec_env_cls=DummyVecEnv)
    try:
        returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=cfg.train.eval_episodes, deterministic=True,
                                     return_episode_rewards=True)
    finally:
        eval_env.close()
    return {**timed, "eval_return_mean": float(np.mean(returns)), "eval_return_std": float(np.std(returns)),
            "eval_returns": [float(r) for r in returns],
            "train_return_last100": float(np.mean(last_returns)) if last_returns else None,
            "total_env_steps": int(model.num_timesteps), "cpu_s": round(cpu, 1),
            "env_steps_per_cpu_s": round(model.num_timesteps / cpu, 1) if cpu else None, "total_wall_s": round(wall, 1),
            "torch_threads": torch.get_num_threads(), "n_envs": n_envs, "n_steps": args["n_steps"],
            "sb3_version": stable_baselines3.__version__,
            "parameters": int(sum(p.numel() for p in model.policy.parameters()))}


# ----------------------------------------------------------------------------- hdppo

def ray_cpu_seconds() -> dict[int, float]:
    """CPU seconds (user + system) so far of every process of this embedded Ray: the GCS, the
    raylet and everything it started (workers, learner, parameter service), by pid."""
    import psutil
    import ray

    node = ray._private.worker._global_node  # the embedded Ray this script started
    roots = [info.process.pid for kind in ("gcs_server", "raylet") for info in node.all_processes.get(kind, [])]
    out: dict[int, float] = {}
    for pid in roots:
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                t = proc.cpu_times()
                out[proc.pid] = t.user + t.system
        except psutil.Error:  # a process that ended meanwhile
            continue
    return out


def hdppo_run(cfg: Any, tmp: Path) -> dict:
    from hdppo.platform.trainer import Trainer

    run_dir = tmp / f"hdppo-seed{cfg.train.seed}"
    trainer = Trainer(cfg, run_dir, quiet=True)
    t0 = time.perf_counter()
    cpu0, driver0 = ray_cpu_seconds(), time.process_time()
    try:
        summary = trainer.train()
        workers = trainer.groups[0].num_workers
        # Before shutdown, while the actors still live: their CPU time, plus the driver's (which
        # also ran the final evaluation, so hdppo's figure includes work SB3's leaves out).
        cpu1 = ray_cpu_seconds()
        cpu = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items()) + time.process_time() - driver0
    finally:
        trainer.shutdown()
    out = throughput_from_metrics(run_dir / "metrics.jsonl", warmup=1, layer=cfg.layers[0].name)
    return {**out, "eval_return_mean": summary.get("eval_return_mean"), "eval_return_std": summary.get("eval_return_std"),
            "train_return_last": summary.get("last_return"), "total_env_steps": summary["env_steps"],
            "cpu_s": round(cpu, 1), "env_steps_per_cpu_s": round(summary["env_steps"] / cpu, 1) if cpu else None,
            "num_workers": workers, "total_wall_s": round(time.perf_counter() - t0, 1)}


def hdppo_parameters(cfg: Any) -> int:
    """Parameters of the layer's actor-critic (the network hdppo builds for this config)."""
    import numpy as np

    from hdppo.envs.loading import make_gym_env
    from hdppo.policies.networks import image_layout, make_policy

    e, pol = cfg.env, cfg.layers[0].policy
    env = make_gym_env(e.id, e.entry_point, e.kwargs, e.max_episode_steps)
    shape, space = env.observation_space.shape, env.action_space
    env.close()
    chw, last = image_layout(pol.image_shape or shape, pol.image_layout)
    enc = {"kind": "cnn", "chw": chw, "channels_last": last, "channels": list(pol.cnn_channels),
           "features": int(pol.cnn_features)}
    net = make_policy(int(np.prod(shape)), space, pol.hidden, pol.activation, pol.init_log_std, None, enc)
    return int(sum(p.numel() for p in net.parameters()))


# ----------------------------------------------------------------------------- the report

def spread(values: list[float]) -> dict:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(vals), "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0,
            "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(runs: list[dict]) -> dict:
    done = [r for r in runs if "error" not in r["hdppo"] and "error" not in r["sb3"]]
    out: dict[str, Any] = {"seeds_complete": [r["seed"] for r in done]}
    for fw in ("hdppo", "sb3"):
        out[fw] = {"eval_return": spread([r[fw]["eval_return_mean"] for r in done]),
                   "env_steps_per_s": spread([r[fw]["env_steps_per_s"] for r in done]),
                   "env_steps_per_cpu_s": spread([r[fw].get("env_steps_per_cpu_s") for r in done])}
    out["throughput_ratio_per_seed"] = [ratio(r["hdppo"]["env_steps_per_s"], r["sb3"]["env_steps_per_s"]) for r in done]
    out["throughput_ratio"] = spread(out["throughput_ratio_per_seed"])
    h, s = out["hdppo"]["eval_return"]["mean"], out["sb3"]["eval_return"]["mean"]
    out["return_ratio"] = ratio(h, s)
    out["return_met"] = None if h is None or s is None else h >= TARGET_RETURN_VS_SB3 * s
    tr = out["throughput_ratio"]["mean"]
    out["throughput_met"] = None if tr is None else tr >= TARGET_THROUGHPUT_VS_SB3
    return out


def pm(s: dict, digits: int = 1) -> str:
    if s["mean"] is None:
        return "n/a"
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def loads(r: dict) -> str:
    return " → ".join(f"{x:.1f}" for x in (r.get("load_before"), r.get("load_after")) if x is not None)


def render_markdown(report: dict) -> str:
    st, summ = report["settings"], report["summary"]
    lines = ["# Pixels side by side: MinAtar Breakout, hdppo PPO vs Stable-Baselines3 PPO", "",
             "**Smoke run (`--quick`): numbers are not meaningful.**" if st["quick"] else "", "",
             machine_line(report["machine"]), "", f"Command: `{report['command']}`", "",
             f"Settings (both, from `{st['config']}`): {st['describe']}. {st['env_steps']:,} env steps per run, seeds "
             f"{', '.join(map(str, st['seeds']))}, hdppo then SB3 for each seed; deterministic evaluation of the final "
             f"weights on {st['eval_episodes']} episodes. hdppo: {st['hdppo_workers']} Ray rollout workers x "
             f"{st['envs_per_worker']} env copies and a learner on an embedded Ray of {st['ray_cpus']} CPUs, mode "
             f"`{st['mode']}`{', pipeline' if st.get('pipeline') else ''}, one torch thread per process; SB3 {report.get('sb3_version', '')}: one process, "
             f"{st['n_envs']} copies in a DummyVecEnv, {st['sb3_threads']} torch thread(s). Parameters: hdppo "
             f"{st.get('hdppo_parameters') or 'n/a'}, SB3 {st.get('sb3_parameters') or 'n/a'}.", "",
             "Throughput is whole-iteration training throughput (rollout + update + weight sync) after the first "
             "update, the same definition for both. Env steps per CPU-second, which a loaded machine disturbs less: "
             "all env steps of the run over the CPU time of every process that worked on it (SB3: its process during "
             "`learn`; hdppo: the driver, which also runs the final evaluation, and every process of its Ray).", "",
             "| seed | framework | eval return (mean ± std over episodes) | last training episodes | env steps/s "
             "| hdppo/SB3 | env steps per CPU-s | wall s | load avg (1 min) before → after |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["runs"]:
        for fw in ("hdppo", "sb3"):
            e = r[fw]
            if "error" in e:
                lines.append(f"| {r['seed']} | {fw} | error: `{e['error'].splitlines()[-1][:200]}` | | | | | | |")
                continue
            last = e.get("train_return_last", e.get("train_return_last100"))
            rt = ratio(r["hdppo"].get("env_steps_per_s"), r["sb3"].get("env_steps_per_s")) if fw == "hdppo" else None
            lines.append(f"| {r['seed']} | {'hdppo' if fw == 'hdppo' else 'SB3'} | {e['eval_return_mean']:.2f} ± "
                         f"{e['eval_return_std']:.2f} | {'n/a' if last is None else f'{last:.2f}'} | "
                         f"{fmt(e['env_steps_per_s'])} | {fmt_ratio(rt) if fw == 'hdppo' else ''} | "
                         f"{fmt(e.get('env_steps_per_cpu_s'))} | {e.get('total_wall_s', 'n/a')} | {loads(e)} |")
    h, s = summ["hdppo"], summ["sb3"]
    lines += ["", f"Over seeds {', '.join(map(str, summ['seeds_complete'])) or '(none complete)'} "
              "(mean ± std (min–max) of the per-seed figures):", "",
              "| | hdppo | SB3 | hdppo/SB3 | target | |",
              "|---|---:|---:|---:|---|---|",
              f"| eval return | {pm(h['eval_return'], 2)} | {pm(s['eval_return'], 2)} | {fmt_ratio(summ['return_ratio'])} "
              f"| >= SB3's | {met(summ['return_ratio'], TARGET_RETURN_VS_SB3) if summ['return_ratio'] is not None else 'n/a'} |",
              f"| env steps/s | {pm(h['env_steps_per_s'], 0)} | {pm(s['env_steps_per_s'], 0)} | "
              f"{pm(summ['throughput_ratio'], 2)}x | >= {TARGET_THROUGHPUT_VS_SB3}x | "
              f"{met(summ['throughput_ratio']['mean'], TARGET_THROUGHPUT_VS_SB3)} |",
              f"| env steps per CPU-s | {pm(h['env_steps_per_cpu_s'], 0)} | {pm(s['env_steps_per_cpu_s'], 0)} | "
              f"{fmt_ratio(ratio(h['env_steps_per_cpu_s']['mean'], s['env_steps_per_cpu_s']['mean']))} | | |", ""]
    if report.get("notes"):
        lines += ["Notes: " + " ".join(report["notes"]), ""]
    return join_md(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="the hdppo preset both frameworks follow")
    ap.add_argument("--env-steps", type=int, default=500_000, help="env steps per run (default 500000)")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds (default 0,1)")
    ap.add_argument("--eval-episodes", type=int, default=20, help="evaluation episodes per run (default 20)")
    ap.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the embedded Ray (default 2)")
    ap.add_argument("--sb3-threads", type=int, default=1,
                    help="torch threads of the SB3 process (default 1, as each hdppo process has)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override the config as `hdppo train --set` does (both frameworks follow it), e.g. "
                    "layers.0.dppo.pipeline=true")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 updates per run, 2 evaluation episodes")
    ap.add_argument("--out", default=None, help="output stem in benchmarks/results (default minatar, or minatar_quick)")
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.quick:
        args.eval_episodes = 2
    stem = args.out or ("minatar_quick" if args.quick else "minatar")

    probe = load_settings(Path(args.config), args.env_steps, seeds[0], args.eval_episodes, args.overrides)
    if args.quick:
        args.env_steps = 4 * probe.layers[0].dppo.train_batch_size
        probe = load_settings(Path(args.config), args.env_steps, seeds[0], args.eval_episodes, args.overrides)
    layer = probe.layers[0]
    settings = {"config": str(Path(args.config).resolve().relative_to(ROOT)) if Path(args.config).resolve().is_relative_to(ROOT)
                else args.config, "env_steps": args.env_steps, "seeds": seeds, "eval_episodes": args.eval_episodes,
                "ray_cpus": args.ray_cpus, "sb3_threads": args.sb3_threads, "quick": args.quick, "overrides": args.overrides,
                "describe": describe(probe), "mode": layer.dppo.mode, "pipeline": layer.dppo.pipeline, "hdppo_workers": layer.dppo.num_workers,
                "envs_per_worker": layer.dppo.num_envs_per_worker,
                "n_envs": layer.dppo.num_workers * layer.dppo.num_envs_per_worker,
                "sb3_arguments": {k: (v if not callable(v) else f"linear from {layer.ppo.lr} to 0")
                                  for k, v in sb3_arguments(probe).items()},
                "hdppo_parameters": hdppo_parameters(probe)}
    report: dict[str, Any] = {"machine": machine_info(), "command": command_line(argv), "settings": settings,
                              "runs": [], "targets": {"return_vs_sb3": TARGET_RETURN_VS_SB3,
                                                      "throughput_vs_sb3": TARGET_THROUGHPUT_VS_SB3}}

    def save() -> None:
        report["summary"] = summarize(report["runs"])
        write_report(stem, report, render_markdown(report), "minatar")

    import ray
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False)
    try:
        with tempfile.TemporaryDirectory(prefix="hdppo_minatar_") as tmp:
            for seed in seeds:
                cfg = load_settings(Path(args.config), args.env_steps, seed, args.eval_episodes, args.overrides)
                run: dict[str, Any] = {"seed": seed}
                for fw, fn, fargs in (("hdppo", hdppo_run, (cfg, Path(tmp))), ("sb3", sb3_run, (cfg, args.sb3_threads))):
                    before = os.getloadavg()[0]
                    res = safe("minatar", f"seed {seed} {fw}", fn, *fargs)
                    res |= {"load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2)}
                    run[fw] = res
                    if fw == "sb3" and "error" not in res:
                        report["sb3_version"] = res.get("sb3_version")
                        settings["sb3_parameters"] = res.get("parameters")
                report["runs"].append(run)
                save()
    finally:
        ray.shutdown()
    if not report["runs"]:
        save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
