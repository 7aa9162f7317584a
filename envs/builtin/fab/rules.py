"""Scripted dispatchers, the command-following reward, and the TensorBoard view of a run."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import EnvError
from ...rewards import register_reward
from ...teachers import vectorized_teacher
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


def play(env: FabEnv, policy, seed: int | None = None) -> dict:
    """Run one episode of ``env`` with ``policy(obs, env) -> action`` (a rule name works too): the
    episode's summary (``FabSim.summary()``, its seeds, and ``history``: ``env.history()``)."""
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
                       sweeps: int = 2, start: str = "cr", log=None, crn: bool = False,
                       setup_avoidance: bool = False) -> tuple[dict[str, str], float]:
    """A rule per tool group, by coordinate descent on the mean tardiness over ``seeds``: from
    ``start`` everywhere, try each other rule at each group in turn and keep any that lowers it;
    ``sweeps`` passes over the groups (stops early when a pass changes nothing). A baseline an
    OR practitioner would tune by hand; search it on seeds other than those it is judged on.
    Returns ``(assignment {group name: rule}, its mean tardiness on seeds)``."""
    if start not in RULES:
        raise EnvError(f"fab rule {start!r}: use one of {list(RULES)}.")
    env = FabEnv(scenario=scenario, days=days, action="rule", crn=crn, setup_avoidance=setup_avoidance)
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


def _command_parts(command: np.ndarray, who: str = "fab_follow_command") -> tuple[np.ndarray | None, np.ndarray]:
    """``(release level [B] or None, criteria [B, G, 5])`` of a shift layer's commands ``[B, C]``:
    the one-hots of ``MultiDiscrete([3, 5])`` / ``Discrete(5)`` (one criterion for every tool group:
    G = 1) or of ``MultiDiscrete([3, 5, ..., 5])`` / ``MultiDiscrete([5, ..., 5])`` (a criterion per
    agent tool group, in the env's ``agent_groups`` order). The widths tell them apart: a release
    part makes the width 3 more than a multiple of 5."""
    nr, nc = len(RELEASE_LEVELS), len(CRITERIA)
    width = command.shape[1]
    if width >= nr + nc and (width - nr) % nc == 0:
        return np.argmax(command[:, :nr], 1), command[:, nr:].reshape(len(command), -1, nc)
    if width >= nc and width % nc == 0:
        return None, command.reshape(len(command), -1, nc)
    raise ValueError(f"{who}: a command of {width} values; it must be the one-hots of MultiDiscrete([{nr}, {nc}]) "
                     f"(release level, criterion), Discrete({nc}) (criterion), or either with a criterion per agent "
                     f"tool group (MultiDiscrete([{nr}, {nc}, ..., {nc}]) or MultiDiscrete([{nc}, ..., {nc}]))")


def _group_criteria(crit: np.ndarray, slots: np.ndarray, who: str) -> np.ndarray:
    """``[B, 5]``: each decision's criterion one-hot, the deciding group's own when the command has
    one per group (``slots``: the group's index among the agent groups, -1 when none decides)."""
    if crit.shape[1] == 1:
        return crit[:, 0]
    if len(slots) and int(slots.max()) >= crit.shape[1]:
        raise ValueError(f"{who}: the command has a criterion for {crit.shape[1]} tool groups but the env decides "
                         f"for {int(slots.max()) + 1} or more; give the shift layer one criterion per agent group "
                         "(action nvec [3] + [5] * G, G = the fab env's agent groups)")
    return crit[np.arange(len(crit)), np.clip(slots, 0, None)]


def criterion_weights(crit: np.ndarray) -> np.ndarray:
    """``[B, 4]`` weights over the rules (fifo, spt, edd, cr) of criterion one-hots ``[B, 5]``:
    the rule itself, or 'balanced', all four equally."""
    return np.where(crit[:, -1:] > 0.5, np.full((len(crit), len(RULES)), 1.0 / len(RULES)), crit[:, :len(RULES)])


@register_reward("fab_follow_command", vectorized=True, info_keys=("chosen_ranks", "group_slot"))
def follow_command(command: np.ndarray, info, action=None, **_) -> float | np.ndarray:
    """Dispatching layer: how well a decision followed the shift layer's command.

    The command is ``[release level (3) | criterion (5)]`` one-hot (criterion: fifo, spt, edd, cr,
    balanced = all four equally), or with a criterion per agent tool group ``[3 | 5 x G]`` (the
    deciding group's counts; ``info["group_slot"]``). ``CRITERION_WEIGHT * (1 - rank of the chosen
    lot under the criterion)`` (rank 0 = the criterion's first choice, 1 = its last, among the legal
    lots; read from ``info["chosen_ranks"]``) ``+ RELEASE_WEIGHT`` if the decision's release level
    (its action's second entry) is the commanded one.

    One decision (``command [C]``, ``info`` its dict) -> float, or B (``[B, C]``, B dicts) -> ``[B]``."""
    command = np.asarray(command, np.float32)
    if command.ndim == 1:
        act = None if action is None else np.asarray(action)[None]
        return float(follow_command(command[None], [info], action=act)[0])
    release, crit = _command_parts(command)
    slots = np.fromiter((int(i.get("group_slot", -1)) for i in info), np.int64, len(info))
    w = criterion_weights(_group_criteria(crit, slots, "fab_follow_command"))
    ranks = np.stack([np.asarray(i.get("chosen_ranks", np.zeros(len(RULES))), np.float64) for i in info]) \
        if len(info) else np.zeros((0, len(RULES)))
    out = CRITERION_WEIGHT * (1.0 - (w * ranks).sum(1))
    if release is not None and action is not None:
        a = np.asarray(action).reshape(len(command), -1)
        if a.shape[1] >= 2:
            out = out + RELEASE_WEIGHT * (a[:, 1].astype(np.int64) == release)
    return out.astype(np.float32)


@vectorized_teacher
def command_teacher(env, copies: np.ndarray, members: list, command: np.ndarray | None, **_) -> np.ndarray:
    """``teacher.policy`` of a dispatching layer under a shift layer (kickstarting, or
    ``schedule: {mode: scripted}``): each copy's action that carries out its command. The lot is the
    commanded criterion's first choice for the deciding tool group (for 'balanced', the lowest mean
    rank under the four rules); the release level, where the env controls it, the commanded one
    (else the current). ``env``: hdppo's vector of :class:`FabEnv` copies."""
    if command is None:
        raise ValueError("fab command_teacher: the layer has no command; it must sit under a shift layer whose "
                         f"action is MultiDiscrete([{len(RELEASE_LEVELS)}, {len(CRITERIA)}]) or one criterion per "
                         "agent tool group")
    release, crit = _command_parts(np.asarray(command, np.float32), "fab command_teacher")
    fabs = [getattr(env.copy_env(int(n)), "unwrapped", env.copy_env(int(n))) for n in copies]
    slots = np.array([int(f._slot_of_group[f.decision.group]) if f.decision is not None else -1 for f in fabs],
                     np.int64)
    w = criterion_weights(_group_criteria(crit, slots, "fab command_teacher"))
    width = 2 if fabs and fabs[0].release_control else 1
    out = np.zeros((len(fabs), width), np.float32)
    for i, f in enumerate(fabs):
        if f.decision is not None and len(f.slots):
            if f.action == "rule":  # the commanded rule itself ('balanced' has none: cr, the best single rule)
                out[i, 0] = int(np.argmax(w[i])) if w[i].max() > 0.5 else RULES.index("cr")
            else:                   # the candidate the criterion ranks first
                out[i, 0] = int(np.argmin(f.slot_ranks[:len(f.slots)] @ w[i]))
        if width == 2:
            out[i, 1] = f.release_level if release is None else int(release[i])
    return out


def shift_teacher(raw_obs, members, env, rule: str = "cr", release: int = 1, per_group: bool = True,
                  groups: dict[str, str] | None = None) -> np.ndarray:
    """``teacher.policy`` of a shift layer (kickstarting): a fixed command, ``rule`` for every tool
    group (or, where ``groups`` names a group, that group's rule) at release level ``release``
    (0, 1, 2: x0.8, x1.0, x1.2; left out of the command when the env has no ``release_control``).
    ``per_group``: one criterion per agent group (``nvec [3] + [5] * G``), else one for all
    (``[3, 5]``). Starts the shift layer at the best single rule rather than at random criteria."""
    fab_env: FabEnv = getattr(env, "unwrapped", env)
    names = [fab_env.model.data.groups[g] for g in fab_env.agent_group_ids]
    for r in [rule, *(groups or {}).values()]:
        if r not in CRITERIA:
            raise EnvError(f"fab shift_teacher: criterion {r!r}; use one of {list(CRITERIA)}.")
    crit = [CRITERIA.index((groups or {}).get(n, rule)) for n in names] if per_group else [CRITERIA.index(rule)]
    return np.array(([int(release)] if fab_env.release_control else []) + crit, np.int64)


def shift_observation(env_obs, members, env) -> np.ndarray:
    """``observation.source`` of a shift layer: the whole fab (:meth:`FabEnv.shift_observation`)."""
    return getattr(env, "unwrapped", env).shift_observation()


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
