"""Regressions in bound inference, loop-nest construction and lowering passes (issue 6).

Each test states the defect it guards against; results are checked against NumPy.
"""
import warnings

import numpy as np
import pytest
from hypothesis import given, strategies as st

from einloop import te, create_schedule, lower, build
from einloop.errors import (BuildError, ScheduleError, UnsupportedPrimitiveError,
                            RegionFallbackWarning)
from einloop.schedule import verify
from einloop.ir import expr as E
from einloop.schedule.bound import diff_bounds
from einloop.ir.stmt import (Allocate, Buffer, For, ForKind, IfThenElse, Scope, Seq,
                                      Store)
from einloop.schedule.passes.simplify_stmt import simplify_stmt


def run(s, args, arrays, out_shapes):
    """Build *s*, call it on *arrays* plus fresh float32 outputs, return the outputs."""
    outs = [np.full(shape, np.nan, "float32") for shape in out_shapes]
    build(s, args)(*arrays, *outs)
    return outs


def allocations(stmt):
    """Shapes of the local buffers allocated in *stmt*, by buffer name."""
    found = {}

    def visit(x):
        if isinstance(x, Allocate):
            found[x.buffer.name] = x.buffer.shape
        for child in ("body", "then_case", "else_case"):
            if getattr(x, child, None) is not None:
                visit(getattr(x, child))
        for c in getattr(x, "stmts", ()):
            visit(c)
    visit(stmt)
    return found


@pytest.fixture
def no_region_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RegionFallbackWarning)
        yield


# compute_at regions ---------------------------------------------------------------------------

def test_compute_at_of_a_producer_read_plainly_and_through_min(no_region_fallback):
    """Two reads, one of them clamped by te.min: the union of their regions used to call
    simplify without ranges and die with AttributeError."""
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2, name="B")
    C = te.compute((10,), lambda i: B[i] + B[te.min(i + 1, 9)], name="C")
    s = create_schedule(C)
    s[B].compute_at(s[C], s[C].op.axis[0])
    a = np.arange(10, dtype="float32") - 3
    (c,) = run(s, [A, C], [a], [(10,)])
    np.testing.assert_array_equal(c, 2 * a + 2 * a[np.minimum(np.arange(10) + 1, 9)])


def blur(H, W, factor):
    """A 5-point blur of P = 2A with repeat-edge (min/max clamped) reads, P computed per tile."""
    A = te.placeholder((H, W), name="A")
    P = te.compute((H, W), lambda i, j: A[i, j] * 2, name="P")

    def at(i, j):
        return P[te.min(te.max(i, 0), H - 1), te.min(te.max(j, 0), W - 1)]
    B = te.compute((H, W), lambda i, j: (at(i - 1, j) + at(i, j) + at(i + 1, j) + at(i, j - 1)
                                          + at(i, j + 1)) * 0.2, name="B")
    s = create_schedule(B)
    io, _ = s[B].split(B.op.axis[0], factor=factor)
    s[P].compute_at(s[B], io)
    return s, A, B


def numpy_blur(a):
    p = np.pad(2 * a, 1, mode="edge")
    return (p[:-2, 1:-1] + p[1:-1, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]) * 0.2


def test_clamped_reads_keep_the_compute_at_region_to_the_tile_and_its_halo(no_region_fallback):
    """Reads through min/max clamps used to make P's region the whole image for every tile."""
    s, A, B = blur(64, 48, factor=8)
    assert allocations(lower(s, [A, B]).body)["P"] == (10, 48)      # 8 rows and a halo of 1
    a = np.random.default_rng(0).random((64, 48), dtype="float32")
    (b,) = run(s, [A, B], [a], [(64, 48)])
    np.testing.assert_allclose(b, numpy_blur(a), rtol=1e-6)


def test_clamped_reads_in_a_two_dimensional_tile(no_region_fallback):
    H, W = 20, 30
    A = te.placeholder((H, W), name="A")
    P = te.compute((H, W), lambda i, j: A[i, j] + 1, name="P")

    def at(i, j):
        return P[te.max(te.min(i, H - 1), 0), te.max(te.min(j, W - 1), 0)]
    B = te.compute((H, W), lambda i, j: at(i + 2, j - 1) - at(i - 1, j + 3), name="B")
    s = create_schedule(B)
    io, jo, _, _ = s[B].tile(*B.op.axis, 4, 8)
    s[P].compute_at(s[B], jo)
    assert allocations(lower(s, [A, B]).body)["P"] == (7, 12)
    a = np.random.default_rng(1).random((H, W), dtype="float32")
    (b,) = run(s, [A, B], [a], [(H, W)])
    I, J = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    p = a + 1
    want = (p[np.clip(I + 2, 0, H - 1), np.clip(J - 1, 0, W - 1)]
            - p[np.clip(I - 1, 0, H - 1), np.clip(J + 3, 0, W - 1)])
    np.testing.assert_allclose(b, want, rtol=1e-6)


def gather_through_placeholder():
    A = te.placeholder((8,), name="A")
    idx = te.placeholder((4,), "int64", name="I")
    B = te.compute((8,), lambda i: A[i] * 2, name="B")
    C = te.compute((4,), lambda j: B[idx[j] % 8], name="C")
    s = create_schedule(C)
    return s, A, idx, B, C


def gather_through_inlined_cache():
    """The index comes from a stage whose cache_write copy was inlined into the index."""
    A = te.placeholder((8,), name="A")
    idx = te.placeholder((4,), "int64", name="I")
    T = te.compute((4,), lambda j: idx[j] + 1, name="T")
    B = te.compute((8,), lambda i: A[i] * 2, name="B")
    C = te.compute((4,), lambda j: B[T[j] % 8], name="C")
    s = create_schedule(C)
    s.cache_write(T, "local")
    s[T].compute_inline()
    return s, A, idx, B, C


@pytest.mark.parametrize("declare, shift", [(gather_through_placeholder, 0),
                                            (gather_through_inlined_cache, 1)])
def test_compute_at_of_a_gathered_producer_computes_the_whole_axis_and_warns(declare, shift):
    """A data-dependent index used to leave a tensor read in the region start (InternalError in
    codegen); the region cannot be bounded before the kernel runs, so it is the whole axis."""
    s, A, idx, B, C = declare()
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.warns(RegionFallbackWarning, match=r"stage B is computed at C\.j.*% 8.*axis 0"):
        f = build(s, [A, idx, C])
    a = np.arange(8, dtype="float32") + 1
    i = np.array([3, 0, 7, 5], dtype="int64")
    c = np.empty(4, "float32")
    f(a, i, c)
    np.testing.assert_array_equal(c, 2 * a[(i + shift) % 8])


def test_region_fallback_warns_once_per_axis_with_every_culprit():
    s, A, idx, B, C = gather_through_placeholder()
    C2 = te.compute((4,), lambda j: B[idx[j] % 8] + B[idx[3 - j] % 8], name="C2")
    s = create_schedule(C2)
    s[B].compute_at(s[C2], s[C2].op.axis[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lower(s, [A, idx, C2])
    fallbacks = [w for w in caught if issubclass(w.category, RegionFallbackWarning)]
    assert len(fallbacks) == 1
    assert "I[j] % 8" in str(fallbacks[0].message) and "I[3 - j] % 8" in str(fallbacks[0].message)


@given(st.integers(-6, 6), st.integers(-6, 6), st.integers(0, 40), st.integers(1, 40))
def test_difference_of_clamped_indices_is_bounded_by_the_offsets(c1, c2, lo, width):
    """The distance of two clamped reads is bounded by their offsets and holds for every value
    (the soundness of the union of two compute_at regions rests on it)."""
    x = E.Var("x")
    hi = lo + width

    def clamp(e):
        return te.min(te.max(e, lo), hi)
    bounds = diff_bounds(clamp(x + c1), clamp(x + c2), {x: (-50, 100)})
    assert bounds is not None and bounds[1] - bounds[0] <= abs(c1 - c2)
    values = np.arange(-50, 101)
    d = np.clip(values + c1, lo, hi) - np.clip(values + c2, lo, hi)
    assert bounds[0] <= d.min() and d.max() <= bounds[1]


# empty statements -------------------------------------------------------------------------------

def test_reduction_whose_condition_never_holds_under_a_guarded_split():
    """where= is false everywhere, so the update folds away; its split guard used to stay with
    an empty body and reach codegen (InternalError)."""
    A = te.placeholder((40,), name="A")
    k = te.reduce_axis((0, 40), name="k")
    M = te.compute((1,), lambda i: te.sum(A[k], axis=k, where=(k > i + 50)), name="M")
    s = create_schedule(M)
    s[M].split(k, factor=16)                    # 40 is no multiple of 16: the tail is guarded
    (m,) = run(s, [A, M], [np.ones(40, "float32")], [(1,)])
    np.testing.assert_array_equal(m, [0.0])


def test_simplify_drops_statements_left_without_a_body():
    buf = Buffer("T", "float32", (4,), Scope.LOCAL)
    i = E.Var("i")
    dead = IfThenElse(i > 10, Store(buf, i, te.const(1.0)))          # never true for i < 4
    nest_ = For(i, 4, ForKind.SERIAL, Allocate(buf, Seq((IfThenElse(i < 3, dead),))))
    out = simplify_stmt(nest_)
    assert isinstance(out, Seq) and out.stmts == ()


def test_simplify_keeps_the_else_branch_of_a_guard_whose_then_branch_vanished():
    buf = Buffer("T", "float32", (4,), Scope.LOCAL)
    i, j = E.Var("i"), E.Var("j")
    store = Store(buf, i, te.const(2.0))
    guard = IfThenElse(j < 2, IfThenElse(i > 10, store), store)
    out = simplify_stmt(For(j, 3, ForKind.SERIAL, For(i, 4, ForKind.SERIAL, guard)))
    inner = out.body.body
    assert isinstance(inner, IfThenElse) and inner.else_case is None
    assert isinstance(inner.cond, E.Not) and str(inner.cond.a) == str(j < 2)
    assert isinstance(inner.then_case, Store) and inner.then_case.buffer is buf


# buffer sizes -----------------------------------------------------------------------------------

def test_local_buffer_larger_than_memory_is_a_build_error():
    """A 3 TiB compute_at region used to be malloc'ed unchecked: SIGSEGV when the kernel ran."""
    A = te.placeholder((4,), name="A")
    B = te.compute((3 * 2 ** 38 + 1,), lambda i: (i % 7).astype("float32"), name="B")
    C = te.compute((2, 4), lambda i, j: B[j * 2 ** 38] + A[j], name="C")
    s = create_schedule(C)
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.raises(BuildError, match=r"stage B, computed at C\.i, needs a local buffer .*"
                                         r"3\.0 TiB.*more than this machine's memory.*inner loop"):
        build(s, [A, C])


def test_whole_kernel_buffer_larger_than_memory_is_a_build_error():
    A = te.placeholder((2 ** 20, 2 ** 20), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 2, name="B")
    C = te.compute((4,), lambda i: B[i, i], name="C")
    with pytest.raises(BuildError, match=r"stage B, computed at the root, .*4\.0 TiB.*compute_at"):
        lower(create_schedule(C), [A, C])


def test_buffer_size_limit_is_the_machine_memory(monkeypatch):
    monkeypatch.setattr(verify, "memory_limit", lambda: 4096)
    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: A[i] * 2, name="B")          # exactly 4096 bytes: fine
    C = te.compute((1024,), lambda i: B[i] + 1, name="C")
    lower(create_schedule(C), [A, C])
    D = te.compute((1025,), lambda i: A[i % 1024] * 2, name="D")   # 4100 bytes: too large
    Out = te.compute((1025,), lambda i: D[i] + 1, name="Out")
    with pytest.raises(BuildError, match=r"stage D.*\(4100 bytes, 4\.0 KiB\).*\(4096 bytes"):
        lower(create_schedule(Out), [A, Out])


# primitives einloop lacks -----------------------------------------------------------------------

@pytest.mark.parametrize("name, advice", [
    ("rfactor", "method of the schedule"), ("bind", "CPU only"), ("storage_align", "padded shape"),
    ("double_buffer", "cache_read"), ("pragma", "unroll"),
    ("set_store_predicate", "if_then_else"), ("set_scope", "compute_at"),
])
def test_missing_stage_primitive_says_what_to_do_instead(name, advice):
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    s = create_schedule(B)
    assert not hasattr(s[B], name)
    with pytest.raises(UnsupportedPrimitiveError, match=rf"s\[B\]\.{name}: .*does not support.*"
                                                         rf"{advice}"):
        getattr(s[B], name)(s[B].op.axis[0])


@pytest.mark.parametrize("name", ["create_group", "normalize"])
def test_missing_schedule_primitive_says_it_is_unsupported(name):
    A = te.placeholder((8,), name="A")
    s = create_schedule(te.compute((8,), lambda i: A[i] + 1, name="B"))
    with pytest.raises(UnsupportedPrimitiveError, match=rf"s\.{name}: .*does not support"):
        getattr(s, name)()


def test_unknown_attribute_stays_a_plain_attribute_error():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    s = create_schedule(B)
    for owner in (s, s[B]):
        with pytest.raises(AttributeError, match="has no attribute 'splt'") as info:
            owner.splt
        assert not isinstance(info.value, ScheduleError)
