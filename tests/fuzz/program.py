"""Turn a case description into einloop Python code, and run that code.

The same source text is executed by the worker and written into reproducers, so a reproducer
runs exactly what the fuzzer ran.  Expression nodes (lists, see :mod:`.gen_ops`) map to te calls:

    ["var", n] n             ["const", v, dt] te.const(v, dt)     ["lit", v] a Python number
    ["bin", op, a, b] a op b ["neg", a] -a                        ["cmp", op, a, b] a op b
    ["and"|"or", a, b] a & b / a | b      ["not", a] ~a           ["all"|"any", [c...]] te.all(...)
    ["select", c, t, f] te.if_then_else   ["cast", dt, a] a.astype(dt)
    ["call", fn, a...] te.fn(a...)        ["mm", fn, a, b] te.max/min/maximum/minimum(a, b)
    ["read", T, [i...]] T[i, ...]                               ["nan", dt] te.const(nan, dt)

The newer constructs (argmax, tuple reducers, multi-output computes, scans, scatters) are
written by :mod:`.program_lang`.
"""
from __future__ import annotations

import numpy as np

import einloop
from einloop import te, create_schedule

#: source of the user-defined reducers a case may use (te.comm_reducer)
CUSTOM_REDUCERS = {
    "absmax": "absmax = te.comm_reducer(lambda x, y: te.maximum(te.abs(x), te.abs(y)), "
              "lambda dt: 0, name='absmax')",
    "csum": "csum = te.comm_reducer(lambda x, y: x + y, lambda dt: 0, name='csum')",
    "cmin": "cmin = te.comm_reducer(lambda x, y: te.min(x, y), lambda dt: te.const(float('inf') "
            "if dt.startswith('float') else np.iinfo(dt).max, dt), name='cmin')",
}
BUILTIN_REDUCERS = ("sum", "max", "min", "prod")


def expr_source(e) -> str:
    """Python source of one expression node."""
    kind = e[0]
    if kind == "var":
        return e[1]
    if kind == "lit":
        return repr(e[1])
    if kind == "const":
        return f"te.const({e[1]!r}, {e[2]!r})"
    if kind == "nan":
        return f"te.const(float('nan'), {e[1]!r})"
    if kind in ("bin", "cmp"):
        return f"({expr_source(e[2])} {e[1]} {expr_source(e[3])})"
    if kind == "neg":
        return f"(-{expr_source(e[1])})"
    if kind in ("and", "or"):
        return f"({expr_source(e[1])} {'&' if kind == 'and' else '|'} {expr_source(e[2])})"
    if kind == "not":
        return f"(~{expr_source(e[1])})"
    if kind in ("all", "any"):
        return f"te.{kind}({', '.join(expr_source(c) for c in e[1])})"
    if kind == "select":
        return f"te.if_then_else({', '.join(expr_source(x) for x in e[1:])})"
    if kind == "cast":
        return f"({expr_source(e[2])}).astype({e[1]!r})"
    if kind in ("call", "mm"):
        return f"te.{e[1]}({', '.join(expr_source(x) for x in e[2:])})"
    if kind == "read":
        return f"{e[1]}[{', '.join(expr_source(i) for i in e[2])}]"
    raise ValueError(f"unknown expression node {e!r}")


def _compute_lines(t):
    shape = f"({', '.join(map(str, t['shape']))},)"
    params = ", ".join(t["vars"])
    if "reduce" not in t:
        return [f"{t['name']} = te.compute({shape}, lambda {params}: {expr_source(t['body'])}, "
                f"name={t['name']!r})"]
    lines = [f"{k['name']} = te.reduce_axis(({k['start']}, {k['start'] + k['extent']}), "
             f"name={k['name']!r})" for k in t["reduce"]]
    names = [k["name"] for k in t["reduce"]]
    axis = names[0] if len(names) == 1 else f"[{', '.join(names)}]"
    red = t["reducer"] if t["reducer"] in CUSTOM_REDUCERS else f"te.{t['reducer']}"
    where = f", where={expr_source(t['where'])}" if t.get("where") is not None else ""
    lines.append(f"{t['name']} = te.compute({shape}, lambda {params}: "
                 f"{red}({expr_source(t['body'])}, axis={axis}{where}), name={t['name']!r})")
    return lines


def declare_source(case) -> str:
    """The te declarations of *case*, one statement a line."""
    from .program_lang import TUPLE_REDUCERS, construct_lines
    lines = [CUSTOM_REDUCERS[r] for r in CUSTOM_REDUCERS
             if any(t.get("reducer") == r for t in case["tensors"])]
    lines += [TUPLE_REDUCERS[r] for r in TUPLE_REDUCERS
              if any(t.get("reducer") == r for t in case["tensors"])]
    for t in case["tensors"]:
        if t["kind"] == "placeholder":
            shape = f"({', '.join(map(str, t['shape']))},)"
            lines.append(f"{t['name']} = te.placeholder({shape}, {t['dtype']!r}, name={t['name']!r})")
        elif t["kind"] == "einsum":
            lines.append(f"{t['name']} = te.einsum({t['subscripts']!r}, {', '.join(t['operands'])}, "
                         f"name={t['name']!r})")
        elif t["kind"] == "compute":
            lines += _compute_lines(t)
        else:
            lines += construct_lines(t)
    return "\n".join(lines)


def _step_call(st):
    """The schedule call of one step, without assignment."""
    p, T = st["p"], st.get("tensor")
    if p == "cache_read":
        return f"s.cache_read({T}, 'local', [{', '.join(st['readers'])}])"
    if p == "cache_write":
        return f"s.cache_write({T}, 'local')"
    if p == "rfactor":
        return f"s.rfactor({T}, {st['loop']}, {st['factor_axis']})"
    if p == "cache_read_parts":      # a multi-output tensor: refused (a wild step)
        return f"s.cache_read({T}, 'local', [{', '.join(st['readers'])}])"
    if p == "split":
        arg = f"factor={st['factor']}" if "factor" in st else f"nparts={st['nparts']}"
        return f"s[{T}].split({st['loop']}, {arg})"
    if p == "tile":
        return f"s[{T}].tile({st['x']}, {st['y']}, {st['xf']}, {st['yf']})"
    if p in ("fuse", "reorder", "storage_order"):
        return f"s[{T}].{p}({', '.join(st['loops'])})"
    if p in ("vectorize", "parallel", "unroll"):
        return f"s[{T}].{p}({st['loop']})"
    if p == "prefetch":
        return f"s[{T}].prefetch({st['source']}, {st['loop']}, offset={st['offset']})"
    if p == "compute_at":
        return f"s[{T}].compute_at(s[{st['parent']}], {st['loop']})"
    if p in ("compute_inline", "compute_root", "nontemporal"):
        return f"s[{T}].{p}()"
    raise ValueError(f"unknown schedule step {st!r}")


def step_lines(st):
    """Source lines of one schedule step (a step with ``try`` tolerates an einloop.Error)."""
    if st["p"] == "axes":
        lines = []
        if st["axis"]:
            lines.append(f"{', '.join(st['axis'])}, = s[{st['tensor']}].op.axis")
        if st["reduce_axis"]:
            lines.append(f"{', '.join(st['reduce_axis'])}, = s[{st['tensor']}].op.reduce_axis")
        return lines
    call = _step_call(st)
    if st.get("try"):
        return [f"_try(lambda: {call})"]
    if st.get("illegal"):
        return [f"_refused(lambda: {call})"]
    out = st.get("out")
    if out is None:
        return [call]
    return [f"{', '.join(out) if isinstance(out, list) else out} = {call}"]


def schedule_source(case) -> str:
    """The schedule of *case* as code that leaves it in ``s``."""
    lines = [f"s = create_schedule([{', '.join(case['outputs'])}])"]
    for st in case["schedule"]:
        lines += step_lines(st)
    return "\n".join(lines)


class Tolerated:
    """Collects the einloop errors that ``try`` steps raised (a fine rejection of a wild step)."""

    def __init__(self):
        self.messages = []

    def __call__(self, fn):
        try:
            fn()
        except einloop.Error as e:
            self.messages.append(f"{type(e).__name__}: {e}")


class IllegalStepAccepted(Exception):
    """A schedule step einloop must refuse (an ``illegal`` step) was accepted."""


def refused(fn):
    """Run an ``illegal`` step: it must raise einloop.ScheduleError and change nothing."""
    try:
        fn()
    except einloop.ScheduleError:
        return
    raise IllegalStepAccepted("an illegal schedule step was accepted (see the case's schedule: "
                              "the step under _refused)")


def namespace(tolerated=None):
    from .extern_fuzz import library
    return {"te": te, "np": np, "create_schedule": create_schedule, "_fuzz_lib": library,
            "_try": tolerated or Tolerated(), "_refused": refused}


def declare(case, ns):
    """Execute the declarations of *case* in *ns*; return (inputs, outputs, args) tensors."""
    exec(compile(declare_source(case), "<declare>", "exec"), ns)      # noqa: S102
    inputs = [ns[t["name"]] for t in case["tensors"] if t["kind"] == "placeholder"]
    return inputs, [ns[n] for n in case["outputs"]], [ns[n] for n in case["args"]]


def schedule(case, ns):
    """Execute the schedule of *case* in *ns* (after :func:`declare`); return it."""
    exec(compile(schedule_source(case), "<schedule>", "exec"), ns)     # noqa: S102
    return ns["s"]
