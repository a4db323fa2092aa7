"""Tuned kernels in a real process: next to NumPy and PyTorch calls, with a core taken by
another process, and in a fresh process against the time the tuner logged.

For GEMM 1024^3, the core benchmark's conv2d and softmax 4096x1024, auto-scheduled (resuming
from ``tuning_logs/bench_interplay/``), each call of the kernel is timed on its own in four
conditions, interleaved over rounds because the machine is shared and noisy:

- alone: calls back to back;
- after NumPy: each call right after a NumPy matmul 1024^3 on einloop's thread count (OpenBLAS's
  workers spin after each call, on the cores the kernel wants);
- between PyTorch ops: each call between two ``torch.mm`` 512^3 (PyTorch's OpenMP pool), if
  torch is installed;
- one core busy: a second process spins on one core meanwhile.

It prints each condition's median call as a speed ratio to alone (1.0: no loss); the issue's
targets are >= 0.9 next to NumPy and PyTorch and >= 0.6 with one of two cores busy.  Then, in a
fresh process that only loads the best schedule from the log and calls the kernel (no warm-up
other than the calls themselves, no pause), the median call alone and right after a NumPy
matmul, against the logged time of that schedule (target: within 15%).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_interplay.py

Options: --trials (per operator, default 64; 0: the log's best), --ops, --rounds, --calls.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
sys.path.insert(0, EXAMPLES)

import conv2d  # noqa: E402
import gemm  # noqa: E402
import softmax  # noqa: E402
from common import setup_peers  # noqa: E402
from einloop import autotune, build  # noqa: E402

# name: (module, function, arguments, inputs(rng), reference, rtol)
OPS = {
    "gemm": ("gemm", "gemm", (1024, 1024, 1024),
             lambda r: (r.random((1024, 1024), np.float32), r.random((1024, 1024), np.float32)),
             gemm.reference, 1e-3),
    "conv2d": ("conv2d", "conv2d", (1, 64, 56, 56, 64, 3, 3),
               lambda r: (r.random((1, 64, 56, 56), np.float32),
                          r.random((64, 64, 3, 3), np.float32)), conv2d.reference, 1e-3),
    "softmax": ("softmax", "softmax", (4096, 1024),
                lambda r: (r.standard_normal((4096, 1024), np.float32),), softmax.reference,
                1e-4),
}
TARGETS = {"after NumPy": 0.9, "between torch ops": 0.9, "one core busy": 0.6}
FRESH_TARGET = 0.15


def per_call_median(call, before=None, after=None, calls=40):
    """Median seconds of one ``call()``, each timed on its own between ``before()`` and
    ``after()`` (untimed)."""
    clock, times = time.perf_counter, []
    for _ in range(calls):
        if before is not None:
            before()
        t0 = clock()
        call()
        times.append(clock() - t0)
        if after is not None:
            after()
    return statistics.median(times)


class BusyCore:
    """A second process that spins on one core while the block runs."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)                         # let it start and take its core
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def neighbours(threads):
    """{condition: (before, after)} for the conditions other than 'alone' and the busy core."""
    rng = np.random.default_rng(1)
    a, b = rng.random((1024, 1024), np.float32), rng.random((1024, 1024), np.float32)
    out = {"after NumPy": (lambda: a @ b, None)}
    try:
        import torch
    except ImportError:
        print("torch is not installed: the PyTorch condition is skipped")
        return out
    torch.set_num_threads(threads)
    ta, tb = torch.rand(512, 512), torch.rand(512, 512)
    out["between torch ops"] = (lambda: torch.mm(ta, tb), lambda: torch.mm(tb, ta))
    return out


def tune(name, trials, log_dir):
    module, fn_name, args, *_ = OPS[name]
    fn = getattr(sys.modules[module], fn_name)
    log = os.path.join(log_dir, f"{name}.jsonl")
    if trials > 0:
        s, targs = autotune.auto_schedule(fn(*args), n_trial=trials, log=log)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with autotune.apply_history_best(log):
                s, targs = autotune.auto_schedule(fn(*args))
    return build(s, targs), log


def logged_best(log):
    """Seconds per call the tuner logged for the best schedule of the (only) workload."""
    best = autotune.pick_best(autotune.load_log(log))
    if len(best) != 1:
        raise SystemExit(f"{log}: expected one tuned workload, found {len(best)}")
    return next(iter(best.values())).mean_cost


FRESH = """
import json, statistics, sys, time, warnings
import numpy as np
sys.path.insert(0, {examples!r})
import {module}
from einloop import autotune, build
with warnings.catch_warnings():
    warnings.simplefilter("error", autotune.UntunedScheduleWarning)
    with autotune.apply_history_best({log!r}):
        s, args = autotune.auto_schedule({module}.{fn}(*{args!r}))
f = build(s, args)
rng = np.random.default_rng(0)
arrays = [rng.random(tuple(int(d) for d in t.shape), np.float32) for t in args]
a, b = rng.random((1024, 1024), np.float32), rng.random((1024, 1024), np.float32)
def median(before, calls={calls}):
    times = []
    for _ in range(calls):
        before()
        t0 = time.perf_counter(); f(*arrays); times.append(time.perf_counter() - t0)
    return statistics.median(times)
print(json.dumps({{"alone": median(lambda: None), "after NumPy": median(lambda: a @ b)}}))
"""


def fresh_process(name, log, calls, threads):
    """Median call of the logged best schedule in a new process, alone and after NumPy."""
    module, fn_name, args, *_ = OPS[name]
    code = FRESH.format(examples=EXAMPLES, module=module, fn=fn_name, args=args, log=log,
                        calls=calls)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--log-dir", default=os.path.join("tuning_logs", "bench_interplay"))
    a = ap.parse_args(argv)
    names = [n for n in a.ops.split(",") if n]
    unknown = set(names) - set(OPS)
    if unknown:
        ap.error(f"unknown --ops {sorted(unknown)}; choose from {', '.join(OPS)}")
    os.makedirs(a.log_dir, exist_ok=True)
    limiter, threads, blas = setup_peers()
    print(f"einloop interplay benchmark: {threads} thread(s); {blas}")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"{a.trials} trials per operator; logs in {a.log_dir}")
    conds = neighbours(threads)
    rows = []
    for name in names:
        f, log = tune(name, a.trials, a.log_dir)
        _, _, _, inputs, reference, rtol = OPS[name]
        arrays = inputs(np.random.default_rng(0))
        expect = reference(*arrays)
        out = np.full(expect.shape, np.nan, np.float32)
        f(*arrays, out)
        np.testing.assert_allclose(out, expect, rtol=rtol, atol=1e-3,
                                   err_msg=f"{name}: the tuned kernel differs from NumPy")

        def call():
            f(*arrays, out)
        ratios = {c: [] for c in [*conds, "one core busy"]}
        alone_times = []
        for _ in range(a.rounds):
            alone = per_call_median(call, calls=a.calls)
            alone_times.append(alone)
            for c, (before, after) in conds.items():
                ratios[c].append(alone / per_call_median(call, before, after, a.calls))
            with BusyCore():
                ratios["one core busy"].append(alone / per_call_median(call, calls=a.calls))
        fresh = fresh_process(name, log, a.calls, threads)
        logged = logged_best(log)
        rows.append((name, statistics.median(alone_times), {c: statistics.median(r)
                                                            for c, r in ratios.items()},
                     logged, fresh))
    report(rows, threads)
    if limiter is not None:
        limiter.restore_original_limits()


def report(rows, threads):
    conds = list(rows[0][2])
    print()
    print("speed next to other work, as alone / condition (median call over rounds; 1.0: no loss)")
    print(f"{'operator':<9} {'alone ms':>9} " + " ".join(f"{c:>18}" for c in conds))
    for name, alone, ratios, _, _ in rows:
        print(f"{name:<9} {alone * 1e3:>9.3f} "
              + " ".join(f"{ratios[c]:>12.2f} {mark(ratios[c] >= TARGETS[c]):>5}"
                         for c in conds))
    print("targets: " + ", ".join(f"{c} >= {TARGETS[c]}" for c in conds))
    print()
    print("logged best time vs a fresh process's median call (target: within "
          f"{FRESH_TARGET:.0%})")
    print(f"{'operator':<9} {'logged ms':>10} {'fresh ms':>9} {'ratio':>6} "
          f"{'after NumPy ms':>15} {'ratio':>6}")
    for name, _, _, logged, fresh in rows:
        r1, r2 = fresh["alone"] / logged, fresh["after NumPy"] / logged
        print(f"{name:<9} {logged * 1e3:>10.3f} {fresh['alone'] * 1e3:>9.3f} {r1:>6.2f} "
              f"{fresh['after NumPy'] * 1e3:>15.3f} {r2:>6.2f}  "
              f"{mark(abs(r1 - 1) <= FRESH_TARGET and abs(r2 - 1) <= FRESH_TARGET)}")
    print(f"({threads} threads; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())})")


def mark(ok):
    return "pass" if ok else "FAIL"


if __name__ == "__main__":
    main()
