"""Data types, casts, integer division, user-defined reducers and reduction conditions."""
import numpy as np
import pytest

from einloop import te, create_schedule
from oracle import run, random_inputs

import strategies


@pytest.mark.parametrize("strategy", [strategies.default, strategies.tile_vectorize_parallel,
                                      strategies.unroll_inner], ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int32", "int64"])
def test_matmul_in_each_dtype(dtype, strategy):
    A = te.placeholder((9, 7), dtype, name="A")
    B = te.placeholder((7, 11), dtype, name="B")
    k = te.reduce_axis((0, 7), name="k")
    C = te.compute((9, 11), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = random_inputs([A, B], seed=3)
    (c,) = run(strategy([C]), [A, B], [C], [a, b])
    assert c.dtype == np.dtype(dtype)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12 if dtype == "float64" else 1e-5)


@pytest.mark.parametrize("vectorize", [False, True])
def test_integer_floor_division_and_modulo_follow_python(vectorize):
    A = te.placeholder((40,), "int64", name="A")
    Q = te.compute((40,), lambda i: A[i] // 7 + (A[i] % 7) * 100 + (i - 20) // 3, name="Q")
    s = create_schedule(Q)
    if vectorize:
        s[Q].vectorize(s[Q].op.axis[0])
    a = np.arange(-20, 20, dtype=np.int64) * 3
    (q,) = run(s, [A], [Q], [a])
    i = np.arange(40)
    np.testing.assert_array_equal(q, a // 7 + (a % 7) * 100 + (i - 20) // 3)


def test_casts_between_float_and_int():
    A = te.placeholder((16,), "float32", name="A")
    B = te.compute((16,), lambda i: A[i].astype("int32"), name="B")
    C = te.compute((16,), lambda i: (B[i] * 2).astype("float64") + 0.5, name="C")
    a = np.linspace(-3.7, 3.7, 16).astype(np.float32)
    (c,) = run(create_schedule(C), [A], [C], [a])
    np.testing.assert_allclose(c, a.astype(np.int32) * 2 + 0.5)


def test_float16_elementwise_computes_in_range():
    A = te.placeholder((32,), "float16", name="A")
    B = te.compute((32,), lambda i: A[i] * A[i] + 1.0, name="B")
    s = create_schedule(B)
    s[B].vectorize(s[B].op.axis[0])
    a = np.linspace(-2, 2, 32).astype(np.float16)
    (b,) = run(s, [A], [B], [a])
    np.testing.assert_allclose(b.astype(np.float32), (a * a + 1).astype(np.float32), rtol=2e-3)


def test_user_defined_reducer():
    absmax = te.comm_reducer(lambda x, y: te.maximum(te.abs(x), te.abs(y)), lambda dt: 0.0,
                             name="absmax")
    A = te.placeholder((6, 13), name="A")
    k = te.reduce_axis((0, 13), name="k")
    R = te.compute((6,), lambda i: absmax(A[i, k], axis=k), name="R")
    (a,) = random_inputs([A], seed=1)
    for s in (create_schedule(R), strategies.tile_vectorize_parallel([R])):
        (r,) = run(s, [A], [R], [a])
        np.testing.assert_allclose(r, np.abs(a).max(axis=1))


def test_min_reduction_with_condition_and_offset_axis():
    A = te.placeholder((5, 20), name="A")
    k = te.reduce_axis((4, 17), name="k")
    R = te.compute((5,), lambda i: te.min(A[i, k], axis=k, where=(k % 2 == 0)), name="R")
    (a,) = random_inputs([A], seed=2)
    (r,) = run(strategies.unroll_inner([R]), [A], [R], [a])
    np.testing.assert_allclose(r, a[:, 4:17:2].min(axis=1))


def test_reduce_axis_compared_with_eq_builds_a_condition():
    A = te.placeholder((4, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    R = te.compute((4,), lambda i: te.sum(te.if_then_else(k == 2, A[i, k] * 10.0, A[i, k]),
                                          axis=k), name="R")
    (a,) = random_inputs([A], seed=4)
    (r,) = run(create_schedule(R), [A], [R], [a])
    np.testing.assert_allclose(r, a.sum(axis=1) + 9 * a[:, 2], rtol=1e-5)
