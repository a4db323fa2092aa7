"""The fuzz cases that were found before the in-house fuzzer existed, each reduced to its core.

Ten of them were einloop defects (crashes, hangs, stray exceptions, internal errors, wrong
results); three were mistakes of the fuzzer's own reference, kept here as tests of the property
the reference got wrong (accuracy against an exact result instead of agreement with NumPy's
rounding).  A case that once killed or hung the interpreter runs in a subprocess, so that a
regression fails one test instead of the whole run.
"""
import math
import textwrap

import numpy as np
import pytest

from einloop import te, create_schedule, build, lower
from einloop.errors import RegionFallbackWarning

from fuzz.harness import guarded
from isolated import run_isolated


def test_float64_to_float16_casts_inside_a_product_run():
    """crash-100818: the cast called a compiler-rt helper the JIT had not resolved (SIGSEGV)."""
    run_isolated("""
        import numpy as np
        from einloop import te, create_schedule, build
        A = te.placeholder((4, 3), "float64", name="A")
        T = te.compute((4,), lambda i: A[i, 0].astype("float16") * A[i, 1].astype("float16"),
                       name="T")
        f = build(create_schedule(T), [A, T])
        a = np.random.default_rng(0).uniform(-1, 1, (4, 3))
        t = np.empty(4, "float16")
        f(a, t)
        assert np.array_equal(t, a[:, 0].astype(np.float16) * a[:, 1].astype(np.float16)), t
    """)


def test_else_branch_read_before_the_array_is_clamped():
    """crash-200043: the else branch of ``(i - 1 >= 0) & (i - 1 < 13)`` read X[-1], which faults
    when X starts right after an unmapped page."""
    run_isolated("""
        import numpy as np
        from einloop import te, create_schedule, build
        from fuzz.harness import guarded
        X = te.placeholder((13,), "float64", name="X")
        T = te.compute((14,), lambda i: te.if_then_else(((i - 1) >= 0) & ((i - 1) < 13),
                                                        te.const(0.0, "float64"), X[i - 1]),
                       name="T")
        f = build(create_schedule(T), [X, T])
        x = guarded((13,), "float64", fence_after=False)
        x[...] = np.arange(1.0, 14.0)
        t = np.empty(14)
        f(x, t)
        want = np.where(np.arange(14) >= 1, 0.0, x[np.clip(np.arange(14) - 1, 0, 12)])
        assert np.array_equal(t, want), t
    """)


def test_producer_at_a_reduction_loop_read_directly_and_through_min():
    """exception-101727: bound inference simplified the union of the two regions without ranges
    and raised AttributeError."""
    A = te.placeholder((18,), name="A")
    P = te.compute((18,), lambda j: A[j] * 2, name="P")
    k = te.reduce_axis((0, 18), name="k")
    C = te.compute((4,), lambda i: te.sum(P[k] * P[te.min(k + i, 17)], axis=k), name="C")
    s = create_schedule(C)
    s[P].compute_at(s[C], C.op.reduce_axis[0])
    f = build(s, [A, C])
    a = np.arange(18, dtype="float32")
    c = np.empty(4, "float32")
    f(a, c)
    K = np.arange(18)
    want = [(2 * a[K] * 2 * a[np.minimum(K + i, 17)]).sum() for i in range(4)]
    np.testing.assert_allclose(c, want, rtol=1e-6)


def test_producer_read_through_a_gather_and_a_clamp_at_a_split_reduction():
    """exception-200093: the same union, with a data-dependent read beside the clamped one; the
    gather's region falls back to the whole axis, and says so."""
    A = te.placeholder((5,), name="A")
    I = te.placeholder((6,), "int64", name="I")
    P = te.compute((5,), lambda i: A[i] * 2, name="P")
    k = te.reduce_axis((0, 4), name="k")
    C = te.compute((6,), lambda j: te.sum(P[I[j] % 5] * P[te.min(te.max(j - 2, 0), 3)]
                                          + k.var.astype("float32"), axis=k), name="C")
    s = create_schedule(C)
    ko, _ = s[C].split(C.op.reduce_axis[0], nparts=2)
    s[P].compute_at(s[C], ko)
    with pytest.warns(RegionFallbackWarning, match="P"):
        f = build(s, [A, I, C])
    a = np.arange(1, 6, dtype="float32")
    idx = np.array([4, 0, 9, -3, 2, 7])
    c = np.empty(6, "float32")
    f(a, idx, c)
    j = np.arange(6)
    want = 4 * (2 * a[idx % 5]) * (2 * a[np.clip(j - 2, 0, 3)]) + 6
    np.testing.assert_allclose(c, want, rtol=1e-6)


def test_a_stage_computed_at_a_loop_whose_only_read_was_inlined_away_builds():
    """Fuzz case 22000847: T2 is computed at T3's fused loop, but T3 read T2 only through T1,
    which is then inlined (a constant): nothing reads T2, its regions are empty, and bound
    inference's whole-axis warning indexed them (TypeError) instead of skipping the axis."""
    T1 = te.compute((1, 1, 1), lambda i0, i1, i2: te.const(0.0, "float64"), name="T1")
    T2 = te.compute((1, 3), lambda i0, i1: te.const(0, "int64"), name="T2")
    T3 = te.compute((1, 1), lambda i0, i1: T1[0, 0, T2[0, 1]], name="T3")
    s = create_schedule([T3])
    s[T2].compute_at(s[T3], s[T3].fuse(*s[T3].op.axis))
    s[T1].compute_inline()
    f = build(s, [T3])
    out = np.full((1, 1), np.nan)
    f(out)
    assert out[0, 0] == 0.0


@pytest.mark.parametrize("declaration", [
    # hang-100095: an unrolled max reduction whose operand does not depend on the data loop
    """
    C = te.placeholder((2, 15), name="C")
    k2 = te.reduce_axis((0, 31), name="k2")
    T = te.compute((4, 14), lambda i, j: te.max(C[(k2 + 3) % 2, 6] - te.const(-0.995, "float32"),
                                                axis=k2), name="T")
    s = create_schedule(T)
    s[T].parallel(T.op.axis[0])
    s[T].unroll(T.op.axis[1])
    c = np.random.default_rng(1).uniform(-1, 1, (2, 15)).astype("float32")
    want = np.broadcast_to(c[[1, 0], 6].max() + np.float32(0.995), (4, 14))
    """,
    # hang-104309: a min reduction over two axes under the default schedule
    """
    C = te.placeholder((2, 67), name="C")
    k3 = te.reduce_axis((0, 17), name="k3")
    k4 = te.reduce_axis((0, 2), name="k4")
    T = te.compute((35,), lambda i: te.min(te.const(0.486) - C[0, 64 - k4], axis=[k3, k4]),
                   name="T")
    s = create_schedule(T)
    c = np.random.default_rng(1).uniform(-1, 1, (2, 67)).astype("float32")
    want = np.broadcast_to((np.float32(0.486) - c[0, [64, 63]]).min(), (35,))
    """,
])
def test_min_max_reductions_that_hung_llvm_compile_and_compute(declaration):
    """hang-100095, hang-104309: chains of select-based min/max made LLVM's O3 pipeline run
    without end; each must now build in seconds and compute what NumPy does."""
    run_isolated(textwrap.dedent("""
        import numpy as np
        from einloop import te, create_schedule, build
    """) + textwrap.dedent(declaration) + textwrap.dedent("""
        f = build(s, [C, T])
        t = np.empty(T.shape, "float32")
        f(c, t)
        np.testing.assert_allclose(t, want, rtol=1e-6)
    """), timeout=90)


def test_producer_indexed_by_an_intermediate_tensor_at_a_split_loop():
    """internal-100022: the region start of a gather through an intermediate kept its tensor
    read and reached codegen (InternalError)."""
    A = te.placeholder((8,), name="A")
    I = te.placeholder((4,), "int64", name="I")
    Q = te.compute((4,), lambda j: I[j] * 3, name="Q")
    P = te.compute((8,), lambda i: A[i] * 2, name="P")
    C = te.compute((4,), lambda j: P[Q[j] % 8], name="C")
    s = create_schedule(C)
    _, ji = s[C].split(C.op.axis[0], factor=2)
    s[P].compute_at(s[C], ji)
    with pytest.warns(RegionFallbackWarning):
        f = build(s, [A, I, C])
    a = np.arange(8, dtype="float32")
    idx = np.array([3, 0, 7, -2])
    c = np.empty(4, "float32")
    f(a, idx, c)
    np.testing.assert_array_equal(c, 2 * a[(3 * idx) % 8])


@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
@pytest.mark.parametrize("dst", ["uint8", "int8", "int32", "int64"])
@pytest.mark.parametrize("unroll", [False, True])
def test_float_to_int_casts_out_of_range_match_numpy(src, dst, unroll):
    """wrong-100343: a float value outside the integer type's range (negative to uint8, 300 to
    int8, NaN, inf) was LLVM poison, so vector code saturated, unrolled code folded to 0, and
    NumPy wraps.  einloop now defines it as NumPy does on x86-64, whatever the schedule."""
    with np.errstate(all="ignore"):
        values = np.array([-2.0, -1.5, 0.0, 0.7, 3.9, 200.0, 300.0, -300.0, 1e5, -1e5, 3e9,
                           -3e9, np.inf, -np.inf, np.nan, 42.0], dtype=src)
        want = values.astype(dst)
    n = len(values)
    if unroll:      # the operand becomes a constant in each unrolled copy
        consts = [te.const(float(v), src) for v in values]

        def pick(i, lo=0, hi=n):
            if hi - lo == 1:
                return consts[lo]
            mid = (lo + hi) // 2
            return te.if_then_else(i < mid, pick(i, lo, mid), pick(i, mid, hi))
        T = te.compute((n,), lambda i: pick(i).astype(dst), name="T")
        s = create_schedule(T)
        s[T].unroll(T.op.axis[0])
        args, arrays = [T], []
    else:
        A = te.placeholder((n,), src, name="A")
        T = te.compute((n,), lambda i: A[i].astype(dst), name="T")
        s = create_schedule(T)
        s[T].vectorize(T.op.axis[0])
        args, arrays = [A, T], [values]
    f = build(s, args)
    got = np.empty(n, dst)
    f(*arrays, got)
    np.testing.assert_array_equal(got, want)


def test_float64_tanh_near_one_is_correctly_rounded():
    """wrong-101688 (a reference mistake): floor(5 * tanh(19)) is 4 because tanh(19) rounds to
    1 - 2**-53; NumPy's SIMD tanh returns 1.0 there.  einloop must give the correct value."""
    X = te.placeholder((3,), "float64", name="X")
    T = te.compute((3,), lambda i: te.floor(te.tanh(X[i]) * te.const(5.0, "float64")), name="T")
    f = build(create_schedule(T), [X, T])
    x = np.array([19.0, 0.3, -19.0])
    t = np.empty(3)
    f(x, t)
    np.testing.assert_array_equal(t, [math.floor(math.tanh(v) * 5) for v in x])


def test_float16_einsum_stays_within_float16_rounding_of_the_exact_sum():
    """wrong-102117 (a reference mistake): a float16 reduction rounds at each step, so it is
    compared with the exact sum within float16's error bound, not with NumPy's float16 order."""
    X = te.placeholder((3,), "float16", name="X")
    A = te.placeholder((16, 4), "float16", name="A")
    T1 = te.einsum("a,bc->c", X, A, name="T1")
    T2 = te.compute((4,), lambda c: T1[c].astype("float64"), name="T2")
    f = build(create_schedule(T2), [X, A, T2])
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 3).astype("float16")
    a = rng.uniform(-1, 1, (16, 4)).astype("float16")
    got = np.empty(4)
    f(x, a, got)
    x64, a64 = x.astype(np.float64), a.astype(np.float64)
    exact = np.einsum("a,bc->c", x64, a64)
    steps = x.size * a.shape[0]
    bound = steps * 2.0 ** -11 * np.einsum("a,bc->c", np.abs(x64), np.abs(a64))
    assert np.all(np.abs(got - exact) <= bound), (got, exact, bound)


def test_cancelling_float32_sum_is_within_rounding_of_its_terms():
    """wrong-103998 (a reference mistake): sum(X[k] * A[b]) with X = [-s, 0, s] is exactly 0, but
    a fused multiply-add leaves the rounding error of one product; the error is bounded by the
    size of the terms, not of the (zero) result."""
    X = te.placeholder((3,), name="X")
    A = te.placeholder((4,), name="A")
    k = te.reduce_axis((0, 3), name="k")
    T = te.compute((4,), lambda b: te.sum(X[k] * A[b], axis=k), name="T")
    f = build(create_schedule(T), [X, A, T])
    s = np.float32(1 / (1 + np.exp(0.6)))
    x = np.array([-s, 0, s], "float32")
    a = np.random.default_rng(0).uniform(-1, 1, 4).astype("float32")
    got = np.empty(4, "float32")
    f(x, a, got)
    terms = np.abs(x.astype(np.float64))[None, :] * np.abs(a.astype(np.float64))[:, None]
    bound = 4 * np.finfo(np.float32).eps * terms.sum(axis=1)
    assert np.all(np.abs(got.astype(np.float64)) <= bound), (got, bound)


def test_comparison_of_wrapped_int32_casts_is_not_folded():
    """wrong-200056: int32(i + 2**31 + 1) wraps negative, but its bounds were taken from the
    int64 operand, so the comparison was 'proven' false and the select folded."""
    T = te.compute((4,), lambda i: te.if_then_else(
        (i + 2147483649).astype("int32") < (i + 4).astype("int32"),
        te.const(1, "int32"), te.const(0, "int32")), name="T")
    f = build(create_schedule(T), [T])
    t = np.empty(4, "int32")
    f(t)
    i = np.arange(4)
    want = np.where((i + 2147483649).astype(np.int32) < (i + 4).astype(np.int32), 1, 0)
    np.testing.assert_array_equal(t, want)


def test_else_branch_read_of_an_intermediate_is_clamped():
    """wrong-200798: the else branch of ``(j >= 0) & (j < 8)`` read a temporary past its end
    (garbage, not a crash, since the temporary lives inside a larger allocation)."""
    A = te.placeholder((8,), name="A")
    T0 = te.compute((8,), lambda i: A[i] + 1, name="T0")
    T2 = te.compute((24,), lambda j: te.if_then_else((j >= 0) & (j < 8), te.const(0.0), T0[j]),
                    name="T2")
    s = create_schedule(T2)
    assert "min(" in str(lower(s, [A, T2])) or "max(" in str(lower(s, [A, T2]))
    f = build(s, [A, T2])
    a = guarded((8,), "float32")
    a[...] = np.arange(8)
    t = np.empty(24, "float32")
    f(a, t)
    j = np.arange(24)
    np.testing.assert_array_equal(t, np.where(j < 8, 0, a[np.clip(j, 0, 7)] + 1))


def test_guarded_reduction_chain_found_by_the_in_house_fuzzer_compiles():
    """Fuzz seed 2026007834: a where= min reduction (guarded updates, if-converted by LLVM into
    select chains over an unrolled loop) hung LLVM's loop vectorizer like the b8 reductions."""
    run_isolated("""
        import numpy as np
        from einloop import te, create_schedule, build
        csum = te.comm_reducer(lambda x, y: x + y, lambda dt: 0, name='csum')
        cmin = te.comm_reducer(lambda x, y: te.min(x, y), lambda dt: te.const(float('inf') if dt.startswith('float') else np.iinfo(dt).max, dt), name='cmin')
        A = te.placeholder((2, 4,), 'float32', name='A')
        k2 = te.reduce_axis((0, 6), name='k2')
        T1 = te.compute((4, 2,), lambda i0, i1: csum(te.sqrt(te.abs(((A[((i1 + 2147483648)).astype('int32'), ((k2 + 10) // 5)]).astype('float64') * ((k2).astype('float64') * (i0).astype('float64'))))), axis=k2), name='T1')
        T3 = te.compute((2, 4,), lambda i0, i1: (te.exp(te.tanh(((i1).astype('float16') - 0.5))) + 0.5), name='T3')
        T4 = te.compute((4, 2,), lambda i0, i1: ((((i1).astype('bool')).astype('uint8') + ((i0).astype('uint8') + (i1).astype('uint8'))) * ((i1 <= -1)).astype('uint8')), name='T4')
        k6 = te.reduce_axis((0, 31), name='k6')
        k7 = te.reduce_axis((0, 8), name='k7')
        T5 = te.compute((4, 2,), lambda i0, i1: cmin(A[i1, (i1 * 3)], axis=[k6, k7], where=(((T3[te.min(te.max((i1 + -1), 0), 1), ((k7 + 2147483644)).astype('int32')] >= T3[te.const(1, 'int64'), te.maximum(te.minimum((k7 + 2), 3), 0)]) & (te.max(i1, te.const(4, 'int64')) != 5)) & (k6 <= 6))), name='T5')

        s = create_schedule([T1, T4, T5, T3])
        A_r0 = s.cache_read(A, 'local', [T5])
        T5_w = s.cache_write(T5, 'local')
        L1, L2, = s[T1].op.axis
        L3, = s[T1].op.reduce_axis
        L4, L5, = s[T3].op.axis
        L6, L7, = s[T4].op.axis
        L8, L9, = s[T5].op.axis
        L10, L11, = s[A_r0].op.axis
        L12, L13, = s[T5_w].op.axis
        L14, L15, = s[T5_w].op.reduce_axis
        L16, L17 = s[T1].split(L3, factor=4)
        L18, L19 = s[T4].split(L7, factor=1)
        L20 = s[T4].fuse(L6, L18)
        s[T4].reorder(L19, L20)
        L21, L22 = s[T5_w].split(L14, factor=7)
        L23 = s[T5_w].fuse(L12, L13)
        s[T5_w].reorder(L22, L15, L21)
        L24 = s[T3].fuse(L4, L5)
        L25, L26 = s[T3].split(L24, factor=64)
        s[A_r0].reorder(L10, L11)
        s[T5_w].compute_at(s[T5], L8)
        s[A_r0].compute_at(s[T5_w], L22)
        s[T1].unroll(L1)
        s[T4].parallel(L19)
        s[T5].parallel(L8)
        s[T3].unroll(L25)
        s[A_r0].vectorize(L11)
        s[A_r0].unroll(L10)

        f = build(s, [A, T1, T4, T5, T3])
        a = np.random.default_rng(0).uniform(-1, 1, (2, 4)).astype("float32")
        outs = [np.empty(t.shape, t.dtype) for t in (T1, T4, T5, T3)]
        f(a, *outs)
    """, timeout=90)
