"""Tuning an operator with symbolic extents: measured at the sizes the user names, dispatched by
size at run time.

A symbolic operator has no single best schedule: the one for ``n = 1`` (one thread, narrow tiles)
and the one for ``n = 2048`` (every core, wide tiles) differ, yet each is valid for every ``n``.
So the operator is bound at each *hint* size and tuned there as an ordinary static operator
(:mod:`.points`: its records carry, besides the bound operator's workload key, the symbolic
operator's key and the sizes); then the best schedules of each hint are measured side by side
at the hints and between them (:mod:`.cross_sizes`), and the fastest at each size makes the
dispatch (:mod:`.dispatch`).

The job reads its log once: the searches, the round and the dispatch ask one
:class:`~..log.database.Database`, which keeps what they measure.
"""
from __future__ import annotations

import sys

from ...codegen.target import Target
from ...errors import TuningError
from ..log.database import Database, log_to_file
from ..measure.common import settled
from ..measure.session import shared_processes
from .cross_sizes import cross_measure
from .dispatch import dispatch_from_records
from .points import bound_task, hint_points, symbolic_key


#: the share of n_trial kept for the side-by-side round when there are several hint points
ROUND_SHARE = 0.25


def search_trials(n_trial, n_points, cross_check=True) -> int:
    """Trials each hint point's search gets of *n_trial*: what the round's share
    (ROUND_SHARE, with more than one point) leaves, split evenly."""
    kept = int(int(n_trial) * ROUND_SHARE) if cross_check and n_points > 1 else 0
    return max(1, (int(n_trial) - kept) // n_points)


def spending_line(n_trial, searched, n_points, per, stats) -> str:
    """How a symbolic tuning job spent its *n_trial* measurements, in one line."""
    line = (f"auto_schedule: n_trial={n_trial}: {searched} measured by the searches at "
            f"{n_points} size{'s' if n_points > 1 else ''} (up to {per} each, the log's earlier "
            "trials counted)")
    if stats is None:
        return line
    if stats.skipped or not stats.plan:
        why = stats.plan or "nothing to choose between, or measured already"
        return f"{line}; no side-by-side round ({why})"
    return f"{line}; {stats.measured} side by side ({stats.plan})"


def tune(tensors, n_trial, shape_hints, log, target, make_tuner, time_budget_s=None,
         measure_option=None, quiet=False, cross_check=True):
    """Tune *tensors* at each hint point (*n_trial* split evenly among them); the dispatch of
    the tuned schedules, as :func:`~.dispatch.dispatch_from_records` makes it.

    With a *log*, the dispatch is made from all its records (earlier jobs' records of these
    sizes count too); without, from the records of this job, kept in memory.

    cross_check: then measure the best schedules of each point side by side at the points and
    the powers of two between them (:mod:`.cross_sizes`), so that each size runs the schedule
    measured fastest near it, not the one tuned nearest.

    *n_trial* bounds every measurement the call makes: with more than one point, a quarter of
    it (ROUND_SHARE) is kept for the side-by-side round, which also gets what the searches
    left (an exhausted space); the round is cut to what is left (fewer passes, no
    challengers, fewer sizes), or skipped with a line saying so.  A line tells how the trials
    were spent."""
    points = hint_points(tensors, shape_hints)
    # as the round measures (each measurement 20 ms at least), so that the searches rank tiny
    # parallel kernels as they run back to back, not by their threads' wake-up
    search_option = settled(measure_option)
    key = symbolic_key(tensors)
    n_trial = int(n_trial)
    crossing = cross_check and len(points) > 1
    per = search_trials(n_trial, len(points), cross_check)
    budget = None if time_budget_s is None else time_budget_s / len(points)
    db = Database(log) if log is not None else Database.in_memory()
    callbacks = [log_to_file(db)]
    searched = 0
    stats = None
    with shared_processes():                # one set of processes for every size and the round
        for sizes in points:
            task = bound_task(tensors, sizes, target, key)
            tuner = make_tuner(task)
            # no confirmation round of its own: n_trial bounds every measurement here, and the
            # side-by-side round measures the contenders again
            tuner.tune(per, measure_option=search_option, callbacks=callbacks,
                       time_budget_s=budget, quiet=quiet, confirm=False)
            searched += tuner.measured
        if crossing:
            stats = cross_measure(tensors, db, points, key, str(Target.parse(target)),
                                  measure_option, quiet, budget=max(0, n_trial - searched))
    if not quiet:
        print(spending_line(n_trial, searched, len(points), per, stats), file=sys.stderr)
    dispatch, _ = dispatch_from_records(tensors, db, target)
    if dispatch is None:
        raise TuningError(f"auto_schedule: no trial finished at any of the sizes "
                          f"{points} (interrupted before the first result)")
    return dispatch
