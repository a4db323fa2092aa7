"""Layer normalisation over the rows of an M x N matrix, float32, declared as a plain function.

Two passes over each row (the mean, then the variance around it, as NumPy does), then
normalise (one reciprocal square root per row), scale by gamma and shift by beta.
Auto-schedule it:

    einloop tune examples/layer_norm.py:layer_norm --args 4096 1024

Run it (default schedule vs NumPy):  python examples/layer_norm.py
"""
import numpy as np

from einloop import te

EPS = 1e-5


def layer_norm(M, N):
    """X (M x N), gamma, beta (N) -> Out (M x N); returns [X, gamma, beta, Out]."""
    X = te.placeholder((M, N), name="X")
    gamma = te.placeholder((N,), name="gamma")
    beta = te.placeholder((N,), name="beta")
    k1 = te.reduce_axis((0, N), name="k1")
    Sum = te.compute((M,), lambda i: te.sum(X[i, k1], axis=k1), name="Sum")
    Mean = te.compute((M,), lambda i: Sum[i] * (1.0 / N), name="Mean")
    k2 = te.reduce_axis((0, N), name="k2")
    Sq = te.compute((M,), lambda i: te.sum((X[i, k2] - Mean[i]) * (X[i, k2] - Mean[i]), axis=k2),
                    name="Sq")
    Rstd = te.compute((M,), lambda i: 1.0 / te.sqrt(Sq[i] * (1.0 / N) + EPS), name="Rstd")
    Out = te.compute((M, N), lambda i, j: (X[i, j] - Mean[i]) * Rstd[i] * gamma[j] + beta[j],
                     name="Out")
    return [X, gamma, beta, Out]


def reference(x, gamma, beta):
    """NumPy layer norm: mean, variance, normalise, scale and shift."""
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(EPS)) * gamma + beta


if __name__ == "__main__":
    from einloop import build, create_schedule
    M, N = 4096, 1024
    X, g, b, Out = layer_norm(M, N)
    f = build(create_schedule(Out), [X, g, b, Out])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, N), dtype=np.float32)
    gamma, beta = rng.standard_normal(N, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    out = np.empty_like(x)
    f(x, gamma, beta, out)
    np.testing.assert_allclose(out, reference(x, gamma, beta), rtol=1e-4, atol=1e-4)
    t = f.time(x, gamma, beta, out).median
    print(f"layer norm {M}x{N} (default schedule): {t * 1e3:.3f} ms")
