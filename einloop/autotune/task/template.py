"""Template tasks: ``@template("name")`` registers a function that declares and schedules an
operator, reading its choices from ``get_config()``; :class:`Task` fixes its arguments and
target, collects the configuration space once, counts the flops and instantiates any
configuration as a schedule.  A task pickles as (template, module, args, target), so worker
processes rebuild it; a template defined in ``__main__`` travels by value.
"""
from __future__ import annotations

import functools
import pickle

import cloudpickle

from ...codegen.target import Target
from ...errors import Error, InternalError, TuningError, TuningLogError
from ..space.knobs import ConfigSpace, FallbackConfig
from .base import TaskKind, count_flops, import_module, make_workload, outputs_of
from .code import config_code
from .context import ConfigContext, SpaceContext, workload_scope
from .module_path import module_file

TEMPLATES = {}          # name -> (function, module name)


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


def lookup_template(name, module=None):
    if name not in TEMPLATES and module:
        import_module(module, f"template {name!r}")
    if name not in TEMPLATES:
        raise TuningError(f"no template named {name!r} is registered (known: "
                          f"{', '.join(sorted(TEMPLATES)) or 'none'}); import the module that "
                          "defines it, or pass module:template on the command line")
    return TEMPLATES[name][0]


class Task:
    """One workload of a template on a target: its space, flops and candidate schedules."""

    kind = TaskKind.TEMPLATE
    reference_name = "fallback config"

    def __init__(self, name, args=(), target="llvm", kwargs=None, module=None):
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
        self.flop = count_flops(outputs_of(tensors))

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
        return FallbackConfig(self.config_space)

    # the candidate interface (TuningTask) ---------------------------------------
    def candidate(self, config):
        """*config* (a ConfigEntity or an index) as a ConfigEntity of this task's space."""
        index = getattr(config, "index", config)
        if not isinstance(index, int) or isinstance(index, bool):
            raise TuningError(f"measure_batch takes ConfigEntity objects or config indices, got "
                              f"{config!r}")
        if not 0 <= index < self.config_space.size:
            raise TuningError(f"config index {index} is outside the space of {self!r} "
                              f"(0..{self.config_space.size - 1})")
        return config if getattr(config, "space", None) is self.config_space \
            else self.config_space.get(index)

    def schedule_key(self, candidate):
        """A template's configs are its schedules (its function may ignore a knob, but only
        it knows): the config's index."""
        return self.candidate(candidate).index

    def reference_candidate(self):
        """The template's fallback config: its outputs are the correctness reference."""
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
        return {"template": self.name, "args": list(self.args), "kwargs": dict(self.kwargs),
                "target": self.target, "cpu": self.cpu, "workload": self.workload_key,
                "module": self.module, "flop": self.flop, "module_file": module_file(self.module)}

    def code(self, config):
        return config_code(self, config)

    def __repr__(self):
        return f"Task({self.workload}, target={self.target_spec!r}, space={self.config_space.size})"


def _template_by_value(name) -> bytes:
    """The function of template *name*, defined in ``__main__`` (a script, standard input, a
    notebook), pickled by value: worker processes never import the user's main module."""
    fn = TEMPLATES[name][0].__wrapped__
    try:
        return cloudpickle.dumps(fn)
    except Exception as exc:                # noqa: BLE001 -- what the template refers to
        raise TuningError(f"template {name!r} (defined in the main module) cannot be sent to "
                          f"the build workers: {type(exc).__name__}: {exc}. Move it into a "
                          "module") from None


def _task_of_main_template(fn_bytes, name, args, target, kwargs):
    """A worker's copy of a task whose template was defined in the parent's ``__main__``."""
    if name not in TEMPLATES:
        template(name)(pickle.loads(fn_bytes))
    return Task(name, args, target, kwargs, "__main__")


