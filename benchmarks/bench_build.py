"""Build throughput: how long one tuning candidate takes to build, phase by phase.

A build worker does, per candidate, what
:func:`einloop.autotune.measure.builder.build_candidate` does:
instantiate the candidate (run the template or replay the step list), lower the schedule, emit
LLVM IR, optimise it and generate its object code as ``einloop.build`` does
(:func:`einloop.codegen.shipped.ship`; ``codegen`` counts the miscompile check, printing the
optimised IR and MCJIT's instruction selection).  This script does the same in one warm process
(like a build worker after its first task) for several candidates of GEMM 1024^3 and of the
conv2d of examples/, then what the runner process does with the result before it can call the
kernel (``load``: load the object code into an execution engine), and prints the median and
quartiles of each phase, of the build's total and of build plus load, in milliseconds.  The
persistent compile cache is off: every build compiles.

    .venv/bin/python benchmarks/bench_build.py [--repeat 3] [--random 12] [--seed 0]

On a machine shared with other work, ``--cpu`` counts this process's CPU time instead of wall
time and ``--best-of`` keeps each candidate's fastest build.

GEMM candidates: the hand schedule of examples/gemm.py, an auto-scheduler-style step list
(cache_write register tile, unrolled rows, vectorized columns, parallel outer loop) and random
configurations of the GEMM template; conv2d: the hand schedule and random template configs.
``--gflops`` also times the kernels of the two hand schedules (the build must not make them
slower).
"""
import argparse
import os
import random
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import conv2d  # noqa: E402
import gemm  # noqa: E402
from einloop import autotune, build, create_schedule, te  # noqa: E402
from einloop.autotune.space.candidate import StepsCandidate  # noqa: E402
from einloop.codegen.shipped import load, ship  # noqa: E402
from einloop.schedule import lower  # noqa: E402
from einloop.schedule.replay import replay  # noqa: E402

PHASES = ("instantiate", "lower", "emit", "optimise", "codegen")
TOTALS = ("total", "load", "build+load")
CONV = (1, 64, 56, 56, 64, 3, 3)


def gemm_tensors(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def auto_style_steps(M, N, K, mr=8, nr=32, mb=64, nb=128, ku=4):
    """The step list an auto-scheduler's multi-level tiling sketch makes for GEMM."""
    A, B, C = gemm_tensors(M, N, K)
    s = create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    i0, i1 = s[C].split(i, factor=mb)
    j0, j1 = s[C].split(j, factor=nb)
    i1, i2 = s[C].split(i1, factor=mr)
    j1, j2 = s[C].split(j1, factor=nr)
    s[C].reorder(i0, j0, i1, j1, i2, j2)
    s[C].parallel(s[C].fuse(i0, j0))
    s[C].vectorize(j2)
    s[CC].compute_at(s[C], j1)
    mc, nc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=ku)
    s[CC].reorder(ko, ki, mc, nc)
    s[CC].unroll(ki)
    s[CC].unroll(mc)
    s[CC].vectorize(nc)
    return StepsCandidate.of(s).steps


class StepsJob:
    """What an auto task's instantiate does: declare the tensors afresh and replay the steps."""

    def __init__(self, declare, args, steps):
        self.declare, self.args, self.steps = declare, args, steps

    def instantiate(self):
        tensors = self.declare(*self.args)
        return replay(self.steps, [tensors[-1]]), tensors


class ConfigJob:
    """What a template task's instantiate does for one configuration."""

    def __init__(self, task, index):
        self.task, self.index = task, index

    def instantiate(self):
        return self.task.instantiate(self.task.candidate(self.index))


class HandJob:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def instantiate(self):
        return self.fn(*self.args)


class Times(dict):
    """Seconds per phase; ``clock`` is what ship's phases are timed with too."""
    clock = staticmethod(time.perf_counter)


class CpuTimes(Times):
    """CPU time of this process: what a build costs, whatever else runs on the machine."""
    clock = staticmethod(time.process_time)


def build_once(job, times):
    """One candidate's build, as build_candidate does it; seconds per phase and in all."""
    clock = times.clock
    t0 = clock()
    s, args = job.instantiate()
    t1 = clock()
    func = lower(s, args)
    t2 = clock()
    times["instantiate"], times["lower"] = t1 - t0, t2 - t1
    sk = ship(func, "llvm", timings=times)
    times["total"] = clock() - t0
    t3 = clock()
    load(sk)                                 # what the runner does before calling it
    times["load"] = clock() - t3
    times["build+load"] = times["total"] + times["load"]
    return times


def jobs_for(name, n_random, seed):
    rng = random.Random(seed)
    if name == "gemm":
        task = autotune.create_task("gemm", (1024, 1024, 1024))
        jobs = [("hand", HandJob(gemm.schedule, (1024, 1024, 1024))),
                ("auto-style", StepsJob(gemm_tensors, (1024, 1024, 1024),
                                        auto_style_steps(1024, 1024, 1024)))]
    else:
        task = autotune.create_task("conv2d", CONV)
        jobs = [("hand", HandJob(conv2d.schedule, CONV))]
    n = len(task.config_space)
    jobs += [(f"config {i}", ConfigJob(task, i)) for i in rng.sample(range(n), n_random)]
    return jobs


def run(name, n_random, repeat, seed, verbose, times, best_of=False):
    """Every build's phase times; with *best_of*, only each candidate's fastest build (what
    the build costs when nothing else slows it down, on a loaded machine)."""
    jobs = jobs_for(name, n_random, seed)
    build_once(jobs[0][1], times())              # warm: imports, LLVM initialisation
    rows = {}
    for _ in range(repeat):
        for label, job in jobs:
            t = build_once(job, times())
            rows.setdefault(label, []).append(t)
            if verbose:
                print(f"  {name} {label:12s} {t['total'] * 1e3:7.1f} ms, load "
                      f"{t['load'] * 1e3:6.1f} ms", flush=True)
    if best_of:
        return [min(ts, key=lambda t: t["build+load"]) for ts in rows.values()]
    return [t for ts in rows.values() for t in ts]


def quartiles(values):
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return q[0] * 1e3, statistics.median(values) * 1e3, q[2] * 1e3


def report(name, rows):
    print(f"\n{name}: {len(rows)} builds; ms per build (25% / median / 75%)")
    for phase in PHASES + TOTALS:
        lo, med, hi = quartiles([r.get(phase, 0.0) for r in rows])
        print(f"  {phase:12s} {lo:8.1f} {med:8.1f} {hi:8.1f}")


def gflops():
    """GFLOP/s of the hand GEMM and conv2d schedules (their kernels, not their builds)."""
    from common import median_time, setup_peers
    setup_peers()
    M = N = K = 1024
    f = build(*gemm.schedule(M, N, K))
    a, b = np.random.rand(M, K).astype("float32"), np.random.rand(K, N).astype("float32")
    c = np.empty((M, N), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    t, _ = median_time(lambda: f(a, b, c), number=5, repeat=7)
    print(f"\nhand GEMM 1024^3: {2 * M * N * K / t / 1e9:.1f} GFLOP/s")
    g = build(*conv2d.schedule(*CONV))
    x = np.random.rand(1, 64, 56, 56).astype("float32")
    w = np.random.rand(64, 64, 3, 3).astype("float32")
    out = np.empty((1, 64, 56, 56), "float32")
    g(x, w, out)
    np.testing.assert_allclose(out, conv2d.reference(x, w), rtol=1e-3)
    t, _ = median_time(lambda: g(x, w, out), number=10, repeat=7)
    print(f"hand conv2d {CONV}: {2 * 64 * 64 * 9 * 56 * 56 / t / 1e9:.1f} GFLOP/s")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="builds of each candidate")
    p.add_argument("--random", type=int, default=12, help="random template configs per operator")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gflops", action="store_true", help="also time the hand kernels")
    p.add_argument("--cpu", action="store_true",
                   help="count this process's CPU time instead of wall time (a loaded machine)")
    p.add_argument("--best-of", action="store_true",
                   help="count each candidate's fastest of its --repeat builds (a loaded machine)")
    p.add_argument("--only", choices=("gemm", "conv2d"), help="one operator only")
    p.add_argument("-v", "--verbose", action="store_true", help="print every build")
    o = p.parse_args()
    os.environ["EINLOOP_CACHE"] = "0"       # every build compiles: no persistent cache hits
    import warnings
    warnings.simplefilter("ignore")          # a candidate's fallback warnings: as in a worker
    times = CpuTimes if o.cpu else Times
    print(f"clock: {'CPU time of this process' if o.cpu else 'wall time'}"
          f"{'; the fastest build of each candidate' if o.best_of else ''}")
    for name in (o.only,) if o.only else ("gemm", "conv2d"):
        report(name, run(name, o.random, o.repeat, o.seed, o.verbose, times, o.best_of))
    if o.gflops:
        gflops()


if __name__ == "__main__":
    main()
