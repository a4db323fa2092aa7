"""What the benchmarks share: a warmed allocator and NumPy's BLAS limited to einloop's thread
count before any peer is timed, and timing."""
import statistics

import numpy as np

from einloop.codegen.kernel import default_num_threads
from einloop.runtime import time_settled, warm_allocator


def setup_peers():
    """Warm the allocator and run NumPy's BLAS on as many threads as einloop uses; returns
    (limiter, threads, description).  Call it before timing anything."""
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
