"""Read an SMT2020 fab (the tab-separated files under ``data/SMT2020_<fab>/``) into plain arrays.

All times are converted to minutes. What is read, per file (see ``data/README.md``):

- ``tool.txt.1l``: tool groups (``STNFAM``) with ``STNQTY`` tools each, the area (``STNGRP``,
  which the breakdown calendars name), batching (``BATCHCRITF`` set: batches of lots of the
  same route step, sizes in pieces), load and unload times;
- ``part.txt`` + ``route_N.txt``: each product's route: per step the tool group, the
  processing time ``uniform(PTIME - PTIME2, PTIME + PTIME2)`` and its unit (``per_piece``,
  ``per_lot``, ``per_batch``), ``PartInterval`` (per-piece cascading: a lot takes
  ``PTIME + (pieces - 1) * PartInterval``) and ``BatchInterval`` (per-lot cascading: the tool
  takes the next lot after that interval), min/max batch size (pieces), the setup it needs
  (``SETUP``, ``STIME``), sampling (``StepPercent``: a metrology step is done with that
  probability, else skipped), rework (``REWORK`` percent back to ``RWKSTEP``);
- ``setup.txt``: sequence-dependent setup times ``(current, new) -> minutes`` (an empty current
  setup: from any other setup);
- ``order.txt``: lot releases: a lot of ``PIECES`` wafers of ``PART`` every ``REPEAT`` minutes
  with priority ``PRIOR`` (10 regular, 20 hot, 30 super hot) and due date ``release + (DUE - START)``;
- ``WIP.txt``: the lots in the fab at time zero, each at ``CURSTEP`` with its due date;
- ``downcal.txt`` + ``attach.txt``: random breakdowns per area: exponential MTTF and MTTR,
  first occurrence exponential; ``pmcal.txt`` + ``attach.txt``: preventive maintenance per tool
  group: every ``MTBPM`` days of calendar time or ``MTBPM`` wafers processed by the tool
  (``mtbpm_by_pieces``), lasting ``uniform(MTTR - MTTR2, MTTR + MTTR2)``, first at ``FOA``;
- ``fromto.txt``: transport between steps, ``uniform(DTIME - DTIME2, DTIME + DTIME2)``.

Not modelled: critical queue times (``STEP_CQT``/``CQT``), minimum setup run lengths
(``setupgrp.txt``), the files' per-tool-group default rules (every rule here is applied fab-wide;
their setup ranking ``rank_RSETUP``, which every group with setups lists, is the simulator's
``setup_avoidance``).
"""
from __future__ import annotations

import csv
import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import EnvError

DATA_DIR = Path(__file__).resolve().parent / "data"
FABS = {"HVLM": "SMT2020_HVLM", "LVHM": "SMT2020_LVHM"}
_UNITS = {"min": 1.0, "hr": 60.0, "day": 1440.0, "sec": 1.0 / 60.0}
_EPOCH = _dt.datetime(2018, 1, 1)
PER_PIECE, PER_LOT, PER_BATCH = 0, 1, 2


@dataclass
class Route:
    """One product's route; every field an array over its steps."""

    part: str
    group: np.ndarray        # tool group index
    ptime: np.ndarray        # mean processing time (min), PTIME
    pspread: np.ndarray      # half-width of the uniform distribution (min), PTIME2
    per: np.ndarray          # PER_PIECE / PER_LOT / PER_BATCH
    part_interval: np.ndarray  # per-piece cascading interval (min), 0 if none
    batch_interval: np.ndarray  # per-lot cascading interval (min), 0 if none
    batch_min: np.ndarray    # pieces, 0 if not a batching step
    batch_max: np.ndarray
    setup: list[str]         # setup name needed, "" if none
    setup_time: np.ndarray   # the step's own setup time (min), used when setup.txt has none
    sample: np.ndarray       # probability the step is performed (StepPercent / 100; 1 if blank)
    rework_p: np.ndarray     # probability of rework after the step
    rework_to: np.ndarray    # step index to go back to (-1 none)
    step_id: np.ndarray      # the STEP column

    def __len__(self) -> int:
        return len(self.group)


@dataclass
class FabData:
    name: str
    groups: list[str]                 # tool group (STNFAM) names
    tools: np.ndarray                 # tools per group
    area: list[str]                   # STNGRP per group
    batching: np.ndarray              # bool per group
    load_time: np.ndarray             # load + unload (min) per group
    parts: list[str]
    routes: list[Route]
    setups: dict[tuple[str, str], float]   # (current, new) -> min; ("", new): from any
    orders: list[dict]                # part index, priority, pieces, interval, due_offset, name
    wip: list[dict]                   # part index, priority, pieces, step index, due (min)
    breakdowns: dict[str, tuple[float, float, float]]  # area -> (mttf, mttr, first-occurrence mean)
    pms: dict[int, list[tuple]] = field(default_factory=dict)  # group -> [(by_pieces, every, dur, spread, first)]
    transport: tuple[float, float] = (7.5, 2.5)

    @property
    def group_index(self) -> dict[str, int]:
        return {g: i for i, g in enumerate(self.groups)}


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise EnvError(f"SMT2020 file {str(path)!r} is missing. The fab env reads the testbed's files from "
                       f"{str(DATA_DIR)!r} (shipped with hdppo as package data); reinstall hdppo, or pass "
                       "data_dir= a folder holding SMT2020_HVLM/ and SMT2020_LVHM/ as distributed with the testbed.")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [{k.strip(): (v or "").strip() for k, v in r.items() if k is not None} for r in rows]


def _num(row: dict, key: str, path: Path, default: float | None = None) -> float:
    v = row.get(key, "")
    if v == "":
        if default is None:
            raise EnvError(f"SMT2020 file {str(path)!r}: column {key!r} is empty in row {row}; the file is not in "
                           "the testbed's format (see data/README.md).")
        return default
    try:
        return float(v)
    except ValueError:
        raise EnvError(f"SMT2020 file {str(path)!r}: column {key!r} holds {v!r}, not a number.") from None


def _unit(row: dict, key: str, path: Path) -> float:
    u = row.get(key, "") or "min"
    if u not in _UNITS:
        raise EnvError(f"SMT2020 file {str(path)!r}: unit {u!r} in column {key!r} is not one of {sorted(_UNITS)}.")
    return _UNITS[u]


def _minutes(stamp: str, path: Path) -> float:
    try:
        t = _dt.datetime.strptime(stamp, "%m/%d/%y %H:%M:%S")
    except ValueError:
        raise EnvError(f"SMT2020 file {str(path)!r}: date {stamp!r} is not MM/DD/YY HH:MM:SS.") from None
    return (t - _EPOCH).total_seconds() / 60.0


def load_fab(fab: str = "HVLM", data_dir: str | Path | None = None) -> FabData:
    """The fab ``"HVLM"`` or ``"LVHM"`` read from ``data_dir`` (default: the shipped copy)."""
    key = str(fab).upper()
    if key not in FABS:
        raise EnvError(f"fab {fab!r} is not an SMT2020 dataset; use one of {sorted(FABS)} (HVLM: 2 products, "
                       "high volume; LVHM: 10 products).")
    root = Path(data_dir) if data_dir is not None else DATA_DIR
    d = root / FABS[key]
    if not d.is_dir():
        raise EnvError(f"SMT2020 folder {str(d)!r} does not exist: data_dir must hold {FABS[key]}/ (the testbed's "
                       f"files). Leave data_dir unset to use the copy shipped with hdppo ({str(DATA_DIR)!r}).")
    tp = d / "tool.txt.1l"
    tools = _rows(tp)
    groups = [r["STNFAM"] for r in tools]
    gidx = {g: i for i, g in enumerate(groups)}
    counts = np.array([int(_num(r, "STNQTY", tp)) for r in tools], np.int64)
    area = [r["STNGRP"] for r in tools]
    batching = np.array([bool(r.get("BATCHCRITF")) for r in tools])
    load = np.array([_num(r, "LTIME", tp, 0.0) * _unit(r, "LTUNITS", tp) + _num(r, "ULTIME", tp, 0.0)
                     * _unit(r, "ULTUNITS", tp) for r in tools])
    pp = d / "part.txt"
    part_rows = _rows(pp)
    parts = [r["PART"] for r in part_rows]
    routes = []
    for r in part_rows:
        rp = d / r["ROUTEFILE"]
        steps = _rows(rp)
        if not steps:
            raise EnvError(f"SMT2020 route {str(rp)!r} has no steps.")
        unknown = sorted({s["STNFAM"] for s in steps} - set(gidx))
        if unknown:
            raise EnvError(f"SMT2020 route {str(rp)!r} names tool groups {unknown[:5]} that {str(tp)!r} does not list.")
        step_ids = [int(_num(s, "STEP", rp)) for s in steps]
        pos = {sid: k for k, sid in enumerate(step_ids)}
        per_map = {"per_piece": PER_PIECE, "per_lot": PER_LOT, "per_batch": PER_BATCH}
        bad = sorted({s["PTPER"] for s in steps} - set(per_map))
        if bad:
            raise EnvError(f"SMT2020 route {str(rp)!r}: PTPER {bad} is not per_piece, per_lot or per_batch.")
        routes.append(Route(
            part=r["PART"],
            group=np.array([gidx[s["STNFAM"]] for s in steps], np.int64),
            ptime=np.array([_num(s, "PTIME", rp) * _unit(s, "PTUNITS", rp) for s in steps]),
            pspread=np.array([_num(s, "PTIME2", rp, 0.0) * _unit(s, "PTUNITS", rp) for s in steps]),
            per=np.array([per_map[s["PTPER"]] for s in steps], np.int64),
            part_interval=np.array([_num(s, "PartInterval", rp, 0.0) * _unit(s, "PartIntUnits", rp) for s in steps]),
            batch_interval=np.array([_num(s, "BatchInterval", rp, 0.0) * _unit(s, "BatchIntUnits", rp) for s in steps]),
            batch_min=np.array([_num(s, "BATCHMN", rp, 0.0) for s in steps]),
            batch_max=np.array([_num(s, "BATCHMX", rp, 0.0) for s in steps]),
            setup=[s.get("SETUP", "") for s in steps],
            setup_time=np.array([_num(s, "STIME", rp, 0.0) * _unit(s, "STUNITS", rp) for s in steps]),
            sample=np.array([_num(s, "StepPercent", rp, 100.0) / 100.0 for s in steps]),
            rework_p=np.array([_num(s, "REWORK", rp, 0.0) / 100.0 for s in steps]),
            rework_to=np.array([pos.get(int(_num(s, "RWKSTEP", rp, -1)), -1) for s in steps], np.int64),
            step_id=np.array(step_ids, np.int64)))
    sp = d / "setup.txt"
    setups = {(r.get("CURSETUP", ""), r["NEWSETUP"]): _num(r, "STIME", sp) * _unit(r, "STUNITS", sp) for r in _rows(sp)}
    pidx = {p: i for i, p in enumerate(parts)}
    op = d / "order.txt"
    orders = []
    for r in _rows(op):
        if r["PART"] not in pidx:
            raise EnvError(f"SMT2020 file {str(op)!r}: part {r['PART']!r} is not in part.txt.")
        start = _minutes(r["START"], op)
        orders.append(dict(name=r["LOT"], part=pidx[r["PART"]], priority=int(_num(r, "PRIOR", op)),
                           pieces=int(_num(r, "PIECES", op)), start=start,
                           interval=_num(r, "REPEAT", op) * _unit(r, "RUNITS", op),
                           per_release=int(_num(r, "LOTSPERRPT", op, 1)),
                           due_offset=_minutes(r["DUE"], op) - start))
    wp = d / "WIP.txt"
    wip = []
    for r in _rows(wp):
        part = pidx.get(r["PART"])
        if part is None:
            raise EnvError(f"SMT2020 file {str(wp)!r}: part {r['PART']!r} is not in part.txt.")
        step = routes[part].step_id.searchsorted(int(_num(r, "CURSTEP", wp)))
        wip.append(dict(part=part, priority=int(_num(r, "PRIOR", wp)), pieces=int(_num(r, "PIECES", wp)),
                        step=int(min(step, len(routes[part]) - 1)), due=_minutes(r["DUE"], wp)))
    ap = d / "attach.txt"
    attach = {r["CALNAME"]: r for r in _rows(ap)}
    dp = d / "downcal.txt"
    breakdowns = {}
    for r in _rows(dp):
        a = attach.get(r["DOWNCALNAME"])
        foa = _num(a, "FOA", ap) * _unit(a, "FOAUNITS", ap) if a else _num(r, "MTTF", dp) * _unit(r, "MTTFUNITS", dp)
        res = a["RESNAME"] if a else r.get("IGNORE", "")
        breakdowns[res] = (_num(r, "MTTF", dp) * _unit(r, "MTTFUNITS", dp), _num(r, "MTTR", dp) * _unit(r, "MTTRUNITS", dp), foa)
    pmp = d / "pmcal.txt"
    pms: dict[int, list] = {}
    for r in _rows(pmp):
        a = attach.get(r["PMCALNAME"])
        if not a or a["RESNAME"] not in gidx:
            continue
        u = _unit(r, "MTTRUNITS", pmp)
        by_pieces = r.get("MTBPMUNITS") == "pieces"
        every = _num(r, "MTBPM", pmp) * (1.0 if by_pieces else _unit(r, "MTBPMUNITS", pmp))
        first = _num(a, "FOA", ap) * (1.0 if by_pieces else _unit(a, "FOAUNITS", ap))
        pms.setdefault(gidx[a["RESNAME"]], []).append(
            (by_pieces, every, _num(r, "MTTR", pmp) * u, _num(r, "MTTR2", pmp, 0.0) * u, first))
    fp = d / "fromto.txt"
    ft = _rows(fp)
    transport = (_num(ft[0], "DTIME", fp) * _unit(ft[0], "DUNITS", fp), _num(ft[0], "DTIME2", fp, 0.0) * _unit(ft[0], "DUNITS", fp)) if ft else (0.0, 0.0)
    return FabData(key, groups, counts, area, batching, load, parts, routes, setups, orders, wip, breakdowns, pms, transport)
