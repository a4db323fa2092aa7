"""Tuning a custom operator: its forward kernel and each of its gradient kernels, into one log.

    et.tune(rmsnorm, (x, w), n_trial=200, log="tuning_logs/rmsnorm.jsonl")
    rmsnorm = et.custom_op("mylib::rmsnorm", log="tuning_logs/rmsnorm.jsonl")(rmsnorm_fn)

Each kernel is one auto-scheduling task at the example inputs' signature; records are keyed by
the structure of the kernel's DAG, so an operator registered with ``log=`` finds them for its
forward and backward kernels, in any process, and measures nothing.

A dynamic operator's kernels have size variables: each is tuned at size points (by default the
example inputs' own sizes; ``shape_hints`` names others) as ``auto_schedule`` tunes an operator
with symbolic extents, and the operator registered with ``log=`` dispatches on size between
the schedules of every size point its log holds (tuning again at other sizes adds points).
"""
from __future__ import annotations

import contextlib
import math
import os
import warnings

import torch

from ..autotune import UntunedScheduleWarning, auto_schedule, shared_processes
from ..autotune.symbolic.points import extent_names
from ..errors import CustomOpError, NoValidTrialError
from ..te.bind import bind_sizes, shape_vars_of
from ..te.dag import ComputeDAG
from ..te.tensor import PlaceholderOp
from .op import CustomOp


#: the variable the measuring processes read their thread count from (einloop.runtime.threads)
_NUM_THREADS = "EINLOOP_NUM_THREADS"

#: the fewest trials :func:`trial_shares` gives a kernel when the budget allows
_FEW_TRIALS = 8


def kernel_declarations(op: CustomOp, sig, backward=True) -> list:
    """``(label, tensors)`` of every kernel *op* runs at *sig*: the forward, then (with
    *backward* and when the operator has one) the forward that saves stages for the backward
    (when it saves any) and the gradient kernels of each floating-point output, as the
    backward after that forward runs them."""
    out = [("forward", op.forward_tensors(sig))]
    if backward and op.backward:
        plan = op.backward_plan(sig, saving=True)
        if plan.saved:
            out.append((f"forward saving {', '.join(t.name for t in plan.saved)}",
                        op.forward_tensors(sig, saving=True)))
        for k, (_, _, parts) in enumerate(plan.entries):
            for n, part in enumerate(parts):
                written = ", ".join(t.name for t in part.writes)
                out.append((f"gradient kernel {n + 1}/{len(parts)} of output {k} ({written})",
                            list(part.tensors)))
    return out


def trial_shares(n_trial, kernels, sizes=None) -> list:
    """*n_trial* split between *kernels* (``(label, tensors)``) in proportion to their work
    (flops; a kernel that only moves data counts as one flop per element it writes), and at
    least a few each (a kernel's measured best is kept only if it beats nothing better than
    a handful of candidates): a matmul of the backward deserves the trials an elementwise
    kernel does not.  *sizes* ({size variable: int}) values a dynamic kernel's extents."""
    work = []
    for _, tensors in kernels:
        if shape_vars_of(tensors):
            tensors = bind_sizes(tensors, sizes)
        outs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
        elements = sum(math.prod(int(d) for d in t.shape) for t in outs)
        work.append(max(ComputeDAG(outs).flop_count(), elements, 1))
    total, n_trial = sum(work), int(n_trial)
    least = max(1, min(_FEW_TRIALS, n_trial // len(kernels)))
    return [max(least, round(n_trial * w / total)) for w in work]


def tune(op, example_inputs, n_trial, log, *, backward=True, tuner="xgb", seed=None,
         measure_option=None, quiet=False, shape_hints=None) -> list:
    """Tune *op*'s kernels at the signature of *example_inputs* (torch tensors), *n_trial*
    measurements split between them by their work (:func:`trial_shares`), all recorded in
    *log*.

    For an operator registered with ``dynamic=``: *shape_hints* ``{size variable: [sizes]}``
    are the sizes each kernel is tuned at (a kernel's trials split between them; default: the
    sizes of *example_inputs*), then its best schedules are measured side by side across them
    (see :mod:`einloop.autotune.symbolic.tune`).

    Returns ``[(label, schedule or None)]``: None for a kernel none of whose trials built or
    ran (each failure is in the log); it keeps its default schedule, with one
    ``UntunedScheduleWarning`` here, and the others are tuned all the same.  Register the
    operator with ``custom_op(..., log=log)`` to run the tuned schedules.
    """
    if not isinstance(op, CustomOp):
        raise CustomOpError(f"tune: expected an operator made by einloop.torch.custom_op, got "
                            f"{type(op).__name__}")
    if log is None:
        raise CustomOpError(f"tune {op.name}: give log=PATH, the tuning log the operator will "
                            "replay (custom_op(..., log=PATH))")
    example_inputs = tuple(example_inputs)
    sig = op.signature(example_inputs)
    hints = _size_points(op, example_inputs, shape_hints)
    kernels = kernel_declarations(op, sig, backward)
    out = []
    with measured_at_running_threads(), shared_processes():
        for (label, tensors), share in zip(kernels, trial_shares(
                n_trial, kernels, {k: v[0] for k, v in hints.items()})):
            out.append((label, _tune_kernel(op, sig, label, tensors, share, hints, log,
                                            tuner=tuner, seed=seed,
                                            measure_option=measure_option, quiet=quiet)))
    return out


def _tune_kernel(op, sig, label, tensors, share, hints, log, *, quiet, **options):
    """One kernel's tuning: its best schedule, or None (with a warning) when no trial ran."""
    if not quiet:
        at = "".join(f", {k} at {v}" for k, v in hints.items())
        print(f"{op.name} ({sig.text(op.params)}{at}): tuning the {label}, {share} trials")
    names = extent_names(tensors)
    try:
        s, _ = auto_schedule(tensors, n_trial=share, log=log, quiet=quiet,
                             shape_hints={k: v for k, v in hints.items() if k in names}
                             if names else None, **options)
    except NoValidTrialError as exc:
        warnings.warn(f"{op.name}: the {label} keeps its default schedule: {exc}",
                      UntunedScheduleWarning, stacklevel=3)
        return None
    return s


@contextlib.contextmanager
def measured_at_running_threads():
    """The measuring processes run kernels with the threads the operator will run with in this
    process (``torch.get_num_threads()``, which einloop.torch makes its kernels follow), not
    with their own CPU count: a schedule tuned at another thread count is tuned for another
    machine.  ``EINLOOP_NUM_THREADS``, when the user set it, decides both."""
    if os.environ.get(_NUM_THREADS):
        yield
        return
    os.environ[_NUM_THREADS] = str(max(1, torch.get_num_threads()))
    try:
        yield
    finally:
        os.environ.pop(_NUM_THREADS, None)



def _size_points(op, example_inputs, shape_hints) -> dict:
    """``{size variable: [sizes]}`` to tune a dynamic *op*'s kernels at ({} for a static op)."""
    sizes = {k: [int(v)] for k, v in op.dynamic.sizes(example_inputs).items()}
    if shape_hints is None:
        return sizes
    if not op.dynamic:
        raise CustomOpError(f"tune {op.name}: shape_hints are for an operator registered with "
                            "dynamic=; this one has one kernel per shape")
    unknown = sorted(set(shape_hints) - set(sizes)) if isinstance(shape_hints, dict) else None
    if unknown is None or unknown:
        raise CustomOpError(f"tune {op.name}: shape_hints must be a dict {{size variable: "
                            f"[sizes]}} over {', '.join(op.dynamic.names)}, got {shape_hints!r}")
    return {**sizes, **shape_hints}
