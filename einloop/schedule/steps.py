"""The schedule step vocabulary: every kind of step a schedule records, registered once.

A :class:`Step` is one primitive applied to one stage, with plain names and numbers as arguments,
so a schedule can be printed, stored as JSON and replayed on freshly declared tensors (the
auto-tuner stores steps, never Python objects).  Each :class:`StepKind` is registered here with
its argument fields (how it serialises, and how a loaded one is validated), how it applies to a
schedule and how it prints as schedule code.  ``Stage``/``Schedule`` primitives record through
:func:`record`, replay dispatches through :func:`apply_step`, printers go through
:func:`step_code`: adding a step kind is one ``_register`` call, and
``tests/schedule/test_step_registry.py`` fails for a primitive that has none.

For the tuning layer: :func:`steps_to_json`, :func:`steps_from_json` (validating);
:mod:`.replay` applies steps to a fresh schedule and prints them as runnable code.
"""
from __future__ import annotations

import enum
import numbers
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from ..errors import InternalError, ScheduleError


class StepKind(enum.Enum):
    """A schedule primitive that a schedule records; the value is its method name and JSON kind."""
    SPLIT = "split"
    FUSE = "fuse"
    REORDER = "reorder"
    VECTORIZE = "vectorize"
    PARALLEL = "parallel"
    UNROLL = "unroll"
    COMPUTE_AT = "compute_at"
    COMPUTE_INLINE = "compute_inline"
    COMPUTE_ROOT = "compute_root"
    CACHE_WRITE = "cache_write"
    CACHE_READ = "cache_read"
    PACK = "pack"
    RFACTOR = "rfactor"
    SPLIT_RESIDUES = "split_residues"
    DEINTERLEAVE = "deinterleave"
    PREFETCH = "prefetch"
    NONTEMPORAL = "nontemporal"
    STORAGE_ORDER = "storage_order"
    TENSORIZE = "tensorize"


class StepScope(enum.Enum):
    """Whose method a step is: ``s[T].kind(...)`` or ``s.kind(T, ...)``."""
    STAGE = "stage"
    SCHEDULE = "schedule"


class Returns(enum.Enum):
    """What the primitive returns, so printed code can bind it to Python names."""
    NOTHING = "nothing"
    LOOPS = "a tuple of loops"
    LOOP = "one loop"
    TENSOR = "a tensor"


class FieldType(enum.Enum):
    """The JSON type of a step argument; the value says it in an error message."""
    NAME = "a non-empty string"
    NAMES = "a non-empty list of non-empty strings"
    COUNT = "a positive integer"
    INDEX = "a non-negative integer"
    COUNTS = "a non-empty list of positive integers"


@dataclass(frozen=True)
class Field:
    """One argument of a step kind (its JSON name, type, and default when it may be left out)."""
    name: str
    type: FieldType
    required: bool = True
    default: object = None


@dataclass(frozen=True)
class StepSpec:
    """Everything about one step kind: its arguments, how it applies and how it prints.

    ``apply(schedule, stage, args)`` replays it; ``code_args(args, names, stage)`` gives the
    printed arguments after the stage (or, for a schedule method, after its tensor); ``check``
    names a rule across fields that a loaded step breaks (``None`` when it holds).
    """
    kind: StepKind
    target: StepScope
    fields: tuple
    apply: Callable
    code_args: Callable
    returns: Returns = Returns.NOTHING
    check: Callable | None = None


_REGISTRY: dict = {}


def _register(kind, target, fields, apply, code_args, returns=Returns.NOTHING, check=None):
    if kind in _REGISTRY:
        raise InternalError(f"schedule step kind {kind.value!r} is registered twice")
    _REGISTRY[kind] = StepSpec(kind, target, tuple(fields), apply, code_args, returns, check)


def spec(kind) -> StepSpec:
    """The registered description of *kind* (a StepKind or its name)."""
    return _REGISTRY[step_kind(kind)]


def registered_kinds() -> tuple:
    return tuple(_REGISTRY)


def step_kind(kind) -> StepKind:
    """*kind* as a registered StepKind; an unknown name is a ScheduleError."""
    if isinstance(kind, StepKind):
        found = kind
    else:
        found = next((k for k in StepKind if k.value == kind), None)
    if found is None or found not in _REGISTRY:
        raise ScheduleError(f"unknown schedule step kind {kind!r}; the known kinds are "
                            f"{', '.join(k.value for k in _REGISTRY)}")
    return found


# steps ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One primitive applied to one stage: ``kind`` with JSON-friendly ``args``.

    Validated on construction against the kind's fields (a ScheduleError naming the step and the
    bad field), with ``None`` arguments dropped, defaults filled in and lists made tuples; the
    args are read-only.  Steps compare, hash and pickle by value.
    """
    kind: StepKind
    stage: str
    args: Mapping = field(default_factory=dict)

    def __post_init__(self):
        kind = step_kind(self.kind)
        if not isinstance(self.stage, str) or not self.stage:
            raise ScheduleError(f"schedule step {kind.value}: 'stage' must be a stage name (a "
                                f"non-empty string), got {self.stage!r}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "args", MappingProxyType(_validated(kind, self.stage, self.args)))

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "stage": self.stage,
                "args": {k: list(v) if isinstance(v, tuple) else v for k, v in self.args.items()}}

    @staticmethod
    def from_json(d) -> Step:
        if not isinstance(d, dict) or not isinstance(d.get("kind"), str) \
                or not isinstance(d.get("stage"), str) or not isinstance(d.get("args", {}), dict):
            raise ScheduleError(f"malformed schedule step {d!r}: expected a dict "
                                "{'kind': str, 'stage': str, 'args': dict}")
        extra = sorted(set(d) - {"kind", "stage", "args"})
        if extra:
            raise ScheduleError(f"malformed schedule step {d!r}: unexpected key "
                                f"{', '.join(map(repr, extra))}")
        return Step(d["kind"], d["stage"], d.get("args", {}))

    def __hash__(self):
        return hash((self.kind, self.stage, tuple(sorted(self.args.items()))))

    def __reduce__(self):
        return Step, (self.kind, self.stage, dict(self.args))

    def __repr__(self):
        return f"Step({self.kind.value!r}, {self.stage!r}, {dict(self.args)!r})"


def _validated(kind, stage, args) -> dict:
    where = f"schedule step {kind.value} on stage {stage}"
    if not isinstance(args, Mapping):
        raise ScheduleError(f"{where}: 'args' must be a dict, got {args!r}")
    sp = _REGISTRY[kind]
    names = [f.name for f in sp.fields]
    extra = [k for k in args if k not in names]
    if extra:
        raise ScheduleError(f"{where}: unknown argument {extra[0]!r} (its arguments are "
                            f"{', '.join(names) or 'none'})")
    out = {}
    for f in sp.fields:
        value = args.get(f.name)
        if value is None:
            if f.required:
                raise ScheduleError(f"{where} lacks the argument {f.name!r}")
            value = f.default
        if value is not None:
            out[f.name] = _field_value(where, f, value)
    problem = sp.check(out) if sp.check else None
    if problem:
        raise ScheduleError(f"{where}: {problem}")
    return out


def _field_value(where, f, value):
    if f.type is FieldType.NAME:
        ok = isinstance(value, str) and value != ""
    elif f.type is FieldType.NAMES:
        ok = isinstance(value, (list, tuple)) and len(value) > 0 \
            and all(isinstance(v, str) and v != "" for v in value)
        value = tuple(value) if ok else value
    elif f.type is FieldType.COUNTS:
        ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 1 for v in value)
        value = tuple(int(v) for v in value) if ok else value
    elif f.type is FieldType.COUNT:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1
        value = int(value) if ok else value
    elif f.type is FieldType.INDEX:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0
        value = int(value) if ok else value
    else:
        raise InternalError(f"field type {f.type} has no validator")
    if not ok:
        raise ScheduleError(f"{where}: argument {f.name!r} must be {f.type.value}, got {value!r}")
    return value


def record(schedule, kind, stage_name, **args) -> Step:
    """Append the step a primitive just applied to *schedule* (``None`` arguments are left out).

    The primitive has validated its arguments, so a step that does not fit its registered fields
    is a bug in einloop."""
    try:
        st = Step(kind, stage_name, {k: v for k, v in args.items() if v is not None})
    except ScheduleError as e:
        raise InternalError(f"a primitive recorded a step its registry entry rejects: {e}") from e
    schedule.steps.append(st)
    return st


def apply_step(schedule, st: Step):
    """Apply one recorded step to *schedule* (by stage and axis names)."""
    spec(st.kind).apply(schedule, schedule.stage_named(st.stage), st.args)


def as_steps(steps) -> tuple:
    """*steps* (Step objects or their JSON dicts) as Steps, all validated before any is used."""
    if isinstance(steps, (str, bytes, dict)) or not hasattr(steps, "__iter__"):
        raise ScheduleError(f"schedule steps must be a list of steps, got {steps!r}")
    return tuple(st if isinstance(st, Step) else Step.from_json(st) for st in steps)


def steps_to_json(steps) -> list:
    """JSON-ready dicts ``{"kind", "stage", "args"}`` of *steps* (the tuning log's format)."""
    return [st.to_json() for st in as_steps(steps)]


def steps_from_json(obj) -> tuple:
    """Steps from the JSON list :func:`steps_to_json` wrote, each validated: an unknown kind, a
    missing, unknown or mistyped argument is a ScheduleError naming the step and the field."""
    if not isinstance(obj, list):
        raise ScheduleError(f"schedule steps must be a JSON list of steps, got {obj!r}")
    return tuple(Step.from_json(d) for d in obj)


# the vocabulary -------------------------------------------------------------------------------
def _axis(stage, args, key="axis"):
    return stage.iter_var(args[key])


def _apply_split(s, stage, a):
    stage.split(_axis(stage, a), factor=a.get("factor"), nparts=a.get("nparts"))


def _split_code(a, names, stage):
    size = f"factor={a['factor']!r}" if "factor" in a else f"nparts={a['nparts']!r}"
    return [names.loop(stage, a["axis"]), size]


def _split_check(a):
    if ("factor" in a) == ("nparts" in a):
        return "give exactly one of the arguments 'factor' and 'nparts'"
    return None


def _readers(s, a):
    """The stages named by a step's ``readers``."""
    return [s.stage_named(n) for n in a["readers"]]


def _readers_code(a, names):
    return f"[{', '.join(names.tensor(r) for r in a['readers'])}]"


def _intrin(name):
    """The tensor intrinsic declared as *name*, for a replayed tensorize step."""
    from ..errors import TEError
    from ..te.tensor_intrin import lookup
    try:
        return lookup(name)
    except TEError as e:
        raise ScheduleError(f"schedule step tensorize: {e}") from None


def _apply_compute_at(s, stage, a):
    parent = s.stage_named(a["parent"])
    stage.compute_at(parent, parent.iter_var(a["axis"]))


def _annotation(kind):
    _register(kind, StepScope.STAGE, [Field("axis", FieldType.NAME)],
              lambda s, stage, a: getattr(stage, kind.value)(_axis(stage, a)),
              lambda a, names, stage: [names.loop(stage, a["axis"])])


def _no_arguments(kind):
    _register(kind, StepScope.STAGE, [], lambda s, stage, a: getattr(stage, kind.value)(),
              lambda a, names, stage: [])


_register(StepKind.SPLIT, StepScope.STAGE,
          [Field("axis", FieldType.NAME), Field("factor", FieldType.COUNT, required=False),
           Field("nparts", FieldType.COUNT, required=False)],
          _apply_split, _split_code, Returns.LOOPS, _split_check)
_register(StepKind.FUSE, StepScope.STAGE,
          [Field("outer", FieldType.NAME), Field("inner", FieldType.NAME)],
          lambda s, stage, a: stage.fuse(_axis(stage, a, "outer"), _axis(stage, a, "inner")),
          lambda a, names, stage: [names.loop(stage, a["outer"]), names.loop(stage, a["inner"])],
          Returns.LOOP)
_register(StepKind.REORDER, StepScope.STAGE, [Field("axes", FieldType.NAMES)],
          lambda s, stage, a: stage.reorder(*[stage.iter_var(n) for n in a["axes"]]),
          lambda a, names, stage: [names.loop(stage, n) for n in a["axes"]])
for _kind in (StepKind.VECTORIZE, StepKind.PARALLEL, StepKind.UNROLL):
    _annotation(_kind)
_register(StepKind.COMPUTE_AT, StepScope.STAGE,
          [Field("parent", FieldType.NAME), Field("axis", FieldType.NAME)],
          _apply_compute_at,
          lambda a, names, stage: [names.stage(a["parent"]), names.loop(a["parent"], a["axis"])])
for _kind in (StepKind.COMPUTE_INLINE, StepKind.COMPUTE_ROOT, StepKind.NONTEMPORAL):
    _no_arguments(_kind)
_register(StepKind.STORAGE_ORDER, StepScope.STAGE, [Field("axes", FieldType.NAMES)],
          lambda s, stage, a: stage.storage_order(*[stage.iter_var(n) for n in a["axes"]]),
          lambda a, names, stage: [names.loop(stage, n) for n in a["axes"]])
_register(StepKind.CACHE_WRITE, StepScope.SCHEDULE,
          [Field("scope", FieldType.NAME, required=False, default="local")],
          lambda s, stage, a: s.cache_write(stage.origin_op.output(), a["scope"]),
          lambda a, names, stage: [repr(a["scope"])], Returns.TENSOR)
_register(StepKind.CACHE_READ, StepScope.SCHEDULE,
          [Field("scope", FieldType.NAME, required=False, default="local"),
           Field("readers", FieldType.NAMES), Field("dtype", FieldType.NAME, required=False)],
          lambda s, stage, a: s.cache_read(stage.origin_op.output(), a["scope"], _readers(s, a),
                                           a.get("dtype")),
          lambda a, names, stage: [repr(a["scope"]), _readers_code(a, names)] + (
              [f"dtype={a['dtype']!r}"] if a.get("dtype") else []),
          Returns.TENSOR)
_register(StepKind.PACK, StepScope.SCHEDULE,
          [Field("axis", FieldType.INDEX), Field("factor", FieldType.COUNT),
           Field("readers", FieldType.NAMES, required=False)],
          lambda s, stage, a: s.pack(stage.origin_op.output(), a["axis"], a["factor"],
                                     _readers(s, a) if "readers" in a else None),
          lambda a, names, stage: [str(a["axis"]), str(a["factor"])] + (
              [f"readers={_readers_code(a, names)}"] if "readers" in a else []),
          Returns.TENSOR)
_register(StepKind.RFACTOR, StepScope.SCHEDULE,
          [Field("axis", FieldType.NAME),
           Field("factor_axis", FieldType.INDEX, required=False, default=0)],
          lambda s, stage, a: s.rfactor(stage.origin_op.output(), _axis(stage, a),
                                        a["factor_axis"]),
          lambda a, names, stage: [names.loop(stage, a["axis"]),
                                   f"factor_axis={a['factor_axis']}"],
          Returns.TENSOR)
_register(StepKind.SPLIT_RESIDUES, StepScope.SCHEDULE,
          [Field("axes", FieldType.NAMES), Field("factors", FieldType.COUNTS)],
          lambda s, stage, a: s.split_residues(stage.origin_op.output(),
                                               [_axis(stage, {"axis": n}) for n in a["axes"]],
                                               list(a["factors"])),
          lambda a, names, stage: [f"[{', '.join(names.loop(stage, n) for n in a['axes'])}]",
                                   repr(list(a["factors"]))],
          Returns.TENSOR,
          lambda a: None if len(a["axes"]) == len(a["factors"])
          else "give one factor per axis")
_register(StepKind.DEINTERLEAVE, StepScope.SCHEDULE,
          [Field("stride", FieldType.COUNT), Field("readers", FieldType.NAMES)],
          lambda s, stage, a: s.deinterleave(stage.origin_op.output(), a["stride"],
                                             _readers(s, a)),
          lambda a, names, stage: [str(a["stride"]), _readers_code(a, names)],
          Returns.TENSOR)
_register(StepKind.PREFETCH, StepScope.STAGE,
          [Field("tensor", FieldType.NAME), Field("axis", FieldType.NAME),
           Field("offset", FieldType.COUNT, required=False, default=1)],
          lambda s, stage, a: stage.prefetch(s.stage_named(a["tensor"]).origin_op.output(),
                                             _axis(stage, a), a["offset"]),
          lambda a, names, stage: [names.tensor(a["tensor"]), names.loop(stage, a["axis"]),
                                   f"offset={a['offset']}"])
_register(StepKind.TENSORIZE, StepScope.STAGE,
          [Field("axis", FieldType.NAME), Field("intrin", FieldType.NAME)],
          lambda s, stage, a: stage.tensorize(_axis(stage, a), _intrin(a["intrin"])),
          lambda a, names, stage: [names.loop(stage, a["axis"]), names.intrin(a["intrin"])])
del _kind


# printing -------------------------------------------------------------------------------------
class _ByName:
    """Names for readable (not runnable) code: stages, tensors and loops by their own names."""

    @staticmethod
    def stage(name):
        return f"s[{name}]"

    @staticmethod
    def tensor(name):
        return name

    @staticmethod
    def loop(stage, axis):
        return axis

    @staticmethod
    def intrin(name):
        return name


def step_code(st: Step, names=_ByName) -> str:
    """The call that applies *st*, as Python; *names* gives the expressions of stages
    (``stage(name)``), tensors (``tensor(name)``) and loops (``loop(stage, axis)``)."""
    sp = spec(st.kind)
    args = sp.code_args(st.args, names, st.stage)
    if sp.target is StepScope.STAGE:
        return f"{names.stage(st.stage)}.{st.kind.value}({', '.join(args)})"
    return f"s.{st.kind.value}({', '.join([names.tensor(st.stage)] + args)})"


def steps_to_text(schedule) -> str:
    """The schedule as readable code, loops by their names (``s[C].vectorize(j.inner)``): what
    ``str(schedule)`` shows.  For code that runs, see :func:`.replay.steps_to_code`."""
    outs = ", ".join(t.name for t in schedule.outputs)
    return "\n".join([f"s = create_schedule([{outs}])"]
                     + [step_code(st) for st in schedule.steps])
