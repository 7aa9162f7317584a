"""The ``hdppo`` command: train, eval, export, self-label, check-env, ablate, sweep, scale, schema, presets.

argparse (standard library) rather than click or typer: a handful of subcommands need no dependency,
and its ``--help`` is what users of RL tools already know.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import textwrap
from pathlib import Path

from .errors import ConfigError, HdppoError
from .working_dir import use_working_dir


def _cmd_train(args: argparse.Namespace) -> int:
    from .trainer import train_from_file

    try:
        summary = train_from_file(args.config, args.set, args.run_dir, args.address, args.resume, args.working_dir)
    except HdppoError as exc:
        kept = getattr(exc, "kept_checkpoint", None)
        if kept is None:
            raise
        shown = _cause(exc)  # the message main() prints, with where the run stands added
        shown.args = (f"{shown} The run dir {kept.parent.parent} is kept with its last checkpoint ({kept.name}); once "
                      f"that is fixed, continue it with: {_resume_command(args, str(kept.parent.parent))}",)
        raise shown from None
    run_dir = summary["run_dir"]
    if "stopped" in summary:
        return _report_stop(args, summary)
    ev = (f"; deterministic eval return {summary['eval_return_mean']:.1f} ± {summary['eval_return_std']:.1f}"
          if "eval_return_mean" in summary else "")
    total = f" ({summary['total_s']:.0f}s with start-up and evaluation)" if "total_s" in summary else ""
    over = summary.get("total_env_steps")
    # Updates take whole train batches, so the last one may pass train.total_env_steps.
    past = ("" if summary.get("nothing_to_train") else
            f" (train.total_env_steps {over:,}, passed by the last update's whole batch)"
            if over and summary["env_steps"] > over else "")
    print(f"[hdppo] done: {summary['env_steps']:,} env steps{past} in {summary['wall_s']:.0f}s of training{total}{ev}")
    for name, gate in summary.get("never_started", {}).items():
        wait = ", ".join(f"{k} {v:,}" if isinstance(v, (int, float)) else f"{k} {v}" for k, v in gate.items())
        print(f"[hdppo] layer {name!r} never trained: its schedule.start_after ({wait}) was not reached, so its "
              "weights are the initial ones. Raise train.total_env_steps, or lower start_after.")
    print(f"[hdppo] run dir: {run_dir}  (config.yaml, metrics.jsonl, summary.json, checkpoints/)")
    print(f"[hdppo] TensorBoard logs: {run_dir}/tb  ->  tensorboard --logdir {run_dir}/tb")
    return 0


def _report_stop(args: argparse.Namespace, summary: dict) -> int:
    """Where a run stopped by SIGINT or SIGTERM is, and the command that continues it."""
    stop, run_dir = summary["stopped"], summary["run_dir"]
    print(f"[hdppo] {stop['reason']} at {summary['env_steps']:,}/{summary['total_env_steps']:,} env steps "
          f"(update {summary['updates']}); checkpoint {stop['checkpoint']}")
    if stop["abandoned"]:
        print(f"[hdppo] the update in flight did not finish within train.stop_timeout_s ({stop['stop_timeout_s']:g}s): "
              "dropped; the checkpoint is the state after the last update logged")
    print(f"[hdppo] run dir: {run_dir}  (config.yaml, metrics.jsonl, tb/, checkpoints/)")
    print(f"[hdppo] resume: {_resume_command(args, run_dir)}")
    return stop["exit_code"]


def _resume_command(args: argparse.Namespace, run_dir: str) -> str:
    """The ``hdppo train ... --resume`` that continues ``run_dir`` as this command started it."""
    import shlex

    return shlex.join(["hdppo", "train", args.config, *[a for s in args.set for a in ("--set", s)], "--run-dir", run_dir,
                       *(["--address", args.address] if args.address else []),
                       *(["--working-dir", args.working_dir] if args.working_dir else []), "--resume"])


def _output_path(path: Path, flag: str, overwrite: bool, *extra: Path) -> Path:
    """``path`` (and ``extra`` files written beside it) checked before any work: not a folder, not an
    existing file unless ``--overwrite`` (a user's files are never replaced unasked), and in a folder
    that exists or can be made by a user allowed to write there."""
    from .errors import ConfigError

    for f in (path, *extra):
        if f.is_dir():
            raise ConfigError(f"{flag} {f}: that is a folder. Name a file (e.g. {f / ('model' + (path.suffix or '.out'))}).")
        if f.exists() and not overwrite:
            raise ConfigError(f"{flag} {f}: the file exists, and hdppo does not replace files unasked. Pass "
                              "--overwrite to replace it, or name another file.")
    from .paths import write_error

    exc = write_error(path.absolute().parent)
    if exc is not None:
        raise ConfigError(f"{flag} {path}: no file can be written in {path.absolute().parent} "
                          f"({exc.strerror or exc}). Name a file in a folder you can write to.")
    return path


def _positive(kind: type):
    """An argparse type: a number above 0 (argparse turns the ValueError into a usage error, exit 2)."""
    def parse(text: str):
        value = kind(text)
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _run_dir_config(run_dir: Path, fix: str, working_dir: str | None = None):
    """The config a run dir was trained with; a clear error when the folder is not a run dir.
    ``working_dir`` (--working-dir): where the run's env and reward modules are, when the run
    was trained from that folder without naming it (its config has no ray.working_dir)."""
    from .config import load_config
    from .errors import CheckpointError, ConfigError

    if not run_dir.exists():
        raise CheckpointError(f"run dir {run_dir} does not exist. {fix}")
    if not (run_dir / "config.yaml").is_file():
        raise CheckpointError(f"{run_dir} is not an hdppo run dir (no config.yaml). {fix}")
    cfg = load_config(run_dir / "config.yaml")
    if working_dir is not None:
        from .config import RayConfig

        try:  # the check of the config's ray.working_dir
            use_working_dir(RayConfig._working_dir(working_dir))
        except ValueError as exc:
            raise ConfigError(f"--working-dir {working_dir}: {exc}.") from None
    use_working_dir(cfg.ray.working_dir)  # where the run's env and reward modules are
    return cfg


@contextlib.contextmanager
def _stdout_kept_for_json(active: bool):
    """With ``--json``, stdout holds the JSON alone: whatever the env prints while the episodes run
    (PyBullet's ``argv[0]=`` lines, from C) goes to stderr, at the file-descriptor level too."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved_fd, saved_obj = os.dup(1), sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        sys.stdout = saved_obj


def _cmd_eval(args: argparse.Namespace) -> int:
    with _stdout_kept_for_json(args.json):
        result, metrics, video, ckpt_name = _eval_result(args)
    _print_eval(args, result, metrics, video, ckpt_name)
    return 0


def _eval_result(args: argparse.Namespace) -> tuple[dict, dict, dict | None, str]:
    import numpy as np

    from .checkpoint import learner_states, load_checkpoint, policy_checkpoint
    from .evaluation import evaluate_with_metrics

    from .errors import ConfigError

    run_dir = Path(args.run_dir)
    if args.video and args.sampled_actions:
        raise ConfigError("hdppo eval: --sampled-actions is for the episodes' figures; a --video records the "
                          "policy's most likely actions. Drop one of the two.")
    if args.video:
        from .video import check_output

        check_output(args.video)  # a format that cannot be written fails before anything is loaded
        _output_path(Path(args.video), "--video", args.overwrite)
    cfg = _run_dir_config(run_dir, "Pass the folder `hdppo train` printed, e.g. runs/default.", args.working_dir)
    ckpt = policy_checkpoint(run_dir, args.checkpoint)
    states = learner_states(load_checkpoint(ckpt))
    video, metrics = None, {}
    if args.video:
        from .video import record_video

        # One env copy, so its returns may differ a little from the several copies of a plain eval.
        rec = record_video(cfg, states, args.video, args.episodes, seed=args.seed, fps=args.fps,
                           scripted=args.scripted)
        returns, metrics = rec.returns, rec.metrics
        video = {"video": str(args.video), "frames": rec.frames, "size": list(rec.size or ()), "fps": rec.fps,
                 "lengths": rec.lengths}
    else:
        returns, metrics = evaluate_with_metrics(cfg, states, args.episodes, seed=args.seed, scripted=args.scripted,
                                                 deterministic=not args.sampled_actions)
    result = {"run_dir": str(run_dir), "checkpoint": ckpt.name, "episodes": len(returns), "scripted": args.scripted,
              "sampled_actions": args.sampled_actions,
              "return_mean": float(np.mean(returns)), "return_std": float(np.std(returns)), "returns": returns,
              "episode_metrics": metrics}
    result |= video or {}
    return result, metrics, video, ckpt.name


def _print_eval(args: argparse.Namespace, result: dict, metrics: dict, video: dict | None, ckpt_name: str) -> None:
    returns = result["returns"]
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{ckpt_name}: {len(returns)} episode{'' if len(returns) == 1 else 's'}, return {result['return_mean']:.2f} ± {result['return_std']:.2f}")
        if args.scripted:
            print(f"  acting by their teacher.policy, not their weights: {', '.join(args.scripted)}")
        if args.sampled_actions:
            print("  actions sampled from the policies, not their most likely ones")
        for k, v in metrics.items():
            print(f"  {k}: {v:.3f} (mean per episode)")
        if video:
            w, h = video["size"]
            print(f"[hdppo] video: {args.video} ({video['frames']} frames, {w}x{h}, {video['fps']:g} fps)")


def _cmd_export(args: argparse.Namespace) -> int:
    from .checkpoint import learner_states, load_checkpoint, policy_checkpoint
    from .errors import ConfigError
    from .export import FORMATS, check_format, check_layer, export_layer

    run_dir = Path(args.run_dir)
    cfg = _run_dir_config(run_dir, "Pass the folder `hdppo train` printed, e.g. runs/default.", args.working_dir)
    layer = check_layer(cfg, args.layer)
    check_format(args.format)
    ckpt = policy_checkpoint(run_dir, args.checkpoint)
    out = Path(args.out) if args.out else run_dir / "export" / f"{layer}{FORMATS[args.format]}"
    other = {ext: fmt for fmt, ext in FORMATS.items() if fmt != args.format}
    if out.suffix.lower() in other:  # a TorchScript file named .onnx (or the reverse) would mislead its reader
        raise ConfigError(f"--out {out}: a {out.suffix} file with --format {args.format}. Name it "
                          f"{out.with_suffix(FORMATS[args.format]).name}, or pass --format {other[out.suffix.lower()]}.")
    _output_path(out, "--out", args.overwrite, out.with_name(out.name + ".json"))
    state = load_checkpoint(ckpt)
    source: dict = {"run_dir": str(run_dir), "checkpoint": ckpt.name}
    origin = state.get("weights_from", {}).get(layer)
    if origin is None and layer in state.get("fixed", {}):  # a checkpoint from before weights_from was kept
        origin = {"checkpoint": cfg.layer(layer).schedule.checkpoint, "frozen": True}
    if origin is not None:  # a frozen layer's weights are another run's, not this one's
        source["weights_from"] = origin
    learner = learner_states(state)[layer]
    # A layer whose start_after gate had not opened by this checkpoint was never updated: its weights
    # are the random initialisation, which an exported file would pass off as a policy.
    untrained = origin is None and not learner.get("version")
    if untrained:
        source["untrained"] = True
    model, meta = export_layer(cfg, learner, layer, args.format, out, source)
    print(f"[hdppo] {layer} ({ckpt.name}) exported as {args.format}: {model}")
    if origin is not None and origin.get("frozen"):
        print(f"[hdppo] {layer} is frozen in this run: its weights are those of {origin['checkpoint']}")
    if untrained:
        gate = cfg.layer(layer).schedule.start_after
        why = f" (its start_after gate on {gate.layer} had not opened)" if gate is not None else ""
        print(f"[hdppo] warning: {layer} had not been updated by {ckpt.name}{why}: the exported weights are its "
              "random initialisation (the JSON says untrained: true). Export a later checkpoint once it has "
              "trained.", file=sys.stderr)
    print(f"[hdppo] input layout, normalization and action space: {meta}")
    return 0


def _cmd_self_label(args: argparse.Namespace) -> int:
    from .self_label import SelfLabelSettings, self_label_run

    run_dir, out = Path(args.run_dir), Path(args.out)
    settings = SelfLabelSettings(iterations=args.iterations, instances=args.instances, samples=args.samples,
                                 lr=args.lr, epochs=args.epochs, seed=args.seed, valid_instances=args.valid_instances,
                                 valid_every=args.valid_every)
    cfg = _run_dir_config(run_dir, "Pass the folder `hdppo train` printed, e.g. runs/jobshop.", args.working_dir)
    summary = self_label_run(run_dir, out, settings, cfg, args.checkpoint)
    print(f"[hdppo] self-labeled {summary['layer']} of {run_dir} ({summary['source_checkpoint']}) in "
          f"{summary['wall_s']:.0f}s: {settings.iterations} iterations of {settings.instances} instances x "
          f"{settings.samples} samples")
    print(f"[hdppo] run dir: {out}  (config.yaml, checkpoints/ with best.pt by validation, self_label.json, tb/)")
    return 0


def _cmd_check_env(args: argparse.Namespace) -> int:
    from ..envs.check import check_target

    target = args.target
    if ":" not in target and not Path(target).exists():  # a preset by name, as train takes it
        import gymnasium as gym

        from .presets import resolve_config_path

        if target not in gym.registry:
            try:
                target = str(resolve_config_path(target))
            except ConfigError:  # no preset of that name either: check_target says what the id lacks
                pass
    cfg = None
    if target.endswith((".yaml", ".yml")) and Path(target).exists():
        from .config import load_config

        cfg = load_config(target)
        use_working_dir(cfg.ray.working_dir)
        target = cfg.env  # envs/ reads no config files: it gets the env section
    report = check_target(target, steps=args.steps)
    print(report)
    if cfg is not None:  # and the config's layers over that env, as a training worker builds them
        from .hierarchy_check import check_hierarchy

        print(check_hierarchy(cfg, args.steps))
    return 0


def _cmd_ablate(args: argparse.Namespace) -> int:
    from .ablation import ablate, parse_counts

    out = Path(args.out) if args.out else Path("runs") / f"ablate-{Path(args.config).stem}"
    ablate(args.config, parse_counts(args.workers), out, args.set)
    print((out / "ablation.md").read_text())
    print(f"[hdppo] table and plot: {out}/ablation.md, {out}/ablation.png")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .sweep import SWEEP_JSON, SWEEP_MD, failures, sweep, to_rich

    out, layer, rows = sweep(args.config, args.grid, samples=args.samples, metric=args.metric, mode=args.mode,
                             layer=args.layer, sweep_dir=args.sweep_dir, max_concurrent=args.max_concurrent,
                             overrides=args.set, address=args.address, working_dir=args.working_dir)
    Console().print(to_rich(rows, args.metric, layer, args.mode))
    for line in failures(rows):
        print(f"[hdppo] failed: {line}")
    print(f"[hdppo] sweep dir: {out}  ({SWEEP_MD}, {SWEEP_JSON}, one run dir per trial, Tune's state in tune/)")
    print(f"[hdppo] TensorBoard, every trial and layer: tensorboard --logdir {out}")
    return 1 if failures(rows) else 0  # some trials failed (all failing raised above: exit 2)


def _cmd_scale(args: argparse.Namespace) -> int:
    from .elastic import request_scale
    from .errors import ConfigError

    run_dir = Path(args.run_dir)
    cfg = _run_dir_config(run_dir, "Pass the folder of a run that `hdppo train` is training now.")
    groups = ["+".join(g) for g in cfg.layer_groups()]
    if args.group is not None and args.group not in groups:
        raise ConfigError(f"hdppo scale --group: {run_dir} has no group {args.group!r}; its groups are "
                          f"{', '.join(groups)}.")
    if args.workers < 1:
        raise ConfigError(f"hdppo scale --workers: give at least 1 worker, not {args.workers}.")
    from .trainer import is_training

    if not is_training(run_dir):
        sets = " ".join(f"--set {o}" for o in _worker_overrides(cfg, args.group, args.workers))
        raise ConfigError(f"no trainer is running {run_dir} now (its lock is free), and scale resizes a "
                          f"training in progress. To continue this run with another worker count, resume it with "
                          f"the count set: hdppo train {run_dir / 'config.yaml'} --run-dir {run_dir} --resume {sets}")
    request_scale(run_dir, args.workers, args.group)
    print(f"[hdppo] asked {run_dir} to run {'group ' + repr(args.group) if args.group else 'every group'} with "
          f"{args.workers} workers; the trainer applies it after its current update.")
    return 0


def _worker_overrides(cfg, group: str | None, workers: int) -> list[str]:
    """The --set values that give ``group`` (layers joined by '+'; None: every group) ``workers``
    workers: every layer of it (the layers of a group must agree), and its ``groups[i].dppo`` too
    where the group states its count there (a run dir's config.yaml writes the group's count into
    each of its layers as well, so one without the other would disagree)."""
    from .config import GroupSpec, _members

    out = []
    for names in cfg.layer_groups():
        if group is not None and "+".join(names) != group:
            continue
        stated = next((i for i, g in enumerate(cfg.groups or []) if isinstance(g, GroupSpec)
                       and set(names) <= set(_members(g)) and "num_workers" in g.dppo), None)
        out += ([f"groups.{stated}.dppo.num_workers={workers}"] if stated is not None else []) + \
            [f"layers.{n}.dppo.num_workers={workers}" for n in names]
    return out


def _cmd_schema(args: argparse.Namespace) -> int:
    from .config import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def _cmd_presets(args: argparse.Namespace) -> int:
    from .errors import ConfigError
    from .presets import preset_descriptions, preset_paths

    described = preset_descriptions()
    if not described:
        raise ConfigError("no presets are installed with this hdppo. Install it from the repository "
                          "(pip install . there) to get them, or pass a YAML file to hdppo train.")
    width = max(map(len, described))
    for name, text in described.items():
        print(f"{name:<{width}}  {text}")
    print(f"[hdppo] train one with `hdppo train NAME`; to edit one, copy its file from "
          f"{next(iter(preset_paths().values())).parent}")
    return 0


# Which checkpoint eval and export read (hdppo.platform.checkpoint.policy_checkpoint).
CHECKPOINT_CHOICES = ("latest", "best")
CHECKPOINT_HELP = ("latest (default): the last checkpoint written; best: checkpoints/best.pt, the weights that "
                   "scored best on train.eval_every's evaluations")
WORKING_DIR_HELP = ("the folder of your env and reward modules, shipped to every node of a cluster and put on "
                    "sys.path here (sets ray.working_dir)")
RUN_WORKING_DIR_HELP = ("the folder of the run's env and reward modules, put on sys.path (for a run trained from "
                        "that folder without --working-dir)")


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("hdppo")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hdppo", description="Hierarchical multi-agent distributed PPO on Ray.")
    p.add_argument("--version", action="version", version=f"hdppo {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train from a YAML config")
    t.add_argument("config", help="YAML config file, or a preset by name (hdppo presets), e.g. default")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set layers.0.ppo.lr=1e-4 (repeatable)")
    t.add_argument("--run-dir", help="run folder (default runs/<name>)")
    t.add_argument("--address", help="Ray address: 'auto' or host:port joins a cluster; default embedded local Ray")
    t.add_argument("--working-dir", metavar="DIR", help=WORKING_DIR_HELP)
    t.add_argument("--resume", action="store_true", help="continue the run dir from its last checkpoint")
    t.set_defaults(fn=_cmd_train)

    e = sub.add_parser("eval", help="deterministic episodes with a run's last checkpoint")
    e.add_argument("run_dir")
    e.add_argument("--episodes", type=_positive(int), default=10, help="episodes to play (default 10)")
    e.add_argument("--seed", type=int, default=None, help="the env seed of the first episode (default: the run's "
                   "train.seed + 999,983, games the training never saw); up to 8 env copies play at once, copy i "
                   "seeded from (seed, i), and episodes are listed copy by copy, so the first k are the same games "
                   "for any --episodes >= k up to 8 (a batched env of your own keeps this if it seeds its copies "
                   "so; skirmish's random opponent moves from one stream shared by the copies)")
    e.add_argument("--working-dir", metavar="DIR", help=RUN_WORKING_DIR_HELP)
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.add_argument("--video", metavar="PATH", help="record the episodes (one env copy, headless) into PATH, .mp4 or "
                   ".gif; a hierarchy's frames show the upper layers' commands. The episodes are played in turn on "
                   "that one copy, and the returns printed are theirs: after the first, other games than without "
                   "--video")
    e.add_argument("--overwrite", action="store_true", help="replace the --video file if it exists")
    e.add_argument("--fps", type=_positive(float), help="frames a second of the video (default the env's render_fps, else 30)")
    e.add_argument("--checkpoint", choices=CHECKPOINT_CHOICES, default="latest", help=CHECKPOINT_HELP)
    e.add_argument("--scripted", action="append", default=[], metavar="LAYER",
                   help="the layer acts by its teacher.policy instead of its weights (repeatable): how well the "
                        "other layers do with the scripted skill")
    e.add_argument("--sampled-actions", action="store_true",
                   help="act by actions sampled from the policies, as in training (seeded by --seed), not by their "
                        "most likely actions")
    e.set_defaults(fn=_cmd_eval)

    x = sub.add_parser("export", help="write a layer's deterministic policy as ONNX or TorchScript, with a JSON of its inputs")
    x.add_argument("run_dir")
    x.add_argument("--layer", help="the layer to export (default: the only one)")
    x.add_argument("--format", choices=["onnx", "torchscript"], default="onnx",
                   help="onnx (needs pip install 'hdppo[export]') or torchscript (default onnx)")
    x.add_argument("--out", help="model file (default RUN_DIR/export/<layer>.onnx or .pt; the JSON goes beside it)")
    x.add_argument("--checkpoint", choices=CHECKPOINT_CHOICES, default="latest", help=CHECKPOINT_HELP)
    x.add_argument("--overwrite", action="store_true", help="replace the model file and its JSON if they exist")
    x.add_argument("--working-dir", metavar="DIR", help=RUN_WORKING_DIR_HELP)
    x.set_defaults(fn=_cmd_export)

    sl = sub.add_parser("self-label", help="fine-tune a run's policy on the best of its own sampled solutions "
                        "(job shop and other seeded construction tasks); writes a new run dir")
    sl.add_argument("run_dir")
    sl.add_argument("--out", required=True, help="the new run dir (must not exist, or be empty)")
    sl.add_argument("--iterations", type=_positive(int), default=200,
                    help="iterations, each a fresh batch of instances (default 200)")
    sl.add_argument("--instances", type=_positive(int), default=16, help="instances per iteration (default 16)")
    sl.add_argument("--samples", type=_positive(int), default=64, help="solutions sampled per instance; the best is "
                    "the label (default 64)")
    sl.add_argument("--lr", type=_positive(float), default=1e-4, help="Adam learning rate (default 1e-4)")
    sl.add_argument("--epochs", type=_positive(int), default=1, help="Adam steps on each iteration's labels (default 1)")
    sl.add_argument("--seed", type=int, default=0, help="seed of the instances and of the sampling (default 0)")
    sl.add_argument("--valid-instances", type=int, default=64, help="fixed held-out instances solved greedily to "
                    "pick checkpoints/best.pt (default 64; 0: none)")
    sl.add_argument("--valid-every", type=_positive(int), default=25, help="iterations between validations and "
                    "checkpoints (default 25)")
    sl.add_argument("--checkpoint", choices=CHECKPOINT_CHOICES, default="latest", help=CHECKPOINT_HELP)
    sl.add_argument("--working-dir", metavar="DIR", help=RUN_WORKING_DIR_HELP)
    sl.set_defaults(fn=_cmd_self_label)

    c = sub.add_parser("check-env", help="run the official env checker and a short rollout through hdppo")
    c.add_argument("target", help="a Gymnasium id, 'module:factory', or a config file (then also its layers over "
                   "the env: lanes, input sizes, views, rewards and teachers, played with untrained policies)")
    c.add_argument("--steps", type=_positive(int), default=200, help="env steps of the rollout through hdppo (default 200)")
    c.set_defaults(fn=_cmd_check_env)

    a = sub.add_parser("ablate", help="train a config with several worker counts; table and plot")
    a.add_argument("config")
    a.add_argument("--workers", default="1,2,4,8", help="comma-separated worker counts (default 1,2,4,8)")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value for every run, as train's --set (repeatable)")
    a.add_argument("--out", help="output folder (default runs/ablate-<config name>)")
    a.set_defaults(fn=_cmd_ablate)

    w = sub.add_parser("sweep", help="train a grid of configs as concurrent Ray Tune trials; a ranked table")
    w.add_argument("config")
    w.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="a config path and its values, parsed like --set values, e.g. --grid layers.0.ppo.lr=1e-4,3e-4 "
                        "(repeatable: the trials are every combination)")
    w.add_argument("--samples", type=int, default=1, help="trials per grid point, seeds train.seed + 0..N-1 (default 1)")
    w.add_argument("--metric", default="charts/episodic_return", help="rank by this tag (default charts/episodic_return)")
    w.add_argument("--layer", help="the layer whose metric ranks the trials (default the top layer)")
    w.add_argument("--mode", choices=["max", "min"], default="max", help="whether higher or lower is better")
    w.add_argument("--sweep-dir", help="output folder (default runs/<name>-sweep-<timestamp>)")
    w.add_argument("--max-concurrent", type=_positive(int), help="trials at once (default: one per CPU, all if fewer)")
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every trial")
    w.add_argument("--address", help="Ray address: 'auto' or host:port joins a cluster; default embedded local Ray")
    w.add_argument("--working-dir", metavar="DIR", help=WORKING_DIR_HELP)
    w.set_defaults(fn=_cmd_sweep)

    sc = sub.add_parser("scale", help="resize a running training's worker pool")
    sc.add_argument("run_dir", help="the run dir of a training in progress")
    sc.add_argument("--workers", type=int, required=True, help="new number of rollout workers")
    sc.add_argument("--group", help="the group, named by its layers joined by '+' as the run prints it "
                    "(e.g. strategy+tactics; a layer of its own: its name); default every group")
    sc.set_defaults(fn=_cmd_scale)

    s = sub.add_parser("schema", help="print the JSON Schema of the config (for editors)")
    s.set_defaults(fn=_cmd_schema)

    pr = sub.add_parser("presets", help="list the preset configs installed with hdppo, one line each")
    pr.set_defaults(fn=_cmd_presets)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # As with `python -m`, modules in the current folder can be named as env entry points.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return args.fn(args)
    except BrokenPipeError:  # the output piped into `head` and the like, which closed it: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error at exit's flush
        return 0
    except HdppoError as exc:
        exc = _cause(exc)
        width = 100 if not sys.stderr.isatty() else min(os.get_terminal_size(2).columns, 100)
        # Paths and commands stay whole, so that they can be copied from the message.
        print(textwrap.fill(f"hdppo {args.command}: error: {exc}{_saved_stack(exc)}", width=width, break_on_hyphens=False,
                            break_long_words=False), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        # hdppo train stops its loop itself on SIGINT/SIGTERM (_report_stop); this is a signal outside
        # it (hdppo.platform.interrupts.Interrupted says what was kept) or in another command.
        print(f"hdppo {args.command}: {str(exc) or 'interrupted (Ctrl-C) before anything was kept'}",
              file=sys.stderr)
        return getattr(exc, "exit_code", 130)


def _saved_stack(exc: HdppoError) -> str:
    """Every worker failed, or the evaluation's env raised: the (last) whole stack, saved to a file
    the paragraph names (a run that fails at its start leaves no run dir to keep it in, and the
    console gets one paragraph)."""
    import tempfile

    stack = getattr(exc, "worker_traceback", None)
    if not stack:
        return ""
    try:
        fd, path = tempfile.mkstemp(prefix="hdppo-worker-traceback-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(stack)
    except OSError:
        return ""
    return f" The whole traceback: {path}"


def _cause(exc: HdppoError) -> HdppoError:
    """An error raised inside a Ray actor arrives wrapped with the remote traceback; show its cause."""
    import ray.exceptions

    cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayError) else None
    return cause if isinstance(cause, HdppoError) else exc


if __name__ == "__main__":
    sys.exit(main())
