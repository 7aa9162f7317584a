"""skirmish: two armies of melee, ranged and healer units fight on a 2-D map with obstacles.

A small real-time battle game of the StarCraft II micro kind, in vectorised numpy. The red
army's units are the agents; a scripted player (``opponent``) commands the blue army, which
fields the same units (a mirror match). Units move continuously on the map in eight
directions, attack one of the nearest enemies they can see, or (healers) heal a hurt ally;
obstacles block movement (not sight, not fire). The battle ends when one army is gone (a win
or a loss), or at ``max_steps`` (a draw: the agents are truncated).

| | |
|---|---|
| agents | ``red_0`` ... ``red_{n-1}`` (n = 3, 8 or 10 by scenario); an agent whose unit dies leaves ``env.agents`` |
| observation (each) | Dict: ``observation`` Box(-1, 1, (D,), float32), ``action_mask`` Box(0, 1, (A,), int8) (1: legal), as PettingZoo's classic envs |
| action (each) | Discrete(A), A = 9 + Ke + Ka: 0 no-op; 1-8 move E, NE, N, NW, W, SW, S, SE; 9 + k attack enemy slot k; 9 + Ke + k heal ally slot k (healers) |
| state() | Box(0, 1, (S_d,), float32): both armies unit by unit in a fixed order (red then blue, each zero-padded to 10 units), obstacles, time; S_d = 20 * 12 + 8 * 4 + 1 = 273 for every built-in scenario. The order is the scenario's unit order (``state_layout="units"``), or with ``state_layout="squads"`` five slots per squad by type (melee, melee, ranged, ranged, healer), so that 8v8 and 10v10 mixed line up slot for slot. With ``state_summary=True`` 64 values follow (S_d = 337): per squad of either team (4 slots each) live fraction, hp fraction, ready fraction (cooldown over) and spread, then the centroid distances own squad to enemy squad and own to own (4 x 4 each, over the map's diagonal, 1 where a squad is empty) |
| reward (each) | the team reward, the same for every agent alive at the step (below) |
| info (each) | per step: ``squad``, ``n_squads``, ``unit_type``, ``dealt``, ``dealt_to [S]``, ``killed``, ``taken``, ``healed``, ``approach [S]``, ``retreat``, ``cohesion``, ``spacing``, ``depth``, ``moved`` (:func:`.accounts.unit_infos`); on the last step also ``win`` (1/0), ``draw`` (1/0), ``outcome`` (+1 win, 0 draw, -1 loss), ``kills``, ``losses``, ``episode_steps`` |
| episode | terminates when an army is gone; truncated at ``max_steps`` |
| arguments | ``scenario="8v8_mixed"`` (or ``"3v3"``, ``"10v10_mixed"``, or a :class:`Scenario`), ``opponent="focus_kite"`` (``"random"``, ``"nearest"``, ``"focus_no_overkill"``, or the scripted commanders ``"squad_focus"`` and ``"healer_first"``: focus_kite's micro carrying out scripted squad orders), ``max_steps=None`` (the scenario's), ``k_enemies=5`` (Ke), ``k_allies=4`` (Ka), ``k_obstacles=2``, ``reward_damage=1.0``, ``reward_kill=0.5``, ``reward_win=1.0``, ``reward_taken=0.5``, ``render_mode=None`` (or ``"rgb_array"``), ``state_layout="units"`` (or ``"squads"``), ``state_summary=False`` |
| render | ``rgb_array``: ``[16 * height, 16 * width, 3]`` uint8 (:mod:`.render`) |
| factories | ``parallel_env(**kwargs)`` (PettingZoo ParallelEnv, ``env.type: pettingzoo``); ``make_vector(num_envs, seed, **kwargs)`` (natively batched, ``env.type: vector``) |

**Units** (:data:`UNIT_TYPES`; ``cooldown`` = steps to wait between two attacks or heals):

| type | hp | speed | attack range | damage | cooldown | heal (range) | sight |
|---|---|---|---|---|---|---|---|
| melee | 120 | 1.0 | 1.5 | 9 | 0 | - | 9 |
| ranged | 70 | 0.9 | 5.0 | 13 | 1 | - | 9 |
| healer | 60 | 0.9 | - | - | 1 | 12 (4.0) | 9 |

**Observation** (D = 12 + 9 Ke + 9 Ka + 4 Ko = 101 by default; distances over the unit's sight):
own type one-hot (3), hp fraction, cooldown fraction, x / width, y / height, squad one-hot (4),
time / max_steps; then the Ke nearest live enemies in sight and the Ka nearest live allies in
sight, nearest first (the slots the attack and heal actions name), each: present, dx, dy, hp
fraction, type one-hot (3), distance, and a flag (enemy: within my attack range; ally: my
squad); then the Ko nearest obstacles whose centre is in sight: present, dx, dy, radius.
Empty slots are zeros.

**Action mask**: no-op always; a move when it keeps the unit on the map and clear of every
obstacle; an attack when the slot holds an enemy within attack range and the cooldown is over;
a heal (healers) when the slot holds a hurt ally within heal range and the cooldown is over. An
illegal action is a no-op.

**Reward** (the same for every live red agent; :class:`RewardWeights`):
``reward_damage * (hp dealt / blue's full hp - reward_taken * hp lost / red's full hp)
+ reward_kill * (blue units killed - reward_taken * red units lost) / n
+ reward_win * (+1 won, -1 lost)`` on the last step. Over a won game without losses the damage
and kill terms sum to about 1.5 and the win adds 1.

**Scenarios** (:data:`SCENARIOS`; both armies alike, squads of equal size, spawns and obstacles
drawn anew each episode from the seed):

| scenario | units per army | squads | map | obstacles | max_steps |
|---|---|---|---|---|---|
| ``3v3`` | melee, ranged, healer | 1 of 3 | 20 x 16 | 2 | 100 |
| ``8v8_mixed`` | 3 melee, 3 ranged, 2 healers | 2 of 4: (M, M, R, H), (M, R, R, H) | 32 x 24 | 4 | 150 |
| ``10v10_mixed`` | 4 melee, 4 ranged, 2 healers | 2 of 5: (M, M, R, R, H), (M, R, R, M, H) | 36 x 28 | 5 | 160 |

Squad ``s`` is the contiguous run of agents listed in the table (``env.squads`` gives them by
name, e.g. 8v8_mixed: ``squad_0`` = red_0..red_3, ``squad_1`` = red_4..red_7). Observations and
the state have the same size in every scenario with the same ``k_*`` arguments, so a policy
trained on 8v8_mixed runs on 10v10_mixed.

**Scripted players** (:data:`OPPONENTS`, usable for either army; :func:`play` pits two against
each other): ``random`` (a random legal action), ``nearest`` (attack the nearest enemy in range,
else walk to the nearest; healers heal the nearest hurt ally), ``focus_kite`` (each unit shoots
the lowest-hp enemy in its range, and the team converges on one prey, the weakest enemy near
it; ranged units and healers step back from enemy melee while they cannot shoot; healers heal
the most hurt ally and stay behind). In that order each beats the one before it: on 8v8 mixed
nearest wins about 98% of games against random and focus_kite about 90% against nearest
(``tests/test_skirmish.py`` plays 50 games of each pairing). Beyond those three,
``focus_no_overkill`` is focus_kite with its fire split so that no shot goes to an enemy already
killed that step: it wins 56% of 1000 games against focus_kite (41% lost), and it is the micro
that ``order_teacher(no_overkill=True)`` teaches a control layer. :data:`COMMANDERS` (``squad_focus``,
``healer_first``) are scripted squad orders over focus_kite's micro, the baseline for learned
upper layers (:mod:`.opponents`).

**For a hierarchy** (control / squad / strategy). The control layer (per unit, shared weights)
receives an *order* from its squad, ``MultiDiscrete([S, 3, 2])``: target enemy squad, posture
(advance, hold, retreat), formation (tight, loose), or ``MultiDiscrete([S, 3, 3, 2])`` with one
posture for the melee units and one for the ranged units and healers; ``skirmish_follow_order``
rewards carrying it out. The squad layer (per squad, ``agents: {squads: ...}`` as ``env.squads``) receives an
*objective* from the strategy, ``MultiDiscrete([S + 1] * S)`` (engage enemy squad j, or hold),
and ``skirmish_squad_objective`` rewards pursuing it; it can read its members' observations
(``source: env``), the state, or (ParallelEnv only) :func:`squad_view`. The strategy layer (one
lane, ``agents: all``) reads ``state()`` (or :func:`team_view`) and is rewarded by the env reward.
:func:`squad_summary` and :func:`team_summary` give the same figures as arrays for any battle.
Rewards registered here (:mod:`hdppo.envs.rewards`): ``skirmish_follow_order``,
``skirmish_squad_objective`` (see :mod:`.rewards`). Teachers for kickstarting a control layer
(``teacher.policy``, :mod:`.opponents`): ``order_teacher`` (focus_kite's micro carrying out the
squad's order) under a squad layer, ``micro_teacher`` (focus_kite's micro alone) for flat MAPPO.
"""
from .accounts import squad_summary, squad_view, team_summary, team_view, unit_infos
from .core import Battle, RewardWeights, StepArrays
from .env import SkirmishEnv, parallel_env
from .opponents import COMMANDERS, OPPONENTS, play
from .rewards import follow_order, squad_objective
from .scenarios import MELEE, RANGED, HEALER, SCENARIOS, UNIT_TYPES, Scenario, UnitType
from .vector import SkirmishVector, make_vector

__all__ = ["Battle", "COMMANDERS", "HEALER", "MELEE", "OPPONENTS", "RANGED", "RewardWeights", "SCENARIOS", "Scenario",
           "SkirmishEnv", "SkirmishVector", "StepArrays", "UNIT_TYPES", "UnitType", "follow_order", "make_vector",
           "parallel_env", "play", "squad_objective", "squad_summary", "squad_view", "team_summary", "team_view",
           "unit_infos"]
