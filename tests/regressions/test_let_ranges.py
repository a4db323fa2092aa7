"""Regressions of the statement simplifier's variable ranges (schedule/passes/simplify_stmt.py).

A loop or let variable's range holds in its binder's body only.  Unrolled copies bind the same
let variable in sibling bodies, each to its own value, and share their expressions (the
simplifier's memo is keyed by expression identity); a copy whose value has no known bounds once
kept the range of an earlier copy and folded index arithmetic and guards with it: a wrong kernel.

Hand-made statements are compiled twice, as they are and simplified, and run on the same inputs
(codegen gives the IR its meaning and does not simplify); the schedule case runs against NumPy.
"""
import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.codegen import compile_func
from einloop.ir import expr as E
from einloop.ir.expr import Buffer, Load, Scope, Var, const
from einloop.ir.stmt import For, ForKind, IfThenElse, LetStmt, LoweredFunc, Seq, Store
from einloop.ir.visit import walk_stmt
from einloop.schedule.passes.simplify_stmt import simplify_stmt

X = Buffer("X", "int64", (2,), Scope.ARG)          # values the simplifier cannot know
O = Buffer("O", "float32", (8,), Scope.ARG)
UNKNOWN = (0, 1, 5, -3)                            # X[0] on each run


def unknown():
    return Load(X, const(0), "int64")


def mark(slot):
    """``O[slot] = O[slot] + 1``: which guarded statements ran, and how often."""
    return Store(O, const(slot), Load(O, const(slot), "float32") + const(1.0))


def guard(cond, slot):
    return IfThenElse(cond, mark(slot))


def outputs(stmt):
    f = compile_func(LoweredFunc("f", (X, O), (), stmt, {"outputs": ["O"]}))
    got = []
    for v in UNKNOWN:
        o = np.zeros(8, "float32")
        f(np.array([v, 0], "int64"), o)
        got.append(o)
    return np.array(got)


def guards(stmt):
    return sum(isinstance(s, IfThenElse) for s in walk_stmt(stmt))


def check_same_meaning(stmt):
    simple = simplify_stmt(stmt)
    np.testing.assert_array_equal(outputs(simple), outputs(stmt))
    return simple


# the schedule that met it --------------------------------------------------------------------

def test_unrolled_compute_at_whose_later_copy_has_an_unbounded_region_start():
    """The region start of P is a let in each unrolled copy of C's loop u: a constant in the
    first, an int cast of a float (no interval) in the second, which once kept ``(0, 0)`` and
    folded ``(P.i.min + i) // 4`` to 0."""
    O_, U, J, N = 8, 2, 4, 16
    A = te.placeholder((N,), name="A")
    P = te.compute((N,), lambda i: A[i // 4] * 1.0, name="P")

    def index(o, u, j):
        far = (o.astype("float64") * 0.5).astype("int64")
        return te.if_then_else(u < 1, 0, far) + j

    C = te.compute((O_, U, J), lambda o, u, j: P[index(o, u, j)], name="C")
    s = create_schedule(C)
    s[C].unroll(C.op.axis[1])
    s[P].compute_at(s[C], C.op.axis[1])
    assert str(lower(s, [A, C])).count("P.i.min =") == 2         # one let per unrolled copy
    a = np.arange(N, dtype="float32")
    c = np.zeros((O_, U, J), "float32")
    build(s, [A, C])(a, c)
    o, u, j = np.meshgrid(np.arange(O_), np.arange(U), np.arange(J), indexing="ij")
    np.testing.assert_array_equal(c, a[(np.where(u < 1, 0, o // 2) + j) // 4])


# sibling bodies of one variable (unrolled copies) --------------------------------------------

def test_a_let_with_unknown_bounds_drops_the_range_of_an_earlier_copy():
    x = Var("x")
    cond = x < 2                                   # one object in both copies, as unrolling shares
    stmt = Seq((LetStmt(x, const(1), guard(cond, 0)), LetStmt(x, unknown(), guard(cond, 1))))
    simple = check_same_meaning(stmt)
    assert guards(simple) == 1                     # the first copy's guard is decided, not the second's


def test_a_let_with_known_bounds_after_one_with_unknown_bounds():
    x = Var("x")
    cond = x < 2
    stmt = Seq((LetStmt(x, unknown(), guard(cond, 0)), LetStmt(x, const(1), guard(cond, 1))))
    assert guards(check_same_meaning(stmt)) == 1


def test_copies_with_different_known_values_each_decide_their_own_guard():
    x = Var("x")
    cond = x < 2
    stmt = Seq((LetStmt(x, const(1), guard(cond, 0)), LetStmt(x, const(5), guard(cond, 1)),
                LetStmt(x, const(0), guard(cond, 2))))
    simple = check_same_meaning(stmt)
    assert guards(simple) == 0
    assert outputs(simple)[0].tolist() == [1, 0, 1, 0, 0, 0, 0, 0]


def test_a_nested_let_follows_its_outer_let_from_copy_to_copy():
    x, y = Var("x"), Var("y")
    cond = y < 3

    def copy(value, slot):
        return LetStmt(x, value, LetStmt(y, x + 1, guard(cond, slot)))

    stmt = Seq((copy(const(1), 0), copy(unknown(), 1), copy(const(4), 2)))
    simple = check_same_meaning(stmt)
    assert guards(simple) == 1                     # y = 2 and y = 5 are decided, y = X[0] + 1 not


def test_loops_of_one_variable_with_other_extents_each_keep_their_own_range():
    i = Var("i")
    cond = i < 2
    body = guard(cond, 0)
    stmt = Seq((For(i, 2, ForKind.SERIAL, body), For(i, 8, ForKind.SERIAL, body)))
    simple = check_same_meaning(stmt)
    assert guards(simple) == 1
    assert outputs(simple)[0][0] == 4


# shadowing: an inner binder of the variable ----------------------------------------------------

def test_an_inner_let_with_unknown_bounds_hides_the_outer_range_then_gives_it_back():
    x = Var("x")
    cond = x < 2
    stmt = LetStmt(x, const(1), Seq((LetStmt(x, unknown(), guard(cond, 0)), guard(cond, 1))))
    simple = check_same_meaning(stmt)
    assert guards(simple) == 1                     # the inner guard stays, the outer is decided


def test_an_inner_let_with_known_bounds_leaves_the_outer_variable_unknown_after_it():
    x = Var("x")
    cond = x < 2
    stmt = LetStmt(x, unknown(), Seq((LetStmt(x, const(1), guard(cond, 0)), guard(cond, 1))))
    simple = check_same_meaning(stmt)
    assert guards(simple) == 1                     # the inner guard is decided, the outer stays


def test_an_inner_let_reads_the_outer_binding_of_its_own_variable():
    x = Var("x")
    stmt = LetStmt(x, const(1), LetStmt(x, x + 4, guard(x < 2, 0)))
    simple = check_same_meaning(stmt)
    assert guards(simple) == 0 and outputs(simple)[0][0] == 0   # inner x == 5


def test_a_loop_inside_the_scope_of_a_caller_range_gives_that_range_back():
    i = Var("i")
    inner = For(i, 2, ForKind.SERIAL, guard(i < 2, 0))
    after = guard(i < 2, 1)                        # i: the caller's, anywhere in 0..9
    simple = simplify_stmt(Seq((inner, after)), {i: (0, 9)})
    assert guards(simple) == 1
    assert isinstance(simple, Seq) and isinstance(simple.stmts[1], IfThenElse)


def test_the_callers_ranges_are_not_changed():
    i, x = Var("i"), Var("x")
    ranges = {i: (0, 9)}
    simplify_stmt(Seq((For(i, 2, ForKind.SERIAL, guard(i < 2, 0)),
                       LetStmt(x, unknown(), guard(x < 2, 1)))), ranges)
    assert ranges == {i: (0, 9)}


@pytest.mark.parametrize("first_known", [True, False])
def test_index_arithmetic_of_a_let_is_folded_only_with_its_own_range(first_known):
    """The schedule case by hand: ``O[(x + i) // 4]`` in two copies of ``let x``."""
    x, i = Var("x"), Var("i")
    clamped = E.Binary(E.BinOp.MAX, E.Binary(E.BinOp.MIN, unknown(), const(4), "int64"), const(0),
                       "int64")                    # 0..4, but not known to the intervals
    values = [const(0), clamped] if first_known else [clamped, const(0)]
    index = (x + i) // 4                           # shared by both copies
    body = For(i, 4, ForKind.SERIAL,
               Store(O, index, Load(O, index, "float32") + const(1.0)))
    check_same_meaning(Seq(tuple(LetStmt(x, v, body) for v in values)))
