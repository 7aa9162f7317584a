"""The SMT2020 fab: the shipped data, the event simulator's invariants, the env's API and masks,
the rules, the command-following reward, and the errors. Everything here is fast (short
horizons of the scaled-down fab)."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from hdppo.envs.builtin import fab
from hdppo.envs.builtin.fab import sim as fsim
from hdppo.envs.errors import EnvError

DATA = Path(fab.__file__).parent / "data"


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


@pytest.mark.parametrize("name", ["HVLM", "LVHM"])
def test_data_counts_match_the_files(name):
    d = fab.load_fab(name)
    folder = DATA / f"SMT2020_{name}"
    tools = _rows(folder / "tool.txt.1l")
    assert len(d.groups) == len(tools) == 106
    assert int(d.tools.sum()) == int(sum(float(r["STNQTY"]) for r in tools))
    parts = _rows(folder / "part.txt")
    assert len(d.routes) == len(parts) == (2 if name == "HVLM" else 10)
    for r, p in zip(d.routes, parts):
        assert len(r) == len(_rows(folder / p["ROUTEFILE"]))
    assert len(d.wip) == len(_rows(folder / "WIP.txt"))
    assert len(d.orders) == len(_rows(folder / "order.txt"))
    assert d.batching.sum() == 10 and len(d.breakdowns) == 11
    assert (DATA / "README.md").read_text().count("Kopp") >= 1   # the citation ships with the data


def test_hvlm_routes_are_reentrant_with_batching_and_setups():
    d = fab.load_fab("HVLM")
    r3 = d.routes[0]
    assert len(r3) == 583 and len(d.routes[1]) == 343
    visits = np.bincount(r3.group)
    assert visits.max() > 20                                   # re-entrant: a group visited many times
    assert (r3.per == 2).sum() == 17 and (r3.batch_max > 0).sum() == 17
    assert sum(1 for s in r3.setup if s) == 58
    assert d.setups[("DE_BE_13_1", "DE_BE_13_2")] == 7.0 and d.setups[("", "SU128_1")] == 72.0


def _sim(days=1.5, seed=0, check=True, **kw):
    model = fab.build_model("hvlm_mini", days=days)
    return model, fsim.FabSim(model, seed=seed, check=check, **kw)


def test_simulator_invariants_conservation_tools_batches():
    model, s = _sim(days=2.0)
    s.run("fifo")
    st = s.stats
    # Lot conservation: every lot ever in the fab is queued, in process/transport, or done.
    states = np.asarray(s.state)
    assert len(states) == len(model.wip) + st.released
    assert (states == fsim.DONE).sum() == st.completed > 0
    assert s.n_wip == int((states != fsim.DONE).sum())
    assert sum(len(q) for q in s.queues) == s.n_queued == int((states == fsim.QUEUED).sum())
    # No tool holds two jobs at once; batch sizes within [min, max] (or a partial batch after batch_wait).
    by_tool: dict[int, list] = {}
    batches = 0
    for tool, t0, t1, pieces, lots, g in s.jobs:
        by_tool.setdefault(tool, []).append((t0, t1))
        if len(lots) > 1:
            batches += 1
            assert model.batching_l[g] and len({s.part[x] for x in lots}) == 1   # one family per batch
        assert s.tool_group[tool] == g and t1 > t0
    for spans in by_tool.values():
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 >= a1 - 1e-9
    assert batches > 0
    # The end-of-horizon figures: the lots still in the fab, and those of them past due.
    left = np.flatnonzero(states != fsim.DONE)
    summary = s.summary()
    assert summary["wip_end"] == len(left) > 0
    assert summary["late_wip_end"] == int((s.due[left] < s.now).sum()) > 0


def test_one_stream_results_stay_as_recorded():
    """crn=False keeps the single random stream in event order that every recorded fab result
    used: a seed's figures must not move (the draws' order is part of the results)."""
    r = fab.run_rule("hvlm_mini", "cr", seed=123, days=3.0)
    assert r["late_lot_hours"] == pytest.approx(80.14764626404572, rel=1e-9) and r["completed"] == 21


def test_setup_avoidance_ranks_lots_without_a_setup_first_after_hot_lots():
    """setup_avoidance (SMT2020's rank_RSETUP): at a group with setups, a lot whose setup an idle
    tool already has goes before one the rule ranks first that needs a setup; a hot lot still goes
    first; off (the default), the rule's order as before."""
    model = fab.build_model(fab.get_scenario("hvlm", days=1.0))
    g = model.data.groups.index("Implant_128")
    steps = {}  # setup id -> (part, step) of a step at Implant_128 that needs it
    for part, R in enumerate(model.L):
        for step, (grp, need) in enumerate(zip(R["group"], R["setup"])):
            if grp == g and need >= 0:
                steps.setdefault(need, (part, step))
    (have, (pa, sa)), (other, (pb, sb)) = list(steps.items())[:2]
    for avoid in (False, True):
        sim = fsim.FabSim(model, seed=0, setup_avoidance=avoid)
        for tool in sim.idle_tools[g]:
            sim.tool_setup[tool] = have
        a = sim._new_lot(pa, 10, 25, 5000.0, 0.0, sa)     # its setup is on the idle tools; due later
        b = sim._new_lot(pb, 10, 25, 100.0, 0.0, sb)      # needs a setup; edd ranks it first
        lots = np.array([b, a])
        assert sim.needs_setup(g, lots).tolist() == [True, False]
        first = sim.order(lots, sim.key(lots, "edd"), g)[0]
        assert first == (a if avoid else b)
        hot = sim._new_lot(pb, 20, 25, 9000.0, 0.0, sb)   # a hot lot needing a setup
        three = np.array([b, a, hot])
        assert sim.order(three, sim.key(three, "edd"), g)[0] == hot


def test_setup_avoidance_keeps_the_full_fabs_implant_queue_bounded():
    """Without it cr pays Implant_128's 72-minute setups lot after lot and its queue grows by
    hundreds a week (the full HVLM could not keep up with its releases); with it the queue stays short."""
    model = fab.build_model(fab.get_scenario("hvlm", days=5.0))
    g = model.data.groups.index("Implant_128")
    queues = {}
    for avoid in (False, True):
        sim = fsim.FabSim(model, seed=1, default_rule="cr", crn=True, setup_avoidance=avoid)
        sim.run("cr")
        queues[avoid] = len(sim.queues[g])
    assert queues[False] > 400 and queues[True] < queues[False] / 4, queues


def _drawn(rule: str, crn: bool, days: float = 3.0):
    """Every processing time and tool down-time a run drew, keyed by what it was for."""
    model, s = _sim(days=days, seed=11, check=False, crn=crn)
    times, downs = {}, {}
    lot_time, go_down = s._lot_time, s._go_down

    def spy_time(lot, R, st):
        out = lot_time(lot, R, st)
        times[(lot, st, s.visits[lot])] = out[0]
        return out

    def spy_down(tool, dur):
        downs.setdefault(tool, []).append(round(dur, 9))
        go_down(tool, dur)
    s._lot_time, s._go_down = spy_time, spy_down
    s.run(rule)
    return times, downs


def test_common_random_numbers_give_two_dispatchers_the_same_dice():
    """With crn, cr and edd on one seed draw the same processing time for a lot at a step and the
    same repair and PM durations per tool (in each tool's order); with the one stream most differ."""
    for crn in (True, False):
        (t1, d1), (t2, d2) = _drawn("cr", crn), _drawn("edd", crn)
        shared = set(t1) & set(t2)
        same = sum(t1[k] == t2[k] for k in shared) / len(shared)
        tools = [tl for tl in set(d1) & set(d2)]
        first_same = sum(d1[tl][0] == d2[tl][0] for tl in tools) / len(tools)
        assert len(shared) > 100 and len(tools) > 5
        if crn:
            assert same == 1.0 and first_same == 1.0
        else:
            assert same < 0.5 and first_same < 0.5


def test_reference_rule_reward_is_relative_to_the_same_seed():
    """reference_rule: the reward is the agent's minus the reference rule's on the same seed and
    clock, so playing the reference rule itself earns 0 at every step and the episode's late
    lot-hours equal the reference run's; another rule earns the difference."""
    for rule in ("cr", "edd"):
        env = fab.FabEnv(days=1.5, crn=True, reference_rule="cr")
        env.reset(seed=5)
        rewards, done = [], False
        while not done:
            _, r, term, trunc, info = env.step(env.rule_action(rule))
            rewards.append(r)
            done = term or trunc
        ours, ref = info["episode"]["late_lot_hours"], env.reference.summary()["late_lot_hours"]
        if rule == "cr":
            assert max(abs(r) for r in rewards) < 1e-12 and ours == pytest.approx(ref)
        else:
            assert ours != pytest.approx(ref)
        assert sum(rewards) == pytest.approx(-env.reward_scale * (ours - ref), rel=1e-6)
    with pytest.raises(EnvError, match="reference_rule='cr'.*crn=True"):
        fab.FabEnv(reference_rule="cr")


def test_batches_respect_min_and_max():
    model, s = _sim(days=2.0, batch_wait=1e9)   # no partial batches
    orig = s.dispatch
    sizes = []

    def spy(g, lot, rule=None):
        R = model.L[s.part[lot]]
        st = s.step[lot]
        n0 = len(s.jobs)
        orig(g, lot, rule)
        if model.batching_l[g] and R["bmax"][st] > 0:
            sizes.append((s.jobs[n0][3], R["bmin"][st], R["bmax"][st]))
    s.dispatch = spy
    s.run("edd")
    assert sizes and all(lo <= n <= hi for n, lo, hi in sizes)


def test_breakdowns_make_tools_unavailable():
    model, s = _sim(days=3.0, check=True)
    downs = []
    orig = s._go_down

    def spy(tool, dur):
        downs.append((tool, s.now, s.now + dur))
        orig(tool, dur)
    s._go_down = spy
    s.run("fifo")
    assert downs, "no breakdown or PM in 3 days"
    for tool, t0, t1, *_ in s.jobs:
        for dt, d0, d1 in downs:
            if dt == tool:
                assert not (d0 + 1e-9 < t0 < d1 - 1e-9), "a job started on a tool while it was down"
    _, calm = _sim(days=3.0, breakdowns=False)
    calm.run("fifo")
    assert calm.stats.events > 0 and calm.n_down == 0 and not any(calm.tool_pending)


def test_rules_run_and_differ():
    out = {r: fab.run_rule("hvlm_mini", r, seed=1, days=2.0) for r in fab.RULES}
    assert all(o["completed"] > 0 for o in out.values())
    assert len({round(o["mean_tardiness_h"], 6) for o in out.values()}) >= 3
    def figures(d):   # NaN (no cycle time on a short horizon) compares unequal to itself
        return {k: v for k, v in d.items() if v == v}

    same = fab.run_rule("hvlm_mini", "edd", seed=1, days=2.0)
    assert figures(same) == figures(out["edd"])             # seeded: reproducible
    other = fab.run_rule("hvlm_mini", "edd", seed=2, days=2.0)
    assert figures(other) != figures(out["edd"])            # the seed draws breakdowns and noise


def test_env_passes_the_gymnasium_checker_and_masks():
    from gymnasium.utils.env_checker import check_env

    env = fab.FabEnv(days=1.0)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    steps = 0
    done = False
    while not done and steps < 300:
        mask = obs["action_mask"]
        assert mask.sum() >= 2 or env.decision is None          # a decision has >= 2 legal lots
        assert mask[:len(env.slots)].all() and not mask[len(env.slots):].any()
        # Every rule's first choice is among the slots.
        lots = env.decision.lots
        for r in fab.RULES:
            assert env.sim.rule_choice(lots, r) in set(env.slots.tolist())
            assert env.slots[env.rule_action(r)] == env.sim.rule_choice(lots, r)
        obs, rew, term, trunc, info = env.step(int(np.flatnonzero(mask)[-1]))
        assert rew <= 0.0
        done = term or trunc
        steps += 1
    assert steps > 10


def test_env_episode_reports_metrics_and_history(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    env = fab.FabEnv(days=0.5, release_control=True)
    assert env.action_space.nvec.tolist() == [8, 3]
    ep = fab.play(env, lambda o, e: e.rule_action("cr"), seed=0)
    assert ep["sim_days"] == pytest.approx(0.5) and ep["agent_decisions"] > 0
    h = env.history()
    assert h.shape[1] == 7 and len(h) >= 11 and (np.diff(h[:, 0]) > 0).all()
    path = fab.log_history(h, tmp_path / "tb")
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    names = ("wip", "queued", "late_wip", "tools_down", "completed", "mean_tardiness_h")   # history columns 1..6
    assert sorted(acc.Tags()["scalars"]) == sorted(f"fab/{n}" for n in names)
    for j, name in enumerate(names, start=1):
        points = acc.Scalars(f"fab/{name}")
        assert len(points) == len(h), name
        assert [p.step for p in points] == [int(round(t / 60.0)) for t in h[:, 0]], name     # simulated hours
        assert [p.value for p in points] == pytest.approx(h[:, j].astype(np.float32).tolist()), name


def test_rule_actions_play_as_the_rules_do():
    """action='rule': a decision picks the rule, and the rule picks the lot. Always choosing a
    rule's index runs the same episode as that rule's slots in the slot env (same seed); a mixed
    sequence runs a different one; every rule is always legal."""
    from gymnasium.utils.env_checker import check_env

    env = fab.FabEnv(days=1.0, action="rule")
    check_env(env, skip_render_check=True)
    assert env.action_space.n == len(fab.RULES)
    for rule in ("edd", "cr"):
        by_index = fab.play(fab.FabEnv(days=1.0, action="rule"), lambda o, e: fab.RULES.index(rule), seed=3)
        by_slot = fab.play(fab.FabEnv(days=1.0), rule, seed=3)
        assert by_index["mean_tardiness_h"] == by_slot["mean_tardiness_h"]
        assert by_index["completed"] == by_slot["completed"]
    obs, _ = env.reset(seed=3)
    assert obs["action_mask"].tolist() == [1] * len(fab.RULES)
    turn = iter(range(10 ** 6))
    mixed = fab.play(env, lambda o, e: next(turn) % len(fab.RULES), seed=3)
    assert mixed["mean_tardiness_h"] != by_index["mean_tardiness_h"]
    assert fab.FabEnv(days=1.0, action="rule", release_control=True).action_space.nvec.tolist() == [4, 3]


def test_rule_teacher_labels_through_the_engine_copies():
    """rule_teacher reaches the FabEnv inside the copies hdppo steps (its Dict observation with an
    action mask goes through the multi-agent adapter): its labels are the rule's actions."""
    from hdppo.envs.vector import make_vector_env
    from hdppo.platform.config import load_config

    e = load_config(Path(__file__).parents[1] / "configs" / "fab_rules.yaml", ["env.kwargs.days=0.5"]).env
    venv = make_vector_env(e.type, e.id, e.entry_point, e.kwargs, e.max_episode_steps, 2, seed=0)
    venv.reset(seed=0)
    for i in range(2):
        env = venv.copy_env(i)
        assert fab.rule_teacher(venv.raw_obs(i), ["agent_0"], env) == fab.RULES.index("cr")
        assert fab.rule_teacher(venv.raw_obs(i), ["agent_0"], env, rule="edd") == fab.RULES.index("edd")
    venv.close()


def test_follow_command_reward():
    from hdppo.envs.rewards import resolve_reward

    fn = resolve_reward("fab_follow_command")
    cmd = np.zeros((2, 8), np.float32)
    cmd[:, 1] = 1.0            # release level 1
    cmd[0, 3 + 2] = 1.0        # criterion edd
    cmd[1, 3 + 4] = 1.0        # balanced
    infos = [{"chosen_ranks": np.array([1.0, 1.0, 0.0, 1.0])}, {"chosen_ranks": np.array([0.0, 0.0, 1.0, 1.0])}]
    r = fn(command=cmd, info=infos, action=np.array([[0, 1], [0, 2]]), obs=None, next_obs=None)
    assert r[0] == pytest.approx(1.0 + 0.5) and r[1] == pytest.approx(0.5)


def test_follow_command_reads_the_deciding_groups_criterion():
    """With a criterion per agent tool group ([3 | 5 x G]), the reward counts the deciding group's
    block (info group_slot), not another group's; widths that fit no layout name the valid ones."""
    cmd = np.zeros((2, 3 + 5 * 3), np.float32)
    cmd[:, 1] = 1.0
    for row in range(2):
        cmd[row, 3 + 0 * 5 + 2] = 1.0   # group 0: edd
        cmd[row, 3 + 1 * 5 + 0] = 1.0   # group 1: fifo
        cmd[row, 3 + 2 * 5 + 3] = 1.0   # group 2: cr
    ranks = np.array([1.0, 1.0, 0.0, 1.0])  # the chosen lot is edd's first choice and every other rule's last
    infos = [{"chosen_ranks": ranks, "group_slot": 0}, {"chosen_ranks": ranks, "group_slot": 1}]
    r = fab.follow_command(cmd, infos, action=np.array([[0, 1], [0, 0]]))
    assert r[0] == pytest.approx(1.0 + 0.5) and r[1] == pytest.approx(0.0)
    no_release = cmd[:, 3:]
    assert fab.follow_command(no_release, infos).tolist() == pytest.approx([1.0, 0.0])
    with pytest.raises(ValueError, match="7 values.*MultiDiscrete"):
        fab.follow_command(np.zeros((1, 7), np.float32), infos[:1])
    with pytest.raises(ValueError, match="3 tool groups.*one criterion per agent group"):
        fab.follow_command(no_release[:1], [{"chosen_ranks": ranks, "group_slot": 5}])


def _shift_venv(days=0.5, **kw):
    from hdppo.envs.vector import make_vector_env

    venv = make_vector_env("gymnasium", None, "hdppo.envs.builtin.fab:make_env", dict(days=days, **kw), None, 2, seed=0)
    venv.reset(seed=0)
    return venv


def test_command_teacher_carries_out_each_groups_criterion():
    """command_teacher: at each copy's decision, the slot that the deciding group's commanded rule
    ranks first (so the chosen lot is that rule's choice) and the commanded release level; with
    'balanced' the lowest mean rank; with action='rule' the rule itself."""
    venv = _shift_venv(release_control=True)
    fabs = [venv.copy_env(i).unwrapped for i in range(2)]
    G = len(fabs[0].agent_group_ids)
    for rule in fab.RULES:
        cmd = np.zeros((2, 3 + 5 * G), np.float32)
        cmd[:, 2] = 1.0                                              # release x1.2
        cmd[:, 3 + np.arange(G) * 5 + fab.RULES.index(rule)] = 1.0   # every group: rule
        a = fab.command_teacher(venv, np.arange(2), [[0], [0]], cmd)
        for i, f in enumerate(fabs):
            assert a[i, 1] == 2
            assert a[i, 0] == f.rule_action(rule)[0]
            assert f.slot_ranks[int(a[i, 0]), fab.RULES.index(rule)] == 0.0
    cmd = np.zeros((2, 3 + 5 * G), np.float32)
    cmd[:, 0] = 1.0
    cmd[:, 3 + np.arange(G) * 5 + 4] = 1.0                           # balanced
    a = fab.command_teacher(venv, np.arange(2), [[0], [0]], cmd)
    for i, f in enumerate(fabs):
        mean_rank = f.slot_ranks[:len(f.slots)].mean(1)
        assert mean_rank[int(a[i, 0])] == mean_rank.min() and a[i, 1] == 0
    venv.close()
    rules = _shift_venv(action="rule")
    cmd = np.zeros((2, 5 * G), np.float32)
    cmd[:, np.arange(G) * 5 + fab.RULES.index("spt")] = 1.0
    assert fab.command_teacher(rules, np.arange(2), [[0], [0]], cmd)[:, 0].tolist() == [fab.RULES.index("spt")] * 2
    rules.close()
    with pytest.raises(ValueError, match="has no command"):
        fab.command_teacher(rules, np.arange(2), [[0], [0]], None)


def test_shift_observation_and_teacher():
    env = fab.FabEnv(days=1.0, release_control=True)
    env.reset(seed=2)
    G = len(env.agent_group_ids)
    obs = fab.shift_observation(None, ["agent_0"], env)
    assert obs.shape == (G * len(fab.GROUP_FEATURES) + len(fab.FAB_FEATURES) + 3,)
    per = obs[:G * 4].reshape(G, 4)
    queues = [len(env.sim.queues[g]) for g in env.agent_group_ids]
    assert per[:, 0] == pytest.approx(np.minimum(np.array(queues) / 50.0, 5.0))
    assert obs[-3:].tolist() == [0.0, 1.0, 0.0] and max(queues) > 0
    names = [env.model.data.groups[g] for g in env.agent_group_ids]
    t = fab.shift_teacher(None, None, env, rule="cr", groups={names[1]: "edd"})
    assert t.tolist() == [1, 3, 2] + [3] * (G - 2)
    assert fab.shift_teacher(None, None, fab.FabEnv(days=1.0), rule="spt", per_group=False).tolist() == [1]
    with pytest.raises(EnvError, match="criterion 'lifo'"):
        fab.shift_teacher(None, None, env, rule="lifo")


def test_bad_arguments_name_the_fix(tmp_path):
    with pytest.raises(EnvError, match="scenario 'hvlm_tiny' is unknown.*hvlm_mini"):
        fab.FabEnv(scenario="hvlm_tiny")
    with pytest.raises(EnvError, match="fab 'XYZ' is not an SMT2020 dataset.*HVLM"):
        fab.load_fab("XYZ")
    with pytest.raises(EnvError, match="data_dir"):
        fab.load_fab("HVLM", data_dir=tmp_path)
    (tmp_path / "SMT2020_HVLM").mkdir()
    with pytest.raises(EnvError, match="tool.txt.1l' is missing.*data_dir"):
        fab.load_fab("HVLM", data_dir=tmp_path)
    with pytest.raises(EnvError, match="objective"):
        fab.FabEnv(objective="profit")
    with pytest.raises(EnvError, match="action='lot'.*'slot'.*'rule'"):
        fab.FabEnv(action="lot")
    with pytest.raises(EnvError, match="default_rule"):
        fab.FabEnv(default_rule="lifo")
    with pytest.raises(EnvError, match="agent_groups"):
        fab.FabEnv(agent_groups=["NoSuchGroup"])
    with pytest.raises(EnvError, match="days"):
        fab.FabEnv(days=0)
    # Each names the argument and the fix where it was a bare TypeError, a one-step episode or nothing.
    with pytest.raises(EnvError, match="days='three'.*positive number"):
        fab.FabEnv(days="three")
    with pytest.raises(EnvError, match="an empty list leaves no decision.*'hvlm_mini'"):
        fab.FabEnv(agent_groups=[])
    with pytest.raises(EnvError, match="objective 'tardyness'.*Did you mean 'tardiness'"):
        fab.FabEnv(objective="tardyness")
    with pytest.raises(EnvError, match="numeric weights"):
        fab.FabEnv(objective={"tardiness": "1"})
    with pytest.raises(EnvError, match="batch_wait=-5"):
        fab.FabEnv(batch_wait=-5)
    with pytest.raises(EnvError, match="reward_scale='0.01'"):
        fab.FabEnv(reward_scale="0.01")
    with pytest.raises(EnvError, match="Did you mean 'hvlm_mini'"):
        fab.FabEnv(scenario="HVLM_mini")


def test_a_partial_batch_is_legal_at_its_recheck_time():
    # A float case where now - oldest < batch_wait although oldest + batch_wait == now: the
    # re-check then found the batch illegal and re-scheduled itself at the same instant forever.
    model, s = _sim(days=0.1, check=False)
    g = next(g for g in range(model.G) if model.batching_l[g] and s.queues[g])
    lot = s.queues[g][0]
    oldest = 3918.992945173863
    assert (oldest + 240.0) - oldest < 240.0
    assert model.L[s.part[lot]]["bmin"][s.step[lot]] > s.pieces[lot]   # alone, short of the minimum batch
    s.queues[g] = [lot]
    s.arrive[lot] = oldest
    s.now = oldest + 240.0
    assert lot in s.legal(g).tolist()


def test_group_rule_search_keeps_only_improvements():
    """The per-group baseline: the search's result is never worse than its start on its seeds,
    and playing the assignment reproduces the figure it reports."""
    assign, best = fab.search_group_rules("hvlm_mini", seeds=(7,), days=1.0, sweeps=1)
    env = fab.FabEnv(days=1.0, action="rule")
    start = fab.play(env, fab.group_rule_policy({}), seed=7)["mean_tardiness_h"]   # cr everywhere
    assert start == fab.play(fab.FabEnv(days=1.0), "cr", seed=7)["mean_tardiness_h"]
    assert best <= start
    assert fab.play(env, fab.group_rule_policy(assign), seed=7)["mean_tardiness_h"] == pytest.approx(best)
    assert set(assign.values()) <= set(fab.RULES) and len(assign) == len(env.agent_group_ids)


def test_shift_rules_preset_trains_the_shift_layer_over_the_scripted_dispatcher(tmp_path):
    """configs/fab_shift_rules.yaml, shrunk: the shift layer updates (kickstarted from cr), the
    dispatch layer is scripted by command_teacher (no updates of its own), and the run's last
    checkpoint plays a whole evaluation episode to its figures."""
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config, validate
    from hdppo.platform.evaluation import evaluate_episodes
    from hdppo.platform.trainer import Trainer

    cfg = load_config(Path(__file__).parents[1] / "configs" / "fab_shift_rules.yaml",
                      ["ray.backend=local", "train.total_env_steps=1500", "train.checkpoint_every=1",
                       "train.eval_episodes=0", "env.kwargs.days=1.0", "layers.0.period=12",
                       "layers.0.dppo.train_batch_size=16", "layers.0.ppo.minibatch_size=8"])
    assert cfg.scripted_layers() == ["dispatch"] and cfg.layer("shift").teacher.policy.endswith("shift_teacher")
    data = cfg.model_dump(mode="json")
    for part in (*data["groups"], *data["layers"]):
        part["dppo"].update(num_workers=1, num_envs_per_worker=2)
    summary = Trainer(validate(data), tmp_path / "run", quiet=True).train()
    assert summary["updates"] >= 2
    logged = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert '"layer": "shift", "tag": "losses/teacher_nll"' in logged
    assert '"layer": "dispatch", "tag": "losses/' not in logged
    states = learner_states(load_checkpoint(latest_checkpoint(tmp_path / "run")))
    (ep,) = evaluate_episodes(validate(data), states, 1, seed=10000, num_envs=1)
    info = next(iter(ep.infos.values()))
    assert info["episode"]["completed"] > 0 and info["mean_tardiness_h"] >= 0.0


def test_each_rule_dispatches_the_lot_its_key_names_hot_lots_first():
    """Five lots with keys set by hand (minutes; now = 1000): FIFO takes the first to arrive, SPT
    the shortest step, EDD the earliest due date, CR the least (due - now) / remaining work; with
    ``hot_first`` a hot lot goes before all of them and a super hot one before that; ties go to
    the earlier arrival."""
    env = fab.FabEnv(days=1.0)
    env.reset(seed=0)
    sim = env.sim
    lots = np.arange(5)
    #                  a       b       c       d       e (worst by every key)
    sim.arrive[lots] = [100.0, 200.0, 300.0, 400.0, 500.0]
    sim.spt[lots] = [50.0, 10.0, 30.0, 20.0, 60.0]
    sim.due[lots] = [5000.0, 4000.0, 3000.0, 2000.0, 6000.0]
    sim.rem[lots] = [1000.0, 100.0, 2000.0, 200.0, 100.0]   # CR 4, 30, 1, 5, 50
    sim.prio[lots] = 0
    sim.now = 1000.0
    expect = {"fifo": 0, "spt": 1, "edd": 3, "cr": 2}
    assert {r: sim.rule_choice(lots, r) for r in fab.RULES} == expect
    sim.prio[4] = 1                                          # e is hot
    assert {r: sim.rule_choice(lots, r) for r in fab.RULES} == dict.fromkeys(expect, 4)
    sim.prio[0] = 2                                          # a super hot: before the hot e
    assert {r: sim.rule_choice(lots, r) for r in fab.RULES} == dict.fromkeys(expect, 0)
    sim.hot_first = False                                    # priorities ignored
    assert {r: sim.rule_choice(lots, r) for r in fab.RULES} == expect
    sim.spt[3] = 10.0                                        # d ties b on SPT: b arrived first
    assert sim.rule_choice(lots, "spt") == 1
    sim.arrive[3] = 150.0
    assert sim.rule_choice(lots, "spt") == 3
