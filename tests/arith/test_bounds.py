"""Interval analysis and range facts (einloop.arith.bounds and .refine): constant bounds with each
dtype's wrap-around, symbolic regions, prove, negate, refine and holds_on, on focused cases."""
import pytest

from einloop import te
from einloop.arith import const_bounds, holds_on, negate, prove, refine, region_of
from einloop.ir import expr as E
from einloop.ir.expr import BinOp, CmpOp

i, j, x = E.Var("i"), E.Var("j"), E.Var("x")
R = {i: (0, 9), j: (-3, 5)}


def tdiv(a, b):
    return E.Binary(BinOp.TDIV, a, E.const(b), "int64")


def tmod(a, b):
    return E.Binary(BinOp.TMOD, a, E.const(b), "int64")


# const_bounds ----------------------------------------------------------------------------------

@pytest.mark.parametrize("e, want", [
    (i * 2 + 1, (1, 19)),
    (i - j, (-5, 12)),
    (i * j, (-27, 45)),
    (i // 4, (0, 2)),
    (j // 2, (-2, 2)),
    (i // -3, (-3, 0)),
    (i % 4, (0, 3)),
    (i % 16, (0, 9)),                      # a % b == a when 0 <= a < b
    (j % 4, (0, 3)),
    (j % -4, (-3, 0)),                     # floor: the remainder has the divisor's sign
    (tdiv(j, 2), (-1, 2)),                 # truncating: toward zero
    (tmod(j, 4), (-3, 3)),                 # truncating: the dividend's sign
    (te.max(i, j), (0, 9)),
    (te.min(i, j), (-3, 5)),
    (te.if_then_else(i < 3, j, i + 20), (-3, 29)),
    (te.abs(j), (0, 5)),
    (i < j, (0, 1)),
])
def test_const_bounds(e, want):
    assert const_bounds(e, R) == want


def test_division_by_a_range_containing_zero_includes_numpy_zero():
    assert const_bounds(i // j, {i: (10, 20), j: (0, 0)}) == (0, 0)
    assert const_bounds(i // j, {i: (10, 20), j: (-2, 5)}) == (-20, 20)
    assert const_bounds(i % j, {i: (10, 20), j: (0, 0)}) == (0, 0)


def test_unknown_int64_is_none_but_narrow_types_are_their_range():
    assert const_bounds(x + 1, R) is None
    assert const_bounds(x.astype("int8"), R) == (-128, 127)
    assert const_bounds(x.astype("uint8"), None) == (0, 255)
    assert const_bounds(E.const(1.5).astype("int32"), None) == (-2 ** 31, 2 ** 31 - 1)


@pytest.mark.parametrize("lo, hi, dtype, want", [
    (120, 127, "int8", (120, 127)),        # fits
    (120, 129, "int8", (-128, 127)),       # a wrap boundary inside: the full range
    (130, 135, "int8", (-126, -121)),      # wholly past it: shifted as a whole
    (250, 260, "uint8", (0, 255)),
    (256, 260, "uint8", (0, 4)),
    (-3, -1, "uint8", (253, 255)),
    (1, 5, "bool", (1, 1)),                # nonzero is True
    (0, 5, "bool", (0, 1)),
    (-3, -1, "bool", (1, 1)),
])
def test_casts_wrap_around(lo, hi, dtype, want):
    assert const_bounds(x.astype(dtype), {x: (lo, hi)}) == want


def test_narrow_arithmetic_wraps_around():
    a = x.astype("int8") + E.const(100, "int8")
    assert const_bounds(a, {x: (0, 10)}) == (100, 110)
    assert const_bounds(a, {x: (20, 30)}) == (-128, 127)          # 120..130 crosses 127
    assert const_bounds(a, {x: (30, 40)}) == (-126, -116)         # 130..140, shifted whole
    m = x.astype("uint8") * E.const(2, "uint8")
    assert const_bounds(m, {x: (128, 130)}) == (0, 4)


def test_float_and_unknown_forms_have_no_bounds():
    assert const_bounds(E.const(2.5), None) is None
    assert const_bounds(E.Var("f", "float32"), None) is None


# region_of ---------------------------------------------------------------------------------------

def test_region_of_tracks_fixed_variables_symbolically():
    start, extent = region_of(i * 4 + j, {j: (0, 3)})
    assert (str(start), extent) == ("i * 4 + 0", 4)
    start, extent = region_of((i * 4 + j) // 2, {j: (0, 3)})
    assert (str(start), extent) == ("(i * 4 + 0) // 2", 3)       # the start may be odd
    start, extent = region_of(i - j * 2, {j: (0, 3)})
    assert (str(start), extent) == ("i - (0 * 2 + 6)", 7)
    assert region_of(i + 1, {j: (0, 3)})[1] == 1                     # no varying variable


def test_region_of_falls_back_to_constant_bounds_when_only_varying():
    start, extent = region_of(j % 2, {j: (0, 7)})
    assert (str(start), extent) == ("0", 2)
    start, extent = region_of(i % 2 + j % 2, {j: (0, 7)})
    assert (str(start), extent) == ("i % 2 + 0", 2)
    assert region_of(i * j, {j: (0, 7)}) is None                     # mixed, not tracked


def test_region_of_a_remainder_of_fixed_and_varying_variables_is_every_residue():
    """(i + j) % 4 with i fixed, j varying: wherever it starts it stays in 0..3 (a transposed
    convolution's tap (y.res + 1) % 2 + 2 * t when y.res varies inside the attach loop)."""
    start, extent = region_of((i + j) % 4, {j: (0, 1)})
    assert (str(start), extent) == ("0", 4)
    start, extent = region_of((i + j) % 2 + j * 2, {j: (0, 1)})
    assert (str(start), extent) == ("0 + 0 * 2", 4)
    assert region_of((i * j) % 4, {j: (0, 1)}) is None              # its operand is not tracked


# prove / negate --------------------------------------------------------------------------------

@pytest.mark.parametrize("cond, want", [
    (i < 10, True), (i < 5, None), (i > 20, False), (i >= 0, True), (i <= -1, False),
    (i + j < 15, True), (i + j < 14, None), (i == 3, None), (i != 12, True),
    ((i < 10) & (j < 10), True), ((i < 5) & (j > 10), False), ((i < 5) | (j < 10), True),
    (E.Not(i < 10), False), (E.const(True), True),
])
def test_prove(cond, want):
    assert prove(cond, R) is want


def test_prove_equality_of_a_point_and_unknown_values():
    assert prove(i == 3, {i: (3, 3)}) is True
    assert prove(x < 3, R) is None
    assert prove(x < 3, None) is None


def test_negate_flips_integer_comparisons_and_keeps_float_ones_as_not():
    assert str(negate(i < 3)) == "i >= 3"
    assert str(negate((i < 3) & (j == 2))) == "i >= 3 or j != 2"
    f = E.Var("f", "float32")
    n = negate(f < E.const(1.0))
    assert isinstance(n, E.Not) and str(n) == "not (f < 1.0f)"
    assert negate(E.Not(i < 3)).op is CmpOp.LT


# refine / holds_on --------------------------------------------------------------------------------

@pytest.mark.parametrize("cond, want", [
    (i < 10, {i: (0, 9)}),
    (2 * i + 1 >= 11, {i: (5, 99)}),
    (10 - i >= 3, {i: (0, 7)}),
    (i * 3 == 12, {i: (4, 4)}),
    (E.Not(i < 10), {i: (10, 99)}),
    ((i > 10) & (i < 20), {i: (11, 19)}),
    ((i < 10) | (i > 90), {i: (0, 99)}),                    # the hull of the two branches
    (te.min(i, 50) >= 20, {i: (20, 99)}),
    (te.max(i, 50) <= 60, {i: (0, 60)}),
    (i % 7 < 3, {i: (0, 99)}),                              # not linear in i: nothing refined
])
def test_refine_one_variable(cond, want):
    assert refine({i: (0, 99)}, cond) == want


def test_refine_with_the_rest_bounded_by_intervals():
    assert refine({i: (0, 99), j: (0, 5)}, i + j < 10) == {i: (0, 9), j: (0, 5)}
    assert refine({i: (0, 99), j: (0, 5)}, i - j > 90) == {i: (91, 99), j: (0, 5)}


def test_refine_finds_dead_branches():
    assert refine({i: (0, 9)}, i > 20) is None
    assert refine({i: (0, 99)}, (i > 10) & (i < 5)) is None
    assert refine({i: (0, 9)}, i < 20) == {i: (0, 9)}
    assert refine(None, x < 3) == {}


def test_holds_on_gives_the_iterations_where_a_condition_is_decided():
    ranges = {i: (0, 20), j: (0, 3)}
    assert holds_on(i + j < 10, i, ranges) == (0, 6)         # for every j
    assert holds_on(i - 1 >= 0, i, ranges) == (1, 20)
    assert holds_on(i == 4, i, ranges) == (4, 4)
    assert holds_on(i > 30, i, ranges) is None
    assert holds_on((i < 3) | (i > 15), i, ranges) == (16, 20)    # the wider side
    assert holds_on(i + 2 <= 10, i, ranges) == (0, 8)
    assert holds_on(te.min(i, 10) < 5, i, ranges) == (0, 4)
