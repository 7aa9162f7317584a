"""Metric names (constants, CleanRL's namespaces) and the writer: TensorBoard + metrics.jsonl.

``tb/<layer>/`` is one TensorBoard run per layer, so layers overlay in one chart.
``metrics.jsonl`` carries the same scalars, one ``{"step", "layer", "tag", "value", "time"}`` a line.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

CHART_EPISODIC_RETURN = "charts/episodic_return"
CHART_EPISODE_LENGTH = "charts/episode_length"
CHART_EPISODES = "charts/episodes"
CHART_LR = "charts/learning_rate"
CHART_ENTROPY_COEFF = "charts/entropy_coeff"
CHART_TEACHER_COEFF = "charts/teacher_coeff"
CHART_REWARD_EXTRINSIC = "charts/reward_extrinsic"
CHART_REWARD_INTRINSIC = "charts/reward_intrinsic"
CHART_EXPLORATION_BONUS = "charts/exploration_bonus"
HIST_COMMANDS = "charts/commands"
EVAL_PREFIX = "eval/"                 # every evaluation tag: logged at the whole run's env steps
EVAL_RETURN_MEAN = "eval/return_mean"
EVAL_RETURN_STD = "eval/return_std"
EVAL_EPISODE_INFO = "eval/episode"   # + "/<info key>": train.eval_every, env.episode_metrics' mean per episode
EVAL_BEST = "eval/best"              # train.eval_every: the best train.best_by so far (checkpoints/best.pt's)
LOSS_POLICY = "losses/policy"
LOSS_VALUE = "losses/value"
LOSS_ENTROPY = "losses/entropy"
LOSS_APPROX_KL = "losses/approx_kl"
LOSS_CLIPFRAC = "losses/clipfrac"
LOSS_EXPLAINED_VARIANCE = "losses/explained_variance"
LOSS_GRAD_NORM = "losses/grad_norm"
LOSS_RND = "losses/rnd_predictor"
LOSS_TEACHER = "losses/teacher_nll"          # kickstarting: -log pi(teacher's action), minibatch mean
LOSS_TEACHER_REPLAY = "losses/teacher_nll_replay"  # the same on states drawn from teacher.replay
LOSS_BOUNDS = "losses/bounds"                # ppo.bounds_loss_coeff: squared excess of a Box mean beyond its bounds
PERF_ENV_STEPS_PER_S = "perf/env_steps_per_s"
PERF_SAMPLE_S = "perf/sample_s"
PERF_UPDATE_S = "perf/update_s"
PERF_SGD_STEPS = "perf/sgd_steps"
PERF_SAMPLES = "perf/samples"
PERF_GRAD_BYTES = "perf/grad_bytes_per_update"
PERF_GRAD_FP32_BYTES = "perf/grad_fp32_bytes_per_update"  # the same gradients as raw float32
PERF_WORKERS_REPLACED = "perf/workers_replaced"
PERF_DROPPED_STALE = "perf/dropped_stale_samples"
PERF_MAX_STALENESS = "perf/max_staleness"
PERF_MEAN_STALENESS = "perf/mean_staleness"
PERF_NUM_WORKERS = "perf/num_workers"
PERF_WORKER_SAMPLES = "perf/worker_samples"  # + "/<worker index>": samples each worker gave this update
PERF_CPU_UTIL = "perf/cpu_utilization"
DIAG_OBS_DIVERGENCE = "diag/obs_divergence"        # + "/max" and "/<worker>": symmetric KL from the pool
DIAG_ACTION_DIVERGENCE = "diag/action_divergence"  # + "/max" and "/<worker>"
DIAG_GRAD_COSINE = "diag/grad_cosine"              # mean pairwise cosine of the workers' gradients
IMG_STATE_COVERAGE = "diag/state_coverage"         # image: 2-D PCA of sampled states, coloured by worker
# hdppo self-label (hdppo.platform.self_label), per iteration: the cross-entropy of the best
# solutions' decisions, the best and the mean env return of the sampled solutions, and the mean
# return of the greedy policy on the fixed validation instances.
SELF_LABEL_NLL = "self_label/nll"
SELF_LABEL_BEST_RETURN = "self_label/best_return"
SELF_LABEL_MEAN_RETURN = "self_label/mean_return"
SELF_LABEL_VALID_RETURN = "self_label/valid_return"
EPISODE_INFO = "episode"                           # + "/<info key>": env.episode_metrics, mean per episode
VIDEO_EPISODE = "videos/episode"                   # animated GIF (train.video_every), top layer's run
# Tags logged with a suffix: "/<i>" (a command, a worker) or "/max" (the worst worker).
SUFFIXED_TAGS = (HIST_COMMANDS, EPISODE_INFO, EVAL_EPISODE_INFO, PERF_WORKER_SAMPLES, DIAG_OBS_DIVERGENCE, DIAG_ACTION_DIVERGENCE)
NOT_SCALARS = (HIST_COMMANDS, IMG_STATE_COVERAGE, VIDEO_EPISODE)

REQUIRED_TAGS = (CHART_EPISODIC_RETURN, CHART_EPISODE_LENGTH, LOSS_POLICY, LOSS_VALUE, LOSS_ENTROPY,
                 LOSS_APPROX_KL, LOSS_CLIPFRAC, LOSS_EXPLAINED_VARIANCE, PERF_ENV_STEPS_PER_S,
                 PERF_SAMPLE_S, PERF_UPDATE_S)


def _kept(row: dict, resumed_at: dict[str, int | None], total: int) -> bool:
    """Whether a row was logged by the time of the checkpoint: a layer's scalars are at its group's
    env steps, evaluations (``eval/*``) and a layer with no group at the whole run's."""
    own = resumed_at.get(row.get("layer"))  # type: ignore[arg-type]
    whole = str(row.get("tag", "")).startswith(EVAL_PREFIX) or own is None
    return row.get("step", 0) <= (total if whole else own)


def trim_after_checkpoint(path: Path, resumed_at: dict[str, int | None], total: int) -> dict[str, list[dict]]:
    """Drop the rows of ``metrics.jsonl`` logged after the checkpoint a resume starts from (see
    :class:`MetricsWriter`); the file is rewritten only if there are any, atomically. Returns the
    kept rows per layer (for TensorBoard's purge)."""
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines(keepends=True)
    kept, rows = [], {}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by the kill: not a row
            continue
        if _kept(row, resumed_at, total):
            kept.append(line if line.endswith("\n") else line + "\n")
            rows.setdefault(row.get("layer"), []).append(row)
    if len(kept) != len(lines):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, path)
    return rows


class MetricsWriter:
    """Writes each scalar to the layer's TensorBoard run and to ``metrics.jsonl``."""

    def __init__(self, run_dir: Path, layers: list[str], resumed_at: dict[str, int | None] | None = None,
                 total: int = 0):
        """``resumed_at``: a resumed run's env steps per layer at its checkpoint (None for a layer
        with no DPPO group), ``total`` the whole run's: what was logged after the checkpoint (a
        run killed between two checkpoints) is dropped, so that the updates trained again are
        not charted twice (:func:`trim_after_checkpoint`)."""
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        relog: dict[str, list[dict]] = {}
        purge: dict[str, int | None] = {name: None for name in layers}
        if resumed_at is not None:
            relog = trim_after_checkpoint(self.run_dir / "metrics.jsonl", resumed_at, total)
            purge = {name: (resumed_at.get(name) if resumed_at.get(name) is not None else total) + 1 for name in layers}
        # purge_step: TensorBoard hides the events of this dir at or past it that an earlier process
        # wrote. It applies to every tag, so the kept rows past it (evaluations, at the whole run's
        # steps) are written again.
        self._tb = {name: SummaryWriter(str(self.run_dir / "tb" / name), purge_step=purge[name]) for name in layers}
        for name, rows in relog.items():
            for r in rows:
                if name in self._tb and purge[name] is not None and r["step"] >= purge[name]:
                    self._tb[name].add_scalar(r["tag"], r["value"], r["step"], walltime=r.get("time"))
        self._jsonl = open(self.run_dir / "metrics.jsonl", "a", buffering=1)
        self._drawer: ThreadPoolExecutor | None = None  # coverage images, drawn beside training
        self._drawings: list[Future] = []

    def scalars(self, layer: str, step: int, values: dict[str, float]) -> None:
        now = time.time()
        for tag, value in values.items():
            if tag.startswith("_") or value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            self._tb[layer].add_scalar(tag, value, step)
            self._jsonl.write(json.dumps({"step": step, "layer": layer, "tag": tag, "value": float(value), "time": now}) + "\n")

    def command_histogram(self, layer: str, step: int, counts: list[int], nvec: list[int] | None = None) -> None:
        """How often each command was chosen: a TensorBoard histogram, and shares as scalars,
        ``charts/commands/<i>`` for a discrete command; for a multidiscrete one (``nvec``) the share
        of each choice within its component, ``charts/commands/<component>_<choice>``, and the
        histogram over the components' choices side by side."""
        import numpy as np

        arr = np.asarray(counts, dtype=np.float64)
        if arr.sum() == 0:
            return
        self._tb[layer].add_histogram(HIST_COMMANDS, np.repeat(np.arange(len(arr)), arr.astype(np.int64)), step,
                                      bins=np.arange(len(arr) + 1) - 0.5)
        if not nvec or len(nvec) == 1:
            self.scalars(layer, step, {f"{HIST_COMMANDS}/{i}": float(v) for i, v in enumerate(arr / arr.sum())})
            return
        shares, at = {}, 0
        for k, n in enumerate(nvec):
            part = arr[at:at + n]
            at += n
            shares |= {f"{HIST_COMMANDS}/{k}_{i}": float(v) for i, v in enumerate(part / max(part.sum(), 1.0))}
        self.scalars(layer, step, shares)

    def coverage(self, layer: str, step: int, points: Any, workers: Any) -> None:
        """The state-coverage picture (hdppo.platform.diagnostics.coverage_image) as an image,
        drawn on a thread of its own: the training loop does not wait for matplotlib (its import
        and first draw took ~0.4-0.6 s, a tenth of a ten-update benchmark window). SummaryWriter
        queues events under a lock, so the image and the loop's scalars can be added at once.
        A drawing that failed raises at the next flush; close waits for those still running."""
        self._draw(self._draw_coverage, layer, step, points, workers)

    def prepare_coverage(self) -> None:
        """Import matplotlib on the drawing thread now, while the run starts (Ray, actors), rather
        than at the first image, in the middle of training."""
        from .diagnostics import plotting_classes

        self._draw(plotting_classes)

    def _draw(self, fn: Any, *args: Any) -> None:
        """``fn(*args)`` on the drawing thread (started at the first call), kept until it is done."""
        if self._drawer is None:
            self._drawer = ThreadPoolExecutor(1, thread_name_prefix="hdppo-coverage", initializer=_lowest_priority)
        self._drawings.append(self._drawer.submit(fn, *args))

    def _draw_coverage(self, layer: str, step: int, points: Any, workers: Any) -> None:
        from .diagnostics import coverage_image

        self._tb[layer].add_image(IMG_STATE_COVERAGE, coverage_image(points, workers, f"{layer}, step {step:,}"), step)

    def _finished_drawings(self) -> None:
        """Forget the drawings that are done, re-raising the error of one that failed."""
        done = [f for f in self._drawings if f.done()]
        self._drawings = [f for f in self._drawings if not f.done()]
        for f in done:
            f.result()

    def video(self, layer: str, step: int, frames: Any, fps: float) -> None:
        """A clip ``[T, H, W, 3]`` uint8 as the event ``SummaryWriter.add_video`` writes: an image
        summary holding an animated GIF (TensorBoard shows it in its Images tab). add_video itself
        encodes with ``moviepy.editor``, which moviepy 2 no longer has; Pillow encodes the same GIF."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        from .video import gif_bytes

        _, h, w, c = frames.shape
        image = Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=gif_bytes(frames, fps))
        self._tb[layer]._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=VIDEO_EPISODE, image=image)]), step)

    def hyperparameters(self, layer: str, flat: dict[str, Any]) -> None:
        """Hyperparameters at start, as a Markdown table in the layer's TEXT tab."""
        rows = "\n".join(f"| {k} | {v} |" for k, v in flat.items())
        self._tb[layer].add_text("hyperparameters", f"| key | value |\n|---|---|\n{rows}", 0)

    def flush(self) -> None:
        self._finished_drawings()
        for w in self._tb.values():
            w.flush()
        self._jsonl.flush()

    def close(self) -> None:
        if self._drawer is not None:
            self._drawer.shutdown(wait=True)  # the images still being drawn, before their writers close
            self._drawer = None
            for f in self._drawings:
                if f.exception() is not None:  # close runs on every way out, also after an error: warn only
                    print(f"[hdppo] a state-coverage image was not written: {f.exception()!r}", file=sys.stderr)
            self._drawings = []
        for w in self._tb.values():
            w.close()
        if not self._jsonl.closed:
            self._jsonl.close()


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, key + ".")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                out |= flatten(x, f"{key}[{i}].")
        else:
            out[key] = v
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _lowest_priority() -> None:
    """Make the calling thread the last to get a core (Linux: ``setpriority`` on a thread id sets
    that thread's nice value; elsewhere nothing). The coverage image's matplotlib drawing takes
    ~0.05-0.1 s of CPU, and on two cores shared with a learner and its workers it lengthened the
    update it fell beside; at nice 19 it waits for an idle core instead."""
    import os
    import threading

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not permitted
        pass
