"""te.promote_floats: an operator declared again computing in float64."""
import numpy as np

from einloop import build, create_schedule, te
from einloop.te.promote import promote_floats


def test_floats_widen_and_integers_keep_their_type():
    A = te.placeholder((8, 5), name="A")
    I = te.placeholder((8,), "int32", name="I")
    k = te.reduce_axis((0, 5), name="k")
    S = te.compute((8,), lambda i: te.sum(te.exp(A[i, k]) * 0.5, axis=k)
                   + I[i].astype("float32"), name="S")
    N = te.compute((8,), lambda i: (S[i] * 10.0).astype("int32") + I[i], name="N")
    wide = promote_floats([A, I, S, N])
    assert [t.dtype for t in wide] == ["float64", "int32", "float64", "int32"]
    assert [t.name for t in wide] == ["A", "I", "S", "N"]
    f = build(create_schedule([wide[2], wide[3]]), wide)
    rng = np.random.default_rng(0)
    a = rng.random((8, 5))
    i = rng.integers(0, 9, 8).astype(np.int32)
    s, n = np.empty(8), np.empty(8, np.int32)
    f(a, i, s, n)
    expect = (np.exp(a) * 0.5).sum(1) + i
    np.testing.assert_allclose(s, expect, rtol=1e-14)
    np.testing.assert_array_equal(n, (expect * 10).astype(np.int32) + i)


def test_a_long_float32_sum_is_exact_in_float64_where_the_float32_default_drifts():
    A = te.placeholder((1 << 22,), name="A")
    k = te.reduce_axis((0, 1 << 22), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
    a = np.random.default_rng(1).uniform(0.1, 1.0, 1 << 22).astype(np.float32)
    exact = a.astype(np.float64).sum()
    narrow, wide = np.zeros(1, np.float32), np.zeros(1)
    build(create_schedule(S), [A, S])(a, narrow)
    A2, S2 = promote_floats([A, S])
    build(create_schedule(S2), [A2, S2])(a.astype(np.float64), wide)
    assert abs(wide[0] - exact) <= 1e-9 * exact
    assert abs(narrow[0] - exact) > 1e-4 * exact      # what a reordered candidate is judged by
