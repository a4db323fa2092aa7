"""Conditions in loops: masked stores, lazy selects guarding out-of-bounds reads.

Arrays from ``guarded`` sit next to an inaccessible page: a read or write that a mask or a lazy
select should have prevented crashes the test process instead of passing silently.
"""
import numpy as np
import pytest

from cgutil import (SERIAL, VEC, Binary, Compare, IfThenElse, Store, Var, arg, compile_func,
                    const, func, guarded, ld, loop, select, seq)
from einloop.ir.expr import BinOp, CmpOp, Logical, LogicOp

KINDS = [SERIAL, VEC]
ids = lambda k: k.value   # noqa: E731


@pytest.mark.parametrize("n", [16, 100])
@pytest.mark.parametrize("kind", KINDS, ids=ids)
def test_lane_dependent_if_is_a_masked_store(kind, n):
    A, C = arg("A", "float32", n), arg("C", "float32", n)
    i = Var("i")
    cond = Compare(CmpOp.EQ, Binary(BinOp.MOD, i, const(3), "int64"), const(0))
    body = IfThenElse(cond, Store(C, i, ld(A, i) * 2.0), Store(C, i, const(-1.0)))
    k = compile_func(func("ifmask", (A, C), loop(i, n, body, kind)))
    a = np.arange(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    k(a, c)
    np.testing.assert_array_equal(c, np.where(np.arange(n) % 3 == 0, a * 2, -1))
    if kind is VEC:
        assert "llvm.masked.store" in k.get_source("llvm-unopt")


@pytest.mark.parametrize("kind", KINDS, ids=ids)
def test_if_guarding_an_out_of_bounds_store_and_load(kind):
    # for i in range(16): if i < 5: C[i] = A[i] + 1   -- A and C have only 5 elements
    A, C = arg("A", "float32", 5), arg("C", "float32", 5)
    i = Var("i")
    body = IfThenElse(Compare(CmpOp.LT, i, const(5)), Store(C, i, ld(A, i) + 1.0))
    k = compile_func(func("ifoob", (A, C), loop(i, 16, body, kind)))
    a, c = guarded(np.arange(5, dtype=np.float32)), guarded(np.zeros(5, np.float32))
    k(a, c)
    np.testing.assert_array_equal(c, np.arange(5) + 1)


@pytest.mark.parametrize("kind", KINDS, ids=ids)
def test_select_guarding_out_of_bounds_reads(kind):
    # O[i] = select(i >= 3 and i < 11, A[i - 3], -1)   with len(A) == 8: pad 3 on each side
    A, O = arg("A", "float32", 8), arg("O", "float32", 14)
    i = Var("i")
    inside = Logical(LogicOp.AND, Compare(CmpOp.GE, i, const(3)), Compare(CmpOp.LT, i, const(11)))
    body = Store(O, i, select(inside, ld(A, i - 3), const(-1.0)))
    k = compile_func(func("pad", (A, O), loop(i, 14, body, kind)))
    for where in ("before", "after"):
        a = guarded(np.arange(1, 9, dtype=np.float32), where)
        o = np.zeros(14, np.float32)
        k(a, o)
        np.testing.assert_array_equal(o, [-1] * 3 + list(range(1, 9)) + [-1] * 3)


@pytest.mark.parametrize("kind", KINDS, ids=ids)
def test_select_guarding_a_strided_read(kind):
    # O[i] = select(i < 4, A[i * 1000], 0): a gather whose inactive lanes are far out of bounds
    A, O = arg("A", "float32", 3001), arg("O", "float32", 32)
    i = Var("i")
    body = Store(O, i, select(Compare(CmpOp.LT, i, const(4)), ld(A, i * 1000), const(0.0)))
    k = compile_func(func("sgather", (A, O), loop(i, 32, body, kind)))
    a = guarded(np.arange(3001, dtype=np.float32))
    o = np.ones(32, np.float32)
    k(a, o)
    np.testing.assert_array_equal(o, [0, 1000, 2000, 3000] + [0] * 28)


def test_select_guarding_a_lane_invariant_read():
    # for j: for i (vectorized): O[j, i] = select(i + j < 4, A[j], 0)   A[j] is OOB for j >= 4
    A, O = arg("A", "float32", 4), arg("O", "float32", 6, 8)
    i, j = Var("i"), Var("j")
    body = Store(O, j * 8 + i, select(Compare(CmpOp.LT, i + j, const(4)), ld(A, j), const(0.0)))
    k = compile_func(func("sinv", (A, O), loop(j, 6, loop(i, 8, body, VEC))))
    a = guarded(np.arange(1, 5, dtype=np.float32))
    o = np.ones((6, 8), np.float32)
    k(a, o)
    jj, ii = np.meshgrid(np.arange(6), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(o, np.where(ii + jj < 4, jj + 1, 0))


def test_lane_invariant_condition_stays_a_branch():
    # for j: for i (vectorized): if j % 2 == 0: O[j, i] = A[i] else O[j, i] = -A[i]
    A, O = arg("A", "float32", 16), arg("O", "float32", 4, 16)
    i, j = Var("i"), Var("j")
    body = IfThenElse(Compare(CmpOp.EQ, Binary(BinOp.MOD, j, const(2), "int64"), const(0)),
                      Store(O, j * 16 + i, ld(A, i)), Store(O, j * 16 + i, const(0.0) - ld(A, i)))
    k = compile_func(func("branch", (A, O), loop(j, 4, loop(i, 16, body, VEC))))
    assert "llvm.masked" not in k.get_source("llvm-unopt")
    a, o = np.arange(16, dtype=np.float32), np.zeros((4, 16), np.float32)
    k(a, o)
    np.testing.assert_array_equal(o, [a, -a, a, -a])


def test_nested_masks_and_else_branch():
    n = 50
    A, C = arg("A", "float32", n), arg("C", "float32", n)
    i = Var("i")
    inner = IfThenElse(Compare(CmpOp.GT, ld(A, i), const(0.0)), Store(C, i, const(1.0)),
                       Store(C, i, const(2.0)))
    body = IfThenElse(Compare(CmpOp.LT, i, const(30)), inner, Store(C, i, const(3.0)))
    k = compile_func(func("nested", (A, C), loop(i, n, seq(body), VEC)))
    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    c = np.zeros(n, np.float32)
    k(a, c)
    np.testing.assert_array_equal(c, np.where(np.arange(n) < 30, np.where(a > 0, 1, 2), 3))
