"""Tuning logs: JSON Lines, one record per measured candidate.

A record holds the schema version, the task (``task.to_json()``: template or DAG function,
module, arguments, target, CPU, workload key, flops; an auto-scheduled operator also its DAG's
structural hash, which is its workload key, and its name table), the candidate (``"config"``:
index and readable entities of a template config; or ``"steps"``: a replayable step list, see
:mod:`.candidate`, with ``"config_index"`` for an auto-scheduled config), the result (costs or
error) and a timestamp; a candidate measured on a Dask cluster worker also names it
(``"result": {"machine": ADDRESS}``, optional), and a measurement of the final round that
compares a search's best schedules side by side carries its id (``"final_round"``, optional).
Template records are written exactly as before step lists existed, so old logs load
unchanged.  Logs are only ever appended to, one whole line per write, so a killed job leaves at
most one truncated last line, which readers skip with a warning.

This module reads and writes lines; questions about records (this workload's, fastest first;
the best of each) are asked of :mod:`.database`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import json
import os
import warnings

from ...errors import EinloopWarning, TuningLogError
from ...version import __version__
from ..space.candidate import CandidateKind, check_record_candidate, record_kind
from ..measure.status import MeasureErrorNo
from ..task.base import TaskKind

SCHEMA_VERSION = 1
DEFAULT_DIR = "tuning_logs"


class TruncatedLogWarning(UserWarning):
    """A log ended in a partial line (a job was killed while writing); the line was skipped."""


class StaleRecordWarning(EinloopWarning):
    """Records of an auto-scheduled operator were written by another version of einloop.

    - Their config index makes another step list now (the auto-scheduler's knobs changed, as
      when stages of one name got knobs of their own): a tuning job does not resume from them
      (their trials are measured again); deployment still replays their step lists, which do
      not depend on the space.
    - A step of the best one no longer applies (an intrinsic or a primitive changed): deployment
      takes the fastest logged schedule that does, or the default schedule.  Retune to log
      schedules of this version."""


@dataclass(frozen=True)
class Record:
    """One measured candidate, as read from a log.

    ``name`` is the template's or the DAG function's (``kind`` says which); ``candidate`` is the
    record's candidate field, ``{"config": {...}}`` or ``{"steps": [...]}`` (checked on
    reading; ``task.candidate_from_json(candidate)`` makes the candidate).
    """
    name: str
    args: tuple
    kwargs: dict
    target: str
    cpu: str
    workload: str
    candidate: dict
    costs: tuple
    error_no: MeasureErrorNo
    error_msg: str
    timestamp: float
    extra: dict = field(default_factory=dict)
    module: str = ""
    flop: int = 0
    error_kind: str = ""
    kind: TaskKind = TaskKind.TEMPLATE
    module_file: str = ""
    size_point: dict = field(default_factory=dict)  # the task's "dynamic" field: a SizePoint
    machine: str = ""       # the cluster worker that measured it ("" for a local job)
    #: the final round that measured it (:mod:`~..search.finals`), None for a search's trial
    final_round: int | None = None

    @property
    def template(self):
        return self.name

    @property
    def candidate_kind(self) -> CandidateKind:
        return record_kind(self.candidate, "record")

    @property
    def config(self) -> dict:
        """The template config of the record ({} for a step list)."""
        return self.candidate.get("config", {})

    @property
    def ok(self):
        return self.error_no == MeasureErrorNo.NO_ERROR and bool(self.costs)

    @property
    def mean_cost(self):
        return sum(self.costs) / len(self.costs) if self.ok else float("inf")

    @property
    def gflops(self):
        return self.flop / self.mean_cost / 1e9 if self.ok and self.flop else 0.0

    @property
    def index(self):
        return int(self.config.get("index", -1))


def encode(task, candidate, result, extra=None, final_round=None) -> str:
    """The JSON line of one measurement of *candidate* (a config or a step list) of *task*;
    *final_round*: the id of the final round it is part of (:mod:`~..search.finals`)."""
    error_no = MeasureErrorNo(result.error_no)
    rec = {
        "version": SCHEMA_VERSION,
        "einloop": __version__,
        "task": task.to_json(),
        **task.candidate(candidate).to_record(),
        "result": {"costs": list(result.costs), "error_no": int(error_no),
                   "error_kind": error_no.name,
                   "error_msg": result.error_msg, "all_cost": result.all_cost},
        "timestamp": result.timestamp,
    }
    if getattr(result, "machine", ""):     # measured on a cluster worker: which one
        rec["result"]["machine"] = result.machine
    if extra:
        rec["extra"] = extra
    if final_round is not None:
        rec["final_round"] = int(final_round)
    return json.dumps(rec, sort_keys=True)


def decode(line, where="log") -> Record:
    """Parse one log line; raises TuningLogError naming *where* if it is not a valid record."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TuningLogError(f"{where}: not a JSON record ({exc.msg} at column {exc.colno})") \
            from None
    if not isinstance(d, dict) or "version" not in d:
        raise TuningLogError(f"{where}: not an einloop tuning record (no 'version' field)")
    if d["version"] != SCHEMA_VERSION:
        raise TuningLogError(f"{where}: record of schema version {d['version']!r}; this einloop "
                             f"reads version {SCHEMA_VERSION}. Re-tune, or read the log with "
                             f"the einloop version that wrote it ({d.get('einloop', '?')})")
    try:
        t, r = d["task"], d["result"]
        kind = TaskKind(t.get("kind", TaskKind.TEMPLATE.value))
        name = t["template"] if kind is TaskKind.TEMPLATE else t["function"]
        cand_kind = record_kind(d, where)
        candidate = {cand_kind.value: d[cand_kind.value]}
        if kind is TaskKind.AUTO:           # what replaying it needs travels with the steps
            candidate.update({k: v for k, v in (("config_index", d.get("config_index")),
                                                ("names", t.get("names"))) if v is not None})
        record = Record(name, tuple(_tuples(a) for a in t["args"]), dict(t.get("kwargs", {})),
                        t["target"], t.get("cpu", ""), t["workload"], candidate,
                        tuple(float(c) for c in r["costs"]),
                        MeasureErrorNo.from_log(int(r["error_no"])),
                        r.get("error_msg", ""), float(d.get("timestamp", 0.0)), d.get("extra", {}),
                        t.get("module", "") or "", int(t.get("flop", 0)), r.get("error_kind", ""),
                        kind, t.get("module_file", "") or "", dict(t.get("dynamic") or {}),
                        str(r.get("machine", "") or ""), _final_round(d.get("final_round")))
    except (KeyError, TypeError, ValueError) as exc:
        raise TuningLogError(f"{where}: record is missing or has a bad field ({exc})") from None
    check_record_candidate(d, where)
    return record


def _final_round(value):
    """A record's ``final_round`` field: None (a search's trial) or the round's int id."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"final_round {value!r} is not an int")
    return value


def _tuples(a):
    return tuple(_tuples(x) for x in a) if isinstance(a, list) else a


def load(path):
    """All records of the log at *path* (a missing file has none)."""
    if not os.path.exists(path):
        return []
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:                 # a folder, no permission, ...
        raise TuningLogError(f"cannot read the tuning log {path}: {exc.strerror}") from None
    lines = data.split(b"\n")
    truncated = bool(lines) and lines[-1] != b""
    records = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        is_last = n == len(lines)
        try:
            records.append(decode(raw.decode("utf-8", "replace"), f"{path}:{n}"))
        except TuningLogError:
            if is_last and truncated:
                warnings.warn(f"{path}:{n}: skipped a truncated last record (the job that wrote "
                              "it was probably killed)", TruncatedLogWarning, stacklevel=2)
                continue
            raise
    return records


def append(path, lines):
    """Append whole lines to the log at *path*, creating its folder; durable on return."""
    if not lines:
        return
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        prefix = b""
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    prefix = b"\n"       # end a truncated line so new records stay whole
        payload = prefix + "".join(line + "\n" for line in lines).encode("utf-8")
        os.write(fd, payload)            # one write: O_APPEND keeps it in one piece
        os.fsync(fd)
    finally:
        os.close(fd)
