"""Making tasks: from what a user passes (:func:`create_task`) and from a log record
(:func:`task_from_record`).  The only module that knows every kind of task."""
from __future__ import annotations

import inspect
import os

from ...errors import TuningError, TuningLogError
from .auto import AutoTask, create_auto_task, task_from_auto_record
from .base import TaskKind, import_module
from .module_path import make_importable
from .template import TEMPLATES, Task


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
            return AutoTask(name, tuple(args), target, kwargs, module, cores=cores)
        elif name not in TEMPLATES:
            raise TuningError(_no_such_name(mod, name, fn))
    elif callable(name) and hasattr(name, "template_name"):
        name = name.template_name
    elif callable(name):
        return create_auto_task(name, tuple(args), target, kwargs, cores)
    if cores is not None:
        raise TuningError(f"create_task: cores={cores!r} is for auto-scheduling tasks (a plain "
                          f"function); template {name!r} gets its parallel loops from its "
                          "knobs")
    return Task(name, tuple(args), target, kwargs, module)


def _no_such_name(mod, name, value) -> str:
    """Why ``MODULE:NAME`` names nothing to tune: what the module's file lacks, and what it
    defines instead (its public functions, and the templates it registers)."""
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
        return task_from_auto_record(r)
    if r.kind is TaskKind.DAG:
        raise TuningLogError(f"the record of {r.name} is of a step-list (DAG) task of einloop "
                             "0.1, which einloop no longer tunes; tune the function again with "
                             f"autotune.auto_schedule or create_task({r.name}, ...)")
    # a template record names the template itself, not a module attribute
    make_importable(r.module, r.module_file)    # a module given as a file path when tuning
    return Task(r.name, r.args, kwargs=r.kwargs, module=r.module or None)
