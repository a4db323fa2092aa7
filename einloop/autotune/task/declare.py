"""Operators declared by a plain function: finding the function, calling it for its tensors,
and printing the code that declares them (``einloop log --code``)."""
from __future__ import annotations

from ...errors import Error, InternalError, TuningError
from ...schedule.replay import CodePrinter
from ...te.extern import ExternOp
from ...te.tensor import ComputeOp, Tensor
from .base import import_module, outputs_of
from .module_path import import_lines


def lookup_function(name, module):
    """The function *name* of *module* (imported if needed), as a TuningError if absent."""
    if not module:
        raise TuningError(f"function {name!r}: the module that defines it is needed, so that "
                          "worker processes can declare its tensors")
    mod = import_module(module, f"function {name!r}")
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise TuningError(f"module {module!r} has no function {name!r} that declares an "
                          "operator")
    return fn


def declare_tensors(func, args, kwargs, label) -> list:
    """Call the declaring function *func*; its tensors (inputs first, outputs last) as a list.

    What the user's function raises, or a result that is not tensors computing something, is a
    TuningError naming *label* (the call, as the user wrote it)."""
    try:
        out = func(*args, **kwargs)
    except (Error, InternalError):
        raise
    except Exception as exc:            # noqa: BLE001 -- the user's function raised
        raise TuningError(f"{label} raised {type(exc).__name__} while declaring its tensors: "
                          f"{exc}") from exc
    tensors = [out] if isinstance(out, Tensor) else out
    if not isinstance(tensors, (list, tuple)) or not tensors \
            or not all(isinstance(t, Tensor) for t in tensors):
        raise TuningError(f"{label} must return its tensors (inputs first, outputs last), got "
                          f"{type(out).__name__}")
    if not any(isinstance(t.op, (ComputeOp, ExternOp)) for t in tensors):
        raise TuningError(f"{label} returned no computed tensor to schedule")
    return list(tensors)


def declaring_lines(name, module, args, kwargs) -> list:
    """The head of printed schedule code: imports, and ``args`` declared by the function."""
    call = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return ["from einloop import create_schedule, lower", *import_lines(module),
            f"from {module} import {name}", "",
            f"args = {name}({call})   # the operator's tensors, inputs first, outputs last"]


def schedule_lines(tensors, steps, func_name) -> list:
    """Lines binding the tensors of ``args`` to names, creating ``s`` and applying *steps*."""
    outputs = outputs_of(tensors)
    p = CodePrinter(outputs, reserved={"s", "args", "sys", "create_schedule", "lower", func_name})
    names = p.bind_tensors(tensors)
    p.lines.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = args")
    p.lines.append(f"s = create_schedule([{', '.join(p.tensor_of(p.s[t]) for t in outputs)}])")
    for st in steps:
        p.step(st)
    return p.lines
