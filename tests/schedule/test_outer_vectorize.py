"""Outer-loop vectorization: ``vectorize`` on a loop with loops inside runs their bodies on all
lanes at once (TVM's and Halide's semantics), where the lanes cannot see the changed order; it
falls back to serial, with a VectorizeWarning that says why, where they could."""
import re
import warnings

import numpy as np
import pytest

from einloop import VectorizeWarning, build, create_schedule, lower, te
from einloop.ir.expr import Load, Var, const
from einloop.ir.stmt import Allocate, Buffer, For, ForKind, Scope, Store, seq
from einloop.schedule.passes.vectorize import vectorize_loops


def _no_warnings(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args)


def _matmul(M, K, N):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    return A, B, te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")


def _kinds(stmt):
    found = {}

    def walk(s):
        if isinstance(s, For):
            found[s.var.name] = s.kind
        for attr in ("body", "then_case", "else_case"):
            kid = getattr(s, attr, None)
            if kid is not None:
                walk(kid)
        for kid in getattr(s, "stmts", ()):
            walk(kid)
    walk(stmt)
    return found


@pytest.mark.parametrize("N,factor", [(24, 8), (20, 8), (13, 13)])
def test_a_vector_accumulator_over_a_serial_reduction(N, factor):
    """C[i, j] += A[i, k] * B[k, j] with j's lanes outside the loop over k: the register tile of
    a hand-written kernel.  A width that leaves a tail (20 = 2 x 8 + 4) and one that is no power of
    two (13 lanes: 8 + 4 + 1) compute the same."""
    M, K = 7, 13
    A, B, C = _matmul(M, K, N)
    s = create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=factor)
    s[C].reorder(i, jo, ji, C.op.reduce_axis[0])
    s[C].vectorize(ji)
    func = _no_warnings(lower, s, [A, B, C])
    kinds = _kinds(func.body)
    assert kinds["j.inner"] is ForKind.VECTORIZED and kinds["k"] is ForKind.SERIAL
    f = _no_warnings(build, s, [A, B, C])
    rng = np.random.default_rng(0)
    a, b = rng.random((M, K), np.float32), rng.random((K, N), np.float32)
    c = np.full((M, N), np.nan, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_the_lanes_stay_in_registers_across_the_reduction():
    """The accumulator of an 8-lane tile over a reduction of 64 is loaded and stored once per
    tile, not once per step of k (assembly for an explicit AVX2 target)."""
    M, K, N = 4, 64, 32
    A, B, C = _matmul(M, K, N)
    s = create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, ji, C.op.reduce_axis[0])
    s[C].vectorize(ji)
    f = build(s, [A, B, C], target="llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=haswell")
    asm = f.get_source("asm")
    fmas = len(re.findall(r"vfmadd\w+ps\s[^\n]*%ymm", asm))
    stores = len(re.findall(r"vmovups\s+%ymm\d+, [^\n]*\(", asm))
    assert fmas >= 8                         # the reduction runs on 8-lane vectors
    assert stores <= fmas // 4               # not a store per multiply-add


def test_a_convolution_window_inside_the_lanes_and_a_symbolic_inner_loop():
    """Y[i] = sum_r X[i + r] * W[r] vectorized over i around r; and C = A @ B with a symbolic
    reduction length (the inner loop's extent is the same for every lane)."""
    n, R = 37, 5
    X = te.placeholder((n + R - 1,), name="X")
    W = te.placeholder((R,), name="W")
    r = te.reduce_axis((0, R), name="r")
    Y = te.compute((n,), lambda i: te.sum(X[i + r] * W[r], axis=r), name="Y")
    s = create_schedule(Y)
    io, ii = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].reorder(io, ii, r)
    s[Y].vectorize(ii)
    f = _no_warnings(build, s, [X, W, Y])
    rng = np.random.default_rng(1)
    x, w = rng.random(n + R - 1, np.float32), rng.random(R, np.float32)
    y = np.empty(n, np.float32)
    f(x, w, y)
    np.testing.assert_allclose(y, np.convolve(x, w[::-1], mode="valid"), rtol=1e-5)

    K = te.size_var("K")
    A, B, C = _matmul(5, K, 16)
    s = create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, ji, C.op.reduce_axis[0])
    s[C].vectorize(ji)
    f = _no_warnings(build, s, [A, B, C])
    for k in (1, 11):
        a, b = rng.random((5, k), np.float32), rng.random((k, 16), np.float32)
        c = np.empty((5, 16), np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_a_whole_row_of_data_loops_inside_the_lanes():
    """An elementwise stage vectorized along its outer axis: each lane runs the inner loop over
    its own row (lanes 16 elements apart, the inner loop spans 16)."""
    P = te.placeholder((8, 16), name="P")
    G = te.compute((8, 16), lambda i, j: P[i, j] * 2.0 + 1.0, name="G")
    s = create_schedule(G)
    s[G].vectorize(G.op.axis[0])
    func = _no_warnings(lower, s, [P, G])
    assert _kinds(func.body)["i"] is ForKind.VECTORIZED
    f = build(s, [P, G])
    p = np.random.default_rng(2).random((8, 16), np.float32)
    g = np.empty_like(p)
    f(p, g)
    np.testing.assert_allclose(g, p * 2 + 1, rtol=1e-6)


# where the lanes could see the order: serial, with the reason --------------------------------

def _decide(body):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = vectorize_loops(body)
    return out, [str(w.message) for w in caught if issubclass(w.category, VectorizeWarning)]


def test_lanes_that_would_meet_across_the_inner_loop_stay_serial():
    """B[v + k] = B[v + k] * 2: lane 1 at k = 0 and lane 0 at k = 1 update one element, in the
    other order than the serial loop.  B[8 * k + v] keeps lanes apart (8 lanes, 8 apart)."""
    B = Buffer("B", "float32", (64,), Scope.ARG)
    v, k = Var("v"), Var("k")

    def nest(index, lanes=8):
        return For(v, lanes, ForKind.VECTORIZED, For(k, 4, ForKind.SERIAL, Store(
            B, index, Load(B, index, "float32") * const(2.0, "float32"))))
    out, said = _decide(nest(v + k))
    assert out.kind is ForKind.SERIAL and "another lane" in said[0]
    out, said = _decide(nest(k * 8 + v))
    assert out.kind is ForKind.VECTORIZED and not said
    out, said = _decide(nest(v * 4 + k))     # each lane its own 4 elements
    assert out.kind is ForKind.VECTORIZED and not said
    out, said = _decide(nest(v * 2 + k))     # lane 1's first meets lane 0's third
    assert out.kind is ForKind.SERIAL and said


def test_reading_what_another_lane_writes_an_extent_per_lane_or_a_buffer_inside_stay_serial():
    B = Buffer("B", "float32", (64,), Scope.ARG)
    T = Buffer("T", "float32", (4,), Scope.LOCAL)
    v, k = Var("v"), Var("k")
    shifted = For(v, 8, ForKind.VECTORIZED, For(k, 4, ForKind.SERIAL, Store(
        B, v * 4, Load(B, v * 4 + 4, "float32") + const(1.0, "float32"))))
    out, said = _decide(shifted)
    assert out.kind is ForKind.SERIAL and "which it also writes at other indices" in said[0]

    triangle = For(v, 8, ForKind.VECTORIZED, For(k, v + 1, ForKind.SERIAL, Store(
        B, v * 8 + k, const(1.0, "float32"))))
    out, said = _decide(triangle)
    assert out.kind is ForKind.SERIAL and "differs from lane to lane" in said[0]

    private = For(v, 8, ForKind.VECTORIZED, Allocate(T, seq(
        For(k, 4, ForKind.SERIAL, Store(T, k, const(1.0, "float32"))),
        Store(B, v, Load(T, const(0), "float32")))))
    out, said = _decide(private)
    assert out.kind is ForKind.SERIAL and "allocates T inside" in said[0]


def test_stores_of_one_buffer_at_several_offsets_are_checked_together():
    """Each store alone keeps lanes apart, but lane v's B[8v + k + 4] (k up to 7) meets lane
    v + 1's B[8v + 8 + k']: the offsets' spread counts.  Four stores 0-3 elements past 4v, as an
    unrolled loop leaves them, stay apart."""
    B = Buffer("B", "float32", (128,), Scope.ARG)
    v, k = Var("v"), Var("k")

    def bump(index):
        return Store(B, index, Load(B, index, "float32") + const(1.0, "float32"))
    overlapping = For(v, 8, ForKind.VECTORIZED, For(k, 8, ForKind.SERIAL, seq(
        bump(v * 8 + k), bump(v * 8 + k + 4))))
    out, said = _decide(overlapping)
    assert out.kind is ForKind.SERIAL and "another lane" in said[0]
    unrolled = For(v, 8, ForKind.VECTORIZED, For(k, 3, ForKind.SERIAL, seq(
        *(bump(v * 4 + j) for j in range(4)))))
    out, said = _decide(unrolled)
    assert out.kind is ForKind.VECTORIZED and not said
