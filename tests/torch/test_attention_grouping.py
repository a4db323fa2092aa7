"""The backend's attention rule (einloop/torch/grouping.py, rule 3): a softmax along the last
dimension between two matrix products is one kernel with them, equal to eager at odd sizes,
with a scale, an additive mask or a causal mask; where the scores or the weights are read by
anything else (an output, another node), or the softmax runs along another dimension, the
rule does not fire and the graph is still computed right.  The merged kernel is also checked
under random schedules of its auto-scheduling space, not only its default one."""
import operator
import random
import warnings

import pytest
import torch

from einloop.autotune.space.sketch import generate_space
from einloop.codegen.build import build
from einloop.schedule.replay import replay
from einloop.torch import backend as be
from einloop.torch.grouping import PRODUCTS, ROW_NORMALISATIONS, group_nodes
from einloop.torch.index_checks import check_indices
from einloop.torch.tensor_call import TensorCall

from test_backend import traced

torch.manual_seed(0)


def compiled_parts(fn, *inputs):
    """``(the compiled graph module, its einloop partitions)`` of *fn*; nothing may be left
    to PyTorch."""
    gm = traced(fn, *inputs)
    forward = be.compile_graph(gm, inputs)
    compiled = getattr(forward, "__self__", gm)
    left = [str(n.target) for n in compiled.graph.nodes
            if n.op == "call_function" and n.target not in (operator.getitem, check_indices)]
    assert left == []
    return compiled, [m for m in compiled.modules() if isinstance(m, be.PartitionModule)]


def kernels_of(gm) -> list:
    """The groups of the nodes of *gm*'s graph that einloop supports (the rest, as the
    mask PyTorch makes for causal attention, runs in PyTorch)."""
    support = be.EinloopSupport()
    return group_nodes([n for n in gm.graph.nodes if support.is_node_supported(None, n)])


def kernels_built(part) -> list:
    """The einloop kernels a partition runs (not the reshapes it runs as torch views)."""
    return [k for k in part.steps if isinstance(k, be.Kernel)]


def softmax_groups(gm):
    """For each softmax node of *gm*'s graph, the targets of the nodes of its group."""
    groups = kernels_of(gm)
    return [[m.target for m in g] for g in groups
            if any(m.target in ROW_NORMALISATIONS for m in g)]


def products_in(targets) -> int:
    return sum(t in PRODUCTS for t in targets)


def attend(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, -1) @ v


def attend_masked(q, k, v, mask):
    return torch.softmax(q @ k.transpose(-2, -1) * 0.3 + mask, -1) @ v


def qkv(*shape):
    return tuple(torch.randn(*shape) for _ in range(3))


@pytest.mark.parametrize("shape", [(2, 3, 37, 13), (1, 2, 101, 8), (5, 17, 9)])
def test_softmax_between_two_products_is_one_kernel_equal_to_eager(shape):
    q, k, v = qkv(*shape)
    gm = traced(attend, q, k, v)
    (group,) = softmax_groups(gm)
    assert products_in(group) == 2
    compiled, parts = compiled_parts(attend, q, k, v)
    assert len(parts) == 1 and len(kernels_built(parts[0])) == 1
    torch.testing.assert_close(compiled(q, k, v), attend(q, k, v), rtol=1e-4, atol=1e-5)


def test_an_additive_mask_joins_the_attention_kernel():
    q, k, v = qkv(2, 2, 19, 7)
    mask = torch.randn(19, 19)
    mask[3:, :5] = float("-inf")
    compiled, parts = compiled_parts(attend_masked, q, k, v, mask)
    assert len(kernels_built(parts[0])) == 1
    torch.testing.assert_close(compiled(q, k, v, mask), attend_masked(q, k, v, mask),
                               rtol=1e-4, atol=1e-5)


def test_causal_scaled_dot_product_attention_is_one_kernel_equal_to_eager():
    """PyTorch's causal attention through torch.compile: the mask is made in PyTorch or in a
    kernel of its own; the products and the softmax are one kernel."""
    q, k, v = qkv(1, 4, 23, 8)

    def fn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    gm = traced(fn, q, k, v)
    (group,) = softmax_groups(gm)
    assert products_in(group) == 2
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", be.BackendWarning)
        got = torch.compile(fn, backend="einloop")(q, k, v)
    torch.testing.assert_close(got, fn(q, k, v), rtol=1e-4, atol=1e-5)


NOT_MERGED = {
    "the weights are an output": lambda q, k, v: _weights_too(q, k, v),
    "the scores are read by a sum": lambda q, k, v: _scores_summed(q, k, v),
    "the softmax runs along the rows' other dimension": lambda q, k, v:
        torch.softmax(q @ k.transpose(-2, -1), -2) @ v,
    "the weights are read by two products": lambda q, k, v: _two_readers(q, k, v),
    "the weights are the graph's output": lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1),
                                                                        -1),
}


def _weights_too(q, k, v):
    p = torch.softmax(q @ k.transpose(-2, -1), -1)
    return p @ v, p


def _scores_summed(q, k, v):
    s = q @ k.transpose(-2, -1)
    return torch.softmax(s, -1) @ v + s.sum(-1, keepdim=True)


def _two_readers(q, k, v):
    p = torch.softmax(q @ k.transpose(-2, -1), -1)
    return p @ v + p @ (v * 2)


@pytest.mark.parametrize("name", list(NOT_MERGED))
def test_the_rule_does_not_fire_where_scores_or_weights_are_read_elsewhere(name):
    fn = NOT_MERGED[name]
    q, k, v = qkv(2, 11, 11)
    gm = traced(fn, q, k, v)
    for group in softmax_groups(gm):
        assert products_in(group) <= 1, group
    compiled, _ = compiled_parts(fn, q, k, v)
    for got, want in zip(torch.utils._pytree.tree_leaves(compiled(q, k, v)),
                         torch.utils._pytree.tree_leaves(fn(q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_random_schedules_of_the_attention_kernel_equal_eager():
    """The merged kernel's te DAG under a few random configs of its auto-scheduling space
    (tiles, compute locations, inlining, rfactor): every one computes what eager does."""
    q, k, v = qkv(1, 2, 21, 8)
    gm = traced(attend, q, k, v)
    (group,) = [g for g in kernels_of(gm) if any(m.target in ROW_NORMALISATIONS for m in g)]
    sinks = [n for n in group if any(u.op == "output" for u in n.users)]
    reads, tensors, _ = be.declare_kernel(group, sinks)
    given = dict(zip(["q_1", "k_1", "v_1"], (q, k, v)))
    assert sorted(a.name for a in reads) == sorted(given)
    outs = tensors[len(reads):]
    sp = generate_space(outs)
    want = attend(q, k, v)
    rng = random.Random(1)
    for _ in range(3):
        index = rng.randrange(sp.config_space.size)
        kernel = build(replay(sp.steps(index), outs), tensors)
        (got,) = TensorCall(kernel, tensors, 1)([given[a.name] for a in reads])
        torch.testing.assert_close(got.reshape(want.shape), want, rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"config {index}: {m}")


def test_the_encoder_layers_attention_is_one_kernel_and_the_layer_equals_eager():
    """nn.TransformerEncoderLayer (small, sequence first, as the issue-24 benchmark runs it):
    its attention is one kernel of the compiled model, whose output equals eager."""
    model = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=24).eval()
    x = torch.randn(7, 3, 16)
    seen = []
    real = be.group_nodes

    def spy(nodes):
        groups = real(nodes)
        seen.extend(products_in([m.target for m in g]) for g in groups
                    if any(m.target in ROW_NORMALISATIONS for m in g))
        return groups
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="einloop")
    with torch.no_grad(), warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(be, "group_nodes", spy)
        warnings.simplefilter("error", be.BackendWarning)
        got = compiled(x)
        want = model(x)
    assert seen == [2]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
