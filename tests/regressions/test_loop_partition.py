"""Loop partitioning (issue 6, "Clamped indices"): a blur reading through ``min``/``max``-clamped
indices ran 3.5x slower than on a pre-padded input because every vector load of the clamped
columns was a gather.  Vectorized loops and the loops around them are now split into a prologue,
a clamp-free steady state and an epilogue.  Results must not change (every size, including sizes
smaller than the halo, and splits that do not divide); the steady vector loops must be free of
clamps, and the kernel must gather less.
"""
import importlib
import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from einloop import te, create_schedule, build, lower
from einloop.arith import holds_on
from einloop.ir.stmt import Buffer, For, ForKind, IfThenElse, Load, Scope, Seq, Store
from einloop.schedule.passes.partition import partition_loops
from einloop.ir import expr as E


# the blur -----------------------------------------------------------------------------------------

def neighbour(i, d, n, clamped):
    """Index of ``i + d`` on an axis of size *n* whose edge repeats: clamped with min/max, or one
    step into a 1-pixel pre-padded border."""
    return te.max(te.min(i + d, n - 1), 0) if clamped else i + d + 1


def mean3(taps):
    return (taps[0] + taps[1] + taps[2]) / 3.0


def declare_blur(H, W, rows, cols):
    """A 3x3 box blur with repeated edges, as a horizontal pass ``bh`` and a vertical ``bv``."""
    A = te.placeholder((H if rows else H + 2, W if cols else W + 2), name="A")
    bh = te.compute((A.shape[0], W), lambda y, x: mean3(
        [A[y, neighbour(x, d, W, cols)] for d in (-1, 0, 1)]), name="bh")
    bv = te.compute((H, W), lambda y, x: mean3(
        [bh[neighbour(y, d, H, rows), x] for d in (-1, 0, 1)]), name="bv")
    return A, bh, bv


def schedule_blur(H, W, rows, cols, layout, factor=8):
    """*layout*: ``tiled`` (row tiles in parallel, ``bh`` computed per tile, x split and
    vectorized, as the benchmark), ``split`` (serial, x split and vectorized) or ``row`` (each
    row one vectorized loop)."""
    A, bh, bv = declare_blur(H, W, rows, cols)
    s = create_schedule(bv)
    y, x = s[bv].op.axis
    if layout == "row":
        s[bv].vectorize(x)
        s[bh].vectorize(s[bh].op.axis[1])
        return s, [A, bv]
    _, xi = s[bv].split(x, factor=factor)
    s[bv].vectorize(xi)
    _, hxi = s[bh].split(s[bh].op.axis[1], factor=factor)
    s[bh].vectorize(hxi)
    if layout == "tiled":
        yo, _ = s[bv].split(y, factor=8)
        s[bv].parallel(yo)
        s[bh].compute_at(s[bv], yo)
    return s, [A, bv]


def blur_reference(a, rows, cols):
    """NumPy's repeat-edge blur of *a* (already padded on the axes that are not clamped)."""
    p = np.pad(a, [(1, 1) if rows else (0, 0), (1, 1) if cols else (0, 0)], mode="edge")
    h = (p[:, :-2] + p[:, 1:-1] + p[:, 2:]) / 3
    return (h[:-2] + h[1:-1] + h[2:]) / 3


def run_blur(H, W, rows, cols, layout, factor=8):
    s, args = schedule_blur(H, W, rows, cols, layout, factor)
    rng = np.random.default_rng(H * 1000 + W)
    image = rng.random((H, W), dtype="float32")
    # an axis that is not clamped reads a copy with its edge repeated once
    source = np.pad(image, [(0, 0) if rows else (1, 1), (0, 0) if cols else (1, 1)], mode="edge")
    out = np.full((H, W), np.nan, "float32")
    build(s, args)(np.ascontiguousarray(source), out)
    return out, blur_reference(image, True, True)


CLAMPS = [(True, True), (False, True), (True, False)]       # (rows, cols): 2-D and 1-D clamps


@pytest.mark.parametrize("rows, cols", CLAMPS)
@pytest.mark.parametrize("layout", ["tiled", "split", "row"])
@pytest.mark.parametrize("H, W", [(1, 1), (2, 3), (3, 2), (5, 17), (13, 29), (70, 129)])
def test_clamped_blur_matches_numpy(H, W, rows, cols, layout):
    got, want = run_blur(H, W, rows, cols, layout)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("factor", [3, 16, 32])
def test_clamped_blur_with_other_split_factors_matches_numpy(factor):
    got, want = run_blur(37, 101, True, True, "tiled", factor)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# structure ---------------------------------------------------------------------------------------

def vector_work(stmt, trips=1):
    """(lanes run by vector loops whose body still clamps or guards, all lanes run), each
    vectorized loop weighted by the trip counts of the loops around it."""
    if isinstance(stmt, For) and stmt.kind is ForKind.VECTORIZED:
        lanes = trips * stmt.extent
        text = str(stmt.body)
        clamped = any(word in text for word in ("min(", "max(", "select(", "if "))
        return (lanes if clamped else 0, lanes)
    if isinstance(stmt, For):
        return vector_work(stmt.body, trips * stmt.extent)
    children = stmt.stmts if isinstance(stmt, Seq) else [
        getattr(stmt, name, None) for name in ("body", "then_case", "else_case")]
    totals = [vector_work(c, trips) for c in children if c is not None]
    return tuple(map(sum, zip(*totals))) if totals else (0, 0)


@pytest.mark.parametrize("layout", ["split", "row"])
def test_steady_vector_loops_have_no_clamps(layout):
    s, args = schedule_blur(64, 256, True, True, layout)
    clamped, lanes = vector_work(lower(s, args).body)
    assert lanes > 64 * 256                          # both passes are vectorized
    assert clamped <= 0.1 * lanes, f"{clamped} of {lanes} vector lanes still clamp"


def test_parallel_row_tiles_keep_their_share_and_branch_to_a_steady_copy():
    s, args = schedule_blur(64, 256, True, True, "tiled")
    top = lower(s, args).body
    assert isinstance(top, For) and top.kind is ForKind.PARALLEL and top.extent == 8
    assert isinstance(top.body, IfThenElse)
    assert str(top.body.cond) == "y.outer >= 1 and y.outer <= 6"
    clamped, lanes = vector_work(top.body.then_case)
    assert clamped <= 0.1 * lanes, f"{clamped} of {lanes} vector lanes still clamp"


def test_non_dividing_split_guard_leaves_the_steady_loop():
    A = te.placeholder((1001,), name="A")
    B = te.compute((1001,), lambda i: A[i] * 2.0, name="B")
    s = create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    clamped, lanes = vector_work(lower(s, [A, B]).body)
    assert (clamped, lanes) == (8, 126 * 8)
    a = np.random.default_rng(0).random(1001, dtype="float32")
    b = np.full(1001, np.nan, "float32")
    build(s, [A, B])(a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_padding_select_is_decided_in_the_interior():
    A = te.placeholder((40, 40), name="A")
    P = te.compute((42, 42), lambda y, x: te.if_then_else(
        te.all(y >= 1, y < 41, x >= 1, x < 41), A[y - 1, x - 1], 0.0), name="P")
    s = create_schedule(P)
    s[P].vectorize(P.op.axis[1])
    clamped, lanes = vector_work(lower(s, [A, P]).body)
    assert (clamped, lanes) == (0, 2 * 42 + 40 * 40)  # border pixels: stores of 0, no select
    a = np.random.default_rng(1).random((40, 40), dtype="float32")
    p = np.full((42, 42), np.nan, "float32")
    build(s, [A, P])(a, p)
    np.testing.assert_array_equal(p, np.pad(a, 1))


def loop_ir(kernel, extent):
    """The emitted LLVM IR of the loop of *extent* iterations that holds a vector loop."""
    def find(stmt):
        if isinstance(stmt, For) and stmt.extent == extent and "vectorized" in str(stmt.body):
            return stmt.var.name
        kids = stmt.stmts if isinstance(stmt, Seq) else [getattr(stmt, "body", None)]
        return next((n for n in map(find, filter(None, kids)) if n), None)
    name = find(kernel.func.body)
    source = kernel.get_source("llvm-unopt")
    return source[source.index(f"for.{name}:"):source.index(f"for.{name}.end:")]


def test_steady_loop_loads_contiguously_and_unpartitioned_one_gathers(monkeypatch):
    s, args = schedule_blur(64, 256, True, True, "split")
    steady = loop_ir(build(s, args), 256 // 8 - 2)
    assert "load <8 x float>" in steady and "masked.gather" not in steady
    lowering = importlib.import_module("einloop.schedule.lower")   # the module, not lower()
    monkeypatch.setattr(lowering, "partition_loops", lambda stmt: stmt)
    s, args = schedule_blur(64, 256, True, True, "split")
    assert "masked.gather" in loop_ir(build(s, args), 256 // 8)


def test_whole_row_vector_loop_has_no_gather_left():
    s, args = schedule_blur(16, 100, True, True, "row")
    assert "@llvm.masked.gather" not in build(s, args).get_source("llvm")


def test_scalar_clamps_and_rare_guards_are_left_alone():
    """Partitioning copies code: a clamp in a loop that is not vectorized costs a cycle, and a
    guard in a vector loop that runs a small share of the lanes costs little."""
    src = Buffer("S", "float32", (1000,), Scope.ARG)
    dst = Buffer("D", "float32", (1000,), Scope.ARG)
    x, xo, xi = E.Var("x"), E.Var("xo"), E.Var("xi")
    scalar = For(x, 100, ForKind.SERIAL, Store(dst, x, Load(src, te.max(x - 1, 0), "float32")))
    assert partition_loops(scalar) is scalar
    x = xo * 16 + xi
    heavy = [For(xi, 16, ForKind.VECTORIZED, Store(dst, x, Load(src, x + k, "float32")))
             for k in range(8)]
    guarded = For(xi, 16, ForKind.VECTORIZED, IfThenElse(x < 60, Store(dst, x, E.const(0.0))))
    tile = For(xo, 4, ForKind.SERIAL, Seq((*heavy, guarded)))
    assert partition_loops(tile) is tile
    steady, last = partition_loops(For(xo, 4, ForKind.SERIAL, guarded)).stmts   # alone, it pays
    assert steady.extent == 3 and "if" not in str(steady) and "if xi + 48 < 60" in str(last)


# the analysis ------------------------------------------------------------------------------------

def test_holds_on_finds_where_a_clamp_is_inactive():
    xo, xi = E.Var("xo"), E.Var("xi")
    ranges = {xo: (0, 127), xi: (0, 7)}
    x = xo * 8 + xi
    assert holds_on(x - 1 >= 0, xo, ranges) == (1, 127)
    assert holds_on(x + 1 <= 1023, xo, ranges) == (0, 126)
    assert holds_on(te.min(x + 1, 1023) >= 0, xo, ranges) == (0, 127)
    assert holds_on(te.all(x >= 1, x < 1023), xo, ranges) == (1, 126)
    assert holds_on(x - 1 >= 0, xi, ranges) == (1, 7)
    assert holds_on(x + 1 <= 1000, xi, ranges) is None      # xo = 127 clamps every lane


V, W = E.Var("v"), E.Var("w")
OPS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
       "==": np.equal, "!=": np.not_equal}
affine = st.builds(lambda k, m, c: V * k + W * m + c, st.integers(-3, 3), st.integers(-2, 2),
                   st.integers(-20, 20))
sides = st.one_of(affine, st.builds(te.min, affine, affine), st.builds(te.max, affine, affine))
leaves = st.builds(lambda op, a, b: E.Compare(E.CmpOp(op), a, b), st.sampled_from(sorted(OPS)),
                   sides,
                   sides)
conditions = st.recursive(leaves, lambda inner: st.one_of(
    st.builds(te.all, inner, inner), st.builds(te.any, inner, inner),
    st.builds(E.Not, inner)), max_leaves=4)


def evaluate(e, v, w):
    """*e* at ``V = v, W = w``, in Python integers."""
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.Var):
        return v if e is V else w
    if isinstance(e, E.Not):
        return not evaluate(e.a, v, w)
    a, b = evaluate(e.a, v, w), evaluate(e.b, v, w)
    if isinstance(e, E.Compare):
        return bool(OPS[e.op.symbol](a, b))
    if isinstance(e, E.Logical):
        return (a and b) if e.op is E.LogicOp.AND else (a or b)
    return {"+": a + b, "-": a - b, "*": a * b, "min": min(a, b), "max": max(a, b)}[e.op.symbol]


@given(cond=conditions, hi=st.integers(0, 12), other=st.integers(0, 5))
def test_holds_on_is_sound(cond, hi, other):
    found = holds_on(cond, V, {V: (0, hi), W: (0, other)})
    if found is not None:
        assert 0 <= found[0] <= found[1] <= hi
        for v, w in itertools.product(range(found[0], found[1] + 1), range(other + 1)):
            assert evaluate(cond, v, w), (str(cond), v, w)


def test_an_or_with_a_dead_and_inside_keeps_its_loop_ranges():
    """fuzz 63000093: ``c | (d & e)`` where ``d`` never holds on the loop's range: refining the
    ``and`` gave an empty range table (read as "nothing known") instead of "dead", and the hull
    with the other side raised KeyError while partitioning.  Now a dead ``and`` is dead, and the
    hull keeps the variables both sides range."""
    from einloop.arith.refine import refine
    from einloop.ir import expr as E
    i, j = E.Var("i"), E.Var("j")
    dead = E.Logical(E.LogicOp.AND, E.Compare(E.CmpOp.LT, i, E.const(0)),
                     E.Compare(E.CmpOp.LT, j, E.const(5)))
    assert refine({i: (0, 10), j: (0, 9)}, dead) is None
    either = E.Logical(E.LogicOp.OR, dead, E.Compare(E.CmpOp.LT, i, E.const(3)))
    assert refine({i: (0, 10), j: (0, 9)}, either) == {i: (0, 2), j: (0, 9)}

    k4 = te.reduce_axis((0, 12), name="k4")
    k5 = te.reduce_axis((0, 1), name="k5")
    T = te.compute((3, 1), lambda i0, i1: te.sum(
        te.const(1, "int32"), axis=[k4, k5],
        where=(te.const(1, "float64") != i0.astype("float64"))
        | te.all(te.const(0, "int64") < 6, k4 == 8, i0 != 0)), name="T")
    s = create_schedule(T)
    s[T].split(s[T].op.axis[0], factor=8)
    ko, ki = s[T].split(s[T].op.reduce_axis[0], factor=7)
    s[T].unroll(ki)
    out = np.full((3, 1), -1, np.int32)
    build(s, [T])(out)
    np.testing.assert_array_equal(out[:, 0], [12, 1, 12])
