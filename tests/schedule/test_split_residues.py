"""``s.split_residues``: a stage computed per residue class of data axes whose indices divide
them (a transposed convolution's ``(y + 1) // 2`` and ``(y + 1) % 2``).

Every schedule is checked against NumPy; the rewritten indices are checked to be affine in the
quotient axes, which is what makes them vectorize.
"""
import json

import numpy as np
import pytest

from einloop import create_schedule, lower, te
from einloop.errors import ScheduleError
from einloop.ir import expr as E
from einloop.ir.visit import reads_of
from einloop.schedule import replay as R, steps as S
from einloop.te.residues import (residue_splits, strided_reads, with_deinterleaved,
                                 with_residues)

import ops
from oracle import check, random_inputs, run


def split_all(s, out):
    splits = residue_splits(s[out].op)
    return s.split_residues(out, [iv for iv, _ in splits], [c for _, c in splits])


@pytest.mark.parametrize("H, W, R, stride, pad", [(5, 7, 4, 2, 1), (4, 3, 3, 3, 0),
                                                   (6, 5, 6, 3, 0), (3, 5, 4, 4, 0)])
def test_transposed_conv_per_residue_class_matches_numpy(H, W, R, stride, pad):
    ins, outs, ref = ops.conv2d_transpose(N=2, C=3, H=H, W=W, K=2, R=R, stride=stride, pad=pad)
    Out = outs[0]
    found = residue_splits(Out.op)
    Ho, Wo = Out.shape[2], Out.shape[3]
    assert [(iv.name, c) for iv, c in found] == \
        [(n, stride) for n, e in (("y", Ho), ("x", Wo)) if e % stride == 0 and e > stride]
    s = create_schedule(outs)
    res = split_all(s, Out)
    assert res.op.name == "Out.res"
    assert [iv.extent for iv in res.op.axis[:len(found)]] == [stride] * len(found)
    check(s, ins, outs, ref)


def test_indices_are_affine_in_the_quotients():
    ins, outs, _ = ops.conv2d_transpose(H=6, W=8)
    s = create_schedule(outs)
    res = split_all(s, outs[0])
    quot = {id(iv.var) for iv in res.op.axis if iv.name.endswith(".quot")}
    assert len(quot) == 2
    for read in reads_of(res.op.body):
        for ix in read.indices:
            for node in _walk_div_mod(ix):
                assert not any(id(v) in quot for v in _vars(node)), \
                    f"{ix} divides a quotient axis"


def _walk_div_mod(e):
    from einloop.ir.visit import walk
    return [x for x in walk(e) if isinstance(x, E.Binary) and x.op in (E.BinOp.FLOORDIV,
                                                                         E.BinOp.MOD)]


def _vars(e):
    from einloop.ir.visit import walk
    return [x for x in walk(e) if isinstance(x, E.Var)]


def test_a_consumer_reads_the_copy_and_the_quotient_loop_vectorizes():
    ins, outs, ref = ops.conv2d_transpose(H=6, W=8, K=3, bias_relu=True)
    s = create_schedule(outs)
    conv = outs[0].op.input_tensors[0]
    res = split_all(s, conv)
    x_quot = s[res].op.axis[-1]
    assert x_quot.name == "x.quot"
    s[res].reorder(*[iv for iv in s[res].leaf_iter_vars if iv is not x_quot], x_quot)
    s[res].vectorize(x_quot)
    text = str(lower(s, ins + outs))
    assert "vectorized for x.quot in range(8):" in text
    check(s, ins, outs, ref)


def test_an_axis_whose_extent_the_period_does_not_divide_is_not_split():
    _, outs, _ = ops.conv2d_transpose(H=6, W=5, R=6, stride=3, pad=2)   # 17 x 14 outputs
    assert residue_splits(outs[0].op) == ()


def test_strided_conv_and_elementwise_stages_have_no_residue_split():
    _, outs, _ = ops.conv2d(stride=2)                   # y * 2 + r: no division
    assert residue_splits(outs[0].op) == ()
    X = te.placeholder((8, 6), name="X")
    Y = te.compute((8, 6), lambda i, j: X[i // 2, j], name="Y")     # no reduction
    assert residue_splits(Y.op) == ()


def test_replay_from_json_and_printed_code_rebuild_the_schedule():
    ins, outs, ref = ops.conv2d_transpose()
    s = create_schedule(outs)
    res = split_all(s, outs[0])
    s[res].parallel(s[res].op.axis[0])
    payload = json.loads(json.dumps(S.steps_to_json(s.steps)))
    assert payload[0] == {"kind": "split_residues", "stage": "Out",
                          "args": {"axes": ["y", "x"], "factors": [2, 2]}}
    fresh_ins, fresh_outs, _ = ops.conv2d_transpose()
    replayed = R.replay(payload, fresh_outs)
    assert replayed.steps == s.steps
    assert str(lower(replayed, fresh_ins + fresh_outs)) == str(lower(s, ins + outs))
    code = R.steps_to_code(s)
    assert "s.split_residues(Out, [y, x], [2, 2])" in code.replace("Out_res = ", "")
    arrays = random_inputs(ins)
    np.testing.assert_array_equal(run(replayed, fresh_ins, fresh_outs, arrays)[0],
                                  run(s, ins, outs, arrays)[0])


def test_the_dag_rewrite_equals_the_primitive():
    ins, outs, _ = ops.conv2d_transpose(bias_relu=True)
    conv = outs[0].op.input_tensors[0]
    splits = residue_splits(conv.op)
    rewritten = with_residues(outs, conv.op, splits)
    s = create_schedule(outs)
    split_all(s, conv)
    arrays = random_inputs(ins)
    np.testing.assert_array_equal(run(create_schedule(rewritten), ins, rewritten, arrays)[0],
                                  run(s, ins, outs, arrays)[0])
    assert [st.name for st in create_schedule(rewritten).stages] == [st.name for st in s.stages]


def test_bad_uses_are_schedule_errors():
    ins, outs, _ = ops.conv2d_transpose(H=5, W=7)
    Out = outs[0]
    s = create_schedule(outs)
    y, x = Out.op.axis[2], Out.op.axis[3]
    c = Out.op.reduce_axis[0]
    with pytest.raises(ScheduleError, match="placeholder"):
        s.split_residues(ins[0], [y], [2])
    with pytest.raises(ScheduleError, match="not a data axis"):
        s.split_residues(Out, [c], [2])
    with pytest.raises(ScheduleError, match="integer >= 2"):
        s.split_residues(Out, [y], [1])
    with pytest.raises(ScheduleError, match="multiple of its factor"):
        s.split_residues(Out, [y], [3])                 # 10 rows
    with pytest.raises(ScheduleError, match="one factor per axis"):
        s.split_residues(Out, [y, x], [2])
    with pytest.raises(ScheduleError, match="given twice"):
        s.split_residues(Out, [y, y], [2, 2])
    s[Out].split(y, factor=2)
    with pytest.raises(ScheduleError, match="before the stage's other primitives"):
        s.split_residues(Out, [x], [2])
    with pytest.raises(ScheduleError, match="one factor per axis"):
        S.Step.from_json({"kind": "split_residues", "stage": "Out",
                          "args": {"axes": ["y", "x"], "factors": [2]}})


# the read side: s.deinterleave ---------------------------------------------------------------

@pytest.mark.parametrize("W, stride", [(13, 2), (12, 2), (14, 3), (11, 3)])
def test_deinterleaved_strided_conv_matches_numpy(W, stride):
    ins, outs, ref = ops.conv2d(N=2, C=3, H=9, W=W, K=4, stride=stride)
    Out = outs[0]
    (tensor, found), = strided_reads(Out.op)
    assert (tensor.op.name, found) == ("Pad", stride)
    s = create_schedule(outs)
    D = s.deinterleave(tensor, stride, [Out])
    assert D.shape[-2:] == (stride, -(-tensor.shape[-1] // stride))
    x = s[Out].op.axis[-1]
    s[Out].reorder(*[iv for iv in s[Out].leaf_iter_vars if iv is not x], x)
    s[Out].vectorize(x)
    text = str(lower(s, ins + outs))
    read = next(line for line in text.splitlines() if "Pad.deint[" in line and "Out[" in line)
    index = read.split("Pad.deint[")[1].split("]")[0]
    terms = [t.strip() for t in index.split("+")]
    assert "x" in terms and not any("x" in t for t in terms if t != "x"), index  # stride 1
    check(s, ins, outs, ref)


def test_deinterleave_replays_and_prints_and_the_dag_rewrite_agrees():
    ins, outs, ref = ops.conv2d(stride=2)
    Out = outs[0]
    s = create_schedule(outs)
    s.deinterleave(Out.op.input_tensors[0], 2, [Out])
    payload = json.loads(json.dumps(S.steps_to_json(s.steps)))
    assert payload == [{"kind": "deinterleave", "stage": "Pad",
                        "args": {"stride": 2, "readers": ["Out"]}}]
    fresh_ins, fresh_outs, _ = ops.conv2d(stride=2)
    assert str(lower(R.replay(payload, fresh_outs), fresh_ins + fresh_outs)) \
        == str(lower(s, ins + outs))
    assert "s.deinterleave(Pad, 2, [Out])" in R.steps_to_code(s)
    (tensor, stride), = strided_reads(Out.op)
    rewritten = with_deinterleaved(outs, Out.op, tensor, stride)
    arrays = random_inputs(ins)
    np.testing.assert_array_equal(run(create_schedule(rewritten), ins, rewritten, arrays)[0],
                                  run(s, ins, outs, arrays)[0])


def test_deinterleave_bad_uses_are_schedule_errors():
    ins, outs, _ = ops.conv2d(stride=2)
    Out = outs[0]
    pad = Out.op.input_tensors[0]
    s = create_schedule(outs)
    with pytest.raises(ScheduleError, match="integer >= 2"):
        s.deinterleave(pad, 1, [Out])
    with pytest.raises(ScheduleError, match="does not read"):
        s.deinterleave(ins[1], 2, [pad])
    s[Out].split(s[Out].op.axis[-1], factor=2)
    with pytest.raises(ScheduleError, match="before the other primitives"):
        s.deinterleave(pad, 2, [Out])


def test_only_a_reduction_reading_with_a_stride_along_its_last_axis_qualifies():
    _, outs, _ = ops.conv2d(stride=1)
    assert strided_reads(outs[0].op) == ()
    X = te.placeholder((20, 20), name="X")
    k = te.reduce_axis((0, 6), name="k")
    T = te.compute((10,), lambda j: te.sum(X[k, 2 * j], axis=k), name="T")
    assert [(t.op.name, c) for t, c in strided_reads(T.op)] == [("X", 2)]
    mixed = te.compute((10,), lambda j: te.sum(X[k, 2 * j] + X[j, k], axis=k), name="M")
    assert strided_reads(mixed.op) == ()           # X is also read another way
