"""Replaying a logged step list on an operator declared with other names.

A record of an auto-scheduled operator is found by the structural hash of its DAG, which ignores
tensor and axis names, so the process that replays it may have declared the operator as
``X, Y -> Z`` where the log says ``A, B -> C``.  The record stores its *name table* (per stage,
in DAG order: the stage name and its axis names, data then reduce).  Stages and axes of the two
declarations correspond by position; names a step creates (``i.outer``, ``i.outer.j.fused``,
``C.local``) correspond by derivation, which :func:`translate_steps` follows by replaying the
steps one by one on the current declaration: after each step, every new loop or stage gets, as
its record name, its current name with the names it was derived from replaced by theirs.

Why not canonical names (``s0``, ``ax0``) in the log: the printed code (``einloop log --code``)
and a user reading a record should see the declaration's own names; the translation is needed
only when a declaration differs, and then checked step by step (a step naming a loop the
current schedule cannot match raises TuningLogError, never a wrong schedule).
"""
from __future__ import annotations

from ...errors import Error, TuningLogError
from ...schedule.schedule import Schedule
from ...schedule.steps import Step, StepKind, apply_step, as_steps

#: step arguments naming stages (prefetch's ``tensor`` is a stage's); the other string arguments that are keys of the stage's loops
#: are loop names (``axis``, ``outer``, ``inner``, ``axes``; compute_at's ``axis`` is a loop of
#: its ``parent``), anything else (``scope``) is a literal.
_STAGE_FIELDS = frozenset({"parent", "readers", "tensor"})


def name_table(schedule) -> list:
    """``[[stage name, [loop names]], ...]`` of a fresh schedule, in stage order."""
    return [[st.name, [iv.name for iv in st.all_iter_vars]] for st in schedule.stages]


def translate_steps(steps, outputs, names) -> tuple:
    """*steps*, written for a declaration whose name table is *names*, renamed for the
    declaration of *outputs*; TuningLogError if the two declarations do not correspond."""
    steps = as_steps(steps)
    s = Schedule(outputs)
    current = name_table(s)
    if names is None or _same(names, current):
        return steps
    if not _shaped_alike(names, current):
        raise TuningLogError(f"the logged step list was written for stages {_show(names)}; this "
                             f"declaration has {_show(current)}, which do not correspond")
    stages = {old[0]: new[0] for old, new in zip(names, current)}      # record -> current
    loops = {new[0]: dict(zip(old[1], new[1])) for old, new in zip(names, current)}
    out = []
    for st in steps:
        new = _renamed(st, stages, loops)
        try:
            apply_step(s, new)
        except Error as exc:
            raise TuningLogError(f"the logged step {st} does not replay on this declaration "
                                 f"(as {new}): {exc}") from None
        # new stages and loops are found by name (steps address them by name, so names are
        # unique within a stage), not by id(): a step may free a loop whose id a new one reuses
        back_stages = {v: k for k, v in stages.items()}
        at = loops.get(new.stage, {})
        for stage in s.stages:
            if stage.name not in back_stages:
                stages[_derive(stage.name, back_stages)] = stage.name
                loops.setdefault(stage.name, {})
            known = set(loops[stage.name].values())
            back = {v: k for k, v in {**at, **loops[stage.name]}.items()}
            for iv in stage.all_iter_vars:
                if iv.name not in known:
                    loops[stage.name][_derive(iv.name, back)] = iv.name
        out.append(new)
    return tuple(out)


def _same(a, b) -> bool:
    return [[x[0], list(x[1])] for x in a] == [[x[0], list(x[1])] for x in b]


def _shaped_alike(a, b) -> bool:
    return len(a) == len(b) and all(len(x[1]) == len(y[1]) for x, y in zip(a, b))


def _show(table) -> str:
    return ", ".join(f"{n}({', '.join(ax)})" for n, ax in table)


def _renamed(st: Step, stages, loops) -> Step:
    """*st* with its stage, stage arguments and loop arguments in current names."""
    stage = _look(stages, st.stage, "stage", st)
    loop_owner = stages.get(st.args.get("parent"), stage) \
        if st.kind is StepKind.COMPUTE_AT else stage
    args = {}
    for key, value in st.args.items():
        if key in _STAGE_FIELDS:
            value = _each(value, lambda n: _look(stages, n, "stage", st))
        elif isinstance(value, (str, tuple)) and _all_in(value, loops.get(loop_owner, {})):
            value = _each(value, lambda n: loops[loop_owner][n])
        elif key in ("axis", "outer", "inner", "axes") and isinstance(value, (str, tuple)):
            raise TuningLogError(f"the logged step {st} names loop {value!r}, which this "
                                 f"declaration's stage {loop_owner} has no counterpart of")
        args[key] = value
    return Step(st.kind, stage, args)


def _each(value, fn):
    return tuple(fn(v) for v in value) if isinstance(value, tuple) else fn(value)


def _all_in(value, table) -> bool:
    return all(v in table for v in (value if isinstance(value, tuple) else (value,)))


def _look(table, name, what, st):
    if name not in table:
        raise TuningLogError(f"the logged step {st} names {what} {name!r}, which this "
                             "declaration has no counterpart of")
    return table[name]


def _derive(name, back) -> str:
    """*name* with every whole dot-separated run that is a key of *back* (longest first)
    replaced by its value: ``x.outer.y.fused`` -> ``i.outer.j.fused`` for {x: i, y: j}."""
    keys = sorted(back, key=len, reverse=True)
    out, i = [], 0
    while i < len(name):
        if i == 0 or name[i - 1] == ".":
            hit = next((k for k in keys if name.startswith(k, i) and _boundary(name, i + len(k))),
                       None)
            if hit is not None:
                out.append(back[hit])
                i += len(hit)
                continue
        out.append(name[i])
        i += 1
    return "".join(out)


def _boundary(name, end) -> bool:
    """A name ends at *end*: the end of *name*, a dot, or a uniqueness counter to the end."""
    return end == len(name) or name[end] == "." or name[end:].isdigit()
