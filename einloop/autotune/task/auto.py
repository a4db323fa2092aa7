"""Auto-scheduling tasks: an operator tuned from its declaration alone, with no template.

An :class:`AutoTask` holds an operator (a module-level function returning its tensors, inputs first
and outputs last, or those tensors themselves) and searches the schedule space that
``einloop.autotune.space.sketch.generate_space`` generates from its DAG.  That space is an ordinary
:class:`~einloop.autotune.space.knobs.ConfigSpace`, so every tuner, resuming, ``load_history`` and
the CLI work on it unchanged; a configuration is measured as its step list (:class:`AutoConfig`:
the build workers replay steps and never regenerate the space).

Records are self-contained: they hold the step list, the configuration's index (for resuming
and the cost model), the name table of the declaration and a workload key made of the DAG's
structural hash (:meth:`einloop.te.dag.ComputeDAG.structural_hash`), so any process that
declares the same operator, under any names, finds them (:mod:`.step_names` renames the steps).
The correctness reference and the deploy-time fallback is the space's ``default_steps()``.
"""
from __future__ import annotations

from dataclasses import dataclass
import json

from ...codegen.target import Target
from ...errors import Error, TuningError, TuningLogError
from ...schedule.replay import replay
from ...schedule.schedule import Schedule
from ...te.dag import ComputeDAG
from ...te.tensor import Tensor
from ..space.candidate import StepsCandidate
from ..space.knobs import ConfigEntity
from ..space.sketch import generate_space
from ..space.sketch.analysis import MachineModel
from .base import TaskKind, Workload, count_flops, make_workload, outputs_of
from .declare import declare_tensors, declaring_lines, lookup_function, schedule_lines
from .module_path import make_importable, module_file
from .step_names import name_table, translate_steps


@dataclass(frozen=True)
class AutoWorkload(Workload):
    """An operator identified by the structural hash of its DAG (not by names or arguments)."""
    dag_hash: str = ""

    kind = TaskKind.AUTO

    @property
    def key(self):
        return json.dumps({"auto": self.dag_hash})

    def __str__(self):
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs])
        return f"{self.template}({args})" if self.args or self.kwargs else self.template


class AutoConfig(ConfigEntity):
    """A configuration of a generated space, measured as its step list.  A config whose steps
    do not apply keeps the reason (``error``) and fails its build with it."""

    def __init__(self, space, index, steps, error=""):
        super().__init__(space, index)
        self.steps = tuple(steps)
        self.error = error

    @property
    def wire(self):
        return BrokenConfig(self.index, self.error) if self.error else StepsCandidate(self.steps)

    def to_record(self):
        return {"steps": StepsCandidate(self.steps).to_json(), "config_index": self.index}


@dataclass(frozen=True)
class BrokenConfig:
    """The wire form of a config whose steps do not apply: the build worker fails with why."""
    index: int
    error: str


def check_tensors(tensors, where) -> list:
    """*tensors* (one tensor or a list, inputs first, outputs last) as a list; TuningError if
    they are not tensors or compute nothing."""
    tensors = [tensors] if isinstance(tensors, Tensor) else tensors
    if not isinstance(tensors, (list, tuple)) or not tensors \
            or not all(isinstance(t, Tensor) for t in tensors):
        raise TuningError(f"{where}: expected the operator's tensors (a list, inputs first, "
                          f"outputs last), got {type(tensors).__name__}")
    if not outputs_of(tensors):
        raise TuningError(f"{where}: the tensors hold no computed tensor to schedule")
    return list(tensors)


class AutoTask:
    """One operator on one target, tuned in a generated schedule space (see module docstring).

    Make one with :func:`create_auto_task` (a function and its arguments) or
    :meth:`of_tensors`; it implements :class:`~.interface.TuningTask`.
    """

    kind = TaskKind.AUTO
    reference_name = "generated default schedule"

    def __init__(self, name, args=(), target="llvm", kwargs=None, module=None, tensors=None,
                 default_steps=None, cores=None, point=None):
        self.name, self.module = name, module
        self.func = lookup_function(name, module) if tensors is None else None
        self._tensors = None if tensors is None else check_tensors(tensors, "auto_schedule")
        w = make_workload(name, args, kwargs)
        self.args, self.kwargs = w.args, dict(w.kwargs)
        self.target = str(Target.parse(target))
        self.target_spec = target
        self.cpu = Target.parse(target).cpu
        # the threads the kernels will run on (None: this process's, as MachineModel.of reads
        # them); the space's parallel and rfactor choices depend on it
        self.cores = cores
        self.machine = MachineModel.of(target, cores)
        tensors = self.declare()
        dag = ComputeDAG(outputs_of(tensors))
        self.dag_hash = dag.structural_hash()
        self.workload = AutoWorkload(w.template, w.args, w.kwargs, self.dag_hash)
        self.flop = count_flops(outputs_of(tensors))
        self.names = self._name_table(tensors)
        self._sketch = None
        self._default_steps = None if default_steps is None else tuple(default_steps)
        self.point = point       # a SizePoint: this operator bound at sizes of a symbolic one

    @classmethod
    def of_tensors(cls, tensors, target="llvm", cores=None, point=None) -> AutoTask:
        """The task of already declared *tensors* (inputs first, outputs last)."""
        tensors = check_tensors(tensors, "auto_schedule")
        name = "+".join(t.name for t in outputs_of(tensors))
        return cls(name, (), target, tensors=tensors, cores=cores, point=point)

    def __reduce__(self):
        if self._tensors is not None:       # a DAG pickles whole (custom reducers: see te.reduce)
            return (_tensors_task, (self._tensors, self.target_spec, self.default_steps(),
                                    self.point, self.cores))
        return (AutoTask, (self.name, self.args, self.target_spec, self.kwargs, self.module,
                           None, self.default_steps(), self.cores, self.point))

    @property
    def workload_key(self):
        return self.workload.key

    # the operator and its space -------------------------------------------------------------------
    def declare(self) -> list:
        """The operator's tensors (freshly declared for a function task)."""
        if self._tensors is not None:
            return list(self._tensors)
        label = f"{self.name}({', '.join(map(repr, self.args))})"
        return declare_tensors(self.func, self.args, self.kwargs, label)

    @staticmethod
    def _name_table(tensors) -> list:
        return name_table(Schedule(outputs_of(tensors)))

    @property
    def sketch(self):
        """The generated schedule space (``SketchSpace``), built on first use."""
        if self._sketch is None:
            self._sketch = generate_space(outputs_of(self.declare()), self.machine)
        return self._sketch

    @property
    def config_space(self):
        return self.sketch.config_space

    def default_steps(self) -> tuple:
        """The safe fast schedule: correctness reference and deploy-time fallback."""
        if self._default_steps is None:
            self._default_steps = tuple(self.sketch.default_steps())
        return self._default_steps

    def seed_configs(self, n) -> list:
        """Up to *n* heuristic configurations worth measuring first (the space's own picks),
        each making a schedule of its own: two seeds that differ only in knobs their rules do
        not take make the same schedule (on an AVX2 machine, two of a dense layer's seeds), and
        the tuner measures a schedule once, so the space is asked for twice as many."""
        seeds = getattr(self.sketch, "seed_configs", None)
        out, keys = [], set()
        for c in (seeds(2 * n) if seeds and n > 0 else ()):
            cand = self.candidate(c)
            key = self.schedule_key(cand)
            if key not in keys:
                keys.add(key)
                out.append(cand)
                if len(out) == n:
                    break
        return out

    # the candidate interface (TuningTask) ----------------------------------------
    def candidate(self, x):
        """*x* as a candidate: a config (index or ConfigEntity of the space) becomes an
        :class:`AutoConfig`; a step list stays a StepsCandidate."""
        if isinstance(x, (AutoConfig, StepsCandidate)):
            return x
        if isinstance(x, BrokenConfig):
            raise TuningError(f"config {x.index} of {self!r} makes no schedule: {x.error}")
        if isinstance(x, (list, tuple)):
            return StepsCandidate(tuple(x))
        index = getattr(x, "index", x)
        if not isinstance(index, int) or isinstance(index, bool):
            raise TuningError(f"a candidate of {self!r} is a config (index or ConfigEntity) or a "
                              f"step list, got {x!r}")
        space = self.config_space
        if not 0 <= index < space.size:
            raise TuningError(f"config index {index} is outside the space of {self!r} "
                              f"(0..{space.size - 1})")
        try:
            return AutoConfig(space, index, self.sketch.steps(space.get(index)))
        except Error as exc:
            return AutoConfig(space, index, (), f"{type(exc).__name__}: {exc}")

    def schedule_key(self, candidate):
        """The step list *candidate* makes, as JSON: a generated space has a knob for every
        choice of every rule, and a knob of a rule a config does not take (the tile sizes of a
        stage it makes a row reduction) changes nothing, so thousands of configs share one
        schedule.  A config whose steps do not apply is a schedule of its own."""
        cand = self.candidate(candidate)
        if getattr(cand, "error", ""):
            return ("broken", cand.index)
        return StepsCandidate(cand.steps).key

    def reference_candidate(self) -> StepsCandidate:
        return StepsCandidate(self.default_steps())

    def instantiate(self, candidate):
        """``(schedule, tensors)`` of *candidate*, its steps replayed on the declaration."""
        cand = self.candidate(candidate)
        if getattr(cand, "error", ""):
            self.candidate(cand.wire)           # raises, saying why
        deployed = None if self.point is None else self.point.deployed
        tensors = self.declare() if deployed is None else list(deployed)
        return replay(cand.steps, outputs_of(tensors)), tensors

    def instantiate_reference(self):
        """``(schedule, tensors)`` of the reference candidate, on the operator at its sizes."""
        tensors = self.declare()
        return replay(self.default_steps(), outputs_of(tensors)), tensors

    def candidate_from_json(self, d):
        """The candidate of record dict *d* (``steps``, optional ``config_index`` and ``names``):
        its steps renamed for this declaration; an AutoConfig when the space is loaded and its
        config of that index has exactly these steps (so tuners may resume from it)."""
        if "steps" not in d:
            raise TuningLogError(f"a record of {self.workload} holds a config, not a step list")
        try:
            steps = StepsCandidate.from_json(d["steps"]).steps
        except Error as exc:
            raise TuningLogError(f"a logged step list of {self.workload} is malformed: "
                                 f"{exc}") from None
        steps = translate_steps(steps, outputs_of(self.declare()), d.get("names"))
        index = d.get("config_index")
        if self._sketch is not None and isinstance(index, int) \
                and 0 <= index < self.config_space.size:
            cfg = self.candidate(index)
            if cfg.steps == steps:
                return cfg
        return StepsCandidate(steps)

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "function": self.name, "module": self.module or "",
                "args": list(self.args), "kwargs": dict(self.kwargs), "target": self.target,
                "cpu": self.cpu, "workload": self.workload_key, "dag_hash": self.dag_hash,
                "names": self.names, "flop": self.flop, "module_file": self._module_file(),
                **({"dynamic": self.point.to_json()} if self.point else {})}

    def _module_file(self) -> str:
        """Where the function's module is, so that ``einloop log --code`` finds it later."""
        return module_file(self.module)

    def code(self, candidate) -> str:
        """Python that declares the operator (through its function) and applies the step list;
        running it binds ``s`` and ``args``."""
        body = schedule_lines(self.declare(), self.candidate(candidate).steps, self.name)
        if self.func is None:
            head = ["from einloop import create_schedule, lower", "",
                    "# args: the operator's tensors, inputs first, outputs last (declare them as "
                    "when tuning)"]
        else:
            head = declaring_lines(self.name, self.module, self.args, self.kwargs)
        return "\n".join(head + body + ["print(lower(s, args))"])

    def __repr__(self):
        return f"AutoTask({self.workload}, target={self.target_spec!r})"


def _tensors_task(tensors, target, default_steps, point=None, cores=None):
    task = AutoTask.of_tensors(tensors, target, cores, point)
    task._default_steps = tuple(default_steps)
    return task


def create_auto_task(func, args=(), target="llvm", kwargs=None, cores=None) -> AutoTask:
    """The auto-scheduling task of *func* (a module-level function returning tensors, inputs
    first, outputs last) applied to *args*; *cores*: the threads its kernels will run on
    (default: this process's, see
    :meth:`~einloop.autotune.space.sketch.analysis.MachineModel.of`). Build workers re-declare
    the operator by importing the function; one defined in ``__main__`` (a script, standard
    input, a notebook) is declared here instead and its DAG is sent to them."""
    name, module = getattr(func, "__name__", None), getattr(func, "__module__", None)
    if not name or name == "<lambda>" or "<locals>" in getattr(func, "__qualname__", ""):
        raise TuningError(f"create_task: {func!r} must be a module-level function, so that "
                          "worker processes can import it by name (or pass its tensors to "
                          "autotune.auto_schedule)")
    if module == "__main__":    # a script, standard input, a notebook: workers get the DAG
        label = f"{name}({', '.join(map(repr, args))})"
        tensors = declare_tensors(func, tuple(args), dict(kwargs or {}), label)
        return AutoTask(name, tuple(args), target, kwargs, tensors=tensors, cores=cores)
    return AutoTask(name, tuple(args), target, kwargs, module, cores=cores)


def task_from_auto_record(r) -> AutoTask:
    """The task of auto record *r*: its function re-declared (TuningError if the record was of
    tensors, not of a function, or the function is not importable here)."""
    if not r.module:
        raise TuningError(f"the record of {r.name} was tuned from tensors, not from a function; "
                          "declare them and pass them to autotune.auto_schedule")
    make_importable(r.module, r.module_file)    # a module given as a file path when tuning
    return AutoTask(r.name, r.args, kwargs=r.kwargs, module=r.module)
