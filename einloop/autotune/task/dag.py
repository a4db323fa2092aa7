"""DAG tasks: an operator declared by a plain function, tuned as step lists (no template).

A DAG task is ``module:function`` applied to JSON-native arguments; the function declares the
operator and returns its tensors, inputs first, outputs last (the kernel's arguments).  Its
candidates are :class:`~einloop.autotune.space.candidate.StepsCandidate` step lists, replayed on freshly
declared tensors, so a build worker (which receives the task pickled as its declaration) and a
later process rebuild exactly the measured schedule.  The empty step list, the default schedule,
is the correctness reference.
"""
from __future__ import annotations

import json

from ...errors import Error, InternalError, TuningError, TuningLogError
from ...te.tensor import ComputeOp, Tensor
from ..space.candidate import StepsCandidate
from .base import TaskKind, Workload, count_flops, import_module, make_workload


class DagWorkload(Workload):
    """A DAG function with JSON-native arguments; its key never equals a template's."""

    kind = TaskKind.DAG

    @property
    def key(self):
        return json.dumps({"dag": self.template, "args": list(self.args),
                           "kwargs": dict(self.kwargs)}, sort_keys=True)


def lookup_function(name, module):
    """The function *name* of *module* (imported if needed), as a TuningError if absent."""
    if not module:
        raise TuningError(f"DAG function {name!r}: the module that defines it is needed, so "
                          "that worker processes can declare its tensors")
    mod = import_module(module, f"DAG function {name!r}")
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
    if not any(isinstance(t.op, ComputeOp) for t in tensors):
        raise TuningError(f"{label} returned no computed tensor to schedule")
    return list(tensors)


def declaring_lines(name, module, args, kwargs) -> list:
    """The head of printed schedule code: imports, and ``args`` declared by the function."""
    from .module_path import import_lines
    call = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
    return ["from einloop import create_schedule, lower", *import_lines(module),
            f"from {module} import {name}", "",
            f"args = {name}({call})   # the operator's tensors, inputs first, outputs last"]


def schedule_lines(tensors, steps, func_name) -> list:
    """Lines binding the tensors of ``args`` to names, creating ``s`` and applying *steps*."""
    from ...schedule.steps import CodePrinter
    outputs = [t for t in tensors if isinstance(t.op, ComputeOp)]
    p = CodePrinter(outputs, reserved={"s", "args", "sys", "create_schedule", "lower", func_name})
    names = p.bind_tensors(tensors)
    p.lines.append(f"{', '.join(names)}{',' if len(names) == 1 else ''} = args")
    p.lines.append(f"s = create_schedule([{', '.join(p.tensor_of(p.s[t]) for t in outputs)}])")
    for st in steps:
        p.step(st)
    return p.lines


class DagTask:
    """One workload of a tensor-declaring function on a target; candidates are step lists."""

    kind = TaskKind.DAG
    config_space = None             # no template knobs: a search over step lists is its own

    def __init__(self, name, args=(), target="llvm", kwargs=None, module=None):
        from ...codegen.target import Target
        self.name = name
        self.module = module
        self.func = lookup_function(name, module)
        w = make_workload(name, args, kwargs)
        self.workload = DagWorkload(w.template, w.args, w.kwargs)
        self.args = self.workload.args
        self.kwargs = dict(self.workload.kwargs)
        self.target = str(Target.parse(target))
        self.target_spec = target
        self.cpu = Target.parse(target).cpu
        self.flop = count_flops(self.outputs_of(self.declare()))

    @classmethod
    def of(cls, func, args=(), target="llvm", kwargs=None) -> DagTask:
        """The task of function *func* (it must be importable by its module and name)."""
        name, module = getattr(func, "__name__", None), getattr(func, "__module__", None)
        if not name or name == "<lambda>" or "<locals>" in getattr(func, "__qualname__", ""):
            raise TuningError(f"create_task: {func!r} must be a module-level function, so that "
                              "worker processes can import it by name")
        if module == "__main__":
            raise TuningError(f"create_task: {name} is defined in the main script; worker "
                              "processes cannot import it from there. Move it into a module")
        return cls(name, args, target, kwargs, module)

    def __reduce__(self):
        return (DagTask, (self.name, self.args, self.target_spec, self.kwargs, self.module))

    @property
    def workload_key(self):
        return self.workload.key

    # the operator -------------------------------------------------------------------------------
    def declare(self) -> list:
        """Freshly declared tensors of the operator (the kernel's arguments, in order)."""
        return declare_tensors(self.func, self.args, self.kwargs, str(self.workload))

    @staticmethod
    def outputs_of(tensors) -> list:
        return [t for t in tensors if isinstance(t.op, ComputeOp)]

    # the candidate interface (see einloop.autotune.task.base) ------------------------------------------
    def candidate(self, x) -> StepsCandidate:
        """*x* (a StepsCandidate, or a sequence of Step) as a step-list candidate."""
        if isinstance(x, StepsCandidate):
            return x
        if isinstance(x, (list, tuple)):
            return StepsCandidate(tuple(x))
        raise TuningError(f"a candidate of {self!r} is a step list (StepsCandidate or a "
                          f"sequence of Step), got {x!r}")

    def reference_candidate(self) -> StepsCandidate:
        return StepsCandidate(())

    def instantiate_reference(self):
        return self.instantiate(self.reference_candidate())

    def instantiate(self, candidate):
        """The schedule of *candidate* replayed on freshly declared tensors, and the tensors."""
        from ...schedule.steps import replay
        steps = self.candidate(candidate).steps
        tensors = self.declare()
        return replay(steps, self.outputs_of(tensors)), tensors

    def candidate_from_json(self, d) -> StepsCandidate:
        if "steps" not in d:
            raise TuningLogError(f"a record of DAG function {self.name!r} holds a config, not a "
                                 "step list")
        try:
            return StepsCandidate.from_json(d["steps"])
        except Error as exc:
            raise TuningLogError(f"a logged step list of {self.workload} is malformed: "
                                 f"{exc}") from None

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "function": self.name, "module": self.module,
                "args": list(self.args), "kwargs": dict(self.kwargs), "target": self.target,
                "cpu": self.cpu, "workload": self.workload_key, "flop": self.flop}

    def code(self, candidate) -> str:
        """Python that declares the operator and applies the step list the way a user writes a
        schedule; running it binds ``s`` and ``args`` (``lower(s, args)`` is the loop nest)."""
        head = declaring_lines(self.name, self.module, self.args, self.kwargs)
        body = schedule_lines(self.declare(), self.candidate(candidate).steps, self.name)
        return "\n".join(head + body + ["print(lower(s, args))"])

    def __repr__(self):
        return f"DagTask({self.workload}, target={self.target_spec!r})"
