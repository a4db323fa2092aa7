"""Tuning an operator with symbolic extents: measured at the sizes the user names, dispatched by
size at run time.

A symbolic operator has no single best schedule: the one for ``n = 1`` (one thread, narrow tiles)
and the one for ``n = 2048`` (every core, wide tiles) differ, yet each is valid for every ``n``.
So the operator is bound at each *hint* size (``te.bind.bind_sizes``: the same names, ints
for the extents) and tuned there as an ordinary static operator; its records carry, besides the
bound operator's workload key, the symbolic operator's key and the sizes (``task.dynamic``).  The
best step list of each size is replayed on the symbolic declaration (step lists name loops, and
splits by constants apply to symbolic extents alike) and built; the result is a
:class:`~einloop.schedule.dispatch.SizeDispatch` that ``build`` compiles once per schedule into a
kernel that runs each call with the schedule tuned nearest its sizes.

A logged step list that does not replay or build symbolically is skipped (the next best of that
size is tried) and counted, never raised; a size with none left falls back to the default
schedule.
"""
from __future__ import annotations

import itertools
import numbers
import warnings

from ...errors import Error, TuningError
from ...te.dag import ComputeDAG
from ...te.bind import bind_sizes, shape_vars_of

#: sizes tuned when the user names none (per symbolic extent)
DEFAULT_HINTS = (1, 16, 256, 2048)
#: at most this many size points (the product over extents) are tuned
MAX_POINTS = 16
#: logged step lists tried per size before falling back to the default schedule
MAX_REPLAYS = 8


def has_symbolic_extents(tensors) -> bool:
    """Does the operator of *tensors* have a symbolic extent?"""
    return bool(shape_vars_of(tensors))


def dynamic_key(tensors) -> str:
    """The symbolic operator's structural hash: what its records are grouped by."""
    from ..task.auto import outputs_of
    return ComputeDAG(outputs_of(tensors)).structural_hash()


def hint_points(tensors, shape_hints=None) -> list:
    """The size points to tune: ``[{name: int}]``, every combination of each extent's hints
    (``shape_hints``: ``{name: [sizes]}``; unnamed extents get DEFAULT_HINTS)."""
    svars = shape_vars_of(tensors)
    names = [v.name for v in svars]
    hints = {} if shape_hints is None else shape_hints
    if not isinstance(hints, dict):
        raise TuningError(f"shape_hints must be a dict {{extent name: [sizes]}}, got {hints!r}")
    unknown = sorted(set(hints) - set(names))
    if unknown:
        raise TuningError(f"shape_hints names {', '.join(map(repr, unknown))}, which the operator "
                          f"has no symbolic extent of; its extents are {', '.join(names)}")
    per = []
    for v in svars:
        sizes = hints.get(v.name, DEFAULT_HINTS)
        if isinstance(sizes, numbers.Integral):
            sizes = [sizes]
        try:
            sizes = sorted(set(sizes))
        except TypeError:
            raise TuningError(f"shape_hints[{v.name!r}] must be a list of sizes, got "
                              f"{sizes!r}") from None
        low = max(1, v.min_value)
        bad = [x for x in sizes if isinstance(x, bool) or not isinstance(x, numbers.Integral)
               or x < low]
        if not sizes or bad:
            raise TuningError(f"shape_hints[{v.name!r}] must be a non-empty list of ints >= "
                              f"{low}, got {hints.get(v.name)!r}")
        per.append([int(x) for x in sizes])
    points = [dict(zip(names, combo)) for combo in itertools.product(*per)]
    if len(points) > MAX_POINTS:
        raise TuningError(f"shape_hints give {len(points)} size combinations ("
                          f"{' x '.join(str(len(p)) for p in per)}); tune at most {MAX_POINTS}: "
                          "name fewer sizes per extent")
    return points


def bound_task(tensors, sizes, target, key=None):
    """The AutoTask of the operator bound at *sizes*, marked as a point of the symbolic one."""
    from ..task.auto import AutoTask
    task = AutoTask.of_tensors(bind_sizes(tensors, sizes), target)
    # sizes as [name, value] pairs in the order of the extents: a declaration with other names
    # takes them by position (the key ignores names)
    order = [v.name for v in shape_vars_of(tensors)]
    task.dynamic = {"key": key or dynamic_key(tensors),
                    "sizes": [[name, int(sizes[name])] for name in order]}
    return task


class _Collect:
    """Tuner callback: keep every measured candidate as a Record (for a job without a log)."""

    def __init__(self, records):
        self.records = records

    def __call__(self, tuner, candidates, results):
        from ..log import record as rec
        self.records.extend(rec.decode(rec.encode(tuner.task, c, r))
                            for c, r in zip(candidates, results))


def tune(tensors, n_trial, shape_hints, log, target, make_tuner, time_budget_s=None,
         measure_option=None, quiet=False, cross_check=True):
    """Tune *tensors* at each hint point (*n_trial* split evenly among them); the dispatch of
    the tuned schedules, as :func:`dispatch_from_records` makes it.

    cross_check: then measure the best schedules of each point side by side at the points and
    the powers of two between them (:mod:`.cross_sizes`; extra measurements beyond *n_trial*),
    so that each size runs the schedule measured fastest near it, not the one tuned nearest."""
    from ...codegen.target import Target
    from ..log import record as rec
    from .cross_sizes import cross_measure
    from ..measure.common import settled
    points = hint_points(tensors, shape_hints)
    # as the round measures (each measurement 20 ms at least), so that the searches rank tiny
    # parallel kernels as they run back to back, not by their threads' wake-up
    search_option = settled(measure_option)
    key = dynamic_key(tensors)
    per = max(1, int(n_trial) // len(points))
    budget = None if time_budget_s is None else time_budget_s / len(points)
    records = []
    # with a log, the dispatch is made from it (earlier jobs' records of these sizes count too);
    # without, from the records kept here
    callbacks = [rec.log_to_file(log)] if log is not None else [_Collect(records)]
    for sizes in points:
        task = bound_task(tensors, sizes, target, key)
        make_tuner(task).tune(per, measure_option=search_option, callbacks=callbacks,
                              time_budget_s=budget, quiet=quiet)
    if cross_check:
        cross_measure(tensors, rec.load(log) if log is not None else list(records), points,
                      key, str(Target.parse(target)), callbacks, measure_option, quiet)
    if log is not None:
        records = rec.load(log)
    dispatch, _ = dispatch_from_records(tensors, records, target)
    if dispatch is None:
        raise TuningError(f"auto_schedule: no trial finished at any of the sizes "
                          f"{points} (interrupted before the first result)")
    return dispatch


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
    the latest cross-size round, where that measured the size)."""
    from ...codegen.build import build
    from ...codegen.target import Target
    from ...schedule.dispatch import SizeDispatch
    from ...schedule.replay import replay
    from ..task.auto import outputs_of
    from ..space.candidate import StepsCandidate
    from .cross_sizes import latest_round, measured_for, size_of
    from ..task.step_names import translate_steps
    key, target = dynamic_key(tensors), str(Target.parse(target))
    outs = outputs_of(tensors)
    names = [v.name for v in shape_vars_of(tensors)]
    # a size measured in the latest round of side-by-side measurements (cross_sizes) is decided
    # by that round alone: times logged at other moments do not compare
    last = latest_round(records, key, target)
    groups, in_round = {}, {}
    for r in records:
        values = size_of(r, names) if r.ok and measured_for(r, key, target) else None
        if values is not None:
            size = tuple(zip(names, values))
            groups.setdefault(size, []).append(r)
            if last is not None and r.dynamic.get("round") == last:
                in_round.setdefault(size, []).append(r)
    groups.update(in_round)
    stats = ReplayStats()
    if not groups:
        return None, stats
    cases = []
    for sizes, recs in sorted(groups.items()):
        stats.sizes.append(dict(sizes))
        schedule = None
        for r in sorted(recs, key=lambda x: x.mean_cost)[:MAX_REPLAYS]:
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
    from ...codegen.build import build
    from ...schedule.schedule import Schedule
    from ...schedule.replay import replay
    from ..task.auto import outputs_of
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
