"""Gantt charts of a schedule: one row per machine, one bar per operation coloured by job,
drawn with matplotlib (Agg, no display) as an RGB array, a PNG file, or a TensorBoard image."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from .instances import Instance

__all__ = ["gantt_image", "save_gantt", "log_gantt"]


def gantt_image(instance: Instance, starts: np.ndarray, title: Optional[str] = None, dpi: int = 100) -> np.ndarray:
    """``[H, W, 3]`` uint8: the operations with a start (``starts >= 0``) on their machines."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    p, mach = instance.durations, instance.machines
    n, m = p.shape
    starts = np.asarray(starts)
    done = starts >= 0
    end = np.where(done, starts + p, 0)
    horizon = max(int(end.max()) if done.any() else 1, 1)
    fig = Figure(figsize=(10, max(2.5, 0.35 * m + 1.2)), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    cmap = matplotlib.colormaps["tab20"] if n > 10 else matplotlib.colormaps["tab10"]
    for j in range(n):
        for k in range(m):
            if not done[j, k]:
                continue
            colour = cmap(j % cmap.N)
            ax.barh(int(mach[j, k]), int(p[j, k]), left=int(starts[j, k]), height=0.8, color=colour,
                    edgecolor="black", linewidth=0.4)
            if p[j, k] >= horizon / 40:
                ax.text(starts[j, k] + p[j, k] / 2, mach[j, k], str(j), ha="center", va="center", fontsize=6)
    ax.set_yticks(range(m))
    ax.set_yticklabels([f"M{i}" for i in range(m)], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, horizon * 1.01)
    ax.set_xlabel("time")
    makespan = int(end.max()) if done.all() else None
    label = title or f"{instance.name} ({instance.size})" + (f": makespan {makespan}" if makespan is not None else "")
    if makespan is not None and instance.best_known is not None and title is None:
        label += f", best known {instance.best_known} (gap {instance.gap(makespan):.1f}%)"
    ax.set_title(label, fontsize=9)
    if makespan is not None:
        ax.axvline(makespan, color="red", linewidth=1)
    fig.tight_layout()
    fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())
    return np.ascontiguousarray(rgba[..., :3])


def save_gantt(path: str | Path, instance: Instance, starts: np.ndarray, title: Optional[str] = None) -> Path:
    """The chart as a PNG file."""
    import imageio.v3 as iio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, gantt_image(instance, starts, title))
    return path


def log_gantt(log_dir: str | Path, tag: str, instance: Instance, starts: np.ndarray, step: int = 0,
              title: Optional[str] = None) -> np.ndarray:
    """The chart as a TensorBoard image (Images tab) under ``tag`` in the run ``log_dir``
    (e.g. a run dir's ``tb/control``); returns the image."""
    from torch.utils.tensorboard import SummaryWriter

    image = gantt_image(instance, starts, title)
    writer = SummaryWriter(str(log_dir))
    try:
        writer.add_image(tag, image, step, dataformats="HWC")
    finally:
        writer.close()
    return image
