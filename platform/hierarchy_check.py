"""``hdppo check-env CONFIG``'s second half: the config's layers over its env.

The env's own check (:func:`hdppo.envs.check.check_target`) knows nothing of the hierarchy. A
hierarchy the env does not fit (a lane naming an agent the env lacks, a view of the wrong size, a
reward reading info keys the env never writes, a teacher that raises) would otherwise fail only
once a run has started its workers. Here the layers are built as a training worker builds them and
play a few env steps with their untrained policies, recording as training records, so that the
same errors come out in one paragraph before any run.
"""
from __future__ import annotations

from .config import Config
from .parameter_service import ParameterService
from .rollout_worker import RolloutWorker


def check_hierarchy(cfg: Config, steps: int) -> str:
    """Build ``cfg``'s layers over its env in one worker, play ``steps`` env steps (every copy of
    the worker stepping together) and return a report: each layer's lanes, input, command or action
    space and the decisions it took. Raises the error training would raise."""
    learning = [layer.name for layer in cfg.layers if layer.learns] or [cfg.layers[-1].name]
    worker = RolloutWorker(cfg, learning, 0, 1, ParameterService())
    sampler = worker.sampler
    try:
        episodes = 0
        while sampler.copy_steps < steps:
            episodes += len(sampler.step())
        lines = [f"hierarchy of {cfg.name or 'the config'}: {len(worker.specs)} layer(s) over the env, "
                 f"{sampler.copy_steps} steps of {sampler.N} copies with untrained policies, {episodes} episode(s) ended"]
        for s in worker.specs:
            mode = s.cfg.schedule.mode
            took = f", {sampler.decided_count(s.name)} decisions recorded" if s.name in learning else ""
            # The bottom layer's lanes are the env agents it controls (members empty: all of them).
            lanes = (f"{len(s.members) or len(sampler.venv.agents)} agent(s)" if s.bottom
                     else f"{len(s.lanes)} lane(s)")  # type: ignore[arg-type]
            lines.append(f"  {s.name} ({mode}): {lanes}, acts every {s.every} env step(s), input "
                         f"{s.obs_dim}, {'env actions' if s.bottom else 'commands'} {s.action_space}{took}")
        return "\n".join(lines)
    finally:
        sampler.close()
