"""The discrete-event simulator of an SMT2020 fab: a heap of timed events, lots and tools in arrays.

Events (``(time, seq, kind, a, b)`` on a heap): a lot arrives at a tool group's queue, a lot
finishes a step, a tool becomes free, an order releases a lot, a tool breaks down or goes to
preventive maintenance (PM), a tool comes back up. Between events the simulator integrates the
lots in the fab (WIP) and the lots past their due date over time, which is what the rewards read.

**Dispatching.** Whenever a tool group has an idle, available tool and a legal waiting lot,
a dispatching decision is due there. :meth:`FabSim.advance` runs the events until a decision
is due that the caller must take (a group in ``agent_groups`` with at least two legal options);
every other decision is taken by the ``default_rule``. The caller answers with
:meth:`FabSim.dispatch` (the lot to start). A lot is legal at a non-batching group whenever
it waits there; at a batching group a lot is legal when its batch family (lots at the same
route step) holds at least the step's minimum batch size in pieces, or when its oldest lot
has waited ``batch_wait`` minutes; the batch is the chosen lot plus its family's other lots,
higher priority first, then in order of arrival, up to the maximum batch size.

**Tools.** A free tool is picked for the lot: one already set up for the lot's step if any
(else the lowest index); a setup costs the time of ``setup.txt`` (``(current, new)``, or from
any) or the step's own ``STIME``. A tool holds a lot (or batch) for its processing time plus
load/unload; per-lot cascading tools (``BatchInterval``) take the next lot after that interval.
A breakdown or PM that falls due while the tool is busy starts when the job ends; while down
the tool takes no lot.

Rules (:data:`RULES`): ``fifo`` (earliest arrival at the queue), ``spt`` (shortest processing
time of the step), ``edd`` (earliest due date), ``cr`` (critical ratio: time to due over
remaining raw processing time, smallest first); with ``hot_first`` each ranks higher-priority
lots (hot, super hot) first, as SMT2020's ``rule_HotLotFIRST``.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from .data import PER_BATCH, PER_LOT, PER_PIECE, FabData, Route

RULES = ("fifo", "spt", "edd", "cr")
ARRIVE, FINISH, FREE, RELEASE, DOWN, UP, PM, CHECK = range(8)
WAITING, QUEUED, BUSY, DONE = 0, 1, 2, 3
T_IDLE, T_BUSY, T_DOWN = 0, 1, 2
DELAY_TOOLS = 100   # a group with at least this many tools is a pure delay (no queue, no decision)
# What a keyed draw is for (common random numbers, FabSim(crn=True)).
D_TIME, D_SAMPLE, D_REWORK, D_MOVE, D_FIRST_DOWN, D_UP, D_DOWN, D_PM = range(1, 9)
_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit integers that scatters nearby inputs."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def keyed_uniform(seed: int, *key: int) -> float:
    """A uniform in [0, 1) that depends only on ``seed`` and ``key`` (counter-based: no stream, so
    no draw depends on how many other draws came before it)."""
    x = seed & _M64
    for v in key:
        x = _mix64(x ^ (v & _M64))
    return (x >> 11) * (1.0 / (1 << 53))


@dataclass
class Model:
    """A fab as the simulator runs it (a :class:`FabData`, possibly scaled down)."""

    data: FabData
    routes: list[Route]
    tools: np.ndarray                 # per group
    orders: list[dict]                # as FabData.orders, intervals possibly scaled
    wip: list[dict]
    horizon: float                    # minutes
    used_groups: np.ndarray           # groups that any route visits
    due_scale: float = 1.0

    def __post_init__(self) -> None:
        self.G = len(self.data.groups)
        self.delay = self.tools >= DELAY_TOOLS
        self.setup_names: dict[str, int] = {}
        self.step_setup = []
        for r in self.routes:
            self.step_setup.append(np.array([self.setup_names.setdefault(s, len(self.setup_names)) if s else -1
                                             for s in r.setup], np.int64))
        names = {v: k for k, v in self.setup_names.items()}
        self.setup_cost = {}
        for r, ids in zip(self.routes, self.step_setup):
            for k, sid in enumerate(ids):
                if sid >= 0 and sid not in self.setup_cost:
                    self.setup_cost[sid] = r.setup_time[k]
        self._names = names
        pieces = 25.0
        # Mean hold time per step (for SPT) and remaining raw processing time from each step (for CR).
        self.step_time = []
        self.remaining = []
        for r in self.routes:
            t = np.where(r.per == PER_PIECE, np.where(r.part_interval > 0, r.ptime + (pieces - 1) * r.part_interval,
                                                      r.ptime * pieces), r.ptime) + self.data.load_time[r.group]
            self.step_time.append(t)
            rem = np.cumsum((t * r.sample)[::-1])[::-1]
            self.remaining.append(np.append(rem, 0.0))
        # The same as Python lists, for the simulator's scalar reads.
        self.L = [dict(group=r.group.tolist(), ptime=r.ptime.tolist(), pspread=r.pspread.tolist(), per=r.per.tolist(),
                       pint=r.part_interval.tolist(), bint=r.batch_interval.tolist(), bmin=r.batch_min.tolist(),
                       bmax=r.batch_max.tolist(), sample=r.sample.tolist(), rwp=r.rework_p.tolist(),
                       rwto=r.rework_to.tolist(), setup=ids.tolist(), spt=t.tolist(), rem=rem.tolist(), n=len(r))
                  for r, ids, t, rem in zip(self.routes, self.step_setup, self.step_time, self.remaining)]
        self.delay_l = self.delay.tolist()
        # Groups where some step needs a setup: the only ones where setup avoidance can rank anything.
        self.has_setups = np.zeros(self.G, bool)
        for r, ids in zip(self.routes, self.step_setup):
            self.has_setups[r.group[ids >= 0]] = True
        self.has_setups_l = self.has_setups.tolist()
        self.batching_l = self.data.batching.tolist()
        self.load_l = self.data.load_time.tolist()

    def setup_time(self, current: int, new: int) -> float:
        if new < 0 or current == new:
            return 0.0
        s = self.data.setups
        cur, nw = self._names.get(current, ""), self._names[new]
        if (cur, nw) in s:
            return s[(cur, nw)]
        if ("", nw) in s:
            return s[("", nw)]
        return float(self.setup_cost.get(new, 0.0))

    def utilization(self, rate_scale: float = 1.0) -> np.ndarray:
        """Expected busy fraction of each group's tools at the order releases (no downtime)."""
        load = np.zeros(self.G)
        for o in self.orders:
            r = self.routes[o["part"]]
            t = self.step_time[o["part"]].copy()
            lot = r.per == PER_LOT
            t[lot & (r.batch_interval > 0)] = np.minimum(t, r.batch_interval + self.data.load_time[r.group])[lot & (r.batch_interval > 0)]
            b = r.per == PER_BATCH
            t[b] = t[b] / np.maximum(r.batch_max[b] / o["pieces"], 1.0)
            np.add.at(load, r.group, t * r.sample * o["per_release"] / o["interval"] * rate_scale)
        return load / np.maximum(self.tools, 1)


@dataclass
class Decision:
    """A dispatching decision the caller must take: the group and its legal waiting lots."""

    group: int
    lots: np.ndarray          # legal lot ids


@dataclass
class Stats:
    completed: int = 0
    completed_wafers: int = 0
    tardiness_sum: float = 0.0     # minutes, over completed lots
    tardy: int = 0
    cycle_sum: float = 0.0         # minutes, over completed lots released during the run
    cycle_n: int = 0
    wip_area: float = 0.0          # lot-minutes in the fab
    late_area: float = 0.0         # lot-minutes past due (completed or not)
    decisions: int = 0
    agent_decisions: int = 0
    events: int = 0
    released: int = 0
    batches: int = 0
    history: list = field(default_factory=list)  # (t, wip, queued, late wip, tools down, completed, mean tardiness h)


class FabSim:
    """One run of a :class:`Model` (see the module docstring)."""

    def __init__(self, model: Model, seed: int | None = None, noise: bool = True, breakdowns: bool = True,
                 default_rule: str = "fifo", agent_groups: np.ndarray | None = None, hot_first: bool = True,
                 batch_wait: float = 240.0, record_every: float = 60.0, check: bool = False, crn: bool = False,
                 setup_avoidance: bool = False):
        self.m = model
        self.rng = np.random.default_rng(seed)
        # Common random numbers: with ``crn`` every random quantity is keyed by what it is for
        # (a lot's processing time at a step, its transport, sampling and rework; a tool's k-th
        # breakdown, repair and PM), not drawn from one stream in event order. Two runs of a seed
        # under different dispatching then see the same breakdowns and the same process times,
        # so their difference is the dispatching's, not the dice's (a paired comparison, and a
        # control variate for learning). Off by default: the recorded results used one stream.
        self.crn = bool(crn)
        self._crn_seed = int(self.rng.integers(2 ** 62)) if self.crn else 0
        self.visits: list[int] = []   # per lot: reworks so far (a repeated step draws anew)
        self._tool_draws: dict[tuple[int, int, int], int] = {}   # (what, tool, PM index) -> draws so far
        self._ubuf: list[float] = []
        self.noise, self.breakdowns, self.hot_first = noise, breakdowns, hot_first
        # SMT2020's rank_RSETUP (every tool group with setups ranks by it, after hot lots, in
        # tool.txt's FWLRANK): lots that need no setup on an idle tool before the rule's order. Off by
        # default: the recorded results ran without it. Without it the full fab's 72-minute implant
        # setups (Implant_128) are paid lot after lot and its queue grows without bound.
        self.setup_avoidance = bool(setup_avoidance)
        self.default_rule = default_rule
        self.batch_wait = float(batch_wait)
        self.record_every = float(record_every)
        self.check = check          # record every job (tests: no tool holds two jobs, batch sizes)
        self.jobs: list = []        # (tool, start, end, pieces, lots) when check
        G = model.G
        self.agent_groups = np.zeros(G, bool) if agent_groups is None else np.asarray(agent_groups, bool).copy()
        self.rate = 1.0
        cap = len(model.wip) + sum(int(model.horizon / o["interval"] * 1.6 + 2) * o["per_release"] for o in model.orders)
        self.cap = max(cap, 16)
        # Lots: numpy arrays for the rules' vectorised keys, Python lists for scalar reads.
        self.arrive = np.zeros(self.cap)
        self.due = np.zeros(self.cap)
        self.prio = np.zeros(self.cap, np.int64)
        self.spt = np.zeros(self.cap)            # mean time of the current step
        self.rem = np.zeros(self.cap)            # remaining raw processing time from the current step
        self.fam = np.zeros(self.cap, np.int64)  # batch family: part * 100000 + step
        self.part: list[int] = []
        self.step: list[int] = []
        self.pieces: list[int] = []
        self.state: list[int] = []
        self.start: list[float] = []
        self.due_l: list[float] = []
        self.n = 0
        # Tools.
        self.tool_group = np.repeat(np.arange(G), model.tools).tolist()
        T = len(self.tool_group)
        self.group_tools = [[t for t in range(T) if self.tool_group[t] == g] for g in range(G)] if T < 50000 else None
        self.n_tools = model.tools.tolist()
        self.tool_state = [T_IDLE] * T
        self.tool_setup = [-1] * T
        self.tool_pending: list[list] = [[] for _ in range(T)]   # downtimes waiting for the job's end
        self.idle_tools: list[list[int]] = [list(ts) for ts in self.group_tools]
        self.down_g = [0] * G
        self.queues: list[list[int]] = [[] for _ in range(G)]
        self.dirty: set[int] = set()
        self.events: list = []
        self.seq = 0
        self.now = 0.0
        self.stats = Stats()
        self.late_heap: list = []
        self.n_wip = 0
        self.n_late = 0
        self.n_down = 0
        self.n_queued = 0
        self.next_record = 0.0
        self.pm_counter: dict[tuple[int, int], float] = {}
        self.check_at = [math.inf] * G   # a pending re-check of a partial batch
        self._start()

    # ------------------------------------------------------------------ random numbers
    def _u(self) -> float:
        if not self._ubuf:
            self._ubuf = self.rng.random(8192).tolist()
        return self._ubuf.pop()

    def _draw(self, *key: int) -> float:
        """A uniform in [0, 1): the next of the shared stream, or with ``crn`` the one ``key`` names."""
        return keyed_uniform(self._crn_seed, *key) if self.crn else self._u()

    def _tool_draw(self, what: int, tool: int, j: int = 0) -> float:
        """A tool's next draw for ``what`` (its k-th breakdown, repair, or PM ``j``)."""
        if not self.crn:
            return self._u()
        k = self._tool_draws.get((what, tool, j), 0)
        self._tool_draws[(what, tool, j)] = k + 1
        return keyed_uniform(self._crn_seed, what, tool, j, k)

    def _uniform(self, mean: float, half: float, *key: int) -> float:
        """``mean`` +- ``half``, uniform: the stream's next draw, or with ``crn`` the one ``key`` names.
        (No draw when there is no noise: the one stream must advance exactly as it always did.)"""
        if not (self.noise and half > 0):
            return mean
        return mean + half * (2.0 * (keyed_uniform(self._crn_seed, *key) if self.crn else self._u()) - 1.0)

    def _exp(self, mean: float, u: float) -> float:
        return -mean * math.log(1.0 - u)

    # ------------------------------------------------------------------ setup
    def _push(self, t: float, kind: int, a: int = 0, b: float = 0.0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, a, b))

    def _start(self) -> None:
        m = self.m
        for w in m.wip:
            lot = self._new_lot(w["part"], w["priority"], w["pieces"], float(w["due"]), math.nan, w["step"])
            self._to_step(lot, skip_sampled=False)
        for k, o in enumerate(m.orders):
            self._push(o["start"], RELEASE, k)
        if not self.breakdowns:
            return
        for g in range(m.G):
            tools = self.group_tools[g]
            if m.delay_l[g] or not tools:
                continue
            n = len(tools)
            bd = m.data.breakdowns.get(m.data.area[g])
            for k, t in enumerate(tools):
                if bd is not None:
                    self._push(self._exp(bd[2], self._tool_draw(D_FIRST_DOWN, t)), DOWN, t, -1.0)
                for j, (by_pieces, every, dur, spread, first) in enumerate(m.data.pms.get(g, [])):
                    if by_pieces:
                        self.pm_counter[(t, j)] = (every - first + k * every / n) % every
                    else:
                        self._push((first - k * every / n) % every, PM, t, float(j))

    def _new_lot(self, part: int, prio: int, pieces: int, due: float, start: float, step: int) -> int:
        if self.n >= self.cap:
            grow = self.cap
            for name in ("arrive", "due", "spt", "rem"):
                setattr(self, name, np.concatenate([getattr(self, name), np.zeros(grow)]))
            for name in ("prio", "fam"):
                setattr(self, name, np.concatenate([getattr(self, name), np.zeros(grow, np.int64)]))
            self.cap += grow
        i = self.n
        self.n += 1
        self.part.append(part)
        self.step.append(step)
        self.pieces.append(pieces)
        self.state.append(WAITING)
        self.start.append(start)
        self.visits.append(0)
        self.due_l.append(due)
        self.due[i], self.prio[i] = due, prio
        self.n_wip += 1
        if due <= self.now:
            self.n_late += 1
        else:
            heapq.heappush(self.late_heap, (due, i))
        return i

    # ------------------------------------------------------------------ time and metrics
    def _advance_time(self, t: float) -> None:
        st = self.stats
        while self.now < t:
            nxt = t
            if self.late_heap and self.late_heap[0][0] < nxt:
                nxt = self.late_heap[0][0]
            if self.record_every > 0 and self.next_record < nxt:
                nxt = self.next_record
            dt = nxt - self.now
            st.wip_area += self.n_wip * dt
            st.late_area += self.n_late * dt
            self.now = nxt
            heap = self.late_heap
            while heap and heap[0][0] <= nxt:
                _, lot = heapq.heappop(heap)
                if self.state[lot] != DONE:
                    self.n_late += 1
            if self.record_every > 0 and nxt >= self.next_record:
                st.history.append((nxt, self.n_wip, self.n_queued, self.n_late, self.n_down, st.completed,
                                   st.tardiness_sum / max(st.completed, 1) / 60.0))
                self.next_record += self.record_every

    # ------------------------------------------------------------------ lots
    def _lot_time(self, lot: int, R: dict, s: int) -> tuple[float, float]:
        """(lot's processing time, tool hold time) of one lot at step s, without load/setup."""
        u = self._uniform(R["ptime"][s], R["pspread"][s], D_TIME, lot, s, self.visits[lot])
        per = R["per"][s]
        if per == PER_PIECE:
            pint = R["pint"][s]
            t = u + (self.pieces[lot] - 1) * pint if pint > 0 else u * self.pieces[lot]
            return t, t
        if per == PER_LOT and R["bint"][s] > 0:
            return u, min(u, R["bint"][s])
        return u, u

    def _to_step(self, lot: int, skip_sampled: bool = True) -> None:
        """Move a lot to its current step (skipping sampled-out steps); it arrives now."""
        R = self.m.L[self.part[lot]]
        s = self.step[lot]
        n = R["n"]
        if skip_sampled:
            sample = R["sample"]
            while s < n and sample[s] < 1.0 and self._draw(D_SAMPLE, lot, s, self.visits[lot]) >= sample[s]:
                s += 1
        self.step[lot] = s
        if s >= n:
            self._complete(lot)
            return
        g = R["group"][s]
        if self.m.delay_l[g]:
            t, _ = self._lot_time(lot, R, s)
            self.state[lot] = BUSY
            self._push(self.now + t + self.m.load_l[g], FINISH, lot)
            return
        self.state[lot] = QUEUED
        self.arrive[lot] = self.now
        self.spt[lot] = R["spt"][s]
        self.rem[lot] = R["rem"][s]
        self.fam[lot] = self.part[lot] * 100000 + s
        self.queues[g].append(lot)
        self.n_queued += 1
        self.dirty.add(g)

    def _complete(self, lot: int) -> None:
        st = self.stats
        self.state[lot] = DONE
        self.n_wip -= 1
        due = self.due_l[lot]
        if due <= self.now:
            self.n_late -= 1
        tard = self.now - due if self.now > due else 0.0
        st.completed += 1
        st.completed_wafers += self.pieces[lot]
        st.tardiness_sum += tard
        st.tardy += tard > 0
        if self.start[lot] == self.start[lot]:   # not nan: released during the run
            st.cycle_sum += self.now - self.start[lot]
            st.cycle_n += 1

    def _finish(self, lot: int) -> None:
        R = self.m.L[self.part[lot]]
        s = self.step[lot]
        if R["rwp"][s] > 0 and R["rwto"][s] >= 0 and self._draw(D_REWORK, lot, s, self.visits[lot]) < R["rwp"][s]:
            self.step[lot] = R["rwto"][s]
            self.visits[lot] += 1
        else:
            self.step[lot] = s + 1
        self.state[lot] = WAITING
        if self.step[lot] >= R["n"]:
            self._complete(lot)
            return
        d, spread = self.m.data.transport
        self._push(self.now + self._uniform(d, spread, D_MOVE, lot, s, self.visits[lot]), ARRIVE, lot)

    # ------------------------------------------------------------------ rules and legality
    def keys(self, lots: np.ndarray) -> dict[str, np.ndarray]:
        """Each rule's sort key for ``lots`` (smaller first)."""
        due = self.due[lots]
        return {"fifo": self.arrive[lots], "spt": self.spt[lots], "edd": due,
                "cr": (due - self.now) / np.maximum(self.rem[lots], 1.0)}

    def key(self, lots: np.ndarray, rule: str) -> np.ndarray:
        if rule == "fifo":
            return self.arrive[lots]
        if rule == "spt":
            return self.spt[lots]
        if rule == "edd":
            return self.due[lots]
        return (self.due[lots] - self.now) / np.maximum(self.rem[lots], 1.0)

    def order(self, lots: np.ndarray, key: np.ndarray, g: int | None = None) -> np.ndarray:
        """``lots`` best first by ``key``: hot lots first (``hot_first``), then, with
        ``setup_avoidance`` at a group ``g`` with setups, the lots that need no setup, then ``key``,
        then arrival."""
        keys = [self.arrive[lots], key]
        if self.setup_avoidance and g is not None and self.m.has_setups_l[g] and len(lots) > 1:
            keys.append(self.needs_setup(g, lots))
        if self.hot_first:
            keys.append(-self.prio[lots])
        return lots[np.lexsort(tuple(keys))]

    def legal(self, g: int) -> np.ndarray:
        q = np.asarray(self.queues[g], np.int64)
        if not len(q) or not self.m.batching_l[g]:
            return q
        fam = self.fam[q]
        ok = np.zeros(len(q), bool)
        for f in np.unique(fam).tolist():
            sel = fam == f
            part, s = divmod(f, 100000)
            R = self.m.L[part]
            if R["bmax"][s] <= 0:
                ok |= sel
                continue
            members = q[sel]
            oldest = float(self.arrive[members].min())
            # (the same expression as the re-check's time below, so that the re-check finds the batch legal)
            if sum(self.pieces[i] for i in members.tolist()) >= R["bmin"][s] or oldest + self.batch_wait <= self.now:
                ok |= sel
            elif oldest + self.batch_wait < self.check_at[g]:
                self.check_at[g] = oldest + self.batch_wait
                self._push(self.check_at[g], CHECK, g)
        return q[ok]

    def rule_choice(self, lots: np.ndarray, rule: str, g: int | None = None) -> int:
        return int(self.order(lots, self.key(lots, rule), g)[0])

    # ------------------------------------------------------------------ dispatching
    def _need(self, lot: int) -> int:
        return self.m.L[self.part[lot]]["setup"][self.step[lot]]

    def _pick_tool(self, g: int, lot: int) -> int:
        free = self.idle_tools[g]
        need = self._need(lot)
        if need >= 0:
            for k, t in enumerate(free):
                if self.tool_setup[t] == need:
                    return free.pop(k)
        return free.pop(0)

    def needs_setup(self, g: int, lots: np.ndarray) -> np.ndarray:
        have = {self.tool_setup[t] for t in self.idle_tools[g]}
        return np.array([(n := self._need(l)) >= 0 and n not in have for l in np.asarray(lots).tolist()], bool)

    def dispatch(self, g: int, lot: int, rule: str | None = None) -> None:
        """Start ``lot`` (and, at a batching step, its batch) on a free tool of group ``g``."""
        m = self.m
        st = self.stats
        st.decisions += 1
        tool = self._pick_tool(g, lot)
        R = m.L[self.part[lot]]
        s = self.step[lot]
        batch = [lot]
        queue = self.queues[g]
        if m.batching_l[g] and R["bmax"][s] > 0:
            q = np.asarray(queue, np.int64)
            fam = q[(self.fam[q] == self.fam[lot]) & (q != lot)]
            total = self.pieces[lot]
            if len(fam):
                for other in self.order(fam, self.arrive[fam]).tolist():
                    if total + self.pieces[other] > R["bmax"][s]:
                        break
                    batch.append(other)
                    total += self.pieces[other]
            st.batches += 1
        for b in batch:
            queue.remove(b)
            self.state[b] = BUSY
        self.n_queued -= len(batch)
        need = R["setup"][s]
        setup = m.setup_time(self.tool_setup[tool], need)
        if need >= 0:
            self.tool_setup[tool] = need
        t, hold = self._lot_time(lot, R, s)
        extra = setup + m.load_l[g]
        if self.tool_state[tool] != T_IDLE:
            raise RuntimeError(f"fab: tool {tool} of group {m.data.groups[g]} dispatched while not idle")
        self.tool_state[tool] = T_BUSY
        end = self.now + hold + extra
        self._push(end, FREE, tool)
        for b in batch:
            self._push(self.now + t + extra, FINISH, b)
        if self.check:
            self.jobs.append((tool, self.now, end, sum(self.pieces[b] for b in batch), tuple(batch), g))
        # PM counted in wafers.
        pms = m.data.pms.get(g)
        if pms:
            wafers = sum(self.pieces[b] for b in batch)
            for j, spec in enumerate(pms):
                key = (tool, j)
                if spec[0] and key in self.pm_counter:
                    self.pm_counter[key] += wafers
                    if self.pm_counter[key] >= spec[1]:
                        self.pm_counter[key] -= spec[1]
                        self.tool_pending[tool].append(self._pm_duration(g, j, tool))

    def _pm_duration(self, g: int, j: int, tool: int) -> float:
        _, _, dur, spread, _ = self.m.data.pms[g][j]
        if not (self.noise and spread > 0):
            return dur
        return dur + spread * (2.0 * self._tool_draw(D_PM, tool, j) - 1.0)

    def _go_down(self, tool: int, dur: float) -> None:
        g = self.tool_group[tool]
        self.tool_state[tool] = T_DOWN
        self.n_down += 1
        self.down_g[g] += 1
        self._push(self.now + dur, UP, tool)

    def _tool_free(self, tool: int) -> None:
        g = self.tool_group[tool]
        if self.tool_pending[tool]:
            self._go_down(tool, self.tool_pending[tool].pop(0))
            return
        self.tool_state[tool] = T_IDLE
        self.idle_tools[g].append(tool)
        if self.queues[g]:
            self.dirty.add(g)

    def _down_event(self, tool: int, which: float) -> None:
        g = self.tool_group[tool]
        if which < 0:   # breakdown
            mttf, mttr, _ = self.m.data.breakdowns[self.m.data.area[g]]
            dur = self._exp(mttr, self._tool_draw(D_UP, tool))
            self._push(self.now + dur + self._exp(mttf, self._tool_draw(D_DOWN, tool)), DOWN, tool, -1.0)
        else:           # calendar PM
            j = int(which)
            dur = self._pm_duration(g, j, tool)
            self._push(self.now + self.m.data.pms[g][j][1], PM, tool, which)
        if self.tool_state[tool] == T_IDLE:
            self.idle_tools[g].remove(tool)
            self._go_down(tool, dur)
        else:
            self.tool_pending[tool].append(dur)

    def _up(self, tool: int) -> None:
        self.n_down -= 1
        self.down_g[self.tool_group[tool]] -= 1
        self._tool_free(tool)

    def _release(self, k: int) -> None:
        o = self.m.orders[k]
        for _ in range(o["per_release"]):
            lot = self._new_lot(o["part"], o["priority"], o["pieces"], self.now + o["due_offset"] * self.m.due_scale,
                                self.now, 0)
            self.stats.released += 1
            self._to_step(lot)
        self._push(self.now + o["interval"] / self.rate, RELEASE, k)

    def advance(self, rule: str | None = None, until: float | None = None) -> Decision | None:
        """Run until a decision is due at an agent group with two or more legal lots (returned),
        taking every other decision with ``rule`` (default: ``default_rule``); None at the horizon,
        or at time ``until`` if that comes first (events at ``until`` and later wait for the next call)."""
        rule = rule or self.default_rule
        events, horizon = self.events, self.m.horizon if until is None else min(self.m.horizon, until)
        agent = self.agent_groups
        while True:
            while self.dirty:
                g = self.dirty.pop()
                while self.idle_tools[g] and self.queues[g]:
                    if len(self.queues[g]) == 1 and not self.m.batching_l[g]:
                        self.dispatch(g, self.queues[g][0], rule)
                        continue
                    lots = self.legal(g)
                    if not len(lots):
                        break
                    if len(lots) > 1 and agent[g]:
                        self.dirty.add(g)
                        self.stats.agent_decisions += 1
                        return Decision(g, lots)
                    self.dispatch(g, self.rule_choice(lots, rule, g) if len(lots) > 1 else int(lots[0]), rule)
            if not events or events[0][0] >= horizon:
                self._advance_time(horizon)
                return None
            t, _, kind, a, b = heapq.heappop(events)
            if t > self.now:
                self._advance_time(t)
            self.stats.events += 1
            if kind == ARRIVE:
                self._to_step(a)
            elif kind == FINISH:
                self._finish(a)
            elif kind == FREE:
                self._tool_free(a)
            elif kind == RELEASE:
                self._release(a)
            elif kind == DOWN or kind == PM:
                self._down_event(a, b)
            elif kind == UP:
                self._up(a)
            elif kind == CHECK:
                if t == self.check_at[a]:   # else a superseded re-check
                    self.check_at[a] = math.inf
                    self.dirty.add(a)

    def run(self, rule: str) -> Stats:
        """The whole horizon with one rule for every decision."""
        self.agent_groups[:] = False
        self.advance(rule)
        return self.stats

    def summary(self) -> dict[str, float]:
        st = self.stats
        days = self.m.horizon / 1440.0
        return {"mean_tardiness_h": st.tardiness_sum / max(st.completed, 1) / 60.0,
                "tardy_fraction": st.tardy / max(st.completed, 1),
                "mean_cycle_time_h": st.cycle_sum / st.cycle_n / 60.0 if st.cycle_n else float("nan"),
                "throughput_lots_per_day": st.completed / days,
                "throughput_wafers_per_day": st.completed_wafers / days,
                "completed": float(st.completed), "released": float(st.released),
                "mean_wip": st.wip_area / max(self.now, 1e-9), "late_lot_hours": st.late_area / 60.0,
                # Lots still in the fab and past due when the horizon ends: their tardiness is in no
                # mean above, so a dispatcher that holds late lots back would look better than it is.
                "late_wip_end": float(self.n_late), "wip_end": float(self.n_wip),
                "decisions": float(st.decisions), "agent_decisions": float(st.agent_decisions),
                "events": float(st.events), "sim_days": self.now / 1440.0}
