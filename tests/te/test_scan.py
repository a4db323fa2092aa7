"""``te.scan``, ``te.cumsum`` and ``te.cumprod``: recurrences along one axis.

Every kernel is checked against NumPy (a plain loop for the recurrences) on odd sizes, under the
default schedule and under hand schedules: the spatial axes split, reordered around the scan
axis, vectorized and parallel; stages computed at the scan's loops; the scan computed at a
consumer's loop where that runs all its steps.  Misuses are in tests/errors/test_scan_errors.py.
"""
import warnings

import numpy as np
import pytest

from einloop import te, create_schedule, lower
from einloop.errors import VectorizeWarning
from einloop.ir.stmt import ForKind
from einloop.te.dag import ComputeDAG

from oracle import check, random_inputs, run

T, M = 37, 101


def cumsum_scan(T=T, M=M, name="csum"):
    """The task's example: a cumulative sum down the rows of X, through te.scan."""
    X = te.placeholder((T, M), name="X")
    state = te.scan_state((T, M), name="state")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    update = te.compute((T, M), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, te.scan(init, update, state, inputs=[X], name=name)


def loops_of(func):
    """(name, kind) of every loop of a lowered function, outermost first."""
    from einloop.ir.stmt import For
    from einloop.ir.visit import walk_stmt
    return [(s.var.name, s.kind) for s in walk_stmt(func.body) if isinstance(s, For)]


# te.scan ------------------------------------------------------------------------------------------

def test_cumsum_by_scan_default_schedule():
    X, C = cumsum_scan()
    assert C.shape == (T, M) and C.dtype == "float32"
    s = create_schedule(C)
    assert [st.name for st in s.stages] == ["X", "init", "csum"]
    assert s[C].scan_axis.name == "t" and [iv.name for iv in s[C].spatial_axes] == ["i"]
    check(s, [X], [C], lambda x: [np.cumsum(x, 0)])


def test_rows_split_vectorized_parallel_around_the_serial_scan_loop():
    X, C = cumsum_scan()
    s = create_schedule(C)
    t, i = s[C].op.axis
    io, ii = s[C].split(i, factor=8)
    s[C].reorder(io, t, ii)
    s[C].parallel(io)
    s[C].vectorize(ii)
    f = lower(s, [X, C])
    kinds = dict(loops_of(f))
    assert kinds["i.outer"] is ForKind.PARALLEL and kinds["i.inner"] is ForKind.VECTORIZED
    assert all(k is ForKind.SERIAL for n, k in loops_of(f) if n.startswith("t"))
    check(s, [X], [C], lambda x: [np.cumsum(x, 0)])


def test_scan_loop_innermost_and_unrolled():
    """For each spatial point the steps run in order wherever the scan loop is."""
    X, C = cumsum_scan(T=7)
    s = create_schedule(C)
    t, i = s[C].op.axis
    s[C].reorder(i, t)
    s[C].parallel(i)
    s[C].unroll(t)
    check(s, [X], [C], lambda x: [np.cumsum(x, 0)])


def test_three_dimensional_state_with_fused_spatial_axes():
    X = te.placeholder((9, 5, 13), name="X")
    S = te.scan_state((9, 5, 13), name="S")
    init = te.compute((1, 5, 13), lambda _, i, j: X[0, i, j] * 2.0, name="init")
    upd = te.compute((9, 5, 13), lambda t, i, j: S[t - 1, i, j] * 0.5 + X[t, i, j], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    s = create_schedule(Y)
    t, i, j = s[Y].op.axis
    ij = s[Y].fuse(i, j)
    o, n = s[Y].split(ij, factor=4)
    s[Y].reorder(o, t, n)
    s[Y].parallel(o)
    s[Y].vectorize(n)

    def ref(x):
        y = np.empty_like(x)
        y[0] = 2 * x[0]
        for k in range(1, 9):
            y[k] = 0.5 * y[k - 1] + x[k]
        return [y]
    check(s, [X], [Y], ref)


def fib_like(T=T, M=M):
    """y[t] = y[t-1] + 0.5 * y[t-2] + X[t]: an init of two rows, reads two steps back."""
    X = te.placeholder((T, M), name="X")
    S = te.scan_state((T, M), name="S")
    init = te.compute((2, M), lambda r, i: X[r, i], name="init")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + 0.5 * S[t - 2, i] + X[t, i], name="upd")
    return X, te.scan(init, upd, S, name="Y")


def fib_ref(x):
    y = x.copy()
    for k in range(2, len(x)):
        y[k] = y[k - 1] + 0.5 * y[k - 2] + x[k]
    return [y]


def test_two_init_rows_and_a_read_two_steps_back():
    X, Y = fib_like(T=23)
    check(create_schedule(Y), [X], [Y], fib_ref)
    s = create_schedule(Y)
    t, i = s[Y].op.axis
    io, ii = s[Y].split(i, factor=16)
    s[Y].reorder(io, t, ii)
    s[Y].vectorize(ii)
    check(s, [X], [Y], fib_ref)


def test_update_with_selects_calls_and_a_reduction_over_another_input():
    X = te.placeholder((T, M), name="X")
    W = te.placeholder((T, M, 3), name="W")
    S = te.scan_state((T, M), name="S")
    k = te.reduce_axis((0, 3), name="k")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: te.if_then_else(
        X[t, i] > 0, S[t - 1, i] * 0.9, te.tanh(S[t - 1, i]) + te.exp(X[t, i]))
        + te.sum(W[t, i, k], axis=k), name="upd")
    Y = te.scan(init, upd, S, name="Y")
    assert "upd.sum0" in [op.name for op in ComputeDAG(Y).ops]

    def ref(x, w):
        y = x.copy()
        ws = w.sum(2)
        for t in range(1, T):
            y[t] = np.where(x[t] > 0, y[t - 1] * 0.9, np.tanh(y[t - 1]) + np.exp(x[t])) + ws[t]
        return [y]
    check(create_schedule(Y), [X, W], [Y], ref)


def test_stages_between_the_state_and_the_update_are_inlined_into_the_step():
    X = te.placeholder((T, M), name="X")
    S = te.scan_state((T, M), name="S")
    half = te.compute((T, M), lambda t, i: S[t - 1, i] * 0.5, name="half")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: half[t, i] + X[t, i], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    assert "half" not in [op.name for op in ComputeDAG(Y).ops]

    def ref(x):
        y = x.copy()
        for t in range(1, T):
            y[t] = 0.5 * y[t - 1] + x[t]
        return [y]
    check(create_schedule(Y), [X], [Y], ref)


def test_placeholder_state_as_tvm_writes_it():
    """TVM's form: the state a te.placeholder, the update reading it at t - 1 unguarded (held
    by te.compute until te.scan accepts it on its state), with a hand schedule."""
    X = te.placeholder((T, M), name="X")
    state = te.placeholder((T, M), name="state")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    update = te.compute((T, M), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    Y = te.scan(init, update, state, inputs=[X], name="Y")
    s = create_schedule(Y)
    io, ii = s[Y].split(s[Y].spatial_axes[0], factor=8)
    s[Y].reorder(io, s[Y].scan_axis, ii)
    s[Y].parallel(io)
    s[Y].vectorize(ii)
    check(s, [X], [Y], lambda x: [np.cumsum(x, 0)])


def test_placeholder_state_with_a_guarded_read_works_as_in_tvm():
    """te.placeholder works as the state where the update can be declared: its read of the
    step before guarded (te.compute rejects it unguarded, and says to use te.scan_state)."""
    X = te.placeholder((T, M), name="X")
    S = te.placeholder((T, M), name="S")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: te.if_then_else(t >= 1, S[t - 1, i], 0.0) + X[t, i],
                     name="upd")
    Y = te.scan(init, upd, S, name="Y")
    check(create_schedule(Y), [X], [Y], lambda x: [np.cumsum(x, 0)])


def test_symbolic_extents_with_a_placeholder_state_as_tvm_writes_it():
    """Under symbolic extents te.compute clamps the read of the step before; te.scan sees
    through the clamp.  One kernel serves two sizes."""
    n, m = te.size_var("n"), te.size_var("m")
    X = te.placeholder((n, m), name="X")
    S = te.placeholder((n, m), name="S")
    init = te.compute((1, m), lambda _, i: X[0, i], name="init")
    upd = te.compute((n, m), lambda t, i: S[t - 1, i] + X[t, i], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    from einloop import build
    f = build(create_schedule(Y), [X, Y])
    for shape in ((5, 7), (11, 3)):
        x = np.random.default_rng(1).uniform(-1, 1, shape).astype("float32")
        y = np.full(shape, np.nan, "float32")
        f(x, y)
        np.testing.assert_allclose(y, np.cumsum(x, 0), rtol=2e-5, atol=2e-5)


def test_symbolic_extents_with_a_scan_state_and_a_blocked_schedule():
    """A scan_state under symbolic extents: the step reads its own spatial point (no clamp
    that would make it look like a stencil), so the spatial loop may run outside the scan."""
    n, m = te.size_var("n"), te.size_var("m")
    X = te.placeholder((n, m), name="X")
    S = te.scan_state((n, m), name="S")
    init = te.compute((1, m), lambda _, i: X[0, i], name="init")
    upd = te.compute((n, m), lambda t, i: S[t - 1, i] * 0.5 + X[t, i], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    s = create_schedule(Y)
    t, i = s[Y].op.axis
    io, ii = s[Y].split(i, factor=8)
    s[Y].reorder(io, t, ii)
    s[Y].parallel(io)
    s[Y].vectorize(ii)
    from einloop import build
    f = build(s, [X, Y])
    for shape in ((7, 19), (3, 8)):
        x = np.random.default_rng(2).uniform(-1, 1, shape).astype("float32")
        want = x.copy()
        for k in range(1, shape[0]):
            want[k] = 0.5 * want[k - 1] + x[k]
        y = np.full(shape, np.nan, "float32")
        f(x, y)
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5)


def test_placeholder_init_and_symbolic_exclusive_cumsum():
    X = te.placeholder((T, M), name="X")
    X0 = te.placeholder((1, M), name="X0")
    S = te.scan_state((T, M), name="S")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + X[t, i], name="upd")
    Y = te.scan(X0, upd, S, name="Y")
    check(create_schedule(Y), [X, X0], [Y],
          lambda x, x0: [np.cumsum(np.concatenate([x0, x[1:]]), 0)])
    n = te.size_var("n")
    V = te.placeholder((n, 3), name="V")
    E = te.cumsum(V, axis=0, exclusive=True)
    from einloop import build
    f = build(create_schedule(E), [V, E])
    v = np.random.default_rng(3).uniform(-1, 1, (6, 3)).astype("float32")
    e = np.full_like(v, np.nan)
    f(v, e)
    np.testing.assert_allclose(e, np.cumsum(v, 0) - v, rtol=1e-5, atol=1e-6)


def test_cumsum_of_a_vector():
    X = te.placeholder((10,), name="X")
    C = te.cumsum(X)
    check(create_schedule(C), [X], [C], lambda x: [np.cumsum(x)])


def test_init_of_every_row_needs_no_update_step():
    X = te.placeholder((3, 4), name="X")
    S = te.scan_state((3, 4), name="S")
    init = te.compute((3, 4), lambda r, i: X[r, i] + 1.0, name="init")
    upd = te.compute((3, 4), lambda t, i: S[t - 1, i], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    check(create_schedule(Y), [X], [Y], lambda x: [x + 1])


# several states -----------------------------------------------------------------------------------

def coupled(T=T, M=M):
    X = te.placeholder((T, M), name="X")
    s0, s1 = te.scan_state((T, M), name="s0"), te.scan_state((T, M), name="s1")
    i0 = te.compute((1, M), lambda _, i: X[0, i], name="i0")
    i1 = te.compute((1, M), lambda _, i: X[0, i] * 2.0, name="i1")
    u0 = te.compute((T, M), lambda t, i: s1[t - 1, i] * 0.5 + X[t, i], name="u0")
    u1 = te.compute((T, M), lambda t, i: s0[t - 1, i] - s1[t - 1, i] * 0.25, name="u1")
    return X, te.scan([i0, i1], [u0, u1], [s0, s1], name="sc")


def coupled_ref(x):
    a, b = np.empty_like(x), np.empty_like(x)
    a[0], b[0] = x[0], 2 * x[0]
    for t in range(1, len(x)):
        a[t] = 0.5 * b[t - 1] + x[t]
        b[t] = a[t - 1] - 0.25 * b[t - 1]
    return [a, b]


def test_two_coupled_states_in_one_loop_nest():
    X, outs = coupled()
    assert isinstance(outs, list) and [t.name for t in outs] == ["sc.v0", "sc.v1"]
    a, b = outs
    s = create_schedule([a, b])
    check(s, [X], [a, b], coupled_ref)
    t, i = s[a].op.axis
    io, ii = s[a].split(i, factor=8)
    s[a].reorder(io, t, ii)
    s[a].parallel(io)
    s[a].vectorize(ii)
    f = lower(s, [X, a, b])
    assert sum(1 for n, _ in loops_of(f) if n.startswith("t")) >= 1
    check(s, [X], [a, b], coupled_ref)


def test_a_stage_only_the_first_state_reads_computed_at_its_loops():
    X, (a, b) = coupled()
    s = create_schedule([a, b])
    t, i = s[a].op.axis
    io, ii = s[a].split(i, factor=16)
    s[a].reorder(io, t, ii)
    s.stage_named("i0").compute_at(s[a], io)
    check(s, [X], [a, b], coupled_ref)


def test_one_state_of_two_as_the_only_output_and_a_consumer_of_the_other():
    X, (a, b) = coupled()
    out = te.compute((T, M), lambda t, i: b[t, i] * 3.0, name="out")
    s = create_schedule(out)
    check(s, [X], [out], lambda x: [coupled_ref(x)[1] * 3])


# with neighbours ----------------------------------------------------------------------------------

def scan_between_stages():
    """X -> X2 (a transform read by the update only) -> scan -> out (reads the scan)."""
    X = te.placeholder((T, M), name="X")
    X2 = te.compute((T, M), lambda t, i: X[t, i] * 3.0, name="X2")
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M), lambda _, i: X2[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + X2[t, i], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    out = te.compute((T, M), lambda t, i: Y[t, i] * 2.0, name="out")
    return X, X2, init, Y, out


def ref_between(x):
    return [np.cumsum(3 * x, 0) * 2]


def test_scan_feeds_a_later_stage_and_reads_an_earlier_one():
    X, X2, init, Y, out = scan_between_stages()
    s = create_schedule(out)
    check(s, [X], [out], ref_between)
    both = check(create_schedule([Y, out]), [X], [Y, out],
                 lambda x: [np.cumsum(3 * x, 0), np.cumsum(3 * x, 0) * 2])
    assert len(both) == 2


@pytest.mark.parametrize("where", ["t", "i.inner", "i.outer"])
def test_producers_computed_at_the_scans_loops(where):
    X, X2, init, Y, out = scan_between_stages()
    s = create_schedule(out)
    t, i = s[Y].op.axis
    io, ii = s[Y].split(i, factor=8)
    s[Y].reorder(io, t, ii)
    loop = {"t": t, "i.inner": ii, "i.outer": io}[where]
    s[X2].compute_at(s[Y], loop)
    s[init].compute_at(s[Y], loop)
    check(s, [X], [out], ref_between)


def test_inlined_producers_and_init():
    X, X2, init, Y, out = scan_between_stages()
    s = create_schedule(out)
    s[X2].compute_inline()
    s[init].compute_inline()
    check(s, [X], [out], ref_between)


def test_copies_read_by_the_scan_and_of_the_scan_for_its_consumer():
    X, X2, init, Y, out = scan_between_stages()
    s = create_schedule(out)
    s.cache_read(X2, "local", [s[Y]])
    s.cache_read(Y, "local", [s[out]])
    t, i = s[Y].op.axis
    io, ii = s[Y].split(i, factor=8)
    s[Y].reorder(io, t, ii)
    s[Y].vectorize(ii)
    check(s, [X], [out], ref_between)


def test_scan_computed_at_a_consumer_loop_outside_its_steps():
    """out[i, t] = Y[t, i] with loops (i, t): at out.i the scan's region is every step of
    column i, so it runs there, one column at a time."""
    X, Y = cumsum_scan()
    out = te.compute((M, T), lambda i, t: Y[t, i] + 1.0, name="out")
    s = create_schedule(out)
    i, t = s[out].op.axis
    s[Y].compute_at(s[out], i)
    f = lower(s, [X, out])
    assert "allocate csum: float32[37 * 1]" in str(f)      # one column of every step
    check(s, [X], [out], lambda x: [np.cumsum(x, 0).T + 1])


def test_stencil_recurrence_reads_neighbours_of_the_step_before():
    """y[t, i] = (y[t-1, i-1] + y[t-1, i] + y[t-1, i+1]) / 3 at interior points: the scan
    loop outermost, the spatial loop inside it split, parallel and vectorized."""
    X = te.placeholder((T, M), name="X")
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: te.if_then_else(
        te.all(i > 0, i < M - 1), (S[t - 1, i - 1] + S[t - 1, i] + S[t - 1, i + 1]) / 3.0,
        X[t, i]), name="upd")
    Y = te.scan(init, upd, S, name="Y")

    def ref(x):
        y = x.copy()
        for k in range(1, T):
            y[k, 1:-1] = (y[k - 1, :-2] + y[k - 1, 1:-1] + y[k - 1, 2:]) / 3
        return [y]
    s = create_schedule(Y)
    t, i = s[Y].op.axis
    io, ii = s[Y].split(i, factor=8)
    s[Y].parallel(io)
    s[Y].vectorize(ii)
    check(s, [X], [Y], ref)


def test_first_order_iir_filter_against_a_numpy_loop():
    """y[t] = a * y[t - 1] + x[t], per channel: the scan loop inside a parallel loop over
    channels (scan axis not outermost)."""
    n, ch, a = 101, 6, 0.75
    X = te.placeholder((ch, n), name="x")
    Y = _iir_along_axis1(X, a)
    s = create_schedule(Y)
    c, t = s[Y].op.axis
    s[Y].parallel(c)
    x = random_inputs([X], seed=3)[0]
    want = np.empty_like(x)
    for k in range(ch):
        acc = np.float32(0)
        for j in range(n):
            acc = np.float32(a) * acc + x[k, j]
            want[k, j] = acc
    got, = run(s, [X], [Y], [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _iir_along_axis1(X, a):
    """The IIR filter along axis 1 of X: transposed in and out of a te.scan along axis 0 (the
    transposes inlined, so the scan's loops run on X's layout)."""
    ch, n = X.shape
    Xt = te.compute((n, ch), lambda t, c: X[c, t], name="xt")
    S = te.scan_state((n, ch), name="S")
    init = te.compute((1, ch), lambda _, c: Xt[0, c], name="init")
    upd = te.compute((n, ch), lambda t, c: a * S[t - 1, c] + Xt[t, c], name="upd")
    Yt = te.scan(init, upd, S, name="yt")
    return te.compute((ch, n), lambda c, t: Yt[t, c], name="y")


def test_iir_filter_one_channel():
    n, a = 37, -0.5
    X = te.placeholder((n, 1), name="x")
    S = te.scan_state((n, 1), name="S")
    init = te.compute((1, 1), lambda _, c: X[0, c], name="init")
    upd = te.compute((n, 1), lambda t, c: a * S[t - 1, c] + X[t, c], name="upd")
    Y = te.scan(init, upd, S, name="y")
    x = random_inputs([X], seed=4)[0]
    want = x.copy()
    for j in range(1, n):
        want[j] = np.float32(a) * want[j - 1] + x[j]
    got, = run(create_schedule(Y), [X], [Y], [x])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# cumsum and cumprod -------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
def test_cumsum_any_axis_keeps_the_layout(axis, exclusive):
    X = te.placeholder((5, 7, 9), name="X")
    C = te.cumsum(X, axis=axis, exclusive=exclusive)
    assert C.shape == X.shape and C.dtype == "float32"

    def ref(x):
        c = np.cumsum(x, axis)
        return [c - x if exclusive else c]
    check(create_schedule(C), [X], [C], ref)


@pytest.mark.parametrize("axis", [0, 1])
def test_cumprod_float_and_exclusive(axis):
    X = te.placeholder((13, 11), name="X")
    C = te.cumprod(X, axis=axis)
    E = te.cumprod(X, axis=axis, exclusive=True)
    s = create_schedule([C, E])

    def ref(x):
        c = np.cumprod(x, axis)
        ones = np.ones_like(np.take(x, [0], axis))
        e = np.concatenate([ones, np.delete(c, -1, axis)], axis)
        return [c, e]
    arrays = [np.random.default_rng(5).uniform(0.9, 1.1, (13, 11)).astype("float32")]
    got = run(s, [X], [C, E], arrays)
    for g, w in zip(got, ref(*arrays)):
        np.testing.assert_allclose(g, w, rtol=1e-5)


@pytest.mark.parametrize("fn", [te.cumsum, te.cumprod], ids=["cumsum", "cumprod"])
def test_integer_dtype_follows_numpy(fn):
    X = te.placeholder((6, 9), name="X", dtype="int32")
    C = fn(X, axis=1)
    ref = np.cumsum if fn is te.cumsum else np.cumprod
    x = np.random.default_rng(6).integers(-3, 4, (6, 9)).astype("int32")
    assert C.dtype == ref(x, 1).dtype.name == "int64"
    got, = run(create_schedule(C), [X], [C], [x])
    np.testing.assert_array_equal(got, ref(x, 1))
    C32 = fn(X, axis=0, dtype="int32")
    got, = run(create_schedule(C32), [X], [C32], [x])
    np.testing.assert_array_equal(got, ref(x, 0, dtype="int32"))


def test_cumsum_along_rows_natural_schedule():
    """The schedule the auto-scheduler's rule gives a row scan: blocks of columns in parallel,
    the scan loop serial inside each, the columns of a block vectorized."""
    X = te.placeholder((T, M), name="X")
    C = te.cumsum(X, axis=0)
    s = create_schedule(C)
    t, i = s[C].op.axis
    io, ii = s[C].split(i, factor=16)
    s[C].reorder(io, t, ii)
    s[C].parallel(io)
    s[C].vectorize(ii)
    with warnings.catch_warnings():
        warnings.simplefilter("error", VectorizeWarning)
        check(s, [X], [C], lambda x: [np.cumsum(x, 0)])


def test_cumsum_along_columns_parallel_over_rows():
    X = te.placeholder((T, M), name="X")
    C = te.cumsum(X, axis=1)
    s = create_schedule(C)
    r, t = s[C].op.axis
    assert s[C].scan_axis is t
    s[C].parallel(r)
    check(s, [X], [C], lambda x: [np.cumsum(x, 1)])


# gradients ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
def test_gradient_of_cumsum_is_the_reverse_cumsum_of_the_head(axis, exclusive):
    """d/dX sum(cumsum(X) * W) = W summed from each point to the end of the axis."""
    X = te.placeholder((5, 7), name="X")
    W = te.placeholder((5, 7), name="W")
    C = te.cumsum(X, axis=axis, exclusive=exclusive)
    L = te.compute((5, 7), lambda i, j: C[i, j] * W[i, j], name="L")
    (g,) = te.gradient(L, [X])
    (ones,) = te.gradient(C, [X])                  # the head of ones: no head tensor

    def ref(w):
        rev = np.flip(np.cumsum(np.flip(w, axis), axis), axis)
        return rev - w if exclusive else rev
    check(create_schedule(g), [W], [g], lambda w: [ref(w)])
    got, = run(create_schedule(ones), [], [ones], [])
    np.testing.assert_allclose(got, ref(np.ones((5, 7), "float32")))


def test_cut_declares_a_scan_again_on_a_materialized_input():
    """te.partition.cut (the torch backward's kernels) reads a stage the scan reads as an input:
    the scan is declared again, reading it and its own new buffer."""
    from einloop.te.partition import cut
    X = te.placeholder((T, M), name="X")
    X2 = te.compute((T, M), lambda t, i: te.exp(X[t, i] * 0.1), name="X2")
    C = te.cumsum(X2, axis=0)
    (C2,), stands_for = cut([C], [X2])
    (P,) = stands_for
    assert C2.op is not C.op and C2.op.cumulative.data.op is P
    x2 = np.random.default_rng(9).uniform(0, 1, (T, M)).astype("float32")
    got, = run(create_schedule(C2), [P.output()], [C2], [x2])
    np.testing.assert_allclose(got, np.cumsum(x2, 0), rtol=1e-5, atol=1e-5)


# the DAG ------------------------------------------------------------------------------------------

def test_dag_orders_a_scan_after_its_inputs_and_never_inlines_it():
    X, X2, init, Y, out = scan_between_stages()
    dag = ComputeDAG(out)
    assert [op.name for op in dag.ops] == ["X", "X2", "init", "Y", "out"]
    assert dag.consumers(Y) == (out.op,) and Y.op not in dag.producers(Y)
    assert not dag.is_inlinable(Y) and dag.is_inlinable(X2)
    assert "scan" in dag.kinds(Y) and "scan" not in dag.kinds(X2)
    assert dag.flop_count(Y) == T * M
    _, Y2 = cumsum_scan(name="other")
    assert ComputeDAG(Y2).structural_hash() == ComputeDAG(cumsum_scan()[1]).structural_hash()
    assert ComputeDAG(Y2).structural_hash() != ComputeDAG(fib_like()[1]).structural_hash()


def test_dag_of_two_states_orders_the_second_after_the_first():
    X, (a, b) = coupled()
    dag = ComputeDAG([a, b])
    assert [op.name for op in dag.ops] == ["X", "i0", "i1", "sc.v0", "sc.v1"]
    # the second state reads the first (whose loops compute it) and its own init, not itself
    assert [op.name for op in dag.producers(b)] == ["sc.v0", "i1"] and dag.consumers(b) == ()
    assert set(dag.producers(a)) == {X.op, dag.ops[1], dag.ops[2]}


# random schedules ---------------------------------------------------------------------------------

def _stencil(T, M):
    X = te.placeholder((T, M), name="X")
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M), lambda _, i: X[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: te.if_then_else(
        i > 0, S[t - 1, i - 1], S[t - 1, i]) * 0.5 + X[t, i], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    out = te.compute((T, M), lambda t, i: Y[t, i] + 1.0, name="out")
    return [X], [out]


def _random_operator(d):
    from hypothesis import strategies as st
    T, M = d.draw(st.integers(1, 9)), d.draw(st.integers(1, 12))
    kind = d.draw(st.sampled_from(["between", "coupled", "stencil", "columns"]))
    if kind == "between":
        X, X2, init, Y, out = scan_between_stages_of(max(T, 2), M)
        return [X], [out]
    if kind == "coupled":
        X, outs = coupled(max(T, 2), M)
        return [X], outs
    if kind == "stencil":
        return _stencil(max(T, 2), M)
    X = te.placeholder((T, M), name="X")
    C = te.cumsum(te.compute((T, M), lambda i, j: X[i, j] * 2.0, name="X2"), axis=1)
    return [X], [te.compute((T, M), lambda i, j: C[i, j] - 1.0, name="out")]


def scan_between_stages_of(T, M):
    X = te.placeholder((T, M), name="X")
    X2 = te.compute((T, M), lambda t, i: X[t, i] * 3.0, name="X2")
    S = te.scan_state((T, M), name="S")
    init = te.compute((1, M), lambda _, i: X2[0, i], name="init")
    upd = te.compute((T, M), lambda t, i: S[t - 1, i] + X2[t, i], name="upd")
    Y = te.scan(init, upd, S, name="Y")
    out = te.compute((T, M), lambda t, i: Y[t, i] * 2.0, name="out")
    return X, X2, init, Y, out


def test_random_schedules_of_scans_compute_what_the_default_does():
    """The property test of tests/test_property_schedules.py on operators with scans: any
    sequence of steps is refused (a ScheduleError, the schedule unchanged) or computes what the
    default schedule computes."""
    from hypothesis import HealthCheck, given, settings, strategies as st
    from einloop.errors import ScheduleError
    from test_property_schedules import _random_step

    @settings(max_examples=4, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def prop(d):
        inputs, outputs = _random_operator(d)
        s = create_schedule(outputs)
        for _ in range(d.draw(st.integers(1, 6))):
            try:
                _random_step(d, s, outputs)
            except ScheduleError:
                pass
        arrays = random_inputs(inputs, positive=True)
        try:
            got = run(s, inputs, outputs, arrays)
        except ScheduleError:
            return
        want = run(create_schedule(outputs), inputs, outputs, arrays)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"steps: {s.steps}")
    prop()


def test_scan_of_a_scan_with_symbolic_rows():
    """cumsum along columns of a cumsum down the rows: a scan reads another as an input."""
    n = te.size_var("n")
    X = te.placeholder((n, 24), name="X")
    C = te.cumsum(te.cumsum(X, axis=0, name="c1"), axis=1, name="c2")
    assert [op.name for op in ComputeDAG(C).ops] == ["X", "c1", "c2"]
    from einloop import build
    s = create_schedule(C)
    s[C].parallel(s[C].op.axis[0])
    f = build(s, [X, C])
    x = np.random.default_rng(8).uniform(-1, 1, (9, 24)).astype("float32")
    y = np.full_like(x, np.nan)
    f(x, y)
    np.testing.assert_allclose(y, np.cumsum(np.cumsum(x, 0), 1), rtol=1e-4, atol=1e-4)
