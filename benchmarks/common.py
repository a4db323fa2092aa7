"""What the benchmarks share: a warmed allocator and NumPy's BLAS limited to einloop's thread
count before any peer is timed, and timing."""
import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from einloop.runtime import default_num_threads, time_settled, warm_allocator


def cpu_description():
    """The CPU these figures were measured on: its model name (from /proc/cpuinfo where there
    is one), LLVM's name for it, its vector width, and the CPUs this process may use."""
    from einloop.codegen.target import Target
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    t = Target.parse("llvm")
    width = 512 if t.has_feature("avx512f") else 256 if t.has_feature("avx2") else 128
    return (f"CPU: {model} ({t.cpu}, {width}-bit vectors), {default_num_threads()} "
            f"usable of {os.cpu_count()} CPUs")


def setup_peers():
    """Warm the allocator and run NumPy's BLAS on as many threads as einloop uses; print the
    CPU; returns (limiter, threads, description).  Call it before timing anything."""
    print(cpu_description())
    warm_allocator()
    threads = default_num_threads()
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return None, threads, "threadpoolctl not installed: BLAS threads not limited or reported"
    limiter = threadpool_limits(limits=threads)
    blas = ", ".join(f"{d['internal_api']} {d.get('architecture', '?')} "
                     f"({d['num_threads']} threads)" for d in threadpool_info()
                     if d["user_api"] == "blas")
    return limiter, threads, f"NumPy {np.__version__}, BLAS: {blas}; allocator warmed"


def checked_kernel(schedule, args, arrays, reference, rtol, atol, what):
    """The kernel built from *schedule*, run once on *arrays* into a fresh output and checked
    against ``reference(*arrays)`` (an AssertionError naming *what* otherwise): the kernel and
    that output."""
    from einloop import build
    f = build(schedule, args)
    expect = reference(*arrays)
    out = np.full(expect.shape, np.nan, np.float32)
    f(*arrays, out)
    np.testing.assert_allclose(out, expect, rtol=rtol, atol=atol,
                               err_msg=f"{what}: the tuned kernel differs from NumPy")
    return f, out


def median_time(fn, number=10, repeat=5):
    """Median seconds per call of ``fn()`` and the spread ((max - min) / median), timed settled
    (:func:`einloop.runtime.time_settled`: a pause, then 0.2 s of untimed calls)."""
    t = time_settled(fn, number=number, repeat=repeat)
    return t.median, t.spread


def versus(first, second, rounds=3, number=10):
    """Median times of *first* and *second* over interleaved rounds (the machine is shared and
    noisy), and the median of the per-round ratios first / second."""
    pairs = [(median_time(first, number)[0], median_time(second, number)[0])
             for _ in range(rounds)]
    return (statistics.median(p for p, _ in pairs), statistics.median(o for _, o in pairs),
            statistics.median(p / o for p, o in pairs))


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


def calls_per_measurement(fn):
    """Calls per measurement so that one takes ~20 ms (1 to 200)."""
    t0 = time.perf_counter()
    fn()
    return max(1, min(200, int(0.02 / max(time.perf_counter() - t0, 1e-7))))


def interleaved(calls, rounds):
    """Each call's settled median seconds in each of *rounds* rounds (a list per call), the
    calls interleaved, in an order that rotates from round to round."""
    numbers = [calls_per_measurement(c) for c in calls]
    times = [[] for _ in calls]
    order = list(range(len(calls)))
    for r in range(rounds):
        for i in order[r % len(order):] + order[:r % len(order)]:
            times[i].append(median_time(calls[i], number=numbers[i], repeat=3)[0])
    return times


def operator_arguments(doc, names, trials, log_dir, argv=None, trials_help=None):
    """The command line of a benchmark over named operators: ``--trials`` (default *trials*),
    ``--rounds``, ``--ops`` (a comma-separated choice of *names*, all by default) and
    ``--log-dir`` (*log_dir*, created); returns the parsed arguments and the chosen names."""
    import argparse
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=trials,
                   help=trials_help or "trials per operator (0: replay the logs)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ops", default=",".join(names))
    p.add_argument("--log-dir", default=log_dir)
    a = p.parse_args(argv)
    chosen = [n.strip() for n in a.ops.split(",") if n.strip()]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        p.error(f"unknown --ops {', '.join(unknown)}; choose from {', '.join(names)}")
    os.makedirs(a.log_dir, exist_ok=True)
    return a, chosen


def run_each(chosen, run):
    """``run(name)`` (a list of result rows) for each chosen name, in order; one that raises
    is reported and the others go on.  Returns the rows and the failures, a line each."""
    import traceback
    rows, failed = [], []
    for name in chosen:
        print(f"\n== {name}", flush=True)
        try:
            rows += run(name)
        except Exception as exc:            # noqa: BLE001 -- report it, go on with the others
            traceback.print_exc()
            failed.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    return rows, failed


def torch_call(fn):
    """*fn* over torch views of NumPy arrays (no copy): ``torch_call(fn)(*arrays)`` is a call
    of no arguments; None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None

    def bind(*arrays):
        tensors = [torch.from_numpy(a) for a in arrays]
        return lambda: fn(*tensors)
    return bind


@dataclass
class Row:
    """One operator's times, one per round (seconds), its own and its peers'."""
    label: str
    ours: list
    numpy: list
    torch: Optional[list]
    streamed: int = 0

    def ratio(self, peer) -> float:
        """The median over rounds of *peer*'s time / einloop's in the same round (> 1: einloop
        faster): the rounds are taken a moment apart on a shared, drifting machine, so ratios
        within a round compare like with like."""
        return statistics.median(p / o for p, o in zip(peer, self.ours))

    @property
    def best_peer_ratio(self) -> float:
        peers = [t for t in (self.numpy, self.torch) if t is not None]
        return statistics.median(min(p) / o for *p, o in zip(*peers, self.ours))


def failures_reported(failed) -> int:
    """Print each failure line of :func:`run_each`; the exit status a benchmark returns (1 when
    any operator failed)."""
    for f in failed:
        print(f"FAILED {f}")
    return 1 if failed else 0
