"""Tuned kernels in a real process: next to NumPy and PyTorch calls, with a core taken by
another process, and in a fresh process against the time the tuner logged.

GEMM 1024^3, the core benchmark's conv2d and softmax 4096x1024 are auto-scheduled (resuming
from ``tuning_logs/bench_interplay/``).  Then each is measured in fresh processes that load its
best schedule from the log, as a user's program would, each call timed on its own, the
conditions interleaved over rounds because the machine is shared and noisy:

- alone: calls back to back;
- after NumPy: each call right after a NumPy matmul 1024^3 on einloop's thread count (OpenBLAS's
  workers spin after each call, on the cores the kernel wants);
- after einloop's GEMM: each call right after einloop's own tuned GEMM 1024^3 (the gemm log
  in the same folder), a control: the same memory traffic and a busy machine just before, but
  one thread pool, einloop's; what is left between it and 'after NumPy' is what sharing the
  machine with OpenBLAS costs;
- after a pause: each call after sleeping as long as that matmul takes, a control with no
  other work at all: what the time away from its data costs a kernel on this machine (a VM's
  last-level cache is shared with other guests, and idle cores slow down);
- one core busy: a second process spins on one core meanwhile;
- between torch ops (a process that imported PyTorch first, so einloop shares its OpenMP
  runtime): each call between two ``torch.mm`` 512^3; and after NumPy again, in that process.

It prints each condition's median call as a speed ratio to alone (1.0: no loss); the issue's
targets are >= 0.9 next to NumPy and PyTorch and >= 0.6 with one of two cores busy.  The same
ratios of the operator's NumPy version, measured in the same rounds, tell what no runtime can
avoid: a matmul before the call evicts the operator's data from the caches, so a memory-bound
kernel called back to back (alone) gains from caches that no call after other work has.  Last,
the median call alone and after NumPy in the first fresh process against the time the tuner
logged for that schedule (target: within 15%), and against the same schedule measured again by
the tuner's runner just before ('tuner now'): a shared VM's speed drifts by tens of percent
within minutes, so logged / tuner now tells the drift since tuning, and fresh / tuner now what
the tuner's measuring protocol misses of a user's calls.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_interplay.py

Options: --trials (per operator, default 64; 0: the log's best), --ops, --rounds, --calls.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
sys.path.insert(0, EXAMPLES)

import conv2d  # noqa: E402
import gemm  # noqa: E402
import softmax  # noqa: E402
from common import per_call_median, setup_peers  # noqa: E402
from einloop import autotune  # noqa: E402

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
TARGETS = {"after NumPy": 0.9, "one core busy": 0.6, "between torch ops": 0.9,
           "after NumPy, torch first": 0.9}
FRESH_TARGET = 0.15
CONTROL = "after einloop's GEMM"
PAUSE = "after a pause"

# What one measuring process runs: it loads the schedule from the log and times the kernel and
# the operator's NumPy version under each condition; {torch_first} imports PyTorch before
# einloop.  Prints one JSON line.
MEASURE = """
import json, sys, warnings
{torch_first}
import numpy as np
sys.path.insert(0, {examples!r})
sys.path.insert(0, {benchmarks!r})
import bench_interplay as bi
from einloop import autotune, build
module, fn, args, inputs, reference, rtol = bi.OPS[{name!r}]
with warnings.catch_warnings():
    warnings.simplefilter("error", autotune.UntunedScheduleWarning)
    with autotune.apply_history_best({log!r}):
        s, targs = autotune.auto_schedule(getattr(sys.modules[module], fn)(*args))
f = build(s, targs)
arrays = inputs(np.random.default_rng(0))
expect = reference(*arrays)
out = np.full(expect.shape, np.nan, np.float32)
f(*arrays, out)
np.testing.assert_allclose(out, expect, rtol=rtol, atol=1e-3)
print(json.dumps(bi.measure(lambda: f(*arrays, out), lambda: reference(*arrays),
                            {conditions!r}, {rounds}, {calls}, {gemm_log!r})))
"""


class BusyCore:
    """A second process that spins on one core while the block runs."""

    def __enter__(self):
        # it dies with this process (PR_SET_PDEATHSIG) if this one is killed mid-block
        spin = "import ctypes, itertools\nctypes.CDLL(None).prctl(1, 9)\nany(itertools.repeat(0))"
        self.proc = subprocess.Popen([sys.executable, "-c", spin])
        time.sleep(0.2)                         # let it start and take its core
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def einloop_gemm(log):
    """einloop's GEMM 1024^3 with its best schedule in *log*, and an output for it."""
    from einloop import build
    with autotune.apply_history_best(log):
        s, args = autotune.auto_schedule(gemm.gemm(1024, 1024, 1024))
    return build(s, args), np.empty((1024, 1024), np.float32)


def neighbours(conditions, gemm_log=None):
    """{condition: (before, after)} of each named condition but 'one core busy'."""
    rng = np.random.default_rng(1)
    a, b = rng.random((1024, 1024), np.float32), rng.random((1024, 1024), np.float32)
    out = {}
    for c in conditions:
        if c.startswith("after NumPy"):
            out[c] = (lambda: a @ b, None)
        elif c == PAUSE:
            pause = per_call_median(lambda: a @ b, calls=9)
            out[c] = (lambda: time.sleep(pause), None)
        elif c == "after einloop's GEMM":
            gemm_kernel, gemm_out = einloop_gemm(gemm_log)
            out[c] = (lambda: gemm_kernel(a, b, gemm_out), None)
        elif c == "between torch ops":
            import torch
            ta, tb = torch.rand(512, 512), torch.rand(512, 512)
            out[c] = (lambda: torch.mm(ta, tb), lambda: torch.mm(tb, ta))
    return out


def measure(kernel, peer, conditions, rounds, calls, gemm_log=None):
    """In a measuring process: ``{"first": {"alone": s, "after NumPy": s}, "ratios":
    {condition: [kernel's, NumPy version's]}}``: the kernel's median seconds per call in its
    first measurements (what a fresh process gets), and each condition's ratio alone / condition,
    the median over *rounds*."""
    near = neighbours(conditions, gemm_log)
    ratios = {(who, c): [] for who in ("einloop", "NumPy") for c in conditions}
    first = {"alone": per_call_median(kernel, calls=calls)}
    if "after NumPy" in near:
        first["after NumPy"] = per_call_median(kernel, near["after NumPy"][0], None, calls)
    for _ in range(rounds):
        for who, fn in (("einloop", kernel), ("NumPy", peer)):
            alone = per_call_median(fn, calls=calls)
            for c in conditions:
                if c == "one core busy":
                    with BusyCore():
                        ratios[who, c].append(alone / per_call_median(fn, calls=calls))
                else:
                    before, after = near[c]
                    ratios[who, c].append(alone / per_call_median(fn, before, after, calls))
    return {"first": first, "ratios": {c: [statistics.median(ratios["einloop", c]),
                                           statistics.median(ratios["NumPy", c])]
                                       for c in conditions}}


def run_measuring_process(name, log, conditions, rounds, calls, threads, torch_first=False,
                          gemm_log=None):
    code = MEASURE.format(torch_first="import torch" if torch_first else "", examples=EXAMPLES,
                          benchmarks=HERE, name=name, log=log, conditions=conditions,
                          rounds=rounds, calls=calls, gemm_log=gemm_log)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: the measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tune(name, trials, log_dir):
    """Auto-schedule *name* into its log (resuming it); returns the log's path."""
    module, fn_name, args, *_ = OPS[name]
    fn = getattr(sys.modules[module], fn_name)
    log = os.path.join(log_dir, f"{name}.jsonl")
    if trials > 0:
        autotune.auto_schedule(fn(*args), n_trial=trials, log=log)
    elif not os.path.exists(log):
        raise SystemExit(f"--trials 0 but {log} does not exist: tune first")
    return log


def best_record(log):
    """The log's record of the best schedule of its (only) workload."""
    best = autotune.pick_best(autotune.load_log(log))
    if len(best) != 1:
        raise SystemExit(f"{log}: expected one tuned workload, found {len(best)}")
    return next(iter(best.values()))


def logged_best(log):
    """Seconds per call the tuner logged for the best schedule of the (only) workload."""
    return best_record(log).mean_cost


def tuner_now(name, log):
    """Seconds per call of the log's best schedule measured again now, the way the tuner
    measured it (its runner process and protocol): beside the fresh process's calls, this
    separates what the protocol misses from how far the shared machine's speed drifted since
    the tuning (logged / tuner now)."""
    from einloop.autotune.measure.common import settled
    from einloop.autotune.measure.local import Measurer
    from einloop.autotune.task.auto import AutoTask
    module, fn_name, args, *_ = OPS[name]
    task = AutoTask.of_tensors(getattr(sys.modules[module], fn_name)(*args), "llvm")
    record = best_record(log)
    with Measurer(task, settled(None)) as measurer:
        result = measurer.measure_batch([task.candidate_from_json(record.candidate)])[0]
    if not result.costs:
        raise SystemExit(f"{log}: the best schedule failed when measured again: "
                         f"{result.error_msg[-500:]}")
    return result.mean_cost


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
    try:
        import torch  # noqa: F401
        has_torch = True
    except ImportError:
        has_torch = False
        print("torch is not installed: the PyTorch conditions are skipped")
    rows = []
    for name in names:
        log = tune(name, a.trials, a.log_dir)
        now = tuner_now(name, log)
        plain = run_measuring_process(name, log, ["after NumPy", CONTROL, PAUSE,
                                                  "one core busy"], a.rounds, a.calls, threads,
                                      gemm_log=tune("gemm", a.trials, a.log_dir))
        ratios = dict(plain["ratios"])
        if has_torch:
            torch_first = run_measuring_process(name, log, ["between torch ops", "after NumPy"],
                                                a.rounds, a.calls, threads, torch_first=True)
            ratios["between torch ops"] = torch_first["ratios"]["between torch ops"]
            ratios["after NumPy, torch first"] = torch_first["ratios"]["after NumPy"]
        rows.append((name, ratios, (logged_best(log), now), plain["first"]))
    report(rows, threads)
    if limiter is not None:
        limiter.restore_original_limits()


def report(rows, threads):
    conds = list(rows[0][1])
    print()
    print("speed next to other work, as alone / condition (median call over rounds; 1.0: no "
          "loss); in brackets the same ratio of the operator's NumPy version")
    print(f"{'operator':<9} " + " ".join(f"{c:>24}" for c in conds))
    for name, ratios, _, _ in rows:
        print(f"{name:<9} " + " ".join(f"{ratios[c][0]:>10.2f} ({ratios[c][1]:.2f}) "
                                       f"{mark(ratios[c][0] >= TARGETS[c]) if c in TARGETS else '':>5}"
                                       for c in conds))
    print("targets: " + ", ".join(f"{c} >= {TARGETS[c]}" for c in conds if c in TARGETS)
          + "; 'after einloop's GEMM' is a control with one thread pool, 'after a pause' one "
          "with no other work")
    if "after einloop's GEMM" in conds:
        print("after NumPy / after einloop's GEMM (what OpenBLAS's threads cost beyond a GEMM's "
              "memory traffic): "
              + ", ".join(f"{name} {r['after NumPy'][0] / r[CONTROL][0]:.2f}"
                          for name, r, _, _ in rows))
    print()
    print("logged best time vs a fresh process's median call (target: within "
          f"{FRESH_TARGET:.0%}); 'tuner now': the same schedule measured again by the tuner's "
          "runner just before the fresh process, so fresh / tuner now is what the measuring "
          "protocol misses and tuner now / logged how far the machine drifted since tuning")
    print(f"{'operator':<9} {'logged ms':>10} {'tuner now':>10} {'fresh ms':>9} {'ratio':>6} "
          f"{'after NumPy ms':>15} {'ratio':>6}   {'fresh / tuner now':>17}")
    for name, _, (logged, now), fresh in rows:
        r1, r2 = fresh["alone"] / logged, fresh["after NumPy"] / logged
        r3, r4 = fresh["alone"] / now, fresh["after NumPy"] / now
        print(f"{name:<9} {logged * 1e3:>10.3f} {now * 1e3:>10.3f} {fresh['alone'] * 1e3:>9.3f} "
              f"{r1:>6.2f} {fresh['after NumPy'] * 1e3:>15.3f} {r2:>6.2f}  "
              f"{mark(abs(r1 - 1) <= FRESH_TARGET and abs(r2 - 1) <= FRESH_TARGET)}"
              f"  {r3:>6.2f} {r4:>6.2f} "
              f"{mark(abs(r3 - 1) <= FRESH_TARGET and abs(r4 - 1) <= FRESH_TARGET)}")
    print(f"({threads} threads; load average {', '.join(f'{x:.2f}' for x in os.getloadavg())})")


def mark(ok):
    return "pass" if ok else "FAIL"


if __name__ == "__main__":
    main()
