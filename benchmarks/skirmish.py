"""skirmish results: win rates of the three-layer hierarchy, a two-layer variant and flat MAPPO
against the strongest scripted opponent, beside the scripted players against each other.

What it does, in one run:

1. **scripted table**: every ordered pair of the env's scripted players (``random``, ``nearest``,
   ``focus_kite``) plays ``--games`` games on each ``--scenarios`` (no learning), and each scripted
   commander (``squad_focus``, ``healer_first``: scripted squad orders carried out by focus_kite's
   micro) plays focus_kite: what orders without learning give;
2. **training**: ``configs/skirmish_hierarchy.yaml`` (strategy -> squad -> control, three DPPO
   groups), ``configs/skirmish_two_layers.yaml`` (squad -> control) and
   ``configs/skirmish_flat.yaml`` (flat MAPPO, central critic), each with the same total env
   steps (``--env-steps``; a hierarchy's groups share them), or taken from existing run dirs
   (``--run NAME=DIR``);
3. **evaluation**: each trained policy plays ``--games`` games (deterministic actions, or sampled
   ones with ``--sampled-actions``; the
   training sampler, seeds away from training) against ``focus_kite`` on 8v8 mixed, and the best
   one on 10v10 mixed, which it never trained on (the same weights: upper layers read state(),
   whose size is the same in every scenario; the squads are re-listed for 10v10). Win, draw and
   loss come from the env's own end-of-episode infos (``win``, ``draw``, ``outcome``, ``kills``,
   ``losses``), through :func:`hdppo.platform.evaluation.evaluate_episodes`; rates carry 95%
   Wilson intervals. With ``--curve-games`` every checkpoint is also played that many games,
   for win-rate curves over env steps;
4. **throughput**: training agent steps/s (env steps/s of the whole run times the live red
   units per env step) beside the env's raw limit on this machine (random legal actions against
   focus_kite, batched, from ``benchmarks/skirmish_speed.py``).

Usage:
    python benchmarks/skirmish.py                           # the full benchmark (hours on 2 cores)
    python benchmarks/skirmish.py --quick                   # smoke: tiny budgets, a few games
    python benchmarks/skirmish.py --only scripted           # the scripted table only (no training)
    python benchmarks/skirmish.py --only three_layers --run three_layers=runs/skirmish_hierarchy

Writes benchmarks/results/skirmish.{json,md,png} (``--quick``: skirmish_quick.*; ``--out`` to
choose another stem).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from common import checkpoint_steps, records, save_files, train_preset, wilson  # noqa: E402
from machine import machine_info  # noqa: E402

TARGET_WIN_RATE = 0.90          # issue 11: against the strongest scripted opponent on 8v8 mixed
STRONGEST = "focus_kite"
TRAIN_SCENARIO = "8v8_mixed"
TRANSFER_SCENARIO = "10v10_mixed"
CONFIGS = {  # name -> (preset, what it is)
    "three_layers": ("skirmish_hierarchy.yaml", "strategy -> squad -> control, three DPPO groups"),
    "two_layers": ("skirmish_two_layers.yaml", "squad -> control, two DPPO groups"),
    "flat_mappo": ("skirmish_flat.yaml", "one layer, shared weights, central critic"),
}


# ----------------------------------------------------------------------------- statistics

def outcome_table(wins: int, draws: int, losses: int, kills: float, lost: float, steps: float) -> dict:
    """Rates with Wilson intervals from game counts; kills/losses/steps are means per game."""
    n = wins + draws + losses
    out: dict[str, Any] = {"games": n, "win": wins, "draw": draws, "loss": losses}
    for key, k in (("win", wins), ("draw", draws), ("loss", losses)):
        out[f"{key}_rate"] = k / n if n else 0.0
        out[f"{key}_ci95"] = list(wilson(k, n))
    return out | {"kills": kills, "losses": lost, "mean_steps": steps}


# ----------------------------------------------------------------------------- scripted players

def scripted_table(games: int, scenarios: list[str], seed: int = 0) -> list[dict]:
    from hdppo.envs.builtin.skirmish import COMMANDERS, OPPONENTS, play

    rows = []
    for scenario in scenarios:
        # Every pairing of the opponents, then each scripted commander (scripted squad orders over
        # focus_kite's micro: the baseline for learned upper layers) against the strongest.
        pairs = [(r, b) for r in OPPONENTS for b in OPPONENTS] + [(c, STRONGEST) for c in COMMANDERS]
        for red, blue in pairs:
            t0 = time.perf_counter()
            r = play(red, blue, scenario, games=games, seed=seed)
            rows.append({"scenario": scenario, "red": red, "blue": blue, "wall_s": time.perf_counter() - t0}
                        | outcome_table(r["win"], r["draw"], r["loss"], r["kills"], r["losses"], r["mean_steps"]))
    return rows


# ----------------------------------------------------------------------------- training

def quick_overrides() -> list[str]:
    """Tiny budgets for a smoke run: small batches, one env copy group each, in this process."""
    return ["ray.backend=local", "train.checkpoint_every=1", "train.eval_episodes=0"]


def train(name: str, env_steps: int, run_dir: Path, overrides: list[str], quick: bool) -> dict:
    """Train preset ``name`` for ``env_steps`` (all groups together) into ``run_dir``."""
    return train_preset(ROOT / "configs" / CONFIGS[name][0], env_steps, run_dir, overrides, quick)


# ----------------------------------------------------------------------------- evaluation

def scenario_config(cfg, scenario: str, opponent: str):
    """The run's config on another scenario and opponent: env kwargs, and every squad layer's
    squads re-listed from the env (lane names stay, so agent ids mean the same squads)."""
    from hdppo.envs.builtin.skirmish import parallel_env
    from hdppo.platform.config import validate

    data = cfg.model_dump(mode="json")
    data["env"]["kwargs"] = dict(data["env"].get("kwargs") or {}, scenario=scenario, opponent=opponent)
    squads = parallel_env(scenario=scenario).squads
    for layer in data["layers"]:
        if isinstance(layer.get("agents"), dict):
            if set(layer["agents"]["squads"]) != set(squads):
                raise ValueError(f"layer {layer['name']}: squads {sorted(layer['agents']['squads'])} do not match "
                                 f"{scenario}'s {sorted(squads)}")
            layer["agents"] = {"squads": squads}
    return validate(data)


def games_of(episodes) -> dict:
    """Win/draw/loss, kills and losses from each episode's end-of-episode infos (the env's own)."""
    wins = draws = losses = 0
    kills, lost, steps = [], [], []
    for ep in episodes:
        end = next((i for i in ep.infos.values() if "outcome" in i), None)
        if end is None:
            raise RuntimeError("an evaluation episode ended without the env's outcome in its infos")
        wins += end["win"]
        draws += end["draw"]
        losses += int(end["outcome"] < 0)
        kills.append(end["kills"])
        lost.append(end["losses"])
        steps.append(end["episode_steps"])
    return outcome_table(wins, draws, losses, float(np.mean(kills)), float(np.mean(lost)), float(np.mean(steps)))


def evaluate_checkpoint(cfg, checkpoint: Path, games: int, scenario: str, opponent: str = STRONGEST,
                        seed: int | None = None, scripted: tuple[str, ...] = (), deterministic: bool = True) -> dict:
    from hdppo.platform.checkpoint import learner_states, load_checkpoint
    from hdppo.platform.evaluation import evaluate_episodes

    states = learner_states(load_checkpoint(checkpoint))
    t0 = time.perf_counter()
    episodes = evaluate_episodes(scenario_config(cfg, scenario, opponent), states, games, seed=seed, num_envs=32,
                                 scripted=scripted, deterministic=deterministic)
    return games_of(episodes) | {"scenario": scenario, "opponent": opponent, "checkpoint": checkpoint.name,
                                 "scripted": list(scripted), "wall_s": time.perf_counter() - t0}


def spaced(items: list, k: int) -> list:
    """At most ``k`` of ``items``, evenly spaced, the last one always among them."""
    if len(items) <= k:
        return list(items)
    picks = sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)}) if k > 1 else [len(items) - 1]
    return [items[i] for i in picks]


# ----------------------------------------------------------------------------- throughput

def training_throughput(run_dir: Path, cfg) -> dict:
    """Env steps/s of the whole run (first to last logged update, all groups together) and agent
    steps/s: that times the live red units per env step, from the bottom layer's samples."""
    recs = records(run_dir)
    bottom = cfg.layers[-1].name
    per = [r for r in recs if r["tag"] == "perf/env_steps_per_s"]
    if len(per) < 2:
        return {"error": "fewer than two updates logged"}
    by_layer: dict[str, list[dict]] = {}
    for r in per:
        by_layer.setdefault(r["layer"], []).append(r)
    t0 = min(r["time"] - r["step"] / max(r["value"], 1e-9) for r in per if r["step"] == min(x["step"] for x in by_layer[r["layer"]]))
    t1 = max(r["time"] for r in per)
    steps = sum(max(r["step"] for r in rs) for rs in by_layer.values())
    samples = sum(r["value"] for r in recs if r["tag"] == "perf/samples" and r["layer"] == bottom)
    bottom_steps = max(r["step"] for r in by_layer.get(bottom, per))
    agents_per_step = samples / bottom_steps if bottom_steps else float("nan")
    env_sps = steps / (t1 - t0)
    return {"env_steps": int(steps), "wall_s": t1 - t0, "env_steps_per_s": env_sps,
            "agents_per_env_step": agents_per_step, "agent_steps_per_s": env_sps * agents_per_step}


def raw_limit(seconds: float) -> dict:
    """The env's raw speed here: batched 8v8 mixed, random legal red actions against focus_kite."""
    try:
        from skirmish_speed import run_batched
    except ImportError as exc:
        return {"error": f"benchmarks/skirmish_speed.py: {exc}"}
    r = run_batched(TRAIN_SCENARIO, STRONGEST, seconds, copies=32)
    return {"agent_steps_per_s": r["agent_steps_per_cpu_s"], "agent_steps_per_wall_s": r["agent_steps_per_wall_s"],
            "env_steps_per_s": r["env_steps_per_cpu_s"], "copies": 32, "cpu_s": r["cpu_s"]}


def return_curve(run_dir: Path, layer: str) -> list[tuple[int, float]]:
    return sorted((r["step"], r["value"]) for r in records(run_dir)
                  if r["tag"] == "charts/episodic_return" and r["layer"] == layer)


# ----------------------------------------------------------------------------- report

def describe_layers(cfg) -> str:
    """What a run trained, from its config: the layers top-down, each marked where it did not
    learn (scripted: acted by its teacher; frozen: loaded weights), and its DPPO groups."""
    names = [layer.name + ("" if layer.learns else f" ({layer.schedule.mode})") for layer in cfg.layers]
    n = len(cfg.layer_groups())
    return " -> ".join(names) + f", {n} DPPO group{'s' if n != 1 else ''}"


def earlier_env_steps(cfg) -> int:
    """Env steps of the runs the config's layers start from (``schedule.checkpoint``: a staged
    recipe's earlier stages), each run counted once."""
    from hdppo.platform.checkpoint import resolve_checkpoint

    sources = {str(resolve_checkpoint(layer.schedule.checkpoint).resolve()) for layer in cfg.layers
               if layer.schedule.checkpoint is not None}
    return sum(checkpoint_steps(Path(c)) for c in sources)


def pct(rate: float, ci: list[float] | None = None) -> str:
    return f"{100 * rate:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def render_markdown(report: dict) -> str:
    m = report["machine"]
    s = report["settings"]
    lines = [f"# skirmish: win rates{' (quick smoke, not a measurement)' if s['quick'] else ''}", "",
             f"Measured {m.get('timestamp_utc', '')} on {m.get('cpu_model', '?')}, {m.get('cpu_count', '?')} CPUs "
             f"(load average at start {m.get('load_avg_1_5_15', ['?'])[0]:.1f}); "
             f"`{report['command']}`. {s['games']} games per row"
             f"{', the trained policies acting by sampled actions' if s.get('sampled_actions') else ''}; rates with 95% Wilson intervals; "
             "kills, losses and steps are means per game, from the env's end-of-episode infos.", ""]
    trained = report.get("trained", {})
    if trained:
        lines += [f"## Trained policies against {STRONGEST} (target: win rate >= {TARGET_WIN_RATE:.0%} on "
                  f"{TRAIN_SCENARIO})", "",
                  "| policy | layers | env steps | scenario | opponent | win | draw | loss | kills | losses | steps | "
                  "training agent steps/s | target |",
                  "|---|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for name, t in trained.items():
            if "error" in t:
                lines.append(f"| {name} | {CONFIGS[name][1]} | | | | failed: {t['error']} | | | | | | | |")
                continue
            thr = t.get("throughput", {}).get("agent_steps_per_s")
            steps = f"{t.get('env_steps', 0):,}" + (f" + {t['earlier_env_steps']:,} earlier" if t.get("earlier_env_steps") else "")
            for ev in t.get("evaluations", []):
                opponent = ev.get("opponent", STRONGEST)
                met = (("met" if ev["win_rate"] >= TARGET_WIN_RATE else "missed") if opponent == STRONGEST else
                       "(other opponent)") if ev["scenario"] == TRAIN_SCENARIO else "(transfer)"
                lines.append(f"| {name} | {t.get('layers', CONFIGS[name][1])} | {steps} | {ev['scenario']} | {opponent} | "
                             f"{pct(ev['win_rate'], ev['win_ci95'])} | {pct(ev['draw_rate'])} | {pct(ev['loss_rate'])} | "
                             f"{ev['kills']:.2f} | {ev['losses']:.2f} | {ev['mean_steps']:.0f} | "
                             f"{f'{thr:,.0f}' if thr else '-'} | {met} |")
        lines.append("")
        rows = [(n, ev) for n, t in trained.items() for ev in t.get("scripted_evaluations", [])]
        if rows:
            lines += ["The same trained layers with the taught layer acting by its teacher (`hdppo eval --scripted "
                      "LAYER`; for the control layer, its teacher's micro (focus_kite's, or with `no_overkill` its split "
                      "fire) carrying out the squads' orders): whether "
                      "the orders or their execution hold the win rate back.", "",
                      "| policy | scripted layer | scenario | win | draw | loss | kills | losses | steps |",
                      "|---|---|---|---|---:|---:|---:|---:|---:|"]
            lines += [f"| {n} | {', '.join(ev['scripted'])} | {ev['scenario']} | {pct(ev['win_rate'], ev['win_ci95'])} | "
                      f"{pct(ev['draw_rate'])} | {pct(ev['loss_rate'])} | {ev['kills']:.2f} | {ev['losses']:.2f} | "
                      f"{ev['mean_steps']:.0f} |" for n, ev in rows]
            lines.append("")
        curves = {n: t["win_curve"] for n, t in trained.items() if t.get("win_curve")}
        if curves:
            lines += ["Win rate over training (each checkpoint, fewer games):", "",
                      "| policy | env steps | games | win |", "|---|---:|---:|---|"]
            for n, c in curves.items():
                lines += [f"| {n} | {p['env_steps']:,} | {p['games']} | {pct(p['win_rate'], p['win_ci95'])} |" for p in c]
            lines.append("")
    raw = report.get("raw_limit", {})
    if raw:
        lines += ["## Throughput", "",
                  f"The env's raw limit here: {raw['agent_steps_per_s']:,.0f} agent steps per CPU second "
                  f"({raw.get('agent_steps_per_wall_s', 0):,.0f} per wall second) on {TRAIN_SCENARIO}, batched "
                  f"({raw['copies']} copies), random legal actions against {STRONGEST}, one process."
                  if "error" not in raw else f"Raw limit not measured: {raw['error']}", ""]
        for name, t in trained.items():
            thr = t.get("throughput", {})
            if "agent_steps_per_s" in thr and not thr["agent_steps_per_s"]:
                lines.append(f"- {name}: {thr['env_steps_per_s']:,.0f} env steps/s in training; no agent steps/s "
                             "(its bottom layer is not trained, so no unit's samples are logged)")
            elif "agent_steps_per_s" in thr and "agent_steps_per_s" in raw:
                lines.append(f"- {name}: {thr['agent_steps_per_s']:,.0f} agent steps/s in training "
                             f"({thr['env_steps_per_s']:,.0f} env steps/s, {thr['agents_per_env_step']:.1f} live "
                             f"units per env step), {thr['agent_steps_per_s'] / raw['agent_steps_per_s']:.1%} of the raw limit")
        lines.append("")
    if report.get("scripted"):
        lines += ["## Scripted players against each other", "",
                  "| scenario | red | blue | win | draw | loss | kills | losses | steps |",
                  "|---|---|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['scenario']} | {r['red']} | {r['blue']} | {pct(r['win_rate'], r['win_ci95'])} | "
                  f"{pct(r['draw_rate'])} | {pct(r['loss_rate'])} | {r['kills']:.2f} | {r['losses']:.2f} | "
                  f"{r['mean_steps']:.0f} |" for r in report["scripted"]]
        lines.append("")
    if report.get("notes"):
        lines += ["## Notes", "", *[f"- {n}" for n in report["notes"]], ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    trained = {n: t for n, t in report.get("trained", {}).items() if "error" not in t}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, t in trained.items():
        curve = t.get("return_curve") or []
        if curve:
            axes[0].plot([c[0] for c in curve], [c[1] for c in curve], label=name)
        wc = t.get("win_curve") or []
        if wc:
            axes[1].plot([p["env_steps"] for p in wc], [p["win_rate"] for p in wc], marker="o", label=name)
    axes[0].set(title="training: episodic return (bottom layer)", xlabel="env steps (its group)", ylabel="return")
    axes[1].set(title=f"win rate vs {STRONGEST}, {TRAIN_SCENARIO}", xlabel="env steps (all groups)", ylabel="win rate",
                ylim=(0, 1))
    axes[1].axhline(TARGET_WIN_RATE, color="grey", ls="--", lw=1)
    for ax in axes:
        if ax.get_legend_handles_labels()[1]:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, a few games")
    p.add_argument("--games", type=int, default=None, help="games per evaluation row (default 200; --quick 8)")
    p.add_argument("--env-steps", type=int, default=None, help="training env steps per config, all groups together "
                   "(default 2,000,000; --quick 2,000)")
    p.add_argument("--only", default=None, help="comma list of: scripted, three_layers, two_layers, flat_mappo")
    p.add_argument("--run", action="append", default=[], metavar="NAME=DIR",
                   help="evaluate this run dir instead of training NAME")
    p.add_argument("--set", action="append", default=[], dest="overrides", help="config override for training")
    p.add_argument("--curve-games", type=int, default=None, help="games per checkpoint for win-rate curves "
                   "(default 50; --quick 0: no curves)")
    p.add_argument("--curve-points", type=int, default=8, help="checkpoints on a win-rate curve at most (evenly spaced)")
    p.add_argument("--scenarios", default=f"{TRAIN_SCENARIO},{TRANSFER_SCENARIO}", help="of the scripted table")
    p.add_argument("--runs-dir", default=str(ROOT / "runs" / "bench_skirmish"))
    p.add_argument("--out", default=None, help="output stem (default benchmarks/results/skirmish[_quick])")
    p.add_argument("--note", action="append", default=[], help="a line for the report's notes")
    p.add_argument("--no-scripted", dest="scripted", action="store_false",
                   help="skip the rows that play a run's taught layer by its teacher (see the report)")
    p.add_argument("--sampled-actions", action="store_true",
                   help="evaluate the trained policies with actions sampled from them (as in training), not "
                        "their most likely actions")
    p.add_argument("--eval-set", action="append", default=[], dest="eval_overrides", metavar="KEY=VALUE",
                   help="config override for evaluation only, on each run's saved config (e.g. "
                   "layers.2.teacher.kwargs.no_overkill=true: a scripted control layer's split fire)")
    p.add_argument("--also-against", default="", help="comma list of scripted players (e.g. focus_no_overkill) each "
                   f"trained policy also plays on {TRAIN_SCENARIO}, beside {STRONGEST}")
    args = p.parse_args(argv)
    from hdppo.envs.builtin.skirmish import OPPONENTS
    args.also_against = [o for o in args.also_against.split(",") if o]
    if set(args.also_against) - set(OPPONENTS):
        p.error(f"--also-against: unknown {sorted(set(args.also_against) - set(OPPONENTS))}; known: {', '.join(OPPONENTS)}")
    games = args.games or (8 if args.quick else 200)
    env_steps = args.env_steps or (2_000 if args.quick else 2_000_000)
    curve_games = args.curve_games if args.curve_games is not None else (0 if args.quick else 50)
    parts = args.only.split(",") if args.only else ["scripted", *CONFIGS]
    unknown = set(parts) - {"scripted", *CONFIGS}
    if unknown:
        p.error(f"--only: unknown {sorted(unknown)}")
    given = dict(r.split("=", 1) for r in args.run)
    out = Path(args.out) if args.out else HERE / "results" / ("skirmish_quick" if args.quick else "skirmish")
    out.parent.mkdir(parents=True, exist_ok=True)
    overrides = (quick_overrides() if args.quick else []) + args.overrides
    report: dict[str, Any] = {"machine": machine_info(), "command": "python benchmarks/skirmish.py " + " ".join(argv or sys.argv[1:]),
                              "settings": {"quick": args.quick, "games": games, "env_steps": env_steps,
                                           "curve_games": curve_games, "overrides": overrides,
                                           "eval_overrides": args.eval_overrides,
                                           "sampled_actions": args.sampled_actions},
                              "notes": args.note, "trained": {}}

    def save() -> None:
        save_files(out, report, render_markdown(report))

    def evaluate(*a, **kw) -> dict:
        return evaluate_checkpoint(*a, deterministic=not args.sampled_actions, **kw)

    if "scripted" in parts:
        scen = args.scenarios.split(",") if not args.quick else ["3v3"]
        report["scripted"] = scripted_table(games, scen)
        save()
        print(f"[skirmish] scripted table: {len(report['scripted'])} rows", flush=True)
    names = [n for n in CONFIGS if n in parts]
    if names:
        report["raw_limit"] = raw_limit(0.5 if args.quick else 3.0)
    from hdppo.platform.checkpoint import latest_checkpoint, list_checkpoints
    from hdppo.platform.config import load_config

    for name in names:
        entry: dict[str, Any] = {"preset": CONFIGS[name][0]}
        report["trained"][name] = entry
        try:
            if name in given:
                run_dir = Path(given[name])
                entry["run_dir"] = str(run_dir)
            else:
                run_dir = Path(args.runs_dir) / name
                t0 = time.perf_counter()
                entry["summary"] = train(name, env_steps, run_dir, overrides, args.quick)
                entry["run_dir"], entry["train_wall_s"] = str(run_dir), time.perf_counter() - t0
            cfg = load_config(run_dir / "config.yaml", args.eval_overrides)
            last = latest_checkpoint(run_dir)
            if last is None:
                raise RuntimeError(f"{run_dir}: no checkpoint")
            entry["env_steps"] = checkpoint_steps(last)
            entry["layers"] = describe_layers(cfg)
            entry["earlier_env_steps"] = earlier_env_steps(cfg)
            entry["throughput"] = training_throughput(run_dir, cfg)
            entry["return_curve"] = return_curve(run_dir, cfg.layers[-1].name)
            entry["evaluations"] = [evaluate(cfg, last, games, TRAIN_SCENARIO)]
            if curve_games:
                entry["win_curve"] = [{"env_steps": checkpoint_steps(c), "checkpoint": c.name}
                                      | evaluate(cfg, c, curve_games, TRAIN_SCENARIO)
                                      for c in spaced(list_checkpoints(run_dir), args.curve_points)]
            print(f"[skirmish] {name}: win {entry['evaluations'][0]['win_rate']:.1%} over {games} games", flush=True)
            for opponent in args.also_against:  # other scripted players, on the training scenario
                entry["evaluations"].append(evaluate(cfg, last, games, TRAIN_SCENARIO, opponent))
                print(f"[skirmish] {name} against {opponent}: win {entry['evaluations'][-1]['win_rate']:.1%}", flush=True)
            taught = [layer.name for layer in cfg.layers if layer.teacher is not None]
            if taught and args.scripted:
                # The trained layers above over the taught layer's script (its teacher): whether
                # the orders or their execution limit the win rate, on both scenarios.
                entry["scripted_evaluations"] = [evaluate(cfg, last, games, sc, scripted=(taught[-1],))
                                                 for sc in (TRAIN_SCENARIO, TRANSFER_SCENARIO)]
        except Exception as exc:  # noqa: BLE001 - one failed config is reported, the others still run
            entry["error"] = f"{type(exc).__name__}: {exc}"
            print(f"[skirmish] {name} failed: {entry['error']}", flush=True)
        save()
    ok = {n: t for n, t in report["trained"].items() if t.get("evaluations")}
    if ok:  # the best one on the scenario it never trained on
        best = max(ok, key=lambda n: ok[n]["evaluations"][0]["win_rate"])
        t = ok[best]
        cfg = load_config(Path(t["run_dir"]) / "config.yaml", args.eval_overrides)
        try:
            t["evaluations"].append(evaluate(cfg, latest_checkpoint(Path(t["run_dir"])), games, TRANSFER_SCENARIO))
        except Exception as exc:  # noqa: BLE001
            t["transfer_error"] = f"{type(exc).__name__}: {exc}"
        report["best"] = best
    save()
    if plot(report, out.with_suffix(".png")):
        print(f"[skirmish] wrote {out}.png", flush=True)
    print(f"[skirmish] wrote {out}.json and {out}.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
