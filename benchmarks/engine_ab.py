"""Ant-v5 learning A/B between engines: one training run of one arm, then its evaluation.

The suspected Ant-v5 regression (docs/benchmarks.md, "Ant-v5: the suspected regression") is measured by
whole training runs of ``configs/ant.yaml`` on a budget of ``--steps`` env steps (the lr annealed
over that budget), ``ray.backend: local``, one arm and one seed per call:

- ``old``: the engine of commit ``db4796a`` (the 4181 run), imported from ``git archive``;
- ``new``: the current engine, as it is;
- ``patched``: the current engine with its three float-level differences from ``db4796a``
  patched out by ``engine_equivalence.py``'s ``sitecustomize`` (db4796a's observation
  normalizer; a truncated episode's final observation normalized at the end of the rollout; no
  reward-scaler prior), each policy keeping its own noise (``HDPPO_REPLAY_OWN_NOISE``);
- ``oldnorm``, ``lateboot``, ``prior0``: one of those three patches alone.

The run dir is kept; ``learning.py`` then evaluates it (50 deterministic episodes) as
``ant_ab_<arm>_seed<seed>_<steps in k or m>``. Several arms side by side: start them as separate
processes (one core each), then compare with ``learning_seeds.py --versus``.

A variant of the config: ``--set KEY=VALUE`` (as ``hdppo train --set``) with ``--tag NAME``,
evaluated as ``ant_ab_<arm>_<NAME>_seed<seed>_<budget>``.

Usage:
    python benchmarks/engine_ab.py --arm patched --seed 5 --run-dir runs/ab/patched_s5
    python benchmarks/engine_ab.py --arm new --seed 1 --steps 3000000 --set layers.0.ppo.lr=1e-4 \
        --tag lr1e-4 --run-dir runs/ab/new_lr1e-4_s1
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import learning  # noqa: E402
from engine_equivalence import _SITE, OLD_COMMIT, patch_env  # noqa: E402
from old_commit import hdppo_train, old_tree  # noqa: E402

# The patches of each arm of the current engine (engine_equivalence.py's names); "patched" has all three.
PATCHES = {"new": (), "patched": ("oldnorm", "lateboot", "prior0"), "oldnorm": ("oldnorm",),
           "lateboot": ("lateboot",), "prior0": ("prior0",)}
ARMS = ("old",) + tuple(PATCHES)


def arm_config(seed: int, steps: int) -> dict:
    cfg = yaml.safe_load((HERE.parent / "configs" / "ant.yaml").read_text())
    cfg.pop("description", None)  # db4796a's schema has no description
    cfg["train"].update(seed=seed, total_env_steps=steps, eval_episodes=0)
    cfg["ray"] = {"backend": "local"}
    return cfg


def patched_env(old_root: Path, patches: tuple[str, ...] = PATCHES["patched"]) -> dict[str, str]:
    return {"HDPPO_REPLAY_OWN_NOISE": "1"} | patch_env(old_root, patches)


def budget_tag(steps: int) -> str:
    return f"{steps // 1_000_000}m" if steps % 1_000_000 == 0 else f"{steps // 1000}k"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", choices=ARMS, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--steps", type=int, default=1_000_000, help="env steps (the lr anneals over them)")
    ap.add_argument("--run-dir", required=True, help="where the run is kept (must not exist)")
    ap.add_argument("--old-commit", default=OLD_COMMIT)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override passed to hdppo train, e.g. layers.0.ppo.lr=1e-4 (repeatable; needs --tag)")
    ap.add_argument("--tag", default="", help="names the variant in the run's name: ant_ab_<arm>_<tag>_seed<S>_<budget>")
    args = ap.parse_args(argv)
    if args.set and not args.tag:
        raise SystemExit("engine_ab.py: --set changes the config, so give --tag NAME too: the evaluation is "
                         "named after it, and without one it would read as the plain arm's run.")
    run_dir = Path(args.run_dir).resolve()
    if run_dir.exists():
        raise SystemExit(f"engine_ab.py: --run-dir {run_dir} exists; give a new folder (nothing there is touched).")
    with tempfile.TemporaryDirectory(prefix="hdppo_ab_") as tmp, old_tree(args.old_commit) as root:
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(_SITE)
        patches = PATCHES.get(args.arm, ())
        hdppo_train(arm_config(args.seed, args.steps), run_dir, root if args.arm == "old" else None,
                    extra_paths=(site,) if patches else (),
                    overrides=args.set, extra_env=patched_env(root, patches) if patches else None,
                    timeout_s=6 * 3600)
    return learning.main([str(run_dir), "--name", run_name(args.arm, args.seed, args.steps, args.tag)])


def run_name(arm: str, seed: int, steps: int, tag: str = "") -> str:
    return f"ant_ab_{arm}{'_' + tag if tag else ''}_seed{seed}_{budget_tag(steps)}"


if __name__ == "__main__":
    raise SystemExit(main())
