"""Reshapes of a kernel's inputs run as torch views (einloop/torch/views.py, leading_views): a
linear layer on 3-d activations reads its rows as they lie, with no reshape stage in its
kernel.  Equal to eager at odd sizes, with contiguous and non-contiguous inputs, under the
default schedule and hand schedules; a reshape of a node of its own kernel stays in it."""
import warnings

import torch
import torch.nn.functional as F

from einloop import create_schedule
from einloop.codegen.build import build
from einloop.te.dag import ComputeDAG
from einloop.torch import backend as be
from einloop.torch.tensor_call import TensorCall
from einloop.torch.views import VIEWS, ViewStep, leading_views

from test_backend import traced
from test_views import compiled

torch.manual_seed(0)


def linear_residual(x, w, b):
    return torch.relu(F.linear(x, w, b)) + x


def test_a_linear_layer_on_3d_activations_reads_its_rows_through_a_torch_view():
    x, w, b = torch.randn(7, 3, 37), torch.randn(37, 37), torch.randn(37)
    gm, part = compiled(linear_residual, x, w, b)
    (kernel,) = [k for k in part.steps if isinstance(k, be.Kernel)]
    leading = [st for st in part.steps[:part.steps.index(kernel)] if isinstance(st, ViewStep)]
    assert [st.shape for st in leading] and all(st.shape == (21, 37) for st in leading)
    stages = ComputeDAG(kernel.tensors[len(kernel.reads):]).compute_ops
    assert not [op for op in stages if op.name.startswith("reshape")]
    assert (21, 37) in [tuple(t.shape) for t in kernel.tensors[:len(kernel.reads)]]
    torch.testing.assert_close(gm(x, w, b), linear_residual(x, w, b), rtol=1e-4, atol=1e-4)


def test_a_non_contiguous_input_viewed_is_still_read_right():
    x, w, b = torch.randn(3, 7, 37), torch.randn(37, 37), torch.randn(37)
    xt = x.transpose(0, 1)                            # (7, 3, 37), not contiguous
    gm, _ = compiled(linear_residual, xt.contiguous(), w, b)
    torch.testing.assert_close(gm(xt, w, b), linear_residual(xt, w, b), rtol=1e-4, atol=1e-4)


def test_the_kernel_equals_eager_under_default_and_hand_schedules():
    x, w, b = torch.randn(5, 7, 101), torch.randn(37, 101), torch.randn(37)

    def fn(x, w, b):
        return F.linear(x, w, b) * 0.5
    _, part = compiled(fn, x, w, b)
    (kernel,) = [k for k in part.steps if isinstance(k, be.Kernel)]
    env = {n: t for n, t in zip(part.inputs, (x, w, b))}
    for st in part.steps[:part.steps.index(kernel)]:
        st.run(env)
    reads = [env[a] for a in kernel.reads]
    outs = kernel.tensors[len(kernel.reads):]
    (out,) = outs
    s = create_schedule(outs)
    (product,) = [op for op in ComputeDAG(outs).compute_ops if op.reduce_axis]
    for op in ComputeDAG(outs).compute_ops:
        if op is not out.op and op is not product:
            s[op].compute_inline()
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=4)
    jo, ji = s[out].split(j, factor=8)
    s[out].reorder(io, jo, ii, ji)
    s[out].vectorize(ji)
    s[out].parallel(io)
    s[product].compute_at(s[out], jo)
    want = fn(x, w, b).reshape(35, 37)
    for sched in (create_schedule(outs), s):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, = TensorCall(build(sched, kernel.tensors), kernel.tensors, 1)(reads)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_reshape_of_a_node_of_its_own_kernel_stays_in_it():
    def fn(x, w):
        return (torch.relu(x).reshape(21, 5) @ w) * 2
    x, w = torch.randn(7, 3, 5), torch.randn(5, 3)
    gm = traced(fn, x, w)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    relu = next(n for n in nodes if n.target is torch.ops.aten.relu.default)
    view = next(n for n in relu.users if n.target in VIEWS)
    assert leading_views([[relu, view]]) == [[relu, view]]
    assert leading_views([[view]]) == [[view]]                    # a lone reshape: as it is
    gm, _ = compiled(fn, x, w)
    torch.testing.assert_close(gm(x, w), fn(x, w), rtol=1e-4, atol=1e-4)


def test_a_reshape_of_an_input_is_peeled_ahead_of_its_group():
    x = torch.randn(7, 3, 5)
    gm = traced(lambda x: x.reshape(21, 5).sum(0), x)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    view = next(n for n in nodes if n.target in VIEWS)
    rest = [n for n in nodes if n is not view]
    assert leading_views([nodes]) == [[view], rest]
