"""Property test: random index expressions, vectorized vs serial vs a Python model.

Each example builds ``O[j, i] = select(0 <= idx < size, A[idx], -1)`` and
``if (idx % 2 == 0): P[j, i] = idx`` from a random index expression over the loop variables:
affine pieces (lane ramps with any stride), floor division and modulo (gathers), min/max.
The read is only valid under the lazy select, and ``A`` sits next to a protected page.
"""
import numpy as np
from hypothesis import given, settings, strategies as st

from cgutil import (SERIAL, VEC, Binary, Compare, IfThenElse, Store, Var, arg, bmax, bmin,
                    compile_func, const, func, guarded, ld, loop, select, seq)
from einloop.ir.expr import BinOp, CmpOp, Logical, LogicOp

SIZE, ROWS = 37, 3


def _leaf(i, j):
    return st.one_of(st.just(("i",)), st.just(("j",)),
                     st.integers(-20, 40).map(lambda c: ("c", c)))


def _tree(i, j):
    return st.recursive(
        _leaf(i, j),
        lambda sub: st.one_of(
            st.tuples(st.sampled_from(["+", "-", "max", "min"]), sub, sub),
            st.tuples(st.just("*"), sub, st.integers(-3, 4)),
            st.tuples(st.sampled_from(["//", "%"]), sub, st.sampled_from([-3, 2, 3, 5]))),
        max_leaves=5)


def build(t, i, j):
    """(einloop expression, python function of (i, j)) of tree *t*."""
    op = t[0]
    if op == "i":
        return i, lambda a, b: a
    if op == "j":
        return j, lambda a, b: b
    if op == "c":
        return const(t[1]), lambda a, b, c=t[1]: c
    x, fx = build(t[1], i, j)
    if op in ("*", "//", "%"):
        c = t[2]
        py = {"*": lambda v: v * c, "//": lambda v: v // c, "%": lambda v: v % c}[op]
        return Binary(BinOp(op), x, const(c), "int64"), lambda a, b: py(fx(a, b))
    y, fy = build(t[2], i, j)
    if op in ("max", "min"):
        e = bmax(x, y) if op == "max" else bmin(x, y)
        f = max if op == "max" else min
        return e, lambda a, b: f(fx(a, b), fy(a, b))
    e = x + y if op == "+" else x - y
    return e, (lambda a, b: fx(a, b) + fy(a, b)) if op == "+" else \
        (lambda a, b: fx(a, b) - fy(a, b))


A_VALUES = guarded(np.arange(100, 100 + SIZE, dtype=np.float32))


@settings(max_examples=40, deadline=None)
@given(tree=_tree(None, None), n=st.sampled_from([5, 16, 23, 70]))
def test_random_index_expressions(tree, n):
    i, j = Var("i"), Var("j")
    idx, model = build(tree, i, j)
    A, O, P = arg("A", "float32", SIZE), arg("O", "float32", ROWS, n), arg("P", "int64", ROWS, n)
    inside = Logical(LogicOp.AND, Compare(CmpOp.GE, idx, const(0)),
                     Compare(CmpOp.LT, idx, const(SIZE)))
    even = Compare(CmpOp.EQ, Binary(BinOp.MOD, idx, const(2), "int64"), const(0))
    body_of = lambda kind: loop(j, ROWS, loop(i, n, seq(      # noqa: E731
        Store(O, j * n + i, select(inside, ld(A, idx), const(-1.0))),
        IfThenElse(even, Store(P, j * n + i, idx))), kind))
    want_o = np.full((ROWS, n), -1, np.float32)
    want_p = np.full((ROWS, n), -7, np.int64)
    for b in range(ROWS):
        for a in range(n):
            v = model(a, b)
            if 0 <= v < SIZE:
                want_o[b, a] = A_VALUES[v]
            if v % 2 == 0:
                want_p[b, a] = v
    for kind in (SERIAL, VEC):
        k = compile_func(func("prop", (A, O, P), body_of(kind), outputs=["O", "P"]))
        o, p = np.zeros((ROWS, n), np.float32), np.full((ROWS, n), -7, np.int64)
        k(A_VALUES, o, p)
        np.testing.assert_array_equal(o, want_o, err_msg=f"{kind.value}: {idx}")
        np.testing.assert_array_equal(p, want_p, err_msg=f"{kind.value}: {idx}")
