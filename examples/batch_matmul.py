"""Batched matmul, ``C[b] = A[b] @ B[b]``, float32, as a plain function.  Auto-schedule it:

    einloop tune examples/batch_matmul.py:batch_matmul --args 16 256 256 256

Run it (default schedule vs NumPy):  python examples/batch_matmul.py
"""
import numpy as np

from einloop import te


def batch_matmul(B, M, N, K):
    """A (B, M, K), Bm (B, K, N) -> C (B, M, N); returns [A, Bm, C]."""
    A = te.placeholder((B, M, K), name="A")
    Bm = te.placeholder((B, K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((B, M, N), lambda b, i, j: te.sum(A[b, i, k] * Bm[b, k, j], axis=k), name="C")
    return [A, Bm, C]


def reference(a, b):
    """NumPy's batched matmul (BLAS per batch)."""
    return np.matmul(a, b)


if __name__ == "__main__":
    from einloop import build, create_schedule
    shape = (16, 256, 256, 256)
    A, Bm, C = batch_matmul(*shape)
    f = build(create_schedule(C), [A, Bm, C])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 256, 256), dtype=np.float32)
    b = rng.standard_normal((16, 256, 256), dtype=np.float32)
    c = np.empty((16, 256, 256), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-3, atol=1e-3)
    print(f"batch matmul 16x256x256x256 (default schedule): {f.time(a, b, c).median * 1e3:.3f} ms")
