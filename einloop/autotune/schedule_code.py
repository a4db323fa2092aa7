"""A tuned configuration as Python that rebuilds its schedule, to read, paste and run as is.

The code creates the task, declares the template's tensors under the configuration (a template's
declarations may depend on its knobs), then writes the schedule out step by step the way a user
would: ``i, j = s[C].op.axis``, ``i_outer, i_inner = s[C].split(i, factor=4)``, ...  The steps
are replayed here on a fresh schedule while they are printed, so every loop a step names is
bound to the Python variable that holds it, and a step kind this printer does not know is still
written as a runnable ``s.apply_steps([...])``.
"""
from __future__ import annotations

import keyword

from ..schedule.schedule import Schedule, apply_step

_TAKEN = {"s", "task", "config", "args", "autotune", "create_schedule", "lower", "template_s"}


class _Names:
    """Unique Python identifiers for tensors and loops."""

    def __init__(self):
        self.used = set(_TAKEN)

    def new(self, text, prefix=""):
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in text) or "t"
        if base[0].isdigit() or keyword.iskeyword(base):
            base = "_" + base
        for cand in (base, f"{prefix}_{base}" if prefix else base):
            if cand not in self.used:
                break
        n = 1
        while cand in self.used:
            cand, n = f"{base}_{n}", n + 1
        self.used.add(cand)
        return cand


class _Printer:
    def __init__(self, outputs, args):
        self.s = Schedule(outputs)
        self.names = _Names()
        self.tensors = {}               # id(origin op) -> Python expression of its tensor
        self.loops = {}                 # id(IterVar) -> Python name
        self.lines = []
        arg_names = [self.names.new(t.name) for t in args]
        self.lines.append(f"{', '.join(arg_names)}{',' if len(args) == 1 else ''} = args")
        self.tensors.update((id(t.op), n) for t, n in zip(args, arg_names))
        self._paths(args)

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

    def tensor(self, stage, fallback=None):
        """The variable holding *stage*'s tensor, bound (to *fallback* if no path reaches it)
        on first use."""
        key = id(stage.origin_op)
        if key not in self.tensors:
            name = self.names.new(stage.name)
            self.lines.append(f"{name} = {self.paths.get(key, fallback)}")
            self.tensors[key] = name
        return self.tensors[key]

    def stage(self, stage):
        return f"s[{self.tensor(stage)}]"

    def loop(self, stage, name):
        iv = stage.iter_var(name)
        if id(iv) not in self.loops:
            self._bind_root_axes(stage)
        return self.loops[id(iv)]

    def _bind_root_axes(self, stage):
        for field in ("axis", "reduce_axis"):
            ivs = list(getattr(stage.op, field))
            if ivs:
                self._bind(stage, ivs, f"{self.stage(stage)}.op.{field}")

    def _bind(self, stage, ivs, expr, unpack=True):
        """``a, b = expr`` (``a, = expr`` for a one-element tuple; ``a = expr`` if not
        *unpack*)."""
        names = [self.loops.get(id(iv)) or self.names.new(iv.name, stage.name) for iv in ivs]
        self.loops.update((id(iv), n) for iv, n in zip(ivs, names))
        comma = "," if unpack and len(names) == 1 else ""
        self.lines.append(f"{', '.join(names)}{comma} = {expr}")

    def step(self, st):
        stage, a = self.s.stage_named(st.stage), st.args
        before = list(stage.all_iter_vars)
        stages_before = list(self.s.stages)
        call = self._call(st, stage, a)
        apply_step(self.s, st)
        new_loops = [iv for iv in stage.all_iter_vars if not any(iv is b for b in before)]
        new_stages = [x for x in self.s.stages if not any(x is y for y in stages_before)]
        if st.kind in ("split", "fuse") and new_loops:
            self._bind(stage, new_loops, call, unpack=st.kind == "split")
        elif st.kind in ("cache_write", "cache_read") and new_stages:
            name = self.names.new(new_stages[0].name)
            self.tensors[id(new_stages[0].origin_op)] = name
            self.lines.append(f"{name} = {call}")
        else:
            self.lines.append(call)

    def _call(self, st, stage, a):
        k = st.kind
        if k == "split":
            size = f"factor={a['factor']!r}" if a.get("factor") is not None \
                else f"nparts={a['nparts']!r}"
            return f"{self.stage(stage)}.split({self.loop(stage, a['axis'])}, {size})"
        if k == "fuse":
            return (f"{self.stage(stage)}.fuse({self.loop(stage, a['outer'])}, "
                    f"{self.loop(stage, a['inner'])})")
        if k == "reorder":
            return f"{self.stage(stage)}.reorder({', '.join(self.loop(stage, x) for x in a['axes'])})"
        if k in ("vectorize", "parallel", "unroll"):
            return f"{self.stage(stage)}.{k}({self.loop(stage, a['axis'])})"
        if k == "compute_at":
            parent = self.s.stage_named(a["parent"])
            return (f"{self.stage(stage)}.compute_at({self.stage(parent)}, "
                    f"{self.loop(parent, a['axis'])})")
        if k in ("compute_inline", "compute_root"):
            return f"{self.stage(stage)}.{k}()"
        if k == "cache_write":
            return f"s.cache_write({self.tensor(stage)}, {a.get('scope', 'local')!r})"
        if k == "cache_read":
            readers = ", ".join(self.tensor(self.s.stage_named(r)) for r in a["readers"])
            return f"s.cache_read({self.tensor(stage)}, {a.get('scope', 'local')!r}, [{readers}])"
        return f"s.apply_steps([{st.to_json()!r}])"


def config_code(task, config) -> str:
    """Python code that declares *task*'s tensors under *config* and schedules them step by
    step; running it binds ``s`` and ``args`` (``lower(s, args)`` is the config's loop nest)."""
    schedule, args = task.instantiate(config)
    kwargs = f", kwargs={dict(task.kwargs)!r}" if task.kwargs else ""
    head = [
        "from einloop import autotune, create_schedule, lower",
        "",
        f"task = autotune.create_task({task.name!r}, {list(task.args)!r}{kwargs}, "
        f"target={task.target_spec!r}, module={task.module!r})",
        f"config = task.config_space.from_json({config.to_json()!r})",
    ]
    p = _Printer(schedule.outputs, args)
    outs = [p.tensor(p.s[t], f"template_s.outputs[{n}]") for n, t in enumerate(schedule.outputs)]
    p.lines.append(f"s = create_schedule([{', '.join(outs)}])")
    for st in schedule.steps:
        p.step(st)
    own = "template_s" if any("template_s" in line for line in p.lines) else "_"
    head.append(f"{own}, args = task.instantiate(config)   # the tensors, declared for this config")
    return "\n".join(head + p.lines + ["print(lower(s, args))"])
