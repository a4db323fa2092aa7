"""Choosing between the schedules of a symbolic operator by measuring them side by side at many
sizes.

Tuning at the hint sizes gives one best schedule per hint, but a call arrives at any size, and
the schedule tuned *nearest* a size is often not the fastest there:

- a schedule tuned at ``n = 4`` is slow at ``n = 7``, where one tuned at 16 is fast;
- a short search at one hint may miss what the search at another found;
- times logged at different moments do not compare on a shared machine: the same kernel
  measured an hour apart differed by 40% here.

So after the searches, the best few step lists of each hint (*contenders*: its best two, and
where those idle a core at smaller sizes, its best that is parallel enough there and a
finer-blocked variant of its best; see :func:`_contenders`) are measured together at every
*probe* size: each power of two between the smallest and the largest hint, and the hints (with
fewer probes when that would take too many measurements).  At the probe just below each hint,
a few more of that hint's step lists are measured too, those fastest for their work there
(*challengers*, :func:`_challengers`): a search ranks its schedules at its own size only.

- The contenders of one probe are measured in one batch, one after the other and PASSES times over,
  each measurement lasting ``measure.MIN_REPEAT_MS`` at least, so their times are comparable and a
  slow moment of the machine does not decide.
- What is measured is what the dispatch deploys: each contender built on the symbolic
  declaration and called on arrays of the probe's sizes (its tails are handled at run time,
  where a kernel built for that size knows there are none).
- The measurements are otherwise ordinary (isolated, checked against the default schedule
  built for that size, logged like any trial); their records carry the *round* that measured
  them.

The dispatch takes, at each size, the fastest of the latest round (:func:`.points.latest_round`),
and ``apply_history_best`` replays it without measuring.  A later job whose contenders were all
measured in the latest round measures nothing again.
"""
from __future__ import annotations

import itertools
import math
import time
import warnings

from tqdm.auto import tqdm

from ...errors import Error
from ...ir import stmt as S
from ...ir.visit import stmt_children, walk_stmt
from ...schedule.lower import lower
from ...schedule.replay import replay
from ...schedule.steps import Step, StepKind
from ...te.bind import bind_sizes, shape_vars_of
from ..log.database import Order, as_store
from ..measure.common import settled
from ..measure.open import open_measurer
from ..measure.session import shared_processes
from ..space.candidate import StepsCandidate
from ..space.sketch.analysis import MachineModel
from ..task.base import outputs_of
from ..task.step_names import translate_steps
from .points import bound_task, extent_names, latest_round, point_records, round_of, searched, \
    size_of

#: best distinct step lists of each tuned size that are measured at every probe size
TOP_PER_SIZE = 2
#: step lists of a tuned size looked through, fastest first, for a contender that keeps the
#: cores busy at the smallest size and for the challengers below it
SCAN = 32
#: more step lists of a tuned size, measured as challengers at the probe just below it alone:
#: those fastest for their work there (see :func:`_challengers`)
CHALLENGERS = 6
#: at most this many contender-size pairs per round: beyond it, fewer probes (probe_points)
MAX_CROSS = 160
#: each probe measures its contenders this many times over, interleaved (c0 c1 .. c0 c1 ..):
#: a shared machine slows a whole process down for seconds at a time, so one measurement per
#: contender decides by the moment it ran; the dispatch takes each contender's fastest
PASSES = 3


def _powers_of_two(sizes):
    lo, hi = min(sizes), max(sizes)
    out, p = set(sizes), 1
    while p <= hi:
        if p >= lo:
            out.add(p)
        p *= 2
    return out


def _midpoints(sizes):
    return set(sizes) | {round(math.sqrt(a * b)) for a, b in zip(sizes, sizes[1:])}


def _dense_then_midpoints(limit):
    """Every power of two up to *limit*, the geometric midpoints above it."""
    def widen(sizes):
        return {p for p in _powers_of_two(sizes) if p <= limit} | _midpoints(sizes)
    return widen


def probe_points(points, n_contenders=1, cap=None, dense_below=None) -> list:
    """The sizes to measure at, as ``{name: int}``: per extent its tuned sizes and every power
    of two between them, every combination over the extents; if that makes more than *cap*
    measurements of *n_contenders* (default MAX_CROSS), the powers of two up to *dense_below*
    only and the geometric midpoints between neighbours above (where given); then the
    midpoints alone; if still too many, the tuned sizes alone.

    Small sizes come first because that is where schedules part most: a register tile of r
    rows run on n < r rows wastes a share of its work that changes with every n (a tile of 8
    rows does 8 rows' work at n = 4 and at n = 7), while above a few tiles the waste is at
    most one tile in n/r.  :func:`cross_measure` takes *dense_below* from the machine: its
    vector registers, more than the rows of any register tile."""
    cap = MAX_CROSS if cap is None else cap
    names = list(points[0])
    tuned = [sorted({p[name] for p in points}) for name in names]
    steps = (_powers_of_two,) + ((_dense_then_midpoints(dense_below),) if dense_below else ()) \
        + (_midpoints, set)
    for widen in steps:
        per = [sorted(widen(sizes)) for sizes in tuned]
        if math.prod(len(p) for p in per) * n_contenders <= cap or widen is set:
            break
    return [dict(zip(names, combo)) for combo in itertools.product(*per)]


def _lowered_at(steps, tensors, sizes):
    """The schedule *steps* lowered on the operator *tensors* bound at *sizes* (None if it
    does not lower there)."""
    bound = bind_sizes(tensors, sizes)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return lower(replay(steps, outputs_of(bound)), bound)
    except Error:
        return None


def _busy_at(steps, tensors, sizes, cores) -> bool:
    """Does the schedule *steps* run a parallel loop of at least *cores* iterations on the
    operator *tensors* bound at *sizes*?"""
    func = _lowered_at(steps, tensors, sizes)
    return func is not None and any(
        isinstance(st, S.For) and st.kind is S.ForKind.PARALLEL and isinstance(st.extent, int)
        and st.extent >= cores for st in walk_stmt(func.body))


def _stores_at(steps, tensors, sizes):
    """How many element stores the schedule *steps* runs on the operator bound at *sizes*
    (None if it does not lower there): its work, with the rows a tile pads past the extent and
    the copies it makes; a guarded branch counts as taken, of two branches the larger."""
    func = _lowered_at(steps, tensors, sizes)

    def count(st):
        if type(st) is S.Store:
            return 1
        if type(st) is S.IfThenElse:
            return max(count(c) for c in stmt_children(st))
        inner = sum(count(c) for c in stmt_children(st))
        if type(st) is S.For:
            return inner * (st.extent if isinstance(st.extent, int) else 1)
        return inner
    return None if func is None else count(func.body)


def _finer_blocks(steps, tensors):
    """*steps* with the outer block of each symbolic axis of an output split as finely as the
    split inside it (``split i 8`` then ``split i.inner 4`` becomes ``split i 4``), or None if
    nothing changes: the same micro-kernel, its parallel loop over twice or more as many
    blocks, so that fewer rows still keep every core busy."""
    symbolic = {v.name for v in shape_vars_of(tensors)}
    axes = {(t.op.name, iv.var.name) for t in outputs_of(tensors) for iv, ext in
            zip(t.op.axis, t.shape) if getattr(ext, "name", None) in symbolic}
    out, changed = list(steps), False
    for stage, axis in sorted(axes):
        splits = [(n, st) for n, st in enumerate(out) if st.kind is StepKind.SPLIT
                  and st.stage == stage and "factor" in st.args]
        outer = next((x for x in splits if x[1].args["axis"] == axis), None)
        inner = next((x for x in splits if x[1].args["axis"] == f"{axis}.inner"), None)
        if outer is None or inner is None:
            continue
        f, g = outer[1].args["factor"], inner[1].args["factor"]
        if isinstance(f, int) and isinstance(g, int) and 1 <= g < f:
            out[outer[0]] = Step(StepKind.SPLIT, stage, {**outer[1].args, "factor": g})
            changed = True
    return tuple(out) if changed else None


def _searched(db, key, target, names, outs, size):
    """``(record, steps key, steps)`` of the search at *size* in the store *db* (cross
    measurements aside), each distinct step list once at its fastest, fastest first, renamed
    for *outs*."""
    seen = set()
    for r in point_records(db, key, target):
        if not searched(r) or size_of(r, names) != size:
            continue
        try:
            steps = StepsCandidate.from_json(r.candidate["steps"]).steps
            steps = translate_steps(steps, outs, r.candidate.get("names"))
        except (Error, KeyError):
            continue
        k = StepsCandidate(steps).key
        if k not in seen:
            seen.add(k)
            yield r, k, steps


def _contenders(db, key, target, names, tensors, points, top=None, extras=True) -> list:
    """``[(key, steps)]``: the best TOP_PER_SIZE distinct step lists of the search at each of
    the tuned sizes *points* (cross measurements aside), renamed for *tensors*.  Where none of
    them keeps every core busy at the smallest tuned size, also the best that does (among the
    first SCAN); and where the best idles a core at half its size, its finer-blocked
    variant (:func:`_add_finer`): a schedule parallel over row blocks tuned at 16 rows runs on
    one core at 8.  The cores are the machine model's (the threads the kernels will get).
    *top* (default TOP_PER_SIZE) and *extras* (the busy and finer ones) make a smaller round
    for a small budget."""
    top = TOP_PER_SIZE if top is None else top
    outs = outputs_of(tensors)
    cores = MachineModel.of(target).cores
    smallest = min(points, key=lambda p: [p[n] for n in names])
    tuned = {tuple(p[n] for n in names) for p in points}
    chosen = {}
    for size in sorted(tuned):
        taken, busy, scanned = set(), False, 0
        for _, k, steps in _searched(db, key, target, names, outs, size):
            if (len(taken) >= top and (busy or not extras)) or scanned >= SCAN:
                break
            scanned += 1
            this_busy = cores < 2 or not extras or _busy_at(steps, tensors, smallest, cores)
            if len(taken) < top or (this_busy and not busy):
                if not taken and extras:
                    _add_finer(chosen, steps, tensors, size, names, cores)
                taken.add(k)
                busy = busy or this_busy
                chosen.setdefault(k, steps)
    return list(chosen.items())


def _challengers(db, key, target, names, tensors, points, probes, taken) -> dict:
    """``{probe (a tuple in *names*' order): [(key, steps)]}``: for each tuned size but the
    smallest, CHALLENGERS of its first SCAN distinct step lists that are not contenders
    (*taken*: their keys), to be measured at the probe just below that size alone: those whose
    time at the tuned size, scaled by their work at the probe over their work there
    (:func:`_stores_at`), is least.

    A search ranks its schedules at its own size, where schedules bound by the same traffic
    tie (a dense layer's all stream the weight once); below it, their padded work differs (at
    8 rows a block of 8 rows computes 8, a block of 18 rows with a 6-row tile 12), which the
    scaling sees.  The probe below a hint is the next power of two down (or the hint below):
    a property of the hints, not of a machine or a benchmark.  Below the smallest tuned size
    nothing is searched, and the contenders of the sizes above cover the sizes between them."""
    outs = outputs_of(tensors)
    grid = [sorted({p[n] for p in probes}) for n in names]
    out = {}
    for point in sorted({tuple(p[n] for n in names) for p in points})[1:]:
        below = tuple(max((v for v in values if v < x), default=x)
                      for values, x in zip(grid, point))
        if below == point:
            continue
        scored, scanned = [], 0
        for r, k, steps in _searched(db, key, target, names, outs, point):
            if scanned >= SCAN:
                break
            if k in taken:
                continue
            scanned += 1
            there = _stores_at(steps, tensors, dict(zip(names, point)))
            here = _stores_at(steps, tensors, dict(zip(names, below)))
            if there and here:
                scored.append((r.mean_cost * here / there, len(scored), k, steps))
        picked = [(k, steps) for *_, k, steps in sorted(scored)[:CHALLENGERS]]
        if picked:
            out.setdefault(below, []).extend(picked)
    return out


def _add_finer(chosen, steps, tensors, size, names, cores):
    """The best schedule of a tuned size idles a core at half that size (parallel over row
    blocks): its finer-blocked variant (:func:`_finer_blocks`) is a contender too, if that
    one does not."""
    half = {n: max(1, v // 2) for n, v in zip(names, size)}
    if cores < 2 or _busy_at(steps, tensors, half, cores):
        return
    finer = _finer_blocks(steps, tensors)
    if finer is not None and _busy_at(finer, tensors, half, cores):
        chosen.setdefault(StepsCandidate(finer).key, finer)


def _measured_in(db, round_id, key, target, names) -> set:
    """``{(size, steps key)}`` measured in round *round_id* (failed measurements too)."""
    out = set()
    for r in point_records(db, key, target, ok_only=False, order=Order.WRITTEN):
        if round_of(r) == round_id:
            try:
                out.add((size_of(r, names), StepsCandidate.from_json(r.candidate["steps"]).key))
            except (Error, KeyError):
                continue
    return out


class CrossStats:
    """What :func:`cross_measure` did: the round, sizes probed, measurements, failures, and
    how the round was cut to its budget (``plan``: a line saying so; ``skipped``: the budget
    held no round at all)."""

    def __init__(self):
        self.round, self.probes, self.measured, self.failed = None, 0, 0, 0
        self.plan, self.skipped = "", False

    def __repr__(self):
        return (f"CrossStats(round {self.round}: {self.probes} sizes probed, {self.measured} "
                f"measurements, {self.failed} failed)")


def _plan_round(contenders, challengers_at, points, budget, fewer=lambda: [],
                dense_below=None):
    """``(contenders, probes, challengers, passes, line)`` of the largest round that makes at
    most *budget* measurements (None: no limit).  Sizes between the tuned ones come first (at
    the tuned sizes the searches measured already): then more passes, the challengers, and
    all *contenders* before *fewer()* (the best schedule of each tuned size alone).  Last, the
    tuned sizes alone, once.  None when not even that fits.  *challengers_at(probes)* gives the
    challengers for a probe set."""
    names = list(points[0])
    tuned = len({tuple(p[n] for n in names) for p in points})
    few = None                          # fewer(), asked for once, when first needed

    def size(cont, probes, chal, passes):
        return passes * sum(len(cont) + len(chal.get(tuple(p[n] for n in names), []))
                            for p in probes)

    def line(cont, probes, chal, passes):
        return (f"{len(cont)} schedules at {len(probes)} sizes, {passes} "
                f"pass{'es' if passes > 1 else ''}" + (", with challengers" if chal else ""))

    # (probes wider than the tuned sizes, passes, challengers, all contenders), best first
    options = [(True, p, ch, everyone) for p in (PASSES, 2, 1) for ch in (True, False)
               for everyone in (True, False)] + [(False, 1, False, True), (False, 1, False, False)]
    for wider, passes, with_challengers, everyone in options:
        if not everyone and few is None:
            few = fewer()
        cont = contenders if everyone else few
        if len(cont) < 2:
            continue
        cap = MAX_CROSS if budget is None else min(MAX_CROSS, budget // passes)
        probes = probe_points(points, len(cont), cap, dense_below)
        if wider and len(probes) <= tuned and budget is not None:
            continue
        chal = challengers_at(probes) if with_challengers else {}
        if budget is None or size(cont, probes, chal, passes) <= budget:
            return cont, probes, chal, passes, line(cont, probes, chal, passes)
    return None


def cross_measure(tensors, db, points, key, target, measure_option=None,
                  quiet=False, budget=None) -> CrossStats:
    """Unless the latest round in the record store *db* measured them all: a new round
    measuring the contenders of the tuned sizes *points* at every probe size, each probe's in
    one batch; each result is appended to *db* as a tuner's are (to its log, for a
    :class:`~..log.database.Database` of one).  A contender that fails at a size is an error
    record there, not an exception.  *db* may be a list of Records: the round's are then kept
    in memory only."""
    db = as_store(db)
    names = extent_names(tensors)
    stats = CrossStats()
    contenders = _contenders(db, key, target, names, tensors, points)
    if len(contenders) < 2:
        return stats                     # one schedule: nothing to choose between
    taken = {k for k, _ in contenders}
    plan = _plan_round(contenders, lambda probes: _challengers(
        db, key, target, names, tensors, points, probes, taken), points, budget,
        lambda: _contenders(db, key, target, names, tensors, points, top=1, extras=False),
        MachineModel.of(target).registers)
    if plan is None:
        stats.skipped = True
        stats.plan = (f"no round: its smallest form needs more than the {budget} measurements "
                      "left of n_trial")
        return stats
    contenders, probes, challengers, passes, stats.plan = plan

    def measured_at(probe):
        return contenders + challengers.get(tuple(probe[n] for n in names), [])

    last = latest_round(db, key, target)
    if last is not None:
        done = _measured_in(db, last, key, target, names)
        if all((tuple(p[n] for n in names), k) in done for p in probes
               for k, _ in measured_at(p)):
            return stats
    stats.round = max(int(time.time() * 1000), (last or 0) + 1)
    option = settled(measure_option)
    total = sum(len(measured_at(p)) for p in probes) * passes
    with tqdm(total=total, disable=quiet, unit="trial", dynamic_ncols=True,
              desc="measuring the tuned schedules side by side") as bar, shared_processes():
        for sizes in probes:
            task = bound_task(tensors, sizes, target, key, round_id=stats.round, deployed=True)
            batch = [steps for _, steps in measured_at(sizes)] * passes
            with open_measurer(task, option) as m:
                results = m.measure_batch(batch)
            stats.probes += 1
            stats.measured += len(results)
            stats.failed += sum(not r.ok for r in results)
            db.append(task, batch, results)
            bar.update(len(batch))
    return stats
