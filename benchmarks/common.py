"""What both benchmarks share: NumPy's BLAS limited to einloop's thread count, and timing."""
import time

import numpy as np

from einloop.codegen.kernel import default_num_threads
from einloop.codegen.timing import time_callable


def limit_blas_threads():
    """Run NumPy's BLAS on as many threads as einloop uses; returns (limiter, description)."""
    threads = default_num_threads()
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        return None, threads, "threadpoolctl not installed: BLAS threads not limited or reported"
    limiter = threadpool_limits(limits=threads)
    blas = ", ".join(f"{d['internal_api']} {d.get('architecture', '?')} "
                     f"({d['num_threads']} threads)" for d in threadpool_info())
    return limiter, threads, f"NumPy {np.__version__}, BLAS: {blas}"


def median_time(fn, number=10, repeat=5):
    """Median seconds per call of ``fn()`` and the spread ((max - min) / median).

    It first pauses: OpenBLAS's and libgomp's worker threads spin for a while after a call, and
    would otherwise compete for the cores with whatever is timed next.
    """
    time.sleep(0.3)
    t = time_callable(fn, number=number, repeat=repeat, warmup=1)
    return t.median, t.spread
