"""Operators declared by plain functions (no template), for the step-list candidate tests.

They live in a module of their own so that build workers import them by name (a
task pickles as this module's name, the function's name and its arguments).
"""
from einloop import create_schedule, te


def gemm(M, N, K):
    """``C = A @ B``: its tensors, inputs first, outputs last."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def scaled_relu(n, scale=2.0):
    """An elementwise operator with two stages: ``relu(A * scale)``."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * scale, name="B")
    C = te.compute((n,), lambda i: te.max(B[i], 0.0), name="C")
    return [A, C]


def hand_gemm_schedule(M, N, K, tile=8):
    """A hand schedule of :func:`gemm` (tiled, reordered, vectorized, parallel): ``(s, args)``."""
    A, B, C = gemm(M, N, K)
    s = create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, factor=tile)
    jo, ji = s[C].split(j, factor=tile)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]
