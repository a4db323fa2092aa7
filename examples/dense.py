"""A dense layer with bias and GELU, ``gelu(X @ W + bias)``, float32, as a plain function.

GELU in its tanh form, ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``: NumPy has no erf,
and the reference must compute the same formula at NumPy's speed.  Auto-schedule it:

    einloop tune examples/dense.py:dense_bias_gelu --args 512 1024 1024

Run it (default schedule vs NumPy):  python examples/dense.py
"""
import math

import numpy as np

from einloop import te

GELU_C = math.sqrt(2.0 / math.pi)


def dense_bias_gelu(M, N, K):
    """X (M x K), W (K x N), bias (N) -> Out (M x N); returns [X, W, bias, Out]."""
    X = te.placeholder((M, K), name="X")
    W = te.placeholder((K, N), name="W")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[k, j], axis=k), name="Y")
    B = te.compute((M, N), lambda i, j: Y[i, j] + bias[j], name="B")
    Out = te.compute((M, N), lambda i, j: 0.5 * B[i, j] * (1.0 + te.tanh(
        GELU_C * (B[i, j] + 0.044715 * B[i, j] * B[i, j] * B[i, j]))), name="Out")
    return [X, W, bias, Out]


def reference(x, w, bias):
    """NumPy: matmul, bias, GELU (tanh form)."""
    y = x @ w + bias
    return 0.5 * y * (1.0 + np.tanh(np.float32(GELU_C) * (y + np.float32(0.044715) * y ** 3)))


if __name__ == "__main__":
    from einloop import build, create_schedule
    M, N, K = 512, 1024, 1024
    X, W, bias, Out = dense_bias_gelu(M, N, K)
    f = build(create_schedule(Out), [X, W, bias, Out])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K), dtype=np.float32)
    w = rng.standard_normal((K, N), dtype=np.float32) / np.float32(K ** 0.5)
    b = rng.standard_normal(N, dtype=np.float32)
    out = np.empty((M, N), np.float32)
    f(x, w, b, out)
    np.testing.assert_allclose(out, reference(x, w, b), rtol=1e-3, atol=1e-3)
    t = f.time(x, w, b, out).median
    print(f"dense+bias+gelu {M}x{N}x{K} (default schedule): {t * 1e3:.3f} ms")
