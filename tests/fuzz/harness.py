"""Run one case: declare, evaluate the reference, build and run each schedule, classify.

Kernels run on guarded arrays: each array ends (or starts) right at a PROT_NONE page, so an
out-of-bounds read or write kills the process (the pool sees a crash) instead of passing
silently.  Outputs start filled with a sentinel so that an element never written shows up as a
wrong result.  The default schedule and the case's schedule (built for the case's target: the
host, or x86-64 without F16C and FMA, or haswell) run with 1 and 2 threads and with the fence on
both sides; the schedule replayed from its recorded steps must lower to the same loop nest.

Outcomes: ``ok``; ``rejected`` (an einloop.Error: listed by message, since a wrong rejection is
a bug too); ``wrong``; ``internal`` (einloop.InternalError); ``exception`` (anything else raised
by einloop); ``harness`` (the fuzzer's own reference failed: our bug, not einloop's).  ``crash``
and ``hang`` are decided by the pool, which watches the process.
"""
from __future__ import annotations

import ctypes
import mmap
import time
import traceback

import numpy as np

import einloop
from einloop import create_schedule, lower, build

from . import program
from .reference import UNIT, rounding_error, evaluate

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_PAGE = mmap.PAGESIZE
#: how far a float result may be from the reference, in multiples of the error bound
ERR_FACTOR = 4.0


def guarded(shape, dtype, fence_after=True):
    """A C-contiguous array whose last byte precedes (or first byte follows) a PROT_NONE page."""
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dt.itemsize
    pages = -(-nbytes // _PAGE) or 1
    mm = mmap.mmap(-1, (pages + 2) * _PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    for page in (base, base + (pages + 1) * _PAGE):
        if _libc.mprotect(page, _PAGE, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = (pages + 1) * _PAGE - nbytes if fence_after else _PAGE
    return np.frombuffer(mm, dtype=dt, count=nbytes // dt.itemsize, offset=offset).reshape(shape)


def random_inputs(case, seed):
    """Inputs drawn from the ranges the generator assumed (gen_ops.INPUT_RANGE)."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in case["tensors"]:
        if t["kind"] != "placeholder":
            continue
        lo, hi = t["range"]
        if t["dtype"] in UNIT:
            a = rng.uniform(lo, hi, size=t["shape"])
        else:
            a = rng.integers(lo, hi, size=t["shape"], endpoint=True)
        out[t["name"]] = a.astype(t["dtype"])
    return out


def sentinel(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.nan
    if dt.kind == "b":
        return True
    return np.iinfo(dt).min + 7


def tolerance(dtype, val, err):
    """How far a result may be from the float64 reference *val* with error bound *err*."""
    return ERR_FACTOR * err + rounding_error(val, dtype, 2)


def mismatch(name, got, want):
    """A message if *got* differs from the reference value *want* (reference.V), else None."""
    shape = got.shape
    w = np.broadcast_to(want.val, shape)
    unc = np.broadcast_to(want.unc, shape)
    if want.dtype in UNIT:
        g = got.astype(np.float64)
        err = np.broadcast_to(want.err, shape)
        with np.errstate(all="ignore"):
            tol = tolerance(want.dtype, w, err)
            close = np.abs(g - w) <= tol
        same_special = (np.isnan(g) & np.isnan(w)) | (g == w)
        ok = np.where(np.isfinite(w), close, same_special)
        bad = ~ok & ~unc & np.isfinite(err)
    else:
        bad = (got != w.astype(got.dtype)) & ~unc
    if not bad.any():
        return None
    first = tuple(int(x) for x in np.argwhere(bad)[0])
    return (f"{name}: {int(bad.sum())}/{bad.size} elements differ; first at {first}: "
            f"got {got[first]!r}, want {w[first]!r}")


class Case:
    """One case being run; ``phase`` says where it is (the pool reads it for time-outs)."""

    def __init__(self, case, report=lambda phase: None):
        self.case = case
        self.report = report
        self.phase = "start"
        self.tolerated = program.Tolerated()

    def enter(self, phase):
        self.phase = phase
        self.report(phase)

    def run(self):
        """The outcome record of this case (status, phase, etype, msg, tolerated)."""
        t0 = time.perf_counter()
        try:
            status, msg, etype = "ok", "", None
            problems = self._run()
            if problems:
                status, msg = "wrong", "\n".join(problems)
        except einloop.Error as e:
            status, etype, msg = "rejected", type(e).__name__, str(e)
        except einloop.InternalError as e:
            status, etype, msg = "internal", "InternalError", str(e)
        except Exception as e:       # noqa: BLE001  (a stray exception is what we look for)
            status = "harness" if self.phase == "reference" else "exception"
            etype, msg = type(e).__name__, f"{e}\n{traceback.format_exc(limit=-4)}"
        return {"status": status, "phase": self.phase, "etype": etype, "msg": msg,
                "tolerated": self.tolerated.messages, "seconds": time.perf_counter() - t0}

    def _run(self):
        case = self.case
        self.enter("declare")
        ns = program.namespace(self.tolerated)
        _, outputs, args = program.declare(case, ns)
        self.enter("reference")
        inputs = random_inputs(case, case.get("seed", 0))
        want = evaluate(case, inputs)
        self.enter("schedule")
        s = program.schedule(case, ns)
        self.enter("print")
        str(s)
        problems = self._replay(s, outputs, args)
        parallel = any(st["p"] == "parallel" for st in case["schedule"])
        plans = [("default", create_schedule(outputs), "llvm", [(2, True)]),
                 ("scheduled", s, case.get("target", "llvm"),
                  [(1, True), (2, False)] if parallel else [(1, False)])]
        for label, sched, target, runs in plans:
            self.enter(f"lower:{label}")
            str(lower(sched, args))
            self.enter(f"build:{label}")
            kernel = build(sched, args, target=target)
            for threads, after in runs:
                tag = f"{label}/threads={threads}/fence={'after' if after else 'before'}"
                problems += self._call(kernel, tag, threads, after, args, inputs, want)
        return problems

    def _replay(self, s, outputs, args):
        """Steps replayed on a fresh schedule must lower to the same loop nest."""
        self.enter("replay")
        again = einloop.Schedule(outputs).apply_steps([st.to_json() for st in s.steps])
        if str(lower(again, args)) != str(lower(s, args)):
            return ["replay: the schedule replayed from its steps lowers differently"]
        return []

    def _call(self, kernel, tag, threads, after, args, inputs, want):
        arrays = []
        names = self.case["args"]          # Python names: a multi-output tensor's is "T.v1"
        for n, t in zip(names, args):
            a = guarded(t.shape, t.dtype, after)
            a[...] = inputs[n] if n in inputs else sentinel(t.dtype)
            arrays.append(a)
        kernel.num_threads = threads
        self.enter(f"run:{tag}")
        kernel(*arrays)
        self.enter(f"check:{tag}")
        problems = []
        for n, a in zip(names, arrays):
            if n in inputs:
                if not np.array_equal(a, inputs[n], equal_nan=True):
                    problems.append(f"{tag}: the kernel modified its input {n}")
                continue
            msg = mismatch(n, a, want[n])
            if msg:
                problems.append(f"{tag}: {msg}")
        return problems


def run_case(case, report=lambda phase: None):
    """Run *case* in this process; crashes and hangs are the caller's to catch."""
    return Case(case, report).run()
