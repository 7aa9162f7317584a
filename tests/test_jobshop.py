"""The job-shop env (hdppo.envs.builtin.jobshop): instances, schedules, rules, CP-SAT, masks, the
Gymnasium checker, errors, Gantt charts and the presets."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from hdppo.envs.builtin.jobshop import (RULES, SCHEMES, Dispatcher, JobShopEnv, check_schedule, gantt_image,
                                        instance_names, load_instance, log_gantt, make_env, makespan, obs_dim,
                                        random_instance, run_rule, solve)
from hdppo.envs.errors import EnvError

ROOT = Path(__file__).resolve().parents[1]


def test_classic_instances_load_with_their_bounds():
    ft06 = load_instance("ft06")
    assert ft06.durations.shape == (6, 6) and ft06.machines.shape == (6, 6)
    assert ft06.optimum == 55 and ft06.best_known == 55
    assert load_instance("ft10").optimum == 930
    assert load_instance("la01").size == "10x5" and load_instance("ta01").size == "15x15"
    # Every job visits every machine once.
    for name in ("ft06", "la16", "ta01"):
        inst = load_instance(name)
        assert all(sorted(row) == list(range(inst.n_machines)) for row in inst.machines.tolist())
    assert len(instance_names("ta")) == 80 and len(instance_names("la")) == 40
    assert instance_names(size="15x15")[:1] == ["la36"] and "ta10" in instance_names(size="15x15")
    assert load_instance("ta41").optimum is None and load_instance("ta41").best_known == 2005


@pytest.mark.parametrize("scheme", ["active", "nondelay"])
def test_a_zero_duration_operation_is_scheduled_by_every_rule(scheme):
    """orb07 has one operation of duration 0 (job 9's last): Giffler-Thompson's conflict set must
    still hold the operation that sets C* (a strict 'starts before C*' test left it empty)."""
    inst = load_instance("orb07")
    assert int((inst.durations == 0).sum()) == 1
    for rule in ("MWKR", "SPT", "MOR", "FIFO"):
        ms, starts = run_rule(inst, rule, scheme)
        assert check_schedule(inst, starts) == [] and ms == makespan(inst, starts) >= inst.best_known


def test_unknown_instance_is_a_clear_error_listing_names():
    with pytest.raises(EnvError) as err:
        load_instance("ft6")
    msg = str(err.value)
    assert "'ft6'" in msg and "Did you mean 'ft06'" in msg and "ta01" in msg and "la40" in msg
    with pytest.raises(EnvError, match="no benchmark instance named 'nope'"):
        JobShopEnv(instance="nope")
    with pytest.raises(EnvError, match="not 'NxM'"):
        JobShopEnv(size="15by15")
    with pytest.raises(EnvError, match="does not match instance ft06"):
        JobShopEnv(size="10x10", instance="ft06")
    with pytest.raises(EnvError, match="scheme"):
        JobShopEnv(scheme="greedy")


def test_check_schedule_catches_precedence_and_overlap():
    inst = load_instance("ft06")
    _, starts = run_rule(inst, "MWKR", "nondelay")
    assert check_schedule(inst, starts) == []
    early = starts.copy()
    early[0, 1] = starts[0, 0]          # op 1 starts with op 0 of the same job (duration >= 1)
    assert any(p.startswith("precedence: job 0 op 1") for p in check_schedule(inst, early))
    clash = starts.copy()
    # Shift jobs 0 and 1 so that their operations on machine M start at the same time.
    mach = int(inst.machines[0, 0])
    k1 = int(np.flatnonzero(inst.machines[1] == mach)[0])
    clash[1] += starts[0, 0] - starts[1, k1] + 1000        # the whole job moves: its precedence still holds
    clash[0] += 1000
    assert any(p.startswith(f"machine {mach}:") for p in check_schedule(inst, clash))
    missing = starts.copy()
    missing[2, 3] = -1
    assert any("no start" in p for p in check_schedule(inst, missing))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_rules_build_feasible_schedules_no_better_than_the_optimum(scheme):
    for name in ("ft06", "la01"):
        inst = load_instance(name)
        for rule in RULES:
            ms, starts = run_rule(inst, rule, scheme)
            assert check_schedule(inst, starts) == [], (name, rule)
            assert ms == makespan(inst, starts) >= inst.optimum


def test_random_instances_follow_taillard_law():
    rng = np.random.default_rng(0)
    inst = random_instance(15, 15, rng)
    assert inst.durations.min() >= 1 and inst.durations.max() <= 99
    assert all(sorted(row) == list(range(15)) for row in inst.machines.tolist())
    assert not np.array_equal(inst.durations, random_instance(15, 15, rng).durations)


def test_cpsat_proves_ft06_optimum_quickly():
    res = solve(load_instance("ft06"), time_limit_s=10.0, workers=1)
    assert res.status == "OPTIMAL" and res.makespan == 55 and res.bound == 55
    assert res.wall_s < 10.0
    assert check_schedule(load_instance("ft06"), res.starts) == []


@pytest.mark.parametrize("scheme", SCHEMES)
def test_masks_are_the_scheme_candidates(scheme):
    rng = np.random.default_rng(1)
    d = Dispatcher(load_instance("la01"), scheme)
    while not d.done:
        legal = d.legal()
        assert legal.any() and not (legal & ~d.live).any()
        est = d.est[legal]
        if scheme == "nondelay":
            assert (est == d.est[d.live].min()).all()
        else:
            c_star = d.ect[d.live].min()
            assert (d.op_mach[legal] == d.gt_machine).all() and (est < c_star).all()
        d.schedule(int(rng.choice(np.flatnonzero(legal))))
    assert check_schedule(d.inst, d.starts) == []
    with pytest.raises(ValueError, match="not a legal choice"):
        Dispatcher(load_instance("ft06"), scheme).schedule(99)


@pytest.mark.parametrize("reward", ["lower_bound", "makespan"])
def test_episode_rewards_sum_to_the_makespan(reward):
    env = JobShopEnv(instance="ft06", scheme="nondelay", reward=reward)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=0)
    lb0, total, done = env.lb0, 0.0, False
    assert obs["observation"].shape == (obs_dim(6, 6),) and env.observation_space.contains(obs)
    while not done:
        mask = obs["action_mask"]
        assert mask.dtype == np.int8 and mask.sum() >= 1
        obs, r, done, trunc, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        assert r <= 1e-9 and not trunc
        total += r
    assert check_schedule(env.instance, env.d.starts) == []
    expect = info["makespan"] if reward == "makespan" else info["makespan"] - lb0
    assert total * env.d.pmax == pytest.approx(-expect)
    assert info["gap"] == pytest.approx(100 * (info["makespan"] - 55) / 55)
    assert info["decisions"] <= 36


def test_illegal_action_dispatches_the_lowest_legal_job():
    env = JobShopEnv(instance="ft06", scheme="active", skip_single=False)
    obs, _ = env.reset(seed=0)
    illegal = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    first_legal = int(np.flatnonzero(obs["action_mask"])[0])
    env.step(illegal)
    assert env.d.order == [first_legal]


@pytest.mark.parametrize("kwargs", [{"size": "4x3"}, {"size": "5x4", "scheme": "nondelay", "reward": "makespan"},
                                    {"instance": "ft06"}])
def test_gymnasium_check_env(kwargs):
    check_env(make_env(**kwargs), skip_render_check=True)


def test_random_instances_differ_by_seed_and_repeat_with_it():
    env = JobShopEnv(size="6x6")
    env.reset(seed=3)
    a = env.instance.durations.copy()
    env.reset(seed=3)
    assert np.array_equal(a, env.instance.durations)
    env.reset(seed=4)
    assert not np.array_equal(a, env.instance.durations)


def test_gantt_png_and_tensorboard_image(tmp_path):
    import imageio.v3 as iio
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    inst = load_instance("ft06")
    _, starts = run_rule(inst, "MOR", "nondelay")
    img = gantt_image(inst, starts, dpi=40)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and img.std() > 0
    logged = log_gantt(tmp_path, "jobshop/gantt/ft06", inst, starts, step=7)
    acc = EventAccumulator(str(tmp_path), size_guidance={"images": 0})
    acc.Reload()
    assert acc.Tags()["images"] == ["jobshop/gantt/ft06"]
    [event] = acc.Images("jobshop/gantt/ft06")
    assert event.step == 7 and (event.height, event.width) == logged.shape[:2]
    assert np.array_equal(iio.imread(event.encoded_image_string)[..., :3], logged)   # the chart itself, lossless
    env = JobShopEnv(instance="ft06", render_mode="rgb_array")
    env.reset(seed=0)
    env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert env.render().shape[2] == 3


@pytest.mark.parametrize("size", ["6x6", "10x5", "10x10", "15x15"])
def test_presets_load_and_fit_their_size(size):
    from hdppo.platform.config import load_config

    cfg = load_config(ROOT / "configs" / f"jobshop_{size}.yaml")
    env = JobShopEnv(**cfg.env.kwargs)
    n, m = (int(x) for x in size.split("x"))
    assert env.observation_space["observation"].shape == (obs_dim(n, m),) and env.action_space.n == n
    # The classic instances of that size run in the same env.
    name = {"6x6": "ft06", "10x5": "la01", "10x10": "ft10", "15x15": "ta01"}[size]
    obs, _ = env.reset(seed=0, options={"instance": name})
    assert env.instance.name == name and env.observation_space.contains(obs)


def test_mwkr_job_order_puts_mwkr_choice_in_slot_zero():
    inst = load_instance("la01")
    env = JobShopEnv(instance="la01", scheme="nondelay", job_order="mwkr")
    obs, _ = env.reset(seed=0)
    done = False
    while not done:
        mask = obs["action_mask"]
        # Candidates first: the legal slots are a prefix.
        assert mask[0] == 1 and (np.diff(mask.astype(int)) <= 0).all()
        obs, _, done, _, info = env.step(0)
    assert info["makespan"] == run_rule(inst, "MWKR", "nondelay")[0]
    assert check_schedule(inst, env.d.starts) == []
    check_env(make_env(size="5x4", job_order="mwkr"), skip_render_check=True)
    with pytest.raises(EnvError, match="job_order"):
        JobShopEnv(job_order="spt")


def test_items_observation_is_per_job_rows_of_14_and_runs_every_size():
    from hdppo.envs.builtin.jobshop.env import ITEM_FEATURES

    for size, name in (("6x6", "ft06"), ("15x15", "ta01")):
        n, m = (int(x) for x in size.split("x"))
        env = JobShopEnv(instance=name, scheme="nondelay", job_order="mwkr", observation="items")
        assert env.observation_space["observation"].shape == (obs_dim(n, m, "items"),) == (n * ITEM_FEATURES + 2,)
        obs, _ = env.reset(seed=0)
        rows = obs["observation"][:n * ITEM_FEATURES].reshape(n, ITEM_FEATURES)
        flat = JobShopEnv(instance=name, scheme="nondelay", job_order="mwkr").reset(seed=0)[0]["observation"]
        # The job features are the flat layout's; each live job carries its next machine's row.
        assert np.allclose(rows[:, :10], flat[:n * (10 + m)].reshape(n, 10 + m)[:, :10])
        machines = flat[n * (10 + m):n * (10 + m) + 4 * m].reshape(m, 4)
        mach_of_slot = env.d.op_mach[env._perm]
        assert np.allclose(rows[:, 10:], machines[mach_of_slot])
        done = False
        while not done:
            obs, _, done, _, info = env.step(0)
        assert info["makespan"] == run_rule(load_instance(name), "MWKR", "nondelay")[0]
    check_env(make_env(size="5x4", observation="items"), skip_render_check=True)
    with pytest.raises(EnvError, match="observation"):
        JobShopEnv(observation="graph")


def test_lookahead_features_predict_each_candidates_reward_and_queue():
    """items_lookahead: feature 0 of every legal slot is the rise of the lower bound that dispatching
    it causes (minus its reward before forced dispatches), checked by dispatching each on a copy of
    the schedule; the queue count matches a
    count by hand; finished jobs read zeros; the first 14 columns are the items layout's."""
    import copy

    from hdppo.envs.builtin.jobshop.env import ITEM_FEATURES, LOOKAHEAD_FEATURES

    w = ITEM_FEATURES + LOOKAHEAD_FEATURES
    for scheme in ("nondelay", "active"):
        env = JobShopEnv(instance="ft06", scheme=scheme, job_order="mwkr", observation="items_lookahead")
        plain = JobShopEnv(instance="ft06", scheme=scheme, job_order="mwkr", observation="items")
        assert env.observation_space["observation"].shape == (obs_dim(6, 6, "items_lookahead"),) == (6 * w + 2,)
        obs, _ = env.reset(seed=0)
        plain_obs, _ = plain.reset(seed=0)
        checked, done, rng = 0, False, np.random.default_rng(0)
        while not done:
            rows = obs["observation"][:6 * w].reshape(6, w)
            assert np.allclose(rows[:, :ITEM_FEATURES], plain_obs["observation"][:6 * ITEM_FEATURES].reshape(6, ITEM_FEATURES))
            d = env.d
            for slot in np.flatnonzero(obs["action_mask"]):
                job = env.job_of(int(slot))
                lb0 = d.lower_bound()
                d2 = copy.deepcopy(d)
                d2.schedule(job)
                assert rows[slot, ITEM_FEATURES] == pytest.approx((d2.lower_bound() - lb0) / d.pmax, abs=1e-6)
                queued = sum(1 for o in range(6) if o != job and d.live[o] and d.op_mach[o] == d.op_mach[job])
                assert rows[slot, ITEM_FEATURES + 2] == pytest.approx(queued / 6)
                checked += 1
            for slot in range(6):
                if not d.live[env.job_of(slot)]:
                    assert not rows[slot].any()
            a = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            obs, _, done, _, _ = env.step(a)
            plain_obs, *_ = plain.step(a)
        assert checked > 10
    check_env(make_env(size="5x4", observation="items_lookahead"), skip_render_check=True)


def test_set_features_must_match_the_width_the_env_declares():
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.config import load_config, validate
    from hdppo.platform.errors import ConfigError

    cfg = load_config(ROOT / "configs" / "jobshop_set_lookahead.yaml")
    venv, _, specs = probe_env(cfg, 0)
    venv.close()
    assert specs[0].encoder["features"] == 20 and venv.set_features == 20
    raw = cfg.model_dump()
    raw["layers"][0]["policy"]["set_features"] = 14   # the items layout's width, on items_lookahead rows
    with pytest.raises(ConfigError, match=r"policy.set_features: is 14, but the env's items have 20"):
        probe_env(validate(raw), 0)
    # On the flat observation (122 values on 6x6: more than 6 rows of 14, so no width check caught it)
    # a set policy trained on misaligned rows without a word.
    raw["env"]["kwargs"] = {"size": "6x6", "observation": "flat"}
    with pytest.raises(ConfigError, match=r"policy.encoder: is 'set', but the env declares that its observation is not"):
        probe_env(validate(raw), 0)


def test_set_preset_builds_a_size_free_policy():
    from hdppo.hierarchies.spec import probe_env
    from hdppo.platform.config import load_config

    cfg = load_config(ROOT / "configs" / "jobshop_set.yaml")
    venv, _, specs = probe_env(cfg, 0)
    venv.close()
    assert specs[0].encoder == {"kind": "set", "items": 10, "features": 14, "attention": 0, "heads": 4}
    assert not cfg.layers[0].normalization.observation  # per-value statistics would tie it to 10 jobs


def test_benchmark_random_instances_draw_durations_up_to_random_high(monkeypatch, capsys):
    """--random-high sets the random instances' duration range (ft06's is 1..10): every instance
    drawn stays in it, the rules are judged on those instances, and a range below 1 is refused."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import jobshop as bench
    from hdppo.envs.builtin.jobshop import instances

    drawn = []
    real = instances.random_instance

    def spy(*args, **kwargs):
        inst = real(*args, **kwargs)
        drawn.append(inst)
        return inst

    monkeypatch.setattr(instances, "random_instance", spy)
    monkeypatch.setattr("hdppo.envs.builtin.jobshop.random_instance", spy)
    out = bench.random_size("6x6", [], 5, seed=3, high=10)
    assert out["high"] == 10 and out["instances"] == 5 and len(drawn) == 5
    assert max(int(np.max(i.durations)) for i in drawn) <= 10 and min(int(np.min(i.durations)) for i in drawn) >= 1
    wide = bench.random_size("6x6", [], 5, seed=3)
    assert wide["high"] == 99 and max(int(np.max(i.durations)) for i in drawn[5:]) > 10
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--no-cpsat", "--random", "2", "--random-high", "0"])
    assert "--random-high 0" in capsys.readouterr().err


def test_benchmark_runs_a_set_policy_on_sizes_it_never_trained_on(tmp_path, monkeypatch):
    """benchmarks/jobshop.py --quick with one set-policy run (trained on 10x10) for 6x6 and 10x5:
    every schedule is checked and the summary compares greedy with the best single rule. An MLP
    run given for another size is refused with a message that says why."""
    import sys

    from hdppo.platform.config import load_config
    from hdppo.platform.trainer import Trainer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import jobshop as bench

    cfg = load_config(ROOT / "configs" / "jobshop_set.yaml")
    layer = cfg.layers[0]
    layer.dppo.num_workers, layer.dppo.num_envs_per_worker, layer.dppo.train_batch_size = 1, 2, 256
    layer.ppo.minibatch_size, layer.ppo.num_epochs = 128, 1
    cfg.train.total_env_steps, cfg.train.eval_episodes, cfg.ray.backend = 256, 0, "local"
    Trainer(cfg, tmp_path / "set", quiet=True).train()
    cfg.train.seed = 1
    Trainer(cfg, tmp_path / "set_b", quiet=True).train()
    reports = []
    monkeypatch.setattr(bench, "write_report", lambda stem, report, md, tag: reports.append((report, md)))
    monkeypatch.setattr(bench, "HERE", tmp_path)
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    (tmp_path / "results").mkdir()
    run = str(tmp_path / "set")
    two = f"{run},{tmp_path / 'set_b'}"  # two training seeds: their mean, each run's figure, the spread
    assert bench.main(["--quick", "--no-cpsat", "--run", f"6x6={two}", "--run", f"10x5={run}", "--random", "6"]) == 0
    report, md = reports[0]
    rows = [r for fam in report["families"] for r in fam["rows"]]
    assert [r["instance"] for r in rows] == ["ft06", "la01"]
    assert [len(r["policy_greedy_runs"]) for r in rows] == [2, 1]
    assert all(g["makespan"] >= r["best_known"] for r in rows for g in r["policy_greedy_runs"])
    ft06 = rows[0]
    assert ft06["policy_greedy"]["gap"] == pytest.approx(np.mean([g["gap"] for g in ft06["policy_greedy_runs"]]))
    assert "best of MWKR, SPT, MOR" in md and "trained on random 10x10 only; the mean of 2 runs" in md
    assert "Greedy gap per training run" in md and "(2 runs)" in md
    assert "## By size" in md and "| 6x6 | 1 |" in md
    # --random: the same policies and every rule on 6 random instances of each size, checked schedules.
    rnd = {r["size"]: r for r in report["random"]}
    assert list(rnd) == ["6x6", "10x5"] and all(r["instances"] == 6 for r in rnd.values())
    for r in rnd.values():
        assert len(r["rules"]) == 8 and all(st["mean"] >= 1.0 and st["n"] == 6 for st in r["rules"].values())
        assert r["best_rule"]["mean"] == min(st["mean"] for st in r["rules"].values())
        assert r["rules"][r["best_rule"]["rule"]]["mean"] == r["best_rule"]["mean"]
        for run_stat, diff in zip(r["policy_runs"], r["policy_minus_best_rule"]):
            assert run_stat["mean"] >= 1.0
            assert diff["mean"] == pytest.approx(run_stat["mean"] - r["best_rule"]["mean"])
    assert [len(rnd[s]["policy_runs"]) for s in ("6x6", "10x5")] == [2, 1]
    assert "## Random instances of each size" in md and "| 6x6 | 6 |" in md

    # --families all --run any=RUN: the set policy on a size no --run names (la06-la10, 15x5).
    assert bench.main(["--families", "all", "--sizes", "15x5", "--no-cpsat", "--samples", "2", "--run", f"any={run}"]) == 0
    report, md = reports[-1]
    assert [f["title"].split(" ")[0] for f in report["families"]] == ["la06-la10"]
    assert all(len(r["policy_greedy_runs"]) == 1 and r["policy_greedy"]["makespan"] >= r["best_known"]
               for r in report["families"][0]["rows"])
    assert list(report["policies"]) == ["15x5"] and "| 15x5 | 5 |" in md

    mlp = load_config(ROOT / "configs" / "jobshop_6x6.yaml")
    mlp.layers[0].dppo.num_workers, mlp.layers[0].dppo.train_batch_size = 1, 256
    mlp.layers[0].ppo.minibatch_size, mlp.layers[0].ppo.num_epochs = 128, 1
    mlp.train.total_env_steps, mlp.train.eval_episodes, mlp.ray.backend = 256, 0, "local"
    Trainer(mlp, tmp_path / "mlp", quiet=True).train()
    with pytest.raises(SystemExit, match="trained on 6x6.*encoder 'set'"):
        bench.main(["--quick", "--no-cpsat", "--run", f"10x5={tmp_path / 'mlp'}"])


def test_all_families_cover_every_shipped_instance_once_by_size():
    import sys

    from hdppo.envs.builtin.jobshop.instances import instance_names, load_instance

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import jobshop as bench

    fams = bench.all_families()
    names = [n for _, _, ns in fams for n in ns]
    assert sorted(names) == sorted(instance_names()) and len(names) == len(set(names)) == 162
    assert fams[:len(bench.FAMILIES)] == bench.FAMILIES
    assert all(load_instance(n).size == size for _, size, ns in fams for n in ns)
    titles = [t for t, _, _ in fams]
    assert "ta71-ta80 (Taillard 1993), 100x20" in titles and "la06-la10 (Lawrence 1984), 15x5" in titles


def test_size_table_pools_the_families_of_a_size_and_checks_every_run():
    """The issue's criterion by size: ft10 (1 instance) and la16 (another family) pooled; the
    best single rule is the one with the lowest pooled mean; a run above it makes 'every run' no."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import jobshop as bench

    def row(name, size, mwkr, spt, mor, runs):
        return {"instance": name, "size": size, "MWKR": {"gap": mwkr}, "SPT": {"gap": spt}, "MOR": {"gap": mor},
                "policy_greedy": {"gap": float(np.mean(runs))}, "policy_greedy_runs": [{"gap": g} for g in runs]}

    families = [{"rows": [row("ft10", "10x10", 19.0, 15.0, 25.0, [16.0, 15.0])]},
                {"rows": [row("la16", "10x10", 10.0, 16.0, 18.0, [11.0, 13.0])]},
                {"rows": [row("ta01", "15x15", 19.0, 26.0, 20.0, [14.0, 20.0])]}]
    lines = bench._size_table(families)
    ten = next(line for line in lines if line.startswith("| 10x10 |"))
    # pooled: MWKR 14.5, SPT 15.5, MOR 21.5; greedy runs 13.5 and 14.0, mean 13.75
    assert "| 10x10 | 2 | 13.8 | 13.5 / 14.0 | 14.5 | 15.5 | 21.5 | 14.5 (MWKR) | yes | yes |" == ten
    fifteen = next(line for line in lines if line.startswith("| 15x15 |"))
    assert fifteen.endswith("| 19.0 (MWKR) | yes | **no** |")   # mean 17.0, but one run at 20.0


def test_each_rule_picks_the_job_its_priority_names():
    """Three jobs waiting on machine 0 at time 0 (work 5, 9, 7; first operations 4, 3, 2): SPT
    takes job 2, MWKR job 1, LWKR job 0; FIFO and MOR see a tie and take the lowest index."""
    from hdppo.envs.builtin.jobshop import Instance, rule_choice

    inst = Instance("three", np.array([[4, 1], [3, 6], [2, 5]]), np.array([[0, 1], [0, 1], [0, 1]]))
    d = Dispatcher(inst, "nondelay")
    assert d.legal().tolist() == [True, True, True]
    assert {r: rule_choice(d, r) for r in RULES} == {"SPT": 2, "MWKR": 1, "LWKR": 0, "FIFO": 0, "MOR": 0}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_rules_follow_their_priority_in_every_state_of_a_schedule(scheme):
    """Along schedules built by random choices, each rule's pick is legal and best by its key,
    the key recomputed here from the instance and the starts so far (not the dispatcher's own
    arrays), ties to the lowest job index."""
    from hdppo.envs.builtin.jobshop import random_instance, rule_choice

    rng = np.random.default_rng(3)
    inst = random_instance(6, 5, rng)
    p, n, m = inst.durations, inst.n_jobs, inst.n_machines

    def keys(starts: np.ndarray) -> dict[str, np.ndarray]:
        done = (starts >= 0).sum(1)                       # operations dispatched per job
        nxt = np.minimum(done, m - 1)
        work = np.array([p[j, done[j]:].sum() for j in range(n)], float)
        ready = np.array([0 if done[j] == 0 else starts[j, done[j] - 1] + p[j, done[j] - 1] for j in range(n)], float)
        return {"MWKR": work, "LWKR": -work, "SPT": -p[np.arange(n), nxt].astype(float),
                "MOR": (m - done).astype(float), "FIFO": -ready}

    checked = 0
    for _ in range(3):
        d = Dispatcher(inst, scheme)
        while not d.done:
            legal = np.flatnonzero(d.legal())
            k = keys(d.starts)
            for rule in RULES:
                best = legal[k[rule][legal] == k[rule][legal].max()].min()
                assert rule_choice(d, rule) == best, (rule, d.order)
                checked += 1
            d.schedule(int(rng.choice(legal)))
    assert checked == 3 * n * m * len(RULES)


def _write_orlib(path: Path, inst) -> None:
    rows = [" ".join(f"{m} {p}" for m, p in zip(mr, pr)) for mr, pr in zip(inst.machines.tolist(), inst.durations.tolist())]
    path.write_text(f"instance {inst.name}\n+++\n{inst.n_jobs} {inst.n_machines}\n" + "\n".join(rows) + "\n+++\n")


def _write_taillard(path: Path, inst) -> None:
    times = "\n".join(" ".join(map(str, r)) for r in inst.durations.tolist())
    machs = "\n".join(" ".join(str(m + 1) for m in r) for r in inst.machines.tolist())
    path.write_text(f"Nb of jobs, Nb of Machines, Time seed, Machine seed, Upper bound, Lower bound\n"
                    f"  {inst.n_jobs}  {inst.n_machines}  840612802  398197754  55  55\nTimes\n{times}\nMachines\n{machs}\n")


def test_your_own_instance_from_a_file_or_a_mapping_in_the_config(tmp_path):
    """An instance of your own, as an OR-Library or Taillard text file or a {name, durations,
    machines} mapping in env.kwargs: each is ft06 itself when written from it (CP-SAT and the rules
    then see the same instance), and a file of neither format is refused naming the file."""
    ft06 = load_instance("ft06")
    _write_orlib(tmp_path / "mine.txt", ft06)
    _write_taillard(tmp_path / "tai.txt", ft06)
    for path in (tmp_path / "mine.txt", tmp_path / "tai.txt"):
        env = make_env(instance=str(path))
        env.reset(seed=0)
        assert env.instance.name == path.stem
        assert (env.instance.durations == ft06.durations).all() and (env.instance.machines == ft06.machines).all()
        assert run_rule(env.instance, "MOR")[0] == run_rule(ft06, "MOR")[0]
    env = make_env(instance={"name": "tiny", "durations": [[3, 2], [2, 4]], "machines": [[0, 1], [1, 0]]})
    env.reset(seed=0)
    assert env.instance.size == "2x2" and env.instance.durations.dtype == np.int64
    (tmp_path / "bad.txt").write_text("6 6\n1 2 3\n")
    with pytest.raises(EnvError, match=r"bad\.txt.*6 jobs x 6 machines.*OR-Library"):
        make_env(instance=str(tmp_path / "bad.txt"))
    with pytest.raises(EnvError, match="cannot be read"):
        make_env(instance=str(tmp_path / "none.txt"))
    with pytest.raises(EnvError, match="missing: machines"):
        make_env(instance={"durations": [[1, 2], [2, 1]]})


@pytest.mark.parametrize("durations, machines, says", [
    ([[3, 2], [2, 4]], [[1, 2], [2, 1]], "look 1-based: subtract 1"),
    ([[1.5, 2], [2, 4]], [[0, 1], [1, 0]], r"durations\[0\]\[0\] is 1.5"),
    ([[3, -2], [2, 4]], [[0, 1], [1, 0]], r"durations\[0\]\[1\] is -2"),
    ([[3, 2], [2, 4]], [[0, 0], [1, 0]], "job 0 visits machines"),
    ([[3, 2, 1], [2, 4]], [[0, 1], [1, 0]], "tables of whole numbers"),
])
def test_a_hand_built_instance_is_checked_where_it_is_made(durations, machines, says):
    """Bad durations or machines fail with the instance's name and the fix, not deep in the
    dispatcher (1-based machines raised an IndexError; 1.5 ran as 1)."""
    from hdppo.envs.builtin.jobshop import Instance

    with pytest.raises(EnvError, match=says):
        Instance("mine", durations, machines)


def test_a_rule_through_a_slot_ordered_env_plays_as_the_rule(tmp_path):
    """With job_order: mwkr slots are not jobs: env.rule_action gives the rule's slot, so a rule
    played through the env builds the rule's schedule (rule_choice's job index as an action did
    not, silently), and an illegal action is flagged in the info."""
    for rule in ("MOR", "spt"):
        env = JobShopEnv(instance="ft06", job_order="mwkr")
        env.reset(seed=0)
        done, info = False, {}
        while not done:
            _, _, done, _, info = env.step(env.rule_action(rule))
            assert "illegal_action" not in info
        assert info["makespan"] == run_rule(load_instance("ft06"), rule.upper())[0]
    env = JobShopEnv(instance="ft06", job_order="mwkr")
    obs, _ = env.reset(seed=0)
    illegal = int(np.flatnonzero(obs["action_mask"] == 0)[0])
    assert env.step(illegal)[4]["illegal_action"] == illegal
    with pytest.raises(EnvError, match="no dispatching rule 'MWRK'"):
        env.rule_action("MWRK")


def test_benchmark_refuses_a_size_it_has_no_instances_of_and_a_run_that_is_not_a_job_shop_run(tmp_path, capsys):
    """--sizes 7x7 gave empty tables and exit 0; --run of another env's run failed with a
    TypeError deep in the env; a folder without config.yaml listed every preset. Each is now named."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import jobshop as bench

    with pytest.raises(SystemExit):
        bench.main(["--sizes", "7x7", "--no-cpsat", "--out", str(tmp_path / "x")])
    assert "--sizes '7x7': 7x7 has no classic instances; the sizes are 6x6, 10x5, 10x10, 15x15" in capsys.readouterr().err
    (tmp_path / "fabrun").mkdir()
    (tmp_path / "fabrun" / "config.yaml").write_text((ROOT / "configs" / "fab_flat.yaml").read_text())
    with pytest.raises(SystemExit, match="not of the job shop"):
        bench.main(["--sizes", "6X6", "--no-cpsat", "--run", f"6x6={tmp_path / 'fabrun'}", "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="no config.yaml there"):
        bench.main(["--sizes", "6x6", "--no-cpsat", "--run", f"6x6={tmp_path / 'nothing'}", "--out", str(tmp_path / "x")])
