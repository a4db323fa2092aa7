"""A product of a transposed matrix (einloop/torch/aten.py, ``_product``): ATen writes a linear
layer as ``addmm(bias, x, permute(w, [1, 0]))``; the lowering reads ``w`` itself (``x @ w.T``,
as ``nn.dense``), so no kernel copies the weight transposed.  Checked: which operands the rule
takes (a transpose) and leaves (anything else), and that the kernels equal eager at odd sizes
under their default schedules, hand schedules (split, reorder, vectorize, parallel), random
configs of their auto-scheduling space, and through ``torch.compile``."""
import random
import warnings

import numpy as np
import pytest
import torch

from einloop import create_schedule, nn, te
from einloop.autotune.space.sketch import generate_space
from einloop.codegen.build import build
from einloop.schedule.replay import replay
from einloop.te.dag import ComputeDAG
from einloop.te.tensor import PlaceholderOp
from einloop.torch import backend as be
from einloop.torch.aten import transposed_source
from einloop.torch.tensor_call import TensorCall

from test_backend import lowered, traced

torch.manual_seed(0)


def test_a_transpose_is_recognised_and_other_layouts_are_not():
    w = te.placeholder((5, 7), "float32", name="w")
    assert transposed_source(nn.permute(w, (1, 0))) is w
    assert transposed_source(nn.transpose(w, 0, 1)) is w
    assert transposed_source(nn.permute(w, (0, 1))) is None            # the identity
    assert transposed_source(nn.reshape(w, (7, 5))) is None            # same size, not a transpose
    assert transposed_source(nn.relu(nn.permute(w, (1, 0)))) is None  # computes: not a read
    assert transposed_source(w) is None
    cube = te.placeholder((2, 5, 7), "float32", name="cube")
    assert transposed_source(nn.permute(cube, (0, 2, 1))) is None      # not a matrix


def _reads_of_product(tensors):
    """The tensors the kernel's product stage reads (by name)."""
    dag = ComputeDAG(tensors[-1:])
    (product,) = [op for op in dag.compute_ops if op.reduce_axis]
    return {r.tensor.op.name: isinstance(r.tensor.op, PlaceholderOp) for r in dag.reads(product)}


def _kernel_of(fn, *inputs):
    """``(reads, te tensors)`` of the one kernel holding *fn*'s product."""
    from einloop.torch.grouping import group_nodes
    gm = traced(fn, *inputs)
    support = be.EinloopSupport()
    (group,) = [g for g in group_nodes([n for n in gm.graph.nodes
                                        if support.is_node_supported(None, n)])
                if any(n.target in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default)
                       for n in g)]
    sinks = [n for n in group if any(u.op == "output" or u not in group for u in n.users)]
    reads, tensors, _ = be.declare_kernel(group, sinks)
    return reads, tensors


def linear(x, w, b):
    return torch.nn.functional.linear(x, w, b)


def test_a_linear_layers_product_reads_the_weight_in_its_own_layout():
    x, w, b = torch.randn(37, 13), torch.randn(101, 13), torch.randn(101)
    reads, tensors = _kernel_of(linear, x, w, b)
    names = {a.name: t.op.name for a, t in zip(reads, tensors)}
    read = _reads_of_product(tensors)
    assert read.get(names["w_1"]) is True            # the weight placeholder, no transposed copy
    assert not any(op.name.startswith("permute") for op in ComputeDAG(tensors[-1:]).compute_ops)


@pytest.mark.parametrize("shape", [(37, 13, 101), (1, 64, 16), (101, 9, 37)])
def test_linear_kernels_equal_eager_under_default_and_hand_schedules(shape):
    m, k, n = shape
    x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    reads, tensors = _kernel_of(linear, x, w, b)
    given = {"x_1": x, "w_1": w, "b_1": b}
    want = linear(x, w, b)
    (out,) = tensors[len(reads):]
    s = create_schedule([out])
    for op in ComputeDAG([out]).compute_ops:
        if op is not out.op and not op.reduce_axis:
            s[op].compute_inline()
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=5)
    jo, ji = s[out].split(j, factor=8)
    s[out].reorder(io, jo, ii, ji)
    s[out].vectorize(ji)
    s[out].parallel(io)
    (product,) = [op for op in ComputeDAG([out]).compute_ops if op.reduce_axis]
    s[product].compute_at(s[out], jo)
    for sched in (create_schedule([out]), s):
        kernel = build(sched, tensors)
        (got,) = TensorCall(kernel, tensors, 1)([given[a.name] for a in reads])
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_random_schedules_of_a_linear_kernel_equal_eager():
    x, w, b = torch.randn(37, 24), torch.randn(19, 24), torch.randn(19)
    reads, tensors = _kernel_of(linear, x, w, b)
    given = {"x_1": x, "w_1": w, "b_1": b}
    outs = tensors[len(reads):]
    sp = generate_space(outs)
    want = linear(x, w, b)
    rng = random.Random(3)
    for _ in range(4):
        index = rng.randrange(sp.config_space.size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernel = build(replay(sp.steps(index), outs), tensors)
        (got,) = TensorCall(kernel, tensors, 1)([given[a.name] for a in reads])
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4,
                                   msg=lambda msg: f"config {index}: {msg}")


def plain_mm(x, w):
    return x @ w                                     # no transpose: the rule does not apply


def computed_transpose(x, w):
    return x @ (w * 2 + 1).t()                       # a transposed computed matrix


def three_d(x, w):
    return x @ w.transpose(-2, -1)                   # a batched product (bmm): left as it is


@pytest.mark.parametrize("fn, shapes", [
    (linear, [(37, 13), (101, 13), (101,)]),
    (plain_mm, [(37, 13), (13, 101)]),
    (computed_transpose, [(21, 9), (37, 9)]),
    (three_d, [(3, 21, 9), (3, 37, 9)]),
])
def test_products_with_and_without_a_transpose_compile_equal_to_eager(fn, shapes):
    inputs = [torch.randn(*s) for s in shapes]
    compiled, left = lowered(fn, *inputs)
    assert left == []
    torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-4, atol=1e-4)


def test_a_linear_stack_through_torch_compile_equals_eager():
    model = torch.nn.Sequential(torch.nn.Linear(13, 37), torch.nn.ReLU(),
                                torch.nn.Linear(37, 5, bias=False)).eval()
    x = torch.randn(101, 13)
    torch._dynamo.reset()
    fast = torch.compile(model, backend="einloop")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)


def test_the_weight_read_in_place_matches_numpy_at_batch_1():
    """A GEMV (one row), where the product's schedules differ most (skinny, split-k)."""
    x, w, b = torch.randn(1, 37), torch.randn(101, 37), torch.randn(101)
    reads, tensors = _kernel_of(linear, x, w, b)
    given = {"x_1": x, "w_1": w, "b_1": b}
    kernel = build(create_schedule(tensors[len(reads):]), tensors)
    (got,) = TensorCall(kernel, tensors, 1)([given[a.name] for a in reads])
    np.testing.assert_allclose(got.numpy(), x.numpy() @ w.numpy().T + b.numpy(), rtol=1e-4,
                               atol=1e-4)
