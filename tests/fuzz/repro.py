"""Write a case as a short standalone reproducer: plain einloop code plus the expected values.

The reproducer declares the operator and schedule with the same source the fuzzer executed,
runs the kernel the way the failing run did (threads, guard page after or before each array),
and for a wrong result compares with the values the fuzzer's NumPy reference computed, which are
embedded, so it needs nothing but NumPy and einloop.
"""
from __future__ import annotations

import json
from pathlib import Path
import sys

import numpy as np

from . import program
from .gen_ops import tensor_table
from .harness import random_inputs, tolerance
from .reference import UNIT, evaluate

_PRELUDE = '''import ctypes
import mmap

import numpy as np
from numpy import inf, nan  # noqa: F401  (array literals below may hold them)

import einloop
from einloop import te, create_schedule, lower, build

_libc = ctypes.CDLL(None)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def guarded(a, fence_after=True):
    """A copy of *a* that ends (or starts) at a PROT_NONE page: a stray access crashes."""
    page = mmap.PAGESIZE
    pages = -(-a.nbytes // page) or 1
    mm = mmap.mmap(-1, (pages + 2) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    _libc.mprotect(base, page, 0)
    _libc.mprotect(base + (pages + 1) * page, page, 0)
    offset = (pages + 1) * page - a.nbytes if fence_after else page
    out = np.frombuffer(mm, a.dtype, a.size, offset).reshape(a.shape)
    out[...] = a
    return out


def unwritten(t):
    """An output array full of a sentinel, so an element the kernel never writes shows."""
    dt = np.dtype(t.dtype)
    fill = np.nan if dt.kind == "f" else True if dt.kind == "b" else np.iinfo(dt).min + 7
    return np.full(t.shape, fill, dt)


def _try(fn):
    """A schedule step the fuzzer allowed to fail with an einloop.Error."""
    try:
        fn()
    except einloop.Error as e:
        print("step rejected:", e)


def _refused(fn):
    """A schedule step einloop must refuse with a ScheduleError."""
    try:
        fn()
    except einloop.ScheduleError as e:
        print("illegal step refused:", e)
        return
    print("ILLEGAL STEP ACCEPTED")
'''


def _extern_library():
    """The fuzzer's external C functions and how to build them (:mod:`.extern_fuzz`), as source
    the reproducer runs (it needs a C compiler, as the fuzzer did)."""
    import inspect
    from . import extern_fuzz
    return inspect.getsource(extern_fuzz).split('"""', 2)[2] + "\n_fuzz_lib = library\n"


def _array_literal(a):
    with np.printoptions(threshold=sys.maxsize, floatmode="unique", linewidth=100):
        return f"np.array({np.array2string(np.asarray(a), separator=', ')}, {str(a.dtype)!r})"


def _failing_run(outcome):
    """(label, threads, fence_after) of the failing run, from the outcome's phase or message."""
    where = outcome["msg"].split(":")[0] if outcome["status"] == "wrong" else outcome["phase"]
    where = where.split(":", 1)[-1]
    label, threads, after = where.split("/")[0], 1, True
    for part in where.split("/")[1:]:
        key, _, value = part.partition("=")
        if key == "threads":
            threads = int(value)
        elif key == "fence":
            after = value == "after"
    return label, threads, after


def _expected_lines(case, inputs, names):
    want = evaluate(case, inputs)
    lines = []
    for n in names:
        v = want[n]
        shape = tuple(tensor_table(case)[n]["shape"])
        val = np.broadcast_to(v.val, shape).astype(np.float64 if v.dtype in UNIT else v.dtype)
        unc = np.broadcast_to(v.unc, shape)
        lines.append(f"WANT[{n!r}] = {_array_literal(val)}")
        if v.dtype in UNIT:
            tol = tolerance(v.dtype, np.broadcast_to(v.val, shape), np.broadcast_to(v.err, shape))
            tol = np.where(unc, np.inf, tol)
            lines.append(f"TOL[{n!r}] = {_array_literal(tol)}")
        elif unc.any():
            lines.append(f"SKIP[{n!r}] = {_array_literal(unc)}")
    return lines


def run_reproducer(case, outcome, folder):
    """Write :func:`reproducer` of *case* and *outcome* into *folder* and run it there: the
    finished process (its output captured as text)."""
    import subprocess
    path = Path(folder) / "repro.py"
    path.write_text(reproducer(case, outcome))
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                          timeout=120, cwd=folder)


def reproducer(case, outcome, note=""):
    """Source of a standalone .py that shows *outcome* for *case*."""
    label, threads, after = _failing_run(outcome)
    inputs = random_inputs(case, case.get("seed", 0))
    if label == "default":
        sched, target = f"s = create_schedule([{', '.join(case['outputs'])}])", "llvm"
    else:
        sched, target = program.schedule_source(case), case.get("target", "llvm")
    first = (outcome["msg"].strip().splitlines() or [""])[0]
    gist = f"wrong result: {first}" if outcome["status"] == "wrong" else \
        f"{outcome['status']} in {outcome['phase']}: {outcome['etype']}: {first}"
    lines = [f'"""einloop fuzz reproducer (case seed {case.get("seed")}): {gist[:300]}',
             "", note.strip(), '"""', _PRELUDE,
             *([_extern_library()] if any(t["kind"] == "extern" for t in case["tensors"])
               else []),
             program.declare_source(case), "", sched, "",
             f"ARGS = [{', '.join(case['args'])}]", f"NAMES = {case['args']!r}",
             "print(lower(s, ARGS))",
             f"f = build(s, ARGS, target={target!r})", f"f.num_threads = {threads}",
             f"rng = np.random.default_rng({case.get('seed', 0)})", "INPUTS = {}"]
    for t in case["tensors"]:
        if t["kind"] == "placeholder":
            lines.append(f"INPUTS[{t['name']!r}] = {_array_literal(inputs[t['name']])}")
    lines += ["WANT, TOL, SKIP = {}, {}, {}"]
    outs = [a for a in case["args"] if a not in inputs]
    if outcome["status"] == "wrong":
        lines += _expected_lines(case, inputs, outs)
    lines += [
        "arrays = [guarded(INPUTS[n] if n in INPUTS else unwritten(t), "
        f"{after}) for n, t in zip(NAMES, ARGS)]",
        "f(*arrays)",
        "for n, a in zip(NAMES, arrays):",
        "    if n not in WANT:",
        "        continue",
        "    want = WANT[n]",
        "    if n in TOL:",
        "        bad = ~(np.abs(a.astype(np.float64) - want) <= TOL[n])",
        "        bad &= ~(np.isnan(a) & np.isnan(want)) & ~(a == want)",
        "    else:",
        "        bad = (a != want) & ~SKIP.get(n, False)",
        "    if bad.any():",
        "        i = tuple(np.argwhere(bad)[0])",
        "        print(f'WRONG {n}: {bad.sum()}/{bad.size} elements; at {i} got {a[i]!r} "
        "want {want[i]!r}')",
        "print('done')", ""]
    return "\n".join(lines)


def write(path, case, outcome, note=""):
    """Write the reproducer to *path* (.py) and the case beside it (.json) for replay."""
    path.write_text(reproducer(case, outcome, note))
    path.with_suffix(".json").write_text(json.dumps(case, indent=1))
