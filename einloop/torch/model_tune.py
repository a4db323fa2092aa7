"""Tuning a whole PyTorch model: every kernel ``torch.compile(backend="einloop")`` builds for it,
with one trial budget.

    et.tune_model(model, (x,), n_trial=2000, log="tuning_logs/mymodel.jsonl")
    fast = torch.compile(model, backend="einloop", options={"log": "tuning_logs/mymodel.jsonl"})

:func:`extract_tasks` runs the model once through the backend with its kernels declared, not
built, and keys each by the structure of its DAG, so the identical layers of a network are one
task whose weight is how many kernels it serves. :func:`tune_model` then spends the budget as a
task scheduler: first a few trials per task (:data:`FIRST_TRIALS`), then rounds
(:data:`ROUND_TRIALS`) to the task whose next round is expected to save the model the most time:
its weight times its best time so far times the share its last round cut from that time -- the
gradient of the model's latency Ansor's scheduler follows, estimated from each task's own
history. That share is taken to be at least the round's part of the task's trials so far
(Ansor's optimistic term, its best time over its trials): a task whose last round found nothing
better is still expected to gain, less the more trials it has had, so the tasks that stall get
trials in proportion to the time they cost the model, and a search that starts slowly on one
kernel is not starved by a larger kernel's. Each round resumes the task from the log, which
keeps every measurement. A round counts the measurements it made: a task whose round measured
nothing (every schedule of its space measured, and measured again, or a search that keeps
proposing known schedules) gets no more rounds, and its share of the budget goes to the others.

Each kernel is timed as it runs inside the model: its weights (the constant inputs, and the
packed copies a schedule reads instead) are evicted from the CPU caches before each timed call
(``CacheFlush.CONSTANTS``), since the model's other layers evict them between two calls, while
its activations stay where the layer before left them.  A schedule that streams its weights
well wins over one that only runs fast with them in cache; a *measure_option* of the caller's
decides for itself.

Example inputs with dynamic dimensions (``torch._dynamo.mark_dynamic``, or ``dynamic=True``)
give kernels over size variables (the backend's symbolic path): each such task is tuned at
size points, ``shape_hints`` ``{size in the example: [sizes]}`` naming them (default: the
example's own sizes), and ``torch.compile(..., options={"log": ...})`` dispatches between the
schedules of those sizes at every call size (:mod:`einloop.autotune.symbolic`).
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch

from ..autotune import CacheFlush, auto_schedule, measure_option as make_measure_option, \
    shared_processes
from ..autotune.log.database import Database, schedule_identity, typical_best
from ..autotune.search.finals import final_round
from ..autotune.search.tuner import resumable_trials
from ..autotune.symbolic.points import bound_task, symbolic_key
from ..autotune.task.auto import AutoTask
from ..errors import ArgumentError, TuningError
from .backend import aten_backend
from .tune import measured_at_running_threads

#: trials each task gets before the scheduler compares them
FIRST_TRIALS = 8
#: trials of each later round
ROUND_TRIALS = 16


class ModelTask(NamedTuple):
    """One kernel structure of a model: its auto-scheduling task, its te tensors, how many
    of the model's kernels it is, and for a kernel over size variables the sizes it is tuned
    at (``{variable: [sizes]}``; its *task* is the kernel at the first of them; None for a
    static kernel)."""
    task: AutoTask
    tensors: list
    weight: int
    hints: dict = None

    @property
    def key(self) -> str:
        """What the log keys the task's records by: its workload, or its symbolic key."""
        return symbolic_key(self.tensors) if self.hints else self.task.workload_key


def extract_tasks(model, example_inputs, target="llvm", *, dynamic=None,
                  shape_hints=None) -> list:
    """The tasks of the kernels the einloop backend builds for *model* called on
    *example_inputs* (a tuple of tensors), in the order first met; the model runs once (in
    PyTorch) on the way.  *dynamic*: as ``torch.compile``'s; *shape_hints*: see
    :func:`tune_model`."""
    if not isinstance(example_inputs, (tuple, list)):
        raise ArgumentError("extract_tasks: example_inputs must be a tuple of the model's "
                            f"inputs, got {type(example_inputs).__name__}")
    declared = []

    def backend(gm, inputs):
        return aten_backend(gm, inputs, declared=declared)
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    with _fresh_dynamo():
        compiled(*example_inputs)
    tasks, by_key = [], {}
    used = set()
    for item in declared:
        tensors, examples = item if isinstance(item, tuple) else (item, {})
        hints = _size_points(examples, shape_hints, used)
        task = AutoTask.of_tensors(tensors, target) if not hints else \
            bound_task(tensors, {v: sizes[0] for v, sizes in hints.items()}, target)
        mt = ModelTask(task, tensors, 1, hints or None)
        k = by_key.get(mt.key)
        if k is None:
            by_key[mt.key] = len(tasks)
            tasks.append(mt)
        else:
            tasks[k] = tasks[k]._replace(weight=tasks[k].weight + 1)
    unused = sorted(set(shape_hints or {}) - used)
    if unused:
        raise ArgumentError(f"tune_model: shape_hints name the size(s) {unused}, which no "
                            "dynamic dimension of the example inputs has (mark the dimension "
                            "with torch._dynamo.mark_dynamic, or give dynamic=True)")
    return tasks


def _size_points(examples, shape_hints, used) -> dict:
    """``{size variable: [sizes]}`` a symbolic kernel is tuned at: for each variable (of
    example size *examples[v]*), the sizes *shape_hints* lists for that example size, else
    the example size itself; the example sizes that had hints are added to *used*."""
    if shape_hints is not None and not isinstance(shape_hints, dict):
        raise ArgumentError(f"tune_model: shape_hints must be a dict {{size in the example "
                            f"inputs: [sizes to tune at]}}, got {shape_hints!r}")
    out = {}
    for v, (example,) in examples.items():
        sizes = (shape_hints or {}).get(example)
        if sizes is None:
            out[v] = [example]
            continue
        used.add(example)
        if isinstance(sizes, int) or not all(isinstance(x, int) and not isinstance(x, bool)
                                             and x >= 1 for x in sizes) or not sizes:
            raise ArgumentError(f"tune_model: shape_hints[{example}] must be a list of sizes "
                                f"of at least 1, got {sizes!r}")
        out[v] = sorted(set(sizes))
    return out


@contextlib.contextmanager
def _fresh_dynamo():
    """A fresh dynamo cache around the extraction: a model compiled before (with another
    backend) would otherwise reuse that compilation, and the extraction's must not stay."""
    import torch._dynamo
    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def _records_of(db, mt) -> tuple:
    """:func:`_logged` of model task *mt*: of its task, or of a symbolic kernel's records at
    all its sizes (its best: at any of them)."""
    if not mt.hints:
        return _logged(db, mt.task)
    return _counted(db.query(symbolic_key=mt.key, ok_only=False))


def _logged(db, task) -> tuple:
    """``(records, best seconds or None)`` of *task* in the log database *db*: how many records
    it has, errors included, and its best schedule's typical time."""
    return _counted(db.query(workload=task.workload_key, ok_only=False))


def _schedules(db, task) -> int:
    """How many distinct schedules a search measured of *task* in *db*."""
    return len({schedule_identity(r) for r in db.query(workload=task.workload_key, ok_only=False)
                if r.final_round is None})


def _counted(found) -> tuple:
    """``(how many of the records *found* a search measured, the typical time of the best
    error-free one or None)``; a final round's measurements are beyond the trial budget."""
    ok = [r for r in found if r.ok]
    return (sum(r.final_round is None for r in found),
            typical_best(ok).mean_cost if ok else None)


class TaskProgress:
    """A task's trials so far, best time, and the share of it its last round saved."""

    def __init__(self, mt: ModelTask):
        self.mt, self.trials, self.best, self.gain, self.failed = mt, 0, None, 1.0, False
        self.exhausted = False          # a round measured nothing: its space is used up
        self.records = 0                # its records in the log (errors included)
        #: its trials a search resumed from the log counts (stale records aside); None for a
        #: kernel over size variables, whose rounds count its records
        self.counted = None
        self.schedules = 0              # distinct schedules of its records (search's)

    def expected_saving(self) -> float:
        if self.failed or self.exhausted:
            return -1.0
        if self.best is None:
            return float("inf")
        optimistic = ROUND_TRIALS / max(self.trials, ROUND_TRIALS)
        return self.mt.weight * self.best * max(self.gain, optimistic)


def tune_model(model, example_inputs, n_trial, log, *, tuner="xgb", seed=None,
               measure_option=None, target="llvm", quiet=False, dynamic=None,
               shape_hints=None) -> list:
    """Tune every kernel einloop builds for *model* on *example_inputs* with *n_trial*
    measurements in all, written to *log* (see the module docstring); then
    ``torch.compile(model, backend="einloop", options={"log": log})`` runs them.  Returns a
    :class:`TaskProgress` per task (trials, best seconds, weight).

    *dynamic* (as ``torch.compile``'s) or example inputs marked with
    ``torch._dynamo.mark_dynamic`` make kernels over size variables; *shape_hints*
    ``{size in the example inputs: [sizes]}`` are the sizes each dynamic dimension of that
    example size is tuned at (default: its example size), e.g. ``{8: [1, 8, 64]}`` for a
    batch of 8 in the example.  *measure_option* (default: the model's weights evicted before
    each timed call, ``measure_option(cache_flush=CacheFlush.CONSTANTS)``; see the module
    docstring): as :func:`~einloop.autotune.auto_schedule`'s."""
    if int(n_trial) < 1:
        raise ArgumentError(f"tune_model: n_trial must be a positive number of trials, "
                            f"got {n_trial!r}")
    tasks = [TaskProgress(mt) for mt in extract_tasks(model, example_inputs, target,
                                                      dynamic=dynamic, shape_hints=shape_hints)]
    db = Database(log)                  # a log resumed: what its tasks already hold counts
    for tp in tasks:                    # toward n_trial, as auto_schedule counts it
        tp.records, tp.best = _records_of(db, tp.mt)
        tp.trials = tp.records
        if not tp.mt.hints:
            tp.counted = resumable_trials(tp.mt.task, db)
            tp.schedules = _schedules(db, tp.mt.task)
    if measure_option is None:          # the weights evicted, as the model's other layers do
        measure_option = make_measure_option(cache_flush=CacheFlush.CONSTANTS)
    if not tasks:
        raise TuningError("tune_model: einloop builds no kernel for this model (every operator "
                          "runs in PyTorch); nothing to tune")
    budget = int(n_trial)
    first = max(1, min(FIRST_TRIALS, budget // len(tasks)))
    bar = _progress(budget, len(tasks), quiet)
    spent = sum(tp.trials for tp in tasks)
    # the rounds take turns between tasks: one set of measuring processes serves them all, each
    # kernel timed with the threads it will run with in this process
    with measured_at_running_threads(), shared_processes():
        try:
            _report(bar, tasks, spent)
            for tp in tasks:                              # everyone first
                if spent >= budget:
                    break
                if tp.trials < first:
                    spent += _round(tp, first - tp.trials, log, tuner, seed, measure_option,
                                    target)
                    _report(bar, tasks, spent)
            while spent < budget:
                tp = max(tasks, key=TaskProgress.expected_saving)
                if tp.expected_saving() < 0:          # every task failed or is used up
                    break
                spent += _round(tp, min(ROUND_TRIALS, budget - spent), log, tuner, seed,
                                measure_option, target)
                _report(bar, tasks, spent)
            _finals(tasks, log, measure_option, bar)
        finally:
            bar.close()
    return tasks


def _finals(tasks, log, measure_option, bar):
    """Each task at fixed sizes: its best schedules measured again side by side, once, after
    all its rounds (:mod:`einloop.autotune.search.finals`); a task over size variables had its
    round across sizes."""
    db = Database(log)                  # read once; each round's records are appended to it
    for tp in tasks:
        if tp.mt.hints or tp.failed:
            continue
        if final_round(tp.mt.task, db, measure_option).round is not None:
            tp.records, tp.best = _records_of(db, tp.mt)
            _report(bar, tasks, bar.n)


def _round(tp, trials, log, tuner, seed, measure_option, target) -> int:
    """One round of up to *trials* measurements for task *tp*, resumed from *log*; returns the
    measurements it made (fewer where the task's space ran out)."""
    before = tp.best
    # a round asks the search for *trials* more than it resumes from: records of another
    # version's space (stale) would otherwise be measured again within one round, which would
    # take a share of the budget no round of another task gets
    counted = tp.trials if tp.counted is None else tp.counted
    try:
        auto_schedule(tp.mt.tensors, n_trial=counted + trials, log=log, target=target,
                      tuner=tuner, seed=seed, measure_option=measure_option, quiet=True,
                      shape_hints=tp.mt.hints or None, final=False)
    except TuningError:
        tp.failed = True                              # no valid trial: left to its default
        tp.trials += trials
        return trials
    db = Database(log)
    records, tp.best = _records_of(db, tp.mt)
    measured, tp.records = records - tp.records, records
    if tp.counted is not None:                        # its new schedules, all of this space
        schedules = _schedules(db, tp.mt.task)
        tp.counted += schedules - tp.schedules
        tp.schedules = schedules
    tp.trials += trials
    tp.exhausted = measured == 0
    if before is not None and tp.best is not None:
        tp.gain = max(0.0, (before - tp.best) / before)
    return measured


def _progress(total, n_tasks, quiet):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=f"tuning {n_tasks} kernels", unit="trial", disable=quiet)


def _report(bar, tasks, spent):
    bar.n = spent
    known = [tp for tp in tasks if tp.best is not None]
    latency = sum(tp.mt.weight * tp.best for tp in known)
    bar.set_postfix(tasks=f"{len(known)}/{len(tasks)}", kernels_ms=f"{latency * 1e3:.3f}")
