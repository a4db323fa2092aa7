"""``s.pack``: the layout rewrite of a tensor the schedule reads (einloop/schedule/pack.py).

Every packed schedule is checked against NumPy; the lowered text shows that the readers' index
arithmetic folds when the reader's loop is split by the packing factor.
"""
import json
import os
import re
import sys

import numpy as np
import pytest

from einloop import ScheduleError, te, create_schedule, lower
from einloop.schedule import replay as R, steps as S
from einloop.schedule.steps import StepKind

import ops
from oracle import check


def _gemm_schedule(s, C, PB, mr, bn, ku, pack_at=False, unroll_rows=False):
    """examples/gemm.py's hand schedule on a declaration that reads B through ``s.pack``."""
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, mr, bn)
    s[C].reorder(jo, io, ii, ji)
    s[C].parallel(jo)
    s[CC].compute_at(s[C], io)
    s[C].vectorize(ji)
    mc, nc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=ku)
    s[CC].reorder(ko, ki, mc, nc)
    s[CC].unroll(ki)
    if unroll_rows:
        s[CC].unroll(mc)
    s[CC].vectorize(nc)
    x, y, z = s[PB].op.axis
    s[PB].vectorize(z)
    if pack_at:
        s[PB].compute_at(s[C], jo)
    else:
        s[PB].parallel(x)


def test_packed_copy_has_the_blocked_shape_and_readers_read_it():
    (A, B), (C,), _ = ops.gemm(M=8, N=70, K=5)
    s = create_schedule(C)
    PB = s.pack(B, 1, 32)
    assert PB.name == "B.pack" and PB.shape == (3, 5, 32) and PB.dtype == B.dtype
    assert [st.name for st in s.stages] == ["A", "B", "B.pack", "C"]
    assert [t.name for t in s[C].op.input_tensors] == ["A", "B.pack"]
    assert [iv.name for iv in s[PB].op.axis] == ["ax1.outer", "ax0", "ax1.inner"]
    assert s.steps == [S.Step(StepKind.PACK, "B", {"axis": 1, "factor": 32})]
    W = te.placeholder((20, 3, 3, 3), name="W")
    X = te.compute((20, 3, 3, 3), lambda k, c, r, q: W[k, c, r, q] * 2.0, name="X")
    s2 = create_schedule(X)
    assert s2.pack(W, 0, 16).shape == (2, 3, 3, 3, 16)


@pytest.mark.parametrize("M, N, K, mr, bn, ku", [
    (16, 64, 16, 4, 16, 4),         # everything divides
    (13, 50, 11, 3, 16, 4),         # ragged rows, panels and k
    (7, 9, 5, 6, 32, 8),            # tiles larger than the extents (factor clamped)
])
@pytest.mark.parametrize("pack_at", [False, True], ids=["pack_root", "pack_at_panel"])
def test_gemm_with_packed_b_under_tilings(M, N, K, mr, bn, ku, pack_at):
    inputs, outputs, ref = ops.gemm(M, N, K)
    A, B = inputs
    C, = outputs
    s = create_schedule(C)
    PB = s.pack(B, 1, bn)
    _gemm_schedule(s, C, PB, mr, bn, ku, pack_at)
    check(s, inputs, outputs, ref)


def test_reader_index_arithmetic_folds_for_a_loop_split_by_the_factor():
    (A, B), (C,), _ = ops.gemm(M=16, N=64, K=16)
    s = create_schedule(C)
    PB = s.pack(B, 1, 16)
    _gemm_schedule(s, C, PB, 4, 16, 4)
    text = str(lower(s, [A, B, C], expand_unroll=False))
    reads = re.findall(r"B\.pack\[[^\]]*\]", text)
    assert reads and all("//" not in r and "%" not in r for r in reads), text
    assert "B.pack[j.outer * 256 + k.outer * 64 + k.inner * 16 + j]" in text


def test_conv2d_with_packed_weights():
    inputs, outputs, ref = ops.conv2d(N=1, C=3, H=9, W=10, K=7, R=3, S=3, pad=1, stride=1)
    A, Wt = inputs
    Out, = outputs
    s = create_schedule(Out)
    WP = s.pack(Wt, 0, 4)                        # 7 output channels: a ragged last block
    assert WP.shape == (2, 3, 3, 3, 4)
    OC = s.cache_write(Out, "local")
    n, k, y, x = s[Out].op.axis
    ko, ki = s[Out].split(k, factor=4)
    xo, xi = s[Out].split(x, factor=8)
    s[Out].reorder(n, ko, y, xo, ki, xi)
    s[Out].vectorize(xi)
    s[Out].parallel(s[Out].fuse(n, ko, y))
    s[OC].compute_at(s[Out], xo)
    on, ok, oy, ox = s[OC].op.axis
    c, r, sx = s[OC].op.reduce_axis
    s[OC].reorder(on, oy, c, r, sx, ok, ox)
    s[OC].unroll(ok)
    s[OC].vectorize(ox)
    s[WP].vectorize(s[WP].op.axis[-1])
    s.stage_named("Pad").compute_inline()
    check(s, inputs, outputs, ref)


def test_packing_an_intermediate_stage():
    """T = 2B is packed; T may stay a root stage, be inlined into its copy, or computed there."""
    for placement in ("root", "inline", "at"):
        A = te.placeholder((6, 10), name="A")
        B = te.placeholder((10, 21), name="B")
        T = te.compute((10, 21), lambda k, j: B[k, j] * 2.0, name="T")
        kk = te.reduce_axis((0, 10), name="kk")
        C = te.compute((6, 21), lambda i, j: te.sum(A[i, kk] * T[kk, j], axis=kk), name="C")
        s = create_schedule(C)
        TP = s.pack(T, 1, 8)
        assert [iv.name for iv in s[TP].op.axis] == ["j.outer", "k", "j.inner"]
        if placement == "inline":
            s[T].compute_inline()
        elif placement == "at":
            s[T].compute_at(s[TP], s[TP].op.axis[0])
        s[C].split(s[C].op.axis[1], factor=8)
        check(s, [A, B], [C], lambda a, b: [a @ (2 * b)])


def test_pack_is_independent_of_the_readers_primitives():
    """Readers keep their loops, so packing before or after their primitives is the same."""
    irs = []
    for pack_first in (True, False):
        (A, B), (C,), _ = ops.gemm(M=8, N=24, K=6)
        s = create_schedule(C)
        if pack_first:
            s.pack(B, 1, 8)
        jo, ji = s[C].split(s[C].op.axis[1], factor=8)
        s[C].reorder(jo, s[C].op.reduce_axis[0], ji)
        s[C].vectorize(ji)
        if not pack_first:
            s.pack(B, 1, 8)
        irs.append(str(lower(s, [A, B, C])))
    assert irs[0] == irs[1]


def test_pack_with_several_readers_and_after_cache_stages():
    A = te.placeholder((12, 9), name="A")
    D = te.compute((12, 9), lambda i, j: A[i, j] + 1.0, name="D")
    E = te.compute((12, 9), lambda i, j: A[i, j] * D[i, j], name="E")
    s = create_schedule(E)
    s.cache_write(E, "local")
    AL = s.cache_read(A, "local", [D])
    AP = s.pack(A, 0, 5)                         # readers: A.local and E.local
    assert {st.name for st in s.stages if AP in st.op.input_tensors} == {"A.local", "E.local"}
    check(s, [A], [E], lambda a: [a * (a + 1)])
    assert AL.shape == (12, 9)


def test_pack_replays_from_json_and_prints_code_that_runs():
    def declare():
        (A, B), (C,), _ = ops.gemm(M=10, N=40, K=7)
        return A, B, C

    A, B, C = declare()
    s = create_schedule(C)
    PB = s.pack(B, 1, 16)
    _gemm_schedule(s, C, PB, 4, 16, 4)
    want = str(lower(s, [A, B, C]))
    payload = json.loads(json.dumps(S.steps_to_json(s.steps)))
    assert {"kind": "pack", "stage": "B", "args": {"axis": 1, "factor": 16}} in payload
    A2, B2, C2 = declare()
    assert str(lower(R.replay(S.steps_from_json(payload), [C2]), [A2, B2, C2])) == want
    code = R.steps_to_code(s)
    assert "B_pack = s.pack(B, 1, 16)" in code.splitlines()
    A3, B3, C3 = declare()
    namespace = {"C": C3, "create_schedule": create_schedule}
    exec(compile(code, "<pack code>", "exec"), namespace)
    assert str(lower(namespace["s"], [A3, B3, C3])) == want
    assert "s.pack(B, 1, 16)" in str(s)


def test_packed_gemm_equals_the_unpacked_one_bit_for_bit():
    inputs, outputs, ref = ops.gemm(M=9, N=33, K=12)
    A, B = inputs
    C, = outputs
    s = create_schedule(C)
    s.pack(B, 1, 8)
    got = check(s, inputs, outputs, ref)
    plain = check(create_schedule(C), inputs, outputs, ref)
    np.testing.assert_array_equal(got[0], plain[0])


def test_pack_reproduces_the_hand_packed_gemm_of_examples():
    """``s.pack`` + examples/gemm.py's schedule lowers to the IR of its hand-declared PB (up to
    names), so it runs as fast."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    import gemm
    M, N, K = 48, 128, 32
    s, args = gemm.schedule(M, N, K, mr=6, bn=64, ku=4)
    hand = str(lower(s, args))
    A, B, C = gemm.gemm(M, N, K)
    s = create_schedule(C)
    PB = s.pack(B, 1, 64)
    _gemm_schedule(s, C, PB, 6, 64, 4, unroll_rows=True)
    packed = str(lower(s, [A, B, C]))
    names = {"B.pack": "PB", "ax1.outer": "x", "ax0": "y", "ax1.inner": "z"}
    assert re.sub("|".join(map(re.escape, names)), lambda m: names[m.group(0)], packed) == hand


def test_a_pack_for_some_readers_leaves_the_others_on_the_original():
    ins, outs, ref = ops.swiglu()
    X = ins[0]
    s = create_schedule(outs)
    G = outs[0].op.input_tensors[0]
    U = next(t for t in outs[0].op.input_tensors if t.name == "U")
    XG = s.pack(X, 0, 8, readers=[G])
    XU = s.pack(X, 0, 4, readers=[s[U]])
    assert [t.name for t in s[G].op.input_tensors if t.name.startswith("X")] == [XG.name]
    assert [t.name for t in s[U].op.input_tensors if t.name.startswith("X")] == [XU.name]
    packs = [st for st in s.steps if st.kind is StepKind.PACK]
    assert [st.args["readers"] for st in packs] == [("G",), ("U",)]
    check(s, ins, outs, ref)
    again = R.replay(s.steps, outs)        # the readers replay by name
    check(again, ins, outs, ref)


def test_pack_readers_that_do_not_read_the_tensor_are_refused():
    ins, outs, _ = ops.swiglu()
    s = create_schedule(outs)
    with pytest.raises(ScheduleError, match="stage H does not read X; its readers are G, U"):
        s.pack(ins[0], 0, 8, readers=[outs[0]])
    with pytest.raises(ScheduleError, match="readers is empty"):
        s.pack(ins[0], 0, 8, readers=[])
