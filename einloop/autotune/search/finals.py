"""The final round of a search: its best schedules measured again side by side.

A search measures each schedule once (the best few twice), each at its own moment, minutes
apart.  On a shared machine a kernel's speed drifts by tens of percent within minutes, so among
the many schedules that a search finds within a few percent of each other, the one logged
fastest is mostly the one measured at the quietest moment, not the fastest kernel.

So after a search, its :data:`FINALISTS` fastest distinct schedules (each by its
:func:`~..log.database.typical` measurement) are measured again in one batch by one runner, one
after the other and :data:`FINAL_PASSES` times over (``c0 c1 .. c0 c1 ..``), so that each pass
sees every finalist at nearly the same moment.  Their records carry the round's id
(``final_round``), and choosing from the log (:func:`~..log.database.typical_best`) takes the
round's word, each schedule at its median pass, while it is the latest thing the log measured
of that workload.  The round is idempotent: a log whose latest round still decides is not
measured again.  These measurements are a budget of their own, beyond ``n_trial``, as the
tuner's confirmations are.

Operators over size variables have a round of their own across sizes
(:mod:`~..symbolic.cross_sizes`); this one is for a task at fixed sizes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..log.database import as_store, by_schedule, deciding_round, fastest_schedules, \
    typical_best
from ..measure.open import open_measurer

#: distinct schedules measured in a final round: enough to hold the schedules a search logs
#: within the machine's drift of its best, few enough that the round costs seconds
FINALISTS = 8
#: passes over the finalists: the median of three outvotes one disturbed pass
FINAL_PASSES = 3
#: a search of fewer distinct schedules has no final round (a quick job, a test's few trials)
FINALS_MIN_SCHEDULES = 16


@dataclass
class FinalStats:
    """What a final round did: its id (None: no round was measured), the finalists measured,
    the measurements that failed, and whether another schedule than the search's best won."""
    round: int | None = None
    finalists: int = 0
    failed: int = 0
    changed: bool = False

    def __str__(self):
        if self.round is None:
            return "no final round"
        return (f"{self.finalists} best schedules measured side by side, {FINAL_PASSES} passes"
                + (", another schedule is now the best" if self.changed else ""))


def final_round(task, db, measure_option=None, n=FINALISTS,
                min_schedules=FINALS_MIN_SCHEDULES) -> FinalStats:
    """Measure the *n* best schedules of *task* logged in the record store *db* side by side
    (see the module docstring) and append the measurements to *db*; nothing when its records
    hold fewer than *min_schedules* distinct schedules or the latest round still decides."""
    db = as_store(db)
    stats = FinalStats()
    records = db.query(workload=task.workload_key, target=task.target, ok_only=False)
    ok = [r for r in records if r.ok]
    if len(by_schedule(ok)) < max(2, min_schedules) or deciding_round(ok) is not None:
        return stats
    chosen = fastest_schedules(ok, n)               # no round decides: the log's best first
    stats.round = max(int(time.time() * 1000), max((r.final_round or 0) for r in records) + 1)
    candidates = [task.candidate_from_json(r.candidate) for r in chosen]
    batch = candidates * FINAL_PASSES
    with open_measurer(task, measure_option) as measurer:
        results = measurer.measure_batch(batch)
    db.append(task, batch, results, final_round=stats.round)
    stats.finalists = len(chosen)
    stats.failed = sum(not r.ok for r in results)
    after = db.query(workload=task.workload_key, target=task.target)
    stats.changed = typical_best(after).candidate != chosen[0].candidate
    return stats


__all__ = ["FINALISTS", "FINAL_PASSES", "FinalStats", "final_round"]
