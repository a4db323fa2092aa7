"""Templates and tasks: a tunable operator and one instance of it (a workload) on a target.

``@template("name")`` registers a function that declares and schedules an operator, reading its
choices from ``get_config()``.  ``create_task(name, args, target)`` fixes the arguments: it
collects the template's configuration space once, counts the operator's flops, and can
instantiate any configuration as a schedule.  A task pickles as (template, module, args, target),
so worker processes can rebuild it.
"""
from __future__ import annotations

from dataclasses import dataclass
import functools
import importlib
import json

from ..errors import Error, InternalError, TuningError
from ..ir import expr as E
from ..te.tensor import ComputeOp, Tensor
from ..ir.visit import children, walk
from .dispatcher import SpaceContext, ConfigContext, workload_scope
from .space import ConfigSpace

TEMPLATES = {}          # name -> (function, module name)


@dataclass(frozen=True)
class Workload:
    """A template name with JSON-native arguments; ``key`` identifies it in logs."""
    template: str
    args: tuple
    kwargs: tuple = ()

    @property
    def key(self):
        return json.dumps([self.template, list(self.args), dict(self.kwargs)], sort_keys=True)

    def __str__(self):
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs])
        return f"{self.template}({args})"


def _numpy_scalar(value):
    """json.dumps hook: a NumPy scalar (``np.int64(256)``, ``np.float32(0.5)``) as its Python
    number, so it names the same workload as the plain number."""
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == () and item:
        return item()
    raise TypeError(value)


def _json_native(value, where):
    try:
        return json.loads(json.dumps(value, default=_numpy_scalar))
    except (TypeError, ValueError):
        raise TuningError(f"{where}: argument {value!r} is not JSON-serialisable; template "
                          "arguments must be numbers, strings, booleans or lists of them") from None


def make_workload(name, args, kwargs=None):
    args = tuple(_json_native(a, f"template {name!r}") for a in args)
    args = tuple(tuple(a) if isinstance(a, list) else a for a in args)
    kw = tuple(sorted((k, _json_native(v, f"template {name!r}")) for k, v in (kwargs or {}).items()))
    return Workload(name, args, kw)


def template(name):
    """Register a tunable template under *name* (it returns ``(schedule, args)``)."""
    if not isinstance(name, str) or not name:
        raise TuningError("@template needs a name: @autotune.template('matmul')")

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            workload = make_workload(name, args, kwargs)
            with workload_scope(workload):          # the template sees the normalised values
                out = fn(*workload.args, **dict(workload.kwargs))
            if not (isinstance(out, tuple) and len(out) == 2):
                raise TuningError(f"template {name!r} must return (schedule, args)")
            return out
        wrapper.template_name = name
        TEMPLATES[name] = (wrapper, fn.__module__)
        return wrapper
    return deco


def import_module(module, what):
    """Import *module* for *what*; any failure (missing, or raising while it runs) is a
    TuningError naming the module, since its code is the user's."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TuningError(f"{what}: cannot import {module!r}: {exc}. Run from the folder that "
                          "holds it, or add that folder to PYTHONPATH") from None
    except Exception as exc:                # noqa: BLE001 -- the user's module raised
        raise TuningError(f"{what}: importing {module!r} raised {type(exc).__name__}: "
                          f"{exc}") from exc


def lookup_template(name, module=None):
    if name not in TEMPLATES and module:
        import_module(module, f"template {name!r}")
    if name not in TEMPLATES:
        raise TuningError(f"no template named {name!r} is registered (known: "
                          f"{', '.join(sorted(TEMPLATES)) or 'none'}); import the module that "
                          "defines it, or pass module:template on the command line")
    return TEMPLATES[name][0]


def count_flops(outputs):
    """Float operations of the operator, counted from its compute expressions."""
    seen, total = set(), 0
    todo = [t.op for t in outputs if isinstance(t.op, ComputeOp)]
    while todo:
        op = todo.pop()
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        points = 1
        for n in op.shape:
            points *= n
        body = op.body
        per_point = 0
        if isinstance(body, E.Reduce):
            extent = 1
            for iv in body.axes:
                extent *= iv.extent
            per_point = extent * (_ops(body.source) + 1)
        else:
            per_point = _ops(body)
        total += points * per_point
        todo.extend(t.op for t in op.input_tensors)
    return total


def _ops(e):
    """Arithmetic operations on values: index arithmetic (integer expressions of loop variables
    only, in subscripts or in conditions) is not work and is not counted."""
    if isinstance(e, E.TensorRead) or _is_index_math(e):
        return 0
    own = 1 if (isinstance(e, E.Binary) and e.op in ("+", "-", "*", "/", "max", "min")) \
        or isinstance(e, E.Call) else 0
    return own + sum(_ops(c) for c in children(e))


def _is_index_math(e):
    return e.dtype == "int64" and not any(isinstance(x, E.TensorRead) for x in walk(e))


class Task:
    """One workload of a template on a target: its space, flops and candidate schedules."""

    def __init__(self, name, args=(), target="llvm", kwargs=None, module=None):
        from ..codegen.target import Target
        self.name = name
        self.func = lookup_template(name, module)
        self.module = module or TEMPLATES[name][1]
        self.workload = make_workload(name, args, kwargs)
        self.args = self.workload.args
        self.kwargs = dict(self.workload.kwargs)
        self.target = str(Target.parse(target))
        self.target_spec = target
        self.cpu = Target.parse(target).cpu
        space = ConfigSpace()
        with SpaceContext(space):
            try:
                _, tensors = self.func(*self.args, **self.kwargs)
            except (Error, InternalError):
                raise
            except Exception as exc:        # noqa: BLE001 -- e.g. wrong number of arguments
                raise TuningError(f"template {name!r} raised {type(exc).__name__} while "
                                  f"collecting its space for {self.workload}: {exc}") from exc
        self.config_space = space
        outputs = [t for t in tensors if isinstance(t, Tensor) and isinstance(t.op, ComputeOp)]
        self.flop = count_flops(outputs)

    def __reduce__(self):
        return (Task, (self.name, self.args, self.target_spec, self.kwargs, self.module))

    @property
    def workload_key(self):
        return self.workload.key

    def instantiate(self, config):
        """The schedule and argument tensors of *config* (a ConfigEntity or an index)."""
        if isinstance(config, int):
            config = self.config_space.get(config)
        with ConfigContext(config):
            return self.func(*self.args, **self.kwargs)

    def fallback_config(self):
        from .space import FallbackConfig
        return FallbackConfig(self.config_space)

    def __repr__(self):
        return f"Task({self.workload}, target={self.target_spec!r}, space={len(self.config_space)})"


def create_task(name, args=(), target="llvm", kwargs=None, module=None) -> Task:
    """A tuning task: template *name* applied to *args*, compiled for *target*."""
    if callable(name) and hasattr(name, "template_name"):
        name = name.template_name
    return Task(name, tuple(args), target, kwargs, module)
