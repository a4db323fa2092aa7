"""Templates and tasks: a tunable operator and one instance of it (a workload) on a target.

``@template("name")`` registers a function that declares and schedules an operator, reading its
choices from ``get_config()``.  ``create_task(name, args, target)`` fixes the arguments: it
collects the template's configuration space once, counts the operator's flops, and can
instantiate any configuration as a schedule.  A task pickles as (template, module, args, target),
so worker processes can rebuild it.

Two front ends share the tuning machinery (:class:`TaskKind`): a template task (:class:`Task`,
candidates are configurations) and a DAG task (:class:`~einloop.autotune.task.dag.DagTask`, a
function that declares tensors, candidates are step lists).  Measurement, records and
deployment use only this interface of a task:

``kind``, ``name``, ``module``, ``args``, ``kwargs``, ``target``, ``target_spec``, ``cpu``,
``flop``, ``workload`` (``workload_key``)
``candidate(x)``              a candidate (or its ``wire`` form, or what a user passes) checked
                              and normalised; TuningError if it is not one of this task's
``reference_candidate()``     the candidate whose outputs are the correctness reference
``instantiate(candidate)``    ``(schedule, argument tensors)``
``instantiate_reference()``   the same of the reference candidate (whose shapes size the inputs)
``candidate_from_json(d)``    the candidate of a record dict (``{"config": ..}``/``{"steps": ..}``)
``to_json()``                 the record's ``"task"`` field
``code(candidate)``           the candidate as readable schedule code (``einloop log --code``)
"""
from __future__ import annotations

from dataclasses import dataclass
import enum
import functools
import importlib
import json

from ...errors import Error, InternalError, TuningError, TuningLogError
from ...te.tensor import ComputeOp, Tensor
from ...te.dag import ComputeDAG
from .context import SpaceContext, ConfigContext, workload_scope
from ..space.knobs import ConfigSpace

TEMPLATES = {}          # name -> (function, module name)


class TaskKind(enum.Enum):
    """The front end of a task; written to records as the task's ``"kind"`` (templates omit it,
    as logs did before step lists existed)."""
    TEMPLATE = "template"
    DAG = "dag"
    AUTO = "auto"


@dataclass(frozen=True)
class Workload:
    """A template name with JSON-native arguments; ``key`` identifies it in logs."""
    template: str
    args: tuple
    kwargs: tuple = ()

    kind = TaskKind.TEMPLATE

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
    """Float operations of the operator (see :meth:`einloop.te.dag.ComputeDAG.flop_count`)."""
    outputs = [t for t in outputs if isinstance(t.op, ComputeOp)]
    return ComputeDAG(outputs).flop_count() if outputs else 0


class Task:
    """One workload of a template on a target: its space, flops and candidate schedules."""

    kind = TaskKind.TEMPLATE

    def __init__(self, name, args=(), target="llvm", kwargs=None, module=None):
        from ...codegen.target import Target
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
        if self.module == "__main__":       # not importable in a worker: send it by value
            return (_task_of_main_template, (_template_by_value(self.name), self.name,
                                             self.args, self.target_spec, self.kwargs))
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
        from ..space.knobs import FallbackConfig
        return FallbackConfig(self.config_space)

    # the candidate interface (see the module docstring) ---------------------------------------
    def candidate(self, config):
        """*config* (a ConfigEntity or an index) as a ConfigEntity of this task's space."""
        index = getattr(config, "index", config)
        if not isinstance(index, int) or isinstance(index, bool):
            raise TuningError(f"measure_batch takes ConfigEntity objects or config indices, got "
                              f"{config!r}")
        if not 0 <= index < len(self.config_space):
            raise TuningError(f"config index {index} is outside the space of {self!r} "
                              f"(0..{len(self.config_space) - 1})")
        return config if getattr(config, "space", None) is self.config_space \
            else self.config_space.get(index)

    def reference_candidate(self):
        return self.fallback_config()

    def instantiate_reference(self):
        return self.instantiate(self.reference_candidate())

    def candidate_from_json(self, d):
        """The config of record dict *d*; TuningError if it does not fit the space as it is."""
        if "config" not in d:
            raise TuningLogError(f"a record of template {self.name!r} holds a step list, not a "
                                 "config")
        return self.config_space.from_json(d["config"])

    def to_json(self):
        from .module_path import module_file
        return {"template": self.name, "args": list(self.args), "kwargs": dict(self.kwargs),
                "target": self.target, "cpu": self.cpu, "workload": self.workload_key,
                "module": self.module, "flop": self.flop, "module_file": module_file(self.module)}

    def code(self, config):
        from .code import config_code
        return config_code(self, config)

    def __repr__(self):
        return f"Task({self.workload}, target={self.target_spec!r}, space={len(self.config_space)})"


def _template_by_value(name) -> bytes:
    """The function of template *name*, defined in ``__main__`` (a script, standard input, a
    notebook), pickled by value: worker processes never import the user's main module."""
    import cloudpickle                      # a dependency; here because only this needs it
    fn = TEMPLATES[name][0].__wrapped__
    try:
        return cloudpickle.dumps(fn)
    except Exception as exc:                # noqa: BLE001 -- what the template refers to
        raise TuningError(f"template {name!r} (defined in the main module) cannot be sent to "
                          f"the build workers: {type(exc).__name__}: {exc}. Move it into a "
                          "module") from None


def _task_of_main_template(fn_bytes, name, args, target, kwargs):
    """A worker's copy of a task whose template was defined in the parent's ``__main__``."""
    import pickle
    if name not in TEMPLATES:
        template(name)(pickle.loads(fn_bytes))
    return Task(name, args, target, kwargs, "__main__")


def create_task(name, args=(), target="llvm", kwargs=None, module=None, cores=None):
    """A tuning task: template *name* applied to *args*, compiled for *target*.

    *name* may also be a plain module-level function that declares an operator and returns its
    tensors (inputs first, outputs last): that is an auto-scheduling task, searching the space
    generated from its DAG (:class:`~einloop.autotune.task.auto.AutoTask`).

    A name with a *module* (the CLI's ``module:name``) is the module's attribute *name*: a
    template-decorated function is its template, a plain function an auto-scheduling task; only
    a module without that attribute falls back to the template registered under *name*.  A bare
    name (no module) is a registered template.

    *cores* (auto-scheduling tasks only): the threads the tuned kernels will run on, which the
    generated space aims its parallel loops at; by default this process's (``EINLOOP_NUM_THREADS``
    or the affinity mask), so tuning for a cluster's runners on another machine passes theirs.
    """
    if module and isinstance(name, str):
        mod = import_module(module, f"{module}:{name}")
        fn = getattr(mod, name, None)
        if callable(fn) and hasattr(fn, "template_name"):
            name = fn.template_name
        elif callable(fn):
            from .auto import AutoTask
            return AutoTask(name, tuple(args), target, kwargs, module, cores=cores)
        elif name not in TEMPLATES:
            raise TuningError(_no_such_name(mod, name, fn))
    elif callable(name) and hasattr(name, "template_name"):
        name = name.template_name
    elif callable(name):
        from .auto import create_auto_task
        return create_auto_task(name, tuple(args), target, kwargs, cores)
    if cores is not None:
        raise TuningError(f"create_task: cores={cores!r} is for auto-scheduling tasks (a plain "
                          f"function); template {name!r} gets its parallel loops from its "
                          "knobs")
    return Task(name, tuple(args), target, kwargs, module)


def _no_such_name(mod, name, value) -> str:
    """Why ``MODULE:NAME`` names nothing to tune: what the module's file lacks, and what it
    defines instead (its public functions, and the templates it registers)."""
    import inspect
    import os
    where = getattr(mod, "__file__", None) or mod.__name__
    if os.path.isabs(where) and os.path.abspath(where).startswith(os.getcwd() + os.sep):
        where = os.path.relpath(where)
    functions = sorted(k for k, v in vars(mod).items() if inspect.isfunction(v)
                       and v.__module__ == mod.__name__ and not k.startswith("_"))
    templates = sorted(t for t, (_, m) in TEMPLATES.items() if m == mod.__name__)
    what = (f"defines no {name!r}" if value is None
            else f"defines {name!r} (of type {type(value).__name__}), which is not a function")
    offers = " and ".join(part for part in (
        f"defines the functions {', '.join(functions)}" if functions else "",
        f"registers the templates {', '.join(map(repr, templates))}" if templates else "")
        if part) or "defines no function and registers no template"
    return f"{where} {what}, and no template of that name is registered; it {offers}"


def task_from_record(r):
    """The task a log record *r* was measured for (importing its module if needed)."""
    if r.kind is TaskKind.AUTO:
        from .auto import task_from_auto_record
        return task_from_auto_record(r)
    if r.kind is TaskKind.DAG:
        from .dag import DagTask
        return DagTask(r.name, r.args, kwargs=r.kwargs, module=r.module or None)
    # a template record names the template itself, not a module attribute
    from .module_path import make_importable
    make_importable(r.module, r.module_file)    # a module given as a file path when tuning
    return Task(r.name, r.args, kwargs=r.kwargs, module=r.module or None)
