"""te.scatter_reduce and the operators on it (scatter_add, histogram, embedding_backward):
every result against NumPy (``np.bincount``, ``np.add.at``, ``np.maximum.at``), under the
default schedule and hand schedules (split, reorder, vectorize and parallel free axes,
privatized parallel domains, producers inlined or computed at a scatter loop)."""
import numpy as np
import pytest

import einloop
from einloop import te, create_schedule, lower
from einloop.schedule.replay import replay
from einloop.te.dag import ComputeDAG

from oracle import run

RNG = np.random.default_rng(7)


def ints(shape, lo, hi, dtype="int32", seed=0):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def floats(shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def add_at(shape, ids, grad, axis=0):
    """NumPy's scatter-add: zeros, then ``np.add.at`` along *axis* (in float64, then cast)."""
    ref = np.zeros(shape, "float64")
    moved = np.moveaxis(ref, axis, 0)
    np.add.at(moved, ids, np.moveaxis(grad.astype("float64"), axis, 0))
    return ref.astype(grad.dtype)


# histogram --------------------------------------------------------------------------------------

def histogram(n=1001, bins=37):
    X = te.placeholder((n,), "int32", name="X")
    return X, te.histogram(X, bins, name="H")


def test_histogram_default_schedule_is_bincount():
    X, H = histogram()
    x = ints(1001, 0, 37)
    (h,) = run(create_schedule(H), [X], [H], [x])
    assert h.dtype == np.int32
    np.testing.assert_array_equal(h, np.bincount(x, minlength=37))


def test_histogram_clamps_values_outside_the_bins_into_the_edge_bins():
    X, H = histogram(n=101, bins=7)
    x = ints(101, -20, 30)
    (h,) = run(create_schedule(H), [X], [H], [x])
    np.testing.assert_array_equal(h, np.bincount(np.clip(x, 0, 6), minlength=7))


@pytest.mark.parametrize("nparts", [1, 3, 8])
def test_histogram_of_100k_values_privatized_in_parallel_is_exact(nparts):
    """The domain split into nparts private copies (a ragged split for 3), each copy's loop
    parallel, the copies combined in parallel over the bins: exactly np.bincount."""
    n, bins = 100_003, 256
    X, H = histogram(n, bins)
    s = create_schedule(H)
    ro, ri = s[H].split(s[H].op.reduce_axis[0], nparts=nparts)
    HF = s.rfactor(H, ro)
    assert HF.name == "H.rf" and HF.shape == (nparts, bins)
    assert [st.name for st in s.stages] == ["X", "H.rf", "H"]
    s[HF].parallel(s[HF].op.axis[0])
    s[H].parallel(s[H].op.axis[0])
    x = ints(n, 0, bins, seed=nparts)
    (h,) = run(s, [X], [H], [x])
    np.testing.assert_array_equal(h, np.bincount(x, minlength=bins))


def test_privatizing_the_inner_part_of_a_split_domain():
    """rfactor of the inner loop: copy ri gets the elements ri, ri + F, ri + 2F, ..."""
    X, H = histogram(n=1001, bins=37)
    s = create_schedule(H)
    ro, ri = s[H].split(s[H].op.reduce_axis[0], factor=16)
    HF = s.rfactor(H, ri)
    assert HF.shape == (16, 37)
    s[HF].parallel(s[HF].op.axis[0])
    x = ints(1001, 0, 37, seed=3)
    (h,) = run(s, [X], [H], [x])
    np.testing.assert_array_equal(h, np.bincount(x, minlength=37))


def test_histogram_of_a_2d_image_with_weights():
    X = te.placeholder((13, 29), "uint8", name="X")
    W = te.placeholder((13, 29), "float32", name="W")
    H = te.histogram(X, 256, weights=W, name="H")
    assert H.dtype == "float32" and len(H.op.reduce_axis) == 2
    x, w = ints((13, 29), 0, 256, "uint8"), floats((13, 29))
    (h,) = run(create_schedule(H), [X, W], [H], [x, w])
    want = np.bincount(x.ravel(), weights=w.ravel().astype("float64"), minlength=256)
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["fused", "second_axis"])
def test_privatizing_a_2d_domain(how):
    """The domain of an image's histogram fused and split into 5 copies, or its second axis
    privatized as is (one copy per column); then a histogram of that histogram."""
    X = te.placeholder((13, 29), "uint8", name="X")
    H = te.histogram(X, 256, name="H")
    H2 = te.histogram(H, 5, name="H2")
    s = create_schedule([H, H2])
    r0, r1 = s[H].op.reduce_axis
    if how == "fused":
        outer, _ = s[H].split(s[H].fuse(r0, r1), nparts=5)
        HF = s.rfactor(H, outer)
    else:
        HF = s.rfactor(H, r1)
    s[HF].parallel(s[HF].op.axis[0])
    x = ints((13, 29), 0, 256, "uint8", seed=8)
    h, h2 = run(s, [X], [H, H2], [x])
    want = np.bincount(x.ravel(), minlength=256)
    np.testing.assert_array_equal(h, want)
    np.testing.assert_array_equal(h2, np.bincount(np.clip(want, 0, 4), minlength=5))


# scatter_add and embedding backward ------------------------------------------------------------

def scatter_rows(V=11, N=53, D=19, axis=0):
    I = te.placeholder((N,), "int64", name="I")
    shape = (V, D) if axis == 0 else (D, V)
    U = te.placeholder((N, D) if axis == 0 else (D, N), name="U")
    return I, U, te.scatter_add(shape, I, U, axis=axis, name="G")


@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_add_with_repeated_indices_is_add_at(axis):
    I, U, G = scatter_rows(axis=axis)
    ids, u = ints(53, 0, 11, "int64"), floats(U.shape)
    assert len(set(ids.tolist())) < len(ids)            # repeated ids
    (g,) = run(create_schedule(G), [I, U], [G], [ids, u])
    np.testing.assert_allclose(g, add_at(G.shape, ids, u, axis), rtol=1e-5, atol=1e-5)


def _vector_rows(s, G):
    """Domain outermost, the free axis split and vectorized inside it."""
    j, d = s[G].op.reduce_axis[0], s[G].op.axis[0]
    s[G].reorder(j, d)
    do, di = s[G].split(d, factor=8)
    s[G].vectorize(di)


def _parallel_free(s, G):
    """The free axis split, its outer part parallel, the domain inside."""
    do, di = s[G].split(s[G].op.axis[0], nparts=3)
    s[G].parallel(do)
    s[G].unroll(di)


def _privatized(s, G):
    """The domain privatized into 4 copies computed in parallel, rows vectorized."""
    jo, ji = s[G].split(s[G].op.reduce_axis[0], nparts=4)
    GF = s.rfactor(G, jo)
    p, d, j = s[GF].leaf_iter_vars
    s[GF].reorder(p, j, d)
    s[GF].parallel(p)
    s[GF].vectorize(d)
    v, d2, k = s[G].leaf_iter_vars
    s[G].parallel(v)
    s[G].reorder(v, k, d2)
    s[G].vectorize(d2)


@pytest.mark.parametrize("schedule", [_vector_rows, _parallel_free, _privatized],
                         ids=lambda f: f.__name__.strip("_"))
def test_embedding_backward_under_hand_schedules(schedule):
    V, L, D = 11, 53, 19
    ids = te.placeholder((L,), "int32", name="ids")
    dy = te.placeholder((L, D), name="dy")
    G = te.embedding_backward(ids, dy, V, name="G")
    s = create_schedule(G)
    schedule(s, G)
    i, g = ints(L, 0, V, seed=1), floats((L, D), seed=2)
    (out,) = run(s, [ids, dy], [G], [i, g])
    np.testing.assert_allclose(out, add_at((V, D), i, g), rtol=1e-5, atol=1e-5)


def test_embedding_backward_of_a_batch_of_sequences():
    ids = te.placeholder((3, 17), "int64", name="ids")
    dy = te.placeholder((3, 17, 5), name="dy")
    G = te.embedding_backward(ids, dy, 7, name="G")
    assert G.shape == (7, 5) and [iv.name for iv in G.op.reduce_axis] == ["b0", "b1"]
    i, g = ints((3, 17), 0, 7, "int64"), floats((3, 17, 5))
    (out,) = run(create_schedule(G), [ids, dy], [G], [i, g])
    np.testing.assert_allclose(out, add_at((7, 5), i.ravel(), g.reshape(-1, 5)),
                               rtol=1e-5, atol=1e-5)


def test_embedding_backward_leaves_the_padding_row_zero():
    ids = te.placeholder((41,), "int64", name="ids")
    dy = te.placeholder((41, 6), name="dy")
    G = te.embedding_backward(ids, dy, 8, padding_idx=3, name="G")
    i, g = ints(41, 0, 8, "int64", seed=3), floats((41, 6), seed=4)
    assert (i == 3).any()
    (out,) = run(create_schedule(G), [ids, dy], [G], [i, g])
    keep = i != 3
    np.testing.assert_allclose(out, add_at((8, 6), i[keep], g[keep]), rtol=1e-5, atol=1e-5)
    assert not out[3].any()


# the general form ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,reducer,ufunc", [("max", te.max, np.maximum),
                                                 ("min", te.min, np.minimum)])
def test_scatter_max_and_min_start_from_the_identity(name, reducer, ufunc):
    X = te.placeholder((101,), name="X")
    K = te.placeholder((101,), "int32", name="K")
    r = te.reduce_axis((0, 101), name="r")
    M = te.scatter_reduce((9,), lambda: ((K[r],), X[r]), reducer, axis=r, name="M")
    k, x = ints(101, 0, 8), floats(101)          # bin 8 gets nothing: the identity
    (m,) = run(create_schedule(M), [X, K], [M], [x, k])
    want = np.full(9, -np.inf if name == "max" else np.inf, "float32")
    ufunc.at(want, k, x)
    np.testing.assert_array_equal(m, want)


def test_privatized_max_starts_the_copies_at_the_identity_and_the_output_at_init():
    """Copies start at -inf (the reducer's identity), the combined output at init=-0.5: an
    element no update reaches is -0.5, one that gets updates is max(-0.5, their max)."""
    X = te.placeholder((301,), name="X")
    K = te.placeholder((301,), "int32", name="K")
    r = te.reduce_axis((0, 301), name="r")
    M = te.scatter_reduce((12,), lambda: ((K[r],), X[r]), te.max, axis=r, init=-0.5, name="M")
    s = create_schedule(M)
    ro, ri = s[M].split(s[M].op.reduce_axis[0], nparts=3)
    MF = s.rfactor(M, ro)
    s[MF].parallel(s[MF].op.axis[0])
    s[M].vectorize(s[M].op.axis[0])
    k, x = ints(301, 0, 11, seed=5), floats(301, seed=6)
    (m,) = run(s, [X, K], [M], [x, k])
    want = np.full(12, -0.5, "float32")
    np.maximum.at(want, k, x)
    np.testing.assert_array_equal(m, want)


def test_init_where_and_a_free_axis_in_the_middle():
    """out[a, ids[j], c] = 5 + sum of the updates where the weight is positive."""
    N = 23
    I = te.placeholder((N,), "int32", name="I")
    U = te.placeholder((3, N, 4), "int64", name="U")
    j = te.reduce_axis((0, N), name="j")
    O = te.scatter_reduce((3, 6, 4), lambda a, c: ((a, I[j], c), U[a, j, c]), te.sum, axis=j,
                          where=lambda a, c: U[a, j, c] > 0, init=5, name="O")
    assert [iv.name for iv in O.op.axis] == ["a", "c"] and O.op.free_dims == (0, 2)
    ids, u = ints(N, 0, 6), ints((3, N, 4), -9, 9, "int64")
    want = np.full((3, 6, 4), 5, "int64")
    for a in range(3):
        for n in range(N):
            for c in range(4):
                want[a, ids[n], c] += max(u[a, n, c], 0)
    s = create_schedule(O)
    s[O].parallel(s[O].op.axis[0])
    (o,) = run(s, [I, U], [O], [ids, u])
    np.testing.assert_array_equal(o, want)


def test_where_skips_out_of_range_ids_instead_of_clamping_them():
    V, N = 7, 41
    I = te.placeholder((N,), "int64", name="I")
    j = te.reduce_axis((0, N), name="j")
    C = te.scatter_reduce((V,), lambda: ((I[j],), 1), axis=j, dtype="int32",
                          where=te.all(I[j] >= 0, I[j] < V), name="C")
    ids = ints(N, -5, 12, "int64")
    (c,) = run(create_schedule(C), [I], [C], [ids])
    np.testing.assert_array_equal(c, np.bincount(ids[(ids >= 0) & (ids < V)], minlength=V))


def test_a_data_independent_index_inside_the_output_is_not_clamped():
    """out[r % 5] += A[r]: an index the bounds prove inside is stored as written."""
    A = te.placeholder((23,), "int64", name="A")
    r = te.reduce_axis((0, 23), name="r")
    S = te.scatter_reduce((5,), lambda: ((r % 5,), A[r]), axis=r, name="S")
    assert "max(" not in str(lower(create_schedule(S), [A, S]))
    a = ints(23, -9, 9, "int64")
    (got,) = run(create_schedule(S), [A], [S], [a])
    np.testing.assert_array_equal(got, np.bincount(np.arange(23) % 5, weights=a).astype("int64"))


def producer_and_scatter():
    """Ids computed by an elementwise stage (a shift), values by another (a scale)."""
    V, L, D = 9, 31, 13
    ids = te.placeholder((L,), "int32", name="ids")
    dy = te.placeholder((L, D), name="dy")
    shifted = te.compute((L,), lambda j: (ids[j] + 1) % V, name="shifted")
    scaled = te.compute((L, D), lambda j, d: dy[j, d] * 2.0, name="scaled")
    G = te.embedding_backward(shifted, scaled, V, name="G")
    i, g = ints(L, 0, V, seed=4), floats((L, D), seed=5)
    want = add_at((V, D), (i + 1) % V, g * 2)
    return (ids, dy, shifted, scaled, G), (i, g), want


@pytest.mark.parametrize("where", ["root", "inline", "at"])
def test_producers_of_ids_and_values_inlined_or_computed_at_a_scatter_loop(where):
    (ids, dy, shifted, scaled, G), arrays, want = producer_and_scatter()
    s = create_schedule(G)
    if where == "inline":
        s[shifted].compute_inline()
        s[scaled].compute_inline()
    elif where == "at":
        b, d = s[G].op.reduce_axis[0], s[G].op.axis[0]
        s[G].reorder(b, d)
        s[scaled].compute_at(s[G], b)
        s[shifted].compute_at(s[G], b)
    (out,) = run(s, [ids, dy], [G], list(arrays))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_a_scatter_read_by_another_stage():
    """The histogram normalised: the scatter is a temp stage of the kernel."""
    X, H = histogram(n=101, bins=7)
    P = te.compute((7,), lambda b: H[b].astype("float32") / 101.0, name="P")
    x = ints(101, 0, 7)
    (p,) = run(create_schedule(P), [X], [P], [x])
    np.testing.assert_allclose(p, np.bincount(x, minlength=7) / 101.0, rtol=1e-6)


# the schedule, the IR, the DAG -----------------------------------------------------------------

def test_lowered_ir_initializes_then_updates_at_the_clamped_index():
    X, H = histogram(n=101, bins=7)
    text = str(lower(create_schedule(H), [X, H]))
    init, update = text.index("H[H.init0] = int32(0)"), text.index("for r0 in range(101)")
    assert init < update
    assert "H[max(min(int64(X[r0]), 6), 0)] = H[max(min(int64(X[r0]), 6), 0)] + int32(1)" in text


def test_a_privatizing_schedule_replays_from_its_steps():
    X, H = histogram(n=1001, bins=37)
    s = create_schedule(H)
    ro, _ = s[H].split(s[H].op.reduce_axis[0], nparts=4)
    HF = s.rfactor(H, ro)
    s[HF].parallel(s[HF].op.axis[0])
    again = replay(s.steps, [H])
    assert str(lower(again, [X, H])) == str(lower(s, [X, H]))
    x = ints(1001, 0, 37, seed=9)
    (h,) = run(again, [X], [H], [x])
    np.testing.assert_array_equal(h, np.bincount(x, minlength=37))


def test_dag_counts_the_updates_and_hashes_the_init():
    I, U, G = scatter_rows(V=11, N=53, D=19)
    dag = ComputeDAG(G)
    assert dag.is_reduction(G) and not dag.is_inlinable(G)
    assert dag.flop_count(G) == 19 * 53             # one add per update: free axis x domain
    r = te.reduce_axis((0, 53), name="j")
    hashes = {ComputeDAG(te.scatter_reduce((11, 19), lambda d: ((I[r], d), U[r, d]),
                                           axis=r, init=v)).structural_hash() for v in (0, 1)}
    assert len(hashes) == 2
    assert "G = 0.0f; G[max(min(I[j], 10), 0), i1] sum= U[j, i1]" in str(dag)


# the te rewriters keep a scatter a scatter --------------------------------------------------------

def test_float_promotion_keeps_the_scatter_and_widens_its_init():
    from einloop.te.promote import promote_floats
    X = te.placeholder((101,), "float16", name="X")
    K = te.placeholder((101,), "int32", name="K")
    r = te.reduce_axis((0, 101), name="r")
    M = te.scatter_reduce((9,), lambda: ((K[r],), X[r]), te.max, axis=r, name="M")
    wide = promote_floats([X, K, M])
    assert wide[2].op.init.dtype == "float64" and wide[2].shape == (9,)
    assert type(wide[2].op) is type(M.op)
    k, x = ints(101, 0, 8), floats(101, dtype="float16")
    (m,) = run(create_schedule(wide[2]), wide[:2], wide[2:], [x.astype("float64"), k])
    want = np.full(9, -np.inf)
    np.maximum.at(want, k, x.astype("float64"))
    np.testing.assert_array_equal(m, want)


def test_binding_a_symbolic_input_size_keeps_the_scatter():
    from einloop.te.bind import bind_sizes
    n = te.var("n")
    X = te.placeholder((n,), "int32", name="X")
    r = te.reduce_axis((0, 50), name="r")
    C = te.scatter_reduce((6,), lambda: ((X[r],), 1), axis=r, dtype="int32", name="C")
    X2, C2 = bind_sizes([X, C], {"n": 80})
    assert X2.shape == (80,) and C2.shape == (6,) and C2.op.free_dims == ()
    x = ints(80, 0, 6)
    (c,) = run(create_schedule(C2), [X2], [C2], [x])
    np.testing.assert_array_equal(c, np.bincount(x[:50], minlength=6))


# random hand schedules: scheduled == default -------------------------------------------------------

def _scatter_operator(d):
    """A random scatter with an elementwise producer of its ids and a consumer of its output."""
    from hypothesis import strategies as st
    n, v, w = (d.draw(st.integers(1, 40)), d.draw(st.integers(1, 9)), d.draw(st.integers(1, 9)))
    ids = te.placeholder((n,), "int32", name="ids")
    src = te.placeholder((n, w), name="src")
    wrapped = te.compute((n,), lambda j: ids[j] % v, name="wrapped")
    kind = d.draw(st.sampled_from(["rows", "columns", "histogram"]))
    if kind == "rows":
        out = te.embedding_backward(wrapped, src, v, name="S")
    elif kind == "columns":
        cols = te.compute((w, n), lambda c, j: src[j, c] * 2.0, name="cols")
        out = te.scatter_add((w, v), wrapped, cols, axis=1, name="S")
    else:
        out = te.histogram(wrapped, v, name="S")
    final = te.compute(out.shape, lambda *i: out[i] + 1, name="final")
    return [ids, src], [final] if d.draw(st.booleans()) else [out, final]


def test_random_hand_schedules_of_scatters_match_the_default():
    from hypothesis import HealthCheck, given, settings, strategies as st
    from test_property_schedules import _random_step
    from einloop.errors import ScheduleError

    @settings(max_examples=6, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(st.data())
    def check(data):
        inputs, outputs = _scatter_operator(data)
        s = create_schedule(outputs)
        for _ in range(data.draw(st.integers(1, 8))):
            try:
                _random_step(data, s, outputs)
            except ScheduleError:
                pass                    # refused: the schedule is unchanged
        stage = data.draw(st.sampled_from([x for x in s.stages if x.is_compute
                                           and x.attach != "inline"]))
        try:                            # a loop vectorized, innermost or not (free or not)
            stage.vectorize(data.draw(st.sampled_from(stage.leaf_iter_vars)))
        except ScheduleError:
            pass
        arrays = [ints(inputs[0].shape, -3, 12, seed=1), floats(inputs[1].shape, seed=2)]
        try:
            got = run(s, inputs, outputs, arrays)
        except ScheduleError:
            return                      # refused at lowering
        want = run(create_schedule(outputs), inputs, outputs, arrays)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"steps: {s.steps}")
    check()
