"""Steps applied to a fresh schedule: :func:`replay` (what a tuning record becomes at deploy
time), and :func:`steps_to_code` / :class:`CodePrinter` (steps printed as the schedule code a
user would write, replayed as they print so that every loop a step names has a Python name).
"""
from __future__ import annotations

import keyword

from ..errors import ScheduleError
from .schedule import Schedule
from .steps import Returns, Step, apply_step, as_steps, spec, step_code


def replay(steps, outputs):
    """A fresh schedule of *outputs* with *steps* (Steps or JSON dicts) applied."""
    return Schedule(outputs).apply_steps(steps)


def steps_to_code(schedule_or_steps, outputs=None) -> str:
    """Runnable schedule code: ``s = create_schedule([C])``, then each step the way a user writes
    it, loops bound to Python names (``i, j = s[C].op.axis``,
    ``i_outer, i_inner = s[C].split(i, factor=4)``).

    Takes a Schedule, or steps (Steps or JSON dicts) with the *outputs* they schedule.  The code
    runs where ``create_schedule`` and each output tensor are bound, the tensor to its name
    (characters other than letters, digits and ``_`` as ``_``); it reaches intermediate tensors
    as ``C.op.input_tensors[n]``.  Running it leaves the schedule in ``s``.
    """
    if hasattr(schedule_or_steps, "steps") and hasattr(schedule_or_steps, "outputs"):
        steps = schedule_or_steps.steps
        outputs = schedule_or_steps.outputs if outputs is None else outputs
    else:
        steps = as_steps(schedule_or_steps)
    if outputs is None:
        raise ScheduleError("steps_to_code: give the output tensors the steps schedule")
    outputs = [outputs] if not isinstance(outputs, (list, tuple)) else list(outputs)
    p = CodePrinter(outputs, reserved={"s", "create_schedule"})
    names = p.bind_tensors(outputs)
    p.lines.append(f"s = create_schedule([{', '.join(names)}])")
    for st in steps:
        p.step(st)
    return "\n".join(p.lines)


class _Names:
    """Unique Python identifiers for tensors and loops."""

    def __init__(self, reserved=()):
        self.used = set(reserved)

    def new(self, text, prefix=""):
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in text) or "t"
        if base[0].isdigit() or keyword.iskeyword(base):
            base = "_" + base
        prefixed = "".join(c if c.isalnum() or c == "_" else "_" for c in f"{prefix}_{base}")
        for cand in (base, prefixed if prefix else base):
            if cand not in self.used:
                break
        n = 1
        while cand in self.used:
            cand, n = f"{base}_{n}", n + 1
        self.used.add(cand)
        return cand


class CodePrinter:
    """Prints steps as runnable code, replaying them on a fresh schedule of *outputs* as it goes,
    so that every loop or tensor a step names is bound to the Python variable that holds it.

    The caller binds the root tensors (:meth:`bind_tensors` gives their names), writes
    ``s = create_schedule(...)`` into :attr:`lines`, then calls :meth:`step` per step.
    """

    def __init__(self, outputs, reserved=()):
        self.s = Schedule(outputs)
        self.names = _Names(reserved)
        self.tensors = {}               # id(origin op) -> Python expression of its tensor
        self.loops = {}                 # id(IterVar) -> Python name
        # what the two tables are keyed by, kept alive: a step frees loops and operations
        # (rfactor, cache_write), and CPython gives a new one the id of a freed one, which
        # would then print under the freed one's name
        self._keyed = []
        self.paths = {}
        self.lines = []
        self._lookup = None             # the name bound to the intrinsic lookup, once imported

    def bind_tensors(self, tensors) -> list:
        """Name *tensors* (the caller's code binds them); others are reached from them."""
        names = [self.names.new(t.name) for t in tensors]
        self.tensors.update((id(t.op), n) for t, n in zip(tensors, names))
        self._keyed += [t.op for t in tensors]
        self._paths(tensors)
        return names

    def _paths(self, roots):
        """Expressions for intermediate tensors: ``Out.op.input_tensors[0]``, breadth first."""
        todo = [(t, self.tensors[id(t.op)]) for t in roots]
        paths = {}
        while todo:
            t, expr = todo.pop(0)
            for n, u in enumerate(t.op.input_tensors):
                if id(u.op) not in self.tensors and id(u.op) not in paths:
                    paths[id(u.op)] = f"{expr}.op.input_tensors[{n}]"
                    todo.append((u, paths[id(u.op)]))
        self.paths = paths

    def tensor_of(self, stage, fallback=None) -> str:
        """The variable holding *stage*'s tensor, bound (to *fallback* if no path reaches it)
        on first use."""
        key = id(stage.origin_op)
        if key not in self.tensors:
            name = self.names.new(stage.name)
            self.lines.append(f"{name} = {self.paths.get(key, fallback)}")
            self.tensors[key] = name
            self._keyed.append(stage.origin_op)
        return self.tensors[key]

    # the names step_code asks for
    def stage(self, name):
        return f"s[{self.tensor(name)}]"

    def tensor(self, name):
        return self.tensor_of(self.s.stage_named(name))

    def loop(self, stage_name, axis):
        stage = self.s.stage_named(stage_name)
        iv = stage.iter_var(axis)
        if id(iv) not in self.loops:
            for attr in ("axis", "reduce_axis"):
                ivs = list(getattr(stage.op, attr))
                if ivs:
                    self._bind(stage, ivs, f"{self.stage(stage.name)}.op.{attr}")
        return self.loops[id(iv)]

    def intrin(self, name):
        """A tensor intrinsic by its declared name (imports the lookup on first use)."""
        if self._lookup is None:
            self._lookup = self.names.new("lookup_intrin")
            self.lines.append("from einloop.te.tensor_intrin import lookup as "
                              f"{self._lookup}")
        return f"{self._lookup}({name!r})"

    def _bind(self, stage, ivs, expr, unpack=True):
        """``a, b = expr`` (``a, = expr`` for a one-element tuple; ``a = expr`` if not
        *unpack*)."""
        names = [self.loops.get(id(iv)) or self.names.new(iv.name, stage.name) for iv in ivs]
        self.loops.update((id(iv), n) for iv, n in zip(ivs, names))
        self._keyed += ivs
        comma = "," if unpack and len(names) == 1 else ""
        self.lines.append(f"{', '.join(names)}{comma} = {expr}")

    def step(self, st):
        """Print *st* (binding what it returns) and apply it."""
        st = st if isinstance(st, Step) else Step.from_json(st)
        stage = self.s.stage_named(st.stage)
        loops_before = list(stage.all_iter_vars)
        stages_before = list(self.s.stages)
        call = step_code(st, self)
        apply_step(self.s, st)
        new_loops = [iv for iv in stage.all_iter_vars if not any(iv is b for b in loops_before)]
        new_stages = [x for x in self.s.stages if not any(x is y for y in stages_before)]
        returns = spec(st.kind).returns
        if returns in (Returns.LOOPS, Returns.LOOP) and new_loops:
            self._bind(stage, new_loops, call, unpack=returns is Returns.LOOPS)
        elif returns is Returns.TENSOR and new_stages:
            name = self.names.new(new_stages[0].name)
            self.tensors[id(new_stages[0].origin_op)] = name
            self._keyed.append(new_stages[0].origin_op)
            self.lines.append(f"{name} = {call}")
        else:
            self.lines.append(call)
