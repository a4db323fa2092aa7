"""Timing any callable the way benchmarks and the tuner need: warm up, repeat, report spread."""
from __future__ import annotations

from dataclasses import dataclass
import time


from ..errors import ArgumentError


@dataclass(frozen=True)
class Timing:
    """Seconds per call: summary statistics over ``repeat`` measurements (``results``)."""
    median: float
    mean: float
    stdev: float
    min: float
    max: float
    results: tuple
    number: int

    @property
    def spread(self):
        """(max - min) / median of the measurements: how noisy this timing was."""
        return (self.max - self.min) / self.median if self.median else 0.0

    def __str__(self):
        return (f"median {self.median * 1e3:.4f} ms (mean {self.mean * 1e3:.4f}, "
                f"min {self.min * 1e3:.4f}, max {self.max * 1e3:.4f}, "
                f"{len(self.results)} x {self.number} calls)")


def time_callable(fn, number=1, repeat=3, min_repeat_ms=0, warmup=1, before=None) -> Timing:
    """Time ``fn()``: ``repeat`` measurements of ``number`` calls each, after ``warmup`` calls.

    With ``min_repeat_ms``, ``number`` grows until one measurement lasts at least that long.
    *before*: called, untimed, before each timed call (each call is then timed on its own), as
    a cold-cache measurement evicts the arguments first.
    """
    for name, v, low in (("number", number, 1), ("repeat", repeat, 1), ("warmup", warmup, 0),
                         ("min_repeat_ms", min_repeat_ms, 0)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < low:
            raise ArgumentError(f"timing: {name} must be a number >= {low}, got {v!r}")
    clock = time.perf_counter
    for _ in range(int(warmup)):
        fn()

    def measure(n):
        if before is not None:
            total = 0.0
            for _ in range(n):
                before()
                t0 = clock()
                fn()
                total += clock() - t0
            return total
        t0 = clock()
        for _ in range(n):
            fn()
        return clock() - t0
    number = int(number)
    if min_repeat_ms > 0:
        while True:
            elapsed = measure(number)
            if elapsed * 1e3 >= min_repeat_ms:
                break
            grow = min_repeat_ms / max(elapsed * 1e3, 1e-3) * 1.2
            number = max(number * 2, int(number * grow))
    results = tuple(measure(number) / number for _ in range(int(repeat)))
    import statistics       # here: ~8 ms of import a process that only runs kernels never pays
    return Timing(median=statistics.median(results), mean=statistics.fmean(results),
                  stdev=statistics.stdev(results) if len(results) > 1 else 0.0,
                  min=min(results), max=max(results), results=results, number=number)


def time_settled(fn, number=10, repeat=5, pause_s=0.3, warm_s=0.2) -> Timing:
    """:func:`time_callable` for comparing peers in one process: pause first, so that worker
    threads spinning after the previous peer's call (OpenBLAS's, libgomp's) do not compete for
    the cores, then run *fn* untimed for *warm_s*: on shared VMs an idle moment slows the work
    that follows it for a while (the CPU's clock and the host's scheduling wake up), which would
    time the wake-up rather than the code."""
    time.sleep(pause_s)
    end = time.perf_counter() + warm_s
    while True:
        fn()
        if time.perf_counter() >= end:
            break
    return time_callable(fn, number=number, repeat=repeat, warmup=1)
