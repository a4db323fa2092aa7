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

from ...codegen.target import Target
from ...errors import TuningError
from ..log.database import Database, log_to_file
from ..measure.common import settled
from .cross_sizes import cross_measure
from .dispatch import dispatch_from_records
from .points import bound_task, hint_points, symbolic_key


def tune(tensors, n_trial, shape_hints, log, target, make_tuner, time_budget_s=None,
         measure_option=None, quiet=False, cross_check=True):
    """Tune *tensors* at each hint point (*n_trial* split evenly among them); the dispatch of
    the tuned schedules, as :func:`~.dispatch.dispatch_from_records` makes it.

    With a *log*, the dispatch is made from all its records (earlier jobs' records of these
    sizes count too); without, from the records of this job, kept in memory.

    cross_check: then measure the best schedules of each point side by side at the points and
    the powers of two between them (:mod:`.cross_sizes`; extra measurements beyond *n_trial*),
    so that each size runs the schedule measured fastest near it, not the one tuned nearest."""
    points = hint_points(tensors, shape_hints)
    # as the round measures (each measurement 20 ms at least), so that the searches rank tiny
    # parallel kernels as they run back to back, not by their threads' wake-up
    search_option = settled(measure_option)
    key = symbolic_key(tensors)
    per = max(1, int(n_trial) // len(points))
    budget = None if time_budget_s is None else time_budget_s / len(points)
    db = Database(log) if log is not None else Database.in_memory()
    callbacks = [log_to_file(db)]
    for sizes in points:
        task = bound_task(tensors, sizes, target, key)
        make_tuner(task).tune(per, measure_option=search_option, callbacks=callbacks,
                              time_budget_s=budget, quiet=quiet)
    if cross_check:
        cross_measure(tensors, db, points, key, str(Target.parse(target)), measure_option,
                      quiet)
    dispatch, _ = dispatch_from_records(tensors, db, target)
    if dispatch is None:
        raise TuningError(f"auto_schedule: no trial finished at any of the sizes "
                          f"{points} (interrupted before the first result)")
    return dispatch
