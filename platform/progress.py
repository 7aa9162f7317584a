"""Live progress: a rich bar on a terminal, plain periodic lines otherwise (CI, logs, nohup)."""
from __future__ import annotations

import sys
import time
from typing import Optional


def progress_line(steps: int, total: int, sps: float, ret: str) -> str:
    """The plain progress line. An update samples whole rollouts, so the last one may pass the
    total: the steps are shown as they are, the share and the time left stop at 100% and 0 s."""
    share = min(100.0, 100.0 * steps / max(total, 1))
    eta = "-" if sps <= 0 and steps < total else f"{max(total - steps, 0) / sps if sps > 0 else 0:,.0f}s"
    return f"[hdppo] steps {steps:,}/{total:,} ({share:.0f}%)  {sps:,.0f} steps/s  return {ret}  eta {eta}"


class Progress:
    def __init__(self, total_steps: int, every_s: float = 10.0, start_steps: int = 0, force_plain: bool = False):
        self.total = total_steps
        self.every_s = every_s
        self.t0 = time.time()
        self.start_steps = start_steps
        self._last_line = 0.0
        self._bar = None
        if sys.stdout.isatty() and not force_plain:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn

            self._bar = RichProgress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[sps]} steps/s  return {task.fields[ret]}"),
                                     TimeRemainingColumn())
            self._task = self._bar.add_task("train", total=total_steps, completed=start_steps, sps="-", ret="-")
            self._bar.start()

    def update(self, steps: int, mean_return: Optional[float]) -> None:
        elapsed = max(time.time() - self.t0, 1e-9)
        sps = (steps - self.start_steps) / elapsed
        ret = "-" if mean_return is None else f"{mean_return:.1f}"
        if self._bar is not None:
            self._bar.update(self._task, completed=min(steps, self.total), sps=f"{sps:,.0f}", ret=ret)
            return
        now = time.time()
        if now - self._last_line >= self.every_s or steps >= self.total:
            self._last_line = now
            print(progress_line(steps, self.total, sps, ret), flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
