"""Regressions of the arithmetic core (arith/, te/): branch conditions, integer wrap-around,
constant folding, literal dtypes and fused indices.  Each case runs the kernel and compares it
with NumPy, or checks the error a declaration must give."""
import textwrap

import numpy as np
import pytest

from einloop import te, create_schedule, build, lower
from einloop.arith import const_bounds, negate, refine, simplify, substitute
from einloop.errors import TEError
from einloop.ir import expr as E

from isolated import run_isolated
from oracle import run


# branch conditions -------------------------------------------------------------------------------

def test_else_branch_of_a_conjunction_is_clamped_not_assumed_in_bounds():
    A = te.placeholder((3,), name="A")
    B = te.compute((8,), lambda i: te.if_then_else(te.all(i >= 2, i < 5), 0.0, A[i - 2]),
                   name="B")
    a = np.array([4.0, 5.0, 6.0], "float32")
    got, = run(create_schedule(B), [A], [B], [a])
    i = np.arange(8)
    np.testing.assert_array_equal(got, np.where((i >= 2) & (i < 5), 0, a[np.clip(i - 2, 0, 2)]))


def test_else_branch_far_out_of_bounds_does_not_crash():
    # a read 300000 elements past the end: run in a child so a regression cannot kill pytest
    code = textwrap.dedent("""
        import numpy as np
        from einloop import te, create_schedule, build
        A = te.placeholder((13, 17, 4), name="A")
        T = te.compute((13, 300000), lambda i, j: te.if_then_else(
            te.all(i + j >= 0, i + j < 13), 0.0, A[i + j, 13, 0]), name="T")
        a = np.arange(13 * 17 * 4, dtype="float32").reshape(13, 17, 4)
        t = np.empty((13, 300000), "float32")
        build(create_schedule(T), [A, T])(a, t)
        s = np.add.outer(np.arange(13), np.arange(300000))
        want = np.where(s < 13, 0, a[np.clip(s, 0, 12), 13, 0])
        print("equal" if np.array_equal(t, want) else "different")
    """)
    assert run_isolated(code, timeout=300).strip() == "equal"


def test_negate_is_exact_for_integers_and_keeps_float_comparisons_whole():
    i = E.Var("i")
    x = te.placeholder((1,), name="X")[0]
    assert str(negate(te.all(i >= 2, i < 5))) == "i < 2 or i >= 5"
    assert str(negate(~(i < 3))) == "i < 3"
    assert isinstance(negate(x < 1.0), E.Not)          # NaN: not (x < 1) is not x >= 1


def test_refine_is_sound_for_or_min_max_and_multi_variable_conditions():
    i, j = E.Var("i"), E.Var("j")
    r = {i: (0, 9), j: (0, 9)}
    assert refine(r, te.any(i < 2, i > 7))[i] == (0, 9)
    assert refine(r, te.min(i, 3) >= 2)[i] == (2, 9)
    assert refine(r, te.max(i, j) < 4) == {i: (0, 3), j: (0, 3)}
    assert refine(r, i + j > 16) == {i: (8, 9), j: (8, 9)}
    assert refine(r, te.all(i > 4, i < 3)) is None                      # never holds
    assert refine(r, (i * 2) < 5)[i] == (0, 2)
    assert refine(r, i.astype("int8") < 3) == r                         # narrow: nothing


def test_minmax_in_condition_declares_and_runs():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.if_then_else(te.min(i, 3) < 2, A[i + 1], 0.0), name="B")
    a = np.arange(1, 9, dtype="float32")
    got, = run(create_schedule(B), [A], [B], [a])
    i = np.arange(8)
    np.testing.assert_array_equal(got, np.where(np.minimum(i, 3) < 2, a[np.clip(i + 1, 0, 7)], 0))


def test_simplify_and_bounds_accept_unknown_ranges():
    i = E.Var("i")
    e = te.max(i + 1, i) - te.min(i % 4, 7)
    assert str(simplify(e)) == "max(i + 1, i) - i % 4"
    assert const_bounds(i % 4, None) == (0, 3)
    assert const_bounds(i, None) is None


def test_compute_at_of_a_producer_read_directly_and_through_min():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2, name="B")
    C = te.compute((10,), lambda i: B[i] + B[te.min(i + 1, 9)], name="C")
    s = create_schedule(C)
    s[B].compute_at(s[C], s[C].op.axis[0])
    a = np.arange(10, dtype="float32")
    got, = run(s, [A], [C], [a])
    np.testing.assert_array_equal(got, 2 * a + 2 * a[np.minimum(np.arange(10) + 1, 9)])


def test_read_in_a_branch_that_never_runs_is_accepted():
    A = te.placeholder((4, 1), name="A")
    B = te.compute((1,), lambda i: te.if_then_else(i >= 2, A[0, i * 2], 0.0), name="B")
    got, = run(create_schedule(B), [A], [B], [np.ones((4, 1), "float32")])
    np.testing.assert_array_equal(got, [0.0])


def test_contradictory_guards_do_not_reject_a_read():
    A = te.placeholder((4,), name="A")
    B = te.compute((8,), lambda i: te.if_then_else(te.all(i + 3 < 2, i > 5), A[i + 9], 1.0),
                   name="B")
    got, = run(create_schedule(B), [A], [B], [np.zeros(4, "float32")])
    np.testing.assert_array_equal(got, np.ones(8))


def test_rejection_names_a_point_where_the_read_runs():
    A = te.placeholder((6,), name="A")
    with pytest.raises(TEError, match=r"reads A\[i \+ 3\] out of bounds: index i \+ 3 along "
                                      r"axis 0 of A reaches up to 7 \(at i=4\)"):
        te.compute((8,), lambda i: te.if_then_else(i < 5, A[i + 3], 0.0), name="B")


# integer wrap-around ------------------------------------------------------------------------------

def test_narrowing_casts_in_comparisons_are_not_folded():
    T = te.compute((4,), lambda k: te.if_then_else(
        (k - 1).astype("uint8") < te.const(7, "uint8"), te.const(1, "int32"), te.const(0, "int32")),
        name="T")
    U = te.compute((4,), lambda k: te.if_then_else(
        (k + (2 ** 31 - 2)).astype("int32") > te.const(0, "int32"), te.const(1, "int32"),
        te.const(0, "int32")), name="U")
    t, u = run(create_schedule([T, U]), [], [T, U], [])
    k = np.arange(4)
    np.testing.assert_array_equal(t, np.where((k - 1).astype(np.uint8) < 7, 1, 0))
    np.testing.assert_array_equal(u, np.where((k + (2 ** 31 - 2)).astype(np.int32) > 0, 1, 0))


def test_floor_division_of_a_wrapped_cast_stays_floor_division():
    B = te.compute((10,), lambda i: (i + (2 ** 31 - 5)).astype("int32") // 2, name="B")
    assert "tdiv" not in str(lower(create_schedule(B), [B]))
    got, = run(create_schedule(B), [], [B], [])
    np.testing.assert_array_equal(got, (np.arange(10) + (2 ** 31 - 5)).astype(np.int32) // 2)


def test_index_through_a_wrapping_int8_cast_is_clamped():
    A = te.placeholder((130,), name="A")
    C = te.compute((10,), lambda i: A[(i + 120).astype("int8")], name="C")
    a = np.arange(130, dtype="float32")
    got, = run(create_schedule(C), [A], [C], [a])
    want = a[np.clip((np.arange(10) + 120).astype(np.int8).astype(np.int64), 0, 129)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype,lo,hi,want", [
    ("int8", 120, 129, (-128, 127)),          # crosses the wrap boundary: the whole range
    ("int8", 130, 140, (-126, -116)),         # wholly past it: shifted exactly
    ("uint8", -1, 2, (0, 255)),
    ("uint8", -10, -5, (246, 251)),
    ("int32", 2 ** 31 - 2, 2 ** 31 + 1, (-2 ** 31, 2 ** 31 - 1)),
    ("int16", 5, 9, (5, 9)),
])
def test_bounds_of_a_cast_follow_wrap_around(dtype, lo, hi, want):
    i = E.Var("i")
    assert const_bounds(i.astype(dtype), {i: (lo, hi)}) == want


# constant folding --------------------------------------------------------------------------------

def test_unrolled_uint8_reduction_matches_the_loop_and_numpy():
    k = te.reduce_axis((0, 8), name="k")
    T = te.compute((1,), lambda i: te.sum((k - 3).astype("uint8") // te.const(2, "uint8"), axis=k),
                   name="T")
    want = ((np.arange(8) - 3).astype(np.uint8) // np.uint8(2)).sum(dtype=np.uint8)
    s = create_schedule(T)
    s[T].unroll(s[T].op.reduce_axis[0])
    assert "uint8(-" not in str(lower(s, [T]))
    got, = run(s, [], [T], [])
    assert got[0] == want


@pytest.mark.parametrize("expr,want", [
    (lambda: te.const(2 ** 31 - 1, "int32") + te.const(1, "int32"), -2 ** 31),
    (lambda: te.const(100, "int8") * te.const(3, "int8"), 44),
    (lambda: te.const(3, "uint8") - te.const(5, "uint8"), 254),
    (lambda: te.const(-3, "int64").astype("uint8"), 253),
    (lambda: te.const(-2 ** 31, "int32") // te.const(-1, "int32"), -2 ** 31),
    (lambda: te.const(-2 ** 31, "int32") % te.const(-1, "int32"), 0),
    (lambda: te.const(7, "int16") // te.const(0, "int16"), 0),
    (lambda: te.const(7, "int16") % te.const(0, "int16"), 0),
    (lambda: te.const(-7, "int64") // te.const(2, "int64"), -4),
    (lambda: E.Binary(E.BinOp.TDIV, te.const(-7), te.const(2), "int64"), -3),
    (lambda: E.Binary(E.BinOp.TMOD, te.const(-7), te.const(2), "int64"), -1),
    (lambda: E.Binary(E.BinOp.TDIV, te.const(-2 ** 63 + 1), te.const(3), "int64"),
     -((2 ** 63 - 1) // 3)),
    (lambda: te.const(300, "int64").astype("int8") > te.const(0, "int8"), True),
    (lambda: te.const(0.1, "float32").astype("float64"), float(np.float32(0.1))),
    (lambda: te.const(0.1, "float64").astype("float16"), float(np.float16(0.1))),
    (lambda: te.const(0.1, "float32") + te.const(0.2, "float32"),
     float(np.float32(0.1) + np.float32(0.2))),
    (lambda: te.const(2.9, "float32").astype("int8"), 2),
    (lambda: te.const(-2.9, "float64").astype("int32"), -2),
    (lambda: te.const(True).astype("int8") + te.const(1, "int8"), 2),
])
def test_constant_folding_uses_the_dtype_semantics(expr, want):
    e = expr()
    folded = simplify(e)
    assert isinstance(folded, E.Const) and folded.value == want, (str(e), str(folded))


@pytest.mark.parametrize("value,dtype", [(1e10, "int32"), (-1.0, "uint8"),
                                         (float("nan"), "int64")])
def test_float_to_int_casts_outside_the_range_are_left_to_run_time(value, dtype):
    assert isinstance(simplify(te.const(value, "float64").astype(dtype)), E.Cast)


def test_folded_int32_overflow_in_a_condition_matches_run_time():
    C = te.compute((1,), lambda i: te.if_then_else(
        te.const(2 ** 31 - 1, "int32") + te.const(1, "int32") > te.const(0, "int32"),
        te.const(1, "int32"), te.const(0, "int32")), name="C")
    got, = run(create_schedule(C), [], [C], [])
    assert got[0] == 0


def test_float32_constant_cast_to_float64_runs_as_in_numpy():
    U = te.compute((1,), lambda i: te.const(0.1, "float32").astype("float64"), name="U")
    got, = run(create_schedule(U), [], [U], [])
    assert got[0] == float(np.float32(0.1))


def test_constants_out_of_their_dtype_range_are_errors():
    with pytest.raises(TEError, match=r"constant 300 is out of the range of uint8 \(0\.\.255\)"):
        te.const(300, "uint8")
    U = te.placeholder((2,), "int8", name="U")
    with pytest.raises(TEError, match=r"the literal 200 meets an int8 expression but int8 holds "
                                      r"only -128\.\.127"):
        te.compute((2,), lambda i: U[i] + 200, name="V")


def test_numpy_scalars_make_constants():
    assert te.const(np.int64(256)).dtype == "int64"
    assert te.const(np.bool_(True)).value is True
    assert te.const(np.float32(0.5), "float64").value == 0.5


# literal dtypes ----------------------------------------------------------------------------------

def test_power_of_a_float64_expression_by_a_literal():
    X = te.placeholder((4,), "float64", name="X")
    Y = te.compute((4,), lambda i: te.power(X[i], 1.5) + te.power(2, X[i]), name="Y")
    x = np.array([0.5, 1.0, 2.0, 3.0])
    got, = run(create_schedule(Y), [X], [Y], [x])
    np.testing.assert_allclose(got, x ** 1.5 + 2.0 ** x, rtol=1e-9)


LITERAL_USES = [lambda x: te.maximum(x, 3), lambda x: te.minimum(3, x), lambda x: te.max(x, 3),
                lambda x: te.if_then_else(x > 1, x, 3), lambda x: x + 3, lambda x: 3 - x,
                lambda x: x * 2]


@pytest.mark.parametrize("make", LITERAL_USES + [lambda x: x // 3, lambda x: 7 % x])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32"])
def test_int_literals_take_the_dtype_of_the_int_expression_they_meet(make, dtype):
    assert make(te.placeholder((4,), dtype, name="X")[0]).dtype == dtype


@pytest.mark.parametrize("make", LITERAL_USES + [lambda x: te.power(x, 2), lambda x: x / 2])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_literals_take_the_dtype_of_the_float_expression_they_meet(make, dtype):
    assert make(te.placeholder((4,), dtype, name="X")[0]).dtype == dtype


# fused indices -----------------------------------------------------------------------------------

def test_fused_then_split_elementwise_loop_gets_an_affine_index_and_no_gather():
    A = te.placeholder((4, 56, 56), name="A")
    B = te.compute(A.shape, lambda n, h, w: te.exp(A[n, h, w]) * 2, name="B")
    s = create_schedule(B)
    f = s[B].fuse(*s[B].op.axis)
    o, i = s[B].split(f, factor=16)
    s[B].parallel(o)
    s[B].vectorize(i)
    text = str(lower(s, [A, B]))
    # the affine index, in either order of its two terms
    assert ("B[n.h.fused.w.fused.outer * 16 + n.h.fused.w.fused.inner]" in text
            or "B[n.h.fused.w.fused.inner + n.h.fused.w.fused.outer * 16]" in text), text
    assert "tdiv" not in text and "tmod" not in text
    kernel = build(s, [A, B])
    assert "gather" not in kernel.get_source("llvm")
    a = np.random.default_rng(0).uniform(-1, 1, A.shape).astype("float32")
    b = np.empty(A.shape, "float32")
    kernel(a, b)
    np.testing.assert_allclose(b, np.exp(a) * 2, rtol=2e-6)


@pytest.mark.parametrize("shape,factor", [((3, 5, 7), 4), ((2, 8, 16), 16), ((6, 10), 3)])
def test_fused_split_loops_compute_what_numpy_does(shape, factor):
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *ix: A[ix] + 1, name="B")
    s = create_schedule(B)
    o, i = s[B].split(s[B].fuse(*s[B].op.axis), factor=factor)
    s[B].vectorize(i)
    a = np.random.default_rng(1).uniform(-1, 1, shape).astype("float32")
    got, = run(s, [A], [B], [a])
    np.testing.assert_array_equal(got, a + 1)


@pytest.mark.parametrize("make,want", [
    (lambda x: (x // 8) * 8 + x % 8, "x"),
    (lambda x: ((x // 4) % 3) * 4 + x % 4, "x % 12"),
    (lambda x: (x // 56 // 56) * 3136 + ((x // 56) % 56) * 56 + x % 56, "x"),
    (lambda x: (x // 8) * 16 + (x % 8) * 2, "x * 2"),
    (lambda x: (x // 8) * 8 + x % 4, None),                       # not a pair: unchanged value
])
def test_div_mod_pairs_fold_back(make, want):
    x = E.Var("x")
    e = make(x)
    got = simplify(e)
    if want is not None:
        assert str(got) == want
    for v in range(-40, 40):
        assert _value(got, x, v) == make(v)          # Python ints: floor semantics


def test_truncating_div_mod_pairs_fold_back_where_the_dividend_is_non_negative():
    x = E.Var("x")
    div = E.Binary(E.BinOp.TDIV, x, E.const(8), "int64")
    e = E.Binary(E.BinOp.ADD, E.Binary(E.BinOp.MUL, div, E.const(8), "int64"),
                 E.Binary(E.BinOp.TMOD, x, E.const(8), "int64"), "int64")
    assert str(simplify(e, {x: (0, 100)})) == "x"
    assert str(simplify(e, {x: (-5, 100)})) != "x"


def _value(e, x, v):
    return simplify(substitute(e, {x: E.const(v)})).value
