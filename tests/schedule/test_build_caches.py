"""The caches that make building a candidate fast must not change what is built: a hit returns
what the uncached computation returns, and a changed input misses."""
import warnings

import pytest

from einloop import VectorizeWarning, create_schedule, lower, te
from einloop.arith import simplify
from einloop.codegen import Target, emit
from einloop.ir.expr import Var, const
from einloop.ir.stmt import Buffer, For, ForKind, LetStmt, LoweredFunc, Scope, Seq, Store
from einloop.ir.visit import transform
from einloop.schedule.passes.simplify_stmt import simplify_stmt
from einloop.schedule.passes.vectorize import vectorize_loops


def test_transform_memo_rewrites_a_shared_subtree_once_and_misses_a_new_node():
    x = Var("x")
    shared = x + 1
    seen = []

    def fn(e):
        seen.append(e)
        return None

    memo = {}
    first = transform(shared * 2, fn, memo)
    calls = len(seen)
    second = transform(shared * 3, fn, memo)
    assert second.a is first.a                  # the shared x + 1 came from the memo
    assert len(seen) == calls + 2               # only the new constant and the new product
    transform(x + 1, fn, memo)                  # equal but another object: rewritten afresh
    assert len(seen) == calls + 2 + 2           # (x itself is the same object: a hit)


def test_simplify_with_a_memo_equals_simplify_without():
    i, j = Var("i"), Var("j")
    ranges = {i: (0, 7), j: (0, 3)}
    exprs = [(i * 4 + j) // 4, (i * 4 + j) % 4, ((i * 4 + j) // 4) * 4 + (i * 4 + j) % 4]
    memo = {}
    for e in exprs:
        assert str(simplify(e, ranges, memo)) == str(simplify(e, ranges))


def test_simplify_stmt_forgets_its_memo_when_a_range_changes():
    """Unrolled copies share a let variable bound to a different value in each copy: the shared
    ``x // 4`` folds to 0 in the first copy (x = 2) and to 1 in the second (x = 5)."""
    out = Buffer("out", "int64", (2,), Scope.ARG)
    x = Var("x")
    q = x // 4                                  # one object, in both copies
    second_alone = LetStmt(x, const(5), Store(out, const(1), q))
    copies = Seq((LetStmt(x, const(2), Store(out, const(0), q)), second_alone))
    first, second = simplify_stmt(copies).stmts
    assert str(first.body.value) == "0"
    assert str(second.body.value) == str(simplify_stmt(second_alone).body.value) == "1"


def test_simplify_stmt_reuses_results_across_unrolled_copies():
    """The copies give the same text as simplifying each copy alone."""
    out = Buffer("out", "int64", (64,), Scope.ARG)
    i, j = Var("i"), Var("j")
    idx = (i * 4 + j) // 4 * 4 + (i * 4 + j) % 4
    body = Seq(tuple(Store(out, idx + k, idx) for k in range(3)))
    loops = For(i, 8, ForKind.SERIAL, For(j, 4, ForKind.SERIAL, body))
    together = simplify_stmt(loops)
    for k, store in enumerate(together.body.body.stmts):
        alone = simplify_stmt(For(i, 8, ForKind.SERIAL, For(j, 4, ForKind.SERIAL,
                                                            Store(out, idx + k, idx))))
        assert str(store) == str(alone.body.body)


def test_nested_loops_of_one_iteration_fold_their_variables_where_they_are_read():
    """Unit loops are dropped and their variables read as 0, however deeply they nest (each
    level once: the simplifier folds a variable whose range is one value), and a sibling loop
    that binds the same variable again reads its own range."""
    out = Buffer("out", "int64", (64,), Scope.ARG)
    i, j, k = Var("i"), Var("j"), Var("k")
    unit = For(i, 1, ForKind.SERIAL, For(j, 1, ForKind.SERIAL,
                                       For(k, 4, ForKind.SERIAL, Store(out, i * 16 + j * 4 + k,
                                                                       i + j + k))))
    again = For(i, 3, ForKind.SERIAL, Store(out, i + 40, i))
    first, second = simplify_stmt(Seq((unit, again))).stmts
    assert isinstance(first, For) and first.var is k and first.extent == 4
    assert str(first.body) == str(Store(out, k, k))
    assert isinstance(second, For) and second.var is i and str(second.body) == str(again.body)


def _unvectorizable(M=6, N=10, K=5):
    """C = A @ B with the data axes fused as (j, i) and vectorized: C's index is not affine in
    the lanes and the reduction reads C, so lower() makes the loop serial and warns."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    i, j = s[C].op.axis
    s[C].reorder(k, j, i)
    fo, fi = s[C].split(s[C].fuse(j, i), factor=4)
    s[C].vectorize(fi)
    return s, [A, B, C]


def test_codegen_skips_the_vectorize_pass_on_lowered_code_but_not_on_changed_code():
    s, args = _unvectorizable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        func = lower(s, args)
    assert any(issubclass(w.category, VectorizeWarning) for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # decided in lower: no second warning
        assert vectorize_loops(func.body) is func.body
        emit.build_module(func, Target.parse("llvm"))
    # the same statements wrapped in a new (undecided) vectorized loop are decided again
    v = Var("v")
    changed = For(v, 4, ForKind.VECTORIZED, func.body)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decided = vectorize_loops(changed)
    assert decided.kind is ForKind.SERIAL
    assert any("does not depend on the lane" in str(w.message) for w in caught)
    with pytest.warns(VectorizeWarning, match="does not depend on the lane"):   # codegen decides
        emit.build_module(LoweredFunc(func.name, func.args, func.temps, changed, func.attrs),
                          Target.parse("llvm"))
