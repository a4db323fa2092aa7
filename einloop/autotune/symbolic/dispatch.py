"""The size dispatch of a symbolic operator, made from its records.

The best step list of each size the records measured is replayed on the symbolic declaration
(step lists name loops, and splits by constants apply to symbolic extents alike) and built; the
result is a :class:`~einloop.schedule.dispatch.SizeDispatch` that ``build`` compiles once per
schedule into a kernel that runs each call with the schedule tuned nearest its sizes.

A logged step list that does not replay or build symbolically is skipped (the next best of that
size is tried) and counted, never raised; a size with none left falls back to the default
schedule.
"""
from __future__ import annotations

import warnings

from ...codegen.build import build
from ...codegen.target import Target
from ...errors import Error
from ...schedule.dispatch import SizeDispatch
from ...schedule.schedule import Schedule
from ...schedule.replay import replay
from ..log.database import as_store
from ..space.candidate import StepsCandidate
from ..task.base import outputs_of
from ..task.step_names import translate_steps
from .points import bound_task, extent_names, latest_round, point_records, round_of, size_of, \
    symbolic_key

#: logged step lists tried per size before falling back to the default schedule
MAX_REPLAYS = 8


class ReplayStats:
    """What building a dispatch from records did: sizes found, step lists skipped and why."""

    def __init__(self):
        self.sizes, self.skipped, self.fallbacks, self.reasons = [], 0, 0, []

    def __repr__(self):
        return (f"ReplayStats({len(self.sizes)} sizes, {self.skipped} step lists skipped, "
                f"{self.fallbacks} default schedules)")


def dispatch_from_records(tensors, records, target="llvm"):
    """``(SizeDispatch or None, ReplayStats)``: for each size the records of this symbolic
    operator were measured at, its fastest step list that replays and builds on *tensors* (of
    the latest cross-size round, where that measured the size).  *records*: a record store
    (:class:`~..log.database.RecordStore`) or Records."""
    db = as_store(records)
    key, target = symbolic_key(tensors), str(Target.parse(target))
    outs = outputs_of(tensors)
    names = extent_names(tensors)
    # a size measured in the latest round of side-by-side measurements (cross_sizes) is decided
    # by that round alone: times logged at other moments do not compare
    last = latest_round(db, key, target)
    groups, in_round = {}, {}
    for r in point_records(db, key, target):            # fastest first
        values = size_of(r, names)
        if values is not None:
            size = tuple(zip(names, values))
            groups.setdefault(size, []).append(r)
            if last is not None and round_of(r) == last:
                in_round.setdefault(size, []).append(r)
    groups.update(in_round)
    stats = ReplayStats()
    if not groups:
        return None, stats
    cases = []
    for sizes, recs in sorted(groups.items()):
        stats.sizes.append(dict(sizes))
        schedule = None
        for r in recs[:MAX_REPLAYS]:
            try:
                steps = StepsCandidate.from_json(r.candidate["steps"]).steps
                steps = translate_steps(steps, outs, r.candidate.get("names"))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    s = replay(steps, outs)
                    build(s, tensors, target=target)      # compiled once: build reuses it
            except Error as exc:
                stats.skipped += 1
                stats.reasons.append(f"{dict(sizes)}: {exc}")
                continue
            schedule = s
            break
        if schedule is None:
            stats.fallbacks += 1
            schedule = default_schedule(tensors, dict(sizes), target)
        cases.append((dict(sizes), schedule))
    return SizeDispatch(cases), stats


def default_schedule(tensors, sizes, target="llvm"):
    """The auto-scheduler's default (untuned) schedule of the operator at *sizes*, replayed on
    the symbolic declaration; the plain root schedule if even that does not replay."""
    outs = outputs_of(tensors)
    try:
        steps = bound_task(tensors, sizes, target).default_steps()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            s = replay(steps, outs)
            build(s, tensors, target=target)
        return s
    except Error:
        return Schedule(outs)
