"""Tuning a custom operator: its forward kernel and each of its gradient kernels, into one log.

    et.tune(rmsnorm, (x, w), n_trial=200, log="tuning_logs/rmsnorm.jsonl")
    rmsnorm = et.custom_op("mylib::rmsnorm", log="tuning_logs/rmsnorm.jsonl")(rmsnorm_fn)

Each kernel is one auto-scheduling task at the example inputs' signature; records are keyed by
the structure of the kernel's DAG, so an operator registered with ``log=`` finds them for its
forward and backward kernels, in any process, and measures nothing.
"""
from __future__ import annotations

import warnings

from ..autotune import UntunedScheduleWarning, auto_schedule
from ..errors import CustomOpError, NoValidTrialError
from .gradients import differentiate, gradient_declarations
from .op import CustomOp


def kernel_declarations(op: CustomOp, sig, backward=True) -> list:
    """``(label, tensors)`` of every kernel *op* runs at *sig*: the forward, then (with
    *backward* and when the operator has one) one gradient kernel per floating-point output."""
    inputs, outputs = op.declaration(sig)
    out = [("forward", [*inputs, *outputs])]
    if backward and op.backward:
        for k, (_, _, tensors) in enumerate(gradient_declarations(op, sig, differentiate(op))):
            if tensors is not None:
                out.append((f"gradient of output {k}", tensors))
    return out


def tune(op, example_inputs, n_trial, log, *, backward=True, tuner="xgb", seed=None,
         measure_option=None, quiet=False) -> list:
    """Tune *op*'s kernels at the signature of *example_inputs* (torch tensors), *n_trial*
    measurements split evenly between them (at least one each), all recorded in *log*.

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
    sig = op.signature(tuple(example_inputs))
    kernels = kernel_declarations(op, sig, backward)
    share = max(1, int(n_trial) // len(kernels))
    out = []
    for label, tensors in kernels:
        if not quiet:
            print(f"{op.name} ({sig.text(op.params)}): tuning the {label}, {share} trials")
        try:
            s, _ = auto_schedule(tensors, n_trial=share, log=log, tuner=tuner, seed=seed,
                                 measure_option=measure_option, quiet=quiet)
        except NoValidTrialError as exc:
            warnings.warn(f"{op.name}: the {label} keeps its default schedule: {exc}",
                          UntunedScheduleWarning, stacklevel=2)
            s = None
        out.append((label, s))
    return out
