"""Nested compute_at: a stage computed at a loop of a stage that is itself computed at a loop.

Bound inference composes regions through the chain (a producer's region comes from its
consumers at their own attach points, whose regions come from theirs), and verify accepts a
consumer that reaches the producer's attach loop through such a chain.  Every schedule is
checked against NumPy (tests/oracle.py); the lowered IR is checked for where each stage lands
and how big its local buffer is.
"""
import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st

from einloop import te, create_schedule, lower
from einloop.errors import ScheduleError
from einloop.schedule.bound import attach_chain

import ops
from oracle import check, random_inputs, run


def _stages(s):
    return {st.name: st.origin_op.output() for st in s.stages}


def _text(s, args):
    return str(lower(s, args, expand_unroll=False))


def _lines(text, *needles):
    """The line numbers of the first line holding each needle, in order of the needles."""
    lines = text.splitlines()
    return [next(n for n, line in enumerate(lines) if needle in line) for needle in needles]


def _indent(text, needle):
    line = next(x for x in text.splitlines() if needle in x)
    return len(line) - len(line.lstrip())


# 1) softmax in one pass per row: S.rf at S, S and E at Out's row loop -------------------------

def softmax_one_pass(M, N, factor, rf_at):
    inputs, outputs, ref = ops.softmax(M, N)
    (X,), (Out,) = inputs, outputs
    s = create_schedule(Out)
    t = _stages(s)
    Mx, E, S = t["Mx"], t["E"], t["S"]
    ko, ki = s[S].split(s[S].op.reduce_axis[0], factor=factor)
    SF = s.rfactor(S, ki)
    ko_rf, = s[SF].op.reduce_axis
    ki_rf, i_rf = s[SF].op.axis
    s[SF].reorder(i_rf, ko_rf, ki_rf)          # partial sums in lanes: ki innermost
    s[SF].vectorize(ki_rf)
    row = s[S].op.axis[0] if rf_at == "row" else s[S].op.reduce_axis[0]
    s[SF].compute_at(s[S], row)
    i, j = s[Out].op.axis
    s[S].compute_at(s[Out], i)
    s[E].compute_at(s[Out], i)
    s[Mx].compute_at(s[Out], i)
    return s, inputs, outputs, ref


@pytest.mark.parametrize("rf_at", ["row", "reduce"])
@pytest.mark.parametrize("M,N,factor", [(9, 35, 8), (4, 16, 4), (3, 5, 8), (1, 1, 1)])
def test_softmax_rfactor_nested_in_the_row_loop(M, N, factor, rf_at):
    s, inputs, outputs, ref = softmax_one_pass(M, N, factor, rf_at)
    check(s, inputs, outputs, ref)


def test_softmax_one_pass_keeps_one_row_in_local_buffers():
    s, inputs, outputs, ref = softmax_one_pass(9, 35, 8, "row")
    text = _text(s, inputs + outputs)
    assert "temp" not in text                                  # no whole-kernel buffer left
    assert "allocate E: float32[1 * 35]" in text               # one row of exp(X - max)
    assert "allocate S: float32[1]" in text
    assert "allocate S.rf: float32[8 * 1]" in text             # the 8 partial sums of one row
    row, e, rf, out = _lines(text, "for i", "allocate E", "allocate S.rf", "Out[")
    assert row < e < rf < out                                  # all inside Out's row loop
    assert _indent(text, "allocate S.rf") == _indent(text, "allocate E")


def test_layer_norm_row_reductions_rfactored_inside_the_row_loop():
    """Two row reductions, each split by rfactor, their partials nested at the reduction."""
    inputs, outputs, ref = ops.layer_norm(5, 40)
    Out, = outputs
    s = create_schedule(Out)
    for st in list(s.stages):
        if st.is_compute and st.op.reduce_axis and not st.is_output:
            t = st.origin_op.output()
            ko, ki = st.split(st.op.reduce_axis[0], factor=8)
            rf = s.rfactor(t, ki)
            s[rf].compute_at(st, st.op.axis[0])
            st.compute_at(s[Out], s[Out].op.axis[0])
    for st in s.stages:
        if st.is_compute and not st.is_output and st.attach == "root":
            st.compute_at(s[Out], s[Out].op.axis[0])
    check(s, inputs, outputs, ref)
    assert "temp" not in _text(s, inputs + outputs)


# 2) an elementwise chain A -> B -> C -> D: C at D's tile loop, B at C's inner loop -------------

def stencil_chain(N):
    """Each stage reads two neighbours, so every region in the chain grows by one."""
    A = te.placeholder((N + 3,), name="A")
    B = te.compute((N + 2,), lambda i: A[i] * 2.0 + A[i + 1], name="B")
    C = te.compute((N + 1,), lambda i: B[i] - B[i + 1] * 0.5, name="C")
    D = te.compute((N,), lambda i: C[i] + C[i + 1], name="D")

    def ref(a):
        b = a[:-1] * 2 + a[1:]
        c = b[:-1] - b[1:] * 0.5
        return [c[:-1] + c[1:]]
    return A, B, C, D, ref


@pytest.mark.parametrize("N,tile,inner", [(32, 8, 2), (29, 8, 3), (10, 4, 5), (7, 16, 1)])
def test_stencil_chain_nested_two_levels(N, tile, inner):
    A, B, C, D, ref = stencil_chain(N)
    s = create_schedule(D)
    do, di = s[D].split(s[D].op.axis[0], factor=tile)
    s[C].compute_at(s[D], do)
    co, ci = s[C].split(s[C].op.axis[0], factor=inner)
    s[B].compute_at(s[C], co)
    check(s, [A], [D], ref)


def test_stencil_chain_regions_compose_through_the_chain():
    A, B, C, D, ref = stencil_chain(32)
    s = create_schedule(D)
    do, di = s[D].split(s[D].op.axis[0], factor=8)
    s[C].compute_at(s[D], do)                    # C: 8 + 1 elements per tile of D
    co, ci = s[C].split(s[C].op.axis[0], factor=3)
    s[B].compute_at(s[C], co)                    # B: 3 + 1 elements per 3 of C
    text = _text(s, [A, D])
    assert "allocate C: float32[9]" in text
    assert "allocate B: float32[4]" in text
    # the regions are affine in the enclosing loops of the whole chain: no clamped starts
    assert ".min" not in text
    check(s, [A], [D], ref)


def test_a_producer_of_a_nested_consumer_computes_only_what_the_tile_needs():
    """A0 at D's tile loop is read by B, nested in C (also at that loop) on a ragged tile: C's
    clamped region start is seen through its value, fixed in that loop, so A0 computes one
    tile's worth (11 elements), not its whole axis (32)."""
    N = 29
    A = te.placeholder((N + 4,), name="A")
    A0 = te.compute((N + 3,), lambda i: A[i] + A[i + 1], name="A0")
    B = te.compute((N + 2,), lambda i: A0[i] * 2.0 + A0[i + 1], name="B")
    C = te.compute((N + 1,), lambda i: B[i] - B[i + 1] * 0.5, name="C")
    D = te.compute((N,), lambda i: C[i] + C[i + 1], name="D")
    s = create_schedule(D)
    do, di = s[D].split(s[D].op.axis[0], factor=8)
    s[C].compute_at(s[D], do)
    s[A0].compute_at(s[D], do)
    co, ci = s[C].split(s[C].op.axis[0], factor=3)
    s[B].compute_at(s[C], co)
    text = _text(s, [A, D])
    assert "allocate A0: float32[11]" in text and "allocate B: float32[4]" in text

    def ref(a):
        a0 = a[:-1] + a[1:]
        b = a0[:-1] * 2 + a0[1:]
        c = b[:-1] - b[1:] * 0.5
        return [c[:-1] + c[1:]]
    check(s, [A], [D], ref)


def test_elementwise_chain_2d_tile_then_inner_row():
    N, M = 13, 22
    A = te.placeholder((N, M), name="A")
    B = te.compute((N, M), lambda i, j: A[i, j] * 3.0, name="B")
    C = te.compute((N, M), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((N, M), lambda i, j: C[i, j] * C[i, j], name="D")
    s = create_schedule(D)
    io, jo, ii, ji = s[D].tile(*s[D].op.axis, 4, 8)
    s[D].vectorize(ji)
    s[C].compute_at(s[D], jo)
    ci, cj = s[C].op.axis
    s[B].compute_at(s[C], ci)
    s[B].vectorize(s[B].op.axis[1])
    text = _text(s, [A, D])
    assert "allocate C: float32[4 * 8]" in text and "allocate B: float32[1 * 8]" in text
    check(s, [A], [D], lambda a: [(a * 3 + 1) ** 2])


# 3) GEMM: cache_write at the output tile, a cache_read of A at the cache stage's k loop --------

@pytest.mark.parametrize("M,N,K", [(32, 32, 16), (37, 45, 29)])
def test_gemm_cache_read_nested_in_the_cache_write_stage(M, N, K):
    inputs, outputs, ref = ops.gemm(M, N, K)
    (A, B), (C,) = inputs, outputs
    s = create_schedule(C)
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "local", [CC])
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 8, 16)
    s[C].parallel(io)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, ci, ki, cj)
    s[CC].vectorize(cj)
    s[AA].compute_at(s[CC], ko)
    text = _text(s, inputs + outputs)
    assert "allocate C.local: float32[8 * 16]" in text
    assert "allocate A.local: float32[8 * 4]" in text          # the A panel of one k step
    tile, cache, panel = _lines(text, "for j.outer", "allocate C.local", "allocate A.local")
    assert tile < cache < panel
    check(s, inputs, outputs, ref)


# 4) tiled conv2d: the padding stage at the cache_write stage's loop ----------------------------

@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("pad_at", ["c", "y"])
def test_conv2d_padding_nested_in_the_cache_write_stage(stride, pad_at):
    inputs, outputs, ref = ops.conv2d(1, 3, 9, 11, 4, stride=stride)
    Out, = outputs
    s = create_schedule(Out)
    Pad = _stages(s)["Pad"]
    OL = s.cache_write(Out, "local")
    n, k, y, x = s[Out].op.axis
    yo, xo, yi, xi = s[Out].tile(y, x, 2, 4)
    s[OL].compute_at(s[Out], xo)
    ln, lk, ly, lx = s[OL].op.axis
    c, r, rs = s[OL].op.reduce_axis
    s[OL].reorder(ln, lk, c, ly, r, rs, lx)
    s[Pad].compute_at(s[OL], c if pad_at == "c" else ly)
    text = _text(s, inputs + outputs)
    assert "temp" not in text
    rows = 3 if pad_at == "y" else (2 - 1) * stride + 3      # kernel rows of one output row / 2
    cols = (4 - 1) * stride + 3
    assert f"allocate Pad: float32[1 * 1 * {rows} * {cols}]" in text
    check(s, inputs, outputs, ref)


# what stays illegal --------------------------------------------------------------------------

def test_a_nested_consumer_outside_the_producers_loop_is_refused():
    s, inputs, outputs, _ = softmax_one_pass(4, 16, 4, "row")
    t = _stages(s)
    Out = outputs[0]
    i, j = s[Out].op.axis
    s[t["E"]].compute_at(s[Out], j)              # E per element, but S.rf needs the whole row
    with pytest.raises(ScheduleError, match=r"stage E is computed at Out\.j, but its consumer "
                                            r"S\.rf is computed at S\.i \(S at Out\.i\), outside "
                                            r"that loop"):
        lower(s, inputs + outputs)


def test_a_chain_ending_at_another_root_stage_is_refused():
    s, inputs, outputs, _ = softmax_one_pass(4, 16, 4, "row")
    t = _stages(s)
    s[t["S"]].compute_root()                     # S.rf stays at S, now outside Out's row loop
    with pytest.raises(ScheduleError, match=r"stage E is computed at Out\.i, but its consumer "
                                            r"S\.rf is computed at S\.i, outside that loop"):
        lower(s, inputs + outputs)


def test_nested_stages_run_before_their_consumers_in_one_loop():
    """E and S both at Out.i: E (read by S.rf inside S) is emitted first, in stage order."""
    s, inputs, outputs, _ = softmax_one_pass(4, 16, 4, "row")
    text = _text(s, inputs + outputs)
    e, sv = _lines(text, "allocate E", "allocate S:")
    assert e < sv
    np.testing.assert_equal(len([x for x in text.splitlines() if "allocate S.rf" in x]), 1)


# property: random nested placements compute what the default schedule computes ------------------

NESTED_OPERATORS = {
    "softmax": lambda d: ops.softmax(d.draw(st.integers(1, 5)), d.draw(st.integers(1, 24))),
    "layer_norm": lambda d: ops.layer_norm(d.draw(st.integers(1, 4)), d.draw(st.integers(2, 20))),
    "gemm": lambda d: ops.gemm(*(d.draw(st.integers(1, 14)) for _ in range(3))),
    "conv2d": lambda d: ops.conv2d(1, d.draw(st.integers(1, 3)), d.draw(st.integers(3, 8)),
                                   d.draw(st.integers(3, 8)), d.draw(st.integers(1, 3)),
                                   stride=d.draw(st.integers(1, 2))),
    "chain": lambda d: ops.elementwise_chain(d.draw(st.integers(1, 9)), d.draw(st.integers(1, 9))),
    "stencil": lambda d: (lambda A, B, C, D, ref: ([A], [D], ref))(
        *stencil_chain(d.draw(st.integers(1, 20)))),
}


def _reshape_loops(d, s):
    """cache_write of a reduction output, rfactor of a split row reduction, random splits."""
    for x in list(s.stages):
        if x.is_compute and x.is_output and x.op.reduce_axis and d.draw(st.booleans()):
            s.cache_write(x.origin_op.output(), "local")
    for x in list(s.stages):
        if not x.is_compute or x.is_output or not x.op.reduce_axis or d.draw(st.booleans()):
            continue
        ko, ki = x.split(x.op.reduce_axis[0], factor=d.draw(st.integers(1, 8)))
        s.rfactor(x.origin_op.output(), d.draw(st.sampled_from([ko, ki])))
    for x in s.stages:
        for _ in range(d.draw(st.integers(0, 2)) if x.is_compute else 0):
            x.split(d.draw(st.sampled_from(x.leaf_iter_vars)), factor=d.draw(st.integers(1, 6)))


def _legal_targets(s, stage):
    """(reader T, deepest loop position of T) where *stage* may be computed: every other reader
    runs, through its chain of compute_at, inside that loop of T."""
    readers = s._consumers(stage)
    out = []
    for t in readers:
        deepest = len(t.leaf_iter_vars) - 1
        for r in readers:
            if r is t:
                continue
            chain = attach_chain(r)
            links = [i.attach_ivar for i, o in zip(chain, chain[1:]) if o is t]
            if not links:
                break
            deepest = min(deepest, [id(v) for v in t.leaf_iter_vars].index(id(links[0])))
        else:
            out.append((t, deepest))
    return out


def _place_nested(d, s):
    """Consumers first, each stage at the root or at a legal loop of a reader (which may itself
    be placed at a loop already): every chain of compute_at the rules allow can come out."""
    for x in reversed(s.stages):
        if not x.is_compute or x.is_output:
            continue
        targets = _legal_targets(s, x)
        if targets and d.draw(st.integers(0, 4)) > 0:
            t, deepest = d.draw(st.sampled_from(targets))
            x.compute_at(t, t.leaf_iter_vars[d.draw(st.integers(0, deepest))])


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data())
def test_random_nested_placements_match_default(data):
    name = data.draw(st.sampled_from(sorted(NESTED_OPERATORS)))
    inputs, outputs, _ = NESTED_OPERATORS[name](data)
    s = create_schedule(outputs)
    _reshape_loops(data, s)
    _place_nested(data, s)
    arrays = random_inputs(inputs, positive=True)
    got = run(s, inputs, outputs, arrays)               # every placement drawn is legal
    want = run(create_schedule(outputs), inputs, outputs, arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"steps: {s.steps}")
