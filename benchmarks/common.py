"""What the benchmarks share: a warmed allocator and NumPy's BLAS limited to einloop's thread
count before any peer is timed, and timing."""
import statistics
import time

import numpy as np

from einloop.codegen.kernel import default_num_threads
from einloop.codegen.timing import time_callable, warm_allocator

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
    """Median seconds per call of ``fn()`` and the spread ((max - min) / median).

    It first pauses: OpenBLAS's and libgomp's worker threads spin for a while after a call, and
    would otherwise compete for the cores with whatever is timed next.  Then it runs *fn* for
    0.2 s untimed: on this kind of VM an idle moment costs the next ~50-100 ms of work 2-3x
    (measured on a 0.25 ms attention kernel: 0.8 ms per call right after a 0.3 s sleep, 0.25
    once warm), so timing right after the pause would measure the wake-up, not the code.
    """
    time.sleep(0.3)
    end = time.perf_counter() + 0.2
    while True:
        fn()
        if time.perf_counter() >= end:
            break
    t = time_callable(fn, number=number, repeat=repeat, warmup=1)
    return t.median, t.spread


def versus(first, second, rounds=3, number=10):
    """Median times of *first* and *second* over interleaved rounds (the machine is shared and
    noisy), and the median of the per-round ratios first / second."""
    pairs = [(median_time(first, number)[0], median_time(second, number)[0])
             for _ in range(rounds)]
    return (statistics.median(p for p, _ in pairs), statistics.median(o for _, o in pairs),
            statistics.median(p / o for p, o in pairs))
