"""MAgent2 combined_arms_v6 results: win rates of the three-layer hierarchy (and the flat
baseline) over the red team, trained against a random blue team and against the scripted
attack-nearest blue team, beside the scripted players against each other.

The game: ``combined_arms_v6`` on map 16 (three melee and three ranged units a side), plugged in
by config alone (``configs/combined_arms_hierarchy.yaml``, ``configs/combined_arms_flat.yaml``):
the blue team is played inside the env by ``env.opponents`` (``random``, or
``hdppo.envs.builtin.magent:attack_nearest``). MAgent2 ends a game when one group (one unit
type of one side) is wiped out, or at ``max_cycles``; a game is **won** when more red units than
blue ones stand at its end, drawn when as many. The counts come from the env's last-step infos
(``learners_alive``, ``opponents_alive``, read from the grid by ``magent:standing``).

What it does, in one run:

1. **scripted table**: red played by a script (``attack_nearest`` or ``random``) against each
   blue opponent, ``--games`` games each (no learning);
2. **training**: each of ``--train`` (``hierarchy_random``, ``hierarchy_nearest``,
   ``flat_random``, ``flat_nearest``: preset and the opponent it trains against) for
   ``--env-steps`` env steps, in this process (``ray.backend=local``: no Ray actors on a small
   machine), or taken from run dirs
   (``--run NAME=DIR``);
3. **evaluation**: each trained policy's last checkpoint plays ``--games`` games (deterministic
   actions, the training sampler, seeds away from training) against both blue opponents; win,
   draw and loss rates with 95% Wilson intervals (``benchmarks/skirmish.py``'s helpers), units
   standing per side at the end, game length.

Usage:
    python benchmarks/combined_arms.py                      # the scripted table only
    python benchmarks/combined_arms.py --train hierarchy_random --env-steps 60000
    python benchmarks/combined_arms.py --run hierarchy_random=runs/combined_arms/hierarchy_random \\
        --run hierarchy_nearest=runs/combined_arms/hierarchy_nearest
    python benchmarks/combined_arms.py --quick              # smoke: tiny budgets, a few games

Writes benchmarks/results/combined_arms.{json,md} (``--quick``: combined_arms_quick.*).
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

from machine import machine_info  # noqa: E402
from common import save_files, shrink  # noqa: E402
from skirmish import checkpoint_steps, outcome_table, pct, records  # noqa: E402

TARGET_VS_RANDOM = 0.95          # issue 11, item 6
ENV_ID = "magent2.environments.combined_arms_v6"
NEAREST = "hdppo.envs.builtin.magent:attack_nearest"
STANDING = "hdppo.envs.builtin.magent:standing"
OPPONENTS = {"random": "random", "nearest": NEAREST}
UNITS = 6                        # a side on map 16
RUNS = {  # name -> (preset, opponent trained against)
    "hierarchy_random": ("combined_arms_hierarchy.yaml", "random"),
    "hierarchy_nearest": ("combined_arms_hierarchy.yaml", "nearest"),
    "flat_random": ("combined_arms_flat.yaml", "random"),
    "flat_nearest": ("combined_arms_flat.yaml", "nearest"),
}


def games_table(alive: list[tuple[int, int, int]]) -> dict:
    """Win/draw/loss with Wilson intervals from (red standing, blue standing, steps) per game."""
    a = np.asarray(alive, float).reshape(-1, 3)
    wins, draws = int((a[:, 0] > a[:, 1]).sum()), int((a[:, 0] == a[:, 1]).sum())
    out = outcome_table(wins, draws, len(a) - wins - draws, float(UNITS - a[:, 1].mean()),
                        float(UNITS - a[:, 0].mean()), float(a[:, 2].mean()))
    return out | {"red_alive": float(a[:, 0].mean()), "blue_alive": float(a[:, 1].mean())}


# ----------------------------------------------------------------------------- scripted players

def play_scripted(red: str, blue: str, games: int, kwargs: dict, seed: int = 0) -> dict:
    """``games`` games of red played by ``red`` (random or a script) against blue as ``env.opponents``."""
    from hdppo.envs.adapters import make_multi_agent
    from hdppo.envs.opponents import resolve_policy, with_opponents

    env = with_opponents(make_multi_agent("pettingzoo", ENV_ID, None, kwargs, None),
                         {"agents": "blue", "policy": OPPONENTS[blue], "alive": STANDING})
    policy, rng = resolve_policy(OPPONENTS[red]), np.random.default_rng(seed)
    alive = []
    for g in range(games):
        obs = env.reset(seed=seed + g)
        steps, info = 0, {}
        while env.agents:
            obs, _, _, _, infos = env.step(policy({a: obs[a] for a in env.acting}, env.inner, rng))
            steps += 1
            info = next(iter(infos.values()), info)
        alive.append((info["learners_alive"], info["opponents_alive"], steps))
    env.close()
    return games_table(alive)


# ----------------------------------------------------------------------------- training, evaluation

def opponents_override(path: Path, opponent: str) -> str:
    """The ``--set`` that makes ``opponent`` the blue team of the config at ``path``: env.opponents
    on the dict path, the native env's ``opponents`` kwarg on ``env.type: vector``."""
    from hdppo.platform.config import load_config

    native = load_config(path).env.type == "vector"
    return f"env.{'kwargs.' if native else ''}opponents.policy={OPPONENTS[opponent]}"


def train(name: str, env_steps: int, run_dir: Path, overrides: list[str], quick: bool) -> dict:
    from hdppo.platform.config import load_config, validate
    from hdppo.platform.trainer import Trainer

    preset, opponent = RUNS[name]
    path = ROOT / "configs" / preset
    cfg = load_config(path, [f"train.total_env_steps={env_steps}", "train.eval_episodes=0",
                             "ray.backend=local", opponents_override(path, opponent), *overrides])
    if quick:
        data = shrink(cfg.model_dump(mode="json"))
        for layer in data["layers"]:
            layer["policy"].update(hidden=[32], cnn_channels=[8], cnn_features=32)
        cfg = validate(data)
    trainer = Trainer(cfg, run_dir)
    try:
        return trainer.train()
    finally:
        trainer.shutdown()


def evaluate_run(run_dir: Path, games: int, opponent: str, seed: int | None = None) -> dict:
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config
    from hdppo.platform.evaluation import evaluate_episodes

    last = latest_checkpoint(run_dir)
    if last is None:
        raise RuntimeError(f"{run_dir}: no checkpoint")
    cfg = load_config(run_dir / "config.yaml", [opponents_override(run_dir / "config.yaml", opponent)])
    t0 = time.perf_counter()
    episodes = evaluate_episodes(cfg, learner_states(load_checkpoint(last)), games, seed=seed, num_envs=16)
    alive = []
    for ep in episodes:
        info = next((i for i in ep.infos.values() if "learners_alive" in i), None)
        if info is None:
            raise RuntimeError("an evaluation game ended without learners_alive/opponents_alive in its infos")
        alive.append((info["learners_alive"], info["opponents_alive"], ep.length))
    return games_table(alive) | {"opponent": opponent, "checkpoint": last.name, "env_steps": checkpoint_steps(last),
                                 "wall_s": time.perf_counter() - t0}


def return_curve(run_dir: Path) -> list[tuple[int, float]]:
    return sorted((r["step"], r["value"]) for r in records(run_dir)
                  if r["tag"] == "charts/episodic_return" and r["layer"] == "control")


def train_wall(run_dir: Path) -> float | None:
    recs = [r for r in records(run_dir) if "time" in r]
    return (max(r["time"] for r in recs) - min(r["time"] for r in recs)) if len(recs) > 1 else None


# ----------------------------------------------------------------------------- report

def render_markdown(report: dict) -> str:
    m, s = report["machine"], report["settings"]
    lines = [f"# MAgent2 combined_arms_v6: win rates{' (quick smoke, not a measurement)' if s['quick'] else ''}", "",
             f"Measured {m.get('timestamp_utc', '')} on {m.get('cpu_model', '?')}, {m.get('cpu_count', '?')} CPUs "
             f"(load average at start {m.get('load_avg_1_5_15', ['?'])[0]:.1f}); `{report['command']}`. Map "
             f"{s['env_kwargs']['map_size']} (three melee and three ranged units a side), max_cycles "
             f"{s['env_kwargs']['max_cycles']}; {s['games']} games per row. A game is won when more red units than "
             "blue ones stand at its end (MAgent2 ends it when one group is wiped out, or at max_cycles); rates with "
             "95% Wilson intervals; units standing and steps are means per game.", ""]
    trained = report.get("trained", {})
    if trained:
        lines += [f"## Trained red team (target: win rate >= {TARGET_VS_RANDOM:.0%} against the random team)", "",
                  "| run | layers | trained against | env steps | train wall | evaluated against | win | draw | loss | "
                  "red standing | blue standing | steps | target |",
                  "|---|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---|"]
        for name, t in trained.items():
            preset, opp = RUNS[name]
            if "error" in t and not t.get("evaluations"):
                lines.append(f"| {name} | {preset} | {opp} | | | failed: {t['error']} | | | | | | | |")
                continue
            wall = t.get("train_wall_s")
            for ev in t.get("evaluations", []):
                target = (("met" if ev["win_rate"] >= TARGET_VS_RANDOM else "**missed**")
                          if ev["opponent"] == "random" else "(reported)")
                lines.append(f"| {name} | {preset} | {opp} | {ev['env_steps']:,} | "
                             f"{f'{wall / 60:.0f} min' if wall else '-'} | {ev['opponent']} | "
                             f"{pct(ev['win_rate'], ev['win_ci95'])} | {pct(ev['draw_rate'])} | {pct(ev['loss_rate'])} | "
                             f"{ev['red_alive']:.2f} | {ev['blue_alive']:.2f} | {ev['mean_steps']:.0f} | {target} |")
        lines.append("")
    if report.get("scripted"):
        lines += ["## Scripted players (red by a script, blue as env.opponents)", "",
                  "| red | blue | win | draw | loss | red standing | blue standing | steps |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['red']} | {r['blue']} | {pct(r['win_rate'], r['win_ci95'])} | {pct(r['draw_rate'])} | "
                  f"{pct(r['loss_rate'])} | {r['red_alive']:.2f} | {r['blue_alive']:.2f} | {r['mean_steps']:.0f} |"
                  for r in report["scripted"]]
        lines.append("")
    if report.get("notes"):
        lines += ["## Notes", "", *[f"- {n}" for n in report["notes"]], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, a few games")
    p.add_argument("--games", type=int, default=None, help="games per evaluation row (default 100; --quick 4)")
    p.add_argument("--env-steps", type=int, default=None, help="training env steps per run (default 60,000; --quick 300)")
    p.add_argument("--skip-scripted", action="store_true", help="leave out the scripted table")
    p.add_argument("--train", default="", help=f"comma list of runs to train: {', '.join(RUNS)}")
    p.add_argument("--run", action="append", default=[], metavar="NAME=DIR", help="evaluate this run dir as NAME")
    p.add_argument("--set", action="append", default=[], dest="overrides", help="config override for training")
    p.add_argument("--runs-dir", default=str(ROOT / "runs" / "bench_combined_arms"))
    p.add_argument("--out", default=None, help="output stem (default benchmarks/results/combined_arms[_quick])")
    p.add_argument("--note", action="append", default=[], help="a line for the report's notes")
    args = p.parse_args(argv)
    games = args.games or (4 if args.quick else 100)
    env_steps = args.env_steps or (300 if args.quick else 60_000)
    to_train = [n for n in args.train.split(",") if n]
    given = dict(r.split("=", 1) for r in args.run)
    unknown = (set(to_train) | set(given)) - set(RUNS)
    if unknown:
        p.error(f"unknown run names {sorted(unknown)}; known: {', '.join(RUNS)}")
    out = Path(args.out) if args.out else HERE / "results" / ("combined_arms_quick" if args.quick else "combined_arms")
    out.parent.mkdir(parents=True, exist_ok=True)
    from hdppo.platform.config import load_config

    kwargs = dict(load_config(ROOT / "configs" / "combined_arms_hierarchy.yaml").env.kwargs)
    report: dict[str, Any] = {"machine": machine_info(),
                              "command": "python benchmarks/combined_arms.py " + " ".join(argv or sys.argv[1:]),
                              "settings": {"quick": args.quick, "games": games, "env_steps": env_steps,
                                           "env_kwargs": kwargs, "overrides": args.overrides},
                              "notes": args.note, "trained": {}}

    def save() -> None:
        save_files(out, report, render_markdown(report))

    if not args.skip_scripted:
        report["scripted"] = [{"red": red, "blue": blue} | play_scripted(red, blue, games, kwargs)
                              for red in OPPONENTS for blue in OPPONENTS]
        save()
        print(f"[combined_arms] scripted table: {len(report['scripted'])} rows", flush=True)
    names = [n for n in RUNS if n in to_train or n in given]
    for name in names:
        entry: dict[str, Any] = {"preset": RUNS[name][0], "trained_against": RUNS[name][1]}
        report["trained"][name] = entry
        try:
            if name in given:
                run_dir = Path(given[name])
            else:
                run_dir = Path(args.runs_dir) / name
                entry["summary"] = train(name, env_steps, run_dir, args.overrides, args.quick)
            entry["run_dir"], entry["train_wall_s"] = str(run_dir), train_wall(run_dir)
            entry["return_curve"] = return_curve(run_dir)
            entry["evaluations"] = []
            for opp in OPPONENTS:
                entry["evaluations"].append(evaluate_run(run_dir, games, opp))
                save()
                ev = entry["evaluations"][-1]
                print(f"[combined_arms] {name} vs {opp}: win {ev['win_rate']:.1%} over {games} games", flush=True)
        except Exception as exc:  # noqa: BLE001 - one failed run is reported, the others still run
            entry["error"] = f"{type(exc).__name__}: {exc}"
            print(f"[combined_arms] {name} failed: {entry['error']}", flush=True)
        save()
    save()
    print(f"[combined_arms] wrote {out}.json and {out}.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
