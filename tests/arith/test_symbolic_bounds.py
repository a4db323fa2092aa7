"""Bounds over symbolic extents: what is proven holds for every value, and nothing else is."""
import itertools

import pytest

from einloop import te
from einloop.arith.symbolic import affine_bound, provably_inside, provably_nonnegative
from einloop.ir import expr as E


@pytest.fixture
def nm():
    return te.size_var("n"), te.var("m")


def test_affine_bounds_are_forms_in_the_extents(nm):
    n, m = nm
    i, k = E.Var("i"), E.Var("k")
    ranges = {i: (0, n - 1), k: (0, 2)}
    assert affine_bound(i + k, ranges, True) == {None: 1, n: 1}
    assert affine_bound(i * 2 - k, ranges, False) == {None: -2}
    assert affine_bound(i // 2, ranges, True) is None          # not affine
    assert affine_bound(i + E.Var("other"), ranges, True) is None


@pytest.mark.parametrize("make, extent, proven", [
    (lambda i, k, n, m: i + k, lambda n, m: n + 2, True),      # a 3-wide window over n + 2
    (lambda i, k, n, m: i + k, lambda n, m: n + 1, False),
    (lambda i, k, n, m: n - 1 - i, lambda n, m: n, True),      # reversal
    (lambda i, k, n, m: i + 1, lambda n, m: n, False),
    (lambda i, k, n, m: i, lambda n, m: m, False),              # another extent: unknown
    (lambda i, k, n, m: k, lambda n, m: n, False),              # n may be 1 < 3
    (lambda i, k, n, m: k * 0, lambda n, m: n, True),           # n >= 1 (a size variable)
    (lambda i, k, n, m: k * 0, lambda n, m: m, False),          # m may be 0
])
def test_proofs_agree_with_every_small_value(nm, make, extent, proven):
    """Each claim is checked by brute force at n in 1..6, m in 0..6 (i < n, k < 3): a proven
    index is inside at every point; an unproven one is outside at some point of some size."""
    n, m = nm
    i, k = E.Var("i"), E.Var("k")
    ix, ext = make(i, k, n, m), extent(n, m)
    assert provably_inside(E.as_expr(ix), {i: (0, n - 1), k: (0, 2)}, ext) == proven
    outside = False
    for nv, mv in itertools.product(range(1, 7), range(0, 7)):
        size = _value(ext, {n: nv, m: mv})
        for iv, kv in itertools.product(range(nv), range(3)):
            value = _value(ix, {i: iv, k: kv, n: nv, m: mv})
            outside |= not 0 <= value < size
    assert outside != proven


def test_nonnegative_needs_every_coefficient_nonnegative(nm):
    n, m = nm
    assert provably_nonnegative({None: -1, n: 1})            # n - 1 >= 0 as n >= 1
    assert not provably_nonnegative({None: -1, m: 1})        # m - 1 < 0 at m = 0
    assert not provably_nonnegative({None: 100, n: -1})      # n may exceed 100
    assert not provably_nonnegative(None)


def _value(e, point):
    from einloop.arith import simplify, substitute
    e = E.as_expr(e)
    c = simplify(substitute(e, {v: E.const(x) for v, x in point.items()
                                if not isinstance(v, E.ShapeVar)}))
    for v, x in point.items():           # shape variables are not substituted by substitute()
        if isinstance(v, E.ShapeVar):
            c = _replace(c, v, x)
    c = simplify(c)
    assert isinstance(c, E.Const), c
    return c.value


def _replace(e, var, value):
    from einloop.arith import transform
    return transform(e, lambda x: E.const(value) if x is var else None)
