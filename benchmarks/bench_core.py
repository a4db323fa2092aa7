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
from common import limit_blas_threads, median_time  # noqa: E402
from einloop import build  # noqa: E402


def timeit(fn, number, repeat):
    return median_time(fn, number, repeat)


def kernel_time(f, arrays, number, repeat):
    return median_time(lambda: f(*arrays), number, repeat)


def row(name, variant, seconds, spread, work, unit, ref):
    rate = work / seconds / 1e9
    ratio = f"{ref / seconds:5.2f}x" if ref else "  1.00x"
    print(f"{name:<10} {variant:<22} {seconds * 1e3:10.3f} {rate:10.1f} {unit:<7} "
          f"{ratio:>8}  ±{spread * 100:4.1f}%")


def bench_gemm():
    M = N = K = 1024
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    c = np.empty((M, N), "float32")
    flops = 2 * M * N * K
    ref, spread = timeit(lambda: np.matmul(a, b, out=c), 20, 5)
    row("gemm", "numpy (OpenBLAS)", ref, spread, flops, "GFLOP/s", None)
    s, args = gemm.default(M, N, K)
    f = build(s, args)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    t, sp = kernel_time(f, (a, b, c), 1, 1)
    row("gemm", "einloop default", t, sp, flops, "GFLOP/s", ref)
    s, args = gemm.schedule(M, N, K)
    f = build(s, args)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3)
    t, sp = kernel_time(f, (a, b, c), 20, 5)
    row("gemm", "einloop hand schedule", t, sp, flops, "GFLOP/s", ref)


def bench_conv2d():
    shape = (1, 64, 56, 56, 64, 3, 3)
    a = np.random.rand(1, 64, 56, 56).astype("float32")
    w = np.random.rand(64, 64, 3, 3).astype("float32")
    out = np.empty((1, 64, 56, 56), "float32")
    flops = 2 * 64 * 64 * 9 * 56 * 56
    ref, spread = timeit(lambda: conv2d.reference(a, w), 10, 5)
    row("conv2d", "numpy im2col+matmul", ref, spread, flops, "GFLOP/s", None)
    expect = conv2d.reference(a, w)
    for variant, (s, args) in (("einloop default", conv2d.default(*shape)),
                               ("einloop hand schedule", conv2d.schedule(*shape))):
        f = build(s, args)
        f(a, w, out)
        np.testing.assert_allclose(out, expect, rtol=1e-3)
        n = 1 if "default" in variant else 20
        t, sp = kernel_time(f, (a, w, out), n, 1 if n == 1 else 5)
        row("conv2d", variant, t, sp, flops, "GFLOP/s", ref)


def bench_softmax():
    M, N = 4096, 1024
    x = np.random.randn(M, N).astype("float32")
    out = np.empty_like(x)
    moved = 2 * x.nbytes
    ref, spread = timeit(lambda: softmax.reference(x), 10, 5)
    row("softmax", "numpy", ref, spread, moved, "GB/s", None)
    expect = softmax.reference(x)
    for variant, (s, args) in (("einloop default", softmax.default(M, N)),
                               ("einloop hand schedule", softmax.schedule(M, N))):
        f = build(s, args)
        f(x, out)
        np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-7)
        n = 2 if "default" in variant else 20
        t, sp = kernel_time(f, (x, out), n, 5)
        row("softmax", variant, t, sp, moved, "GB/s", ref)


def main():
    limiter, threads, blas = limit_blas_threads()
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
