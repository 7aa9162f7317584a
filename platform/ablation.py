"""``hdppo ablate CONFIG --workers 1,2,4,8``: the same config trained with each worker count,
then a table and a plot of final return and throughput (the articles' debugging workflow:
does adding workers still help, and does it hurt learning?)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from . import metrics as M
from .config import GroupSpec, load_config
from .errors import ConfigError
from .trainer import Trainer


def parse_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts):
        raise ConfigError(f"--workers {text!r}: give positive worker counts separated by commas, e.g. 1,2,4,8")
    return counts


def ablate(config: str, counts: list[int], out_dir: Path, overrides: list[str] | None = None) -> list[dict[str, Any]]:
    """Train once per worker count (every group gets that many workers); returns one row each."""
    from .sweep import check_out_dir

    check_out_dir(out_dir, "--out")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError(f"{out_dir} already exists; pass another --out or delete it.")
    rows = []
    for n in counts:
        base = load_config(config, overrides)
        sets = [f"layers.{i}.dppo.num_workers={n}" for i in range(len(base.layers))]
        # A group that states its own worker count ({layers: [...], dppo: {num_workers: ...}}) gets it there too.
        sets += [f"groups.{g}.dppo.num_workers={n}" for g, group in enumerate(base.groups or [])
                 if isinstance(group, GroupSpec)]
        cfg = load_config(config, [*(overrides or []), *sets])
        trainer = Trainer(cfg, out_dir / f"workers_{n}", quiet=True)
        try:
            summary = trainer.train()
            used = [g.num_workers for g in trainer.groups]
        finally:
            trainer.shutdown()
        recs = M.read_jsonl(out_dir / f"workers_{n}" / "metrics.jsonl")
        rates = [r["value"] for r in recs if r["tag"] == M.PERF_ENV_STEPS_PER_S]
        rows.append({"workers": n, "workers_used": used, "env_steps": summary["env_steps"],
                     "wall_s": round(summary["wall_s"], 1),
                     "env_steps_per_s": round(sum(rates) / len(rates), 1) if rates else None,
                     "last_return": summary["last_return"], "eval_return_mean": summary.get("eval_return_mean")})
    _write(rows, out_dir)
    return rows


def _num(value: Any, digits: int) -> str:
    """A table cell: a number rounded for reading (0.9700000000000001 -> 0.97), '-' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else str(value)


def _write(rows: list[dict[str, Any]], out_dir: Path) -> None:
    (out_dir / "ablation.json").write_text(json.dumps(rows, indent=2))
    head = "| workers | env steps/s | wall s | eval return | last training return |\n|---:|---:|---:|---:|---:|\n"
    body = "".join(f"| {r['workers']} | {_num(r['env_steps_per_s'], 0)} | {_num(r['wall_s'], 1)} | "
                   f"{_num(r['eval_return_mean'], 2)} | {_num(r['last_return'], 2)} |\n" for r in rows)
    (out_dir / "ablation.md").write_text(head + body)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    xs = [r["workers"] for r in rows]
    a.plot(xs, [r["env_steps_per_s"] or 0 for r in rows], "o-")
    a.set_xlabel("workers")
    a.set_ylabel("env steps/s")
    b.plot(xs, [r["eval_return_mean"] if r["eval_return_mean"] is not None else float("nan") for r in rows], "o-")
    b.set_xlabel("workers")
    b.set_ylabel("deterministic eval return")
    for ax in (a, b):
        ax.set_xticks(xs)  # worker counts are whole numbers
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_dir / "ablation.png", dpi=110)
