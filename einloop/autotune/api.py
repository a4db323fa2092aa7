"""``auto_schedule``: one call from an operator's declaration to a tuned schedule.

    s, args = autotune.auto_schedule(attention(256, 64), n_trial=200, log="logs/att.jsonl")
    with autotune.apply_history_best("logs/att.jsonl"):
        s, args = autotune.auto_schedule(attention(256, 64))     # replayed, nothing measured

With ``n_trial`` it tunes the generated space (heuristic seed configs first, then the chosen
tuner), logs every trial and returns the best schedule.  Without, it replays the best logged
step list of this operator's structure for this target (from ``log``, or from the innermost
``apply_history_best``), or returns the untuned default schedule with one warning.
"""
from __future__ import annotations

import numbers
import os

from ..codegen.target import Target
from ..errors import TuningError
from ..schedule.dispatch import SizeDispatch
from ..te.tensor import Tensor
from .log.deploy import ApplyHistoryBest, UntunedScheduleWarning, untuned_message
from .log.database import Database, log_to_file, typical_best
from .measure.cluster.client import cluster_cores
from .measure.common import settled
from .search.finals import final_round
from .search.kinds import make_tuner, tuner_kind
from .symbolic.dispatch import default_schedule, dispatch_from_records
from .symbolic.points import extent_names, has_symbolic_extents, hint_points, symbolic_key
from .symbolic.tune import tune
from .task.auto import AutoTask, create_auto_task
from .task.context import current_context, warn_once
from .task.declare import declare_tensors


def _task_of(fn_or_tensors, args, target, cores=None):
    """An AutoTask: of an importable function (workers re-declare it) or of tensors (the DAG
    is pickled for the workers).  *cores*: the threads its kernels will get (None: this
    process's)."""
    if isinstance(fn_or_tensors, (Tensor, list, tuple)):
        if args:
            raise TuningError("auto_schedule: args= is for a function; tensors are declared "
                              "already")
        return AutoTask.of_tensors(fn_or_tensors, target, cores)
    if not callable(fn_or_tensors):
        raise TuningError(f"auto_schedule: expected the operator's tensors (inputs first, "
                          f"outputs last) or a function returning them, got "
                          f"{type(fn_or_tensors).__name__}")
    if hasattr(fn_or_tensors, "template_name"):
        raise TuningError(f"auto_schedule: {fn_or_tensors.template_name!r} is a template; tune "
                          "it with autotune.create_task and a tuner")
    try:
        return create_auto_task(fn_or_tensors, tuple(args), target, cores=cores)
    except TuningError:                     # not importable by name: declare it here
        return AutoTask.of_tensors(fn_or_tensors(*args), target, cores)


def _check(n_trial, log, time_budget_s):
    if n_trial is not None and (not isinstance(n_trial, numbers.Integral)
                                or isinstance(n_trial, bool) or n_trial < 1):
        raise TuningError(f"auto_schedule: n_trial must be a positive integer (or None to "
                          f"replay the log), got {n_trial!r}")
    if log is not None and not isinstance(log, (str, os.PathLike)):
        raise TuningError(f"auto_schedule: log must be a path, got {log!r}")
    if time_budget_s is not None and (not isinstance(time_budget_s, numbers.Real)
                                      or isinstance(time_budget_s, bool) or time_budget_s <= 0):
        raise TuningError(f"auto_schedule: time_budget_s must be a positive number of seconds, "
                          f"got {time_budget_s!r}")


def auto_schedule(fn_or_tensors, n_trial=None, log=None, target="llvm", tuner="xgb",
                  time_budget_s=None, seed=None, measure_option=None, quiet=False, args=(),
                  shape_hints=None, final=True):
    """Schedule an operator from its declaration alone: ``(schedule, tensors)``.

    Parameters
    ----------
    fn_or_tensors : list of Tensor or callable
        The operator's tensors, inputs first, outputs last; or a function returning them (called
        with *args*; a module-level one is re-declared by the build workers, others are
        declared here and their DAG is sent).
    n_trial : int, optional
        Trials to tune (a log that holds some already counts them).  None: no measuring; replay
        the best logged schedule of this operator, or fall back to the default schedule with
        one :class:`~einloop.autotune.log.deploy.UntunedScheduleWarning`.
    log : path, optional
        The JSON Lines tuning log written while tuning, and read when replaying.
    target : str
    tuner : {"xgb", "ga", "random", "grid"} or TunerKind
    time_budget_s : float, optional
        Start no new batch of trials after this many seconds.
    seed : int, optional
        Makes the search reproducible.
    measure_option : MeasureOption, optional
        From :func:`einloop.autotune.measure_option`; each measurement lasts at least
        ``measure.MIN_REPEAT_MS`` (20 ms) whatever it says, at fixed and symbolic sizes alike.
    quiet : bool
        No progress bar.
    args : tuple
        Arguments of the function, if *fn_or_tensors* is one.
    shape_hints : dict, optional
        For an operator with symbolic extents (``te.var``/``te.size_var``): the sizes to tune
        at, ``{"n": [1, 16, 256, 2048]}`` (default: those, per extent).  *n_trial* bounds
        every measurement of the call: a quarter of it is kept for the round that measures
        the sizes' best schedules side by side, the rest split among the sizes.  The result is then a :class:`~einloop.schedule.dispatch.SizeDispatch`, which
        ``build`` compiles into one kernel that runs each call with the schedule tuned nearest
        its sizes (see :mod:`einloop.autotune.symbolic.tune`).
    final : bool
        With a *log*: after the search, measure its best schedules again side by side, and
        deploy the fastest of that round (:mod:`einloop.autotune.search.finals`; a few dozen
        measurements beyond *n_trial*).  A caller that tunes in many short rounds gives False
        and calls :func:`~einloop.autotune.search.finals.final_round` once at the end.
    """
    _check(n_trial, log, time_budget_s)
    kind = tuner_kind(tuner)
    tensors = _symbolic_tensors(fn_or_tensors, args)
    if tensors is not None:
        return _auto_schedule_symbolic(tensors, n_trial, log, target, kind, seed, shape_hints,
                                      time_budget_s, measure_option, quiet)
    if shape_hints is not None:
        raise TuningError("auto_schedule: shape_hints are for operators with symbolic extents "
                          "(te.var / te.size_var); this one has none")
    if n_trial is None:
        return _replay(_task_of(fn_or_tensors, args, target), log)
    cluster = getattr(measure_option, "cluster", None)
    # measured on a cluster, the kernels run with the runners' threads, not this process's
    cores = cluster_cores(cluster, str(Target.parse(target))) if cluster is not None else None
    task = _task_of(fn_or_tensors, args, target, cores)
    t = make_tuner(kind, task, seed)
    t.tune(int(n_trial), measure_option=settled(measure_option),
           callbacks=[log_to_file(log)] if log is not None else (), time_budget_s=time_budget_s,
           quiet=quiet)
    if t.best_config is None:
        raise TuningError(f"auto_schedule: no trial of {task.workload} finished (interrupted "
                          "before the first result)")
    if final and log is not None and not t.interrupted:
        db = Database(log)
        stats = final_round(task, db, settled(measure_option))
        if stats.round is not None:
            if not quiet:
                print(f"{task.workload}: {stats}")
            best = typical_best(db.query(workload=task.workload_key, target=task.target))
            return task.instantiate(task.candidate_from_json(best.candidate))
    return task.instantiate(t.best_config)


def _symbolic_tensors(fn_or_tensors, args):
    """The operator's tensors if it has symbolic extents, else None."""
    if isinstance(fn_or_tensors, (Tensor, list, tuple)):
        tensors = [fn_or_tensors] if isinstance(fn_or_tensors, Tensor) else list(fn_or_tensors)
    elif callable(fn_or_tensors) and not hasattr(fn_or_tensors, "template_name"):
        name = getattr(fn_or_tensors, "__name__", "the function")
        tensors = declare_tensors(fn_or_tensors, tuple(args), {},
                                  f"{name}({', '.join(map(repr, args))})")
    else:
        return None
    if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, Tensor) for t in tensors):
        return None
    return list(tensors) if has_symbolic_extents(tensors) else None


def _auto_schedule_symbolic(tensors, n_trial, log, target, kind, seed, shape_hints,
                           time_budget_s, measure_option, quiet):
    if n_trial is not None:
        dispatch = tune(tensors, n_trial, shape_hints, log, target,
                        lambda task: make_tuner(kind, task, seed), time_budget_s,
                        measure_option, quiet)
        return dispatch, tensors
    return _replay_symbolic(tensors, log, target, shape_hints), tensors


def _replay_symbolic(tensors, log, target, shape_hints):
    """The dispatch of the logged sizes of a symbolic operator (from *log* or the innermost
    apply_history_best); untuned: its default schedule at the hint sizes, with one warning."""
    if log is not None:
        if not os.path.exists(log):
            raise TuningError(f"auto_schedule: no tuning log at {log}; give n_trial to tune "
                              "and write it")
        records = Database.open(log)
    else:
        ctx = current_context(ApplyHistoryBest)
        records = ctx.database if ctx is not None else Database.in_memory()
    dispatch, _ = dispatch_from_records(tensors, records, target)
    if dispatch is not None:
        return dispatch
    key = symbolic_key(tensors)
    warn_once(("auto-symbolic", key, target),
              f"auto_schedule: nothing tuned for this operator with symbolic extents "
              f"({', '.join(extent_names(tensors))}) in "
              f"{'the log' if log or len(records) else 'no log'}; using its untuned schedule "
              "(tune it with n_trial= and shape_hints=)", UntunedScheduleWarning, stacklevel=4)
    points = hint_points(tensors, shape_hints)
    return SizeDispatch([(p, default_schedule(tensors, p, target)) for p in points[:1]])


def _replay(task, log):
    if log is not None:
        if not os.path.exists(log):
            raise TuningError(f"auto_schedule: no tuning log at {log}; give n_trial to tune "
                              "and write it")
        with ApplyHistoryBest(log, task.target_spec) as ctx:
            return ctx.instantiate(task)
    ctx = current_context(ApplyHistoryBest)
    if ctx is not None:
        return ctx.instantiate(task)
    warn_once(("auto", task.workload_key, task.target),
              untuned_message(task, "no n_trial, no log and no apply_history_best context"),
              UntunedScheduleWarning, stacklevel=4)
    return task.instantiate(task.reference_candidate())
