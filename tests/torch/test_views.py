"""Reshapes moved out of kernels (einloop/torch/views.py): an elementwise epilogue read through
a reshape of a product computes in the product's shape, so the auto-scheduler fuses the
product into it; a reshape that ends a kernel runs as a torch view of its output.  Every case
equal to eager at odd sizes; where the rewrite would change what broadcasts, it stays off."""
import operator

import torch
import torch.nn.functional as F

from einloop.autotune.space.sketch.analysis import DagAnalysis, Role
from einloop.torch import backend as be
from einloop.torch.index_checks import check_indices
from einloop.torch.views import VIEWS, ViewStep, sink_views

from test_backend import traced

torch.manual_seed(0)
aten = torch.ops.aten


def compiled(fn, *inputs):
    """``(compiled module, its one partition)``; nothing left to PyTorch."""
    forward = be.compile_graph(traced(fn, *inputs), inputs)
    gm = forward.__self__
    assert not [n for n in gm.graph.nodes if n.op == "call_function"
                and n.target not in (operator.getitem, check_indices)]
    (part,) = [m for m in gm.modules() if isinstance(m, be.PartitionModule)]
    return gm, part


def kernels(part):
    return [k for k in part.steps if isinstance(k, be.Kernel)]


def linear_relu_residual(x, w, b):
    return torch.relu(F.linear(x, w, b)) + x


def test_a_linear_layers_epilogue_after_its_reshape_is_fused_into_the_product():
    """3-d x: addmm on rows, viewed back, ReLU and the residual add: one kernel whose product
    the auto-scheduler computes inside the epilogue's tiles; the final reshape is a view."""
    x, w, b = torch.randn(7, 3, 37), torch.randn(37, 37), torch.randn(37)
    gm, part = compiled(linear_relu_residual, x, w, b)
    (kernel,) = kernels(part)
    steps = [type(k) for k in part.steps]             # the input's rows are torch views too
    assert steps[-2:] == [be.Kernel, ViewStep] and set(steps[:-2]) <= {ViewStep}
    an = DagAnalysis(kernel.tensors[len(kernel.reads):])
    (product,) = [f for f in an.stages() if f.role is Role.TILED]
    assert product.fused_into is not None
    assert tuple(kernel.tensors[-1].shape) == (21, 37)            # rows, viewed as (7, 3, 37)
    torch.testing.assert_close(gm(x, w, b), linear_relu_residual(x, w, b),
                               rtol=1e-4, atol=1e-4)


def test_operands_of_the_reshaped_shape_are_reshaped_with_the_product():
    def fn(x, w, r):
        return (x @ w).view(5, 3, 11) * r + 2.0
    x, w, r = torch.randn(15, 9), torch.randn(9, 11), torch.randn(5, 3, 11)
    gm = traced(fn, x, w, r)
    sink_views(gm.graph)
    gm.recompile()
    last = [n for n in gm.graph.nodes if n.op == "call_function"][-1]
    assert last.target in VIEWS and tuple(last.args[0].meta["val"].shape) == (15, 11)
    torch.testing.assert_close(gm(x, w, r), fn(x, w, r))
    got, _ = compiled(fn, x, w, r)
    torch.testing.assert_close(got(x, w, r), fn(x, w, r), rtol=1e-4, atol=1e-5)


def test_a_broadcast_across_merged_dimensions_stops_the_rewrite():
    """``r`` of shape (3, 1) broadcasts along the axes the view splits (15 -> 5, 3): computed
    in the product's shape it would not line up, so the elementwise node stays after the
    view."""
    def fn(x, w, r):
        return (x @ w).view(5, 3, 11) + r
    x, w, r = torch.randn(15, 9), torch.randn(9, 11), torch.randn(3, 1)
    gm = traced(fn, x, w, r)
    sink_views(gm.graph)
    last = [n for n in gm.graph.nodes if n.op == "call_function"][-1]
    assert last.target is aten.add.Tensor
    got, _ = compiled(fn, x, w, r)
    torch.testing.assert_close(got(x, w, r), fn(x, w, r), rtol=1e-4, atol=1e-5)


def test_reshapes_in_a_row_merge_and_one_back_to_the_same_shape_vanishes():
    def fn(x):
        return torch.relu(x.view(3, 2, 7).view(6, 7).view(42)).view(6, 7) * 3
    x = torch.randn(6, 7)
    gm = traced(fn, x)
    sink_views(gm.graph)
    gm.recompile()
    views = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in VIEWS]
    assert views == []
    torch.testing.assert_close(gm(x), fn(x))
    got, part = compiled(fn, x)
    assert len(kernels(part)) == 1
    torch.testing.assert_close(got(x), fn(x))


def test_a_reshape_read_by_another_kernel_and_returned_is_a_view_of_the_first_kernels_output():
    def fn(x, w):
        h = torch.relu(x @ w).view(4, 5, 8)
        return h.softmax(-1), h
    x, w = torch.randn(20, 13), torch.randn(13, 8)
    got, part = compiled(fn, x, w)
    assert any(isinstance(k, ViewStep) for k in part.steps)
    for g, want in zip(got(x, w), fn(x, w)):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5)
