"""The record database: every question asked of tuning records goes through one type.

"The records of this workload (or of this symbolic operator) on this target, error-free, fastest
first" is what resuming a tuner, deploying the best config, choosing the contenders of a
cross-size round and building a size dispatch all ask.  :class:`Database` answers it from
memory: a JSON Lines log is read once, when the first question is asked, and what the job
measures afterwards is appended to the file (one durable write per batch, see
:func:`.record.append`) and to the records in memory, so a job that tunes several tasks against
one log parses it once.

Records another process appends to the same file after it was read are not seen by this
database (open a new one to see them), as a tuner never saw them while it ran.

:class:`RecordStore` is what the callers need of a database; a store shared by a cluster, or
kept in SQLite, would implement it and be passed where a :class:`Database` is today.
"""
from __future__ import annotations

import enum
import json
import os
from typing import Iterable, Iterator, Protocol, runtime_checkable

from ...errors import TuningLogError
from . import record as rec


class Order(enum.Enum):
    """The order a query returns records in."""
    FASTEST = "fastest"     # by mean cost, errors last; ties in the order written
    WRITTEN = "written"     # the order they were measured (the log's line order)


@runtime_checkable
class RecordStore(Protocol):
    """What the tuners, the deploy-time lookup and the symbolic-extent tuning ask of records."""

    def query(self, *, workload: str | None = None, symbolic_key: str | None = None,
              target: str | None = None, ok_only: bool = True,
              order: Order = Order.FASTEST) -> list:
        """The records of *workload* (a workload key) or of the symbolic operator
        *symbolic_key* (neither: all), on *target* (None: any), error-free ones only unless
        ``ok_only=False``, in *order*."""

    def best(self, target: str | None = None) -> dict:
        """``{workload key: the record of its fastest schedule}`` (on *target*, if given), each
        schedule judged by its typical error-free measurement (:func:`typical_best`)."""

    def append(self, task, candidates, results, final_round=None) -> list:
        """Store the measurements of *candidates* of *task* (of final round *final_round*, if
        given); their records."""

    def __iter__(self) -> Iterator:
        """Every record, in the order written."""

    def __len__(self) -> int:
        ...


class Database:
    """Tuning records in memory, backed by the JSON Lines log at *path* (None: memory only).

    The log is read on the first question (:meth:`load` reads it now); :meth:`append` writes
    through.  Use :meth:`open` for a log that must exist, :meth:`in_memory` for records
    that are not to be written anywhere.
    """

    def __init__(self, path=None):
        self.path = None if path is None else os.fspath(path)
        self._records = None                # read on first use
        self._by_workload = {}
        self._by_symbolic = {}

    @classmethod
    def open(cls, path) -> Database:
        """The database of the existing log at *path*, read now (TuningLogError if absent)."""
        if not os.path.exists(path):
            raise TuningLogError(f"no tuning log at {path}")
        return cls(path).load()

    @classmethod
    def in_memory(cls, records: Iterable = ()) -> Database:
        """A database of *records* that writes nowhere."""
        db = cls(None)
        db._records = []
        for r in records:
            db._index(r)
        return db

    def load(self) -> Database:
        """Read the log now, if it has not been read (a missing file has no records)."""
        if self._records is None:
            self._records = []
            for r in (rec.load(self.path) if self.path is not None else ()):
                self._index(r)
        return self

    def _index(self, r):
        self._records.append(r)
        self._by_workload.setdefault(r.workload, []).append(r)
        key = r.size_point.get("key")
        if key is not None:
            self._by_symbolic.setdefault(key, []).append(r)

    # what is stored ------------------------------------------------------------------------
    def __iter__(self):
        return iter(self.load()._records)

    def __len__(self):
        return len(self.load()._records)

    def __repr__(self):
        where = self.path or "memory"
        size = "not read yet" if self._records is None else f"{len(self._records)} records"
        return f"Database({where}, {size})"

    def append(self, task, candidates, results, final_round=None) -> list:
        """Write one record per measured candidate of *task* to the log (one durable append)
        and keep them; the records, as reading the log back would give them.  *final_round*:
        the id of the final round that measured them (:mod:`~..search.finals`)."""
        lines = [rec.encode(task, c, r, final_round=final_round)
                 for c, r in zip(candidates, results)]
        if self.path is not None:
            rec.append(self.path, lines)
        records = [rec.decode(line) for line in lines]
        if self._records is not None:           # not read yet: the read will find them
            for r in records:
                self._index(r)
        return records

    # questions -------------------------------------------------------------------------------
    def query(self, *, workload=None, symbolic_key=None, target=None, ok_only=True,
              order=Order.FASTEST) -> list:
        """See :meth:`RecordStore.query`."""
        self.load()
        if workload is not None and symbolic_key is not None:
            raise TypeError("query: give a workload key or a symbolic key, not both")
        if workload is not None:
            found = self._by_workload.get(workload, ())
        elif symbolic_key is not None:
            found = self._by_symbolic.get(symbolic_key, ())
        else:
            found = self._records
        out = [r for r in found if (target is None or r.target == target)
               and (r.ok or not ok_only)]
        if order is Order.FASTEST:
            out.sort(key=lambda r: r.mean_cost)     # stable: ties stay in the order written
        return out

    def best(self, target=None) -> dict:
        """See :meth:`RecordStore.best`: per workload, :func:`typical_best` of its records."""
        per_workload = {}
        for r in self.query(target=target):
            per_workload.setdefault(r.workload, []).append(r)
        return {w: typical_best(rs) for w, rs in per_workload.items()}


def as_store(records) -> RecordStore:
    """*records* as a store: a store as it is, an iterable of Records in memory."""
    return records if isinstance(records, RecordStore) else Database.in_memory(records)


def schedule_identity(record) -> str:
    """What makes two records measurements of one schedule: the same candidate (config or step
    list), as canonical JSON."""
    return json.dumps(record.candidate, sort_keys=True)


def typical(values, key=None):
    """The typical one of *values* (measurements of one schedule: records, or costs), by
    *key*: the median, the slower one of two (a measurement can be lucky, caught at a quiet
    moment of a shared machine, but rarely slower than the kernel is)."""
    ordered = sorted(values, key=key)
    return ordered[len(ordered) // 2]


def by_schedule(records) -> dict:
    """*records* grouped per workload and schedule (:func:`schedule_identity`), in the order
    of each group's first record."""
    groups = {}
    for r in records:
        groups.setdefault((r.workload, schedule_identity(r)), []).append(r)
    return groups


def typical_best(records):
    """The record standing for the fastest schedule among error-free *records* of one workload,
    each schedule judged by its :func:`typical` measurement: a schedule measured once counts as
    measured, one the tuner confirmed counts at its median, so the fastest record of one lucky
    measurement does not stand for a schedule that measured slower again.  Where a final round
    decides (:func:`deciding_round`), only its measurements count: they were taken side by
    side, while the search's were taken minutes apart on a machine whose speed drifts.  Ties:
    the first of *records*."""
    records = [r for r in records if r.ok]
    final = deciding_round(records)
    if final is not None:
        records = [r for r in records if r.final_round == final]
    return fastest_schedules(records, 1)[0]


def fastest_schedules(records, n) -> list:
    """The records standing for the *n* fastest distinct schedules among error-free *records*
    of one workload, each schedule by its :func:`typical` measurement, fastest first (ties: in
    the order of *records*)."""
    standing = [typical(g, key=_cost) for g in by_schedule([r for r in records if r.ok]).values()]
    return sorted(standing, key=_cost)[:n]


def deciding_round(records):
    """The id of the final round (:mod:`~..search.finals`) that decides among *records* of one
    workload: the latest, unless a search measured a schedule after it began (that schedule
    was not in it, so the round no longer has the last word).  None if none decides."""
    rounds = {}
    for r in records:
        if r.final_round is not None:
            rounds[r.final_round] = min(rounds.get(r.final_round, r.timestamp), r.timestamp)
    if not rounds:
        return None
    latest = max(rounds)
    began = rounds[latest]
    if any(r.final_round is None and r.timestamp > began for r in records):
        return None
    return latest


def _cost(record):
    return record.mean_cost


def pick_best(records, target=None) -> dict:
    """The record of the fastest schedule per workload of *records* (optionally only for
    *target*), each schedule judged by its typical error-free measurement."""
    return as_store(records).best(target)


class log_to_file:                                   # noqa: N801  (a callback, named like TVM's)
    """Tuner callback: append every measured candidate to the log at *path* (or to a
    :class:`RecordStore`).

    A tuner given this callback also resumes from it: candidates already there are not
    measured again.  The log is read once, however many tuners the callback serves.
    """

    def __init__(self, path):
        self.database = path if isinstance(path, RecordStore) else Database(path)
        self.path = getattr(self.database, "path", None)

    def __call__(self, tuner, candidates, results):
        self.database.append(tuner.task, candidates, results)
