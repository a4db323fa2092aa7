"""Operators declared by functions that return their tensors (inputs first, outputs last), for
the auto-scheduling tests; in a module of their own so that build workers import them by name."""
from einloop import te

from dag_ops import gemm        # noqa: F401 -- the one declaration of C = A @ B in the tests


def gemm_renamed(M, N, K):
    """:func:`gemm` with other tensor, axis and lambda parameter names."""
    X = te.placeholder((M, K), name="X")
    Y = te.placeholder((K, N), name="Y")
    r = te.reduce_axis((0, K), name="r")
    Z = te.compute((M, N), lambda a, b: te.sum(X[a, r] * Y[r, b], axis=r), name="Z")
    return [X, Y, Z]


def softmax(n, m):
    A = te.placeholder((n, m), name="A")
    k1 = te.reduce_axis((0, m), name="k1")
    mx = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    E = te.compute((n, m), lambda i, j: te.exp(A[i, j] - mx[i]), name="E")
    k2 = te.reduce_axis((0, m), name="k2")
    S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((n, m), lambda i, j: E[i, j] / S[i], name="O")
    return [A, O]


def dense_relu(n, m, k):
    X = te.placeholder((n, k), name="X")
    W = te.placeholder((m, k), name="W")
    b = te.placeholder((m,), name="b")
    r = te.reduce_axis((0, k), name="r")
    D = te.compute((n, m), lambda i, j: te.sum(X[i, r] * W[j, r], axis=r), name="D")
    O = te.compute((n, m), lambda i, j: te.max(D[i, j] + b[j], 0.0), name="O")
    return [X, W, b, O]


def softmax_renamed(rows, cols):
    """:func:`softmax` with other names."""
    X = te.placeholder((rows, cols), name="X")
    r1 = te.reduce_axis((0, cols), name="r1")
    M = te.compute((rows,), lambda a: te.max(X[a, r1], axis=r1), name="M")
    P = te.compute((rows, cols), lambda a, b: te.exp(X[a, b] - M[a]), name="P")
    r2 = te.reduce_axis((0, cols), name="r2")
    T = te.compute((rows,), lambda a: te.sum(P[a, r2], axis=r2), name="T")
    Y = te.compute((rows, cols), lambda a, b: P[a, b] / T[a], name="Y")
    return [X, Y]


def row_sums(n, m):
    """n sums of m: few rows of a long reduction (a "par" rfactor where the rows cannot feed
    the cores)."""
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    return [A, te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="S")]
