"""``hdppo sweep CONFIG --grid key=v1,v2 ...``: a grid of configs trained as concurrent trials.

The grid (the cartesian product of the ``--grid`` values, times ``--samples`` seeds) runs through
Ray Tune on the one Ray cluster: each trial is a function trainable that runs the usual
:class:`~hdppo.platform.trainer.Trainer` into its own run dir, and reports every update to Tune
through a trainer hook. Each trial gets a CPU budget (the cluster's CPUs over the trials that run
at once) and a placement group whose bundles are exactly what its Trainer declares for its
learners and rollout workers: Tune captures child actors into the trial's placement group, so a
trial can never take another's CPUs. The trial's own process (its driver) holds no CPU, as the
driver of ``hdppo train`` holds none, and is pinned to this machine's node so that every run dir
is written here.

Grid expansion, validation and ranking are pure functions, testable without Ray.
"""
from __future__ import annotations

import contextlib
import copy
import difflib
import itertools
import json
import logging
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import yaml

from . import metrics as M
from .config import Config, ConfigLoader, load_config, set_path, validate
from .errors import ConfigError, HdppoError

SWEEP_MD = "sweep.md"
SWEEP_JSON = "sweep.json"
TUNE_DIR = "tune"  # Tune's own experiment state, inside the sweep dir


# ----------------------------------------------------------------------------- the grid

def split_values(text: str) -> list[str]:
    """``1e-4,3e-4`` -> ``['1e-4', '3e-4']``; commas inside brackets stay (``[64,64],[128]``)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def parse_grid(specs: list[str]) -> dict[str, list[Any]]:
    """``["layers.0.ppo.lr=1e-4,3e-4", ...]`` -> ``{"layers.0.ppo.lr": [...]}``, values parsed as
    YAML like ``--set`` values. Order is kept: the first key varies slowest."""
    if not specs:
        raise ConfigError("hdppo sweep needs at least one --grid KEY=V1,V2 (a dotted config path as --set takes, "
                          "e.g. --grid layers.0.ppo.lr=1e-4,3e-4).")
    grid: dict[str, list[Any]] = {}
    for spec in specs:
        key, sep, raw = spec.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise ConfigError(f"--grid {spec!r}: expected KEY=V1,V2,..., e.g. --grid layers.0.ppo.lr=1e-4,3e-4.")
        if key in grid:
            raise ConfigError(f"--grid {key}: given twice; list all its values in one --grid {key}=V1,V2,...")
        if key.split(".")[0] in ("ray", "name"):
            raise ConfigError(f"--grid {key}: the sweep's Ray and name are shared by every trial; set them once "
                              "with --set or --address, and grid over training fields.")
        values = []
        for piece in split_values(raw):
            if not piece:
                raise ConfigError(f"--grid {spec!r}: an empty value; separate values with single commas.")
            try:
                values.append(yaml.load(piece, Loader=ConfigLoader))
            except yaml.YAMLError as exc:
                raise ConfigError(f"--grid {key}={piece}: the value is not valid YAML ({exc}).") from None
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) < len(values):
            raise ConfigError(f"--grid {spec!r}: a value is repeated; use --samples N to repeat trials with new seeds.")
        grid[key] = values
    return grid


def expand_grid(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The cartesian product: one ``{key: value}`` per grid point, the first key varying slowest."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def get_path(data: Any, dotted: str) -> Any:
    """The value at ``a.b.c`` (a list step is an index or a layer name), as ``set_path`` sets it."""
    node = data
    for part in dotted.split("."):
        if isinstance(node, list):
            node = node[int(part)] if part.isdigit() else next(x for x in node if x.get("name") == part)
        else:
            node = node[part]
    return node


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def trial_name(index: int, width: int, params: dict[str, Any], sample: int | None) -> str:
    """``03_lr=0.0003_s1``: the index keeps names unique, the rest says what the trial is."""
    short = {k: k.split(".")[-1] for k in params}
    if len(set(short.values())) < len(short):
        short = {k: k for k in params}
    def fmt(v: Any) -> str:
        return "-".join(fmt(x) for x in v) if isinstance(v, list) else _fmt(v)

    text = "_".join([f"{index:0{width}d}", *(f"{short[k]}={fmt(v)}" for k, v in params.items())])
    text = re.sub(r"[^A-Za-z0-9_.=+\-]", "-", text)[:80]
    return text + (f"_s{sample}" if sample is not None else "")


def known_metrics() -> set[str]:
    """Every scalar tag hdppo logs (the constants in ``metrics.py``)."""
    return {v for k, v in vars(M).items() if k.isupper() and isinstance(v, str) and "/" in v
            and v not in M.NOT_SCALARS and v not in M.SUFFIXED_TAGS}


def check_metric(metric: str) -> None:
    if metric in known_metrics() or any(re.fullmatch(rf"{re.escape(t)}/(\d+(_\d+)?|max)", metric) for t in M.SUFFIXED_TAGS):
        return
    # An env's own episode metrics (env.episode_metrics: a win rate, a makespan), named by its info keys.
    if any(re.fullmatch(rf"{re.escape(t)}/\w+", metric) for t in (M.EPISODE_INFO, M.EVAL_EPISODE_INFO)):
        return
    close = difflib.get_close_matches(metric, sorted(known_metrics()), n=1, cutoff=0.5)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ConfigError(f"--metric {metric!r} is not a metric hdppo logs.{hint} Use a TensorBoard tag such as "
                      f"{M.CHART_EPISODIC_RETURN}, {M.EVAL_RETURN_MEAN}, {M.LOSS_APPROX_KL} or "
                      f"{M.PERF_ENV_STEPS_PER_S} (all are listed in the README).")


def check_layer(cfg: Config, layer: str | None) -> str:
    """The layer whose metric ranks the trials; default the top (first) layer."""
    names = [x.name for x in cfg.layers]
    if layer is None:
        return names[0]
    if layer not in names:
        raise ConfigError(f"--layer {layer!r}: the config has no such layer; its layers are {', '.join(names)}.")
    return layer


def plan_trials(config: str | Path, grid_specs: list[str], samples: int = 1,
                overrides: list[str] | None = None) -> tuple[Config, list[dict[str, Any]]]:
    """Validate the base config and every trial's config, before anything runs.

    Returns the base config and one trial per grid point and sample: ``name``, ``params``
    (each grid key's value as validated), ``sample``, ``seed`` and the resolved ``config``.
    A sample's seed is the point's ``train.seed`` plus the sample index.
    """
    if samples < 1:
        raise ConfigError(f"--samples {samples}: give at least 1 (trials per grid point, each with its own seed).")
    grid = parse_grid(grid_specs)
    base = load_config(config, overrides)
    base_data = base.model_dump(mode="json")
    points = expand_grid(grid)
    n = len(points) * samples
    width = max(2, len(str(n - 1)))
    trials = []
    for point in points:
        # Applied as --set applies its values (set_path), on the base config with its --set overrides.
        data = copy.deepcopy(base_data)
        for k, v in point.items():
            set_path(data, k, copy.deepcopy(v), source="--grid")
        where = ", ".join(f"{k}={_fmt(v)}" for k, v in point.items())
        data = validate(data, source=f"{config} with --grid point {where}").model_dump(mode="json")
        params = {}
        for k, v in point.items():
            try:
                params[k] = get_path(data, k)
            except (KeyError, IndexError, StopIteration, TypeError, ValueError):
                params[k] = v
        for s in range(samples):
            seeded = {**data, "train": {**data["train"], "seed": data["train"]["seed"] + s}}
            trials.append({"name": trial_name(len(trials), width, params, s if samples > 1 else None),
                           "params": params, "sample": s, "seed": seeded["train"]["seed"],
                           "config": validate(seeded, source=str(config)).model_dump(mode="json")})
    _refuse_twins(trials)
    return base, trials


def _refuse_twins(trials: list[dict[str, Any]]) -> None:
    """Two trials with one config would train the same run twice and count as two samples (a grid
    over train.seed with --samples: point seed 0, sample 1 is point seed 1, sample 0)."""
    import json

    seen: dict[str, str] = {}
    for t in trials:
        key = json.dumps(t["config"], sort_keys=True)
        if key in seen:
            raise ConfigError(f"--grid/--samples: trials {seen[key]} and {t['name']} would train the same config "
                              f"(train.seed {t['seed']}): each sample adds its index to its point's train.seed. With "
                              "train.seed in --grid, space its values at least --samples apart, or drop --samples.")
        seen[key] = t["name"]


# ----------------------------------------------------------------------------- resources

def trial_bundles(cfg: Config, cpus: float) -> list[dict[str, float]]:
    """The placement-group bundles of a trial's actors, one per learner and rollout worker: what
    its Trainer, given ``cpus``, declares (the same sizing code). None with the local backend,
    which runs the whole trial in the trial's own process (that process then holds ``cpus``)."""
    from .group import group_cpus
    from .trainer import plan_groups

    if cfg.ray.backend == "local":
        return []
    bundles: list[dict[str, float]] = []
    for names, workers, share in plan_groups(cfg, cpus):
        learner, worker = group_cpus(share, workers, cfg.group_dppo(names).worker_cpus, len(names))
        bundles += [{"CPU": learner} for _ in names] + [{"CPU": worker} for _ in range(workers)]
    return bundles


def trial_budget(cluster_cpus: float, num_trials: int, max_concurrent: int | None) -> tuple[int, float]:
    """(trials at once, CPUs each). By default as many at once as there are CPUs, so that each
    trial has at least one; ``--max-concurrent`` may go further (fractional shares)."""
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent {max_concurrent}: give at least 1.")
    k = max_concurrent if max_concurrent is not None else max(1, int(cluster_cpus))
    k = max(1, min(k, num_trials))
    # Floor, as group_cpus does: shares rounded up could sum to more than the cluster.
    return k, math.floor(1000 * cluster_cpus / k) / 1000


# ----------------------------------------------------------------------------- results

def summarize_run(run_dir: Path, layer: str, metric: str, mode: str) -> dict[str, Any]:
    """Final and best value of ``metric`` for ``layer``, env steps and wall time, from the run dir."""
    out: dict[str, Any] = {"final": None, "best": None, "env_steps": None, "wall_s": None,
                           "started_at": None, "finished_at": None}
    jsonl = run_dir / "metrics.jsonl"
    if jsonl.is_file():
        recs = M.read_jsonl(jsonl)
        values = [r["value"] for r in recs if r["layer"] == layer and r["tag"] == metric and math.isfinite(r["value"])]
        if values:
            out["final"], out["best"] = values[-1], (max if mode == "max" else min)(values)
        times = [r["time"] for r in recs]
        if times:
            out["started_at"], out["finished_at"] = min(times), max(times)
        steps = [r["step"] for r in recs]
        out["env_steps"] = max(steps) if steps else None
    summary = run_dir / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        out["env_steps"], out["wall_s"] = s["env_steps"], round(s["wall_s"], 1)
    return out


def check_mode(mode: str) -> None:
    if mode not in ("max", "min"):
        raise ConfigError(f"--mode {mode!r}: use max (a return, say) or min (a loss).")


def rank(rows: list[dict[str, Any]], mode: str, key: str = "final") -> list[dict[str, Any]]:
    """Rows best first by ``key`` (``mode`` max or min), numbered from 1; rows without a value
    (a failed trial, a metric never logged) come last, unranked. Ties keep the trials' order."""
    check_mode(mode)
    have = [r for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    rest = [r for r in rows if not any(r is h for h in have)]
    have = sorted(have, key=lambda r: r[key], reverse=mode == "max")
    return [{**r, "rank": i + 1} for i, r in enumerate(have)] + [{**r, "rank": None} for r in rest]


def _columns(rows: list[dict[str, Any]], run_dir: bool) -> tuple[list[str], list[list[str]]]:
    keys = list(rows[0]["params"]) if rows else []
    short = {k: k.split(".")[-1] for k in keys}
    if len(set(short.values())) < len(short):
        short = {k: k for k in keys}

    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    head = ["rank", "trial", *(short[k] for k in keys), "seed", "final", "best", "env steps", "wall s"]
    body = [[num(r["rank"]) if r["status"] == "ok" else r["status"], r["trial"], *(_fmt(r["params"][k]) for k in keys),
             str(r["seed"]), num(r["final"]), num(r["best"]), num(r["env_steps"]), num(r["wall_s"])] for r in rows]
    if run_dir:
        head.append("run dir")
        for cells, r in zip(body, rows):
            cells.append(r["run_dir"] or "-")
    return head, body


_NUMERIC = ("rank", "seed", "final", "best", "env steps", "wall s")


def failures(rows: list[dict[str, Any]]) -> list[str]:
    """One line per failed trial, for under the table."""
    return [f"{r['trial']}: {r['error']} (traceback: {TUNE_DIR}/{r['trial']}/error.txt)" for r in rows if r["error"]]


def to_markdown(rows: list[dict[str, Any]], metric: str, layer: str, mode: str) -> str:
    head, body = _columns(rows, run_dir=True)
    lines = [f"Trials ranked by the final `{metric}` of layer `{layer}` ({mode}imized), best first; "
             "`best` is the best value during training.", "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---:" if h in _NUMERIC else "---" for h in head) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    failed = failures(rows)
    if failed:
        lines += ["", "Failed trials:", "", *(f"- {line}" for line in failed)]
    return "\n".join(lines) + "\n"


def to_rich(rows: list[dict[str, Any]], metric: str, layer: str, mode: str) -> Any:
    from rich.table import Table

    head, body = _columns(rows, run_dir=False)  # the run dir is the sweep dir / the trial's name
    table = Table(title=f"{metric} of layer {layer!r}, {mode}imized: trials best first")
    for h in head:
        table.add_column(h, justify="right" if h in _NUMERIC else "left", overflow="fold")
    for cells in body:
        table.add_row(*cells)
    return table


def write_results(rows: list[dict[str, Any]], sweep_dir: Path, metric: str, layer: str, mode: str) -> None:
    (sweep_dir / SWEEP_JSON).write_text(json.dumps({"metric": metric, "layer": layer, "mode": mode, "trials": rows},
                                                   indent=2))
    (sweep_dir / SWEEP_MD).write_text(to_markdown(rows, metric, layer, mode))


# ----------------------------------------------------------------------------- running

def _trial(spec: dict[str, Any]) -> None:
    """One Tune trial: the usual Trainer into the trial's run dir, each update reported to Tune."""
    from ray import tune

    from .trainer import Trainer

    t = spec["trial"]
    os.chdir(t["cwd"])  # Tune starts a trial in its own folder; configs name paths from the user's
    cfg = validate(t["config"], source=f"sweep trial {t['name']}")
    latest: dict[str, Any] = {}

    def report(trainer: Trainer, layer: str, step: int, metrics: dict) -> None:
        latest.update({f"{layer}/{k}": float(v) for k, v in metrics.items()
                       if not k.startswith("_") and isinstance(v, (int, float))})
        tune.report({**latest, "env_steps": int(sum(g.env_steps for g in trainer.groups))})

    trainer = Trainer(cfg, t["run_dir"], hooks=[report], quiet=True, cpus=t["cpus"])
    try:
        summary = trainer.train()
    finally:
        trainer.shutdown()
    final = {f"{layer.name}/{M.EVAL_RETURN_MEAN}": summary["eval_return_mean"]
             for layer in cfg.layers if "eval_return_mean" in summary}
    tune.report({**latest, **final, "env_steps": summary["env_steps"]})


def _trial_resources(spec: dict[str, Any]) -> Any:
    from ray import tune

    t = spec["trial"]
    return tune.PlacementGroupFactory([t["head"], *t["bundles"]], strategy="PACK")


def _trial_dirname(trial: Any) -> str:
    return trial.config["trial"]["name"]


def _driver_node_resource() -> dict[str, float]:
    """A sliver of this node's ``node:<ip>`` resource: the trial's own process runs here, where the
    sweep dir is (only the driver's machine writes run dirs, as with ``hdppo train``)."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    for node in ray.nodes():
        if node["NodeID"] == node_id:
            key = next((k for k in node["Resources"] if k.startswith("node:") and not k.startswith("node:__")), None)
            return {key: 0.001} if key else {}
    return {}


def _cause(exc: BaseException) -> BaseException:
    """The error a trial raised, without the wrappers (Tune's, the remote traceback's)."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None) or exc.__cause__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


def default_sweep_dir(cfg: Config) -> Path:
    return Path("runs") / f"{cfg.name}-sweep-{time.strftime('%Y%m%d-%H%M%S')}"


def check_out_dir(path: Path, flag: str) -> None:
    """That ``path`` (passed as ``flag``) can be an output folder: a folder, or one that can be
    created (tested by making it and writing a file there, then undoing both)."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path}: is a file, not a folder; pass a new or empty folder.")
    from .paths import write_error

    if path.exists():
        return
    parent = path
    while not parent.exists():
        parent = parent.parent
    exc = None if not parent.is_dir() else write_error(path)
    if not parent.is_dir() or exc is not None:
        why = f"{parent} is a file" if exc is None else (exc.strerror or str(exc))
        raise ConfigError(f"{flag} {path}: the folder cannot be created ({why}); pass a folder you can write to.")


def sweep(config: str | Path, grid_specs: list[str], *, samples: int = 1, metric: str = M.CHART_EPISODIC_RETURN,
          mode: str = "max", layer: str | None = None, sweep_dir: Path | str | None = None,
          max_concurrent: int | None = None, overrides: list[str] | None = None,
          address: str | None = None, working_dir: str | None = None) -> tuple[Path, str, list[dict[str, Any]]]:
    """Run the grid as concurrent Tune trials; returns the sweep dir, the ranking layer and the
    ranked rows.

    Every input is checked (grid, each trial's config, metric, layer, resources) before the sweep
    dir is created or a trial starts.
    """
    base, trials = plan_trials(config, grid_specs, samples, overrides)
    if working_dir is not None:  # checked as the config field is; the trials get it through Ray
        working_dir = validate(base.model_dump() | {"ray": base.ray.model_dump() | {"working_dir": working_dir}},
                               source=str(config),
                               given={("ray", "working_dir"): f"--working-dir {working_dir}"}).ray.working_dir
    working_dir = working_dir or base.ray.working_dir
    check_mode(mode)
    check_metric(metric)
    layer = check_layer(base, layer)
    if not base.layer(layer).learns:
        raise ConfigError(f"--layer {layer}: the layer is {base.layer(layer).schedule.mode} and logs no training "
                          "metrics; rank by a trained layer.")
    out = Path(sweep_dir) if sweep_dir is not None else default_sweep_dir(base)
    check_out_dir(out, "--sweep-dir")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"sweep dir {out} already exists; pass another --sweep-dir or delete it.")

    from .ray_runtime import init_ray
    from .working_dir import use_working_dir

    use_working_dir(working_dir)
    cluster_cpus = init_ray(address or base.ray.address, base.ray.num_cpus, working_dir)
    concurrent, cpus = trial_budget(cluster_cpus, len(trials), max_concurrent)
    if concurrent > 1 and any(t["config"]["ray"].get("cpu_affinity") for t in trials):
        raise ConfigError(f"{config}: ray.cpu_affinity plans the cores for one run, so {concurrent} concurrent trials "
                          "would pin their learners to the same core. Leave ray.cpu_affinity false in a sweep, or "
                          "run the trials one at a time (--max-concurrent 1).")
    pin = _driver_node_resource()
    for t in trials:
        t["bundles"] = trial_bundles(validate(t["config"]), cpus)
        t["head"] = pin if t["bundles"] else {**pin, "CPU": cpus}
        need = sum(b.get("CPU", 0.0) for b in [t["head"], *t["bundles"]])
        if need > cluster_cpus + 1e-9:
            raise ConfigError(f"trial {t['name']} declares {need:g} CPUs (its dppo.worker_cpus times its workers, "
                              f"plus learners) but the cluster has {cluster_cpus:g}. Lower dppo.worker_cpus or "
                              "num_workers, or add nodes.")
        t.update(cpus=cpus, cwd=os.getcwd(), run_dir=str((out / t["name"]).resolve()))

    out.mkdir(parents=True, exist_ok=True)
    try:
        results = _fit(trials, concurrent, out)
    except BaseException:
        if not any((out / t["name"]).exists() for t in trials):
            shutil.rmtree(out, ignore_errors=True)  # nothing ran: leave no half-written sweep dir
        raise
    errors = {}
    for result in results:
        if result.error is not None:
            cause = _cause(result.error)
            text = str(cause).strip().splitlines()
            errors[result.config["trial"]["name"]] = f"{type(cause).__name__}: {text[0] if text else ''}"
    rows = []
    for t in trials:
        run_dir = Path(t["run_dir"])
        status = "error" if t["name"] in errors else "ok" if (run_dir / "summary.json").is_file() else "incomplete"
        rows.append({"trial": t["name"], "params": t["params"], "sample": t["sample"], "seed": t["seed"],
                     **summarize_run(run_dir, layer, metric, mode),
                     "run_dir": str(out / t["name"]) if run_dir.exists() else None,
                     "status": status, "error": errors.get(t["name"])})
    rows = rank(rows, mode)
    write_results(rows, out, metric, layer, mode)
    if len(errors) == len(trials):
        first = trials[0]["name"]
        raise HdppoError(f"every trial of the sweep failed; {first}: {errors[first]} The tracebacks are in "
                         f"{out / TUNE_DIR}/<trial>/error.txt, the table in {out / SWEEP_MD}.")
    return out, layer, rows


def _fit(trials: list[dict[str, Any]], concurrent: int, out: Path) -> Any:
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    tuner = tune.Tuner(
        tune.with_resources(_trial, _trial_resources),
        param_space={"trial": tune.grid_search(trials)},
        tune_config=tune.TuneConfig(max_concurrent_trials=concurrent, trial_name_creator=_trial_dirname,
                                    trial_dirname_creator=_trial_dirname),
        # Tune's CSV and JSON results only: each run dir already has the TensorBoard runs, and a
        # second copy would double every trial in `tensorboard --logdir SWEEP_DIR`.
        run_config=tune.RunConfig(name=TUNE_DIR, storage_path=str(out.resolve()), verbose=0,
                                  callbacks=[CSVLoggerCallback(), JsonLoggerCallback()]))
    with _quiet_tune():
        return tuner.fit()


def _drop_trial_failures(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(("Trial task failed", "Trials did not complete"))


@contextlib.contextmanager
def _quiet_tune() -> Iterator[None]:
    """Our table is what the user should see. Tune's newer console output prints an experiment
    header even at verbose=0, and it adds a TensorBoard logger unless told not to; both switches
    are environment variables that ``Tuner.fit`` reads in this process. Warnings still show."""
    switches = {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1"}
    saved = {k: os.environ.get(k) for k in switches}
    tune_logger = logging.getLogger("ray.tune")
    level = tune_logger.level
    # A failed trial's traceback: it is in the trial's error.txt, and our table names the error.
    controller = [logging.getLogger(n) for n in ("ray.tune.execution.tune_controller", "ray.tune.tune")]
    os.environ.update(switches)
    tune_logger.setLevel(max(level, logging.WARNING))
    for log in controller:
        log.addFilter(_drop_trial_failures)
    try:
        yield
    finally:
        for log in controller:
            log.removeFilter(_drop_trial_failures)
        tune_logger.setLevel(level)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
