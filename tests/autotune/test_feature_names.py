"""The feature layout and the extractor agree on names: every name of the layout is written by
some example lowered function (the operator zoo under every generic strategy, the einsums, the
tuning templates under several configurations and a few schedules for the rarer fields, each
lowered with and without expanding unrolls, plus hand-written nests for what ``lower`` does not
produce), and a name the layout does not have is an InternalError where it is written."""
import os
import sys

import pytest

import einloop
from einloop import autotune, te
from einloop.errors import InternalError
from einloop.ir.expr import Buffer, Load, Scope, Var, const
from einloop.ir.stmt import For, ForKind, LoweredFunc, Seq, Store
from einloop.autotune.model.feature import layout as feature_layout, scan as feature_scan
from einloop.autotune.model.feature import extract as F

import ops
import strategies

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import gemm      # noqa: E402  (importing registers the "gemm" template)
import conv2d    # noqa: E402
import softmax   # noqa: E402

TEMPLATE_WORKLOADS = [("gemm", (64, 48, 32)), ("gemm", (96, 80, 64)),
                      ("conv2d", (1, 16, 14, 14, 32, 3, 3))]
CONFIGS_PER_WORKLOAD = 8


def _template_schedules():
    """Several configurations of each tuning template, spread over its space."""
    for name, args in TEMPLATE_WORKLOADS:
        task = autotune.create_task(name, args)
        n = len(task.config_space)
        picks = sorted({(i * 7919) % n for i in range(CONFIGS_PER_WORKLOAD)} | {0, n - 1})
        for index in picks:
            yield f"{name}{args}#{index}", lambda task=task, index=index: task.instantiate(index)


def _many_loads(order, M=24, N=32, vectorize_rows=False, temp_rows=False):
    """An elementwise sum of loads of every scope and access pattern, in the given order: arg
    rows (x, w), a transposed arg (y), a per-row arg (z), a temp (t), a local stage (l).  A
    second stage (the temp) reads a per-row value and a strided column; a third one is a
    parallel-only row loop."""
    X = te.placeholder((M, N), name="X")
    Y = te.placeholder((N, M), name="Y")
    Z = te.placeholder((2 * M,), name="Z")
    W = te.placeholder((M, N), name="W")
    G = te.placeholder((N, 2), name="G")
    T = te.compute((M, N), lambda i, j: Z[i] + G[j, 0], name="T")
    P = te.compute((M,), lambda i: Z[i] * 2.0, name="P")
    Lc = te.compute((M, N), lambda i, j: W[i, j] + 1.0, name="Lc")
    terms = {"x": lambda i, j: X[i, j], "y": lambda i, j: Y[j, i], "t": lambda i, j: T[i, j],
             "l": lambda i, j: Lc[i, j], "z": lambda i, j: Z[i], "w": lambda i, j: W[i, j] * 3.0,
             "p": lambda i, j: P[i]}

    def body(i, j):
        e = terms[order[0]](i, j)
        for c in order[1:]:
            e = e + terms[c](i, j)
        return e
    Out = te.compute((M, N), body, name="Out")
    s = einloop.create_schedule(Out)
    i, j = s[Out].op.axis
    if vectorize_rows:
        s[Out].reorder(j, i)
        s[Out].vectorize(i)
        s[Out].parallel(j)
    else:
        s[Out].vectorize(j)
        s[Out].parallel(i)
    if "t" in order:
        ti, tj = s[T].op.axis
        if temp_rows:
            s[T].reorder(tj, ti)
        s[T].vectorize(ti if temp_rows else tj)
    if "p" in order:
        s[P].parallel(s[P].op.axis[0])
    if "l" in order:
        s[Lc].compute_at(s[Out], j if vectorize_rows else i)
    used = [(X, "x"), (Y, "y"), (Z, "ztp"), (W, "wl"), (G, "t")]
    return s, [t for t, by in used if set(by) & set(order)] + [Out]


def _parallel_rows(N=40):
    """A one-loop main stage that is only parallel, after a 2-D parallel-only stage."""
    A = te.placeholder((N, 8), name="A")
    B = te.compute((N, 8), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((N,), lambda i: te.sum(B[i, k] * B[i, k] + A[i, k], axis=k), name="C")
    s = einloop.create_schedule(C)
    s[B].parallel(s[B].op.axis[0])
    s[C].parallel(s[C].op.axis[0])
    s[C].reorder(k, s[C].op.axis[0])
    return s, [A, C]


def _conv_unrolled_outer(axis):
    """The zoo conv2d with one outer data axis unrolled: a virtual loop far from the inner
    loops."""
    ins, outs, _ = ops.conv2d()
    s = einloop.create_schedule(outs)
    st = s[outs[0]]
    st.unroll(st.op.axis[axis])
    return s, ins + outs


def extra_schedules():
    """Schedules that reach the layout's rarer fields (the zoo strategies do not)."""
    for order in ("xytlzw", "zlytxw", "ltzyxw", "xwlzty", "yzltxw", "xyl", "xyz", "xyzpw"):
        for rows in (False, True):
            yield f"many_loads.{order}.{'rows' if rows else 'cols'}", \
                lambda order=order, rows=rows: _many_loads(order, vectorize_rows=rows)
    for temp_rows in (False, True):
        yield f"many_loads.tall.{temp_rows}", \
            lambda temp_rows=temp_rows: _many_loads("xwt", M=48, N=16, temp_rows=temp_rows)
    yield "parallel_rows", _parallel_rows
    for axis in (1, 2):
        yield f"conv2d.unroll_axis{axis}", lambda axis=axis: _conv_unrolled_outer(axis)


def corpus():
    """``(name, make)`` pairs; ``make()`` gives a fresh ``(schedule, args)``."""
    for op in sorted(ops.ZOO):
        for strat in strategies.ALL:
            def make(op=op, strat=strat):
                ins, outs, _ = ops.ZOO[op]()
                return strat(outs), ins + outs
            yield f"zoo.{op}.{strat.__name__}", make
    for subscripts, shapes in ops.EINSUMS:
        def make(subscripts=subscripts, shapes=shapes):
            ins, outs, _ = ops.einsum(subscripts, shapes)
            return einloop.create_schedule(outs), ins + outs
        yield f"einsum.{subscripts}", make
    yield "softmax.schedule", lambda: softmax.schedule(64, 128)
    yield "softmax.default", lambda: softmax.default(16, 40)
    yield "gemm.default", lambda: gemm.default(64, 48, 32)
    yield "conv2d.default", lambda: conv2d.default(1, 8, 10, 10, 8, 3, 3)
    yield from extra_schedules()
    yield from _template_schedules()


def lowered_corpus():
    """``(name, LoweredFunc)`` over the corpus, each lowered with and without unroll expansion."""
    for name, make in corpus():
        for expand in (True, False):
            s, args = make()
            yield f"{name}/{'expanded' if expand else 'kept'}", \
                einloop.lower(s, args, expand_unroll=expand)


def hand_built():
    """IR that ``lower`` does not produce today (a vector loop with loops inside it, a store that
    does not move with its vector loop) but the layout describes: hand-written nests."""
    vs = [Var(f"v{n}") for n in range(5)]
    s, a, b, c = Var("s"), Var("a"), Var("b"), Var("c")
    X = Buffer("X", "float32", (48,), Scope.ARG)
    Y = Buffer("Y", "float32", (3,), Scope.ARG)
    index = s * 16 + vs[0] * 8 + vs[1] * 4 + vs[2] * 2 + vs[3]       # not moving with v4
    main = For(s, 3, ForKind.SERIAL, Store(X, index, Load(X, index, "float32") + 1.0))
    for v in reversed(vs):
        main = For(v, 2, ForKind.VECTORIZED, main)
    second = For(a, 2, ForKind.VECTORIZED, For(b, 2, ForKind.VECTORIZED, For(
        c, 3, ForKind.SERIAL, Store(Y, c, const(2.0)))))
    yield "hand.vector_outside", LoweredFunc("f", (X, Y), (), Seq((main, second)))


MALFORMED = LoweredFunc("f", (), (), Seq(("not a statement",)))


@pytest.fixture(scope="module")
def written():
    """Every name the extractor writes over the examples, with the first example writing it."""
    out = {}
    for name, func in list(lowered_corpus()) + list(hand_built()):
        vals = feature_scan.scan(func)
        assert isinstance(vals, feature_layout.FeatureValues)
        for feature in vals:
            out.setdefault(feature, name)
    return out


def test_every_layout_name_is_written_by_an_example(written):
    row = F.extract(MALFORMED)      # the one name only a failed row writes
    assert set(F.as_dict(row)) == {"g_extract_failed"}
    never = [n for n in F.feature_names() if n not in written and n != "g_extract_failed"]
    assert not never, f"layout names no example writes: {never}"


def test_no_unknown_name_is_written(written):
    layout = set(F.feature_names())
    assert set(written) <= layout, sorted(set(written) - layout)


def test_an_unknown_name_fails_where_it_is_written():
    vals = feature_layout.FeatureValues()
    vals["g_flops"] = 1.0
    for write in (lambda: vals.__setitem__("g_flopz", 1.0), lambda: vals.update(m_nope=1),
                  lambda: vals.setdefault("s_loop9_extent", 3)):
        with pytest.raises(InternalError, match="not in the layout"):
            write()
    assert dict(vals) == {"g_flops": 1.0}


def test_extract_raises_a_name_mismatch_instead_of_a_failed_row(monkeypatch):
    """A bug in the extractor is not a property of the function: no failed row hides it."""
    func = einloop.lower(*gemm.default(8, 8, 8))
    real = feature_scan.write_kernel

    def misnamed(vals, *args):
        real(vals, *args)
        vals["m_loop6_extent"] = 1.0          # one loop slot more than the layout has
    monkeypatch.setattr(feature_scan, "write_kernel", misnamed)
    with pytest.raises(feature_layout.FeatureNameError, match="m_loop6_extent"):
        F.extract(func)
    with pytest.raises(InternalError):
        F.extract_many([func])
