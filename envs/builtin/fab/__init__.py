"""fab: dispatching in an SMT2020 semiconductor fab, a discrete-event simulation.

The fab of the public SMT2020 testbed (Kopp, Hassoun, Kalir, Mönch, IEEE Trans. Semicond.
Manuf. 33(4), 2020; files in ``data/``, see ``data/README.md``): tool groups of several tools,
re-entrant routes of hundreds of steps, batching furnaces (min/max batch sizes), per-piece,
per-lot and per-batch processing times, sequence-dependent setups, lots released with
priorities (regular, hot, super hot) and due dates, initial WIP, preventive maintenance and
random breakdowns (MTTF/MTTR). :mod:`.sim` is the event simulator, :mod:`.data` reads the
files, :mod:`.scenarios` the full and scaled-down fabs. One env step is one dispatching
decision: a tool of a group is free and several lots wait; the agent picks which one starts
next (at a batching group: which batch family, the batch filled in the rule's order). The
simulation then runs on (every decision with a single legal lot taken at once) to the next
decision.

| | |
|---|---|
| agents | one (a Gymnasium env): the dispatcher of every tool group in ``agent_groups``; hdppo names it ``agent_0`` |
| observation | Dict: ``observation`` Box(-10, 10, (D,), float32), ``action_mask`` Box(0, 1, (A,), int8) (1: legal), A = K slots (``action="slot"``) or 4 rules (``action="rule"``), plus 3 release levels with ``release_control`` |
| action | ``action="slot"`` (default): Discrete(K), the candidate slot to start; ``action="rule"``: Discrete(4), which rule (fifo, spt, edd, cr) picks the lot, every rule always legal (adaptive rule selection); with ``release_control`` MultiDiscrete([K or 4, 3]): that, and the release rate level (x0.8, x1.0, x1.2 of the order rate) from now on |
| reward | ``-reward_scale * (w_tardiness * late lot-hours + w_cycle_time * lot-hours in the fab)`` accrued since the last decision ``+ w_throughput * lots completed``; over an episode the tardiness term sums to every lot's tardiness within the horizon |
| info | each step: ``sim_time_h``, ``wip``, ``queued``, ``late_wip``, ``tools_down``, ``completed``, ``mean_tardiness_h``, ``group``, ``group_queue``, ``group_slot`` (the deciding group's index among ``agent_groups``, -1 when none), ``release_level``, ``chosen_ranks`` (the chosen lot's rank under fifo/spt/edd/cr, 0 = first); the last step also ``episode`` (:meth:`.sim.FabSim.summary`, with ``late_wip_end``: lots still in the fab and past due at the end) and, at the top level for ``env.episode_metrics``, ``mean_tardiness_h``, ``tardy_fraction``, ``mean_cycle_time_h``, ``throughput_lots_per_day``, ``mean_wip``, ``late_lot_hours`` and ``max_queue`` (the longest queue a deciding group had at a decision) |
| episode | ends (terminated) when the simulated time reaches ``days``; ``env.history()`` holds WIP, queues, late WIP, tools down, completions and mean tardiness every ``record_every`` minutes |
| arguments | ``scenario="hvlm_mini"`` (``"hvlm"``, ``"lvhm"``, ``"lvhm_mini"``, or a :class:`Scenario`), ``days=None`` (the scenario's horizon), ``objective="tardiness"`` (``"cycle_time"``, ``"throughput"``, or a dict of weights), ``k=8`` (K), ``noise=True`` (processing and transport times drawn from their distributions), ``breakdowns=True`` (breakdowns and PMs), ``default_rule="fifo"`` (for decisions outside ``agent_groups``), ``agent_groups="all"`` (or a list of tool group names), ``release_control=False``, ``hot_first=True``, ``batch_wait=240`` (minutes a partial batch waits before it may start), ``reward_scale=0.01``, ``record_every=60`` (minutes between ``history()`` rows; 0 records none), ``data_dir=None`` (the shipped files), ``action="slot"`` (or ``"rule"``), ``crn=False`` (common random numbers: every random quantity keyed by what it is for, so two dispatchers on a seed see the same breakdowns and process times), ``reference_rule=None`` (with ``crn``: the reward is relative to this rule's run of the same seed over the same simulated time, a control variate), ``setup_avoidance=False`` (SMT2020's ``rank_RSETUP``: at a tool group with setups, lots that need no setup on an idle tool rank before the rule's order, after hot lots) |

**Candidate slots.** The K slots hold the legal lots that the four rules rank first, taken in
turn (FIFO's first, SPT's first, EDD's first, CR's first, then each rule's second, ...), so
that every rule's choice is always a slot; empty slots are masked. Observation (D = G + 8 + 14 K,
G the agent groups; + 3 with ``release_control``): the deciding group one-hot; time / horizon,
WIP / initial WIP, the group's queue / 50, its idle and down tool fractions, batching flag, late
share of the WIP, legal lots / 20 (and the release level one-hot); per slot: present, hot,
super hot, log waiting time, step time, remaining raw time, slack, critical ratio, needs a
setup, batch fill, and the slot's rank under fifo, spt, edd and cr.

**Rules** (:data:`RULES`, scripted dispatchers: :func:`run_rule` runs the simulator with one rule
taking every decision, :meth:`FabEnv.rule_action` gives a rule's slot in the env, :func:`play`
runs an episode with a rule or a policy): ``fifo``, ``spt`` (shortest processing time),
``edd`` (earliest due date), ``cr`` (critical ratio); hot lots first (``hot_first``).
:func:`search_group_rules` tunes a rule per tool group (coordinate descent over the groups on
given seeds) and :func:`group_rule_policy` plays such an assignment: the baseline an OR
practitioner would tune by hand, for a learned dispatcher to be held against (search and judge it
with ``crn=True``: with one stream, a search on a few seeds mostly fits their luck). :func:`rule_teacher` is a
``teacher.policy`` (kickstarting): a dispatcher trained by PPO that imitates a rule early on.

**Scenarios** (:data:`SCENARIOS`): ``hvlm`` and ``lvhm`` are the testbed's fabs in full
(106 tool groups, 1443 / 1313 tools, 2 / 10 products, 2255 / 2156 lots of initial WIP);
``hvlm_mini`` (the default, for tests and training) keeps the eight busiest tool groups of
the first 150 route steps, plus the busiest batching group and the busiest group with setups
when none is among them (a batching furnace and a litho track: ten groups in all), with
a tenth of their tools, releases at 90% utilization of the busiest group, and a 7-day horizon;
see :mod:`.scenarios`. Run the full fabs with ``setup_avoidance=True``, the setup ranking their own
tool files give: without it their implant groups pay a 60-80 minute setup lot after lot and fall
behind the releases within days (HVLM over 90 days: 23-40 lots completed a day of 57 released,
against 53-57 with it; ``benchmarks/results/fab_hvlm_90d_crn*.md``). It is off by default because the
recorded mini-fab results were measured without it (there it changes little: cr 9.72 h against 9.51).

**For a hierarchy** (``configs/fab_hierarchy.yaml``): a shift layer (every ``period``
decisions, 10-17 hours of the mini fab: about a shift) commands ``MultiDiscrete([3, 5])``: a
release level and a dispatching criterion (fifo, spt, edd, cr, or all four balanced); the
dispatching layer reads the command and acts per decision with ``release_control=True``;
``fab_follow_command`` (registered here, :mod:`hdppo.envs.rewards`) rewards it for releasing at
the commanded level and choosing lots the commanded criterion ranks high. With a criterion per
agent tool group (``MultiDiscrete([3, 5, ..., 5])``, ``configs/fab_shift_rules.yaml``) the shift
layer reads the whole fab (:func:`shift_observation`), the reward and :func:`command_teacher`
(the dispatcher that carries a command out exactly) read the deciding group's criterion, and
:func:`shift_teacher` starts the shift layer from one rule everywhere.

**Watching.** The infos carry WIP, queue lengths, late WIP and mean tardiness at each
decision; ``env.history()`` is the same on a fixed clock (and the last step's
``info["episode"]["history"]``, since a training or evaluation copy resets at once), and
:func:`log_history` writes it as TensorBoard scalars (``benchmarks/fab.py --tb DIR`` does so for
the first seed of each rule and each trained run it evaluates).
"""
from .data import FABS, FabData, load_fab
from .env import FAB_FEATURES, GROUP_FEATURES, OBJECTIVES, RELEASE_LEVELS, SLOT_FEATURES, FabEnv
from .rules import (CRITERIA, command_teacher, criterion_weights, follow_command, group_rule_policy, log_history, play,
                    rule_teacher, run_rule, search_group_rules, shift_observation, shift_teacher)
from .scenarios import SCENARIOS, Scenario, build_model, describe, get_scenario
from .sim import RULES, FabSim, Model


def make_env(**kwargs) -> FabEnv:
    """The factory for ``env.entry_point: hdppo.envs.builtin.fab:make_env``."""
    return FabEnv(**kwargs)


__all__ = ["build_model", "command_teacher", "CRITERIA", "criterion_weights", "describe", "FAB_FEATURES", "FabData",
           "FabEnv", "FABS", "FabSim", "follow_command", "get_scenario", "GROUP_FEATURES", "group_rule_policy",
           "load_fab", "log_history", "make_env", "Model", "OBJECTIVES", "play", "RELEASE_LEVELS", "rule_teacher",
           "RULES", "run_rule", "Scenario", "SCENARIOS", "search_group_rules", "shift_observation", "shift_teacher",
           "SLOT_FEATURES"]
