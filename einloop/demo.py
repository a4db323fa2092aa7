"""The Quick start's main job: declare a dense layer, schedule it, build it, check it, time it.

``relu(X @ W + bias)`` is declared in Einstein notation, scheduled by hand (packed weights, a
register-blocked tile with the bias and ReLU fused into the write-back, rows on all cores),
compiled with LLVM, checked against NumPy, and timed against the default schedule and NumPy.
"""
import statistics
import time

import numpy as np

from . import te, create_schedule, lower, build


def declare(M, N, K, bn=32):
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((K, N), name="W")
    bias = te.placeholder((N,), name="bias")
    nb = -(-N // bn)
    WP = te.compute((nb, K, bn), lambda x, y, z: te.if_then_else(
        x * bn + z < N, W[y, x * bn + z], 0.0), name="WP")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(X[i, k] * WP[j // bn, k, j % bn], axis=k),
                   name="Y")
    Out = te.compute((M, N), lambda i, j: te.maximum(Y[i, j] + bias[j], 0.0), name="Out")
    return X, W, bias, WP, Y, Out


def hand_schedule(M, N, K, mr=8, bn=32):
    X, W, bias, WP, Y, Out = declare(M, N, K, bn)
    s = create_schedule(Out)
    i, j = s[Out].op.axis
    io, jo, ii, ji = s[Out].tile(i, j, mr, bn)
    s[Out].vectorize(ji)
    s[Out].parallel(io)
    s[Y].compute_at(s[Out], jo)
    yi, yj = s[Y].op.axis
    ko, ki = s[Y].split(s[Y].op.reduce_axis[0], factor=4)
    s[Y].reorder(ko, ki, yi, yj)
    s[Y].unroll(ki)
    s[Y].unroll(yi)
    s[Y].vectorize(yj)
    x, _, z = s[WP].op.axis
    s[WP].vectorize(z)
    s[WP].parallel(x)
    return s, [X, W, bias, Out]


def default_schedule(M, N, K):
    X, W, bias, WP, Y, Out = declare(M, N, K)
    return create_schedule(Out), [X, W, bias, Out]


def _median_time(fn, number=10, repeat=5):
    fn()
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        rounds.append((time.perf_counter() - t0) / number)
    return statistics.median(rounds)


def main(M=512, N=512, K=512):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    out = np.empty((M, N), np.float32)
    expect = np.maximum(x @ w + b, 0)
    flops = 2 * M * N * K

    print(f"einloop demo: relu(X @ W + bias), X {M}x{K}, W {K}x{N}, float32\n")
    s, args = hand_schedule(M, N, K)
    print("hand schedule:\n" + str(s) + "\n")
    text = str(lower(s, args)).splitlines()
    print("lowered loop nest (first 30 lines):\n" + "\n".join(text[:30]) + "\n")

    rows = []
    numpy_t = _median_time(lambda: np.maximum(x @ w + b, 0))
    rows.append(("numpy", numpy_t))
    for name, (sched, sargs) in (("einloop default schedule", default_schedule(M, N, K)),
                                 ("einloop hand schedule", (s, args))):
        f = build(sched, sargs)
        out.fill(np.nan)
        f(x, w, b, out)
        np.testing.assert_allclose(out, expect, rtol=1e-3, atol=1e-3)
        rows.append((name, _median_time(lambda: f(x, w, b, out),
                                        number=1 if "default" in name else 10)))
    print(f"{'variant':<28}{'time ms':>10}{'GFLOP/s':>10}{'vs numpy':>10}")
    for name, t in rows:
        print(f"{name:<28}{t * 1e3:10.3f}{flops / t / 1e9:10.1f}{numpy_t / t:9.2f}x")
    print("\nall results match NumPy")


if __name__ == "__main__":
    main()
