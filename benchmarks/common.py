"""What the side-by-side benchmarks share: the PPO settings, hdppo configs, throughput from a run's
``metrics.jsonl``, sampling with inference (no learning), and the table/result plumbing.

``throughput.py`` (flat Gymnasium envs) and ``multiagent.py`` (PettingZoo envs) both use it; the
baselines live in ``raw_env_limit.py``, ``rllib_ppo.py``, ``sb3_ppo.py``, and the hdppo of an older
commit in ``old_commit.py``.
"""
from __future__ import annotations

import json
import math
import shlex
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class PPOSettings:
    """The PPO settings every framework gets in one comparison (CleanRL-like MuJoCo defaults)."""

    num_workers: int = 2
    envs_per_worker: int = 4
    train_batch: int = 4000     # samples per update (agent steps for a multi-agent env)
    minibatch: int = 512
    epochs: int = 5
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    activation: str = "tanh"
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_coeff: float = 0.5
    entropy_coeff: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self, batch: bool = True) -> str:
        return (f"{self.num_workers} workers x {self.envs_per_worker} envs, "
                f"{f'train batch {self.train_batch}, ' if batch else ''}minibatch {self.minibatch}, {self.epochs} epochs, MLP {self.hidden} {self.activation}, "
                f"lr {self.lr}, gamma {self.gamma}, lambda {self.gae_lambda}, clip {self.clip}, "
                f"vf coeff {self.vf_coeff}, entropy {self.entropy_coeff}")


# ----------------------------------------------------------------------------- hdppo configs

def hdppo_layer(s: PPOSettings, name: str = "control", mode: str = "central", **extra) -> dict:
    """One hdppo layer with the settings ``s``; ``mode`` is central, pipeline, soft or dppo."""
    layer = {
        "name": name,
        "policy": {"hidden": list(s.hidden), "activation": s.activation},
        "ppo": {"minibatch_size": s.minibatch, "num_epochs": s.epochs, "lr": s.lr, "lr_schedule": "constant",
                "gamma": s.gamma, "gae_lambda": s.gae_lambda, "clip": s.clip, "vf_coeff": s.vf_coeff,
                "entropy_coeff": s.entropy_coeff, "entropy_coeff_final": s.entropy_coeff},
        "dppo": {"mode": "dppo" if mode == "dppo" else "central", "pipeline": mode == "pipeline",
                 "sync": "soft" if mode == "soft" else "sync",
                 "num_workers": s.num_workers, "num_envs_per_worker": s.envs_per_worker,
                 "train_batch_size": s.train_batch},
    }
    layer.update(extra)
    return layer


def hdppo_config(name: str, env: dict, layers: list[dict], total_env_steps: int, seed: int = 0,
                 eval_episodes: int = 0, ray_cpus: int | None = None) -> dict:
    cfg = {
        "name": name,
        "env": env,
        "layers": layers,
        # checkpoint_every larger than the run: only the final checkpoint, after the timed updates.
        "train": {"total_env_steps": int(total_env_steps), "seed": seed, "checkpoint_every": 1_000_000,
                  "eval_episodes": eval_episodes},
    }
    if ray_cpus:
        cfg["ray"] = {"num_cpus": ray_cpus}
    return cfg


# ----------------------------------------------------------------------------- throughput from a run

def throughput_from_metrics(path: Path, warmup: int, layer: str | None = None) -> dict:
    """Whole-iteration env steps/s after ``warmup`` updates, from a run's metrics.jsonl.

    ``layer`` picks one layer's records (a hierarchy logs one set per trained layer); by default
    the first layer that logged ``perf/env_steps_per_s``. Agent steps/s come from the
    ``perf/samples`` records (samples per update) where the run logs them.
    """
    recs = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if layer is None:
        layer = next((r.get("layer") for r in recs if r["tag"] == "perf/env_steps_per_s"), None)
    recs = [r for r in recs if r.get("layer") == layer]
    per_update = sorted((r for r in recs if r["tag"] == "perf/env_steps_per_s"), key=lambda r: r["step"])
    by_tag: dict[str, list[float]] = {}
    for r in sorted(recs, key=lambda r: r["step"]):
        by_tag.setdefault(r["tag"], []).append(r["value"])
    if len(per_update) <= warmup:
        raise RuntimeError(f"{path}: only {len(per_update)} updates logged, need more than warmup={warmup}")
    w = per_update[warmup - 1] if warmup > 0 else None
    last = per_update[-1]
    timed = per_update[warmup:]
    if w is None:  # no warm-up: fall back to the first update's own duration for the start time
        first = timed[0]
        t0 = first["time"] - first["step"] / first["value"]
        s0 = 0
    else:
        t0, s0 = w["time"], w["step"]
    wall = last["time"] - t0
    steps = last["step"] - s0

    def mean_after(tag: str) -> float | None:
        vals = by_tag.get(tag, [])[warmup:]
        return round(statistics.fmean(vals), 4) if vals else None

    out = {
        "env_steps_per_s": round(steps / wall, 1),
        "env_steps": int(steps),
        "wall_s": round(wall, 2),
        "updates_timed": len(timed),
        "layer": layer,
        # cross-check: mean of hdppo's own per-update figure (iteration wall only, no logging)
        "perf_env_steps_per_s_mean": round(statistics.fmean(r["value"] for r in timed), 1),
        "sample_s_mean": mean_after("perf/sample_s"),
        "update_s_mean": mean_after("perf/update_s"),
    }
    samples = by_tag.get("perf/samples", [])[warmup:]
    if samples:
        out["agent_steps"] = int(sum(samples))
        out["agent_steps_per_s"] = round(sum(samples) / wall, 1)
    return out


# ----------------------------------------------------------------------------- sampling with inference

class SamplerStepper:
    """One hdppo ``RolloutWorker`` (inference, GAE, normalizers; no learner) in its own process.

    Made by ``raw_env_limit.run_per_core`` like the raw steppers: ``step()`` is one
    ``worker.sample()`` and returns (env steps, agent samples) it collected.
    """

    check_every = 1  # one sample() is many env steps: look at the clock after each

    def __init__(self, cfg_dict: dict, layer: str, num_workers: int, seed: int):
        from hdppo.platform.config import validate
        from hdppo.platform.parameter_service import ParameterService
        from hdppo.platform.rollout_worker import RolloutWorker

        cfg = validate(cfg_dict, source="sampling benchmark")
        self.layer = layer
        index = seed - 1000  # run_per_core seeds process k with 1000 + k: it is worker k of num_workers
        self.worker = RolloutWorker(cfg, [layer], index, num_workers, ParameterService())
        self.step()  # warm-up: first forward passes and env resets, outside the clock

    def step(self) -> tuple[int, int]:
        rollout = self.worker.sample()[self.layer]
        return int(rollout.stats.env_steps), len(rollout.batch)

    def close(self) -> None:
        close = getattr(self.worker, "close", None)
        if callable(close):
            close()


def sampling_steps_per_s(cfg_dict: dict, layer: str = "control", seconds: float = 10.0,
                         procs: int | None = None) -> dict:
    """Env and agent steps/s of one RolloutWorker per process (default one per core), no learning.

    Each worker is told it is one of ``procs`` workers, so its rollouts have the length they have
    in training with that many workers.
    """
    from raw_env_limit import run_per_core

    import os
    procs = procs or os.cpu_count() or 1
    procs, per_proc = run_per_core(SamplerStepper, (cfg_dict, layer, procs), seconds, procs)
    return {"procs": procs, "env_steps_per_s": round(sum(e for e, _ in per_proc), 1),
            "agent_steps_per_s": round(sum(a for _, a in per_proc), 1),
            "per_proc_agent_steps_per_s": [round(a, 1) for _, a in per_proc]}


def raw_and_sampling(raw_fn, sampling_fns: dict, rounds: int, key: str) -> tuple[dict, dict[str, dict]]:
    """The raw limit and hdppo's sampling measured in alternation, ``rounds`` times each
    (raw, sampling, raw, sampling, ...), rather than one long run of each minutes apart: this
    VM's speed drifts by 20-30% within minutes, and the share of raw is a ratio of the two.

    ``raw_fn()`` and each of ``sampling_fns`` (name -> fn: several ways of sampling the same env)
    run one round and return a measurement dict; ``key`` is the rate the share is of. Returns
    (raw, {name: sampling}): each the mean of its rounds (rates averaged, the other fields of the
    first round), a sampling one with ``share_rounds``, the share measured in each round against
    the raw round just before it."""
    raws: list[dict] = []
    samps: dict[str, list[dict]] = {name: [] for name in sampling_fns}
    for _ in range(max(1, rounds)):
        raws.append(raw_fn())
        for name, fn in sampling_fns.items():
            samps[name].append(fn())
    raw = next((m for m in raws if "error" in m), None) or _mean_rounds(raws)
    out = {}
    for name, ms in samps.items():
        failed = next((m for m in ms if "error" in m), None)
        if failed is not None:  # recorded as a failure, as safe() records one
            out[name] = failed
            continue
        out[name] = _mean_rounds(ms)
        if "error" not in raw:
            out[name]["share_rounds"] = [ratio(rate(m, key) or rate(m), rate(r, key) or rate(r)) for r, m in zip(raws, ms)]
    return raw, out


def _mean_rounds(rounds: list[dict]) -> dict:
    out = dict(rounds[0])
    for k, v in rounds[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k.endswith("_per_s"):
            out[k] = round(statistics.fmean(r[k] for r in rounds), 1)
        elif isinstance(v, list) and k.startswith("per_proc"):
            out[k] = [round(statistics.fmean(r[k][i] for r in rounds), 1) for i in range(len(v))]
    out["rounds"] = len(rounds)
    return out


def share_cell(samp: dict | None, share: float | None) -> str:
    """The share of raw, with the range of its rounds where there were several."""
    rounds = [x for x in (samp or {}).get("share_rounds") or [] if x is not None]
    text = fmt(share, pct=True)
    if len(rounds) > 1:
        text += f" (rounds {100 * min(rounds):.0f}-{100 * max(rounds):.0f}%)"
    return text


# ----------------------------------------------------------------------------- plumbing

def add_budget_args(ap, stem: str, parts: tuple[str, ...], iterations: int, warmup: int,
                    raw_seconds: float, sample_seconds: float) -> None:
    """The budget, skip and output flags that every side-by-side script takes."""
    ap.add_argument("--iterations", type=int, default=iterations, help=f"timed PPO iterations (default {iterations})")
    ap.add_argument("--warmup", type=int, default=warmup, help=f"untimed PPO iterations first (default {warmup})")
    ap.add_argument("--raw-seconds", type=float, default=raw_seconds, help=f"raw-limit run per env (default {raw_seconds})")
    ap.add_argument("--sample-seconds", type=float, default=sample_seconds,
                    help=f"sampling run per env (default {sample_seconds})")
    ap.add_argument("--rounds", type=int, default=3, help="raw limit and sampling alternate this many times, "
                    "each round a share of their seconds (default 3; see raw_and_sampling); throughput.py "
                    "also alternates the flat and hierarchy training runs this many times")
    ap.add_argument("--train-rounds", type=int, default=1,
                    help="alternate hdppo's training runs with the baselines' (RLlib, SB3) this many times; each "
                    "hdppo/baseline ratio is then the mean of the rounds' own ratios, every round's listed (default 1)")
    ap.add_argument("--skip", default="", help=f"comma-separated parts to skip: {','.join(parts)}")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 timed iteration after 1 warm-up, 2 s raw "
                    "and sampling (numbers not meaningful)")
    ap.add_argument("--out", default=None, help=f"output stem in benchmarks/results (default {stem}, "
                    f"or {stem}_quick with --quick)")


def budget(args, stem: str) -> tuple[set[str], str]:
    """Applies ``--quick``; returns the parts to skip and the output stem."""
    if args.quick:
        args.iterations, args.warmup, args.raw_seconds, args.sample_seconds, args.rounds = 1, 1, 2.0, 2.0, 1
    skip = {p.strip() for p in args.skip.split(",") if p.strip()}
    return skip, args.out or (f"{stem}_quick" if args.quick else stem)


def safe(tag: str, what: str, fn, *args, **kwargs) -> dict:
    """Run one measurement; a failure is recorded as ``{"error": ...}`` and the others still run."""
    print(f"[{tag}] {what} ...", flush=True)
    t0 = time.perf_counter()
    try:
        res = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - record and carry on with the other measurements
        traceback.print_exc()
        res = {"error": f"{type(exc).__name__}: {str(exc)[-2000:]}"}
    shown = res.get("agent_steps_per_s", rate(res)) if "error" not in res else res["error"][:300]
    print(f"[{tag}] {what}: {shown}  ({time.perf_counter() - t0:.0f}s)", flush=True)
    return res


def rounds_note(per_round: list[float] | None) -> str:
    """`` (mean of 3 rounds: 2.40x, 2.51x, 2.47x)`` where the ratio is the mean of alternated rounds."""
    if not per_round:
        return ""
    return f" (mean of {len(per_round)} rounds: {', '.join(fmt_ratio(r) for r in per_round)})"


def round_ratios(a_runs: list[dict], b_runs: list[dict]) -> list[float] | None:
    """Each round's ``rate(a) / rate(b)``, where there are two rounds or more and none failed."""
    vals = [ratio(rate(a), rate(b)) for a, b in zip(a_runs, b_runs)]
    return vals if len(vals) > 1 and None not in vals else None  # type: ignore[return-value]


def fold_rounds(results: dict[str, dict], runs: dict[str, dict[str, list[dict]]]) -> None:
    """Put each measurement of ``runs`` (``{env: {key: [one record per round]}}``) into ``results``:
    the one record, or with several rounds their :func:`merge_rounds` and every round's record
    under ``results[env]["rounds"][key]`` (what :func:`round_ratios` pairs)."""
    for env, by_key in runs.items():
        for key, lst in by_key.items():
            results[env][key] = merge_rounds(lst) if len(lst) > 1 else lst[0]
        if any(len(lst) > 1 for lst in by_key.values()):
            results[env]["rounds"] = by_key


def merge_rounds(runs: list[dict]) -> dict:
    """One training measurement from alternated rounds: the first round's record (its settings and
    timings) with the mean rate and every round's rate; the first failure if any round failed."""
    for r in runs:
        if not r or "error" in r:
            return r
    merged = dict(runs[0])
    for key in ("env_steps_per_s", "steps_per_s", "agent_steps_per_s"):
        vals = [r[key] for r in runs if r.get(key) is not None]
        if len(vals) == len(runs):
            merged[key] = sum(vals) / len(vals)
    merged["rounds"] = [rate(r) for r in runs]
    return merged


def rate(res: dict | None, key: str | None = None) -> float | None:
    """The figure of a measurement: ``key`` if given, else env steps/s."""
    if not res or "error" in res:
        return None
    if key:
        return res.get(key)
    return res.get("env_steps_per_s", res.get("steps_per_s"))


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.0f}%" if pct else f"{x:,.0f}"


def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def met(value: float | None, target: float) -> str:
    return "n/a" if value is None else ("met" if value >= target else "NOT met")


def machine_line(m: dict) -> str:
    return (f"Run {m['timestamp_utc']} on `{m['hostname']}`: {m['cpu_model']}, {m['cpu_count']} CPUs "
            f"(load avg at start {', '.join(f'{x:.2f}' for x in (m.get('load_avg_1_5_15') or []))}), "
            f"{m['mem_total_gib']} GiB; Python {m['python']}, torch {m['torch']}, Ray {m['ray']}, "
            f"Gymnasium {m['gymnasium']}, MuJoCo {m['mujoco']}.")


def header(title: str, report: dict) -> list[str]:
    """The first lines of a result file: title, smoke-run warning, machine, command."""
    return [f"# {title}", "",
            "**Smoke run (`--quick`): numbers are not meaningful.**" if report["settings"]["quick"] else "", "",
            machine_line(report["machine"]), "", f"Command: `{report['command']}`", ""]


def budget_sentence(st: dict) -> str:
    return (f"{st['iterations']} timed iterations after {st['warmup']} warm-up. Raw limit: {st['raw_seconds']} s, "
            f"one process per core, random actions. Sampling: {st['sample_seconds']} s, one RolloutWorker per "
            f"process, no learner. The two alternate in {st.get('rounds', 1)} round(s), each a share of those seconds.")


def join_md(lines: list[str]) -> str:
    """Markdown from lines, with runs of blank lines squeezed to one."""
    return "\n".join(line for i, line in enumerate(lines) if line or (i and lines[i - 1]))


def command_line(argv: list[str] | None) -> str:
    args = sys.argv[1:] if argv is None else argv
    # Quoted as a shell would need it (an empty --sampling-copies '' must stay an argument).
    return " ".join([".venv/bin/python", f"benchmarks/{Path(sys.argv[0]).name}", *map(shlex.quote, args)])


def errors_section(results: dict) -> list[str]:
    errors = [(env_id, k, v["error"]) for env_id, e in results.items()
              for k, v in e.items() if isinstance(v, dict) and "error" in v]
    if not errors:
        return []
    return ["", "Errors:", ""] + [f"- {env_id} {k}: `{msg.splitlines()[-1][:500] if msg else msg}`"
                                  for env_id, k, msg in errors]


def run_main(main, prog: str) -> int:
    """``main()``'s exit code, with a user's mistake that hdppo names (a bad env kwarg, a run
    folder that is not one, a config error) printed as hdppo's CLI prints it: one paragraph, exit 2,
    no traceback."""
    from hdppo.platform.errors import HdppoError

    try:
        return main()
    except HdppoError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2


def builtin_run_config(run_dir: Path, flag: str, entry_point: str, what: str):
    """The config of ``run_dir``, a run folder of ``hdppo train`` trained on the built-in env
    ``entry_point`` (``what`` names it); a folder without config.yaml or a run of another env is
    refused by name, before a benchmark spends minutes on anything else."""
    from hdppo.platform.config import load_config

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise SystemExit(f"{flag} {run_dir}: no config.yaml there; give a run folder of `hdppo train` "
                         f"(the one its --run-dir named) trained on {what}")
    cfg = load_config(run_dir / "config.yaml")
    if str(cfg.env.entry_point or "").split(":")[0] != entry_point.split(":")[0]:
        raise SystemExit(f"{flag} {run_dir}: a run of env {cfg.env.entry_point or cfg.env.id!r}, not of {what} "
                         f"({entry_point}); give a run trained on {what}")
    return cfg


def save_files(out: Path, report: dict, markdown: str) -> None:
    """``out``.json (the report) and ``out``.md (its table), the folder made if need be."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown)


def write_report(stem: str, report: dict, markdown: str, tag: str) -> None:
    out_dir = HERE / "results"
    save_files(out_dir / stem, report, markdown)
    print()
    print(markdown)
    print(f"[{tag}] wrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}")


# ----------------------------------------------------------------------------- training presets

def shrink(cfg: dict) -> dict:
    """A preset's config (as a dict) with batches small enough for a smoke run (a few updates in seconds)."""
    for layer in cfg["layers"]:
        big = layer["dppo"]["train_batch_size"]
        layer["dppo"].update(num_workers=1, num_envs_per_worker=4, train_batch_size=max(32, big // 64))
        layer["ppo"].update(minibatch_size=max(16, layer["ppo"]["minibatch_size"] // 64), num_epochs=1)
        layer["policy"]["hidden"] = [32, 32]
    for group in cfg.get("groups") or []:
        if isinstance(group, dict) and group.get("dppo"):
            group["dppo"].update(num_workers=1, num_envs_per_worker=4)
    return cfg


def train_preset(config: Path, env_steps: int | None, run_dir: Path, overrides: list[str], quick: bool) -> dict:
    """Train the preset file ``config`` for ``env_steps`` (all groups together; None: the preset's own
    ``train.total_env_steps``) into ``run_dir``, with ``--set``-style ``overrides`` (``quick``:
    :func:`shrink` first); returns the run's summary."""
    from hdppo.platform.config import load_config, validate
    from hdppo.platform.ray_runtime import shutdown_ray
    from hdppo.platform.trainer import Trainer

    steps = [] if env_steps is None else [f"train.total_env_steps={env_steps}"]
    cfg = load_config(config, [*steps, "train.eval_episodes=0", *overrides])
    data = cfg.model_dump(mode="json")
    cfg = validate(shrink(data) if quick else data)
    trainer = Trainer(cfg, run_dir)
    try:
        return trainer.train()
    finally:
        trainer.shutdown()
        if cfg.ray.backend == "ray":
            shutdown_ray()


# ----------------------------------------------------------------------------- statistics

def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson score interval ``[low, high]`` of a proportion ``k / n`` (Wilson 1927; good at 0 and 1 too)."""
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


# ----------------------------------------------------------------------------- run dirs

def checkpoint_steps(checkpoint: Path) -> int:
    """Env steps a checkpoint's groups had sampled, all groups together."""
    from hdppo.platform.checkpoint import load_checkpoint, sampled_env_steps

    return sampled_env_steps(load_checkpoint(checkpoint))


def records(run_dir: Path) -> list[dict]:
    """The run's metrics.jsonl lines (none if it has no file yet)."""
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


# ----------------------------------------------------------------------------- means over seeds

def t95(n: int) -> float:
    """Two-sided 95% Student t quantile for ``n`` degrees of freedom (table; 1.96 from 40 on; a
    missing n takes the nearest smaller tabulated one, which is slightly wider)."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
             12: 2.179, 15: 2.131, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021}
    if n <= 0:
        return float("nan")
    return table.get(n, table[max(k for k in table if k <= n)] if n < 40 else 1.96)


def stat(values: list[float]) -> dict:
    """Mean and half-width of its 95% t-interval over ``values`` (NaNs left out)."""
    v = np.array([x for x in values if x == x], np.float64)
    if not len(v):
        return {"mean": float("nan"), "ci95": float("nan"), "n": 0}
    half = t95(len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)) if len(v) > 1 else float("nan")
    return {"mean": float(v.mean()), "ci95": float(half), "n": int(len(v))}
