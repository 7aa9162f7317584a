"""The trainer: run dir, Ray, the parameter service, one DPPO group per layer, logs, checkpoints.

Hooks instead of subclassing: pass ``hooks=[fn]``; each is called as
``fn(trainer, layer, step, metrics)`` after every update.
"""
from __future__ import annotations

import json
import random
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from hdppo.envs.loading import make_gym_env
from hdppo.platform import metrics as M
from hdppo.platform.backend import make_backend
from hdppo.platform.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from hdppo.platform.config import Config, dump_config, load_config, validate
from hdppo.platform.errors import CheckpointError
from hdppo.platform.evaluation import evaluate
from hdppo.platform.group import DPPOGroup
from hdppo.platform.parameter_service import ParameterService
from hdppo.platform.progress import Progress
from hdppo.platform.ray_runtime import init_ray

Hook = Callable[["Trainer", str, int, dict], None]


def prepare_run_dir(run_dir: Path, resume: bool) -> bool:
    """Create the run dir, or check that resuming is possible. Returns True if it was created."""
    if resume:
        if latest_checkpoint(run_dir) is None:
            raise CheckpointError(f"--resume: {run_dir} has no checkpoint to resume from. "
                                  "Drop --resume to start a new run, or pass the run dir of an earlier run.")
        return False
    if run_dir.exists() and any(run_dir.iterdir()):
        raise CheckpointError(f"run dir {run_dir} already exists. Pass --resume to continue it, "
                              "--run-dir to choose another folder, or delete it.")
    run_dir.mkdir(parents=True, exist_ok=True)
    return True


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path | str | None = None, resume: bool = False,
                 hooks: Optional[list[Hook]] = None, quiet: bool = False):
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else Path("runs") / cfg.name
        self.resume = resume
        self.hooks = hooks or []
        self.quiet = quiet
        self.layer = cfg.layers[0]
        self.backend = make_backend(cfg.ray.backend)
        self.group: DPPOGroup | None = None
        self._created = False
        self._checkpointed = False

    # -- setup ---------------------------------------------------------------------------------
    def _seed(self) -> None:
        random.seed(self.cfg.train.seed)
        np.random.seed(self.cfg.train.seed)
        torch.manual_seed(self.cfg.train.seed)

    def _probe_env(self) -> tuple[int, Any]:
        """Make one env in the driver: fail fast (and clearly) before starting any actor."""
        from hdppo.envs.env_pool import EnvPool

        e = self.cfg.env
        pool = EnvPool(lambda: make_gym_env(e.id, e.entry_point, e.kwargs, e.max_episode_steps), 1,
                       seed=self.cfg.train.seed, name=e.id or e.entry_point or "env")
        pool.close()
        return pool.obs_dim, pool.action_space

    def setup(self) -> None:
        self._created = prepare_run_dir(self.run_dir, self.resume)
        self._seed()
        obs_dim, action_space = self._probe_env()
        if self.backend.name == "ray":
            total_cpus = init_ray(self.cfg.ray.address, self.cfg.ray.num_cpus)
            service = self.backend.make(ParameterService, num_cpus=0, name=f"hdppo_params_{uuid.uuid4().hex[:8]}")
        else:
            total_cpus = float(self.cfg.ray.num_cpus or 1)
            service = ParameterService()
        self.service = service
        d = self.layer.dppo
        self.num_workers = max(1, min(d.num_workers, int(total_cpus))) if self.backend.name == "ray" else d.num_workers
        if self.num_workers < d.num_workers and not self.quiet:
            print(f"[hdppo] layer {self.layer.name!r}: {d.num_workers} workers asked, {self.num_workers} used "
                  f"(capped at the {total_cpus:g} CPUs Ray reports)", flush=True)
        self.group = DPPOGroup(self.cfg, 0, self.backend, service, obs_dim, action_space, self.num_workers, total_cpus)
        if self.resume:
            ckpt = latest_checkpoint(self.run_dir)
            state = load_checkpoint(ckpt)  # type: ignore[arg-type]
            self.group.set_state(state["groups"][self.layer.name])
            self._restore_rng(state["driver_rng"])
            self._checkpointed = True
        (self.run_dir / "config.yaml").write_text(dump_config(self.cfg))
        self.metrics = M.MetricsWriter(self.run_dir, [self.layer.name])
        self.metrics.hyperparameters(self.layer.name, M.flatten(self.cfg.model_dump(mode="json")))

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        assert self.group is not None
        return {"format": 1, "groups": {self.layer.name: self.group.get_state()},
                "driver_rng": {"python": random.getstate(), "numpy": np.random.get_state()[1].tolist(),
                               "numpy_pos": int(np.random.get_state()[2]), "torch": torch.get_rng_state()}}

    @staticmethod
    def _restore_rng(rng: dict[str, Any]) -> None:
        random.setstate(rng["python"])
        np.random.set_state(("MT19937", np.asarray(rng["numpy"], dtype=np.uint32), rng["numpy_pos"]))
        torch.set_rng_state(rng["torch"])

    def checkpoint(self, update: int) -> Path:
        path = save_checkpoint(self.run_dir, update, self.state())
        self._checkpointed = True
        return path

    # -- the loop ------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Train until ``train.total_env_steps``; returns a summary (steps, last return, eval)."""
        try:
            return self._train()
        except BaseException:
            self._cleanup_failed_start()
            raise

    def _train(self) -> dict[str, Any]:
        self.setup()
        assert self.group is not None
        counters = self.group.counters()
        steps, updates = counters["env_steps"], counters["updates"]
        total = self.cfg.train.total_env_steps
        progress = Progress(total, self.cfg.train.log_every_s, start_steps=steps, force_plain=self.quiet)
        last_return: float | None = None
        saved_at = updates
        t_start = time.time()
        try:
            while steps < total:
                out = self.group.iteration()
                steps, updates = int(out["_env_steps"]), updates + 1
                last_return = out.get(M.CHART_EPISODIC_RETURN, last_return)
                self.metrics.scalars(self.layer.name, steps, out)
                for hook in self.hooks:
                    hook(self, self.layer.name, steps, out)
                if updates % self.cfg.train.checkpoint_every == 0:
                    self.checkpoint(updates)
                    saved_at = updates
                if not self.quiet:
                    progress.update(steps, last_return)
            if saved_at != updates or latest_checkpoint(self.run_dir) is None:
                self.checkpoint(updates)
        finally:
            progress.close()
            self.metrics.flush()
        wall = time.time() - t_start
        summary: dict[str, Any] = {"env_steps": steps, "updates": updates, "wall_s": wall,
                                   "last_return": last_return, "run_dir": str(self.run_dir)}
        if self.cfg.train.eval_episodes > 0:
            state = self.group.get_state()["learner"]
            returns = evaluate(self.cfg, state, self.cfg.train.eval_episodes)
            ev = {M.EVAL_RETURN_MEAN: float(np.mean(returns)), M.EVAL_RETURN_STD: float(np.std(returns))}
            self.metrics.scalars(self.layer.name, steps, ev)
            summary |= {"eval_return_mean": ev[M.EVAL_RETURN_MEAN], "eval_return_std": ev[M.EVAL_RETURN_STD]}
        self.metrics.close()
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    def _cleanup_failed_start(self) -> None:
        """A new run that failed before its first checkpoint leaves nothing behind; one with a
        checkpoint stays, to be continued with ``--resume``."""
        if self._created and not self._checkpointed and self.run_dir.exists():
            if getattr(self, "metrics", None) is not None:
                self.metrics.close()
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def shutdown(self) -> None:
        if self.group is not None:
            self.group.shutdown()
            self.backend.kill(self.service)
            self.group = None


def train_from_file(path: str, overrides: list[str] | None = None, run_dir: str | None = None,
                    address: str | None = None, resume: bool = False) -> dict[str, Any]:
    cfg = load_config(path, overrides)
    if address is not None:
        cfg = validate(cfg.model_dump() | {"ray": cfg.ray.model_dump() | {"address": address}}, source=path)
    if resume and run_dir is None:
        run_dir = str(Path("runs") / cfg.name)
    trainer = Trainer(cfg, run_dir, resume=resume)
    try:
        return trainer.train()
    finally:
        trainer.shutdown()
