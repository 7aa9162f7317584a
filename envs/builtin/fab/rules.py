"""Scripted dispatchers, the command-following reward, and the TensorBoard view of a run."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import EnvError
from ...rewards import register_reward
from .env import RELEASE_LEVELS, FabEnv
from .scenarios import build_model, get_scenario
from .sim import RULES, FabSim

CRITERIA = RULES + ("balanced",)   # the upper layer's criterion command: one rule, or all four equally
RELEASE_WEIGHT = 0.5               # fab_follow_command: for releasing at the commanded level
CRITERION_WEIGHT = 1.0             # ... and for the chosen lot's standing under the commanded criterion


def run_rule(scenario="hvlm_mini", rule: str = "fifo", seed: int | None = 0, days: float | None = None,
             noise: bool = True, breakdowns: bool = True, data_dir=None, **sim_kwargs) -> dict[str, float]:
    """One run of the fab with ``rule`` taking every decision (the fast path: no observations)."""
    if rule not in RULES:
        raise EnvError(f"fab rule {rule!r}: use one of {list(RULES)}.")
    model = build_model(get_scenario(scenario, days), data_dir=data_dir)
    sim = FabSim(model, seed=seed, noise=noise, breakdowns=breakdowns, default_rule=rule, **sim_kwargs)
    sim.run(rule)
    return sim.summary()


def play(env: FabEnv, policy, seed: int | None = None) -> dict[str, float]:
    """Run one episode of ``env`` with ``policy(obs, env) -> action`` (a rule name works too)."""
    if isinstance(policy, str):
        rule = policy
        policy = lambda obs, e: e.rule_action(rule)  # noqa: E731
    obs, _ = env.reset(seed=seed)
    done = False
    info: dict = {}
    while not done:
        obs, _, term, trunc, info = env.step(policy(obs, env))
        done = term or trunc
    return info["episode"]


def group_rule_policy(assignment: dict[str, str]):
    """A ``play`` policy for an env with ``action='rule'``: at each decision, the rule that
    ``assignment`` gives the deciding tool group (by name; a group not named: cr)."""
    return lambda obs, env: rule_teacher(None, None, env, groups=assignment)


def rule_teacher(raw_obs, members, env, rule: str = "cr", groups: dict[str, str] | None = None):
    """A ``teacher.policy`` for kickstarting a fab dispatcher (slot or rule actions): the action
    by which ``rule`` decides now, or at a tool group named in ``groups`` that group's rule."""
    fab_env: FabEnv = getattr(env, "unwrapped", env)
    pick = rule
    if groups and fab_env.decision is not None:
        pick = groups.get(fab_env.model.data.groups[fab_env.decision.group], rule)
    return fab_env.rule_action(pick)


def search_group_rules(scenario="hvlm_mini", seeds=(500, 501, 502, 503, 504), days: float | None = None,
                       sweeps: int = 2, start: str = "cr", log=None) -> tuple[dict[str, str], float]:
    """A rule per tool group, by coordinate descent on the mean tardiness over ``seeds``: from
    ``start`` everywhere, try each other rule at each group in turn and keep any that lowers it;
    ``sweeps`` passes over the groups (stops early when a pass changes nothing). A baseline an
    OR practitioner would tune by hand; search it on seeds other than those it is judged on.
    Returns ``(assignment {group name: rule}, its mean tardiness on seeds)``."""
    if start not in RULES:
        raise EnvError(f"fab rule {start!r}: use one of {list(RULES)}.")
    env = FabEnv(scenario=scenario, days=days, action="rule")
    names = [env.model.data.groups[g] for g in env.agent_group_ids]

    def score(assign: dict[str, str]) -> float:
        pol = group_rule_policy(assign)
        return float(np.mean([play(env, pol, seed=s)["mean_tardiness_h"] for s in seeds]))

    assign = {n: start for n in names}
    best = score(assign)
    for _ in range(sweeps):
        changed = False
        for n in names:
            for r in RULES:
                if r == assign[n]:
                    continue
                trial = dict(assign, **{n: r})
                sc = score(trial)
                if sc < best:
                    best, assign, changed = sc, trial, True
                    if log is not None:
                        log(f"{n} -> {r}: {best:.3f} h")
        if not changed:
            break
    return assign, best


def _command_parts(command: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    nr, nc = len(RELEASE_LEVELS), len(CRITERIA)
    if command.shape[1] == nr + nc:
        return np.argmax(command[:, :nr], 1), command[:, nr:]
    if command.shape[1] == nc:
        return None, command
    raise ValueError(f"fab_follow_command: a command of {command.shape[1]} values; it must be the one-hots of "
                     f"MultiDiscrete([{nr}, {nc}]) (release level, criterion) or Discrete({nc}) (criterion)")


@register_reward("fab_follow_command", vectorized=True)
def follow_command(command: np.ndarray, info, action=None, **_) -> float | np.ndarray:
    """Dispatching layer: how well a decision followed the shift layer's command.

    The command is ``[release level (3) | criterion (5)]`` one-hot (criterion: fifo, spt, edd, cr,
    balanced = all four equally). ``CRITERION_WEIGHT * (1 - rank of the chosen lot under the
    criterion)`` (rank 0 = the criterion's first choice, 1 = its last, among the legal lots; read
    from ``info["chosen_ranks"]``) ``+ RELEASE_WEIGHT`` if the decision's release level (its
    action's second entry) is the commanded one.

    One decision (``command [C]``, ``info`` its dict) -> float, or B (``[B, C]``, B dicts) -> ``[B]``."""
    command = np.asarray(command, np.float32)
    if command.ndim == 1:
        act = None if action is None else np.asarray(action)[None]
        return float(follow_command(command[None], [info], action=act)[0])
    release, crit = _command_parts(command)
    w = np.where(crit[:, -1:] > 0.5, np.full((len(crit), len(RULES)), 1.0 / len(RULES)), crit[:, :len(RULES)])
    ranks = np.stack([np.asarray(i.get("chosen_ranks", np.zeros(len(RULES))), np.float64) for i in info]) \
        if len(info) else np.zeros((0, len(RULES)))
    out = CRITERION_WEIGHT * (1.0 - (w * ranks).sum(1))
    if release is not None and action is not None:
        a = np.asarray(action).reshape(len(command), -1)
        if a.shape[1] >= 2:
            out = out + RELEASE_WEIGHT * (a[:, 1].astype(np.int64) == release)
    return out.astype(np.float32)


def log_history(history: np.ndarray, logdir: str | Path, tag: str = "fab", step_unit: str = "hour") -> Path:
    """Write a run's WIP, queued lots, late WIP, tools down, completed lots and mean tardiness over simulated time
    (``env.history()`` or ``FabSim.stats.history``) as TensorBoard scalars under ``<tag>/...``;
    the x axis is simulated hours (``step_unit="hour"``) or minutes."""
    from torch.utils.tensorboard import SummaryWriter

    h = np.asarray(history, np.float64).reshape(-1, 7)
    writer = SummaryWriter(str(logdir))
    div = 60.0 if step_unit == "hour" else 1.0
    for row in h:
        step = int(round(row[0] / div))
        for j, name in enumerate(("wip", "queued", "late_wip", "tools_down", "completed", "mean_tardiness_h"), start=1):
            writer.add_scalar(f"{tag}/{name}", float(row[j]), step)
    writer.close()
    return Path(logdir)
