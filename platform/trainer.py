"""The trainer: run dir, Ray, the parameter service, one DPPO group per layer, logs, checkpoints.

Hooks instead of subclassing: pass ``hooks=[fn]``; each is called as
``fn(trainer, layer, step, metrics)`` after every update. A hook may end the run early with
``trainer.stop.request(reason)``; SIGINT and SIGTERM do the same under ``hdppo train``
(hdppo.platform.interrupts): the run stops between updates with a checkpoint and its logs.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import yaml

from . import metrics as M
from .backend import make_backend
from .budget import groups_to_update, levels
from .checkpoint import (best_info, latest_checkpoint, layout_mismatch, learner_states, load_checkpoint,
                         policy_mismatch, resolve_checkpoint, sampled_env_steps, save_best, save_checkpoint)
from .config import Config, dump_config, load_config, validate
from .devices import devices_seen
from .elastic import scale_request_pending, take_scale_request
from .errors import CheckpointError, ConfigError, EnvError, HdppoError
from .evaluation import SELECTION_SEED_OFFSET, evaluate, evaluate_with_metrics
from .group import DPPOGroup
from .interrupts import Interrupted, SignalHandlers, StopRequest, signal_name
from .learner import Learner
from .messages import UpdateResult
from .parameter_service import ParameterService
from .progress import Progress
from ..policies.networks import make_policy
from .ray_runtime import init_ray, shutdown_ray
from .working_dir import use_working_dir

Hook = Callable[["Trainer", str, int, dict], None]


def prepare_run_dir(run_dir: Path, resume: bool) -> bool:
    """Create the run dir, or check that resuming is possible. Returns True if it was created.
    A path that is a file, or a folder that cannot be created or read, is a :class:`CheckpointError`."""
    fix = "Pass --run-dir a folder that can be created (or an earlier run's, with --resume), e.g. runs/<name>."
    if run_dir.exists() and not run_dir.is_dir():
        raise CheckpointError(f"run dir {run_dir} is a file, not a folder. {fix}")
    try:
        if resume:
            if latest_checkpoint(run_dir) is None:
                raise CheckpointError(f"--resume: {run_dir} has no checkpoint to resume from. "
                                      "Drop --resume to start a new run, or pass the run dir of an earlier run.")
            return False
        if run_dir.exists() and any(run_dir.iterdir()):
            raise CheckpointError(f"run dir {run_dir} already exists. Pass --resume to continue it, "
                                  "--run-dir to choose another folder, or delete it.")
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"run dir {run_dir} cannot be {'read' if resume or run_dir.is_dir() else 'created'} "
                              f"({exc.strerror or type(exc).__name__}: {exc.filename or run_dir}). {fix}") from exc
    return True


# What a run dir holds before its first update; a failed start may remove a run dir holding no more.
LOCK_FILE = ".hdppo.lock"
# The workers' failure tracebacks (DPPOGroup.failure_log): a run that fails at its start prints the
# last one instead, and leaves no folder behind for it.
FAILURE_LOG = "worker_failures.log"
_BEFORE_FIRST_UPDATE = {"config.yaml", "metrics.jsonl", "tb", "checkpoints", LOCK_FILE, FAILURE_LOG}


def lock_run_dir(run_dir: Path) -> Any:
    """An exclusive lock on ``run_dir`` for this process (``flock``, released by the OS if the
    process dies, so no stale lock survives a crash); a second trainer of the same run dir is a
    :class:`CheckpointError`. Returns the open lock file, to close when training ends."""
    import fcntl

    f = open(run_dir / LOCK_FILE, "a+")  # noqa: SIM115 - held open for the trainer's life
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise CheckpointError(f"run dir {run_dir} is being trained now ({holder}). Two trainers of one run dir would "
                              "write and prune each other's checkpoints: wait for that run to finish or stop it "
                              "(Ctrl-C there, or kill -TERM its pid), or train into another --run-dir.") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}")
    f.flush()
    return f


def is_training(run_dir: Path) -> bool:
    """Whether a trainer holds ``run_dir``'s lock now (:func:`lock_run_dir`): the lock file exists
    and cannot be locked. Asked without waiting; a lock taken to ask is released at once."""
    import fcntl

    path = run_dir / LOCK_FILE
    if not path.is_file():
        return False
    try:
        with open(path, "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    return False


def unlock_run_dir(lock: Any) -> None:
    if lock is not None and not lock.closed:
        lock.close()  # closing the file releases the flock


def holds_results(run_dir: Path) -> bool:
    """Whether a run dir holds anything worth keeping: a checkpoint, a logged metric (a line of
    metrics.jsonl; its scalars go to tb/ too), or any file written after the first update."""
    metrics = run_dir / "metrics.jsonl"
    return (latest_checkpoint(run_dir) is not None or (metrics.is_file() and metrics.stat().st_size > 0)
            or any(p.name not in _BEFORE_FIRST_UPDATE for p in run_dir.iterdir()))


def plan_groups(cfg: Config, total_cpus: float) -> list[tuple[list[str], int, float]]:
    """Each DPPO group's layers, worker count and CPU share. Groups run at the same time, so each
    is sized on its share of the CPUs; on Ray its workers are capped at that share."""
    layer_groups = cfg.layer_groups()
    share = total_cpus / max(len(layer_groups), 1)
    plan = []
    for names in layer_groups:
        asked = cfg.group_dppo(names).num_workers
        plan.append((names, max(1, min(asked, int(share))) if cfg.ray.backend == "ray" else asked, share))
    return plan


class Trainer:
    def __init__(self, cfg: Config, run_dir: Path | str | None = None, resume: bool = False,
                 hooks: Optional[list[Hook]] = None, quiet: bool = False, cpus: float | None = None):
        self.cfg = cfg
        # The CPUs its actors may declare; default all that Ray reports. A sweep trial passes its
        # placement group's share, so its actors fit in their bundles.
        self.cpus = cpus
        self.run_dir = Path(run_dir) if run_dir is not None else Path("runs") / cfg.name
        self.resume = resume
        self.hooks = hooks or []
        self.quiet = quiet
        self.backend = make_backend(cfg.ray.backend)
        self.groups: list[DPPOGroup] = []
        self.fixed: dict[str, Learner] = {}    # frozen layers: publish their weights, never update
        self._weights_from: dict[str, dict[str, Any]] = {}  # schedule.checkpoint layers: the file, frozen or not
        self._nothing_to_train = False  # resumed at or past train.total_env_steps
        self.last: dict[str, dict] = {}         # the last metrics of each layer
        self._opened: set[str] = set()          # groups whose start_after gates have opened (once)
        self._created = False
        self._born = time.time()  # a scale request older than this was made while no trainer ran
        self._checkpointed = False
        self.stop = StopRequest()
        self.phase = "setup"  # then "training", then "evaluation"
        self._snapshot: dict[str, Any] | None = None  # on Ray: each group's snapshot_calls() after the last update
        self._update_thread: threading.Thread | None = None
        # On Ray: the next update, started before the last one was logged (see _may_start_early).
        self._early: tuple[list[DPPOGroup], tuple, list[float]] | None = None  # groups, thread's box and event, steps before
        self.started_early = 0  # updates started before the one before them was logged
        # Per group: env steps offset (hdppo.platform.budget.levels) and its last update's steps.
        self._offsets: dict[str, float] = {}
        self._increments: dict[str, float] = {}
        self._best: float | None = None  # train.eval_every: the best score so far (checkpoints/best.json)

    # -- setup ---------------------------------------------------------------------------------
    def _seed(self) -> None:
        random.seed(self.cfg.train.seed)
        np.random.seed(self.cfg.train.seed)
        torch.manual_seed(self.cfg.train.seed)

    def _probe(self) -> dict[str, dict[str, Any]]:
        """Make one env in the driver: fail fast (and clearly) before starting any actor, and
        learn every layer's observation and action sizes."""
        from ..hierarchies.spec import probe_env

        probe, _, specs = probe_env(self.cfg, self.cfg.train.seed)
        probe.close()
        t = self.cfg.train
        if t.eval_every and t.best_by != "return":
            keys = self.cfg.env.episode_metrics if self.cfg.env.episode_metrics is not None else \
                tuple(getattr(probe, "episode_metrics", ()))
            if t.best_by not in keys:
                raise ConfigError(f"train.best_by: {t.best_by!r} is neither 'return' nor an episode metric of this "
                                  f"env (it reports: {', '.join(keys) or 'none'}). Use 'return', one of those, or "
                                  "list the info key the env sets at an episode's end in env.episode_metrics.")
        return {s.name: {"obs_dim": s.obs_dim, "action_space": s.action_space, "critic_dim": s.critic_dim,
                         "encoder": s.encoder} for s in specs}

    def setup(self) -> None:
        # The folders above the run dir that this run makes (runs/, or a/b of --run-dir a/b/c): a
        # failed start removes them again if it left them empty.
        self._parents_made = [p for p in self.run_dir.absolute().parents if not p.exists()]
        # An empty folder the user made and named with --run-dir is theirs: a failed start empties
        # it of what this run wrote but keeps the folder.
        self._folder_made = not self.run_dir.exists()
        self._created = prepare_run_dir(self.run_dir, self.resume)
        self._lock = lock_run_dir(self.run_dir)  # one trainer per run dir: a second would prune the first's checkpoints
        self._seed()
        use_working_dir(self.cfg.ray.working_dir)  # the driver imports the env module the workers get
        dims = self._probe()
        resume_state = None
        if self.resume:  # before any actor starts: a checkpoint of other layers fails here
            ckpt = latest_checkpoint(self.run_dir)
            resume_state = (ckpt, load_checkpoint(ckpt))  # type: ignore[arg-type]
            mismatch = layout_mismatch(resume_state[1], self.cfg.layer_groups(),
                                       [n for n in dims if not any(n in g for g in self.cfg.layer_groups())])
            if mismatch:
                raise self._resume_error(ckpt, mismatch)  # type: ignore[arg-type]
            done = sampled_env_steps(resume_state[1])
            self._nothing_to_train = done >= self.cfg.train.total_env_steps
            if self._nothing_to_train and not self.quiet:
                # Often a --set train.total_env_steps of the first run not repeated: said, not taken for a run.
                print(f"[hdppo] nothing to train: {self.run_dir} has {done:,} env steps and train.total_env_steps is "
                      f"{self.cfg.train.total_env_steps:,}. To train on, resume with a larger budget (--set "
                      f"train.total_env_steps=N; a --set of the earlier run is not remembered).", flush=True)
            if self._nothing_to_train:
                # Nothing starts and nothing is written: its config, logs and summary stay as they are
                # (an evaluation was appended, config.yaml rewritten to the smaller budget, last_return lost).
                # A config the checkpoint does not fit is still refused, as a resume that trains refuses it.
                def shapes(name: str) -> dict[str, list[int]]:  # the network this config builds, no learner
                    d, p = dims[name], self.cfg.layer(name).policy
                    return {k: list(v.shape) for k, v in make_policy(
                        d["obs_dim"], d["action_space"], p.hidden, p.activation, p.init_log_std, d.get("critic_dim"),
                        d.get("encoder")).state_dict().items()}

                self._refuse_misfit(resume_state, list(dims), shapes)  # type: ignore[arg-type]
                self._done_steps = done
                return
        if self.cfg.train.video_every:
            from .video import check_renders

            check_renders(self.cfg, self.cfg.train.seed)  # before any actor starts, not at update N
        if self.backend.name == "ray":
            total_cpus = init_ray(self.cfg.ray.address, self.cfg.ray.num_cpus, self.cfg.ray.working_dir)
            if self.cpus is not None:
                total_cpus = self.cpus
            self.service = self.backend.make(ParameterService, num_cpus=0, name=f"hdppo_params_{uuid.uuid4().hex[:8]}")
        else:
            total_cpus = float(self.cfg.ray.num_cpus or 1)
            self.service = ParameterService()
        layer_groups = self.cfg.layer_groups()
        budget = self.cfg.train.total_env_steps // max(len(layer_groups), 1)
        for name in dims:
            if not any(name in g for g in layer_groups):
                self.fixed[name] = Learner(self.cfg, name, dims[name]["obs_dim"], dims[name]["action_space"],
                                           self.service, self.backend.name, dims[name].get("critic_dim"),
                                           encoder=dims[name].get("encoder"))
        for names, workers, share in plan_groups(self.cfg, total_cpus):
            d = self.cfg.group_dppo(names)
            if d.worker_cpus is not None and d.worker_cpus > total_cpus:  # Ray would wait for them forever
                i = [layer.name for layer in self.cfg.layers].index(names[0])
                raise ConfigError(f"layers[{i}] ({names[0]}).dppo.worker_cpus is {d.worker_cpus:g}, more than the "
                                  f"{total_cpus:g} CPUs Ray reports: no worker could ever be placed. Lower it (workers "
                                  "may declare a fraction, e.g. 0.5), leave it out to share the machine, or add nodes.")
            if workers < d.num_workers and not self.quiet:
                print(f"[hdppo] group {'+'.join(names)!r}: {d.num_workers} workers asked, {workers} used "
                      f"(capped at its share, {share:g}, of the {total_cpus:g} CPUs Ray reports)", flush=True)
            self.groups.append(DPPOGroup(self.cfg, names, self.backend, self.service, dims, workers, share, budget))
            self.groups[-1].failure_log = self.run_dir / FAILURE_LOG
            auto = {n: dev for n, dev in self.groups[-1].devices.items() if self.cfg.learner_of(n).device == "auto"}
            if auto and not self.quiet:  # what 'auto' picked, said once: a CPU fallback is otherwise invisible
                print("[hdppo] learner.device auto: " + ", ".join(f"layer {n!r} on {dev}" for n, dev in auto.items())
                      + ("" if "cuda" in auto.values() else f" (no GPU: {devices_seen(self.backend.name)})"), flush=True)
        self._load_schedule_checkpoints()
        if self.resume:
            self._restore(resume_state)  # type: ignore[arg-type]
            state = resume_state[1]  # type: ignore[index]
            info = best_info(self.run_dir)  # a best.pt ranked another way is replaced at the first evaluation
            if info and (info.get("best_by"), info.get("best_mode")) == (self.cfg.train.best_by, self.cfg.train.best_mode):
                self._best = float(info["score"])
            # Checkpoints before hdppo.platform.budget have none: the groups are levelled anew.
            self._offsets = dict(state.get("budget", {}).get("offsets", {}))
            self._increments = dict(state.get("budget", {}).get("increments", {}))
            self._checkpointed = True
        text = dump_config(self.cfg)
        if self.resume:
            self._keep_changed_config(text)
        (self.run_dir / "config.yaml").write_text(text)
        # A resume drops what was logged after its checkpoint (the updates it trains again).
        resumed_at = ({layer.name: next((int(g.env_steps) for g in self.groups if layer.name in g.layers), None)
                       for layer in self.cfg.layers} if self.resume else None)
        self.metrics = M.MetricsWriter(self.run_dir, [layer.name for layer in self.cfg.layers], resumed_at,
                                       self._env_steps())
        if self.cfg.diagnostics.every:
            self.metrics.prepare_coverage()
        run = {k: v for k, v in self.cfg.model_dump(mode="json").items() if k != "layers"}
        for i, layer in enumerate(self.cfg.layers):
            # The run's settings and this layer's, the layer under its own index (as --set names it).
            self.metrics.hyperparameters(layer.name, M.flatten(run) | M.flatten(layer.model_dump(mode="json"),
                                                                                f"layers[{i}]."))

    def _warn_if_update_outgrows_share(self, group: Any, took: float, total: int) -> None:
        """Once per group: say so when one of its updates takes more env steps than its share of the
        budget (an upper layer's batch counts decisions, each ``period`` env steps apart), since the
        run then ends on its whole batches and the other groups get what is left."""
        share = total / max(len(self.groups), 1)
        if group.name in self._increments or took <= share or self.quiet:
            return
        if len(self.groups) > 1:
            over = (f"more than its share of train.total_env_steps ({int(share):,} of {total:,}, shared by "
                    f"{len(self.groups)} groups); the run ends on whole updates, so the other groups get what is left")
        else:
            over = (f"more than train.total_env_steps ({total:,}); the run ends on whole updates, so it samples "
                    "more env steps than asked")
        print(f"[hdppo] group {group.name!r}: one update took {int(took):,} env steps, {over}. Raise "
              "train.total_env_steps, or lower the group's dppo.train_batch_size (an upper layer's counts decisions, "
              "one every `period` env steps).", flush=True)

    def _keep_changed_config(self, text: str) -> None:
        """A resume under a changed config (new --set values): say what changed, and keep the config
        the run had so far beside it, so that the run dir still tells how its first part was trained."""
        old_path = self.run_dir / "config.yaml"
        if not old_path.is_file() or old_path.read_text() == text:
            return
        before = M.flatten(yaml.safe_load(old_path.read_text()) or {})
        after = M.flatten(yaml.safe_load(text) or {})
        changed = [f"{k} {before.get(k, '(unset)')} -> {after.get(k, '(unset)')}" for k in sorted(set(before) | set(after))
                   if before.get(k) != after.get(k)]
        if not changed:
            return
        n = 1 + sum(1 for _ in self.run_dir.glob("config.before-resume-*.yaml"))
        kept = self.run_dir / f"config.before-resume-{n}.yaml"
        kept.write_text(old_path.read_text())
        key = "train.total_env_steps"
        old_total, new_total = before.get(key), after.get(key)
        budget = ""
        if old_total != new_total and isinstance(old_total, int) and isinstance(new_total, int) and new_total > 0:
            # The schedules read progress = env steps / budget: a new budget moves each of them at once.
            budget = (f" The schedules over the run's budget (a linear lr, the entropy, teacher and bonus anneals) "
                      f"follow the new total from here: their progress jumps to {old_total / new_total:.0%} of what it "
                      "was (a linear lr rises again when the total grows).")
        print(f"[hdppo] resuming with a changed config: {'; '.join(changed[:8])}"
              f"{f' (and {len(changed) - 8} more)' if len(changed) > 8 else ''}. The config until now is kept as "
              f"{kept.name}.{budget}", flush=True)

    def _resume_error(self, ckpt: Path, what: str) -> CheckpointError:
        """--resume with a config whose layers differ from the checkpoint's: the command that resumes it."""
        import shlex

        saved = self.run_dir / "config.yaml"
        cmd = shlex.join(["hdppo", "train", str(saved), "--run-dir", str(self.run_dir), "--resume"])
        return CheckpointError(f"--resume: the checkpoint in {self.run_dir} ({ckpt.name}) was trained with another "
                               f"config: {what}. Resume it with the config it was trained with: {cmd} (add --set "
                               "train.total_env_steps=N to train longer), or train this config in a new --run-dir. "
                               f"{self.run_dir} was left as it was.")

    def _weight_shapes(self, name: str) -> dict[str, list[int]]:
        """Layer ``name``'s policy parameter shapes, from its fixed learner or its group's (maybe remote) one."""
        if name in self.fixed:
            return self.fixed[name].weight_shapes()
        group = next(g for g in self.groups if name in g.learners)
        return self.backend.get(self.backend.call(group.learners[name], "weight_shapes"))

    def _refuse_misfit(self, resume: tuple[Path, dict[str, Any]], names: list[str],
                       shapes: Callable[[str], dict[str, list[int]]]) -> None:
        """A :class:`CheckpointError` naming the first layer whose checkpointed weights do not have
        the shapes (``shapes(name)``) of the network this config builds."""
        ckpt, state = resume
        saved = learner_states(state)
        for name in names:
            what = policy_mismatch(saved.get(name, {}).get("policy", {}), shapes(name))
            if what:
                raise self._resume_error(ckpt, f"layer {name!r}: {what}")

    def _restore(self, resume: tuple[Path, dict[str, Any]]) -> None:
        """Load the checkpoint into the groups and fixed layers, after checking every layer's
        weights have this config's shapes; a mismatch is a :class:`CheckpointError` saying which."""
        ckpt, state = resume
        self._refuse_misfit(resume, [*(n for g in self.groups for n in g.learners), *self.fixed], self._weight_shapes)
        # Where schedule.checkpoint layers came from; checkpoints before it have none.
        self._weights_from = dict(state.get("weights_from", {}))
        try:
            for group in self.groups:
                group.set_state(state["groups"][group.name])
            for name, learner in self.fixed.items():
                learner.set_state(state["fixed"][name])
            self._restore_rng(state["driver_rng"])
        except HdppoError:
            raise
        except Exception as exc:  # noqa: BLE001 - a checkpoint this config cannot take, whatever the part
            raise self._resume_error(ckpt, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") \
                from exc

    def _load_schedule_checkpoints(self) -> None:
        """``schedule.checkpoint``: start a layer from another run's weights."""
        for i, layer in enumerate(self.cfg.layers):
            if layer.schedule.checkpoint is None or self.resume:
                continue
            where = f"layers[{i}] ({layer.name}).schedule.checkpoint"
            try:
                found = resolve_checkpoint(layer.schedule.checkpoint)
            except CheckpointError as exc:  # say which field, and how such a run comes about
                raise CheckpointError(f"{where}: {exc} This layer starts from another run's weights: train that "
                                      f"run first (into {layer.schedule.checkpoint}, from the folder you run in), or "
                                      "point the field at one.") from None
            states = learner_states(load_checkpoint(found))
            if layer.name not in states:
                raise CheckpointError(f"layer {layer.name!r}, schedule.checkpoint: {layer.schedule.checkpoint} has no "
                                      f"layer of that name (it has {', '.join(states)}).")
            group = None if layer.name in self.fixed else next(g for g in self.groups if layer.name in g.layers)
            what = policy_mismatch(states[layer.name].get("policy", {}), self._weight_shapes(layer.name))
            if what:  # another env's or network's run: say so before torch's size-mismatch traceback would
                raise CheckpointError(f"layer {layer.name!r}, schedule.checkpoint: {layer.schedule.checkpoint} holds a "
                                      f"{layer.name!r} trained with another observation, action space or network: "
                                      f"{what}. Point it at a run of this env and this layer's policy settings.")
            if group is None:
                self.fixed[layer.name].load_weights(states[layer.name])
            else:
                group.load_weights(layer.name, states[layer.name])
            # Kept in every checkpoint, so that an exported frozen layer can say whose weights it holds.
            self._weights_from[layer.name] = {"checkpoint": str(found.resolve()), "frozen": group is None}

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self, snapshot: dict[str, Any] | None = None, wait_s: float | None = None) -> dict[str, Any]:
        """The whole training state; from ``snapshot`` (:meth:`_take_snapshot`) rather than asked
        for now, if given (see DPPOGroup.resolve_state for ``wait_s``)."""
        groups = {g.name: g.get_state() if snapshot is None else g.resolve_snapshot(snapshot[g.name], wait_s)
                  for g in self.groups}
        return {"format": 2, "groups": groups,
                "budget": {"offsets": dict(self._offsets), "increments": dict(self._increments)},
                "fixed": {name: learner.get_state() for name, learner in self.fixed.items()},
                "weights_from": dict(self._weights_from),
                "driver_rng": {"python": random.getstate(), "numpy": np.random.get_state()[1].tolist(),
                               "numpy_pos": int(np.random.get_state()[2]), "torch": torch.get_rng_state()}}

    @staticmethod
    def _restore_rng(rng: dict[str, Any]) -> None:
        random.setstate(rng["python"])
        np.random.set_state(("MT19937", np.asarray(rng["numpy"], dtype=np.uint32), rng["numpy_pos"]))
        torch.set_rng_state(rng["torch"])

    def checkpoint(self, update: int, wait_s: float | None = None) -> Path:
        path = save_checkpoint(self.run_dir, update, self.state(self._snapshot, wait_s))
        self._checkpointed = True
        return path

    def _take_snapshot(self) -> None:
        """On Ray, note every group's state as it is now, between updates, without waiting: if a
        stop then abandons the next update, the checkpoint is this state, the one after the last
        update that was logged (the workers are asked now: one stuck in that update's rollout may
        never answer a call issued later; the learners answer from a copy kept at this version)."""
        if self.backend.name == "ray":
            self._snapshot = {g.name: g.snapshot_calls() for g in self.groups}

    def _evaluation_error(self, exc: BaseException, which: str, after: str) -> HdppoError:
        """The env (or a user function) raising in an evaluation, which steps it in this process: one
        paragraph naming it and its line, the whole stack for the CLI to save (it was a raw traceback,
        exit 1). An error of hdppo's own passes as it is."""
        if isinstance(exc, HdppoError):
            return exc
        from ..envs.errors import traceback_text, where_raised

        at = where_raised(exc)
        env = self.cfg.env.id or self.cfg.env.entry_point
        err = EnvError(f"{which}: env {env!r} raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                       f"{f' (at {at})' if at else ''}. The evaluation steps its own copies of the env with the "
                       f"evaluation seeds, in the driver; `hdppo check-env` steps the env alone.{after}")
        err.worker_traceback = traceback_text(exc)  # type: ignore[attr-defined]  # the CLI saves it to a file
        return err

    def periodic_eval(self, update: int, step: int) -> float:
        """``train.eval_every``: deterministic episodes on the same env seeds each time (not the
        default evaluation's: SELECTION_SEED_OFFSET) with the current weights, logged as ``eval/*`` on every layer; the best so far (by
        ``train.best_by``) is kept as ``checkpoints/best.pt``. Returns this evaluation's score."""
        t = self.cfg.train
        state = self.state()
        try:
            returns, episode = evaluate_with_metrics(self.cfg, learner_states(state), t.eval_episodes,
                                                     seed=t.seed + SELECTION_SEED_OFFSET)
        except Exception as exc:  # noqa: BLE001 - the env broke in the driver's evaluation: say so in one paragraph
            raise self._evaluation_error(exc, "the periodic evaluation (train.eval_every)", "") from exc
        score = float(np.mean(returns)) if t.best_by == "return" else episode.get(t.best_by)
        if score is None:
            raise ConfigError(f"train.best_by: no evaluation episode reported {t.best_by!r} in its last infos "
                              f"(reported: {', '.join(episode) or 'none'}). Rank by 'return' or by one of those.")
        if self._best is None or (score > self._best if t.best_mode == "max" else score < self._best):
            self._best = score
            save_best(self.run_dir, state, {"best_by": t.best_by, "best_mode": t.best_mode, "score": score,
                                            "update": update, "env_steps": step, "episodes": len(returns)})
        values = {M.EVAL_RETURN_MEAN: float(np.mean(returns)), M.EVAL_RETURN_STD: float(np.std(returns)),
                  **{f"{M.EVAL_EPISODE_INFO}/{k}": v for k, v in episode.items()}, M.EVAL_BEST: self._best}
        for layer in self.cfg.layers:
            self.metrics.scalars(layer.name, step, values)
        return score

    def video(self, step: int) -> None:
        """``train.video_every``: one deterministic episode with the current weights, as a clip in
        the top layer's TensorBoard run (hdppo.platform.video), at its group's env steps as its
        scalars are (``step``, all groups' steps, for a frozen top layer)."""
        from .video import tensorboard_clip

        top = self.cfg.layers[0].name
        step = next((int(g.env_steps) for g in self.groups if top in g.layers), step)
        frames, fps = tensorboard_clip(self.cfg, learner_states(self.state()), self.cfg.train.video_max_steps)
        self.metrics.video(top, step, frames, fps)

    # -- schedule ------------------------------------------------------------------------------
    def _started(self, group: DPPOGroup) -> bool:
        """A group trains once every one of its layers' ``schedule.start_after`` is met, and from
        then on: the gate opens once (a mean return that dips below it later, or an update that
        ended no episode, does not pause the layer again). A group that has sampled has started
        (so a resumed run does not close it again: its ``last`` metrics are empty then)."""
        if group.name in self._opened or group.env_steps > 0:
            return True
        for name in group.layers:
            gate = self.cfg.layer(name).schedule.start_after
            if gate is None:
                continue
            other = self.last.get(gate.layer, {})
            other_group = next((g for g in self.groups if gate.layer in g.layers), None)
            steps = other_group.env_steps if other_group is not None else 0
            if gate.env_steps is not None and steps < gate.env_steps:
                return False
            if gate.mean_return is not None and other.get(M.CHART_EPISODIC_RETURN, -np.inf) < gate.mean_return:
                return False
        self._opened.add(group.name)
        return True

    def _balanced(self, ready: list[DPPOGroup]) -> list[DPPOGroup]:
        """The ready groups that update now, so that every group gets an equal share of the env
        steps (hdppo.platform.budget)."""
        if len(ready) < 2:
            return ready
        steps, offsets = levels([g.env_steps for g in ready], [self._offsets.get(g.name) for g in ready])
        self._offsets.update({g.name: o for g, o in zip(ready, offsets)})
        pick = groups_to_update(steps, [self._increments.get(g.name, 0.0) for g in ready])
        return [g for g, p in zip(ready, pick) if p]

    def _iterate(self, groups: list[DPPOGroup]) -> list[dict[str, UpdateResult]]:
        """One update of each group; on Ray the groups run at the same time."""
        if self.backend.name == "ray" and len(groups) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(groups)) as pool:
                return list(pool.map(lambda g: g.iteration(), groups))
        return [g.iteration() for g in groups]

    def _update(self, groups: list[DPPOGroup]) -> list[dict[str, UpdateResult]] | None:
        """:meth:`_iterate`, or None if a stop request came and the update did not finish within
        ``train.stop_timeout_s`` of it. On Ray the update runs in a thread, so that this one
        stays free to see the request and keep time (the thread the loop started early, if it
        did: :meth:`_may_start_early`); in-process (backend local) it always finishes (the
        learner's state is changed in place while it runs)."""
        if self.backend.name != "ray":
            return self._iterate(groups)
        if self._early is not None:  # the loop passed its groups
            handle, self._early = self._early[1], None
        else:
            handle = self._start_update(groups)
        box, done = handle
        while not done.wait(0.1):
            if self.stop and time.monotonic() - self.stop.at > self.cfg.train.stop_timeout_s:  # type: ignore[operator]
                return None
        self._update_thread = None
        if "error" in box:
            raise box["error"]
        return box["out"]

    def _start_update(self, groups: list[DPPOGroup]) -> tuple[dict[str, Any], threading.Event]:
        """:meth:`_iterate` started in a thread: its result (or error) lands in the box, then the
        event is set."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["out"] = self._iterate(groups)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
                box["error"] = exc
            finally:
                done.set()

        self._update_thread = threading.Thread(target=run, name="hdppo-update", daemon=True)
        self._update_thread.start()
        return box, done

    def _may_start_early(self, updates: int, steps: int) -> bool:
        """Whether the next update may start now, before the one just finished is logged, so that
        the learner does not wait while the driver writes metrics (4-5 ms of a 0.1 s MinAtar
        update). Only on Ray with one group, and only when nothing due before the next update
        needs the learners as they are now (an evaluation or a video reads their weights) or a
        pause of the workers (a scale request, a hook). A checkpoint does not: it is taken from
        the copy each learner kept at this update's version (Learner.state_snapshot)."""
        t = self.cfg.train
        return (self.backend.name == "ray" and len(self.groups) == 1 and not self.hooks and not self.stop
                and steps < t.total_env_steps and self._started(self.groups[0])
                and not (t.eval_every and updates % t.eval_every == 0)
                and not (t.video_every and updates % t.video_every == 0)
                and not scale_request_pending(self.run_dir))

    def _apply_scale_request(self) -> None:
        """``hdppo scale RUN_DIR --workers N``: resize between updates, never mid-update."""
        request = take_scale_request(self.run_dir)
        if request is None:
            return
        if request.get("time", 0.0) < self._born:  # asked of an earlier trainer of this run dir, which had stopped
            if not self.quiet:
                print(f"[hdppo] ignored a scale request to {request['workers']} workers made before this trainer "
                      "started (the run was not training then); ask again with hdppo scale", flush=True)
            return
        for group in self.groups:
            if request.get("group") in (None, group.name):
                n = group.resize(request["workers"])
                if not self.quiet:
                    print(f"[hdppo] group {group.name!r}: now {n} workers (hdppo scale)", flush=True)

    # -- the loop ------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Train until ``train.total_env_steps`` (all groups together); returns a summary."""
        try:
            return self._train()
        except BaseException as exc:
            self._cleanup_failed_start()
            if isinstance(exc, HdppoError) and self.phase not in ("setup", "evaluation") and self.run_dir.is_dir():
                # A run that fails after a checkpoint keeps it: the CLI says so, with the resume command.
                # (Not a run refused at its start, a config or a resume mismatch: the command that
                # would continue it is the one that just failed.)
                kept = latest_checkpoint(self.run_dir)
                if kept is not None:
                    exc.kept_checkpoint = kept  # type: ignore[attr-defined]
            raise
        finally:
            self.stop.interruptible = True
            unlock_run_dir(getattr(self, "_lock", None))  # the run dir is free once training returns

    def _env_steps(self) -> int:
        return int(sum(g.env_steps for g in self.groups))

    def _train(self) -> dict[str, Any]:
        t_call = time.time()
        self.setup()
        if self._nothing_to_train:
            return self._nothing_summary(t_call)
        steps = self._env_steps()
        updates = max((g.counters()["updates"] for g in self.groups), default=0)
        total = self.cfg.train.total_env_steps
        progress = Progress(total, self.cfg.train.log_every_s, start_steps=steps, force_plain=self.quiet)
        last_return: float | None = None
        saved_at = updates
        t_start = time.time()
        abandoned = False
        self._take_snapshot()
        self.stop.interruptible, self.phase = False, "training"  # from here a signal stops the loop between updates
        try:
            # An update started early is always waited for (and logged), a stop's grace included.
            while (steps < total and self.groups and not self.stop) or self._early is not None:
                if self._early is not None:
                    ready, before = self._early[0], self._early[2]
                else:
                    ready = [g for g in self.groups if self._started(g)]
                    if not ready:
                        raise ConfigError("schedule.start_after: no layer can start (the gates wait on each other). "
                                          "Let at least one trained layer start without start_after.")
                    ready = self._balanced(ready)
                    before = [g.env_steps for g in ready]
                outs = self._update(ready)
                if outs is None:
                    abandoned = True
                    break
                for group, b in zip(ready, before):
                    self._warn_if_update_outgrows_share(group, group.env_steps - b, total)
                    self._increments[group.name] = group.env_steps - b
                at = [int(group.env_steps) for group in ready]  # before an early update moves them
                steps, updates = self._env_steps(), updates + 1
                early = self._may_start_early(updates, steps)
                if early:
                    self._take_snapshot()
                    now = [g.env_steps for g in ready]  # the next update's "before"
                    self._early = (ready, self._start_update(ready), now)
                    self.started_early += 1
                for group, step, out in zip(ready, at, outs):
                    for layer, result in out.items():
                        values = result.metrics
                        self.metrics.scalars(layer, step, values)
                        if result.command_counts:
                            self.metrics.command_histogram(layer, step, result.command_counts,
                                                           self.cfg.layer(layer).action.nvec)
                        if result.coverage is not None:
                            self.metrics.coverage(layer, step, *result.coverage)
                        self.last[layer] = values
                        last_return = values.get(M.CHART_EPISODIC_RETURN, last_return)
                        for hook in self.hooks:
                            hook(self, layer, step, values)
                self.metrics.flush()  # TensorBoard's own writer flushes every 2 minutes; a SIGKILL loses less
                if not early:  # between updates: a resize, and the state as it is now
                    self._apply_scale_request()
                    self._take_snapshot()
                if updates % self.cfg.train.checkpoint_every == 0:
                    self.checkpoint(updates)
                    saved_at = updates
                if self.cfg.train.eval_every and updates % self.cfg.train.eval_every == 0:
                    self.periodic_eval(updates, steps)
                if self.cfg.train.video_every and updates % self.cfg.train.video_every == 0:
                    self.video(steps)
                if not self.quiet:
                    progress.update(steps, last_return)
            if self.stop:
                path = self.checkpoint(updates, wait_s=self.cfg.train.stop_timeout_s)
            elif saved_at != updates or latest_checkpoint(self.run_dir) is None:
                path = self.checkpoint(updates)
            else:
                path = latest_checkpoint(self.run_dir)  # type: ignore[assignment]
        finally:
            progress.close()
            self.metrics.flush()
        wall = time.time() - t_start
        summary: dict[str, Any] = {"env_steps": steps, "updates": updates, "wall_s": wall, "total_env_steps": total,
                                   "last_return": last_return, "run_dir": str(self.run_dir),
                                   "learner_devices": {n: dev for g in self.groups for n, dev in g.devices.items()}}
        if self._nothing_to_train:
            summary["nothing_to_train"] = True
        # Layers whose start_after was never met keep their first weights: said, or eval and export
        # would go ahead on them in silence.
        waiting = {name: self.cfg.layer(name).schedule.start_after for g in self.groups
                   if g.updates == 0 and not self._started(g) for name in g.layers}
        if waiting:
            summary["never_started"] = {n: gate.model_dump(exclude_none=True) for n, gate in waiting.items() if gate}
        if self.stop:  # in the loop, or while its last checkpoint was written
            self.metrics.close()
            # Counted from the checkpoint: an abandoned update may still move the groups' counters.
            state = load_checkpoint(path)
            steps = sampled_env_steps(state)
            return summary | {"env_steps": steps, "total_env_steps": total, "stopped": {
                "reason": self.stop.reason, "signal": signal_name(self.stop.signum), "exit_code": self.stop.exit_code,
                "checkpoint": str(path), "abandoned": abandoned, "stop_timeout_s": self.cfg.train.stop_timeout_s}}
        self.stop.interruptible, self.phase = True, "evaluation"  # the run is saved: a signal now just ends it
        if self.cfg.train.eval_episodes > 0:
            try:
                returns = evaluate(self.cfg, learner_states(self.state()), self.cfg.train.eval_episodes)
            except Exception as exc:  # noqa: BLE001 - training is done and saved; its summary is kept
                summary["final_evaluation_error"] = f"{type(exc).__name__}: {exc}"
                self._finish(summary, t_call)
                raise self._evaluation_error(
                    exc, "the final evaluation", f" Training had finished and is kept in {self.run_dir} (summary.json "
                    f"without the evaluation); once that is fixed, evaluate it with: hdppo eval {self.run_dir}") from exc
            ev = {M.EVAL_RETURN_MEAN: float(np.mean(returns)), M.EVAL_RETURN_STD: float(np.std(returns))}
            for layer in self.cfg.layers:
                self.metrics.scalars(layer.name, steps, ev)
            summary |= {"eval_return_mean": ev[M.EVAL_RETURN_MEAN], "eval_return_std": ev[M.EVAL_RETURN_STD]}
        return self._finish(summary, t_call)

    def _finish(self, summary: dict[str, Any], t_call: float) -> dict[str, Any]:
        """Close the logs and write ``summary.json`` (also when the final evaluation failed)."""
        # wall_s is the training loop of this call; total_s adds the start (Ray, the env probe,
        # a resume's checkpoint) and the final evaluation, what the user waited for.
        summary["total_s"] = time.time() - t_call
        self.metrics.close()
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    def _nothing_summary(self, t_call: float) -> dict[str, Any]:
        """A resume at or past its budget: the run's summary as it was, marked, nothing written."""
        path = self.run_dir / "summary.json"
        try:
            summary = json.loads(path.read_text()) if path.is_file() else {}
        except ValueError:
            summary = {}
        wall = time.time() - t_call
        return {**summary, "env_steps": self._done_steps, "total_env_steps": self.cfg.train.total_env_steps,
                "run_dir": str(self.run_dir), "wall_s": 0.0, "total_s": wall, "nothing_to_train": True}

    def _cleanup_failed_start(self) -> None:
        """A new run that failed before its first update leaves nothing behind. A run dir that
        holds logs or a checkpoint (:func:`holds_results`) is never deleted: it stays, to be read,
        or continued with ``--resume`` from its last checkpoint."""
        if getattr(self, "metrics", None) is not None:
            self.metrics.close()
        unlock_run_dir(getattr(self, "_lock", None))
        if not self.run_dir.is_dir():
            return
        if self._created and not self._checkpointed and not holds_results(self.run_dir):
            for p in self.run_dir.iterdir():   # only what this run wrote (holds_results said so)
                if p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
            if not getattr(self, "_folder_made", True):
                return  # the user's own empty folder stays
            try:
                self.run_dir.rmdir()
            except OSError:
                return  # something it could not remove: the folder stays with it
            for parent in getattr(self, "_parents_made", []):  # deepest first; only while empty
                try:
                    parent.rmdir()
                except OSError:
                    break
        elif self._created and latest_checkpoint(self.run_dir) is None and not self.quiet:
            print(f"[hdppo] run dir kept: {self.run_dir} (its logs; no checkpoint yet, so it cannot be resumed)",
                  flush=True)

    def shutdown(self) -> None:
        unlock_run_dir(getattr(self, "_lock", None))
        for group in self.groups:
            group.shutdown()
        if self.groups or self.fixed:
            self.backend.kill(self.service)
        self.groups, self.fixed = [], {}
        if self._update_thread is not None:  # an abandoned update: it fails on the actors just killed
            self._update_thread.join(timeout=10.0)
            self._update_thread = None


def train_from_file(path: str, overrides: list[str] | None = None, run_dir: str | None = None,
                    address: str | None = None, resume: bool = False, working_dir: str | None = None) -> dict[str, Any]:
    cfg = load_config(path, overrides)
    given = {k: v for k, v in (("address", address), ("working_dir", working_dir)) if v is not None}
    if given:
        flags = {("ray", k): f"--{k.replace('_', '-')} {v}" for k, v in given.items()}
        cfg = validate(cfg.model_dump() | {"ray": cfg.ray.model_dump() | given}, source=path, given=flags)
    if resume and run_dir is None:
        run_dir = str(Path("runs") / cfg.name)
    # A Ray this process had started before (a notebook's, a test session's) is left running.
    ray_was_up = cfg.ray.backend == "ray" and _ray_initialized()
    trainer = Trainer(cfg, run_dir, resume=resume)
    # The handlers stay in place while the actors and Ray shut down: a second Ctrl-C there (the
    # first one's checkpoint written) is the documented exit at once, not a KeyboardInterrupt out
    # of the shutdown that said nothing was kept.
    with SignalHandlers(trainer.stop, cfg.train.stop_timeout_s if cfg.ray.backend == "ray" else None):
        try:
            return trainer.train()
        except KeyboardInterrupt:
            raise _interrupted(trainer) from None
        finally:
            trainer.stop.finishing = True  # from here on a signal exits at once: the run is saved or lost already
            trainer.shutdown()
            if cfg.ray.backend == "ray" and not ray_was_up:
                shutdown_ray()  # here, not at exit: quietly, and before the final lines are printed


def _ray_initialized() -> bool:
    import ray

    return ray.is_initialized()


def _interrupted(trainer: Trainer) -> Interrupted:
    """A signal outside the training loop (Ray starting, the final evaluation): what is left."""
    how = trainer.stop.reason or "interrupted"
    when = "during the final evaluation (training had finished)" if trainer.phase == "evaluation" else \
        "before training started"
    run_dir = trainer.run_dir
    ckpt = latest_checkpoint(run_dir) if run_dir.is_dir() else None
    if ckpt is not None:
        where = f"{run_dir} holds checkpoint {ckpt.name}; continue it with --resume"
    elif run_dir.is_dir():
        where = f"{run_dir} is kept (no checkpoint yet)"
    else:
        where = "nothing was trained yet, so the new run dir was removed"
    return Interrupted(f"{how} {when}; {where}.", trainer.stop.exit_code if trainer.stop.signum is not None else 130)
