"""Linear forms (einloop.arith.linear): the form itself, its rebuilding, the div/mod pairs of fused
and split loops folded back, and the affine questions other passes ask (stride of a variable,
stride over several stepping variables, affinity)."""
import pytest

from einloop.arith import simplify, substitute
from einloop.arith.linear import (affine_in, from_linear, is_affine, recombine, split_multiple,
                                  stride_in, terms_of)
from einloop.ir import expr as E
from einloop.ir.expr import BinOp
from einloop.ir.stmt import Buffer, Load, Scope

i, j, y = E.Var("i"), E.Var("j"), E.Var("y")
A = Buffer("A", "int64", (64,), Scope.ARG)


def as_dict(terms):
    """A Terms as {name or None: coefficient}, atoms named by their text."""
    return {None if a is None else str(a): k for a, k in terms.items()}


# the form -------------------------------------------------------------------------------------

def test_terms_of_collects_coefficients_and_constant():
    assert as_dict(terms_of(3 * i + j * 2 - i + 5)) == {"i": 2, "j": 2, None: 5}


def test_terms_of_merges_structurally_equal_atoms():
    t = terms_of(i // 4 + (i // 4) * 3 - 2 * (j % 3))
    assert as_dict(t) == {"i // 4": 4, "j % 3": -2}
    assert len(t) == 2


def test_terms_of_keeps_a_cancelled_atom_with_coefficient_zero():
    assert as_dict(terms_of(i * j - i * j + 1)) == {"i * j": 0, None: 1}


def test_coefficients_wrap_around_as_int64():
    assert as_dict(terms_of(i * (2 ** 62) * 4)) == {"i": 0}
    assert as_dict(terms_of(i * (2 ** 62) * 2)) == {"i": -2 ** 63}


@pytest.mark.parametrize("e, text", [
    (i - j * 2 + 3, "i - j * 2 + 3"),
    (0 - i, "0 - i"),
    (i * -3 + 1, "i * -3 + 1"),
    (j - j + 7, "7"),
    (i + j - 4, "i + j - 4"),
])
def test_from_linear_rebuilds_canonical_text(e, text):
    assert str(from_linear(terms_of(e))) == text


def test_split_multiple_separates_the_multiple_of_c():
    q, r = split_multiple(8 * i + 4 * j + 3 + i % 3, 4)
    assert str(q) == "i * 2 + j"
    assert str(r) == "i % 3 + 3"


# fused and split indices ---------------------------------------------------------------------

@pytest.mark.parametrize("e, text", [
    ((y // 8) * 8 + y % 8, "y"),                                           # fuse of a split
    ((y // 8) * 24 + (y % 8) * 3 + 5, "y * 3 + 5"),                        # scaled pair
    ((y // 4 // 2) * 8 + ((y // 4) % 2) * 4 + y % 4, "y"),                 # split twice
    (((y // 4) % 2) * 4 + y % 4, "y % 8"),                                 # inner pair of it
    ((y // 8) * 8 + y % 4, "y // 8 * 8 + y % 4"),                          # not a pair: kept
])
def test_fused_and_split_indices_recombine(e, text):
    assert str(simplify(e)) == text


def test_a_fused_axis_whose_outer_part_has_extent_one_loses_its_divisions():
    # fuse(a, y, x) with a of extent 1 (a batch of one), 56 x 56, index of [a, c, y, x]: the
    # merged y // 56 // 56 is 0 over the fused range, so nothing is divided (a division here
    # turned a vector load into a gather)
    o, lane, c = E.Var("o"), E.Var("lane"), E.Var("c")
    f = o * 16 + lane
    e = ((f // 56 // 56 * 64 + c) * 56 + f // 56 % 56) * 56 + f % 56
    ranges = {o: (0, 195), lane: (0, 15), c: (0, 63)}
    assert str(simplify(e, ranges)) == "c * 3136 + o * 16 + lane"
    # one step past the range: the division must stay
    assert "//" in str(simplify(f // 56 // 56, {o: (0, 196), lane: (0, 15)}))


@pytest.mark.parametrize("e, ranges, text", [
    # a lane beside a multiple of 16, divided by 784 = 49 * 16: the lane cannot change it
    (lambda o, l: (o * 16 + l) // 784, {"l": (0, 15)}, "o * 16 // 784"),
    (lambda o, l: (o * 16 + l) % 784, {"l": (0, 15)}, "o * 16 % 784 + l"),
    # two small terms together below gcd(784, 32) = 16
    (lambda o, l: (o * 32 + l * 2 + 3) // 784, {"l": (0, 6)}, "o * 32 // 784"),
    # the small part reaches the gcd: kept
    (lambda o, l: (o * 16 + l) // 784, {"l": (0, 16)}, "(o * 16 + l) // 784"),
    # the small part may be negative: kept
    (lambda o, l: (o * 16 + l) // 784, {"l": (-1, 14)}, "(o * 16 + l) // 784"),
    # the rest simplifies further (a regression: that result was tested for truth)
    (lambda o, l: (o * 2048 + l) // 256, {"l": (0, 15)}, "o * 8"),
    # gcd(784, 24) = 8 only: kept
    (lambda o, l: (o * 24 + l) // 784, {"l": (0, 15)}, "(o * 24 + l) // 784"),
])
def test_terms_too_small_to_cross_a_multiple_of_the_divisor_are_dropped(e, ranges, text):
    o, lane = E.Var("o"), E.Var("l")
    bounds = {o: (0, 10_000), lane: ranges["l"]}
    assert str(simplify(e(o, lane), bounds)) == text
    got = simplify(e(o, lane), bounds)
    for ov in range(0, 3000, 7):         # and it computes the same
        for lv in range(ranges["l"][0], ranges["l"][1] + 1):
            env = {o: E.const(ov), lane: E.const(lv)}
            assert simplify(substitute(got, env)).value == \
                simplify(substitute(e(o, lane), env)).value


def test_recombine_uses_the_floor_view_it_is_given():
    e = (y // 8) * 8 + y % 8
    terms = terms_of(e)
    recombine(terms, lambda a: None, lambda v, c: v % c)            # no atom is a floor div/mod
    assert str(from_linear(terms)) == str(e)

    def view(a):
        if isinstance(a, E.Binary) and a.op in (BinOp.FLOORDIV, BinOp.MOD):
            return a.op, a.a, a.b.value
        return None
    terms = terms_of(e)
    recombine(terms, view, lambda v, c: v % c)
    assert as_dict(terms) == {"y": 1}


def test_truncating_pair_recombines_only_for_a_non_negative_dividend():
    t = E.Binary(BinOp.ADD,
                 E.Binary(BinOp.MUL, E.Binary(BinOp.TDIV, y, E.const(8), "int64"), E.const(8),
                          "int64"),
                 E.Binary(BinOp.TMOD, y, E.const(8), "int64"), "int64")
    assert str(simplify(t, {y: (0, 100)})) == "y"
    assert str(simplify(t, {y: (-1, 100)})) == "tdiv(y, 8) * 8 + tmod(y, 8)"


# affine questions ------------------------------------------------------------------------------

def test_affine_in_gives_coefficient_and_rest():
    k, rest = affine_in(3 * i + j * 2 + 1, i)
    assert k == 3 and str(rest) == "j * 2 + 1"
    k, rest = affine_in(i * 4 - i * 4 + j, i)
    assert k == 0 and str(rest) == "j"


def test_affine_in_a_variable_that_does_not_occur():
    k, rest = affine_in(j * 5 + 2, i)
    assert k == 0 and str(rest) == "j * 5 + 2"


@pytest.mark.parametrize("e", [i // 2 + i, i * j, Load(A, i, "int64") + 1, (i % 4) * 4])
def test_affine_in_is_none_where_the_variable_is_not_linear(e):
    assert affine_in(e, i) is None


def test_affine_in_only_answers_for_int64():
    assert affine_in(i.astype("int32") * 2, i) is None


def test_stride_in_over_stepping_variables():
    e = i * 4 + j * 16 + 3
    assert stride_in(e, {i: 1}) == 4
    assert stride_in(e, {j: 1}) == 16
    assert stride_in(e, {i: 1, j: 2}) == 36
    assert stride_in(j * 16 + 3, {i: 1}) == 0               # lane-invariant
    assert stride_in(i - i, {i: 1}) == 0


def test_stride_in_is_none_where_not_affine():
    assert stride_in(i // 4, {i: 1}) is None
    assert stride_in(Load(A, i, "int64") * 2, {i: 1}) is None
    assert stride_in(i * j, {i: 1}) is None
    # as the vector emitter: a non-linear atom is a vector even if its coefficient cancels
    assert stride_in(i // 4 - i // 4, {i: 1}) is None


def test_stride_in_a_variable_that_varies_without_a_stride():
    # j bound to a gather: None where j occurs, an int where it does not
    assert stride_in(j + i, {i: 1, j: None}) is None
    assert stride_in(i * 2 + 1, {i: 1, j: None}) == 2


def test_stride_in_other_dtypes():
    narrow = i.astype("int32") + E.const(1, "int32")
    assert stride_in(narrow, {i: 1}) is None
    assert stride_in(narrow, {j: 1}) == 0


@pytest.mark.parametrize("e, want", [
    (2 * i - j + 3, True), (E.const(5), True), (i, True), (i * 0 + j, True),
    (i * j, False), (i // 2, False), (i.astype("int32").astype("int64"), False),
    (Load(A, i, "int64"), False), (E.const(1.5), False),
])
def test_is_affine(e, want):
    assert is_affine(e) is want
