"""Core benchmark: default schedule vs the hand schedules of examples/ vs NumPy, in one run.

Prints GFLOP/s (GB/s for the memory-bound softmax) and the ratio to NumPy with the same number
of threads.  Run it with OpenBLAS's own kernel choice (the Makefile's `bench` target does):

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/bench_core.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import conv2d  # noqa: E402
import gemm  # noqa: E402
import softmax  # noqa: E402
from common import median_time, setup_peers  # noqa: E402
from einloop import build  # noqa: E402


def row(name, variant, seconds, spread, work, unit, ref):
    rate = work / seconds / 1e9
    ratio = f"{ref / seconds:5.2f}x" if ref else "  1.00x"
    print(f"{name:<10} {variant:<22} {seconds * 1e3:10.3f} {rate:10.1f} {unit:<7} "
          f"{ratio:>8}  ±{spread * 100:4.1f}%")


def compare(name, peer, reference, arrays, out, variants, work, unit, rtol, atol=0.0):
    """Time NumPy (*peer*), then each einloop variant: build, check against *reference*, time.

    ``variants``: (label, (schedule, args), calls per round); the default schedules are slow,
    so they get one call per round.
    """
    label, fn, number = peer
    ref, spread = median_time(fn, number, 5)
    row(name, label, ref, spread, work, unit, None)
    for variant, (s, args), number in variants:
        f = build(s, args)
        f(*arrays, out)
        np.testing.assert_allclose(out, reference, rtol=rtol, atol=atol)
        t, sp = median_time(lambda: f(*arrays, out), number, 5 if number > 1 else 1)
        row(name, variant, t, sp, work, unit, ref)


def bench_gemm():
    M = N = K = 1024
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    c = np.empty((M, N), "float32")
    compare("gemm", ("numpy (OpenBLAS)", lambda: np.matmul(a, b, out=c), 20), a @ b, (a, b), c,
            [("einloop default", gemm.default(M, N, K), 1),
             ("einloop hand schedule", gemm.schedule(M, N, K), 20)],
            2 * M * N * K, "GFLOP/s", rtol=1e-3)


def bench_conv2d():
    shape = (1, 64, 56, 56, 64, 3, 3)
    a = np.random.rand(1, 64, 56, 56).astype("float32")
    w = np.random.rand(64, 64, 3, 3).astype("float32")
    out = np.empty((1, 64, 56, 56), "float32")
    compare("conv2d", ("numpy im2col+matmul", lambda: conv2d.reference(a, w), 10),
            conv2d.reference(a, w), (a, w), out,
            [("einloop default", conv2d.default(*shape), 1),
             ("einloop hand schedule", conv2d.schedule(*shape), 20)],
            2 * 64 * 64 * 9 * 56 * 56, "GFLOP/s", rtol=1e-3)


def bench_softmax():
    M, N = 4096, 1024
    x = np.random.randn(M, N).astype("float32")
    out = np.empty_like(x)
    compare("softmax", ("numpy", lambda: softmax.reference(x), 10), softmax.reference(x), (x,),
            out, [("einloop default", softmax.default(M, N), 2),
                  ("einloop hand schedule", softmax.schedule(M, N), 20)],
            2 * x.nbytes, "GB/s", rtol=1e-5, atol=1e-7)


def main():
    limiter, threads, blas = setup_peers()
    print(f"einloop core benchmark: {threads} thread(s); {blas}")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{'operator':<10} {'variant':<22} {'time ms':>10} {'rate':>10} {'unit':<7} "
          f"{'vs numpy':>8}  spread")
    bench_gemm()
    bench_conv2d()
    bench_softmax()
    del limiter


if __name__ == "__main__":
    main()
