"""te.partition: an operator cut into kernels computes what the whole operator computes, each
kernel holds at most one reduction, and stages are read as inputs where the cut says."""
import numpy as np
import pytest

import ops
from einloop import build, create_schedule, te
from einloop.te.dag import ComputeDAG
from einloop.te.partition import cut, materialized, partition


def _run_whole(outs, values):
    ins = list(ComputeDAG(outs).inputs)
    f = build(create_schedule(outs), ins + list(outs))
    res = [np.zeros(t.shape, t.dtype) for t in outs]
    f(*[values[t] for t in ins], *res)
    return res


def _run_parts(parts, outs, values):
    buffers = {id(t.op): v for t, v in values.items()}
    for part in parts:
        tensors = list(part.tensors)
        f = build(create_schedule(tensors[len(part.reads):]), tensors)
        written = [np.zeros(t.shape, t.dtype) for t in part.writes]
        f(*[buffers[id(t.op)] for t in part.reads], *written)
        buffers.update((id(t.op), w) for t, w in zip(part.writes, written))
    return [buffers[id(t.op)] for t in outs]


def _swiglu_backward(n=6, kk=5, m=7):
    x = te.placeholder((n, kk), "float64", "x")
    w1 = te.placeholder((kk, m), "float64", "w1")
    w3 = te.placeholder((kk, m), "float64", "w3")
    k = te.reduce_axis((0, kk), name="k")
    g = te.compute((n, m), lambda i, j: te.sum(x[i, k] * w1[k, j], axis=k), name="g")
    k3 = te.reduce_axis((0, kk), name="k3")
    u = te.compute((n, m), lambda i, j: te.sum(x[i, k3] * w3[k3, j], axis=k3), name="u")
    h = te.compute((n, m), lambda i, j: g[i, j] * te.sigmoid(g[i, j]) * u[i, j], name="h")
    head = te.placeholder((n, m), "float64", "head")
    return [x, w1, w3, head], list(te.gradient(h, [x, w1, w3], head)), (g, u)


def _matmul_bias_relu(n=4, kk=6, m=5):
    x = te.placeholder((n, kk), "float64", "x")
    w = te.placeholder((kk, m), "float64", "w")
    b = te.placeholder((m,), "float64", "b")
    k = te.reduce_axis((0, kk), name="k")
    mm = te.compute((n, m), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="mm")
    out = te.compute((n, m), lambda i, j: te.max(mm[i, j] + b[j], 0.0), name="out")
    return [x, w, b], [out]


def _values(inputs, seed=0):
    rng = np.random.default_rng(seed)
    return {t: rng.standard_normal(tuple(t.shape)) for t in inputs}


@pytest.mark.parametrize("make", [_swiglu_backward, _matmul_bias_relu])
def test_parts_compute_what_the_whole_operator_computes(make):
    inputs, outs = make()[:2]
    values = _values(inputs)
    for got, want in zip(_run_parts(partition(outs), outs, values), _run_whole(outs, values)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_each_kernel_of_a_gradient_holds_one_reduction_and_elementwise_stages_are_written():
    _, grads, _ = _swiglu_backward()
    parts = partition(grads)
    for part in parts:
        dag = ComputeDAG(list(part.tensors[len(part.reads):]))
        assert sum(dag.is_reduction(op) for op in dag.compute_ops) <= 1, dag
    written = {t.name for part in parts for t in part.writes}
    # the elementwise stages the transposed products read are written once, not inlined
    # into every multiply-add of the products
    assert {"g.grad.h", "u.grad.h"} <= written
    assert len(written) == len(parts)
    for t in materialized(grads):
        assert t.name in written


def test_a_reduction_with_one_elementwise_consumer_stays_in_its_kernel():
    _, outs = _matmul_bias_relu()
    parts = partition(outs)
    assert len(parts) == 1 and [t.name for t in parts[0].writes] == ["out"]
    assert [t.name for t in parts[0].reads] == ["x", "w", "b"]


def test_cut_reads_stages_as_inputs_and_keeps_the_rest():
    inputs, grads, (g, u) = _swiglu_backward()
    new, stands_for = cut(grads, [g, u])
    read = {id(op) for t in new for op in ComputeDAG([t]).ops}
    assert id(g.op) not in read and id(u.op) not in read
    assert sorted(t.name for t in stands_for.values()) == ["g", "u"]
    for x in inputs:                   # the caller's placeholders are the same objects
        assert id(x.op) in read
    values = _values(inputs)
    g_val, u_val = _run_whole([g, u], values)
    given = dict(values)
    for p, t in stands_for.items():
        given[p.output()] = {"g": g_val, "u": u_val}[t.name]
    for got, want in zip(_run_whole(new, given), _run_whole(grads, values)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_weight_gradient_is_one_kernel():
    """A convolution's weight gradient ends in the 3 of its window: one kernel still (no
    transposed buffer and copy); its schedule vectorizes a channel axis instead (see
    tests/autotune/auto/test_rule_vector_axis.py)."""
    (g, x), (wgrad,), _ = ops.conv2d_weight_gradient(dtype="float64")
    parts = partition([wgrad])
    assert len(parts) == 1 and parts[0].writes[0] is wgrad
    assert [t.name for t in parts[0].reads] == ["g", "x"]


def _padded_conv(kind="pad"):
    """A 3x3 convolution reading a padded copy of its input (a select), or, with kind="exp",
    an elementwise exponential of it (an expensive stage)."""
    x = te.placeholder((1, 4, 6, 6), "float64", "x")
    w = te.placeholder((8, 4, 3, 3), "float64", "w")
    if kind == "pad":
        src = te.compute((1, 4, 8, 8), lambda a, c, y, xx: te.if_then_else(
            te.all(y >= 1, y < 7, xx >= 1, xx < 7), x[a, c, y - 1, xx - 1], 0.0), name="pad")
    else:
        src = te.compute((1, 4, 8, 8), lambda a, c, y, xx: te.exp(x[a, c, y % 6, xx % 6]),
                         name="pad")
    rc = te.reduce_axis((0, 4), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    conv = te.compute((1, 8, 6, 6), lambda a, f, y, xx: te.sum(
        src[a, rc, y + ry, xx + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    return [x, w], src, conv


def test_a_cheap_stage_read_by_one_reduction_stays_in_that_reductions_kernel():
    """The padded copy a convolution reads is computed in the convolution's kernel (as the
    forward computes it), not written by a kernel of its own; an expensive stage is written
    once by its own kernel, not recomputed inside the reduction's."""
    inputs, pad, conv = _padded_conv("pad")
    assert [op.name for op in materialized([conv])] == ["conv"]
    parts = partition([conv])
    assert len(parts) == 1 and [t.name for t in parts[0].reads] == ["x", "w"]
    values = _values(inputs)
    got, = _run_parts(parts, [conv], values)
    want, = _run_whole([conv], values)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    _, expensive, conv_e = _padded_conv("exp")
    assert [op.name for op in materialized([conv_e])] == ["pad", "conv"]
    assert len(partition([conv_e])) == 2


def test_a_stage_read_by_two_reductions_is_written_unless_one_is_given():
    """With *given* stages read as inputs, a stage read by a given reduction and by one other
    reduction stays in the other's kernel (how the backward decides which forward stages the
    forward saves)."""
    inputs, pad, conv = _padded_conv("pad")
    x, w = inputs
    ry = te.reduce_axis((0, 6), name="ry2")
    other = te.compute((1, 4), lambda a, c: te.sum(pad[a, c, ry + 1, 1], axis=ry), name="rows")
    assert [op.name for op in materialized([conv, other])] == ["pad", "conv", "rows"]
    assert [op.name for op in materialized([conv, other], given=[conv])] == ["rows"]
