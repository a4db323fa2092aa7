"""Deploy benchmark: time from process start to the first result of a tuned kernel, three ways,
and the per-call overhead of a tiny kernel.  Everything printed is measured in this run.

(a) replay + JIT: import einloop, declare the operator, replay the log's best schedule, lower,
    run LLVM (compile cache off);
(b) the same with a warm compile cache (the object code is loaded, LLVM's O3 and codegen skipped);
(c) ``runtime.load_module`` of an exported library: no llvmlite, no lowering, no log.

Each way runs in fresh interpreters, in --runs rounds of one process per way (after one untimed
run each that writes the bytecode caches and fills the compile cache), so that the machine's
drift falls on every way alike; medians over the rounds.  The floor is a process that starts Python, imports NumPy and makes the same
inputs, then exits: every way pays it, and no loader can go below it.  The table gives each way's
time from process start and its start-up above the floor (what einloop adds, the kernel's first
run included); the target ratio a/c is taken on the latter, the raw ratio is printed beside it.
Kernels: GEMM 1024^3 and attention S=256 D=64, with the best schedule of their logs
(``--log-dir``, default tuning_logs/bench_auto, written by ``make bench-auto``; without a log the
untuned schedule, as the table says).

Per call: an 8-element float32 add called with NumPy arrays, with an object that only exports
DLPack, with PyTorch tensors when PyTorch is installed, and NumPy's own ufunc.  A DLPack call
includes the producer's ``__dlpack__`` for each argument, which the table also times alone (no
consumer avoids it); the 5 us target applies to what einloop adds: the whole call for NumPy
arrays, the call minus the producer's ``__dlpack__`` for DLPack objects.

    .venv/bin/python benchmarks/bench_deploy.py [--runs 5] [--log-dir DIR]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))

#: (name, module, function, args, input shapes)
KERNELS = [("gemm", "gemm", "gemm", (1024, 1024, 1024), [(1024, 1024), (1024, 1024)]),
           ("attention", "attention", "attention", (256, 64), [(256, 64)] * 3)]

_INPUTS = """
import numpy as np
rng = np.random.default_rng(0)
ins = [rng.random(s, dtype=np.float32) for s in {shapes!r}]
"""

JIT = """
import sys, warnings
sys.path.insert(0, {examples!r})
""" + _INPUTS + """
from einloop import autotune, build
import {module} as m
tensors = m.{function}(*{args!r})
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    with autotune.apply_history_best({log!r}):
        s, args = autotune.auto_schedule(tensors)
f = build(s, args)
out = np.empty(tuple(int(d) for d in args[-1].shape), np.float32)
f(*ins, out)
print(float(out.ravel()[0]))
"""

LOAD = _INPUTS + """
from einloop import runtime
g = runtime.load_module({lib!r})
out = np.empty({out_shape!r}, np.float32)
g(*ins, out)
assert "llvmlite" not in sys.modules
print(float(out.ravel()[0]))
"""

FLOOR = _INPUTS + "print(float(ins[0].ravel()[0]))\n"


def run_once(code, env):
    """Wall seconds of one fresh interpreter running *code*, and its last output line."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "import sys\n" + code], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"a deploy run failed:\n{done.stderr}")
    return elapsed, done.stdout.strip()


def run_rounds(ways, runs):
    """Time each of *ways* ({name: (code, env)}, the first being the floor) in *runs* rounds,
    one process of each way per round in turn, so that the machine's drift (large on a shared
    VM) falls on all of them alike.  Returns {name: (median seconds, median seconds above the
    floor of the same round, last output)}."""
    for code, env in ways.values():
        run_once(code, env)             # untimed: bytecode caches, the compile cache
    times = {name: [] for name in ways}
    outs = {}
    for _ in range(runs):
        for name, (code, env) in ways.items():
            t, outs[name] = run_once(code, env)
            times[name].append(t)
    floor = times[next(iter(ways))]
    return {name: (statistics.median(ts),
                   statistics.median(t - f for t, f in zip(ts, floor)), outs[name])
            for name, ts in times.items()}


def export(name, module, function, args, log, lib):
    """Build the log's best schedule of the kernel here and export it to *lib*."""
    import importlib
    import warnings
    from einloop import autotune, build
    m = importlib.import_module(module)
    tensors = getattr(m, function)(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autotune.apply_history_best(log):
            s, targs = autotune.auto_schedule(tensors)
    f = build(s, targs, name=name)
    f.export_library(lib)
    return tuple(int(d) for d in targs[-1].shape)


class DLPackOnly:
    """An array that only speaks DLPack (what a torch or JAX CPU tensor offers)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def per_call_us(fn, calls=20000, repeat=7):
    """(fastest, median) microseconds per call over *repeat* loops of *calls* calls: the fastest
    loop is the code's own cost, the median shows how much the shared machine added."""
    loops = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        loops.append((time.perf_counter() - t0) / calls * 1e6)
    return min(loops), statistics.median(loops)


def _protocol(*tensors):
    """What a kernel call asks of each DLPack argument, and nothing else: the producer's
    ``__dlpack__`` as ``np.from_dlpack(t, copy=False)`` calls it."""
    def run():
        for t in tensors:
            t.__dlpack__(max_version=(1, 0), dl_device=None, copy=False)
    return run


def overhead_table():
    """(label, (fastest, median) us, carries the 5 us target) rows."""
    from einloop import te, create_schedule, build
    A = te.placeholder((8,), name="A")
    B = te.placeholder((8,), name="B")
    C = te.compute((8,), lambda i: A[i] + B[i], name="C")
    f = build(create_schedule(C), [A, B, C])
    a, b, c = (np.ones(8, np.float32) for _ in range(3))
    da, db, dc = DLPackOnly(a), DLPackOnly(b), DLPackOnly(c)
    f(da, db, dc)
    np.testing.assert_array_equal(c, a + b)
    # settle first: right after the build the first loops ran ~2x slower (2.5 -> 5 us) however
    # long they were (the build's garbage, caches); collect it and run calls untimed for 0.5 s
    import gc
    gc.collect()
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:
        f(a, b, c)
    def with_own(label, call, protocol):
        """The call's row, its producer's protocol row, and einloop's own part (the
        difference of the fastest loops, which carries the 5 us target)."""
        total, alone = per_call_us(call), per_call_us(protocol)
        own = (total[0] - alone[0], total[1] - alone[1])
        return [(label, total, False), ("  their __dlpack__ alone", alone, False),
                ("  einloop's own part (difference)", own, True)]

    rows = [("einloop kernel, NumPy arrays", per_call_us(lambda: f(a, b, c)), True)]
    rows += with_own("einloop kernel, DLPack-only objects", lambda: f(da, db, dc),
                     _protocol(da, db, dc))
    try:
        import torch
    except ImportError:
        rows.append(("(PyTorch not installed: no torch rows)", (float("nan"),) * 2, False))
    else:
        ta, tb, tc = (torch.ones(8) for _ in range(3))
        f(ta, tb, tc)
        assert torch.equal(tc, ta + tb)
        rows += with_own("einloop kernel, torch tensors", lambda: f(ta, tb, tc),
                         _protocol(ta, tb, tc))
        rows.append(("torch.add(a, b, out=c)", per_call_us(lambda: torch.add(ta, tb, out=tc)),
                     False))
    rows.append(("NumPy ufunc np.add(a, b, out=c)", per_call_us(lambda: np.add(a, b, out=c)),
                 False))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--log-dir", default=os.path.join(ROOT, "tuning_logs", "bench_auto"))
    opt = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="einloop_deploy_")
    # children keep compiled bytecode (a deployed process has its .pyc files; without them every
    # run would compile einloop's sources, ~170 ms that no real deployment pays)
    base = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"))
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    cold = dict(base, EINLOOP_CACHE="0")
    warm = dict(base, EINLOOP_CACHE_DIR=os.path.join(tmp, "cache"))
    try:
        print(f"einloop deploy benchmark: {opt.runs} rounds of fresh processes (medians).\n"
              "Each cell: time from process start to the first result / start-up above the "
              "floor\n(a process that only starts Python, imports NumPy and makes the inputs); "
              "target: a/c >= 5 above the floor\n")
        print(f"{'kernel':<11} {'schedule':<8} {'floor':>6} {'(a) replay+JIT':>16} "
              f"{'(b) warm cache':>16} {'(c) load_module':>16} {'a/c':>6} {'b/c':>6} "
              f"{'raw a/c':>8}")
        for name, module, function, args, shapes in KERNELS:
            log = os.path.join(opt.log_dir, f"{name}.jsonl")
            tuned = os.path.exists(log)
            if not tuned:
                log = os.path.join(tmp, f"{name}-empty.jsonl")
                open(log, "w").close()
            lib = os.path.join(tmp, f"{name}.so")
            out_shape = export(name, module, function, args, log, lib)
            fill = dict(examples=os.path.join(ROOT, "examples"), shapes=shapes, module=module,
                        function=function, args=args, log=log, lib=lib, out_shape=out_shape)
            res = run_rounds({"floor": (FLOOR.format(**fill), base),
                              "a": (JIT.format(**fill), cold),
                              "b": (JIT.format(**fill), warm),
                              "c": (LOAD.format(**fill), base)}, opt.runs)
            floor = res["floor"][0]
            (t_a, up_a, r_a), (t_b, up_b, r_b), (t_c, up_c, r_c) = res["a"], res["b"], res["c"]
            if not r_a == r_b == r_c:
                raise SystemExit(f"{name}: the three ways disagree: {r_a}, {r_b}, {r_c}")
            up_c = max(up_c, 1e-3)

            def cell(t, up):
                return f"{t * 1e3:>6.0f} / {up * 1e3:>4.0f} ms"
            ok = "pass" if up_a / up_c >= 5 else "FAIL"
            print(f"{name:<11} {'tuned' if tuned else 'untuned':<8} {floor * 1e3:>3.0f} ms "
                  f"{cell(t_a, up_a)} {cell(t_b, up_b)} {cell(t_c, up_c)} "
                  f"{up_a / up_c:>5.1f}x {up_b / up_c:>5.1f}x {t_a / t_c:>7.1f}x  {ok}")
        print("\nper-call overhead of an 8-element add, three arguments "
              "(7 loops of 20000 calls: fastest, median):")
        for label, (best, median), has_target in overhead_table():
            target = "(target <= 5 us: " + ("pass)" if best <= 5 else "FAIL)") \
                if has_target else ""
            print(f"  {label:<40} {best:6.2f} us {median:6.2f} us   {target}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
