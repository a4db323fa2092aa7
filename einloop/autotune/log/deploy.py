"""Deploy time: run templates with the best configuration a tuning log recorded.

    with autotune.apply_history_best("tuning_logs/matmul.jsonl"):
        s, args = matmul(1024, 1024, 1024)      # the best logged config, no tuning

A workload the log does not cover gets the template's fallback config and one warning (naming
the tuned shapes of the same template, if any); ``strict=True`` raises instead.

The context also instantiates any task under its best logged candidate:

    with autotune.apply_history_best(log) as best:
        s, args = best.instantiate(task)        # the best logged config or step list

and serves auto-scheduled operators: inside it, ``autotune.auto_schedule(tensors)`` replays the best
logged step list of the operator's structure (any names) for this target, without measuring;
on a miss it returns the default schedule with one :class:`UntunedScheduleWarning`.
"""
from __future__ import annotations

import json
import os
import warnings

from ...codegen.target import Target
from ...errors import EinloopWarning, Error, TuningError, TuningLogError
from ..space.candidate import CandidateKind
from ..space.knobs import ConfigSpace
from ..task.base import TaskKind
from ..task.create import create_task
from ..task.context import DispatchContext, FallbackConfigWarning
from . import record as rec
from .database import Database, RecordStore, schedule_identity


class UntunedScheduleWarning(FallbackConfigWarning, EinloopWarning):
    """An auto-scheduled operator found no record in the log and got its default schedule (safe,
    parallel and vectorized, but untuned).  Silence with
    ``warnings.simplefilter("ignore", autotune.UntunedScheduleWarning)``."""


def untuned_message(task, reason) -> str:
    call = "autotune.auto_schedule(..., n_trial=200, log=LOG)"
    if task.module:
        args = " ".join(json.dumps(a) for a in task.args)
        call += f" or `einloop tune {task.module}:{task.name} --args {args} --log LOG`"
    return (f"no tuned schedule for {task.workload} [{task.dag_hash[:12]}] ({reason}); using "
            f"its untuned default schedule. Tune it with {call}, then deploy inside "
            "autotune.apply_history_best(LOG)")


class ApplyHistoryBest(DispatchContext):
    """A dispatch context answering each workload with its best logged config for *target*."""

    def __init__(self, logs, target="llvm", strict=False):
        self.target = str(Target.parse(target))
        self.strict = strict
        self.database = _database_of(logs)
        self.best = self.database.best(self.target)
        self._candidates = {}
        self._warned = set()
        self.hits, self.misses = 0, 0

    def lookup(self, workload, task=None):
        """``(candidate or None, reason)``: what this context answers for *workload* (a
        template's or, given its *task*, an auto-scheduled operator's), and why."""
        best = self.best.get(workload.key)
        if best is None:
            return None, self._miss_reason(workload)
        memo = workload.key if task is None else (workload.key, repr(getattr(task, "names", None)))
        cand = self._candidates.get(memo)
        if cand is None:
            task = task if task is not None else self._task_of(workload, best)
            try:
                cand = task.candidate_from_json(best.candidate)
            except TuningError as exc:
                what = "config" if best.candidate_kind is CandidateKind.CONFIG else "step list"
                raise TuningLogError(f"the logged best {what} of {workload} does not fit the "
                                     f"{best.kind.value} as it is now: {exc}") from None
            self._candidates[memo] = cand
        return cand, f"best of the log: {best.mean_cost * 1e3:.3f} ms"

    def _still_applying(self, task, exc):
        """``((schedule, args) or None, reason)``: the fastest logged schedule of *task* that
        applies, after its best failed with *exc*; warns once, and remembers the choice."""
        key = task.workload.key
        memo = (key, repr(getattr(task, "names", None)))
        seen = {schedule_identity(self.best[key])}
        tried = 1
        for r in self.database.query(workload=key, target=self.target):
            if schedule_identity(r) in seen:
                continue
            seen.add(schedule_identity(r))
            try:
                cand = task.candidate_from_json(r.candidate)
                got = task.instantiate(cand)
            except Error:
                tried += 1
                continue
            self._candidates[memo] = cand
            self._warn_stale(task, exc, f"deploying the fastest logged schedule that applies "
                                        f"({r.mean_cost * 1e3:.3f} ms; {tried} faster skipped)")
            return got, ""
        reason = (f"none of its {tried} logged schedule(s) applies with this version of einloop "
                  f"(the best: {type(exc).__name__}: {exc})")
        self._warn_stale(task, exc, "deploying its default schedule")
        return None, reason

    def _warn_stale(self, task, exc, what):
        if ("stale", task.workload.key) not in self._warned:
            self._warned.add(("stale", task.workload.key))
            warnings.warn(f"the best logged schedule of {task.workload} does not apply with this "
                          f"version of einloop ({type(exc).__name__}: {exc}); {what}. Retune "
                          "to log schedules of this version", rec.StaleRecordWarning, stacklevel=4)

    @staticmethod
    def _task_of(workload, best):
        """The template task of *workload* (a template's ``get_config()`` asks without one)."""
        return create_task(workload.template, workload.args, kwargs=dict(workload.kwargs))

    def _miss_reason(self, workload):
        if workload.kind is TaskKind.AUTO:
            return self._auto_miss_reason(workload)
        same = sorted({str(r.args) for r in self.best.values()
                       if r.name == workload.template and r.kind is workload.kind})
        if self.database.query(workload=workload.key):      # any target
            return "the log has records of this workload only for another target/CPU"
        if same:
            return f"the log tuned {workload.template} only for args {', '.join(same)}"
        return f"the log has no records of template {workload.template!r}"

    def _auto_miss_reason(self, workload):
        if self.database.query(workload=workload.key):      # any target
            return "the log has records of this operator only for another target/CPU"
        named = sorted({str(r.args) for r in self.database
                        if r.kind is TaskKind.AUTO and r.name == workload.template})
        if named:
            args = [a for a in named if a != "()"]
            return (f"the log tuned {workload.template} only for other shapes, dtypes or "
                    "expressions" + (f" (args {', '.join(args)})" if args else ""))
        return "the log has no records of an operator with this structure"

    def instantiate(self, task):
        """``(schedule, args)`` of *task* (a template task or an auto task) under its best logged
        candidate; on a miss, its reference candidate (a template's fallback config, an auto
        task's default schedule) and one warning per workload, or TuningError if ``strict``."""
        cand, reason = self.lookup(task.workload, task)
        if cand is not None:
            try:
                got = task.instantiate(cand)
            except Error as exc:                  # written by another version of einloop
                got, reason = self._still_applying(task, exc)
            if got is not None:
                self.hits += 1
                return got
        self.misses += 1
        if self.strict:
            raise TuningError(f"apply_history_best(strict=True): nothing tuned for "
                              f"{task.workload}: {reason}")
        if task.workload.key not in self._warned:
            self._warned.add(task.workload.key)
            if task.kind is TaskKind.AUTO:
                warnings.warn(untuned_message(task, reason), UntunedScheduleWarning, stacklevel=3)
            else:
                warnings.warn(f"nothing tuned for {task.workload} ({reason}); using its untuned "
                              "schedule", FallbackConfigWarning, stacklevel=2)
        return task.instantiate(task.reference_candidate())

    def query(self, workload):
        cfg, reason = self.lookup(workload)
        if cfg is not None:
            self.hits += 1
            return cfg
        self.misses += 1
        if self.strict:
            raise TuningError(f"apply_history_best(strict=True): no tuned config for {workload}: "
                              f"{reason}")
        if workload.key not in self._warned:
            self._warned.add(workload.key)
            warnings.warn(f"no tuned config for {workload} ({reason}); using the template's "
                          "fallback config", FallbackConfigWarning, stacklevel=4)
        return ConfigSpace()


def _database_of(logs) -> RecordStore:
    """One store of *logs*: a store, a log's path, or a list of paths and Records."""
    if isinstance(logs, RecordStore):
        return logs
    records = []
    for item in ([logs] if isinstance(logs, (str, os.PathLike)) else logs):
        if isinstance(item, rec.Record):
            records.append(item)
        else:
            if not os.path.exists(item):
                raise TuningLogError(f"apply_history_best: no tuning log at {item}")
            records.extend(Database.open(item))
    return Database.in_memory(records)


def apply_history_best(logs, target="llvm", strict=False) -> ApplyHistoryBest:
    """A context in which templates use the best config of *logs* (a path, paths and records,
    or a :class:`~.database.RecordStore`)."""
    return ApplyHistoryBest(logs, target, strict)
