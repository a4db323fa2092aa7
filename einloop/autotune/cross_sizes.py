"""Choosing between the schedules of a symbolic operator by measuring them at other sizes.

Tuning at the hint sizes gives one best schedule per hint, but a call arrives at any size, and
the schedule tuned *nearest* a size is often not the fastest there:

- a schedule whose parallel loop has two blocks at ``n = 256`` has three at ``n = 333``, so one
  thread of two does twice the work (seen here: 6.9 ms, where the schedule tuned at 2048 takes
  4.4 ms);
- a short search at one hint may miss what the search at another found (seen here: at ``n = 256``
  the best schedule tuned at 16 beat the best tuned at 256 by 10%).

So after the searches, the best few step lists of each hint are measured at every *probe* size:
the hints and the geometric midpoints between neighbouring hints (where a call is farthest from
any hint).  These are ordinary measurements of the operator bound at that size (isolated,
checked against the reference, logged like any trial), so the dispatch made from the records
simply takes the fastest step list measured at each size, probes included, and
``apply_history_best`` replays it without measuring.
"""
from __future__ import annotations

import itertools
import json
import math

from ..errors import Error
from ..te.symbolic import shape_vars_of

#: best distinct step lists of each tuned size that are measured at the other sizes
TOP_PER_SIZE = 2
#: at most this many cross measurements per job: beyond it, only the hints are probed
MAX_CROSS = 160


def probe_points(points) -> list:
    """The sizes to measure at: per extent, its tuned sizes and the rounded geometric midpoint
    of each neighbouring pair; every combination over the extents, as ``{name: int}``."""
    names = list(points[0])
    per = []
    for name in names:
        sizes = sorted({p[name] for p in points})
        mids = {round(math.sqrt(a * b)) for a, b in zip(sizes, sizes[1:])}
        per.append(sorted(set(sizes) | mids))
    return [dict(zip(names, combo)) for combo in itertools.product(*per)]


def _size_of(record, names):
    values = [int(v) for _, v in record.dynamic.get("sizes", [])]
    return tuple(values) if len(values) == len(names) else None


def _contenders(records, key, target, names, outs, points) -> list:
    """``[(key, steps)]``: the best TOP_PER_SIZE distinct step lists measured at each of the
    tuned sizes *points*, renamed for *outs*.  Measuring them elsewhere adds no new ones: a
    size's best can only be its own former best or another size's contender."""
    from .candidate import StepsCandidate
    from .step_names import translate_steps
    tuned = {tuple(p[n] for n in names) for p in points}
    by_size = {}
    for r in records:
        if r.ok and r.target == target and r.dynamic.get("key") == key:
            size = _size_of(r, names)
            if size in tuned:
                by_size.setdefault(size, []).append(r)
    chosen = {}
    for size in sorted(by_size):
        taken = set()
        for r in sorted(by_size[size], key=lambda x: x.mean_cost):
            if len(taken) == TOP_PER_SIZE:
                break
            try:
                steps = StepsCandidate.from_json(r.candidate["steps"]).steps
                steps = translate_steps(steps, outs, r.candidate.get("names"))
            except (Error, KeyError):
                continue
            k = StepsCandidate(steps).key
            taken.add(k)
            chosen.setdefault(k, steps)
    return list(chosen.items())


class _Job:
    """What a tuner callback reads of the job that measured (``log_to_file`` takes its task)."""

    def __init__(self, task):
        self.task = task


class CrossStats:
    """What :func:`cross_measure` did: sizes probed, measurements, failed candidates."""

    def __init__(self):
        self.probes, self.measured, self.failed = 0, 0, 0

    def __repr__(self):
        return (f"CrossStats({self.probes} sizes probed, {self.measured} measurements, "
                f"{self.failed} failed)")


def cross_measure(tensors, records, points, key, target, callbacks, measure_option=None,
                  quiet=False) -> CrossStats:
    """Measure the best step lists of each tuned size of *records* at every probe size of
    *points* where they were not measured yet; each result goes to *callbacks* as a tuner's
    would (so ``log_to_file`` logs it).  A candidate that fails there is an error record, not
    an exception."""
    from .auto_task import outputs_of
    from .dynamic import bound_task
    from .measure import Measurer
    names = [v.name for v in shape_vars_of(tensors)]
    stats = CrossStats()
    contenders = _contenders(records, key, target, names, outputs_of(tensors), points)
    if len(contenders) < 2:
        return stats                     # one schedule: nothing to choose between
    probes = probe_points(points)
    if len(probes) * len(contenders) > MAX_CROSS:
        probes = points
    measured = {}
    for r in records:
        if r.target == target and r.dynamic.get("key") == key and "steps" in r.candidate:
            size = _size_of(r, names)
            try:
                measured.setdefault(size, set()).add(json.dumps(r.candidate["steps"],
                                                                sort_keys=True))
            except TypeError:
                continue
    todo = []
    for p in probes:
        size = tuple(p[n] for n in names)
        new = [steps for k, steps in contenders if k not in measured.get(size, ())]
        if new:
            todo.append((p, new))
    if not todo:
        return stats
    from tqdm.auto import tqdm
    with tqdm(total=sum(len(n) for _, n in todo), disable=quiet, unit="trial",
              dynamic_ncols=True, desc="measuring the tuned schedules at other sizes") as bar:
        for sizes, steps_lists in todo:
            task = bound_task(tensors, sizes, target, key)
            stats.probes += 1
            with Measurer(task, measure_option) as m:
                results = m.measure_batch(list(steps_lists))
            stats.measured += len(results)
            stats.failed += sum(not r.ok for r in results)
            for cb in callbacks:
                cb(_Job(task), list(steps_lists), results)
            bar.update(len(steps_lists))
    return stats
