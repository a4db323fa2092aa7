"""Scatters whose number of updates (and batch) is symbolic: ``te.scatter_add``, ``te.histogram``,
``te.embedding_backward`` and ``te.scatter_reduce`` over a domain of ``te.var`` /
``te.size_var`` extent.  One kernel is built and called with arrays of several sizes, 0
updates included where ``te.var`` allows it (the output is then its init), under the default
schedule and hand schedules (free axes split, vectorized and parallel; the domain privatized
into parallel copies); every result against ``np.add.at`` / ``np.bincount`` /
``np.maximum.at``.  The output's shape stays constant (a symbolic one is refused, see
tests/errors/test_scatter_errors.py)."""
import warnings

import numpy as np
import pytest

import einloop
from einloop import te, create_schedule

SIZES = (0, 1, 7, 37)


def ints(shape, lo, hi, seed):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype("int32")


def floats(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def build(s, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return einloop.build(s, args)


def scatter_add(rows=5, cols=3):
    n = te.var("n")
    ids = te.placeholder((n,), "int32", name="ids")
    U = te.placeholder((n, cols), name="U")
    return ids, U, te.scatter_add((rows, cols), ids, U, name="H")


def add_at(rows, ids, u):
    want = np.zeros((rows,) + u.shape[1:])
    np.add.at(want, np.clip(ids, 0, rows - 1), u.astype("float64"))
    return want


def call_scatter_add(f, n, seed, rows=5, cols=3):
    ids, u = ints(n, -2, rows + 2, seed), floats((n, cols), seed)      # some out of range
    h = np.full((rows, cols), np.nan, "float32")
    f(ids, u, h)
    np.testing.assert_allclose(h, add_at(rows, ids, u), rtol=1e-5, atol=1e-5,
                               err_msg=f"n={n}")


def test_scatter_add_with_a_symbolic_number_of_updates_default_schedule():
    ids, U, H = scatter_add()
    assert H.shape == (5, 3) and H.op.reduce_axis[0].extent is ids.shape[0]
    f = build(create_schedule(H), [ids, U, H])
    for n in SIZES:
        call_scatter_add(f, n, seed=n)


def test_scatter_add_symbolic_free_axis_vectorized_domain_privatized_in_parallel():
    ids, U, H = scatter_add(rows=7, cols=13)
    s = create_schedule(H)
    i, = s[H].op.axis
    j, = s[H].op.reduce_axis
    jo, ji = s[H].split(j, nparts=3)
    rf = s.rfactor(H, jo)
    s[rf].parallel(s[rf].op.axis[0])
    io, ii = s[H].split(s[H].op.axis[1], factor=4)
    s[H].vectorize(ii)
    f = build(s, [ids, U, H])
    for n in SIZES + (101,):
        call_scatter_add(f, n, seed=n + 1, rows=7, cols=13)


def test_scatter_add_with_an_inlined_producer_of_symbolic_extent():
    n = te.size_var("n")
    ids = te.placeholder((n,), "int32", name="ids")
    X = te.placeholder((n, 4), name="X")
    U = te.compute((n, 4), lambda j, c: X[j, c] * 2.0 + 1.0, name="U")
    H = te.scatter_add((6, 4), ids, U, name="H")
    s = create_schedule(H)
    s[U].compute_inline()
    s[H].parallel(s[H].op.axis[0])
    f = build(s, [ids, X, H])
    for n_ in (1, 9, 37):
        ids_, x = ints(n_, 0, 6, n_), floats((n_, 4), n_)
        h = np.full((6, 4), np.nan, "float32")
        f(ids_, x, h)
        want = add_at(6, ids_, x.astype("float64") * 2 + 1)
        np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weighted", [False, True])
def test_histogram_of_a_symbolic_number_of_values(weighted):
    n = te.var("n")
    X = te.placeholder((n,), "int32", name="X")
    W = te.placeholder((n,), name="W") if weighted else None
    H = te.histogram(X, 9, weights=W, name="H")
    args = [X] + ([W] if weighted else []) + [H]
    for s in (create_schedule(H), _privatized(H)):
        f = build(s, args)
        for size in SIZES + (101,):
            x, w = ints(size, -1, 11, size), floats(size, size)
            h = np.full(9, -1, H.dtype)
            f(*([x, w] if weighted else [x]), h)
            want = np.bincount(np.clip(x, 0, 8), weights=w if weighted else None, minlength=9)
            np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-5, err_msg=f"n={size}")


def _privatized(H):
    s = create_schedule(H)
    ro, _ = s[H].split(s[H].op.reduce_axis[0], nparts=2)
    rf = s.rfactor(H, ro)
    s[rf].parallel(s[rf].op.axis[0])
    return s


def test_embedding_backward_with_a_symbolic_batch_and_padding():
    b = te.size_var("b")
    ids = te.placeholder((b, 3), "int32", name="ids")
    G = te.placeholder((b, 3, 5), name="G")
    E = te.embedding_backward(ids, G, 8, padding_idx=0, name="E")
    s = create_schedule(E)
    vo, vi = s[E].split(s[E].op.axis[0], factor=4)         # d, the free axis
    s[E].vectorize(vi)
    f = build(s, [ids, G, E])
    for batch in (1, 4, 11):
        x, g = ints((batch, 3), 0, 8, batch), floats((batch, 3, 5), batch)
        e = np.full((8, 5), np.nan, "float32")
        f(x, g, e)
        keep = x != 0
        want = np.zeros((8, 5))
        np.add.at(want, x[keep], g[keep].astype("float64"))
        np.testing.assert_allclose(e, want, rtol=1e-5, atol=1e-5, err_msg=f"batch={batch}")


def test_scatter_max_over_a_symbolic_domain_skipping_out_of_range_ids():
    n = te.var("n")
    ids = te.placeholder((n,), "int32", name="ids")
    V = te.placeholder((n,), name="V")
    j = te.reduce_axis((0, n), name="j")
    M = te.scatter_reduce((6,), lambda: ((ids[j],), V[j]), te.max, axis=j,
                          where=te.all(ids[j] >= 0, ids[j] < 6), name="M")
    f = build(create_schedule(M), [ids, V, M])
    for size in SIZES:
        x, v = ints(size, -2, 8, size), floats(size, size)
        m = np.zeros(6, "float32")
        f(x, v, m)
        keep = (x >= 0) & (x < 6)
        want = np.full(6, -np.inf, "float32")
        np.maximum.at(want, x[keep], v[keep])
        np.testing.assert_array_equal(m, want, err_msg=f"n={size}")


def test_privatized_by_a_factor_split_copies_of_symbolic_count():
    """rfactor of the outer part of a split by a factor: ceil(n / 4) private copies, a number
    known only at the call."""
    ids, U, H = scatter_add()
    s = create_schedule(H)
    jo, _ = s[H].split(s[H].op.reduce_axis[0], factor=4)
    rf = s.rfactor(H, jo)
    assert isinstance(rf.shape[0], einloop.ir.expr.Expr)
    f = build(s, [ids, U, H])
    for n in SIZES + (101,):
        call_scatter_add(f, n, seed=n + 2)


def test_a_data_independent_index_over_a_symbolic_domain_is_clamped():
    """j + 2 stays inside 0..6 only while n <= 5: no size is known, so it is clamped (a
    constant domain would be checked, and refused where it surely leaves the output)."""
    n = te.var("n")
    j = te.reduce_axis((0, n), name="j")
    V = te.placeholder((n,), name="V")
    S = te.scatter_reduce((7,), lambda: ((j + 2,), V[j]), axis=j, name="S")
    f = build(create_schedule(S), [V, S])
    for size in SIZES:
        v = floats(size, size)
        out = np.full(7, np.nan, "float32")
        f(v, out)
        want = np.zeros(7)
        np.add.at(want, np.clip(np.arange(size) + 2, 0, 6), v.astype("float64"))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=f"n={size}")
